"""Gradient sums over the partitions, the solver step on the driver
(strategy ``"gradients"``): LowRankDML and SML.

Both learners' steps need only sums over triplets:

* **LowRankDML** (Zhang & Zhang, "Efficient stochastic optimization for
  low-rank distance metric learning", AAAI 2017, Algorithm 1): the
  minibatch (sub)gradient ``g_B = 1/|B| sum_{t in B} (w_a a_t a_t^T - w_b
  b_t b_t^T)`` of eq. (2) and, every ``eval_every`` iterations, the
  objective ``F(W) = 1/m sum_t loss_t(W) + alpha tr(W)``;
* **SML** (Ying, Huang & Campbell, "Sparse metric learning via smooth
  optimization", NIPS 2009, Table 1): the operator ``A u = sum_tau u_tau
  X_tau`` (steps 2 and 3, the Lemma 3 maximiser and the line search), the
  margins ``<X_tau, M>`` (the gradient (13) of ``phi_mu`` and the objective
  (4)) and the Lipschitz constant ``sum_tau ||X_tau||_F^2 / (2 mu)``
  (Lemma 2).

The *global* triplet list is the concatenation of the partitions' triplets
in partition order (partition p's local row ids offset by the rows of the
partitions before it), ``m`` triplets in all.  Each round the driver
broadcasts the current model -- LowRankDML's factor ``L = U diag(s)^(1/2)``
(d x r) for ``solver="incsvd"``, never a d x d matrix; the dense W of the
dense baselines; SML's dual point ``u`` or the d x d iterate it holds --
every partition computes its part of the sum over *its* triplets, the parts
are added by the backend's fixed reduction tree, and the solver's own step
(Brand's incremental eigen-update and the projection of Theorems 1-3, the
eigen-projection of the baselines, Nesterov's step with its backtracking
line search) runs on the driver with the learner's own solver code
(:meth:`LowRankDML._fit_problem`, :meth:`SML._fit_problem`) on a stand-in
problem (:class:`PartitionedDMLProblem`, :class:`PartitionedSMLProblem`)
whose sums run on the partitions.

LowRankDML's minibatches are drawn over the global list by
:class:`~tripletml.algorithms.lowrank_dml.kernels.Minibatches` with the driver's
generator, exactly as in memory, and each partition receives the batch
positions that fall into it; the driver puts the returned gradient columns
back in batch order, so the factor ``A diag(signs) A^T`` is the in-memory
one column for column.  The iterates are therefore those of the in-memory
fit on the concatenated rows with the global triplets (and the same
preprocessing), to rounding: the per-row products are the same, only the
order of the partition sums differs.

A task loads its partition, keeps the triplets it computed in the first
round (a per-partition state: an (m_p, 3) index array) and preprocesses only
the rows its triplets touch.  Per iteration: one round for LowRankDML (plus
one per objective evaluation), two for SML (``A u`` and the margins) plus
one per line-search trial.
"""
from __future__ import annotations

from typing import Any

import uuid

import numpy as np
import scipy.sparse as sp

from tripletml.algorithms.sml.kernels import SMLProblem, _overflow
from tripletml.linalg.triplet_dml import TripletDMLProblem
from tripletml.distributed.reduction import tree_sum

__all__ = ["fit", "PartitionedDMLProblem", "PartitionedSMLProblem"]


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


def _local(p, T, sup):
    """The preprocessed rows the triplets ``T`` (local ids) touch and ``T``
    renumbered into them."""
    used, inv = np.unique(T.ravel(), return_inverse=True)
    X = p.X[used]
    if isinstance(X, np.ndarray):
        X = np.ascontiguousarray(X, dtype=np.float64)
    return _prepared(sup, X), inv.reshape(T.shape).astype(np.int64)


def _dml_problem(p, T, sup, spec) -> TripletDMLProblem:
    loss, alpha, c = spec
    X, Tl = _local(p, T, sup)
    return TripletDMLProblem(X, Tl, loss, alpha, c)


def _dml_rows_task(p, T, sup, spec, batch, n_batch, model, dense, scale):
    """Partition p's columns of the minibatch factor (eq. 2's subgradient):
    ``(batch positions of the a-rows, a-rows, positions of the b-rows,
    b-rows, loss sum)``, or None when no triplet of the batch is here."""
    local, where = batch[p.index]
    if local.size == 0:
        return None
    model = model.value
    prob = _dml_problem(p, T[local], sup, spec)
    ka, Ra, kb, Rb, loss = prob.gradient_rows(
        np.arange(local.size), L=None if dense else model, W=model if dense else None,
        scale=scale, n_batch=n_batch)
    return where[ka], Ra, where[kb], Rb, loss


