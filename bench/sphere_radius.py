"""The chosen lift, the sphere of radius s0 (results/defaults/sphere_variants.md,
column radius s0), written out by hand: learners with preprocessing=None on
tripletml.core.preprocessing.sphere_lift(standardized rows, s0).

    OPENBLAS_NUM_THREADS=1 python -m bench.sphere_radius iris \
        OASIS,SDCA,COMET,SparseCOMET,LORETA,IterativePA,NaivePA,FactoredGD

Protocol of :mod:`bench._protocol` (stratified 70/30 split, seeds 0,1,2,
test-vs-test mAP).  Public names only.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

import tripletml
from tripletml.metrics import evaluate_retrieval
from tripletml.core.preprocessing import sphere_lift

try:
    from ._protocol import load_set, standardized_split
except ImportError:          # run as a file: python bench/sphere_radius.py
    from _protocol import load_set, standardized_split


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set", help="data-set name (tripletml datasets lists them)")
    ap.add_argument("learners", help="comma-separated learner class names")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    name, learners = args.set, args.learners.split(",")
    X, y = load_set(name)
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, float)
    res: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        Ztr, Zte, ytr, yte, s0 = standardized_split(X, y, seed)
        Ltr, Lte = sphere_lift(Ztr, s0), sphere_lift(Zte, s0)      # rows of norm s0
        for cls in learners:
            m = getattr(tripletml, cls)(random_state=seed, preprocessing=None).fit(Ltr, ytr)
            res.setdefault(cls, []).append(evaluate_retrieval(m, Lte, yte)["map"])
    for cls in learners:
        print(name, f"{cls:12s}", f"radius-s0:{np.mean(res[cls]):.3f}", flush=True)


if __name__ == "__main__":
    main()
