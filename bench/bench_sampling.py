"""Triplet sampling against local quality (issue 27, item 4).

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_sampling [--sets digits,vehicle,vowel,segment]
        [--seed 0] [--learners OASIS,SDCA,LORETA,FactoredGD,LowRankDML]
        [--samplings class,knn,semihard] [--n-triplets N]

Protocol (``bench/_protocol.py``): per data set, a stratified 70/30 split
with ``--seed``, ``fit`` on the training part with the learner's defaults,
``random_state=seed`` and ``sampling=`` each value (``--n-triplets``
overrides ``n_triplets``), then on the test part the test-vs-test retrieval
mAP (``tripletml.metrics.evaluate_retrieval``) and the leave-one-out 1-NN
accuracy (``tripletml.metrics.knn_accuracy``).  Euclidean (on the learners'
default preprocessing is not applied: raw features) is the reference row.
Public names only.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import tripletml
from tripletml.metrics import evaluate_retrieval, knn_accuracy

try:
    from ._protocol import load_set, split
except ImportError:          # run as a file: python bench/bench_sampling.py
    from _protocol import load_set, split

SETS = ("digits", "vehicle", "vowel", "segment")
LEARNERS = ("OASIS", "SDCA", "LORETA", "FactoredGD", "LowRankDML")
SAMPLINGS = ("class", "knn", "semihard")


def measure(model, Xtr, ytr, Xte, yte) -> tuple[float, float, float]:
    """``(mAP, 1-NN accuracy, fit seconds)`` of ``model`` (fitted here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model.fit(Xtr, ytr)
        secs = time.perf_counter() - t0
    return (float(evaluate_retrieval(model, Xte, yte, k=())["map"]),
            float(knn_accuracy(model, Xte, yte, k=1)), secs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--learners", default=",".join(LEARNERS))
    ap.add_argument("--samplings", default=",".join(SAMPLINGS))
    ap.add_argument("--n-triplets", type=int, default=None)
    args = ap.parse_args(argv)
    samplings = args.samplings.split(",")
    print(f"{'set':9s} {'learner':11s} " + " ".join(f"{s + ' mAP':>12s} {s + ' 1NN':>12s}"
                                                       for s in samplings) + "  seconds")
    for name in args.sets.split(","):
        X, y = load_set(name)
        Xtr, Xte, ytr, yte = split(X, y, args.seed)
        m, a, _ = measure(tripletml.Euclidean(), Xtr, ytr, Xte, yte)
        print(f"{name:9s} {'Euclidean':11s} {m:12.3f} {a:12.3f}", flush=True)
        for lname in args.learners.split(","):
            cls = getattr(tripletml, lname)
            cells, secs = [], []
            for s in samplings:
                kw = {"random_state": args.seed, "sampling": s}
                if args.n_triplets is not None:
                    kw["n_triplets"] = args.n_triplets
                try:
                    m, a, t = measure(cls(**kw), Xtr, ytr, Xte, yte)
                    cells.append(f"{m:12.3f} {a:12.3f}")
                    secs.append(f"{t:.1f}")
                except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                    cells.append(f"{'error':>12s} {'':12s}")
                    secs.append(type(exc).__name__)
            print(f"{name:9s} {lname:11s} " + " ".join(cells) + "  " + "/".join(secs),
                  flush=True)


if __name__ == "__main__":
    main()
