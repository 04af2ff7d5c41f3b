"""Symmetric row-column updates of a PD matrix (COMET): Cholesky root
updates, the Woodbury inverse update, the Schur-complement step bound and a
conditioning guard that keeps the iterates positive definite in floating
point (:class:`RowColumnConditioning`)."""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg._flags import FAST


@njit(cache=True, nogil=True, fastmath=FAST)
def chol_update(R, x, work):
    """In place: upper-triangular ``R`` with ``W = R^T R`` becomes the root of
    ``W + x x^T`` (LINPACK dchud, Givens rotations).  O(d^2).  ``x`` is
    copied into ``work`` and not modified."""
    d = R.shape[0]
    work[:] = x
    for k in range(d):
        r = np.hypot(R[k, k], work[k])
        c = r / R[k, k]
        s = work[k] / R[k, k]
        ic = 1.0 / c
        R[k, k] = r
        for j in range(k + 1, d):
            rkj = (R[k, j] + s * work[j]) * ic
            R[k, j] = rkj
            work[j] = c * work[j] - s * rkj


@njit(cache=True, nogil=True, fastmath=FAST)
def chol_downdate(R, x, work):
    """In place: ``R`` (upper, ``W = R^T R``) becomes the root of
    ``W - x x^T`` (hyperbolic rotations).  Returns False, leaving ``R``
    partly modified, when ``W - x x^T`` is not positive definite."""
    d = R.shape[0]
    work[:] = x
    for k in range(d):
        t = R[k, k] * R[k, k] - work[k] * work[k]
        if not t > 0.0:
            return False
        r = np.sqrt(t)
        c = r / R[k, k]
        s = work[k] / R[k, k]
        ic = 1.0 / c
        R[k, k] = r
        for j in range(k + 1, d):
            rkj = (R[k, j] - s * work[j]) * ic
            R[k, j] = rkj
            work[j] = c * work[j] - s * rkj
    return True


@njit(cache=True, nogil=True, fastmath=FAST)
def chol_update_downdate(R, x, y, wx, wy):
    """In place ``R`` becomes the root of ``W + x x^T - y y^T`` in one sweep
    over R (the update's Givens and the downdate's hyperbolic rotation of
    row k are applied together).  Returns False (R partly modified) when the
    result is not positive definite.  O(d^2), half the memory traffic of
    :func:`chol_update` followed by :func:`chol_downdate`."""
    d = R.shape[0]
    wx[:] = x
    wy[:] = y
    for k in range(d):
        # Givens rotation with x
        r = np.hypot(R[k, k], wx[k])
        c1 = r / R[k, k]
        s1 = wx[k] / R[k, k]
        R[k, k] = r
        # hyperbolic rotation with y
        t = r * r - wy[k] * wy[k]
        if not t > 0.0:
            return False
        r2 = np.sqrt(t)
        c2 = r2 / r
        s2 = wy[k] / r
        R[k, k] = r2
        ic1, ic2 = 1.0 / c1, 1.0 / c2
        for j in range(k + 1, d):
            a = (R[k, j] + s1 * wx[j]) * ic1
            wx[j] = c1 * wx[j] - s1 * a
            b = (a - s2 * wy[j]) * ic2
            wy[j] = c2 * wy[j] - s2 * b
            R[k, j] = b
    return True


def row_column_update(W: np.ndarray, k: int, u: np.ndarray, eta: float) -> None:
    """In place ``W <- W + eta (e_k u^T + u e_k^T)``: row and column k move by
    ``eta u`` (the diagonal entry by ``2 eta u_k``), as in COMET's Eq. (11)."""
    W[k, :] += eta * u
    W[:, k] += eta * u