def _dml_dense_task(p, T, sup, spec, batch, n_batch, W):
    """Partition p's part ``X^T C X / |B|`` of the dense minibatch gradient
    and its loss sum, or None."""
    local, _ = batch[p.index]
    if local.size == 0:
        return None
    prob = _dml_problem(p, T[local], sup, spec)
    return prob.dense_gradient_sum(np.arange(local.size), W.value, n_batch=n_batch)


def _dml_loss_task(p, T, sup, spec, model, dense) -> float:
    """``sum_t loss_t(W)`` over the partition's triplets."""
    if T.shape[0] == 0:
        return 0.0
    prob = _dml_problem(p, T, sup, spec)
    model = model.value
    return prob.loss_sum_dense(model) if dense else prob.loss_sum_factored(model)


def _sml_problem(p, T, sup, alpha) -> SMLProblem:
    X, Tl = _local(p, T, sup)
    return SMLProblem(X, Tl, alpha)


def _sml_tau_task(p, T, sup, alpha, d) -> float:
    """``sum_tau ||X_tau||_F^2`` over the partition's triplets (Lemma 2)."""
    if T.shape[0] == 0:
        return 0.0
    return float(np.sum(_sml_problem(p, T, sup, alpha).tau_norms2))


def _sml_A_task(p, T, sup, alpha, d, u, offsets):
    """Partition p's part of ``A u`` (unsymmetrised), its slice of u."""
    if T.shape[0] == 0:
        return None
    a, b = offsets[p.index], offsets[p.index + 1]
    return _sml_problem(p, T, sup, alpha).A_sum(np.ascontiguousarray(u.value[a:b]))


def _sml_margins_task(p, T, sup, alpha, d, M) -> np.ndarray:
    """``<X_tau, M>`` for the partition's triplets (in order)."""
    if T.shape[0] == 0:
        return np.zeros(0)
    return _sml_problem(p, T, sup, alpha).margins(M.value)


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
def _concat(*parts) -> np.ndarray:
    return np.concatenate(parts)


def _vstack(blocks):
    if any(sp.issparse(b) for b in blocks):
        return sp.vstack([sp.csr_matrix(b) for b in blocks], format="csr")
    return np.vstack(blocks)


