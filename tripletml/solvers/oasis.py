"""OASIS (Chechik, Sharma, Shalit & Bengio, JMLR 2010): the compiled
passive-aggressive steps of Algorithm 1 on ``W`` over CSR rows.

:func:`oasis_steps` makes one PA-I step per triplet (eq. 6: ``tau = min(C,
l / ||q v^T||_F^2)``, ``v = p+ - p-``, ``W += tau q v^T``) and records each
loss and margin before its update; :func:`oasis_margins` evaluates margins
without updating.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..linalg.sparse_rows import sparse_bilinear, sparse_rank_one_update, triplet_rows
from ..losses import triplet_hinge

__all__ = ["oasis_steps", "oasis_margins"]


@njit(cache=True, nogil=True)
def oasis_steps(W, indptr, indices, data, triplets, C, losses, margins, vidx, vval):
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        m = sparse_bilinear(W, q_idx, q_val, v_idx, v_val)
        nrm = np.dot(q_val, q_val) * np.dot(v_val, v_val)  # ||q v^T||_F^2
        if not (np.isfinite(m) and np.isfinite(nrm)):
            return t
        margins[t] = m
        loss = triplet_hinge(m)
        losses[t] = loss
        if loss > 0.0 and nrm > 0.0:
            tau = min(C, loss / nrm)                          # PA-I step (eq. 6)
            sparse_rank_one_update(W, tau, q_idx, q_val, v_idx, v_val)
    return -1


@njit(cache=True, nogil=True)
def oasis_margins(W, indptr, indices, data, triplets, out, vidx, vval):
    """Margins ``q^T W (p+ - p-)`` of the given triplets at W (no update),
    computed as in :func:`oasis_steps`."""
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        out[t] = sparse_bilinear(W, q_idx, q_val, v_idx, v_val)
