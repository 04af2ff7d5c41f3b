"""Command line: ``tripletml {demo,reproduce,fit,evaluate,datasets,fetch,index,search}``.

Exit status: 0 on success; 2 for a usage or input error (bad arguments, an
unknown learner or parameter, a missing or malformed file or data set); 1 for
a runtime failure (training diverged, a download failed, out of memory).
Every error is one line on stderr, ``tripletml: error: <message>``, never a
traceback.  When the reader of stdout goes away (``tripletml search ... |
head``) the command stops quietly with status 141, as a process killed by
SIGPIPE.  No command writes over a file it did not write: an output path
that exists must be an output of the same kind (a model, an index, search
results), replaced only with ``--force`` (:mod:`tripletml.cli.output`).  Notes that qualify a result (``tripletml evaluate`` scoring on the
data the model was fitted on) are lines ``tripletml: note: <message>`` on
stderr, so the results on stdout stay machine-readable.

Every command takes ``-v`` / ``--verbose`` (repeatable): progress bars even
when stderr is not a terminal, and more detail (``fit``: the data, the
stopping reason and the fit time; ``datasets``: the files of every set).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tripletml import datasets, reproduce
from tripletml._version import __version__
from tripletml.cli.cluster import add_scheduler_argument, scheduler_context
from tripletml.cli.data import load_data as _load_data
from tripletml.cli.data import positive_int
from tripletml.cli.output import check_output
from tripletml.cli.search import add_subcommands
from tripletml.core.preprocessing import PREPROCESSING_MODES
from tripletml.distributed.sharded import ShardedCollection, load_npz_shard, read_npz_shards
from tripletml.persistence import load_model
from tripletml.registry import FEATURE_KINDS, entries, get_entry

# Lazy imports, kept for a fast `tripletml --help`: the demo, AutoSimilarity
# and the metrics load the Numba kernels (tripletml.cli.demo, tripletml.auto,
# tripletml.metrics are imported by the commands that use them).

__all__ = ["main", "build_parser", "fingerprint"]


#: ``tripletml fit auto``: race the learners with :class:`tripletml.AutoSimilarity`
_AUTO = "auto"


def _learner_name(value: str) -> str:
    """argparse type of ``fit LEARNER``: a registry class name, any case, or
    ``auto`` (:class:`tripletml.AutoSimilarity`)."""
    if value.lower() in (_AUTO, "autosimilarity"):
        return _AUTO
    try:
        return get_entry(value, case_sensitive=False, kind=FEATURE_KINDS).name
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown learner {value!r}; choose from auto, "
            f"{', '.join(e.name for e in entries(FEATURE_KINDS))} (any case)") from None


def fingerprint(X) -> str:
    """SHA-256 (first 16 hex digits) of a data matrix's shape and values.

    Dense and sparse copies of the same matrix (float64 values, explicit
    zeros dropped) have the same fingerprint, so ``tripletml evaluate`` can
    tell whether it scores on the rows a model was fitted on, whatever the
    labels are called (a LIBSVM file and its registered data set agree).
    """
    import numpy as np
    import scipy.sparse as sp

    A = sp.csr_matrix(X, dtype=np.float64, copy=True)
    A.eliminate_zeros()
    A.sort_indices()
    h = hashlib.sha256()
    h.update(np.asarray(A.shape, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(A.indptr, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(A.indices, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(A.data, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


def _split(X, y, test_size: float, seed: int | None):
    """The held-out split of ``fit``/``evaluate --test-size``: stratified by
    class when every class has two members (single-label data), seeded."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    yy = np.asarray(y)
    stratify = None
    if yy.ndim == 1:
        _, counts = np.unique(yy, return_counts=True)
        n_test = int(np.ceil(test_size * yy.shape[0]))
        if counts.min() >= 2 and counts.size <= min(n_test, yy.shape[0] - n_test):
            stratify = yy
    return train_test_split(X, y, test_size=test_size, random_state=seed, stratify=stratify)