def _merge_rows(*parts):
    """Concatenate the partitions' factor rows (with their batch positions)
    and add their loss sums."""
    parts = [q for q in parts if q is not None]
    if not parts:
        return None
    return (np.concatenate([q[0] for q in parts]), _vstack([q[1] for q in parts]),
            np.concatenate([q[2] for q in parts]), _vstack([q[3] for q in parts]),
            tree_sum(*[q[4] for q in parts]))


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
class _Rounds:
    """Map-reduce rounds over the partitions with their triplets as state."""

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
        place of :data:`_MODEL` in ``shared``."""
        be = self.backend
        mh = None
        if model is not None:
            self.shipped += int(np.size(model))
            mh = be.broadcast(_Model(model, self._fit_id, self.rounds))
        handles = be.map(task, self.sup, *[mh if a is _MODEL else a for a in shared],
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
_MODEL = object()


class PartitionedDMLProblem(_Rounds):
    """The driver's stand-in for
    :class:`~tripletml.linalg.triplet_dml.TripletDMLProblem` on the global
    triplet list: :meth:`gradient_factor`, :meth:`dense_gradient` and the
    objectives are sums over the partitions' triplets computed where the
    partitions are.  The LowRankDML solvers
    (:data:`~tripletml.algorithms.lowrank_dml.kernels.SOLVERS`) run on it unchanged."""

    def __init__(self, plan, states, counts, *, d: int, loss: str, alpha: float,
                 push_weight: float):
        super().__init__(plan, states, counts)
        self.n, self.d = plan.n_total, int(d)
        self.loss, self.alpha, self.c = loss, float(alpha), float(push_weight)
        self.spec = (loss, self.alpha, self.c)
        self.batch_loss = float("nan")

    def _split(self, idx) -> tuple:
        """Per partition: the local positions of the batch's triplets in it
        and their positions in the batch (ascending)."""
        idx = np.asarray(idx, dtype=np.int64)
        part = np.searchsorted(self.offsets, idx, side="right") - 1
        out = []
        for k in range(len(self.offsets) - 1):
            where = np.flatnonzero(part == k)
            out.append((idx[where] - self.offsets[k], where))
        return tuple(out)

    def gradient_factor(self, idx, L=None, W=None, scale: float = 1.0):
        """As :meth:`TripletDMLProblem.gradient_factor` (the columns in the
        same order)."""
        dense = W is not None
        model = W if dense else L
        pa, Ra, pb, Rb, loss = self._round(_dml_rows_task, _merge_rows, self.spec,
                                           self._split(idx), len(idx), _MODEL, dense,
                                           float(scale), model=model)
        self.batch_loss = loss / len(idx)
        oa, ob = np.argsort(pa, kind="stable"), np.argsort(pb, kind="stable")
        return TripletDMLProblem.factor_from_rows(Ra[oa], Rb[ob])

    def dense_gradient(self, idx, W: np.ndarray, include_alpha: bool = False) -> np.ndarray:
        """As :meth:`TripletDMLProblem.dense_gradient`."""
        G, loss = self._round(_dml_dense_task, tree_sum, self.spec, self._split(idx), len(idx),
                              _MODEL, model=W)
        self.batch_loss = loss / len(idx)
        G = 0.5 * (G + G.T)
        if include_alpha:
            G[np.diag_indices_from(G)] += self.alpha
        return G

    def objective_factored(self, L: np.ndarray) -> float:
        total = self._round(_dml_loss_task, tree_sum, self.spec, _MODEL, False, model=L)
        return total / self.m + self.alpha * float(np.sum(L * L))

    def objective_dense(self, W: np.ndarray) -> float:
        total = self._round(_dml_loss_task, tree_sum, self.spec, _MODEL, True, model=W)
        return total / self.m + self.alpha * float(np.trace(W))


class PartitionedSMLProblem(_Rounds, SMLProblem):
    """The driver's stand-in for :class:`~tripletml.algorithms.sml.kernels.SMLProblem`
    on the global triplet list: ``A u`` (:meth:`A_sum`), the margins and the
    Lipschitz constant are sums (concatenations) over the partitions; ``phi``
    (Lemma 3), the objective (4) and the solvers' steps are SML's own."""

    def __init__(self, plan, states, counts, *, d: int, alpha: float):
        _Rounds.__init__(self, plan, states, counts)
        self.X, self.d, self.alpha = None, int(d), float(alpha)
        self.radius = float(np.sqrt(self.m / self.alpha))
        self._tau_total = self._round(_sml_tau_task, tree_sum, self.alpha, self.d)
        if not np.isfinite(self._tau_total):
            raise _overflow("sum_tau ||X_tau||_F^2")

    def lipschitz(self, mu: float) -> float:
        return float(self._tau_total) / (2.0 * mu)

    def A_sum(self, u: np.ndarray) -> np.ndarray:
        G = self._round(_sml_A_task, tree_sum, self.alpha, self.d, _MODEL, self.offsets,
                        model=np.asarray(u, dtype=np.float64))
        return np.zeros((self.d, self.d)) if G is None else G

    def margins(self, M: np.ndarray) -> np.ndarray:
        return self._round(_sml_margins_task, _concat, self.alpha, self.d, _MODEL, model=M)


# ---------------------------------------------------------------------------
# the strategy
# ---------------------------------------------------------------------------
def fit(learner: Any, plan) -> None:
    """Fit LowRankDML or SML on the partitions of ``plan`` by gradient sums
    (see the module docstring); sets the learner's fitted attributes as its
    in-memory ``_fit`` does and ``plan.info["report"]`` (``rounds``: the
    map-reduce rounds, ``shipped_floats``: model floats broadcast in all,
    ``triplets``: the global triplet count)."""
    from tripletml.algorithms.lowrank_dml.estimator import LowRankDML
    from tripletml.algorithms.sml.estimator import SML

    owner = type(learner).__name__
    if not isinstance(learner, (LowRankDML, SML)):
        raise ValueError(f"{owner}: the 'gradients' strategy trains LowRankDML and SML only")
    be = plan.backend
    states = be.map(_triplets_task, plan.supervision)
    try:
        counts = be.gather(be.apply(_count, states))
        if sum(counts) == 0:
            raise ValueError(f"{owner}: the collection's partitions hold no triplet")
        d = int(learner.scaler_.n_features_out_)
        if isinstance(learner, LowRankDML):
            learner._check_solver_memory(d)
            prob = PartitionedDMLProblem(plan, states, counts, d=d, loss=learner.loss,
                                         alpha=learner.alpha,
                                         push_weight=learner.push_weight)
            learner._fit_problem(prob, plan.rng)
        else:
            prob = PartitionedSMLProblem(plan, states, counts, d=d, alpha=learner.alpha)
            learner._fit_problem(prob)
    finally:
        be.release(states)
    plan.info["report"] = {"rounds": int(prob.rounds), "shipped_floats": int(prob.shipped),
                           "triplets": int(prob.m)}
