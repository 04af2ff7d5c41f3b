"""COMET: time per coordinate step with the Woodbury-maintained inverse vs a
version that re-inverts W at every step (what a naive implementation of the
log-det gradient does), at d = 300 and d = 1000.

    python -m bench.bench_comet [--steps 60]

Both run the same steps on the same random sparse data and triplets; the
ratio is measured in one run.  The re-inverting variant differs only in
replacing the O(d^2) Woodbury update by np.linalg.inv (O(d^3)).  Steps are
driven through the public solver (:class:`tripletml.algorithms.comet.kernels.COMETSolver`).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from tripletml import COMET, SparseCOMET
from tripletml.algorithms.comet.kernels import COMETSolver
from tripletml.triplets import random_class_triplets


class ReinvertingSolver(COMETSolver):
    """COMET's solver with its inverse recomputed from scratch after every step."""

    def coordinate_step(self, k):
        bound = super().coordinate_step(k)
        self.W_inv = np.linalg.inv(self.W)
        return bound


def setup(d, rng, n=2000, n_triplets=20000):
    X = sp.random(n, d, density=min(1.0, 30 / d), random_state=int(rng.integers(1 << 31)),
                  format="csr")
    y = rng.integers(0, 10, n)
    t = random_class_triplets(y, n_triplets, random_state=0)
    return X, t


def per_step(cls, X, t, steps):
    solver = cls(X, t)                         # W = I, with its caches
    rng = np.random.default_rng(0)
    ks = rng.integers(0, X.shape[1], steps)
    solver.coordinate_step(int(ks[0]))         # warm-up
    t0 = time.perf_counter()
    for k in ks[1:]:
        solver.coordinate_step(int(k))
    return (time.perf_counter() - t0) / (steps - 1)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'d':>6s} {'Woodbury ms/step':>17s} {'re-invert ms/step':>18s} {'speed-up':>9s}")
    for d in (300, 1000):
        X, t = setup(d, rng)
        a = per_step(COMETSolver, X, t, args.steps)
        b = per_step(ReinvertingSolver, X, t, max(10, args.steps // 3))
        print(f"{d:6d} {a * 1e3:17.2f} {b * 1e3:18.2f} {b / a:8.1f}x")
    print()
    d = 1000
    print(f"dense vs sparse COMET, seconds per epoch (d = {d} coordinate steps), epochs 2-3")
    X, t = setup(d, rng)

    def epoch_seconds(model):
        model.fit(X, triplets=t)
        s = model.history_["seconds"]
        return (s[-1] - s[0]) / (len(s) - 1), model

    dense, _ = epoch_seconds(COMET(max_iter=3, tol=None, random_state=0))
    print(f"{'dense COMET':>26s} {dense:8.2f} s/epoch")
    for lam in (10.0, 40.0, 50.0, 60.0, 100.0):
        sec, m = epoch_seconds(SparseCOMET(group_alpha=lam, max_iter=3, tol=None,
                                           random_state=0))
        print(f"{'sparse, group_alpha = ' + format(lam, 'g'):>26s} {sec:8.2f} s/epoch   density "
              f"{m.density_:.2f}   dense / sparse = {dense / sec:.1f}x")


if __name__ == "__main__":
    main()
