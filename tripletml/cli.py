"""Command line: ``tripletml {demo,reproduce,fit,evaluate,datasets,fetch}``.

Exit status: 0 on success; 2 for a usage or input error (bad arguments, an
unknown learner or parameter, a missing or malformed file or data set); 1 for
a runtime failure (training diverged, a download failed, out of memory).
Every error is one line on stderr, ``tripletml: error: <message>``, never a
traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ._registry import entries, get_entry

__all__ = ["main", "build_parser"]


def _learner_name(value: str) -> str:
    """argparse type of ``fit LEARNER``: a registry class name, any case."""
    try:
        return get_entry(value, case_sensitive=False).name
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown learner {value!r}; choose from {', '.join(e.name for e in entries())} "
            "(any case)") from None


def _load_data(source: str, data_home, subset: str = "all", *, n_features=None,
               zero_based: bool = False, multilabel: bool = False):
    """A registered data-set name or a LIBSVM/svmlight file path (1-based
    feature indices as LIBSVM writes them, unless ``zero_based``).  With
    ``multilabel`` the target is a binary indicator matrix."""
    from . import datasets
    p = Path(source)
    if p.exists():
        import gzip

        from sklearn.datasets import load_svmlight_file
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            X, y = load_svmlight_file(fh, n_features=n_features, zero_based=zero_based,
                                      multilabel=multilabel)
        if multilabel:
            from sklearn.preprocessing import MultiLabelBinarizer
            y = MultiLabelBinarizer().fit_transform(y)
        return X.tocsr(), y
    b = datasets.load(source, data_home=data_home, subset=subset)
    if isinstance(b.data, list):
        raise ValueError(f"{source} is raw text; vectorise it first (tripletml.datasets.text).")
    if multilabel and getattr(b.target, "ndim", 1) != 2:
        raise ValueError(f"{source} has one class label per sample; a multi-label learner "
                         "needs a multi-label data set (e.g. yeast, scene).")
    return b.data, b.target


def _parse_params(pairs):
    params = {}
    for item in pairs or []:
        if "=" not in item:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    return params


def _cmd_demo(args):
    from .demo import run_demo
    run_demo(random_state=args.seed)


def _cmd_reproduce(args):
    from . import reproduce
    repros = reproduce.available()
    if args.name is None or args.name == "list":
        for r in repros.values():
            print(f"{r.name:24s} {r.description}")
        return
    out = Path(args.out or Path("results") / args.name)
    only = args.only.split(",") if args.only else None
    reproduce.run(args.name, out, quick=args.quick, seeds=args.seeds,
                  data_home=args.data_home, verbose=1, only=only)
    print(f"outputs written to {out}")


def _cmd_fit(args):
    entry = get_entry(args.learner, case_sensitive=False)
    model = entry.cls()
    params = _parse_params(args.param)
    unknown = sorted(set(params) - set(model.get_params()))
    if unknown:
        raise ValueError(f"{entry.name} has no parameter(s) {', '.join(unknown)}; its "
                         f"parameters: {', '.join(model.get_params())}")
    X, y = _load_data(args.data, args.data_home, args.subset, zero_based=args.zero_based,
                      multilabel=entry.kind == "multilabel")
    if args.seed is not None and "random_state" in model.get_params():
        params.setdefault("random_state", args.seed)
    if "verbose" in model.get_params():
        params.setdefault("verbose", 1)
    model.set_params(**params)
    model.fit(X, y)
    model.save(args.output)
    print(f"saved {type(model).__name__} ({model.n_features_in_} features) to {args.output}")


def _cmd_evaluate(args):
    from . import load_model
    from .metrics import evaluate_retrieval, knn_error
    model = load_model(args.model)
    multilabel = get_entry(type(model).__name__).kind == "multilabel"
    X, y = _load_data(args.data, args.data_home, args.subset,
                      n_features=model.n_features_in_, zero_based=args.zero_based,
                      multilabel=multilabel)
    if multilabel:
        print(f"{'label_ranking_map':18s} {model.score(X, y):.4f}")
        return
    r = evaluate_retrieval(model, X, y, k=tuple(args.k), verbose=1)
    r["knn_error"] = float(knn_error(model, X, y, k=1))
    for k, v in r.items():
        print(f"{k:18s} {v:.4f}")


def _cmd_datasets(args):
    from . import datasets
    for name in datasets.list_datasets():
        rec = datasets.info(name)
        print(f"{name:14s} {rec.description}")


def _cmd_fetch(args):
    from . import datasets
    home = datasets.fetch(args.name, data_home=args.data_home, mirror=args.mirror, verbose=True)
    print(f"{args.name} is in {home}")


def _fit_epilog() -> str:
    lines = ["learners (class names, any case):"]
    for e in entries():
        doc = (e.cls.__doc__ or "").strip().splitlines()
        lines.append(f"  {e.name:22s} {e.kind:10s} {doc[0] if doc else ''}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="tripletml", description="tripletml: metric and similarity learning from triplets.",
                                epilog="Run 'tripletml COMMAND --help' for a command's options.")
    p.add_argument("--version", action="version", version=f"tripletml {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    d = sub.add_parser("demo", help="learn similarities on digits with every learner")
    d.add_argument("--seed", type=int, default=0, help="random seed of the split and learners")
    d.set_defaults(func=_cmd_demo)
    r = sub.add_parser("reproduce", help="rerun a paper reproduction ('list' to list)")
    r.add_argument("name", nargs="?", help="reproduction name, or 'list'")
    r.add_argument("--out", help="output folder (default results/NAME)")
    r.add_argument("--quick", action="store_true", help="fewer seeds / smaller runs")
    r.add_argument("--seeds", type=int, help="number of seeds (default: the paper's)")
    r.add_argument("--only", help="comma-separated data sets (a subset of the run's)")
    r.add_argument("--data-home", help="data folder (default: $TRIPLETML_DATA)")
    r.set_defaults(func=_cmd_reproduce)
    f = sub.add_parser("fit", help="fit a learner on a data set and save it",
                       epilog=_fit_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("learner", type=_learner_name, metavar="LEARNER",
                   help="learner class name, any case (listed below)")
    f.add_argument("data", help="registered data-set name or LIBSVM file")
    f.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    f.add_argument("--param", action="append",
                   help="NAME=VALUE constructor parameter (JSON value), repeatable")
    f.add_argument("--subset", default="all", help="data-set subset: train, test or all")
    f.add_argument("--seed", type=int, help="random_state of the learner")
    f.add_argument("--data-home", help="data folder (default: $TRIPLETML_DATA)")
    f.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    f.set_defaults(func=_cmd_fit)
    e = sub.add_parser("evaluate", help="mAP, P@k and 1-NN error of a saved model")
    e.add_argument("model", help="model file written by 'tripletml fit'")
    e.add_argument("data", help="registered data-set name or LIBSVM file")
    e.add_argument("--subset", default="all", help="data-set subset: train, test or all")
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 10],
                   help="cut-offs of precision@k (default 1 5 10)")
    e.add_argument("--data-home", help="data folder (default: $TRIPLETML_DATA)")
    e.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    e.set_defaults(func=_cmd_evaluate)
    ds = sub.add_parser("datasets", help="list the registered data sets")
    ds.set_defaults(func=_cmd_datasets)
    fe = sub.add_parser("fetch", help="download a data set into the data home")
    fe.add_argument("name", help="registered data-set name")
    fe.add_argument("--data-home", help="data folder (default: $TRIPLETML_DATA)")
    fe.add_argument("--mirror", help="base URL of a mirror with the data-home layout")
    fe.set_defaults(func=_cmd_fetch)
    return p


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
    except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:
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
