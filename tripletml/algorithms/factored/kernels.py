"""The factored rank-k baselines of the LORETA paper (Shalit, Weinshall &
Chechik, NIPS 2010, section 5): compiled online steps on ``W = A B^T`` over
CSR rows.

:func:`factored_steps` runs, per triplet, gradient descent on both factors
from the same point (``GD``), the iterative passive-aggressive steps (A
first, then B against the loss after the A step: ``ITER_PA``) or the
unfactored PA step applied to both factors (``NAIVE_PA``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg.sparse_rows import triplet_rows
from tripletml.losses import triplet_hinge
from tripletml.algorithms.loreta.kernels import factored_margin

__all__ = ["factored_steps", "GD", "ITER_PA", "NAIVE_PA"]


#: the ``method`` codes of :func:`factored_steps`
GD, ITER_PA, NAIVE_PA = 0, 1, 2


@njit(cache=True, nogil=True)
def factored_steps(A, B, indptr, indices, data, triplets, method, eta, C, losses, margins,
                    vidx, vval):
    """The three factored baselines over the triplets, in order.  Returns -1,
    or the index of the first step whose margin or step was not finite."""
    k = A.shape[1]
    aq = np.zeros(k)
    bv = np.zeros(k)
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        nv = v_idx.shape[0]
        mg = factored_margin(A, B, q_idx, q_val, v_idx, v_val, aq, bv)
        if not np.isfinite(mg):
            return t
        margins[t] = mg
        loss = triplet_hinge(mg)
        losses[t] = loss
        if loss <= 0.0:
            continue
        qq = np.dot(q_val, q_val)
        vv = np.dot(v_val, v_val)
        if method == 0:      # GD on both factors from the same point
            ea, eb = eta, eta
        elif method == 2:    # PA v2: the unfactored PA step
            e = min(loss / (qq * vv), C) if qq * vv > 0.0 else 0.0
            ea, eb = e, e
        else:                # iterative PA: A first
            den = qq * np.dot(bv, bv)
            ea = min(loss / den, C) if den > 0.0 else 0.0
            eb = 0.0
        aq_old = aq.copy()
        # A <- A + ea q (B^T v)^T  (rows at the non-zeros of q)
        for s in range(q_idx.shape[0]):
            A[q_idx[s]] += (ea * q_val[s]) * bv
        if method == 1:      # then B, against the loss after the A step
            for s in range(q_idx.shape[0]):
                aq += (ea * q_val[s] * q_val[s]) * bv
            loss2 = triplet_hinge(np.dot(aq, bv))
            den = vv * np.dot(aq, aq)
            eb = min(loss2 / den, C) if (loss2 > 0.0 and den > 0.0) else 0.0
            aq_old[:] = aq
        # B <- B + eb v (A^T q)^T
        for s in range(nv):
            B[v_idx[s]] += (eb * v_val[s]) * aq_old
        if not (np.isfinite(ea) and np.isfinite(eb)):
            return t
    return -1
