"""LORETA-1 per-step cost: linear in n and k, near the memory-traffic bound.

    python -m bench.bench_loreta [--steps 2000]

A LORETA-1 step reads and writes the four n x k factor matrices (A, B and
their pseudo-inverses) a small constant number of times, so its time is
compared with a memcpy of those four matrices, measured in the same run.
Sparse CSR data (50 non-zeros per row); the step size is tiny so that every
triplet triggers a step.  General LORETA (Algorithm 2, fresh pseudo-inverses
each step, O(n k^2)) runs the same steps at k = 100 for comparison.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from tripletml import LORETA
from tripletml.triplets import random_class_triplets


def data(n_features, rng, n=2000, nnz=50):
    rows = np.repeat(np.arange(n), nnz)
    cols = rng.integers(0, n_features, rows.size)
    X = sp.csr_matrix((rng.random(rows.size), (rows, cols)), shape=(n, n_features))
    X.sum_duplicates()
    return X, rng.integers(0, 10, n)


def per_step(model, X, t):
    model.partial_fit(X, t[:1])                 # initialize (and JIT) outside the timing
    model.partial_fit(X, t[1:50])
    t0 = time.perf_counter()
    model.partial_fit(X, t[50:])
    dt = (time.perf_counter() - t0) / (t.shape[0] - 50)
    active = np.mean(np.asarray(model.history_["loss"][-1]) > 0)
    return dt, active


def memcpy_bound(n, k, repeats=20):
    src = [np.random.default_rng(i).random((n, k)) for i in range(4)]
    dst = [np.empty_like(a) for a in src]
    for a, b in zip(dst, src):
        np.copyto(a, b)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a, b in zip(dst, src):
            np.copyto(a, b)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'n':>7s} {'k':>5s} {'solver':>10s} {'us/step':>10s} {'memcpy us':>10s} "
          f"{'/memcpy':>8s}")
    res = {}
    for n, k in [(5000, 50), (50000, 50), (20000, 10), (20000, 100)]:
        X, y = data(n, rng)
        t = random_class_triplets(y, args.steps, random_state=0)
        m = LORETA(rank=k, eta0=1e-6, init="random", random_state=0)
        dt, active = per_step(m, X, t)
        mc = memcpy_bound(n, k)
        res[(n, k)] = dt
        print(f"{n:7d} {k:5d} {'LORETA-1':>10s} {dt * 1e6:10.1f} {mc * 1e6:10.1f} "
              f"{dt / mc:8.2f}   (steps taken: {active:.0%})")
    n, k = 20000, 100
    X, y = data(n, rng)
    t = random_class_triplets(y, 200, random_state=0)
    g = LORETA(rank=k, eta0=1e-6, init="random", solver="general", random_state=0)
    dtg, _ = per_step(g, X, t)
    print(f"{n:7d} {k:5d} {'general':>10s} {dtg * 1e6:10.1f}")
    print()
    print(f"n 5k -> 50k at k = 50:   time x{res[(50000, 50)] / res[(5000, 50)]:.1f} "
          "(linear: x10)")
    print(f"k 10 -> 100 at n = 20k:  time x{res[(20000, 100)] / res[(20000, 10)]:.1f} "
          "(linear: x10)")
    print(f"general / LORETA-1 at n = 20k, k = 100: x{dtg / res[(20000, 100)]:.1f}")


if __name__ == "__main__":
    main()
