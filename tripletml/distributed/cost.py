"""Can the cluster pay off?  A measured cost model for a partitioned fit
(issue 41 section 3: small data stays small).

Per round (a pass) a partitioned fit does work ``W`` -- about ``m * d**2``
multiply-adds for ``m`` triplets (or rows, for the statistics strategy) in
``d`` features: OASIS, LORETA's and SDCA's updates, KISSME's scatter
matrices all touch a ``d x d`` model or statistic once per example -- and
pays, on a cluster, a round trip ``t_rt`` (task submission, shipping the
partitions' graph and the model, the reduction, the gather).  With
``P`` worker threads and this machine's measured rate ``r`` (multiply-adds
per second in a BLAS product of the model's shape)::

    in process:  T_1 = W / r
    cluster:     T_P = t_rt + W / (P r) + S / (R s)

(``S`` bytes of partitions held by the driver, sent once per fit of ``R``
rounds at :data:`SHIP_RATE` ``s``), so the cluster pays off only when
``W / r * (1 - 1/P) > t_rt + S / (R s)``; the model
asks for a margin (:data:`MARGIN`) over that.  ``t_rt`` is measured on the
fit's own cluster: the wall time of one empty task per partition, their
tree reduction and the gather (partitions in the driver's memory are
surveyed in the driver, so a fit kept there sends nothing).  ``r`` is
measured once per process on an ``(n, d) @ (d, d)`` product (``n <= 4096``,
at most 2^26 multiply-adds).  Apart from the shipping, both sides scale with
the number of rounds.

``W / r`` is a lower bound (the learners' steps are not one GEMM): when the
partitions are in the driver's memory the in-process time of a round is
measured instead, as ``m`` times the learner's own seconds per example
(:func:`seconds_per_example`: two one-pass in-memory fits of the learner on
its first 4,000 rows, 1,000 and 4,000 triplets, whose difference cancels
the fixed costs).

The decision is ``"cluster"`` or ``"in-process"``; a fit whose partitions
are in the driver's memory (arrays, not loaders or Dask collections) and
small (:data:`LOCAL_BYTES`) runs in process when the cluster cannot pay off,
and says so in ``partitioned_["cost_model"]``; other collections stay on the
cluster with a :class:`ClusterCostWarning`.  ``TRIPLETML_PARTITIONED_BACKEND``
(``auto``, the default; ``cluster``; ``local``) overrides.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

__all__ = ["MARGIN", "LOCAL_BYTES", "CALIBRATION", "SHIP_RATE", "ClusterCostWarning",
           "machine_rate", "seconds_per_example", "decide", "backend_choice"]

#: the cluster must be predicted this many times faster than one process to be used
MARGIN = 1.25

#: in-memory partitions up to this many bytes (rows x features x 8) may be fitted
#: in process instead of on the cluster
LOCAL_BYTES = 2 << 30


class ClusterCostWarning(UserWarning):
    """The cost model predicts the cluster slower than one process, but the
    partitions cannot be fitted in process (loaders, Dask collections, or
    too large)."""


def backend_choice() -> str:
    """``TRIPLETML_PARTITIONED_BACKEND``: ``auto`` (default), ``cluster`` or
    ``local``."""
    value = os.environ.get("TRIPLETML_PARTITIONED_BACKEND", "").strip().lower() or "auto"
    if value not in ("auto", "cluster", "local"):
        raise ValueError("the TRIPLETML_PARTITIONED_BACKEND environment variable must be "
                         f"'auto', 'cluster' or 'local', got {value[:40]!r}")
    return value


@functools.lru_cache(maxsize=64)
def machine_rate(d: int) -> float:
    """Multiply-adds per second of this process on an ``(n, d) @ (d, d)``
    product, ``n <= 4096`` rows and at most 2^26 multiply-adds (best of
    three; cached per ``d``)."""
    d = int(max(1, min(d, 2048)))
    n = int(max(16, min(4096, (1 << 26) // (d * d))))      # at most ~67M multiply-adds
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, d)), rng.standard_normal((d, d))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t)
    return float(n) * d * d / max(best, 1e-6)


#: bytes per second at which the driver's partitions are assumed to reach the
#: workers (serialisation and a local network; an assumption, not measured:
#: measuring it would send the data)
SHIP_RATE = 200e6

#: sample sizes (triplets, or rows for a learner without triplets) of the two
#: timed in-process fits whose difference gives the learner's cost per example
CALIBRATION = (1000, 4000)

#: rows of the partition the calibration fits use (few: the fixed costs of a
#: fit -- validation, preprocessing -- stay small against the steps)
CALIBRATION_ROWS = 4000


def seconds_per_example(learner, X, y) -> float | None:
    """This learner's measured seconds per training example and pass, in
    this process: the difference of two one-pass in-memory fits (after a
    small one that compiles the kernels) on
    :data:`CALIBRATION` triplets (rows for a learner without triplets) of
    ``X, y`` (a partition), over the difference in examples -- the fixed
    costs (validation, preprocessing) cancel.  None when it cannot be
    measured (no labels, a learner without those parameters, a failed fit)."""
    import warnings

    from sklearn.base import clone
    if y is None:
        return None
    params = learner.get_params(deep=False)
    triplets = "n_triplets" in params and getattr(learner, "_needs_triplets", True)
    times = []
    for k in (CALIBRATION[0] // 10,) + tuple(CALIBRATION):    # the first compiles
        est = clone(learner)
        new = {key: v for key, v in (("max_iter", 1), ("tol", None), ("verbose", 0))
               if key in params}
        if triplets:
            new["n_triplets"] = k
            Xs, ys = X[:CALIBRATION_ROWS], y[:CALIBRATION_ROWS]
        else:
            Xs, ys = X[:k], y[:k]
        try:
            est.set_params(**new)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time.perf_counter()
                est.fit(Xs, ys)
                times.append(time.perf_counter() - t)
        except Exception:         # noqa: BLE001 - no calibration: the GEMM rate is used
            return None
    times = times[1:]
    if not triplets:
        n = [min(k, X.shape[0]) for k in CALIBRATION]
        if n[1] <= n[0]:
            return None
    else:
        n = list(CALIBRATION)
    slope = (times[1] - times[0]) / (n[1] - n[0])
    # fixed costs dominate (or noise): the per-example cost is below what two
    # small fits resolve; the GEMM lower bound is used instead
    return slope if slope > 0 else None


def decide(*, examples: int, d: int, round_trip_s: float, threads: int,
           per_example_s: float | None = None, ship_bytes: int = 0, rounds: int = 1,
           syncs: int = 1) -> dict:
    """The cost model's prediction for one pass: ``local_s`` (in process),
    ``cluster_s``, the ``decision`` and its inputs.  ``per_example_s`` (the
    learner's measured cost, :func:`seconds_per_example`) when known, else
    ``d**2`` multiply-adds per example at :func:`machine_rate`.  ``ship_bytes``
    of partitions held by the driver are sent to the workers once per fit
    (at :data:`SHIP_RATE`), a cost spread over the ``rounds`` (passes).
    ``syncs``: round trips per pass (parameter mixing mixes once per
    in-memory block), each costing ``round_trip_s``."""
    rate = machine_rate(d)
    work = float(max(examples, 1)) * float(d) ** 2
    local = work / rate if per_example_s is None else float(max(examples, 1)) * per_example_s
    P = max(int(threads), 1)
    ship = float(ship_bytes) / SHIP_RATE
    cluster = max(int(syncs), 1) * float(round_trip_s) + local / P + ship / max(int(rounds), 1)
    decision = "cluster" if P > 1 and local > MARGIN * cluster else "in-process"
    return {"decision": decision, "local_s": local, "cluster_s": cluster,
            "round_trip_s": float(round_trip_s), "threads": P, "rate": rate,
            "per_example_s": per_example_s, "ship_s": ship, "rounds": int(rounds),
            "syncs_per_pass": max(int(syncs), 1),
            "examples": int(examples), "d": int(d)}
