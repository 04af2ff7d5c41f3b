"""Symmetric row-column updates of a PD matrix (COMET): Cholesky root
updates, the Woodbury inverse update and the Schur-complement step bound."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._flags import FAST


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
                     return_Wu: bool = False):
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
    the product.
    """
    a0, a1, a2, Wu = schur_coefficients(Winv, k, u)
    if not a0 > 0.0:  # W^-1 has lost accuracy (W at the edge of the cone): no safe step
        bound = 0.0
    elif a2 <= 1e-300 * max(1.0, abs(a1)):
        bound = np.inf if a1 >= 0 else a0 / (-2.0 * a1)
    else:  # a2 eta^2 - 2 a1 eta - a0 = 0, positive root (stable form)
        disc = np.sqrt(a1 * a1 + a2 * a0)
        bound = float(a0 / (disc - a1)) if a1 < 0 else float((a1 + disc) / a2)
    return (bound, Wu) if return_Wu else bound


def schur_coefficients(Winv: np.ndarray, k: int, u: np.ndarray):
    """``(a0, a1, a2, W^-1 u)`` with ``det(W + eta (e_k u^T + u e_k^T)) / det(W)
    = (a0 + 2 a1 eta - a2 eta^2) / a0`` (the Schur complement of row k; see
    :func:`schur_step_bound`).  ``a0 <= 0`` flags an inaccurate ``W^-1``."""
    ur = u.copy()
    ur[k] = 0.0                        # u_r, embedded with a zero at k
    Wur = Winv @ ur
    wk = float(Winv[k, k])
    Wu = Wur + u[k] * Winv[:, k]
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


@njit(cache=True, nogil=True, fastmath=FAST)
def _sub_rank2(M, a, b, c, e):
    """In place ``M -= a c^T + b e^T`` in one pass over M."""
    n, m = M.shape
    for i in range(n):
        ai, bi = a[i], b[i]
        for j in range(m):
            M[i, j] -= ai * c[j] + bi * e[j]


# --------------------------------------------------------------------------
# Symmetric low-rank eigen-updates and PSD projections (low-rank DML, SML)
