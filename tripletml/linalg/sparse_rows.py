"""Sparse row kernels
------------------
The online learners (OASIS, SDCA, ...) work on one triplet ``(q, p+, p-)``
at a time.  With X stored as CSR (dense input is converted once; a dense row
is a CSR row with every column present, so there is one code path), a step
forms ``v = x_{p+} - x_{p-}`` by a sorted merge (:func:`csr_row_diff`), then
the bilinear margin ``x_q^T W v`` (:func:`sparse_bilinear`) and the rank-one
update ``W += s x_q v^T`` (:func:`sparse_rank_one_update`) touch only the
non-zero rows and columns: cost ``O(nnz(x_q) nnz(v))`` instead of ``O(d^2)``.
The kernels are Numba functions so the solvers' per-sample loops can call
them from compiled code.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from tripletml.core.validation import _checked_csr


def as_csr(X) -> sp.csr_matrix:
    """Float64 CSR copy-or-view of X in canonical form (sorted indices, no
    duplicates); dense input keeps every entry, including zeros, so the kernels
    see a dense row.

    The kernels below index through ``indptr``/``indices`` without bounds
    checks, so a sparse X is verified here in O(nnz) even though callers pass
    X that :func:`tripletml.core.validation.check_X` already accepted: the check is
    one pass over the index arrays (negligible next to training), and it keeps
    a malformed matrix (column index >= n_features, non-monotone ``indptr``,
    ...) from reaching a kernel through any future caller.  Raises ValueError
    on a malformed matrix.
    """
    if sp.issparse(X):
        X = _checked_csr(X, "as_csr", "X")
        return X if X.dtype == np.float64 else X.astype(np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"as_csr: X must be 2-D, got shape {X.shape}.")
    n, d = X.shape
    indptr = np.arange(0, (n + 1) * d, d, dtype=np.int64)
    indices = np.tile(np.arange(d, dtype=np.int32), n)
    return sp.csr_matrix((X.reshape(-1), indices, indptr), shape=(n, d))


@njit(cache=True, nogil=True)
def csr_row_diff(indptr, indices, data, i, j, idx_out, val_out):
    """Write ``x_i - x_j`` (sorted CSR rows) into ``idx_out``/``val_out`` as a
    sparse vector with sorted indices; return its number of entries.  The
    buffers need ``nnz(x_i) + nnz(x_j)`` slots."""
    a, a_end = indptr[i], indptr[i + 1]
    b, b_end = indptr[j], indptr[j + 1]
    k = 0
    while a < a_end or b < b_end:
        if b >= b_end or (a < a_end and indices[a] < indices[b]):
            idx_out[k] = indices[a]
            val_out[k] = data[a]
            a += 1
        elif a >= a_end or indices[b] < indices[a]:
            idx_out[k] = indices[b]
            val_out[k] = -data[b]
            b += 1
        else:
            idx_out[k] = indices[a]
            val_out[k] = data[a] - data[b]
            a += 1
            b += 1
        k += 1
    return k


@njit(cache=True, nogil=True)
def triplet_rows(indptr, indices, data, triplets, t, idx_out, val_out):
    """The sparse rows a triplet step needs: the query ``x_q`` of triplet
    ``t`` and ``v = x_{p+} - x_{p-}`` (written into the buffers by
    :func:`csr_row_diff`), as ``(q_idx, q_val, v_idx, v_val)`` views."""
    q = triplets[t, 0]
    a, b = indptr[q], indptr[q + 1]
    k = csr_row_diff(indptr, indices, data, triplets[t, 1], triplets[t, 2], idx_out, val_out)
    return indices[a:b], data[a:b], idx_out[:k], val_out[:k]


@njit(cache=True, nogil=True)
def sparse_bilinear(W, a_idx, a_val, b_idx, b_val):
    """``a^T W b`` for sparse vectors given as (indices, values).

    When ``b`` has every column (``nnz(b) = d``, so its sorted indices are
    ``0..d-1``) the inner product runs on contiguous rows of W (BLAS ddot)."""
    acc = 0.0
    if b_idx.shape[0] == W.shape[1]:
        for s in range(a_idx.shape[0]):
            acc += a_val[s] * np.dot(W[a_idx[s]], b_val)
        return acc
    for s in range(a_idx.shape[0]):
        r = a_idx[s]
        t = 0.0
        for u in range(b_idx.shape[0]):
            t += W[r, b_idx[u]] * b_val[u]
        acc += a_val[s] * t
    return acc


@njit(cache=True, nogil=True)
def sparse_rank_one_update(W, scale, a_idx, a_val, b_idx, b_val):
    """In place ``W += scale * a b^T`` for sparse vectors (indices, values);
    touches ``nnz(a) * nnz(b)`` entries (contiguous rows when ``nnz(b) = d``)."""
    if b_idx.shape[0] == W.shape[1]:
        for s in range(a_idx.shape[0]):
            row = W[a_idx[s]]
            c = scale * a_val[s]
            for u in range(row.shape[0]):
                row[u] += c * b_val[u]
        return
    for s in range(a_idx.shape[0]):
        r = a_idx[s]
        c = scale * a_val[s]
        for u in range(b_idx.shape[0]):
            W[r, b_idx[u]] += c * b_val[u]


@njit(cache=True, nogil=True)
def bilinear_margins(W, indptr, indices, data, triplets, out, vidx, vval):
    """Margins ``q^T W (p+ - p-)`` of the given triplets at a dense W (no
    update), written to ``out``: the margin every bilinear step computes
    before its update (OASIS's eq. 6 step, the evaluation of a parameter
    mix in :mod:`tripletml.distributed.mixing`)."""
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        out[t] = sparse_bilinear(W, q_idx, q_val, v_idx, v_val)


def diff_buffers(Xc) -> tuple[np.ndarray, np.ndarray]:
    """Work buffers for :func:`csr_row_diff` on rows of ``Xc``."""
    nnz = np.diff(Xc.indptr)
    size = 2 * int(nnz.max()) if nnz.size else 0
    return np.empty(max(size, 1), dtype=Xc.indices.dtype), np.empty(max(size, 1))


def rowwise_dot(A, B) -> np.ndarray:
    """Row-wise inner products ``sum(A * B, axis=1)`` for dense or sparse
    operands of equal shape, without densifying a sparse operand."""
    if sp.issparse(A) and sp.issparse(B):
        return np.asarray(A.multiply(B).sum(axis=1)).ravel()
    if sp.issparse(A):
        A, B = B, A
    if sp.issparse(B):
        return np.asarray(B.multiply(np.asarray(A)).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", np.asarray(A), np.asarray(B))


