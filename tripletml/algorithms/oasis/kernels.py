"""OASIS (Chechik, Sharma, Shalit & Bengio, JMLR 2010): the compiled
passive-aggressive steps of Algorithm 1 on ``W`` over CSR rows.

:func:`oasis_steps` makes one PA-I step per triplet (eq. 6: ``tau = min(C,
l / ||q v^T||_F^2)``, ``v = p+ - p-``, ``W += tau q v^T``) and records each
loss and margin before its update; :func:`oasis_margins`
(:func:`tripletml.linalg.sparse_rows.bilinear_margins`) evaluates margins
without updating.

:func:`oasis_gram_steps` makes the same steps in the Gram space of the rows a
block of triplets uses (the *Gram route*, for few rows with many features):
every update ``tau q v^T`` has ``q`` and ``v`` in the span of those ``k``
rows ``R``, so over a block ``W = W_0 + R^T A R`` with a ``k x k``
coefficient matrix ``A``, and every margin the block needs is an entry of
``H = R W R^T``, kept current by an ``O(k^2)`` rank-one update per step
(``H += tau (R q)(R v)^T``, two columns of ``G = R R^T``).  The iterates are
the paper's, step for step; a step costs ``O(k^2 + nnz(v))`` instead of
``O(nnz(q) nnz(v))``, and the block ``O(nnz(R) d)`` to form ``R W R^T`` and
to add ``R^T A R`` to ``W``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg.sparse_rows import (csr_row_diff, gram_rank_one_update, sparse_bilinear,
                                          sparse_rank_one_update, triplet_rows)
from tripletml.linalg.sparse_rows import bilinear_margins as oasis_margins
from tripletml.losses import triplet_hinge

__all__ = ["oasis_steps", "oasis_margins", "oasis_gram_steps", "gram_route_pays", "pa_step"]


@njit(cache=True, nogil=True)
def pa_step(m, nrm, C, t, losses, margins):  # pragma: no cover - compiled
    """Record step ``t``'s margin ``m`` and hinge loss; return its PA-I step
    size ``tau = min(C, l / ||q v^T||_F^2)`` (eq. 6), 0 when passive."""
    margins[t] = m
    loss = triplet_hinge(m)
    losses[t] = loss
    if loss > 0.0 and nrm > 0.0:
        return min(C, loss / nrm)
    return 0.0


@njit(cache=True, nogil=True)
def oasis_steps(W, indptr, indices, data, triplets, C, losses, margins, vidx, vval):
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        m = sparse_bilinear(W, q_idx, q_val, v_idx, v_val)
        nrm = np.dot(q_val, q_val) * np.dot(v_val, v_val)  # ||q v^T||_F^2
        if not (np.isfinite(m) and np.isfinite(nrm)):
            return t
        tau = pa_step(m, nrm, C, t, losses, margins)
        if tau > 0.0:
            sparse_rank_one_update(W, tau, q_idx, q_val, v_idx, v_val)
    return -1


@njit(cache=True, nogil=True)
def oasis_gram_steps(H, G, indptr, indices, data, triplets, C, losses, margins, A, vidx, vval):
    """The steps of :func:`oasis_steps` in the Gram space of ``k`` rows ``R``.

    Parameters
    ----------
    H : ndarray (k, k)
        ``R W R^T`` at the block's start; updated in place (``H[i, j]`` is
        ``r_i^T W r_j`` at the current W).
    G : ndarray (k, k)
        ``R R^T``.
    indptr, indices, data : CSR arrays of ``R`` (the rows, in the order of
        the local ids), used for the exact ``||p+ - p-||^2``.
    triplets : int64 (m, 3)
        Local ids ``0..k-1`` of ``(q, p+, p-)``.
    A : ndarray (k, k)
        Zeroed on entry; accumulates the block's update ``W - W_0 = R^T A R``.

    Returns -1, or the position of the first step whose margin or norm is
    not finite (the steps before it are in ``A``).
    """
    w = np.empty(H.shape[0])
    for t in range(triplets.shape[0]):
        q = triplets[t, 0]
        a = triplets[t, 1]
        b = triplets[t, 2]
        m = H[q, a] - H[q, b]
        nv = csr_row_diff(indptr, indices, data, a, b, vidx, vval)
        vv = np.dot(vval[:nv], vval[:nv])                  # exact ||p+ - p-||^2
        nrm = G[q, q] * vv                                   # ||q v^T||_F^2
        if not (np.isfinite(m) and np.isfinite(nrm)):
            return t
        tau = pa_step(m, nrm, C, t, losses, margins)
        if tau > 0.0:
            A[q, a] += tau
            A[q, b] -= tau
            gram_rank_one_update(H, G, tau, q, a, b, w)      # H += tau (R q)(R v)^T
    return -1


def gram_route_pays(n_rows_used: int, nnz_used: int, n_steps: int, n_features: int) -> bool:
    """Whether the Gram route is cheaper for a block: its cost, about
    ``2 nnz(R) d`` (forming ``R W R^T``, adding ``R^T A R``) plus ``m k^2``,
    against the plain route's ``m * 2 nnz_row^2`` (``nnz(q) nnz(v)`` per
    step, with the block's mean row size), with a factor 4 to spare for the
    Gram route's set-up."""
    k = max(n_rows_used, 1)
    per_row = nnz_used / k
    plain = n_steps * 2.0 * per_row * per_row
    gram = 2.0 * nnz_used * n_features + n_steps * float(k) * k
    return 4.0 * gram < plain
