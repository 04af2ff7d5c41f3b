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
def gram_rank_one_update(H, G, scale, q, a, b, w):
    """In place ``H += scale * G[:, q] (G[a] - G[b])``: the rank-one update
    ``W += scale * r_q (r_a - r_b)^T`` seen in the Gram space of rows ``R``
    (``H = R W R^T``, ``G = R R^T``), ``O(k^2)`` on contiguous rows; ``w``
    is a work buffer of length ``k``."""
    k = H.shape[0]
    for j in range(k):
        w[j] = G[a, j] - G[b, j]
    for i in range(k):
        c = scale * G[i, q]
        if c != 0.0:
            row = H[i]
            for j in range(k):
                row[j] += c * w[j]


def used_rows(triplets: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, local)`` as ``np.unique(triplets, return_inverse=True)``
    (the sorted distinct row ids and each entry's position among them,
    shaped like ``triplets``) by a mark over the ``n_rows`` ids instead of a
    sort: ``O(n_rows + size)`` (the sort where ``n_rows`` is the larger).
    Raises ValueError for ids that are not integers in ``[0, n_rows)``."""
    t = np.asarray(triplets)
    if t.size and (t.dtype.kind not in "iu" or t.min() < 0 or t.max() >= n_rows):
        raise ValueError(f"used_rows: row ids must be integers in [0, {n_rows}); got dtype "
                         f"{t.dtype} and values {t.min()}..{t.max()}.")
    if n_rows > 8 * t.size:
        rows, local = np.unique(t, return_inverse=True)
        return rows, local.reshape(t.shape).astype(np.int64)
    mark = np.zeros(int(n_rows), dtype=bool)
    mark[t.ravel()] = True
    rows = np.flatnonzero(mark)
    pos = np.cumsum(mark, dtype=np.int64) - 1
    return rows, pos[t]


def gram_space(R, W: np.ndarray):
    """``(H, G, Rd)`` for steps in the Gram space of the rows ``R`` (CSR,
    ``k x d``): ``H = R W R^T`` (C-contiguous), ``G = R R^T`` and the dense
    rows ``Rd`` (None when R is sparse, under a quarter full)."""
    dense = R.nnz > 0.25 * R.shape[0] * R.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):   # the steps report non-finite values
        if dense:
            Rd = R.toarray()
            return np.ascontiguousarray((Rd @ W) @ Rd.T), Rd @ Rd.T, Rd
        RW = np.asarray(R @ W)
        H = np.ascontiguousarray(np.asarray(R @ RW.T).T)
        return H, np.asarray((R @ R.T).todense()), None


def add_from_gram(W: np.ndarray, R, Rd, A: np.ndarray) -> None:
    """In place ``W += R^T A R`` (``Rd`` the dense rows of :func:`gram_space`,
    or None for sparse ``R``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if Rd is not None:
            W += Rd.T @ (A @ Rd)
        else:
            W += np.asarray(R.T @ np.asarray(R.T @ A.T).T)


@njit(cache=True, nogil=True)
def bilinear_margins(W, indptr, indices, data, triplets, out, vidx, vval):
    """Margins ``q^T W (p+ - p-)`` of the given triplets at a dense W (no
    update), written to ``out``: the margin every bilinear step computes
    before its update (OASIS's eq. 6 step, the evaluation of a parameter
    mix in :mod:`tripletml.distributed.mixing`)."""
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        out[t] = sparse_bilinear(W, q_idx, q_val, v_idx, v_val)


@njit(cache=True, nogil=True)
def _add_scaled_flat(y, a, x):  # pragma: no cover - compiled
    for i in range(y.shape[0]):
        y[i] += a * x[i]


def add_scaled(Y: np.ndarray, a: float, X: np.ndarray) -> np.ndarray:
    """``Y += a * X`` in place, in one pass over memory (no temporary
    ``a * X``: on a 20,000 x 20,000 model that is 3.2 GB written and read
    again), with NumPy's rounding (the product rounded, then the sum; no
    fused multiply-add).  Float64 C-contiguous arrays of one shape take the
    compiled loop; anything else NumPy's expression.  Returns ``Y``."""
    if (Y.shape == X.shape and Y.dtype == np.float64 and X.dtype == np.float64
            and Y.flags.c_contiguous and X.flags.c_contiguous and Y.flags.writeable):
        _add_scaled_flat(Y.reshape(-1), float(a), X.reshape(-1))
    else:
        Y += a * X
    return Y


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


@njit(cache=True, nogil=True)
def _triplet_products(indptr, indices, data, triplets, qv, qq, vv, buf):  # pragma: no cover
    """``qv_t = x_q . (x_p - x_n)``, ``qq_t = ||x_q||^2`` and ``vv_t = ||x_p -
    x_n||^2`` on CSR rows: each row scattered into the dense buffer ``buf``
    (zero on entry and on return), O(nnz) per triplet."""
    for t in range(triplets.shape[0]):
        q, p, n = triplets[t, 0], triplets[t, 1], triplets[t, 2]
        for k in range(indptr[q], indptr[q + 1]):
            buf[indices[k]] = data[k]
        s = 0.0
        for k in range(indptr[p], indptr[p + 1]):
            s += buf[indices[k]] * data[k]
        for k in range(indptr[n], indptr[n + 1]):
            s -= buf[indices[k]] * data[k]
        sq = 0.0
        for k in range(indptr[q], indptr[q + 1]):
            sq += data[k] * data[k]
            buf[indices[k]] = 0.0
        for k in range(indptr[p], indptr[p + 1]):
            buf[indices[k]] = data[k]
        for k in range(indptr[n], indptr[n + 1]):
            buf[indices[k]] -= data[k]
        v = 0.0
        for k in range(indptr[p], indptr[p + 1]):
            v += buf[indices[k]] * buf[indices[k]]
            buf[indices[k]] = 0.0
        for k in range(indptr[n], indptr[n + 1]):
            v += buf[indices[k]] * buf[indices[k]]
            buf[indices[k]] = 0.0
        qv[t], qq[t], vv[t] = s, sq, v


#: distinct rows up to which :func:`triplet_products` forms their Gram matrix
_GRAM_ROWS = 2048


def triplet_products(Xc, triplets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x_q . v, ||x_q||^2, ||v||^2)`` with ``v = x_p - x_n`` for every
    triplet, from the CSR rows without a ``d x d`` identity or an ``m x d``
    array: the Gram matrix of the distinct rows the triplets name when they
    are few (few items, many answers), else sparse dots per triplet."""
    t = np.ascontiguousarray(triplets, dtype=np.int64)
    if t.ndim != 2 or t.shape[1] != 3:
        raise ValueError(f"triplet_products: triplets must have shape (m, 3), got {t.shape}.")
    if t.shape[0] == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    if not sp.isspmatrix_csr(Xc):
        raise TypeError(f"triplet_products: rows must be a CSR matrix, got {type(Xc).__name__} "
                        "(tripletml.linalg.sparse_rows.as_csr).")
    if t.min() < 0 or t.max() >= Xc.shape[0]:
        raise ValueError(f"triplet_products: triplet indices must lie in [0, {Xc.shape[0]}); "
                         f"got {int(t.min())}..{int(t.max())}.")
    rows, local = used_rows(t, Xc.shape[0])
    if rows.size <= _GRAM_ROWS:
        R = Xc[rows]
        G = np.asarray((R @ R.T).toarray(), dtype=np.float64)
        q, p, n = local.T
        vv = np.maximum(G[p, p] + G[n, n] - 2.0 * G[p, n], 0.0)
        return G[q, p] - G[q, n], G[q, q].copy(), vv
    out = np.empty((3, t.shape[0]))
    # a p or n shared with the query is handled: each row is scattered anew
    _triplet_products(Xc.indptr, Xc.indices.astype(np.int64), Xc.data.astype(np.float64), t,
                      out[0], out[1], out[2], np.zeros(Xc.shape[1]))
    return out[0], out[1], out[2]


#: a margin at most this fraction of its terms' size is a tie (rounding)
TIE_RTOL = 1e-9


def margin_scale(margins: np.ndarray, sizes: np.ndarray | None = None) -> float:
    """``1 / median |m|`` over the margins ``m`` of the identity on a fit's
    triplets that are not ties: the scale at which the identity's margin on
    the typical answer it separates is 1 (ties, common with binary, one-hot
    or count features, say nothing of the scale); 0 when it separates none.
    ``sizes``: per triplet, the size of the terms the margin is a difference
    of (a margin within ``TIE_RTOL`` of it is a tie to rounding)."""
    a = np.abs(np.asarray(margins, dtype=np.float64))
    keep = np.isfinite(a) & (a > 0)
    if sizes is not None:
        keep &= a > TIE_RTOL * np.abs(np.asarray(sizes, dtype=np.float64))
    a = a[keep]
    if a.size == 0:
        return 0.0
    med = float(np.median(a))
    return 1.0 / med if med > 0 and np.isfinite(1.0 / med) else 0.0
