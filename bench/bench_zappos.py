"""Zappos held-out triplets for the feature-free ordinal embeddings (issue 30,
first slice): 5 folds over the 283,770 triplets (KFold, shuffled, seed 0);
from each fold's 80 % training part 20,000 triplets are drawn (seed = fold)
and scored on the fold's 20 % (triplet accuracy).  Fit seconds: the median
of 3 fits after a compiling fit.

Run: ``python -m bench.bench_zappos [--n-init N]`` (needs the shared data:
``TRIPLETML_DATA`` or ``~/tripletml_data`` with ``zappos/``).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-init", type=int, default=4, help="random starts per fit (default 4)")
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10])
    args = ap.parse_args(argv)
    from sklearn.model_selection import KFold

    from tripletml.datasets import load_comparisons
    from tripletml.embedding import SOE, STE, TSTE

    warnings.simplefilter("ignore", UserWarning)       # items no training triplet names
    T = load_comparisons("zappos").triplets
    SOE(2).fit(T[:2000])                                # compile once
    TSTE(2).fit(T[:2000])
    STE(2).fit(T[:2000])
    res: dict = {}
    for f, (tr_i, te_i) in enumerate(KFold(5, shuffle=True, random_state=0).split(T)):
        rng = np.random.default_rng(f)
        tr, te = T[rng.choice(tr_i, 20000, replace=False)], T[te_i]
        for E in (SOE, STE, TSTE):
            for d in args.dims:
                ts = []
                for r in range(3):
                    t0 = time.perf_counter()
                    e = E(d, random_state=r, n_init=args.n_init).fit(tr)
                    ts.append(time.perf_counter() - t0)
                res.setdefault((E.__name__, d), []).append((e.score(te), sorted(ts)[1]))
    print(f"n_init={args.n_init}")
    for (name, d), v in res.items():
        a = np.array(v)
        print(f"{name:5s} {d:2d}-D  acc {a[:, 0].mean():.4f} +- {a[:, 0].std():.4f}  "
              f"fit s {np.median(a[:, 1]):.3f} (max {a[:, 1].max():.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
