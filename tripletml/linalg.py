"""Linear-algebra kernels shared by the solvers.

Every kernel here has its own tests in ``tests/test_linalg.py``.

Sparse row kernels
------------------
The online learners (OASIS, SDCA, ...) work on one triplet ``(q, p+, p-)``
at a time.  With X stored as CSR (dense input is converted once; a dense row
is a CSR row with every column present, so there is one code path), the
bilinear margin ``x_q^T W (x_{p+} - x_{p-})`` and the rank-one update
``W += s x_q (x_{p+} - x_{p-})^T`` touch only the non-zero rows and columns:
cost ``O(nnz(x_q) (nnz(x_{p+}) + nnz(x_{p-})))`` instead of ``O(d^2)``.
The kernels are Numba functions so the solvers' per-sample loops can call
them from compiled code.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = [
    "as_csr",
    "csr_row_dot",
    "csr_row_sqdist",
    "csr_bilinear",
    "csr_triplet_margin",
    "csr_triplet_rank_one_update",
    "rowwise_dot",
]


def as_csr(X) -> sp.csr_matrix:
    """Float64 CSR copy-or-view of X with sorted indices (dense input keeps
    every entry, including zeros, so the kernels see a dense row)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
        return X
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, d = X.shape
    indptr = np.arange(0, (n + 1) * d, d, dtype=np.int64)
    indices = np.tile(np.arange(d, dtype=np.int32), n)
    return sp.csr_matrix((X.reshape(-1), indices, indptr), shape=(n, d))


@njit(cache=True, nogil=True)
def csr_row_dot(indptr, indices, data, i, j):
    """``x_i . x_j`` for two CSR rows with sorted indices (merge join)."""
    a, a_end = indptr[i], indptr[i + 1]
    b, b_end = indptr[j], indptr[j + 1]
    acc = 0.0
    while a < a_end and b < b_end:
        ia = indices[a]
        ib = indices[b]
        if ia == ib:
            acc += data[a] * data[b]
            a += 1
            b += 1
        elif ia < ib:
            a += 1
        else:
            b += 1
    return acc


@njit(cache=True, nogil=True)
def csr_row_sqdist(indptr, indices, data, i, j):
    """``||x_i - x_j||^2`` for two CSR rows with sorted indices, computed by a
    merge so there is no cancellation when the rows are close."""
    a, a_end = indptr[i], indptr[i + 1]
    b, b_end = indptr[j], indptr[j + 1]
    acc = 0.0
    while a < a_end or b < b_end:
        if b >= b_end or (a < a_end and indices[a] < indices[b]):
            acc += data[a] * data[a]
            a += 1
        elif a >= a_end or indices[b] < indices[a]:
            acc += data[b] * data[b]
            b += 1
        else:
            diff = data[a] - data[b]
            acc += diff * diff
            a += 1
            b += 1
    return acc


@njit(cache=True, nogil=True)
def csr_bilinear(W, indptr, indices, data, i, j):
    """``x_i^T W x_j`` for CSR rows i and j of the same matrix."""
    acc = 0.0
    for a in range(indptr[i], indptr[i + 1]):
        r = indices[a]
        s = 0.0
        for b in range(indptr[j], indptr[j + 1]):
            s += W[r, indices[b]] * data[b]
        acc += data[a] * s
    return acc


@njit(cache=True, nogil=True)
def csr_triplet_margin(W, indptr, indices, data, q, p, n):
    """``x_q^T W (x_p - x_n)``: the bilinear margin of triplet (q, p, n)."""
    return csr_bilinear(W, indptr, indices, data, q, p) - csr_bilinear(W, indptr, indices,
                                                                         data, q, n)


@njit(cache=True, nogil=True)
def csr_triplet_rank_one_update(W, scale, indptr, indices, data, q, p, n):
    """In place ``W += scale * x_q (x_p - x_n)^T`` touching only non-zeros."""
    for a in range(indptr[q], indptr[q + 1]):
        r = indices[a]
        s = scale * data[a]
        for b in range(indptr[p], indptr[p + 1]):
            W[r, indices[b]] += s * data[b]
        for b in range(indptr[n], indptr[n + 1]):
            W[r, indices[b]] -= s * data[b]


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
