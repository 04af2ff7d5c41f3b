"""Low-rank DML (Zhang & Zhang, "Efficient stochastic optimization for
low-rank distance metric learning", AAAI 2017): the problem, the
incremental-SVD SGD of Algorithm 1 and the five baselines of its Figure 2.

The objective (eq. 2 and the experiments' formulation), with alpha the
paper's lambda:

    F(W) = f(W) + alpha tr(W),   W PSD (optionally ||W||_F or ||W||_2 <= tau)

* ``loss="triplet"`` (the paper's experiment, after Qian et al. 2015a):
  ``f(W) = 1/m sum_t max(1 + ||x_i - x_j||_W^2 - ||x_i - x_k||_W^2, 0)``
  (the triplet hinge of :func:`tripletml.losses.triplet_hinge_array` of the
  margin ``||x_i - x_k||_W^2 - ||x_i - x_j||_W^2``).
* ``loss="lmnn"`` (the paper's worked example, LMNN with its pull term):
  ``f(W) = 1/m sum_t [c max(1 + ||a_t||_W^2 - ||b_t||_W^2, 0) + ||a_t||_W^2]``
  with ``a_t = x_i - x_j`` (the target-neighbor pair) and ``b_t = x_i - x_k``;
  the pairs are those of the triplets, so one sample of a triplet gives the
  paper's stochastic gradient (push and pull together).

A (sub)gradient over a set B of triplets is ``1/|B| sum_t (w_a a_t a_t^T -
w_b b_t b_t^T)`` with ``w_a = w_b = [margin_t > 0]`` (triplet) or ``w_a = c
[margin_t > 0] + 1, w_b = c [margin_t > 0]`` (lmnn).  It is handed to the
solvers either as a factor ``A diag(signs) A^T`` (columns ``a_t, b_t``; the
incremental-SVD solver) or densely as ``X^T C X`` with a sparse n x n
``C`` (the baselines: one sparse-dense product instead of m outer products).

Each solver keeps its own representation of W and exposes ``update(t, idx,
eta) -> float`` (one iteration on the triplets ``idx`` with step size
``eta``; returns the minibatch loss ``f_B(W_t)`` before the step), ``rank``
(None when unknown without an extra eigen-decomposition), ``objective()``
and ``finish() -> (U, s)`` with ``W = U diag(s) U^T``.  :data:`SOLVERS`
maps the estimator's ``solver`` names to them, :class:`Minibatches` draws
the triplets of each iteration and :func:`step_size` gives ``eta_t``;
:class:`Iterations` runs a solver under the training driver's protocol
(:mod:`tripletml.engine`).  The problem itself is
:class:`tripletml.linalg.triplet_dml.TripletDMLProblem` (shared with SML).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.linalg as sla

from tripletml.linalg.eig_update import (lowrank_eig_update, orthonormality_error, project_psd,
                                 project_spectrum, reorthonormalize_eig)
from tripletml.engine.stopping import relative_change
from tripletml.engine.driver import StepReport
from tripletml.linalg.triplet_dml import TripletDMLProblem

__all__ = ["TripletDMLProblem", "Iterations", "WATCH_BLOCK", "IncSVDSolver",
           "DenseProjectedSolver", "FrankWolfeSolver",
           "SGDOneProjectionSolver", "Minibatches", "SOLVERS", "AUTO_LEARNING_RATE",
           "DEFAULT_BATCH", "LEARNING_RATES", "step_size", "ORTHO_CHECK_EVERY", "ORTHO_TOL"]


#: iterations between orthonormality checks of U (incsvd)
ORTHO_CHECK_EVERY = 50
#: re-orthonormalize U when ``max |U^T U - I|`` exceeds this
ORTHO_TOL = 1e-12


def _check_finite(a: np.ndarray, t: int) -> None:
    if not np.isfinite(a).all():
        raise FloatingPointError(f"LowRankDML: training diverged at iteration {t} (non-finite "
                                 "W - eta g); scale the features down or lower eta0.")


class IncSVDSolver:
    """Algorithm 1: ``W = U diag(s) U^T`` (d x r), the minibatch gradient as
    ``A diag(signs) A^T``, Brand's update of ``W - eta g`` then the shifted
    projection of Theorem 1 / 2 / 3 on the small spectrum.  No d x d array
    where ``d > r + c``; O(d (r + c)^2) per iteration.  Where ``d <= r + c``
    (the span of a few rows) Brand's small matrix would be as large as W,
    and the update decomposes the d x d matrix directly (the same W, to
    rounding: :func:`tripletml.linalg.eig_update.lowrank_eig_update`)."""

    dense = False
    #: what a checkpoint saves (:mod:`tripletml.engine.resume`)
    checkpoint_fields = ("U", "s", "n_reorth", "n_gram_only")
    checkpoint_variable = ("U", "s")          # the rank grows

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        self.prob, self.constraint, self.tau = prob, constraint, tau
        self.U = np.zeros((prob.d, 0))
        self.s = np.zeros(0)
        self.n_reorth = 0
        #: updates that needed no QR (A well separated from span(U))
        self.n_gram_only = 0

    @property
    def L(self) -> np.ndarray:
        return self.U * np.sqrt(self.s)

    @property
    def rank(self) -> int:
        return int(self.s.size)

    def update(self, t: int, idx, eta: float) -> float:
        A, signs = self.prob.gradient_factor(idx, L=self.L, scale=eta)     # -eta g
        shift = eta * self.prob.alpha

        def project(mu):
            _check_finite(mu, t)
            return project_spectrum(mu, shift, self.constraint, self.tau)

        info = {}
        try:                                             # Pi[W - eta g - eta alpha I]
            V, lam = lowrank_eig_update(self.U, self.s, A, signs, project=project, info=info)
        except FloatingPointError:                     # overflow or non-finite input:
            _check_finite(np.array([np.nan]), t)         # raise the estimator's message
        self.n_gram_only += bool(info.get("gram_only", False))
        self.U = V
        self.s = lam
        if t % ORTHO_CHECK_EVERY == 0 and orthonormality_error(self.U) > ORTHO_TOL:
            self.U, self.s = reorthonormalize_eig(self.U, self.s)
            self.n_reorth += 1
        return self.prob.batch_loss

    def check_restored(self, n_iter: int) -> bool:
        # W = U diag(s) U^T is PSD: s >= 0 (to the rounding of a re-orthonormalisation)
        floor = -1e-12 * float(np.abs(self.s).max(initial=0.0))
        return (self.U.shape == (self.prob.d, self.s.size) and self.s.ndim == 1
                and bool((self.s >= floor).all()) and min(self.n_reorth, self.n_gram_only) >= 0)

    def objective(self) -> float:
        return self.prob.objective_factored(self.L)

    def finish(self):
        return self.U, self.s


class DenseProjectedSolver:
    """Projected (stochastic / minibatch / full) gradient descent on a dense
    W: ``W <- Pi[W - eta g - eta alpha I]`` with the projection by ``eigh``
    (O(d^3) per iteration, O(d^2) memory).  The baselines GD, SGD and
    SGD-Batch differ only in the triplets per step and the step sizes."""

    dense = True
    checkpoint_fields = ("W", "_eig_V", "_eig_l", "rank")
    checkpoint_variable = ("_eig_V", "_eig_l")

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        self.prob, self.constraint, self.tau = prob, constraint, tau
        self.W = np.zeros((prob.d, prob.d))
        self._eig_V, self._eig_l = np.zeros((prob.d, 0)), np.zeros(0)
        self.rank = 0

    def check_restored(self, n_iter: int) -> bool:
        return self._eig_V.shape == (self.prob.d, self._eig_l.size) \
            and self.rank == self._eig_l.size

    def update(self, t: int, idx, eta: float) -> float:
        G = self.prob.dense_gradient(idx, self.W)
        G *= -eta
        G += self.W                                     # W - eta g (G reused)
        _check_finite(G, t)
        self.W = None
        mu, V = sla.eigh(G, overwrite_a=True, check_finite=False, driver="evr")
        del G
        lam = project_spectrum(mu, eta * self.prob.alpha, self.constraint, self.tau)
        keep = lam > 0.0
        Vk, lk = V[:, keep], lam[keep]
        del V
        self.W = (Vk * lk) @ Vk.T
        self._eig_V, self._eig_l = Vk, lk
        self.rank = int(lk.size)
        return self.prob.batch_loss

    def objective(self) -> float:
        return self.prob.objective_dense(self.W)

    def finish(self):
        return self._eig_V[:, ::-1], self._eig_l[::-1]


def _eig_of(W: np.ndarray):
    mu, V = sla.eigh(W, check_finite=False, driver="evr")
    keep = mu > 1e-12 * max(1.0, float(np.max(np.abs(mu), initial=0.0)))
    return V[:, keep][:, ::-1], mu[keep][::-1]


class FrankWolfeSolver:
    """Frank-Wolfe (Jaggi 2013) on the full objective over ``PSD ∩ ball``:
    ``S = argmin_{S in K} <grad F(W), S>`` and ``W <- (1 - gamma) W + gamma
    S``, ``gamma = min(1, c / (t + 2))``.  Over ``PSD ∩ {||S||_F <= tau}`` the
    oracle is ``tau Pi_+(-G) / ||Pi_+(-G)||_F``, over ``PSD ∩ {||S||_2 <=
    tau}`` it is ``tau`` times the projector on the negative eigenspace of G;
    both need an ``eigh`` of the d x d gradient (no projection of W)."""

    dense = True
    rank = None
    checkpoint_fields = ("W",)

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        if constraint is None:
            raise ValueError("LowRankDML: solver='fw' needs a bounded set; set constraint="
                             "'frobenius' or 'spectral'.")
        self.prob, self.constraint, self.tau = prob, constraint, tau
        self.W = np.zeros((prob.d, prob.d))

    def update(self, t: int, idx, eta: float) -> float:
        G = self.prob.dense_gradient(idx, self.W, include_alpha=True)
        _check_finite(G, t)
        G *= -1.0
        mu, V = sla.eigh(G, overwrite_a=True, check_finite=False, driver="evr")
        del G
        pos = mu > 0.0
        Vp = V[:, pos]
        del V
        if not pos.any():
            S_scale, lam = 0.0, np.zeros(0)
        elif self.constraint == "frobenius":
            lam = mu[pos]
            S_scale = self.tau / float(np.linalg.norm(lam))
        else:
            lam = np.ones(int(pos.sum()))
            S_scale = self.tau
        gamma = min(1.0, eta)
        self.W *= 1.0 - gamma
        if lam.size:
            self.W += (gamma * S_scale) * ((Vp * lam) @ Vp.T)
        return self.prob.batch_loss

    def objective(self) -> float:
        return self.prob.objective_dense(self.W)

    def finish(self):
        return _eig_of(self.W)


class SGDOneProjectionSolver:
    """SGD with only one projection (Mahdavi et al. 2012): SGD on the
    augmented Lagrangian ``F(W) + nu g(W) - (gamma / 2) nu^2`` of the PSD
    constraint ``g(W) = -lambda_min(W) <= 0`` (subgradient ``-v v^T`` with v
    the bottom eigenvector, found by Lanczos: O(d^2) per matrix-vector
    product), the iterate kept in the cheap ball ``||W||_F <= tau`` (tau
    sqrt(d) for the spectral constraint) and the multiplier by ``nu <- [nu +
    eta (g(W) - gamma nu)]_+`` with ``gamma = eta``; the average iterate is
    projected onto the feasible set once, at the end.  ``objective()`` during
    training is that of the average iterate projected onto the PSD set only
    at the end, so intermediate values are of a possibly infeasible W."""

    dense = True
    rank = None
    checkpoint_fields = ("W", "avg", "nu", "_v")
    checkpoint_variable = ("_v",)             # None before the first step

    def check_restored(self, n_iter: int) -> bool:
        return (self._v is None or self._v.shape == (self.prob.d,)) and self.nu >= 0

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        self.prob, self.constraint, self.tau = prob, constraint, tau
        d = prob.d
        self.W = np.zeros((d, d))
        self.avg = np.zeros((d, d))
        self.nu = 0.0
        self._v = None
        self.radius = None if constraint is None else (
            tau if constraint == "frobenius" else tau * np.sqrt(d))

    def _bottom_eig(self):
        d = self.W.shape[0]
        if not self.W.any():
            v = np.zeros(d)
            v[0] = 1.0
            return 0.0, v
        if d <= 1500:
            mu, V = sla.eigh(self.W, subset_by_index=[0, 0], check_finite=False)
            return float(mu[0]), V[:, 0]
        from scipy.sparse.linalg import eigsh
        mu, V = eigsh(self.W, k=1, which="SA", v0=self._v, tol=1e-8)
        return float(mu[0]), V[:, 0]

    def update(self, t: int, idx, eta: float) -> float:
        G = self.prob.dense_gradient(idx, self.W, include_alpha=True)
        _check_finite(G, t)
        lmin, v = self._bottom_eig()
        self._v = v
        gval = -lmin
        G *= -eta
        G += self.W
        if self.nu > 0.0:
            G += (eta * self.nu) * np.outer(v, v)      # - eta nu grad g, grad g = -v v^T
        if self.radius is not None:
            norm = float(np.linalg.norm(G))
            if norm > self.radius:
                G *= self.radius / norm
        self.W = G
        self.nu = max(0.0, self.nu + eta * (gval - eta * self.nu))
        self.avg += (self.W - self.avg) / t
        return self.prob.batch_loss

    def objective(self) -> float:
        return self.prob.objective_dense(self.avg)

    def finish(self):
        self.W = project_psd(self.avg, 0.0, self.constraint, self.tau)
        return _eig_of(self.W)


class Minibatches:
    """Minibatches walking through random permutations of the m triplets (a
    batch may straddle two permutations); ``size=None`` or ``size >= m``
    gives every triplet in every batch.  ``next()`` loops at most twice per
    permutation it crosses, so at most ``size / m + 2`` times."""

    checkpoint_fields = ("perm", "pos")

    def __init__(self, m: int, size, rng: np.random.Generator):
        self.m, self.rng = m, rng
        self.size = m if size is None else min(int(size), m)
        self.perm = np.arange(m)
        self.pos = m

    def check_restored(self, n_iter: int) -> bool:
        """A permutation of the m triplets and the position ``n_iter``
        batches leave in it."""
        used = n_iter * self.size
        pos = self.m if self.size == self.m or used == 0 else (used - 1) % self.m + 1
        return (self.pos == pos
                and bool((np.sort(self.perm) == np.arange(self.m)).all()))

    def next(self) -> np.ndarray:
        if self.size == self.m:
            return np.arange(self.m)
        parts, need = [], self.size
        while need:                     # bounded: take >= 1 each pass (m >= 1)
            if self.pos == self.m:
                self.perm = self.rng.permutation(self.m)
                self.pos = 0
            take = min(need, self.m - self.pos)
            parts.append(self.perm[self.pos:self.pos + take])
            self.pos += take
            need -= take
        return np.concatenate(parts)


#: the estimator's ``learning_rate`` choices: "auto" is the paper's choice
#: per solver (:data:`AUTO_LEARNING_RATE`)
LEARNING_RATES = ("auto", "invsqrt", "constant", "inverse")


def step_size(kind: str, eta0: float, t: int) -> float:
    """``eta_t`` of schedule ``kind``: ``eta0 / sqrt(t)`` ("invsqrt"),
    ``eta0`` ("constant"), ``eta0 / t`` ("inverse", the ``1 / (mu t)`` of the
    strongly convex case, Theorem 5) or ``eta0 / (t + 2)`` ("fw", the
    Frank-Wolfe weight of the experiments)."""
    if kind == "invsqrt":
        return eta0 / np.sqrt(t)
    if kind == "inverse":
        return eta0 / t
    if kind == "fw":
        return eta0 / (t + 2.0)
    if kind == "constant":
        return float(eta0)
    raise ValueError(f"unknown learning rate {kind!r}")


SOLVERS = {
    "incsvd": IncSVDSolver,
    "sgd": DenseProjectedSolver,
    "sgd_batch": DenseProjectedSolver,
    "gd": DenseProjectedSolver,
    "fw": FrankWolfeSolver,
    "sgd_one": SGDOneProjectionSolver,
}
#: the step-size schedule each solver follows under learning_rate="auto" (the
#: paper's experiments: c / sqrt(t) for SGD and incsvd, a constant step for
#: GD, SGD-Batch and SGD-One, c / (t + 2) for Frank-Wolfe)
AUTO_LEARNING_RATE = {"incsvd": "invsqrt", "sgd": "invsqrt", "sgd_batch": "constant",
                 "gd": "constant", "fw": "fw", "sgd_one": "constant"}
#: default triplets per iteration (None: all of them, i.e. full gradient)
DEFAULT_BATCH = {"incsvd": 100, "sgd": 100, "sgd_batch": 10, "gd": None, "fw": None,
                 "sgd_one": 100}


#: the divergence watch sees the mean minibatch loss of this many iterations
#: (iteration 1 alone: f_B(W_1 = 0), the starting point's loss)
WATCH_BLOCK = 10


class Iterations:
    """The :mod:`tripletml.engine` protocol over one of :data:`SOLVERS`.

    ``step()`` is iteration t: a minibatch from ``batches``, the step size
    ``eta(t)`` and the solver's ``update``.  It reports the training seconds
    of the update alone (``max_time`` counts those, not the evaluations),
    the minibatch loss (watched as the mean over :data:`WATCH_BLOCK`
    iterations, channel ``"batch"``) and, every ``eval_every`` iterations and
    at the last one, the objective F(W) (watched, channel ``"objective"``);
    the criterion is the relative change of F between two evaluations
    ``eval_every`` iterations apart.  A run stopped by time has its final
    objective evaluated by :meth:`finish` (and fed to ``watch``, the driver's
    divergence watch, as every evaluation is).
    """

    checkpoint_fields = ("t", "train", "_block", "_prev", "_evals")

    def check_restored(self, n_iter: int) -> bool:
        """Its step count is the checkpoint's; the watch block is shorter
        than :data:`WATCH_BLOCK`; the evaluations are ``(t, objective)``
        pairs."""
        evals = np.asarray(self._evals, dtype=float).reshape(-1, 2) \
            if len(self._evals) else np.zeros((0, 2))
        return (self.t == n_iter and self.train >= 0 and len(self._block) < WATCH_BLOCK
                and np.ndim(self._block) == 1 and np.ndim(self._evals) in (1, 2)
                and (len(self._evals) == 0 or np.ndim(self._evals) == 2)
                and bool((evals[:, 0] <= n_iter).all()))

    def __init__(self, state, batches: Minibatches, eta, *, eval_every: int | None = None,
                 watch=None, patience: int | None = None):
        self.state, self.batches, self.eta = state, batches, eta
        #: the driver's divergence watch, fed by :meth:`finish` too
        self.watch = watch
        self.eval_every = int(eval_every or 0)
        self.t, self.train = 0, 0.0
        self._block: list[float] = []
        self._prev: float | None = None
        #: ``patience`` (iterations): the criterion is the relative
        #: improvement of the best objective over the last ``patience``
        #: iterations (LowRankDML's ``tol="auto"``), not the change between
        #: two evaluations
        self.patience = None if patience is None else int(patience)
        self._evals: list[tuple[int, float]] = []

    def _objective(self, t: int) -> float:
        obj = self.state.objective()
        if not np.isfinite(obj):
            raise FloatingPointError(f"LowRankDML: training diverged at iteration {t} "
                                     f"(objective {obj}); lower eta0.")
        return obj

    def step(self, budget: int = 1) -> StepReport:
        t = self.t = self.t + 1
        eta = self.eta(t)
        t0 = time.perf_counter()
        loss = self.state.update(t, self.batches.next(), eta)
        secs = time.perf_counter() - t0
        self.train += secs
        watch = []
        self._block.append(loss)
        if t == 1 or len(self._block) == WATCH_BLOCK:
            watch.append((float(np.mean(self._block)),
                          f"iterations {t - len(self._block) + 1}-{t}", "batch"))
            self._block = []
        aligned = bool(self.eval_every) and t % self.eval_every == 0
        obj = self._objective(t) if (aligned or budget == 1) else None
        criterion = None
        if obj is not None:
            watch.append((obj, f"iteration {t}", "objective"))
            if aligned and self.patience is not None:
                self._evals.append((t, obj))
                old = [o for s, o in self._evals if s <= t - self.patience]
                if old:
                    before = min(old)
                    best = min(before, min(o for _, o in self._evals))
                    criterion = max(0.0, before - best) / max(abs(best), 1e-300)
            elif aligned:
                if self._prev is not None:
                    criterion = relative_change(self._prev, obj)
                self._prev = obj
        return StepReport(t=t, seconds=secs, criterion=criterion, watch=watch,
                          record=dict(train_seconds=self.train, rank=self.state.rank, eta=eta,
                                      objective=obj, batch_loss=loss))

    def finish(self, result, history) -> None:
        """The objective of the last iterate when the run stopped between
        evaluations (``max_time``)."""
        if len(history) and history.last("objective") is None:
            obj = self._objective(self.t)
            if self.watch is not None:
                self.watch.update(obj, f"iteration {self.t}", "objective")
            history.set_last(objective=obj)
