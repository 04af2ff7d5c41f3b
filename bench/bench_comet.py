"""COMET: time per coordinate step with the Woodbury-maintained inverse vs a
version that re-inverts W at every step (what a naive implementation of the
log-det gradient does), at d = 300 and d = 1000.

    python bench/bench_comet.py [--steps 60]

Both run the same steps on the same random sparse data and triplets; the
ratio is measured in one run.  The re-inverting variant differs only in
replacing the O(d^2) Woodbury update by np.linalg.inv (O(d^3)).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from tripletml import COMET, SparseCOMET
from tripletml.triplets import random_class_triplets


class ReinvertingCOMET(COMET):
    """COMET whose inverse is recomputed from scratch after every step."""

    def _step(self, X, t, k):
        bound = super()._step(X, t, k)
        self.W_inv_ = np.linalg.inv(self.W_)
        return bound


def setup(d, rng, n=2000, n_triplets=20000):
    X = sp.random(n, d, density=min(1.0, 30 / d), random_state=int(rng.integers(1 << 31)),
                  format="csr")
    y = rng.integers(0, 10, n)
    t = random_class_triplets(y, n_triplets, random_state=0)
    return X, t


def per_step(cls, X, t, steps):
    m = cls(n_epochs=1, random_state=0)
    m.fit(X, triplets=t[:1])
    m._refactor(X, t)
    rng = np.random.default_rng(0)
    ks = rng.integers(0, X.shape[1], steps)
    m._step(X, t, int(ks[0]))                  # warm-up
    t0 = time.perf_counter()
    for k in ks[1:]:
        m._step(X, t, int(k))
    return (time.perf_counter() - t0) / (steps - 1)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'d':>6s} {'Woodbury ms/step':>17s} {'re-invert ms/step':>18s} {'speed-up':>9s}")
    for d in (300, 1000):
        X, t = setup(d, rng)
        a = per_step(COMET, X, t, args.steps)
        b = per_step(ReinvertingCOMET, X, t, max(10, args.steps // 3))
        print(f"{d:6d} {a * 1e3:17.2f} {b * 1e3:18.2f} {b / a:8.1f}x")
    print()
    d = 1000
    print(f"dense vs sparse COMET, seconds per epoch (d = {d} coordinate steps), epochs 2-3")
    X, t = setup(d, rng)

    def epoch_seconds(model):
        model.fit(X, triplets=t)
        s = model.history_["seconds"]
        return (s[-1] - s[0]) / (len(s) - 1), model

    dense, _ = epoch_seconds(COMET(n_epochs=3, random_state=0))
    print(f"{'dense COMET':>24s} {dense:8.2f} s/epoch")
    for lam in (10.0, 40.0, 50.0, 60.0, 100.0):
        sec, m = epoch_seconds(SparseCOMET(lam=lam, n_epochs=3, random_state=0))
        print(f"{'sparse, lam = ' + format(lam, 'g'):>24s} {sec:8.2f} s/epoch   density "
              f"{m.density_:.2f}   dense / sparse = {dense / sec:.1f}x")


if __name__ == "__main__":
    main()