def schur_step_bound(W: np.ndarray, Winv: np.ndarray, k: int, u: np.ndarray,
                     return_Wu: bool = False, Wu: np.ndarray | None = None):
    """Largest ``eta`` such that ``W + eta (e_k u^T + u e_k^T)`` stays PD.

    COMET Eq. (10)-(11): with ``c = W_kk``, ``b = W_{-k,k}``,
    ``A = W_{-k,-k}`` (unchanged by the step) and the step's ``u_1 = u_k``,
    ``u_r = u_{-k}``, the new matrix is PD iff

        (u_r^T A^-1 u_r) eta^2 - 2 (u_1 - u_r^T A^-1 b) eta - (c - b^T A^-1 b) < 0,

    so the bound is the positive root (``inf`` when the quadratic term
    vanishes and the linear one does not push towards the boundary).
    The coefficients come from ``W^-1`` without forming ``A^-1``: with
    ``w = W^-1 e_k``, the Schur identities ``c - b^T A^-1 b = 1 / w_k`` and
    ``A^-1 b = -w_{-k} / w_k`` give ``a0 = 1 / w_k``,
    ``a1 = u_1 + (u_r . w_r) / w_k`` and
    ``a2 = u_r^T (W^-1)_{-k,-k} u_r - (u_r . w_r)^2 / w_k``.  O(d^2), one
    matrix-vector product.  With ``return_Wu=True`` returns
    ``(bound, W^-1 u)`` so that :func:`inverse_row_column_update` can reuse
    the product; a known ``Wu = W^-1 u`` is used instead of the product.
    """
    a0, a1, a2, Wu = schur_coefficients(Winv, k, u, Wu)
    if not a0 > 0.0:  # W^-1 has lost accuracy (W at the edge of the cone): no safe step
        bound = 0.0
    elif a2 <= 1e-300 * max(1.0, abs(a1)):
        bound = np.inf if a1 >= 0 else a0 / (-2.0 * a1)
    else:  # a2 eta^2 - 2 a1 eta - a0 = 0, positive root (stable form)
        disc = np.sqrt(a1 * a1 + a2 * a0)
        bound = float(a0 / (disc - a1)) if a1 < 0 else float((a1 + disc) / a2)
    return (bound, Wu) if return_Wu else bound


def schur_coefficients(Winv: np.ndarray, k: int, u: np.ndarray, Wu: np.ndarray | None = None):
    """``(a0, a1, a2, W^-1 u)`` with ``det(W + eta (e_k u^T + u e_k^T)) / det(W)
    = (a0 + 2 a1 eta - a2 eta^2) / a0`` (the Schur complement of row k; see
    :func:`schur_step_bound`).  ``a0 <= 0`` flags an inaccurate ``W^-1``.
    With ``Wu`` (``W^-1 u``, known) no product with ``W^-1`` is formed: O(d)."""
    ur = u.copy()
    ur[k] = 0.0                        # u_r, embedded with a zero at k
    if Wu is None:
        Wur = Winv @ ur
        Wu = Wur + u[k] * Winv[:, k]
    else:
        Wur = Wu - u[k] * Winv[:, k]
    wk = float(Winv[k, k])
    if not wk > 0.0:
        return 0.0, 0.0, 0.0, Wu
    uw = float(Wur[k])                 # u_r . w_r  (w = W^-1 e_k, symmetric W^-1)
    a0 = 1.0 / wk
    a1 = float(u[k]) + uw / wk
    # u_r^T A^-1 u_r >= 0 (A^-1 is PD); rounding in the difference may not know it
    a2 = max(0.0, float(ur @ Wur) - uw * uw / wk)
    return a0, a1, a2, Wu


def inverse_row_column_update(Winv: np.ndarray, k: int, u: np.ndarray, eta: float,
                              Wu: np.ndarray | None = None) -> None:
    """In place Woodbury update of ``W^-1`` for ``W <- W + eta (e_k u^T + u e_k^T)``
    (COMET Appendix B: ``U = [u, e_k]``, ``C = eta I_2``, ``V = [e_k, u]^T``):

        W_new^-1 = W^-1 - W^-1 U (eta^-1 I_2 + V W^-1 U)^-1 V W^-1.

    ``Wu`` may pass a precomputed ``W^-1 u``.  O(d^2): one matrix-vector
    product and one in-place rank-2 pass (:func:`_sub_rank2`)."""
    if Wu is None:
        Wu = Winv @ u                  # W^-1 u
    We = Winv[:, k].copy()             # W^-1 e_k
    VWU = np.array([[We @ u, Winv[k, k]], [u @ Wu, u @ We]])  # V W^-1 U
    K = np.linalg.inv(np.eye(2) / eta + VWU)
    P = np.stack([Wu, We], axis=1) @ K                       # W^-1 U K   (d x 2)
    _sub_rank2(Winv, P[:, 0].copy(), P[:, 1].copy(), We, Wu)  # - P [We, Wu]^T