def _test_size(value: str) -> float:
    """argparse type of ``--test-size``: a fraction in (0, 1)."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--test-size expects a fraction such as 0.3, got "
                                         f"{value!r}") from None
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"--test-size must lie strictly between 0 and 1, "
                                         f"got {v}")
    return v


def _note(msg: str) -> None:
    print(f"tripletml: note: {msg}", file=sys.stderr)


def _parse_params(pairs):
    params = {}
    for item in pairs or []:
        if "=" not in item:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            # "inf" / "-inf" (e.g. ITML's gamma=inf): a float, not the string
            params[k] = float(v) if v.strip().lower() in ("inf", "+inf", "-inf") else v
    return params


def _cmd_demo(args):
    from tripletml.cli.demo import DEMO_LEARNERS, run_demo   # lazy: Numba
    learners = None
    if args.verbose:
        def verbose_factory(factory):
            def make(seed):
                m = factory(seed)
                if "verbose" in m.get_params():
                    m.set_params(verbose=1 + args.verbose)
                return m
            return make
        learners = [(name, verbose_factory(f)) for name, f in DEMO_LEARNERS]
    run_demo(random_state=args.seed, learners=learners)


def _cmd_reproduce(args):
    repros = reproduce.available()
    if args.name is None or args.name == "list":
        for r in repros.values():
            print(f"{r.name:24s} {r.description}")
        return
    only = args.only.split(",") if args.only else None
    out = Path(args.out) if args.out else reproduce.default_out_dir(args.name, args.quick)
    with scheduler_context(args):
        reproduce.run(args.name, out, quick=args.quick, seeds=args.seeds,
                      data_home=args.data_home, verbose=1 + args.verbose, only=only)
    print(f"outputs written to {out}")


def _cmd_fit(args):
    params = _parse_params(args.param)
    if args.learner == _AUTO:
        from tripletml.auto import AutoSimilarity        # lazy: Numba
        name, kind, model = "AutoSimilarity", "triplet", AutoSimilarity()
        if args.time_budget is not None:
            params["time_budget"] = args.time_budget
        if args.n_jobs is not None:
            params["n_jobs"] = args.n_jobs
    else:
        entry = get_entry(args.learner, case_sensitive=False)
        name, kind, model = entry.name, entry.kind, entry.cls()
        for opt, flag in (("time_budget", "--time-budget"), ("n_jobs", "--n-jobs")):
            if getattr(args, opt) is not None:
                raise ValueError(f"{flag} applies to 'tripletml fit auto' only, not to "
                                 f"{name}.")
    if getattr(args, "preprocessing", None) is not None:
        params["preprocessing"] = None if args.preprocessing == "none" else args.preprocessing
    unknown = sorted(set(params) - set(model.get_params()))
    if unknown:
        raise ValueError(f"{name} has no parameter(s) {', '.join(unknown)}; its "
                         f"parameters: {', '.join(model.get_params())}")
    # before any work: never write over a file that is not a model, nor over
    # a model without --force
    check_output(args.output, "model", args.force)
    if Path(args.data).is_dir():
        return _fit_shards(args, name, kind, model, params)
    X, y = _load_data(args.data, args.data_home, args.subset, zero_based=args.zero_based,
                      multilabel=kind == "multilabel")
    record: dict[str, Any] = {"data": args.data, "subset": args.subset,
                              "source_fingerprint": fingerprint(X)}
    if args.test_size is not None:
        X, X_test, y, y_test = _split(X, y, args.test_size, args.seed)
        record.update(test_size=args.test_size, seed=args.seed,
                      heldout_fingerprint=fingerprint(X_test))
    record.update(n_samples=int(X.shape[0]), fingerprint=fingerprint(X))
    if args.seed is not None and "random_state" in model.get_params():
        params.setdefault("random_state", args.seed)
    if "verbose" in model.get_params():
        params.setdefault("verbose", (1 + args.verbose) if args.learner != _AUTO
                          else int(args.verbose > 0))
    model.set_params(**params)
    if args.verbose:
        held = (f" (held out {args.test_size:g} of the rows, seed {args.seed})"
                if args.test_size is not None else "")
        print(f"fitting {name} on {args.data}: {X.shape[0]} x {X.shape[1]}{held}",
              file=sys.stderr)
    t0 = time.perf_counter()
    with scheduler_context(args) as client:
        if args.learner == _AUTO:      # AutoSimilarity's race runs on the cluster
            model.fit(X, y)
        else:                          # training runs on the cluster's partitions
            k = _n_partitions(args, client, kind, name, X.shape[0])
            if k is None:
                model.fit(X, y)
            else:
                model.fit(ShardedCollection.from_arrays(X, y, n_partitions=k))
                record["partitions"] = k
    secs = time.perf_counter() - t0
    # the fingerprint of the rows fitted on travels with the model file, so
    # that 'tripletml evaluate' can say when it scores on them
    model.training_data_ = record
    check_output(args.output, "model", args.force)     # again: the fit may have been long
    model.save(args.output)
    if args.verbose:
        stop = getattr(model, "stop_reason_", None)
        its = getattr(model, "n_iter_", None)
        more = ("" if stop is None else f", stopped by {stop}" if its is None
                else f", {its} iterations, stopped by {stop}")
        print(f"fit in {secs:.2f} s{more}", file=sys.stderr)
    if args.learner == _AUTO:
        print(f"AutoSimilarity chose {model.best_params_['learner']} "
              f"{json.dumps({k: v for k, v in model.best_params_.items() if k != 'learner'})} "
              f"(validation mAP {model.best_score_:.4f}, stopped by {model.stop_reason_})")
        print(f"saved {model.best_params_['learner']} ({model.n_features_in_} features) to "
              f"{args.output}")
        return
    print(f"saved {type(model).__name__} ({model.n_features_in_} features) to {args.output}")


def _n_partitions(args, client, kind: str, name: str, n_rows: int) -> int | None:
    """Partitions of an in-memory data set: ``--partitions``, else with
    ``--scheduler`` one per worker thread, else None (an in-memory fit)."""
    k = getattr(args, "partitions", None)
    if k is None and client is None:
        return None
    if kind != "triplet":
        raise ValueError(f"--scheduler / --partitions train triplet learners; {name} is a "
                         f"{kind} learner (fit it without them)")
    if k is None:
        k = max(1, sum(client.nthreads().values()))
    elif k < 1:                # the parser refuses it; a caller building args may not
        raise ValueError(f"--partitions must be a positive integer, got {k}")
    return max(1, min(int(k), n_rows))


def _fit_shards(args, name: str, kind: str, model, params: dict):
    """``tripletml fit LEARNER DIR``: train on the directory's ``.npz`` shards
    (``write_npz_shards``), in-process or on ``--scheduler``."""
    if kind != "triplet" or args.learner == _AUTO:
        raise ValueError(f"a directory of shards trains a triplet learner; {name} cannot "
                         "be fitted on one (load the data into memory instead)")
    if args.test_size is not None:
        raise ValueError("--test-size splits an in-memory data set; hold out shards of the "
                         "directory instead")
    if args.partitions is not None:
        raise ValueError("--partitions cuts an in-memory data set; a directory's partitions "
                         "are its shards")
    if not any(Path(args.data).glob("*.npz")):
        raise ValueError(f"{args.data} is a folder without .npz shards; DATA is a data set "
                         "name, a LIBSVM file, or a folder of shards written by "
                         "tripletml.distributed.sharded.write_npz_shards")
    coll = read_npz_shards(args.data)
    if args.seed is not None and "random_state" in model.get_params():
        params.setdefault("random_state", args.seed)
    if "verbose" in model.get_params():
        params.setdefault("verbose", 1 + args.verbose)
    model.set_params(**params)
    if args.verbose:
        print(f"fitting {name} on {coll.n_partitions} shards of {args.data}: "
              f"{coll.n_total} rows", file=sys.stderr)
    t0 = time.perf_counter()
    with scheduler_context(args):
        model.fit(coll)
    secs = time.perf_counter() - t0
    model.training_data_ = {"data": str(args.data), "shards": coll.n_partitions,
                            "n_samples": coll.n_total}
    check_output(args.output, "model", args.force)
    model.save(args.output)
    if args.verbose:
        print(f"fit in {secs:.2f} s ({model.partitioned_['strategy']})", file=sys.stderr)
    print(f"saved {type(model).__name__} ({model.n_features_in_} features) to {args.output}")


def _evaluation_note(args, model, X_all, y_all, X, y) -> str:
    """What ``evaluate`` scores on, relative to what the model was fitted on."""
    rec = getattr(model, "training_data_", None)
    split = (f"--test-size {args.test_size:g} --seed {args.seed}"
             if args.test_size is not None else None)
    if isinstance(rec, dict) and "shards" in rec and split is None and Path(args.data).is_dir() \
            and Path(str(rec.get("data"))).resolve() == Path(args.data).resolve():
        return (f"scoring on the shards the model was fitted on ({args.data}, {X.shape[0]} "
                "rows): an optimistic, in-sample score; hold out shards for a held-out one.")
    if not isinstance(rec, dict) or "fingerprint" not in rec:
        if split is None:
            return (f"scoring on {args.data}; pass --test-size 0.3 --seed S for a held-out "
                    "split (and fit with the same options: this model carries no record of "
                    "its training data).")
        return (f"scoring on the held-out part of {args.data} ({split}, {X.shape[0]} rows); "
                "the model carries no record of its training data: fit it with the same "
                f"{split} for a true held-out score.")
    fp = fingerprint(X)
    if fp == rec["fingerprint"]:
        return (f"scoring on the data the model was fitted on ({args.data}, {X.shape[0]} "
                "rows): an optimistic, in-sample score. For a held-out score fit and evaluate "
                "with --test-size 0.3 --seed S.")
    if fp == rec.get("heldout_fingerprint"):
        return (f"scoring on the held-out part of {args.data} ({X.shape[0]} rows) that the "
                "model was not fitted on.")
    if rec.get("test_size") is not None and fingerprint(X_all) == rec.get(
            "source_fingerprint"):
        if split is None:
            return (f"{args.data} includes the {rec.get('n_samples')} rows the model was fitted "
                    f"on; pass --test-size {rec['test_size']:g} --seed {rec.get('seed')} to "
                    "score on the held-out part only.")
        return (f"this split ({split}) is not the one the model was fitted with (--test-size "
                f"{rec['test_size']:g} --seed {rec.get('seed')}): its test rows overlap the "
                "training rows.")
    if split is not None and fingerprint(X_all) == rec.get("source_fingerprint"):
        return (f"the model was fitted on all of {args.data}, so these {X.shape[0]} 'held-out' "
                "rows were seen in training; refit with the same " + split + ".")
    return f"scoring on {args.data} ({X.shape[0]} rows), not the data the model was fitted on."


def _load_shard_dir(directory: str, model, multilabel: bool):
    """The rows and labels of a folder of ``.npz`` shards (what ``tripletml
    fit LEARNER DIR`` reads), concatenated in the order of their names."""
    import numpy as np
    import scipy.sparse as sp

    if multilabel:
        raise ValueError(f"{directory} is a folder of shards, which hold one class label per "
                         "row; evaluate a multi-label model on a LIBSVM file or data set.")
    if not any(Path(directory).glob("*.npz")):
        raise ValueError(f"{directory} is a folder without .npz shards; DATA is a data set "
                         "name, a LIBSVM file, or a folder of shards written by "
                         "tripletml.distributed.sharded.write_npz_shards")
    coll = read_npz_shards(directory)       # checks every shard's header first
    d = model.n_features_in_
    Xs, ys = [], []
    for path in sorted(Path(directory).glob("*.npz")):
        X, y = load_npz_shard(str(path))
        if y is None:
            raise ValueError(f"evaluate needs class labels; the shard {path} holds none "
                             "(write the shards with write_npz_shards(directory, X, y, ...)).")
        if X.shape[1] != d:
            raise ValueError(f"the shard {path} has {X.shape[1]} features, the model expects "
                             f"{d}.")
        Xs.append(X)
        ys.append(np.asarray(y))
    X = sp.vstack(Xs, format="csr") if any(sp.issparse(x) for x in Xs) else np.vstack(Xs)
    y = np.concatenate(ys)
    if X.shape[0] != coll.n_total:      # pragma: no cover - a shard changed while read
        raise ValueError(f"the shards of {directory} changed while they were read.")
    return X, y


def _cmd_evaluate(args):
    from tripletml.metrics import evaluate_retrieval, knn_error   # lazy: Numba
    model = load_model(args.model)
    multilabel = get_entry(type(model).__name__, kind=FEATURE_KINDS).kind == "multilabel"
    if Path(args.data).is_dir():        # a folder of shards, as 'tripletml fit' reads
        X_all, y_all = _load_shard_dir(args.data, model, multilabel)
    else:
        X_all, y_all = _load_data(args.data, args.data_home, args.subset,
                                  n_features=model.n_features_in_, zero_based=args.zero_based,
                                  multilabel=multilabel,
                                  pad_features=getattr(args, "pad_features", False))
    X, y = X_all, y_all
    if args.test_size is not None:
        _, X, _, y = _split(X_all, y_all, args.test_size, args.seed)
    _note(_evaluation_note(args, model, X_all, y_all, X, y))
    if not multilabel:
        import numpy as np
        classes = np.unique(np.asarray(y))
        if classes.size < 2:
            _note(f"the rows scored hold one class ({classes[0].item()!r})"
                  ": every other row is relevant to every query, so mAP and precision@k "
                  "are 1.0 and the 1-NN error 0 whatever the model; score on data with at "
                  "least two classes.")
    if multilabel:
        print(f"{'label_ranking_map':18s} {model.score(X, y):.4f}")
        return
    r = evaluate_retrieval(model, X, y, k=tuple(args.k), verbose=1 + args.verbose)
    r["knn_error"] = float(knn_error(model, X, y, k=1, verbose=1 + args.verbose))
    for k, v in r.items():
        print(f"{k:18s} {v:.4f}")


def _present(rec, home: Path) -> str:
    """``bundled``, ``yes``, ``partial`` or ``no``: whether the data home holds
    every file of data set ``rec`` (stored or uncompressed; not verified)."""
    if rec.kind == "sklearn" or not rec.files:
        return "bundled"
    found = [(home / f.path).is_file() or (home / f.original_path).is_file()
             for f in rec.files]
    return "yes" if all(found) else ("partial" if any(found) else "no")


def _cmd_datasets(args):
    home = datasets.get_data_home(args.data_home)
    how = ("--data-home" if args.data_home else
           "the TRIPLETML_DATA environment variable" if os.environ.get("TRIPLETML_DATA")
           else "the default; set TRIPLETML_DATA or pass --data-home to change it")
    exists = ("" if home.is_dir() else " (a file, not a folder)" if home.exists()
              else " (does not exist)")
    print(f"data home: {home}{exists} (from {how})")
    print(f"{'name':14s} {'present':8s} description")
    n_yes = 0
    for name in datasets.list_datasets():
        rec = datasets.info(name)
        state = _present(rec, home)
        n_yes += state in ("yes", "bundled")
        desc = " ".join(rec.description.split())
        if not args.verbose and len(desc) > 72:
            desc = desc[:71].rstrip() + "..."
        print(f"{name:14s} {state:8s} {desc}")
        if args.verbose:
            for f in rec.files:
                where = home / f.path
                if not where.is_file() and (home / f.original_path).is_file():
                    where = home / f.original_path
                mark = "ok" if where.is_file() else "missing"
                print(f"{'':14s} {'':8s}   {mark:7s} {where}")
    print(f"{n_yes} of {len(datasets.list_datasets())} available; "
          "'tripletml fetch NAME' downloads a missing one.")


def _cmd_fetch(args):
    home = datasets.fetch(args.name, data_home=args.data_home, mirror=args.mirror, verbose=True)
    print(f"{args.name} is in {home}")


def _fit_epilog() -> str:
    lines = ["learners (class names, any case):",
             f"  {'auto':22s} {'triplet':10s} AutoSimilarity: race the learners, keep the best "
             "(--time-budget, --n-jobs)"]
    for e in entries(FEATURE_KINDS):
        doc = (e.cls.__doc__ or "").strip().splitlines()
        lines.append(f"  {e.name:22s} {e.kind:10s} {doc[0] if doc else ''}")
    return "\n".join(lines)


def _verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more output: progress bars even when stderr is not a "
                             "terminal, and details (repeat for more)")


_DATA_HELP = ("a registered data-set name ('tripletml datasets' lists them) or the path of "
              "a LIBSVM/svmlight file (.gz accepted)")
_HOME_HELP = "data folder (default: $TRIPLETML_DATA, else ~/tripletml_data)"


def _add_demo(sub) -> None:
    """The ``demo`` subcommand."""
    d = sub.add_parser("demo", help="learn similarities on digits with every learner")
    d.add_argument("--seed", type=int, default=0, help="random seed of the split and learners")
    _verbose(d)
    d.set_defaults(func=_cmd_demo)


def _add_reproduce(sub) -> None:
    """The ``reproduce`` subcommand."""
    r = sub.add_parser("reproduce", help="rerun a paper reproduction ('list' to list)")
    r.add_argument("name", nargs="?",
                   help="reproduction name (e.g. sdca-table2), or 'list' to list them")
    r.add_argument("--out", help="output folder (default results/NAME, or results/quick/NAME "
                                 "with --quick)")
    r.add_argument("--quick", action="store_true", help="fewer seeds / smaller runs")
    r.add_argument("--seeds", type=positive_int, metavar="N",
                   help="number of random splits / seeds to average over (default: the "
                        "paper's)")
    r.add_argument("--only", help="comma-separated data sets (a subset of the run's)")
    r.add_argument("--data-home", help=_HOME_HELP)
    add_scheduler_argument(r)
    _verbose(r)
    r.set_defaults(func=_cmd_reproduce)


def _add_fit(sub) -> None:
    """The ``fit`` subcommand."""
    f = sub.add_parser("fit", help="fit a learner on a data set and save it",
                       epilog=_fit_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("learner", type=_learner_name, metavar="LEARNER",
                   help="learner class name, any case (listed below), or 'auto' to let "
                        "AutoSimilarity pick and tune one (the file then holds the winner)")
    f.add_argument("data", metavar="DATA",
                   help=_DATA_HELP + ", or a directory of .npz shards (write_npz_shards)")
    f.add_argument("-o", "--output", required=True,
                   help="model file to write (.npz appended to another suffix); an existing "
                        "file is never replaced unless it is a tripletml model and --force "
                        "is given")
    f.add_argument("--force", action="store_true",
                   help="replace an existing tripletml model file at --output (any other "
                        "existing file is refused)")
    f.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="constructor parameter, VALUE read as JSON (e.g. --param "
                        "max_iter=3); repeatable")
    f.add_argument("--subset", default="all",
                   help="part of a registered data set: train, test or all (default all)")
    f.add_argument("--seed", type=int,
                   help="random_state of the learner and of the --test-size split")
    f.add_argument("--test-size", type=_test_size, metavar="FRACTION",
                   help="hold out this fraction of the rows (stratified, seeded by --seed) "
                        "and fit on the rest; evaluate with the same options")
    f.add_argument("--data-home", help=_HOME_HELP)
    f.add_argument("--preprocessing", choices=["none"] + [m for m in PREPROCESSING_MODES if m],
                   help="feature preprocessing fitted with the model and saved in its file "
                        "(default: the learner's, 'auto' = 'sphere' for bilinear learners, "
                        "'standardize' for Mahalanobis ones, none for sparse X with more "
                        "than 2000 features; 'none' for raw features)")
    add_scheduler_argument(f)
    f.add_argument("--partitions", type=positive_int, metavar="K",
                   help="train over K row partitions of the data (the learner's partitioned "
                        "strategy: exact statistics, CoCoA+, parameter mixing, gradient sums "
                        "or a gathered sample); with --scheduler the default is one per "
                        "worker thread. A DATA directory of .npz shards is always "
                        "partitioned by its shards")
    f.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    f.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="auto only: seconds for the race of candidates (default 60); the "
                        "best so far is refitted when they are spent")
    f.add_argument("--n-jobs", type=int, metavar="N",
                   help="auto only: candidates fitted in parallel (joblib; -1: all cores)")
    _verbose(f)
    f.set_defaults(func=_cmd_fit)


def _add_evaluate(sub) -> None:
    """The ``evaluate`` subcommand."""
    e = sub.add_parser("evaluate", help="mAP, P@k and 1-NN error of a saved model")
    e.add_argument("model", metavar="MODEL", help="model file written by 'tripletml fit'")
    e.add_argument("data", metavar="DATA",
                   help=_DATA_HELP + ", or a directory of .npz shards with labels (as fit reads)")
    e.add_argument("--subset", default="all",
                   help="part of a registered data set: train, test or all (default all)")
    e.add_argument("--test-size", type=_test_size, metavar="FRACTION",
                   help="score on the held-out FRACTION of the rows only (the split 'fit "
                        "--test-size FRACTION --seed S' held out)")
    e.add_argument("--seed", type=int, help="seed of the --test-size split")
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 10], metavar="K",
                   help="cut-offs of precision@k (default 1 5 10)")
    e.add_argument("--data-home", help=_HOME_HELP)
    e.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    e.add_argument("--pad-features", action="store_true",
                   help="accept a LIBSVM file whose largest feature index is below the "
                        "model's feature count (trailing features all zero); refused "
                        "otherwise")
    _verbose(e)
    e.set_defaults(func=_cmd_evaluate)


def _add_datasets_and_fetch(sub) -> None:
    """The ``datasets`` and ``fetch`` subcommands."""
    ds = sub.add_parser("datasets", help="list the registered data sets, which are present "
                                         "in the data home, and where that is")
    ds.add_argument("--data-home", help=_HOME_HELP)
    _verbose(ds)
    ds.set_defaults(func=_cmd_datasets)
    fe = sub.add_parser("fetch", help="download a data set into the data home")
    fe.add_argument("name", metavar="NAME", help="registered data-set name ('tripletml "
                                                  "datasets' lists them)")
    fe.add_argument("--data-home", help=_HOME_HELP)
    fe.add_argument("--mirror", help="base URL of a mirror with the data-home layout")
    _verbose(fe)
    fe.set_defaults(func=_cmd_fetch)


def build_parser() -> argparse.ArgumentParser:
    """The ``tripletml`` argument parser (every argument has help text)."""
    p = argparse.ArgumentParser(prog="tripletml", description="tripletml: metric and similarity learning from triplets.",
                                epilog="Run 'tripletml COMMAND --help' for a command's options.")
    p.add_argument("--version", action="version", version=f"tripletml {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for add in (_add_demo, _add_reproduce, _add_fit, _add_evaluate, _add_datasets_and_fetch,
                add_subcommands):
        add(sub)
    return p


#: exit status when the reader of stdout went away (``| head``): that of a
#: process killed by SIGPIPE, as other Unix tools report it
EXIT_BROKEN_PIPE = 141


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the flush at
    interpreter exit does not print ``[Errno 32] Broken pipe`` either."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv=None) -> int:
    """Run the command line; returns the exit status (see the module doc)."""
    parser = build_parser()
    args = parser.parse_args(argv)     # usage errors: argparse exits with 2
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    try:
        args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except (FileNotFoundError, ValueError, TypeError, KeyError, ImportError) as exc:
        print(f"tripletml: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:              # network, disk: a runtime failure
        hint = ("; check the connection or use --mirror URL"
                if args.command == "fetch" else "")
        print(f"tripletml: error: {_one_line(exc)}{hint}", file=sys.stderr)
        return 1
    except (FloatingPointError, MemoryError, ArithmeticError) as exc:
        print(f"tripletml: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
