"""LowRankDML over the partitions of a collection (strategy ``"gradients"``,
:mod:`tripletml.distributed.gradient_sums`).

Zhang & Zhang, "Efficient stochastic optimization for low-rank distance
metric learning", AAAI 2017, Algorithm 1: the step needs the minibatch
(sub)gradient ``g_B = 1/|B| sum_{t in B} (w_a a_t a_t^T - w_b b_t b_t^T)``
of eq. (2) and, every ``eval_every`` iterations, the objective ``F(W) = 1/m
sum_t loss_t(W) + alpha tr(W)``: sums over triplets, computed where the
partitions are (:class:`PartitionedDMLProblem`).  The minibatches are drawn
over the global triplet list by
:class:`~tripletml.algorithms.lowrank_dml.kernels.Minibatches` with the
driver's generator, exactly as in memory; each partition receives the batch
positions that fall into it and the driver puts the returned gradient
columns back in batch order, so the factor ``A diag(signs) A^T`` is the
in-memory one column for column.  Each round broadcasts the factor ``L = U
diag(s)^(1/2)`` (d x r) for ``solver="incsvd"``, never a d x d matrix (the
dense W of the dense baselines).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.distributed import gradient_sums
from tripletml.distributed.gradient_sums import MODEL, Rounds, local_rows
from tripletml.distributed.reduction import tree_sum
from tripletml.linalg.triplet_dml import TripletDMLProblem

__all__ = ["PartitionedDMLProblem", "STRATEGY"]


# ---------------------------------------------------------------------------
# tasks (module-level, pure)
# ---------------------------------------------------------------------------
def _dml_problem(p, T, sup, spec) -> TripletDMLProblem:
    loss, alpha, c = spec
    X, Tl = local_rows(p, T, sup)
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


# ---------------------------------------------------------------------------
# the driver-side problem
# ---------------------------------------------------------------------------
class PartitionedDMLProblem(Rounds):
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
                                           self._split(idx), len(idx), MODEL, dense,
                                           float(scale), model=model)
        self.batch_loss = loss / len(idx)
        oa, ob = np.argsort(pa, kind="stable"), np.argsort(pb, kind="stable")
        return TripletDMLProblem.factor_from_rows(Ra[oa], Rb[ob])

    def dense_gradient(self, idx, W: np.ndarray, include_alpha: bool = False) -> np.ndarray:
        """As :meth:`TripletDMLProblem.dense_gradient`."""
        G, loss = self._round(_dml_dense_task, tree_sum, self.spec, self._split(idx), len(idx),
                              MODEL, model=W)
        self.batch_loss = loss / len(idx)
        G = 0.5 * (G + G.T)
        if include_alpha:
            G[np.diag_indices_from(G)] += self.alpha
        return G

    def objective_factored(self, L: np.ndarray) -> float:
        total = self._round(_dml_loss_task, tree_sum, self.spec, MODEL, False, model=L)
        return total / self.m + self.alpha * float(np.sum(L * L))

    def objective_dense(self, W: np.ndarray) -> float:
        total = self._round(_dml_loss_task, tree_sum, self.spec, MODEL, True, model=W)
        return total / self.m + self.alpha * float(np.trace(W))


def _train(learner, plan, states, counts, d: int) -> PartitionedDMLProblem:
    """LowRankDML's own solver (:meth:`LowRankDML._fit_problem`) on the
    partitions' gradient sums, from ``W = 0`` (``start="auto"``; the identity
    start's scale is a median over all the triplets, which the partitions do
    not gather)."""
    if learner.start == "identity":
        raise ValueError("LowRankDML: start='identity' takes the identity's scale from all the "
                         "triplets, which a partitioned fit does not gather; the partitioned "
                         "fit starts at 0 (start='zero', or 'auto').")
    learner._check_solver_memory(d)
    prob = PartitionedDMLProblem(plan, states, counts, d=d, loss=learner.loss,
                                 alpha=learner.alpha, push_weight=learner.push_weight)
    learner._fit_problem(prob, plan.rng, checkpoints=gradient_sums.checkpoints(plan))
    return prob


#: gradient sums over the partitions, Brand's update on the driver
STRATEGY = gradient_sums.strategy(_train)
