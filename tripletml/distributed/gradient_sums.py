"""Gradient sums over the partitions, the solver step on the driver
(strategy ``"gradients"``): the generic rounds of LowRankDML
(:mod:`tripletml.algorithms.lowrank_dml.distributed`) and SML
(:mod:`tripletml.algorithms.sml.distributed`).

A learner whose steps need only sums over triplets runs its own solver on
the driver, on a stand-in problem (a :class:`Rounds` subclass the
algorithm defines) whose sums run on the partitions.  The *global* triplet
list is the concatenation of the partitions' triplets in partition order
(partition p's local row ids offset by the rows of the partitions before
it), ``m`` triplets in all.  Each round the driver broadcasts the current
model (:data:`MODEL` marks its place among a task's arguments), every
partition computes its part of the sum over *its* triplets, the parts are
added by the backend's fixed reduction tree, and the solver's own step runs
on the driver.  The iterates are therefore those of the in-memory fit on
the concatenated rows with the global triplets (and the same
preprocessing), to rounding: the per-row products are the same, only the
order of the partition sums differs.

A task loads its partition, keeps the triplets it computed in the first
round (a per-partition state: an (m_p, 3) index array) and preprocesses only
the rows its triplets touch (:func:`local_rows`).

With ``fit_partitioned(checkpoint_dir=)`` the driver's solver state is saved
every ``checkpoint_every`` passes over the triplets (:func:`checkpoints`,
:mod:`tripletml.engine.resume`); a driver that dies continues from there with
the iterates of an uninterrupted run.
"""
from __future__ import annotations

import functools
import uuid
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from tripletml.distributed.strategy import PartitionedStrategy
from tripletml.engine.resume import Checkpoints

__all__ = ["fit", "strategy", "Rounds", "MODEL", "local_rows", "concat", "checkpoints"]


# ---------------------------------------------------------------------------
# tasks (module-level, pure)
# ---------------------------------------------------------------------------
def _triplets_task(p, sup) -> np.ndarray:
    """The partition's triplets (local row ids), kept as its state."""
    return np.ascontiguousarray(sup.triplets(p), dtype=np.int64)


def _count(T) -> int:
    return int(T.shape[0])


def _prepared(sup, X):
    """Rows ``X`` (raw, a private copy) as the learner's solver sees them:
    the fitted preprocessing (row by row) applied, CSR densified when it
    maps to dense rows."""
    pre = sup.preprocessor
    if pre is None or not sup.preprocessed:
        return X
    if pre.mode_ is not None and sp.issparse(X):
        return pre.transform(np.ascontiguousarray(X.toarray(), dtype=np.float64), copy=False)
    return pre.transform(X, copy=not isinstance(X, np.ndarray))


def local_rows(p, T, sup):
    """The preprocessed rows the triplets ``T`` (local ids) touch and ``T``
    renumbered into them."""
    used, inv = np.unique(T.ravel(), return_inverse=True)
    X = p.X[used]
    if isinstance(X, np.ndarray):
        X = np.ascontiguousarray(X, dtype=np.float64)
    return _prepared(sup, X), inv.reshape(T.shape).astype(np.int64)


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
def concat(*parts) -> np.ndarray:
    """Reduce: the parts concatenated (in partition order)."""
    return np.concatenate(parts)


class _Model:
    """The model broadcast in one round.  Its Dask token is the fit and the
    round, so every round's scatter has its own key: a model equal to an
    earlier round's (W = 0 for a few iterations, a clipped dual point)
    never reuses a key whose release may still be on its way to the
    workers."""

    __slots__ = ("value", "fit_id", "round")

    def __init__(self, value, fit_id: str, round_: int):
        self.value, self.fit_id, self.round = value, fit_id, round_

    def __dask_tokenize__(self):
        return ("tripletml.gradient_sums.model", self.fit_id, self.round)

    def __getstate__(self):
        return (self.value, self.fit_id, self.round)

    def __setstate__(self, state):
        self.value, self.fit_id, self.round = state


