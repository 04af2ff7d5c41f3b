"""Variants of the lift (results/defaults/sphere_variants.md, columns unit k / const / W=I).

    OPENBLAS_NUM_THREADS=1 python -m bench.sphere_variants OUT.jsonl iris wine ...

Appends one JSON line per data set to OUT.jsonl.  Protocol of
:mod:`bench._protocol` (stratified 70/30 split, seeds 0,1,2, test-vs-test
mAP).  Public names only.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import tripletml
from tripletml.metrics import evaluate_retrieval

try:
    from ._protocol import load_set, standardized_split
except ImportError:          # run as a file: python bench/sphere_variants.py
    from _protocol import load_set, standardized_split


def stereo(Z, s):
    U = Z / s
    n2 = (U**2).sum(1, keepdims=True)
    return np.hstack([2 * U, n2 - 1]) / (n2 + 1)


def const(Z, s):
    return np.hstack([Z, np.full((Z.shape[0], 1), s)]) / np.sqrt((Z**2).sum(1, keepdims=True) + s * s)


VARIANTS = [("st0.5", stereo, .5), ("st1", stereo, 1.), ("st2", stereo, 2.), ("c1", const, 1.)]
LEARNERS = ["OASIS", "SDCA", "COMET", "SparseCOMET", "LORETA", "IterativePA", "NaivePA", "FactoredGD"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", metavar="OUT.jsonl", help="file the results are appended to")
    ap.add_argument("sets", nargs="+", help="data-set names")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    for name in args.sets:
        X, y = load_set(name)
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, float)
        res: dict[str, list[float]] = {}
        t0 = time.time()
        for seed in range(3):
            Ztr, Zte, ytr, yte, s0 = standardized_split(X, y, seed)
            for vn, f, k in VARIANTS:
                Ltr, Lte = f(Ztr, k * s0), f(Zte, k * s0)
                base = tripletml.DotProduct().fit(Ltr, ytr)
                res.setdefault(f"W=I|{vn}", []).append(evaluate_retrieval(base, Lte, yte)["map"])
                for cls in LEARNERS:
                    try:
                        m = getattr(tripletml, cls)(random_state=seed, preprocessing=None).fit(Ltr, ytr)
                        v = evaluate_retrieval(m, Lte, yte)["map"]
                    except Exception:
                        v = float("nan")
                    res.setdefault(f"{cls}|{vn}", []).append(v)
        r = {k: float(np.mean(v)) for k, v in res.items()}
        with open(args.out, "a") as fh:
            fh.write(json.dumps({"set": name, "res": r, "secs": time.time() - t0}) + "\n")
        print(name, round(time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
