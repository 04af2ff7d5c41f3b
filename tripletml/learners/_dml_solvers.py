"""Solvers for low-rank DML (Zhang & Zhang 2017): the incremental-SVD SGD of
Algorithm 1 and the five baselines of the paper's Figure 2.

Each solver keeps its own representation of W and exposes ``step(t, idx,
eta)`` (one iteration on the triplets ``idx`` with step size ``eta``),
``rank`` (None when unknown without an extra eigen-decomposition),
``objective()`` and ``finish() -> (U, s)`` with ``W = U diag(s) U^T``.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from ..linalg import (lowrank_eig_update, orthonormality_error, project_spectrum,
                      reorthonormalize_eig)
from ._dml_problem import TripletDMLProblem

#: iterations between orthonormality checks of U (incsvd)
ORTHO_CHECK_EVERY = 50
#: re-orthonormalise U when max |U^T U - I| exceeds this
ORTHO_TOL = 1e-12


def _check_finite(a: np.ndarray, t: int) -> None:
    if not np.isfinite(a).all():
        raise FloatingPointError(f"LowRankDML: training diverged at iteration {t} (non-finite "
                                 "W - eta g); scale the features down or lower eta0.")


class IncSVDSolver:
    """Algorithm 1: ``W = U diag(s) U^T`` (d x r), the minibatch gradient as
    ``A diag(signs) A^T``, Brand's update of ``W - eta g`` then the shifted
    projection of Theorem 1 / 2 / 3 on the small spectrum.  No d x d array;
    O(d (r + c)^2) per iteration."""

    dense = False

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

    def step(self, t: int, idx, eta: float) -> None:
        A, signs = self.prob.gradient_factor(idx, L=self.L, scale=eta)     # -eta g
        shift = eta * self.prob.lam

        def project(mu):
            _check_finite(mu, t)
            return project_spectrum(mu, shift, self.constraint, self.tau)

        info = {}
        try:                                             # Pi[W - eta g - eta lam I]
            V, lam = lowrank_eig_update(self.U, self.s, A, signs, project=project, info=info)
        except FloatingPointError:                     # overflow or non-finite input:
            _check_finite(np.array([np.nan]), t)         # raise the estimator's message
        self.n_gram_only += bool(info.get("gram_only", False))
        self.U = V
        self.s = lam
        if t % ORTHO_CHECK_EVERY == 0 and orthonormality_error(self.U) > ORTHO_TOL:
            self.U, self.s = reorthonormalize_eig(self.U, self.s)
            self.n_reorth += 1

    def objective(self) -> float:
        return self.prob.objective_factored(self.L)

    def finish(self):
        return self.U, self.s


class DenseProjectedSolver:
    """Projected (stochastic / minibatch / full) gradient descent on a dense
    W: ``W <- Pi[W - eta g - eta lam I]`` with the projection by ``eigh``
    (O(d^3) per iteration, O(d^2) memory).  The baselines GD, SGD and
    SGD-Batch differ only in the triplets per step and the step sizes."""

    dense = True

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        self.prob, self.constraint, self.tau = prob, constraint, tau
        self.W = np.zeros((prob.d, prob.d))
        self._eig = (np.zeros((prob.d, 0)), np.zeros(0))
        self.rank = 0

    def step(self, t: int, idx, eta: float) -> None:
        G = self.prob.dense_gradient(idx, self.W)
        G *= -eta
        G += self.W                                     # W - eta g (G reused)
        _check_finite(G, t)
        self.W = None
        mu, V = sla.eigh(G, overwrite_a=True, check_finite=False, driver="evr")
        del G
        lam = project_spectrum(mu, eta * self.prob.lam, self.constraint, self.tau)
        keep = lam > 0.0
        Vk, lk = V[:, keep], lam[keep]
        del V
        self.W = (Vk * lk) @ Vk.T
        self._eig = (Vk, lk)
        self.rank = int(lk.size)

    def objective(self) -> float:
        return self.prob.objective_dense(self.W)

    def finish(self):
        return self._eig[0][:, ::-1], self._eig[1][::-1]


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

    def __init__(self, prob: TripletDMLProblem, constraint, tau):
        if constraint is None:
            raise ValueError("LowRankDML: solver='fw' needs a bounded set; set constraint="
                             "'frobenius' or 'spectral'.")
        self.prob, self.constraint, self.tau = prob, constraint, tau
        self.W = np.zeros((prob.d, prob.d))

    def step(self, t: int, idx, eta: float) -> None:
        G = self.prob.dense_gradient(idx, self.W, include_lam=True)
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

    def step(self, t: int, idx, eta: float) -> None:
        G = self.prob.dense_gradient(idx, self.W, include_lam=True)
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

    def objective(self) -> float:
        return self.prob.objective_dense(self.avg)

    def finish(self):
        from ..linalg import project_psd
        self.W = project_psd(self.avg, 0.0, self.constraint, self.tau)
        return _eig_of(self.W)


SOLVERS = {
    "incsvd": IncSVDSolver,
    "sgd": DenseProjectedSolver,
    "sgd_batch": DenseProjectedSolver,
    "gd": DenseProjectedSolver,
    "fw": FrankWolfeSolver,
    "sgd_one": SGDOneProjectionSolver,
}
#: the step-size schedule each solver follows under schedule="auto" (the
#: paper's experiments: c / sqrt(t) for SGD and incsvd, a constant step for
#: GD, SGD-Batch and SGD-One, c / (t + 2) for Frank-Wolfe)
AUTO_SCHEDULE = {"incsvd": "invsqrt", "sgd": "invsqrt", "sgd_batch": "constant",
                 "gd": "constant", "fw": "fw", "sgd_one": "constant"}
#: default triplets per iteration (None: all of them, i.e. full gradient)
DEFAULT_BATCH = {"incsvd": 100, "sgd": 100, "sgd_batch": 10, "gd": None, "fw": None,
                 "sgd_one": 100}