#: Largest accepted value of ``||W||_F tr(W^-1)`` (an upper bound on the
#: spectral condition number of W).  Below it ``lambda_min(W) >= 1e-12
#: ||W||_2``, far above the rounding error of a symmetric eigensolver or a
#: Cholesky factorisation (about ``d eps ||W||_2``, eps = 2.2e-16), so W is
#: positive definite *in floating point*, not only in exact arithmetic.
PD_COND_LIMIT = 1e12


class RowColumnConditioning:
    """Predicts ``||W'||_F^2`` and ``tr(W'^-1)`` for the row-column update
    ``W' = W + eta (e_k u^T + u e_k^T)`` in O(1) per ``eta`` after an O(d)
    set-up, so a step can be shortened until ``||W'||_F tr(W'^-1)`` (an upper
    bound on ``cond_2(W')``, since ``||W'||_2 <= ||W'||_F`` and
    ``1 / lambda_min(W') <= tr(W'^-1)``) stays below :data:`PD_COND_LIMIT`.

    The Schur bound (COMET eq. 10-11) keeps W PD in exact arithmetic, but a
    step of ``step_fraction`` of it can shrink the Schur complement of row k
    a hundredfold (``step_fraction = 0.99``); a loss that pulls towards the
    boundary of the cone (a near-duplicate feature, no barrier ``alpha = 0``)
    drives the smallest eigenvalue to rounding level in a few such steps.

    ``||W'||_F^2 = ||W||_F^2 + 4 eta W_k.u + 2 eta^2 (u.u + u_k^2)``; the trace
    follows from the Woodbury form of :func:`inverse_row_column_update`:
    ``tr(W'^-1) = tr(W^-1) - (K00 Wu.We + K10 We.We + K01 Wu.Wu + K11 We.Wu)``
    with ``K = (eta^-1 I_2 + V W^-1 U)^-1``, ``We = W^-1 e_k``, ``Wu = W^-1 u``.
    """

    def __init__(self, W: np.ndarray, Winv: np.ndarray, k: int, u: np.ndarray,
                 Wu: np.ndarray | None = None):
        if Wu is None:
            Wu = Winv @ u
        We = Winv[:, k]
        self.wk_u = float(W[k] @ u)
        self.uu = float(u @ u) + float(u[k]) ** 2
        self.m = (float(We @ u), float(Winv[k, k]), float(u @ Wu))   # V W^-1 U entries
        self.g = (float(Wu @ We), float(We @ We), float(Wu @ Wu))

    def after(self, eta: float, fro_sq: float, tr_inv: float) -> tuple[float, float]:
        """``(||W'||_F^2, tr(W'^-1))`` after a step ``eta`` from a W with
        ``||W||_F^2 = fro_sq`` and ``tr(W^-1) = tr_inv``."""
        weu, wkk, uwu = self.m
        m00, m01, m10, m11 = 1.0 / eta + weu, wkk, uwu, 1.0 / eta + weu
        det = m00 * m11 - m01 * m10
        if det == 0.0 or not np.isfinite(det):
            return fro_sq, np.inf
        k00, k01, k10, k11 = m11 / det, -m01 / det, -m10 / det, m00 / det
        wuwe, wewe, wuwu = self.g
        tr_new = tr_inv - (k00 * wuwe + k10 * wewe + k01 * wuwu + k11 * wuwe)
        fro_new = fro_sq + 4.0 * eta * self.wk_u + 2.0 * eta * eta * self.uu
        return fro_new, (tr_new if tr_new > 0.0 else np.inf)

    @staticmethod
    def bound(fro_sq: float, tr_inv: float) -> float:
        """``||W||_F tr(W^-1)``, the upper bound on ``cond_2(W)``."""
        return float(np.sqrt(max(fro_sq, 0.0)) * tr_inv)

    def accepts(self, eta: float, fro_sq: float, tr_inv: float,
                limit: float = PD_COND_LIMIT) -> bool:
        """Whether the step keeps the bound below ``limit`` (or at least does
        not raise it, so a W already past the limit may move back)."""
        f, t = self.after(eta, fro_sq, tr_inv)
        new = self.bound(f, t)
        return bool(new <= limit or new <= self.bound(fro_sq, tr_inv))


@njit(cache=True, nogil=True, fastmath=FAST)
def _sub_rank2(M, a, b, c, e):
    """In place ``M -= a c^T + b e^T`` in one pass over M."""
    n, m = M.shape
    for i in range(n):
        ai, bi = a[i], b[i]
        for j in range(m):
            M[i, j] -= ai * c[j] + bi * e[j]


