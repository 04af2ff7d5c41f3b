"""The training driver's cost: what one loop for every learner adds to a fit.

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_driver [--triplets 100000]

Measured in one run:

1. the driver's own cost per step (``tripletml.engine.run`` over a solver
   whose ``step`` does nothing but report: history record, divergence watch,
   stopping rule), in microseconds;
2. for the online learners (whose passes run as blocks of at least 1,000
   triplets, one driver step each) the share of a real fit that the driver's
   steps account for: ``steps x per-step cost / fit time``;
3. the per-triplet cost of OASIS's compiled kernel alone against the whole
   fit, per triplet (the rest is validation, preprocessing, sampling and the
   driver).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

import tripletml as tm
from tripletml.linalg import as_csr, diff_buffers
from tripletml.algorithms.oasis.kernels import oasis_steps
from tripletml.engine import DivergenceWatch, History, StepReport, run


class _Idle:
    """A solver whose steps only report (one iteration and one record each)."""

    def __init__(self):
        self.k = 0

    def step(self, budget):
        self.k += 1
        return StepReport(t=self.k, criterion=1.0, record={"loss": 1.0},
                          watch=[(1.0, "x")], losses=np.ones(4), step0=4 * self.k)


def per_step_us(n: int = 20000) -> float:
    best = np.inf
    for _ in range(3):
        w = DivergenceWatch("Idle", advice="-", window=1000)
        t0 = time.perf_counter()
        run(_Idle(), name="Idle", max_iter=n, tol=1e-9, history=History(keys=("loss",)),
            watch=w)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triplets", type=int, default=100000)
    ap.add_argument("--features", type=int, default=2000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    X = sp.random(5000, args.features, density=0.01, random_state=0, format="csr")
    y = rng.integers(0, 10, 5000)
    us = per_step_us()
    print(f"driver: {us:.1f} us per step (record + watch + stopping rule)")
    print(f"{'learner':12s} {'fit s':>8s} {'steps':>7s} {'driver share':>13s}")
    for cls, kw in (("OASIS", {}), ("SDCA", {"max_iter": 2}), ("LORETA", {"rank": 20}),
                    ("FactoredGD", {"rank": 20})):
        est = getattr(tm, cls)(n_triplets=args.triplets, random_state=0, preprocessing=None,
                               **kw)
        est.fit(X[:300], y[:300])                       # compile
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            est.fit(X, y)
            best = min(best, time.perf_counter() - t0)
        passes = est.n_iter_
        steps = passes * -(-args.triplets // max(1000, -(-args.triplets // 20)))
        print(f"{cls:12s} {best:8.3f} {steps:7d} {steps * us * 1e-6 / best:12.2%}")
    # OASIS's kernel alone, on the same triplets
    est = tm.OASIS(n_triplets=args.triplets, random_state=0, preprocessing=None).fit(X, y)
    T = tm.triplets.random_class_triplets(y, args.triplets, random_state=0)
    Xc = as_csr(X)
    m = len(T)
    losses, margins = np.empty(m), np.empty(m)
    W = np.eye(X.shape[1])
    best_k = np.inf
    for _ in range(3):
        W[:] = np.eye(X.shape[1])
        t0 = time.perf_counter()
        oasis_steps(W, Xc.indptr, Xc.indices, Xc.data, T, 0.01, losses, margins,
                    *diff_buffers(Xc))
        best_k = min(best_k, time.perf_counter() - t0)
    t0 = time.perf_counter()
    est.fit(X, y)
    fit = time.perf_counter() - t0
    print(f"OASIS kernel alone: {best_k / m * 1e9:.0f} ns/triplet; whole fit "
          f"{fit / m * 1e9:.0f} ns/triplet (kernel share {best_k / fit:.0%})")


if __name__ == "__main__":
    main()
