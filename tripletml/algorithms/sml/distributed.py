"""SML over the partitions of a collection (strategy ``"gradients"``,
:mod:`tripletml.distributed.gradient_sums`).

Ying, Huang & Campbell, "Sparse metric learning via smooth optimization",
NIPS 2009, Table 1: the steps need the operator ``A u = sum_tau u_tau
X_tau`` (steps 2 and 3, the Lemma 3 maximizer and the line search), the
margins ``<X_tau, M>`` (the gradient (13) of ``phi_mu`` and the objective
(4)) and the Lipschitz constant ``sum_tau ||X_tau||_F^2 / (2 mu)`` (Lemma
2): sums (concatenations) over the partitions' triplets
(:class:`PartitionedSMLProblem`); ``phi`` (Lemma 3), the objective (4) and
Nesterov's step with its backtracking line search run on the driver with
SML's own code.  Each round broadcasts the dual point ``u`` or the d x d
iterate; an iteration is two rounds (``A u`` and the margins) plus one per
line-search trial.
"""
from __future__ import annotations

import numpy as np

from tripletml.algorithms.sml.kernels import SMLProblem, _overflow
from tripletml.distributed import gradient_sums
from tripletml.distributed.gradient_sums import MODEL, Rounds, concat, local_rows
from tripletml.distributed.reduction import tree_sum

__all__ = ["PartitionedSMLProblem", "STRATEGY"]


# ---------------------------------------------------------------------------
# tasks (module-level, pure)
# ---------------------------------------------------------------------------
def _sml_problem(p, T, sup, alpha) -> SMLProblem:
    X, Tl = local_rows(p, T, sup)
    return SMLProblem(X, Tl, alpha)


def _sml_tau_task(p, T, sup, alpha, d) -> float:
    """``sum_tau ||X_tau||_F^2`` over the partition's triplets (Lemma 2)."""
    if T.shape[0] == 0:
        return 0.0
    return float(np.sum(_sml_problem(p, T, sup, alpha).tau_norms2))


def _sml_A_task(p, T, sup, alpha, d, u, offsets):
    """Partition p's part of ``A u`` (unsymmetrized), its slice of u."""
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
# the driver-side problem
# ---------------------------------------------------------------------------
class PartitionedSMLProblem(Rounds, SMLProblem):
    """The driver's stand-in for :class:`~tripletml.algorithms.sml.kernels.SMLProblem`
    on the global triplet list: ``A u`` (:meth:`A_sum`), the margins and the
    Lipschitz constant are sums (concatenations) over the partitions; ``phi``
    (Lemma 3), the objective (4) and the solvers' steps are SML's own."""

    def __init__(self, plan, states, counts, *, d: int, alpha: float):
        Rounds.__init__(self, plan, states, counts)
        self.X, self.d, self.alpha = None, int(d), float(alpha)
        self.radius = float(np.sqrt(self.m / self.alpha))
        self._tau_total = self._round(_sml_tau_task, tree_sum, self.alpha, self.d)
        if not np.isfinite(self._tau_total):
            raise _overflow("sum_tau ||X_tau||_F^2")

    def lipschitz(self, mu: float) -> float:
        return float(self._tau_total) / (2.0 * mu)

    def A_sum(self, u: np.ndarray) -> np.ndarray:
        G = self._round(_sml_A_task, tree_sum, self.alpha, self.d, MODEL, self.offsets,
                        model=np.asarray(u, dtype=np.float64))
        return np.zeros((self.d, self.d)) if G is None else G

    def margins(self, M: np.ndarray) -> np.ndarray:
        return self._round(_sml_margins_task, concat, self.alpha, self.d, MODEL, model=M)


def _train(learner, plan, states, counts, d: int) -> PartitionedSMLProblem:
    """SML's own solver (:meth:`SML._fit_problem`) on the partitions' sums
    (under the partitioned fit's thread rule,
    :func:`tripletml.distributed.partitioned._run_strategy`: the rounds'
    products and the d x d ``eigh`` are as small as an in-memory fit's)."""
    prob = PartitionedSMLProblem(plan, states, counts, d=d, alpha=learner.alpha)
    learner._fit_problem(prob, checkpoints=gradient_sums.checkpoints(plan), rng=plan.rng)
    return prob


#: sums over the partitions, Nesterov's steps on the driver
STRATEGY = gradient_sums.strategy(_train)
