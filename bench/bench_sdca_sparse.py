"""Per-step cost of SDCA (and OASIS) on CSR data follows the non-zeros.

Two random CSR data sets with the same d and k and 4k non-zeros per row:
a step touches nnz(q) * (nnz(p+) + nnz(p-)) entries of M, so the time per
step should grow ~16x, independent of d^2.  A dense-row run at the same d
shows the O(d^2) cost that the sparse path avoids.  All ratios are measured
in one run.

    python -m bench.bench_sdca_sparse [--d 5000] [--steps 20000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from tripletml import OASIS, SDCA
from tripletml.triplets import random_class_triplets


def random_csr(n, d, nnz_per_row, rng):
    rows = np.repeat(np.arange(n), nnz_per_row)
    cols = np.concatenate([rng.choice(d, nnz_per_row, replace=False) for _ in range(n)])
    vals = rng.random(rows.size) / np.sqrt(nnz_per_row)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, d))


def time_per_step(make, X, t, repeats=3):
    make().partial_fit(X, t[:10])  # JIT warm-up
    best = np.inf
    for _ in range(repeats):
        m = make()
        m.partial_fit(X, t[:1])  # allocate the model outside the timed region
        t0 = time.perf_counter()
        m.partial_fit(X, t[1:])
        best = min(best, (time.perf_counter() - t0) / (t.shape[0] - 1))
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=5000)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--nnz", type=int, default=25)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, args.n)
    t = random_class_triplets(y, args.steps, random_state=0)
    learners = {"SDCA": lambda: SDCA(alpha=0.01, n_triplets=args.steps, output="last"),
                "SDCA avg": lambda: SDCA(alpha=0.01, n_triplets=args.steps),
                "OASIS": lambda: OASIS(C=0.1)}
    print(f"d = {args.d}, n = {args.n}, {args.steps} steps per measurement")
    print(f"{'learner':10s} {'nnz/row':>8s} {'us/step':>9s}   ratio vs nnz={args.nnz}   "
          f"(nnz^2 ratio)")
    small = random_csr(args.n, args.d, args.nnz, rng)
    big = random_csr(args.n, args.d, 4 * args.nnz, rng)
    dense = rng.random((200, args.d)) / np.sqrt(args.d)
    td = random_class_triplets(y[:200], 60, random_state=0)
    # memory bound of a dense step: W is read (margin) then read and written
    # (update): 3 d^2 doubles; bandwidth measured now with W += c (2 d^2).
    W = np.ones((args.d, args.d))  # pages touched before timing
    W += 1.0
    t0 = time.perf_counter()
    for _ in range(5):
        W += 1.0
    bw = 5 * 2 * W.nbytes / (time.perf_counter() - t0)
    bound = 3 * W.nbytes / bw
    del W
    print(f"memory bandwidth (W += c) {bw / 1e9:.1f} GB/s -> dense-step bound "
          f"{bound * 1e6:.0f} us")
    for name, make in learners.items():
        a = time_per_step(make, small, t)
        b = time_per_step(make, big, t)
        c = time_per_step(make, dense, td, repeats=1)
        print(f"{name:10s} {args.nnz:8d} {a * 1e6:9.2f}")
        print(f"{name:10s} {4 * args.nnz:8d} {b * 1e6:9.2f}   {b / a:10.1f}x"
              f"              ({16:.0f}x)")
        print(f"{name:10s} {'dense':>8s} {c * 1e6:9.2f}   {c / a:10.1f}x"
              f"              ({(args.d / args.nnz) ** 2:.0f}x = (d/nnz)^2);"
              f" dense step / memory bound = {c / bound:.2f}")


if __name__ == "__main__":
    main()
