"""Multi-label ranking of the LORETA paper (Shalit, Weinshall & Chechik,
NIPS 2010, section 5.2): the compiled online steps on the label-by-feature
model over CSR rows.

:func:`multilabel_steps` runs, per sample, LORETA-1 on ``W = A B^T``
(``LORETA``), the iterative passive-aggressive steps on A then B (``PA``) or
the full-rank matrix perceptron on W (``PERCEPTRON``), with the multi-label
hinge loss of :func:`tripletml.losses.multilabel_hinge`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg._flags import FAST
from tripletml.losses import multilabel_hinge
from tripletml.algorithms.loreta.kernels import loreta1_update

__all__ = ["multilabel_steps", "LORETA", "PA", "PERCEPTRON"]

#: the ``method`` codes of :func:`multilabel_steps`
LORETA, PA, PERCEPTRON = 0, 1, 2


@njit(cache=True, nogil=True, fastmath=FAST)
def multilabel_steps(method, A, PA, B, PB, W, indptr, indices, data, yptr, yidx, order,
                      eta, C, losses, work_L, cA, cB, u, h):
    """Online steps over samples ``order`` (in order).  ``method`` 0: LORETA-1
    on W = A B^T; 1: iterative PA on A, B; 2: perceptron on the full W.
    Returns (t, flags): 0 when done; 1/2/3 when Meyer's update failed at
    sample t - 1 (recompute pseudo-inverses, resume at t); -1 when the
    scores of sample t were not finite."""
    L = work_L.shape[0]
    k = A.shape[1]
    is_pos = np.zeros(L, dtype=np.bool_)
    g_idx = np.zeros(L + 1, dtype=np.int64)
    g_val = np.zeros(L + 1)
    bp = np.zeros(k)
    ag = np.zeros(k)
    Ahat = np.zeros(k)
    Bhat = np.zeros(k)
    bv = np.zeros(k)
    for t in range(order.shape[0]):
        r = order[t]
        p_idx = indices[indptr[r]:indptr[r + 1]]
        p_val = data[indptr[r]:indptr[r + 1]]
        pos = yidx[yptr[r]:yptr[r + 1]]
        # scores
        if method == 2:
            for i in range(L):
                s = 0.0
                for j in range(p_idx.shape[0]):
                    s += W[i, p_idx[j]] * p_val[j]
                work_L[i] = s
        else:
            bp[:] = 0.0
            for j in range(p_idx.shape[0]):
                bp += B[p_idx[j]] * p_val[j]
            for i in range(L):
                s = 0.0
                for j in range(k):
                    s += A[i, j] * bp[j]
                work_L[i] = s
        for i in range(L):
            if not np.isfinite(work_L[i]):
                return t, -1
        for j in range(pos.shape[0]):
            is_pos[pos[j]] = True
        loss, nnz = multilabel_hinge(work_L, pos, is_pos, g_idx, g_val)
        losses[t] = loss
        if nnz > 0:
            gi, gv = g_idx[:nnz], g_val[:nnz]
            if method == 0:
                flags = loreta1_update(A, PA, B, PB, gi, gv, eta, p_idx, p_val, cA, cB, u, h,
                                       Ahat, Bhat, bv)
                if flags:
                    for j in range(pos.shape[0]):
                        is_pos[pos[j]] = False
                    return t + 1, flags
            elif method == 2:
                for s in range(nnz):
                    c = eta * gv[s]
                    for j in range(p_idx.shape[0]):
                        W[gi[s], p_idx[j]] += c * p_val[j]
            else:
                gg = np.dot(gv, gv)
                den = gg * np.dot(bp, bp)
                ea = min(loss / den, C) if den > 0.0 else 0.0
                for s in range(nnz):
                    A[gi[s]] += (ea * gv[s]) * bp
                # loss and g again, with the new A
                for i in range(L):
                    s_ = 0.0
                    for j in range(k):
                        s_ += A[i, j] * bp[j]
                    work_L[i] = s_
                loss2, nnz2 = multilabel_hinge(work_L, pos, is_pos, g_idx, g_val)
                if nnz2 > 0:
                    gi, gv = g_idx[:nnz2], g_val[:nnz2]
                    ag[:] = 0.0
                    for s in range(nnz2):
                        ag += A[gi[s]] * gv[s]
                    den = np.dot(p_val, p_val) * np.dot(ag, ag)
                    eb = min(loss2 / den, C) if den > 0.0 else 0.0
                    for j in range(p_idx.shape[0]):
                        B[p_idx[j]] += (eb * p_val[j]) * ag
        for j in range(pos.shape[0]):
            is_pos[pos[j]] = False
    return order.shape[0], 0
