"""Full-column-rank factors, their pseudo-inverses and Meyer's rank-one
pseudo-inverse update (LORETA, Theorem 1; the multi-label rankers).

The drift control built on these kernels (when to re-factor) is one class,
:class:`tripletml.solvers.loreta.PinvFactors`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._flags import FAST

__all__ = ["pinv_full_column_rank", "balanced_factors", "pinv_drift",
           "rank_one_update_with_pinv", "pinv_update_prepare", "pinv_update_apply"]


def pinv_full_column_rank(A: np.ndarray) -> np.ndarray:
    """``(A^+)^T`` of a full-column-rank ``A`` (n x k) by a thin QR:
    ``A = QR``, ``A^+ = R^-1 Q^T``, returned transposed as ``Q R^-T`` (n x k)
    so that rows stay contiguous.  O(n k^2)."""
    Q, R = np.linalg.qr(A, mode="reduced")
    return np.ascontiguousarray(np.linalg.solve(R, Q.T).T)


def balanced_factors(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, ...]:
    """Re-factor ``W = A B^T`` (rank k) as ``W = A' B'^T`` with balanced,
    orthogonal-column factors ``A' = Q_A U S^(1/2)``, ``B' = Q_B V S^(1/2)``
    (thin QRs ``A = Q_A R_A``, ``B = Q_B R_B`` and the SVD
    ``R_A R_B^T = U S V^T``), and return ``(A', B', (A'^+)^T, (B'^+)^T)`` with
    the exact pseudo-inverses ``Q_A U S^(-1/2)``, ``Q_B V S^(-1/2)``.
    W is unchanged; ``cond(A') = cond(B') = sqrt(cond(W))``, the smallest
    possible.  O((n + m) k^2)."""
    QA, RA = np.linalg.qr(A, mode="reduced")
    QB, RB = np.linalg.qr(B, mode="reduced")
    U, s, Vt = np.linalg.svd(RA @ RB.T)
    if s[-1] <= 0.0:
        raise np.linalg.LinAlgError("W = A B^T has lost rank")
    r = np.sqrt(s)
    QAU, QBV = QA @ U, QB @ Vt.T
    return (np.ascontiguousarray(QAU * r), np.ascontiguousarray(QBV * r),
            np.ascontiguousarray(QAU / r), np.ascontiguousarray(QBV / r))


def pinv_drift(A: np.ndarray, PT: np.ndarray) -> float:
    """``||A^+ A - I_k||_F`` for ``PT = (A^+)^T``: how far a maintained
    pseudo-inverse has drifted (0 for the exact one).  O(n k^2)."""
    k = A.shape[1]
    return float(np.linalg.norm(PT.T @ A - np.eye(k)))


@njit(cache=True, nogil=True, fastmath=FAST)
def rank_one_update_with_pinv(A, PT, c, d, u, h):
    """In place ``A <- A + c d^T`` and ``PT <- ((A + c d^T)^+)^T``.

    Meyer (1973), Theorem 5, for a full-column-rank ``A`` (n x k; then
    ``v = d^T (I - A^+ A) = 0``) and ``beta = 1 + d^T A^+ c != 0``:

        kv = A^+ c,  h = d^T A^+,  u = c - A kv,  s = ||h||^2 ||u||^2 + beta^2,
        (A + c d^T)^+ = A^+ + (1/beta) A^+ h^T u^T - (beta/s) p q^T,
        p = -(||u||^2/beta) A^+ h^T - kv,   q = -(||h||^2/beta) u - h^T.

    Cost O(n k) in three passes (PT read; A read+write; PT read+write).
    ``u`` and ``h`` are length-n work vectors.  Returns False (and leaves
    ``PT`` stale, A updated) when ``|beta|`` is too small for the formula;
    the caller then recomputes the pseudo-inverse.
    """
    n, k = A.shape
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = pinv_update_prepare(PT, PT, c, d, h, kv, Ah, np.zeros(k), 0.0)
    return pinv_update_apply(A, PT, c, d, u, h, kv, Ah, hh)


@njit(cache=True, nogil=True, fastmath=FAST)
def pinv_update_prepare(S, PT, c, d, h, kv, Ah, w, fa):
    """Pass 1 of Meyer's update over the rows of ``PT = (A^+)^T``:
    ``h = PT d``, ``kv = PT^T c``, ``Ah = PT^T h``; returns ``||h||^2``.
    With ``fa != 0`` the vector c is completed on the fly,
    ``c_i += fa * (S_i . w)``, so a caller whose c depends on a row-wise
    product (LORETA-1's A_delta, B_delta) needs no extra pass."""
    n, k = PT.shape
    hh = 0.0
    for i in range(n):
        if fa != 0.0:
            acc = 0.0
            for j in range(k):
                acc += S[i, j] * w[j]
            c[i] += fa * acc
        hi = 0.0
        for j in range(k):
            hi += PT[i, j] * d[j]
        h[i] = hi
        hh += hi * hi
        ci = c[i]
        for j in range(k):
            kv[j] += PT[i, j] * ci
            Ah[j] += PT[i, j] * hi
    return hh


@njit(cache=True, nogil=True, fastmath=FAST)
def pinv_update_apply(A, PT, c, d, u, h, kv, Ah, hh):
    """Passes 2-3 of Meyer's update: ``A += c d^T`` (with ``u = c - A kv``),
    then ``PT`` by Theorem 5.  False when ``|beta|`` is too small."""
    n, k = A.shape
    beta = 1.0
    for j in range(k):
        beta += d[j] * kv[j]
    uu = 0.0
    for i in range(n):
        s = 0.0
        for j in range(k):
            s += A[i, j] * kv[j]
        ui = c[i] - s
        u[i] = ui
        uu += ui * ui
        ci = c[i]
        for j in range(k):
            A[i, j] += ci * d[j]
    if abs(beta) < 1e-10:
        return False
    sigma = hh * uu + beta * beta
    p = -(uu / beta) * Ah - kv
    a1 = 1.0 / beta
    a2 = beta / sigma
    for i in range(n):
        qi = -(hh / beta) * u[i] - h[i]
        f1 = u[i] * a1
        f2 = a2 * qi
        for j in range(k):
            PT[i, j] += f1 * Ah[j] - f2 * p[j]
    return True

