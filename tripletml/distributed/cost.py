"""Can the cluster pay off?  A measured cost model for a partitioned fit
(issue 41 section 3: small data stays small).

Per round a partitioned fit does work ``W`` -- about ``m * d**2``
multiply-adds for ``m`` triplets (or rows, for the statistics strategy) in
``d`` features: OASIS, LORETA's and SDCA's updates, KISSME's scatter
matrices all touch a ``d x d`` model or statistic once per example -- and
pays, on a cluster, a round trip ``t_rt`` (task submission, shipping the
partitions' graph and the model, the reduction, the gather).  With
``P`` worker threads and this machine's measured rate ``r`` (multiply-adds
per second in a BLAS product of the model's shape)::

    in process:  T_1 = W / r
    cluster:     T_P = t_rt + W / (P r)

so the cluster pays off only when ``W / r * (1 - 1/P) > t_rt``; the model
asks for a margin (:data:`MARGIN`) over that.  ``t_rt`` is measured on the
fit's own cluster: the wall time of its first map-reduce (the survey of the
partitions: one task per partition, shipping each partition's rows as every
later round does, and the gather).  ``r`` is measured once per process on a
``(4096, d) @ (d, d)`` product.  Both sides scale with the number of rounds,
which therefore drops out.

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

__all__ = ["MARGIN", "LOCAL_BYTES", "ClusterCostWarning", "machine_rate", "decide",
           "backend_choice"]

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
    """Multiply-adds per second of this process on a ``(4096, d) @ (d, d)``
    product (best of three; cached per ``d``)."""
    d = int(max(1, min(d, 2048)))
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((4096, d)), rng.standard_normal((d, d))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t)
    return 4096.0 * d * d / max(best, 1e-6)


def decide(*, examples: int, d: int, round_trip_s: float, threads: int) -> dict:
    """The cost model's prediction for one round: ``local_s`` (in process),
    ``cluster_s``, the ``decision`` and its inputs."""
    rate = machine_rate(d)
    work = float(max(examples, 1)) * float(d) ** 2
    local = work / rate
    P = max(int(threads), 1)
    cluster = float(round_trip_s) + local / P
    decision = "cluster" if P > 1 and local > MARGIN * cluster else "in-process"
    return {"decision": decision, "local_s": local, "cluster_s": cluster,
            "round_trip_s": float(round_trip_s), "threads": P, "rate": rate,
            "examples": int(examples), "d": int(d)}
