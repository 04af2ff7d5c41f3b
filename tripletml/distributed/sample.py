"""Gather a bounded sample and fit on the driver (strategy ``"sample"``).

ITML's Bregman projections and COMET's coordinate steps sweep their
constraints sequentially and revisit every one of them; they have no
data-parallel form that keeps their guarantees.  Their constraints are a
bounded sample by construction (``n_triplets`` triplets, metric-learn's
``20 c^2`` pairs for ITML), so the partitions sample their share of the
triplets (:class:`~tripletml.distributed.partitioned.Supervision`), and only the
rows those triplets touch travel to the driver, where the learner's own
in-memory solver runs on them with the preprocessing fitted on *all* rows.
The model is therefore the in-memory fit on the gathered rows and triplets:
the same as ``learner.fit(X_sample, triplets=T)`` with the collection's
preprocessing.

Learners that use the class labels themselves (``sampling`` giving
:class:`~tripletml.triplets.ClassCodes`, e.g. RCA's chunklets) receive a
uniform sample of at most :data:`SAMPLE_ROWS` rows with their labels (all
rows when the collection is smaller), drawn per partition in proportion to
its rows with the seed ``(seed, partition)``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.triplets import AllLabels, ClassCodes
from tripletml.distributed.strategy import PartitionedStrategy, partition_shares

__all__ = ["fit", "SAMPLE_ROWS", "gather_triplet_rows", "STRATEGY"]

#: rows gathered at most for a learner that uses labels directly
SAMPLE_ROWS = 200_000


def _triplet_rows_task(p, sup):
    """The raw rows the partition's triplets touch and the triplets
    renumbered into them."""
    T = sup.triplets(p)
    used = np.unique(T.ravel())
    T = np.searchsorted(used, T).astype(np.int64)
    return p.X[used], T


def _row_sample_task(p, sup, k):
    rows = np.sort(np.random.default_rng([sup.seed, p.index, 0]).choice(
        p.n_rows, size=min(int(k), p.n_rows), replace=False))
    return p.X[rows], sup.codes_of(p)[rows]


def _stack(blocks):
    if any(sp.issparse(b) for b in blocks):
        return sp.vstack([sp.csr_matrix(b) for b in blocks], format="csr")
    return np.ascontiguousarray(np.vstack(blocks), dtype=np.float64)


def gather_triplet_rows(plan):
    """``(X, T)`` on the driver: the raw rows every partition's triplets
    touch, stacked in partition order, and the triplets renumbered into
    them."""
    be, sup = plan.backend, plan.supervision
    parts = be.gather(be.map(_triplet_rows_task, sup))
    Xs, Ts, off = [], [], 0
    for X, T in parts:
        Xs.append(X)
        Ts.append(T + off)
        off += X.shape[0]
    return _stack(Xs), np.ascontiguousarray(np.vstack(Ts), dtype=np.int64)


def _prepared(learner, X):
    pre = learner.scaler_
    if pre.mode_ is not None and sp.issparse(X):
        X = np.ascontiguousarray(X.toarray(), dtype=np.float64)
        return pre.transform(X, copy=False) if learner._fit_preprocessed else X
    return pre.transform(X) if learner._fit_preprocessed else X


def fit(learner, plan) -> None:
    """Gather the sample and run the learner's in-memory ``_fit`` on it."""
    be, sup = plan.backend, plan.supervision
    if isinstance(sup.sampler, AllLabels):
        k = partition_shares(min(SAMPLE_ROWS, plan.n_total), plan.n_rows)
        parts = be.gather(be.map(_row_sample_task_k, sup, tuple(k)))
        X = _stack([x for x, _ in parts])
        codes = np.concatenate([c for _, c in parts])
        got = ClassCodes(codes)
        plan.info["report"] = {"gathered_rows": int(X.shape[0])}
    else:
        X, got = gather_triplet_rows(plan)
        plan.info["report"] = {"gathered_rows": int(X.shape[0])}
    learner._fit(_prepared(learner, X), got, plan.rng)


def _row_sample_task_k(p, sup, ks):
    return _row_sample_task(p, sup, ks[p.index])


#: the strategy of every learner without one of its own
#: (:class:`~tripletml.distributed.strategy.PartitionedStrategy`)
STRATEGY = PartitionedStrategy("sample", fit)
