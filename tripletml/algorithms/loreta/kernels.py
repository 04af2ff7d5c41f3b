"""LORETA's solver state apart from the estimators (Shalit, Weinshall &
Chechik, NIPS 2010): the retraction kernels of Algorithms 2 and 3 and the
drift control of the maintained pseudo-inverses, used by
:class:`tripletml.LORETA` and :class:`tripletml.LORETAMultilabel`.

* :func:`loreta1_update` -- one LORETA-1 step (Algorithm 3) on factors
  ``W = A B^T`` with maintained transposed pseudo-inverses ``PA = (A^+)^T``,
  ``PB = (B^+)^T`` (Meyer's rank-one update, O((n + m) k)).
* :func:`loreta1_triplet_steps` -- LORETA-1 over triplets with the hinge loss.
* :func:`loreta_general_step` -- Algorithm 2 for rank-r steps.
* :class:`tripletml.linalg.pinv.PinvFactors` (re-exported here) -- the
  factors, their pseudo-inverses and the drift control: every ``check_every`` steps ``||A^+ A - I||_F`` (and the same for
  B) is measured; when it exceeds ``tol``, or when Meyer's formula is not
  applicable, W is re-factored with balanced factors and exact
  pseudo-inverses (:func:`tripletml.linalg.pinv.balanced_factors`; W itself
  is unchanged).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg._flags import FAST
from tripletml.linalg.pinv import (PinvFactors, pinv_full_column_rank, pinv_update_apply,
                           pinv_update_prepare)
from tripletml.linalg.sparse_rows import triplet_rows
from tripletml.losses import triplet_hinge

__all__ = ["loreta1_update", "loreta1_triplet_steps", "loreta_general_step", "factored_margin",
           "PinvFactors"]


@njit(cache=True, nogil=True, fastmath=FAST)
def factored_margin(A, B, q_idx, q_val, v_idx, v_val, aq, bv):
    """``q^T A B^T v`` for sparse q, v (indices, values); leaves ``A^T q`` in
    ``aq`` and ``B^T v`` in ``bv``.  O((nnz(q) + nnz(v)) k)."""
    aq[:] = 0.0
    bv[:] = 0.0
    for s in range(q_idx.shape[0]):
        aq += A[q_idx[s]] * q_val[s]
    for s in range(v_idx.shape[0]):
        bv += B[v_idx[s]] * v_val[s]
    return np.dot(aq, bv)


@njit(cache=True, nogil=True, fastmath=FAST)
def loreta1_update(A, PA, B, PB, i1, v1, s1, i2, v2, cA, cB, u, h, Ahat, Bhat, bv):
    """One LORETA-1 step (Algorithm 3) in place, for ``G1 G2^T = -eta grad``
    with sparse ``G1 = s1 * (i1, v1)`` (n-vector) and ``G2 = (i2, v2)``
    (m-vector):

        A^ = A^+ G1,  B^ = B^+ G2,  Q = B^^T A^,
        A_delta = A A^ (-1/2 + 3Q/8) + G1 (1 - Q/2),   A <- A + A_delta B^^T,
        B_delta = B^+^T (B^T G2) (-1/2 + 3Q/8) + G2 (1 - Q/2),  B <- B + B_delta A^^T,

    with the pseudo-inverses following by Meyer's rank-one update.  Returns
    0, or 1/2/3 when Meyer's update was not applicable to A/B/both (their
    pseudo-inverses must then be recomputed)."""
    n, k = A.shape
    m = B.shape[0]
    # A^ = A^+ G1, B^ = B^+ G2, B^T G2, Q = B^^T A^
    Ahat[:] = 0.0
    Bhat[:] = 0.0
    bv[:] = 0.0
    for s in range(i1.shape[0]):
        Ahat += PA[i1[s]] * (s1 * v1[s])
    for s in range(i2.shape[0]):
        Bhat += PB[i2[s]] * v2[s]
        bv += B[i2[s]] * v2[s]
    Q = 0.0
    for j in range(k):
        Q += Bhat[j] * Ahat[j]
    fa = -0.5 + 0.375 * Q
    fb = 1.0 - 0.5 * Q
    # A_delta = (A A^) fa + G1 fb and B_delta^T = (B^+^T (B^T G2)) fa + G2 fb:
    # the sparse parts are scattered first, the dense parts are added inside
    # pass 1 of Meyer's update (one pass over the rows less per factor)
    cA[:n] = 0.0
    for s in range(i1.shape[0]):
        cA[i1[s]] += fb * s1 * v1[s]
    cB[:m] = 0.0
    for s in range(i2.shape[0]):
        cB[i2[s]] += fb * v2[s]
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = pinv_update_prepare(A, PA, cA, Bhat, h, kv, Ah, Ahat, fa)
    okA = pinv_update_apply(A, PA, cA, Bhat, u, h, kv, Ah, hh)       # A + A_delta B^^T
    kv[:] = 0.0
    Ah[:] = 0.0
    hh = pinv_update_prepare(PB, PB, cB, Ahat, h, kv, Ah, bv, fa)
    okB = pinv_update_apply(B, PB, cB, Ahat, u, h, kv, Ah, hh)       # B + B_delta^T A^^T
    return (0 if okA else 1) + (0 if okB else 2)


@njit(cache=True, nogil=True, fastmath=FAST)
def loreta1_triplet_steps(A, PA, B, PB, indptr, indices, data, triplets, start, stop, eta,
                          losses, margins, vidx, vval, cA, cB, u, h):
    """LORETA-1 on ``triplets[start:stop]``, in order (hinge loss,
    ``G1 = eta q``, ``G2 = p+ - p-``); ``losses``/``margins`` are indexed like
    ``triplets``.  Returns (t, flags): the index after the last step done and
    0, or 1/2/3 from :func:`loreta1_update` at step t - 1 (the caller
    recomputes those pseudo-inverses and resumes at t), or -1 when the margin
    at step t was not finite."""
    k = A.shape[1]
    aq = np.zeros(k)
    Ahat = np.zeros(k)
    Bhat = np.zeros(k)
    bv = np.zeros(k)
    for t in range(start, stop):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        mg = factored_margin(A, B, q_idx, q_val, v_idx, v_val, aq, bv)
        if not np.isfinite(mg):
            return t, -1
        margins[t] = mg
        loss = triplet_hinge(mg)
        losses[t] = loss
        if loss <= 0.0:
            continue
        flags = loreta1_update(A, PA, B, PB, q_idx, q_val, eta, v_idx, v_val, cA, cB,
                               u, h, Ahat, Bhat, bv)
        if flags:
            return t + 1, flags
    return stop, 0


def loreta_general_step(A: np.ndarray, B: np.ndarray, G1: np.ndarray,
                        G2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 (general LORETA): factors of ``R_x(G1 G2^T)`` for
    ``x = A B^T`` and a rank-r step ``G1 G2^T = -eta grad`` (G1: n x r,
    G2: m x r, dense).  Pseudo-inverses are computed afresh (O((n+m)k^2)).
    Returns new ``(A, B)``."""
    PA = pinv_full_column_rank(A)          # (A^+)^T
    PB = pinv_full_column_rank(B)
    Ahat = PA.T @ G1                       # k x r
    Bhat = PB.T @ G2                       # k x r
    ProjAG = A @ Ahat                      # n x r
    Q = Bhat.T @ Ahat                      # r x r
    A_delta = -0.5 * ProjAG + 0.375 * ProjAG @ Q + G1 - 0.5 * G1 @ Q
    GBproj = (G2.T @ B) @ PB.T             # r x m
    B_delta = -0.5 * GBproj + 0.375 * Q @ GBproj + G2.T - 0.5 * Q @ G2.T
    return A + A_delta @ Bhat.T, B + (Ahat @ B_delta).T
