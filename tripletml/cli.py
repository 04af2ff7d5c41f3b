"""Command line: ``tripletml {demo,reproduce,fit,evaluate,datasets,fetch}``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


__all__ = ["main"]

#: learners that ``tripletml fit`` can build, with their CLI-settable params
def _learners():
    import tripletml as tm
    return {"euclidean": tm.Euclidean, "dotproduct": tm.DotProduct, "oasis": tm.OASIS,
            "sdca": tm.SDCA, "loreta": tm.LORETA, "pa": tm.IterativePA, "pa2": tm.NaivePA,
            "gd": tm.FactoredGD, "comet": tm.COMET}


def _load_data(source: str, data_home, subset: str = "all", *, n_features=None,
               zero_based: bool = False):
    """A registered data-set name or a LIBSVM/svmlight file path (1-based
    feature indices as LIBSVM writes them, unless ``zero_based``)."""
    from . import datasets
    p = Path(source)
    if p.exists():
        import gzip

        from sklearn.datasets import load_svmlight_file
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            X, y = load_svmlight_file(fh, n_features=n_features, zero_based=zero_based)
        return X.tocsr(), y
    b = datasets.load(source, data_home=data_home, subset=subset)
    if isinstance(b.data, list):
        raise SystemExit(f"tripletml: {source} is raw text; vectorise it first "
                         "(tripletml.datasets.text).")
    return b.data, b.target


def _parse_params(pairs):
    params = {}
    for item in pairs or []:
        if "=" not in item:
            raise SystemExit(f"tripletml: --param expects NAME=VALUE, got {item!r}")
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
    learners = _learners()
    if args.learner not in learners:
        raise SystemExit(f"tripletml: unknown learner {args.learner!r}; "
                         f"choose from {', '.join(learners)}")
    X, y = _load_data(args.data, args.data_home, args.subset, zero_based=args.zero_based)
    model = learners[args.learner]()
    params = _parse_params(args.param)
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
    X, y = _load_data(args.data, args.data_home, args.subset,
                      n_features=model.n_features_in_, zero_based=args.zero_based)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tripletml", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="learn similarities on digits with every learner")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_cmd_demo)
    r = sub.add_parser("reproduce", help="rerun a paper reproduction ('list' to list)")
    r.add_argument("name", nargs="?")
    r.add_argument("--out", help="output folder (default results/NAME)")
    r.add_argument("--quick", action="store_true", help="fewer seeds / smaller runs")
    r.add_argument("--seeds", type=int)
    r.add_argument("--only", help="comma-separated data sets (a subset of the run's)")
    r.add_argument("--data-home")
    r.set_defaults(func=_cmd_reproduce)
    f = sub.add_parser("fit", help="fit a learner on a data set and save it")
    f.add_argument("learner")
    f.add_argument("data", help="registered data-set name or LIBSVM file")
    f.add_argument("-o", "--output", required=True)
    f.add_argument("--param", action="append", help="NAME=VALUE (JSON value), repeatable")
    f.add_argument("--subset", default="all")
    f.add_argument("--seed", type=int)
    f.add_argument("--data-home")
    f.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    f.set_defaults(func=_cmd_fit)
    e = sub.add_parser("evaluate", help="mAP, P@k and 1-NN error of a saved model")
    e.add_argument("model")
    e.add_argument("data")
    e.add_argument("--subset", default="all")
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 10])
    e.add_argument("--data-home")
    e.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    e.set_defaults(func=_cmd_evaluate)
    ds = sub.add_parser("datasets", help="list the registered data sets")
    ds.set_defaults(func=_cmd_datasets)
    fe = sub.add_parser("fetch", help="download a data set into the data home")
    fe.add_argument("name")
    fe.add_argument("--data-home")
    fe.add_argument("--mirror", help="base URL of a mirror with the data-home layout")
    fe.set_defaults(func=_cmd_fetch)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, TypeError, FileNotFoundError, FloatingPointError) as exc:
        print(f"tripletml: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