# ---------------------------------------------------------------------------
# driver-side problems
# ---------------------------------------------------------------------------
class Rounds:
    """Map-reduce rounds over the partitions with their triplets as state."""

    #: a checkpoint keeps the counts of the rounds before it
    #: (:mod:`tripletml.engine.resume`)
    checkpoint_fields = ("rounds", "shipped")

    def check_restored(self, n_iter: int) -> bool:
        return self.rounds >= n_iter and self.shipped >= 0

    def __init__(self, plan, states, counts):
        self.plan = plan
        self.backend, self.sup = plan.backend, plan.supervision
        self.states = states
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.m = int(self.offsets[-1])
        #: map-reduce rounds run and model floats broadcast
        self.rounds = 0
        self.shipped = 0
        self._fit_id = uuid.uuid4().hex

    def _round(self, task, merge, *shared, model=None):
        """``merge``-reduce of ``task(partition, triplets, sup, *shared)``
        over the partitions, gathered; ``model`` is broadcast and takes the
        place of :data:`MODEL` in ``shared``."""
        be = self.backend
        mh = None
        if model is not None:
            self.shipped += int(np.size(model))
            mh = be.broadcast(_Model(model, self._fit_id, self.rounds))
        handles = be.map(task, self.sup, *[mh if a is MODEL else a for a in shared],
                         states=self.states)
        root = be.reduce(merge, handles)
        out = be.gather(root)
        be.release(handles)
        if all(root is not h for h in handles):
            be.release(root)
        if mh is not None and not isinstance(mh, _Model):
            be.release(mh)
        self.rounds += 1
        return out


#: placeholder for the broadcast model among a round's shared arguments
MODEL = object()


# ---------------------------------------------------------------------------
# the strategy
# ---------------------------------------------------------------------------
def fit(learner: Any, plan, *, train: Callable) -> None:
    """Fit ``learner`` on the partitions of ``plan`` by gradient sums (see
    the module docstring): every partition's triplets become its state,
    ``train(learner, plan, states, counts, d)`` runs the learner's solver on
    its driver-side problem (a :class:`Rounds` subclass, returned), and
    ``plan.info["report"]`` gets ``rounds`` (the map-reduce rounds),
    ``shipped_floats`` (model floats broadcast in all) and ``triplets`` (the
    global triplet count)."""
    owner = type(learner).__name__
    be = plan.backend
    states = be.map(_triplets_task, plan.supervision)
    try:
        counts = be.gather(be.apply(_count, states))
        if sum(counts) == 0:
            raise ValueError(f"{owner}: the collection's partitions hold no triplet")
        d = int(learner.scaler_.n_features_out_)
        prob = train(learner, plan, states, counts, d)
    finally:
        be.release(states)
    plan.info["report"] = {"rounds": int(prob.rounds), "shipped_floats": int(prob.shipped),
                           "triplets": int(prob.m)}


def checkpoints(plan) -> Checkpoints | None:
    """The checkpoints of ``plan`` (``fit_partitioned(checkpoint_dir=)``) as
    the driver-side solver's run sees them
    (:func:`tripletml.engine.resume.run_resumable`): a checkpoint every
    ``checkpoint_every`` rounds, a round being the solver's iterations per
    pass over the triplets (``unit``, set by the learner: one for SML's
    full sums, ``m / batch_size`` for LowRankDML's minibatches), and at the
    end; the files are named by the iteration count.  None without a
    checkpoint directory."""
    ck = plan.checkpoint
    if ck is None:
        return None

    def save(n_iter: int, arrays: dict, meta: dict, last: bool) -> None:
        # due by the run's own rule (rounds of `unit` iterations): written now
        plan.save_round(n_iter, arrays, last=True, meta=meta)
    return Checkpoints(resumed=plan.resumed, save=save, every=int(ck.every))


def strategy(train: Callable) -> PartitionedStrategy:
    """The ``"gradients"`` strategy of a learner whose solver runs on the
    driver-side problem ``train(learner, plan, states, counts, d)`` builds
    and fits (see :func:`fit`); its iterations are checkpointed
    (:func:`checkpoints`)."""
    return PartitionedStrategy("gradients", functools.partial(fit, train=train),
                               checkpoints=True)
