"""Pairwise kernels of the neighborhood learners (LMNN, NCA).

Both learners optimize a linear map ``L`` (r x d) through squared distances
``d_ab = ||L (x_a - x_b)||^2 = ||z_a - z_b||^2`` of the embedded rows
``Z = X L^T``.  Their gradients are weighted sums of outer products of row
differences,

    dE/dL = 2 sum_{a, b} w_ab L (x_a - x_b)(x_a - x_b)^T
          = 2 sum_{a, b} w_ab (z_a - z_b)(x_a - x_b)^T,

which :class:`PairOuterSum` forms block by block with matrix products
(``O(nnz(W) (r + d) + n r d)`` for a block of weights ``W``), never an
``(n, n, d)`` or ``(pairs, d)`` array of differences.
:func:`squared_distances_block` gives the squared distances of a block of
rows to every row (an ``(b, n)`` array), and :func:`block_size` the rows per
block for a memory budget.  :func:`pair_difference_scatter` sums the outer
products of the differences of listed pairs of rows (KISSME's pair
scatters, RCA's chunklets of two) over the distinct rows they name.

Tests: ``tests/test_linalg_pairwise.py``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.engine.threads import limit_threads, rows_work

__all__ = ["squared_distances_block", "block_size", "PairOuterSum", "pair_difference_scatter",
           "BLOCK_ELEMENTS"]

#: entries of one (b, n) block of distances or weights (16 MiB of float64)
BLOCK_ELEMENTS = 2 ** 21


def block_size(n_rows: int, width: int, elements: int | None = None) -> int:
    """Rows per block so that a ``(rows, width)`` float64 block holds at
    most ``elements`` entries (default :data:`BLOCK_ELEMENTS`; at least one
    row, at most ``n_rows``)."""
    elements = BLOCK_ELEMENTS if elements is None else elements
    return int(max(1, min(max(n_rows, 1), elements // max(width, 1))))


def squared_distances_block(Z: np.ndarray, rows: slice, sq_norms: np.ndarray | None = None,
                            Y: np.ndarray | None = None) -> np.ndarray:
    """``D[i, j] = ||Z[rows][i] - Y[j]||^2`` (Y defaults to Z), clipped at 0.

    Formed as ``|z|^2 + |y|^2 - 2 z . y`` with one matrix product;
    ``sq_norms`` are the squared row norms of Y (computed when None).  The
    rounding error of an entry is about ``eps (|z|^2 + |y|^2)``: callers that
    need exact small distances recompute the ones they keep from differences.
    """
    Y = Z if Y is None else Y
    if sq_norms is None:
        sq_norms = np.einsum("ij,ij->i", Y, Y)
    B = Z[rows]
    bn = sq_norms[rows] if Y is Z else np.einsum("ij,ij->i", B, B)
    D = B @ Y.T
    D *= -2.0
    D += bn[:, None]
    D += sq_norms[None, :]
    np.maximum(D, 0.0, out=D)
    return D


class PairOuterSum:
    """Accumulates ``S = sum_{a, b} w_ab (z_a - z_b)(x_a - x_b)^T`` (r x d)
    over blocks of weights.

    ``add(rows, W)`` takes the weights of the pairs ``(a, b)`` with ``a`` in
    the row range ``rows`` (a slice) and any ``b``: ``W`` of shape
    ``(len(rows), n)``, dense or scipy.sparse.  Expanding the product,

        sum_{a in rows, b} w_ab (z_a - z_b)(x_a - x_b)^T
            = Z_B^T diag(W 1) X_B - Z_B^T (W X) - (W Z)^T X_B
              + Z^T diag(W^T 1) X,

    and the last term is summed over blocks as the column sums ``W^T 1``
    before one product in :meth:`result`.  With ``Z = X L^T``, ``2 S`` is
    the gradient with respect to ``L`` of ``sum w_ab ||L (x_a - x_b)||^2``
    at fixed weights.

    Parameters
    ----------
    Z : ndarray of shape (n, r)
        The embedded rows ``X L^T``.
    X : ndarray of shape (n, d)
        The rows (dense).
    """

    def __init__(self, Z: np.ndarray, X: np.ndarray):
        self.Z, self.X = Z, X
        n = X.shape[0]
        self.S = np.zeros((Z.shape[1], X.shape[1]))
        self.col = np.zeros(n)

    def add(self, rows: slice, W) -> None:
        """Add the pairs ``(a, b)``, ``a`` in ``rows``, with weights ``W``."""
        Z, X = self.Z, self.X
        ZB, XB = Z[rows], X[rows]
        if sp.issparse(W):
            W = sp.csr_matrix(W)
            rsum = np.asarray(W.sum(axis=1)).ravel()
            csum = np.asarray(W.sum(axis=0)).ravel()
        else:
            rsum = W.sum(axis=1)
            csum = W.sum(axis=0)
        # sum_{a, b} w_ab z_a x_b^T as (W^T Z_B)^T X (n r per row of W) when
        # r < d, else as Z_B^T (W X) (n d per row)
        if Z.shape[1] < X.shape[1]:
            WtZ = np.asarray(W.T @ ZB)
            self.S -= WtZ.T @ X
        else:
            self.S -= ZB.T @ np.asarray(W @ X)
        WZ = np.asarray(W @ Z)
        self.S += (ZB * rsum[:, None]).T @ XB
        self.S -= WZ.T @ XB
        self.col += csum

    def result(self) -> np.ndarray:
        """``S`` (r x d) over every block added."""
        return self.S + (self.Z * self.col[:, None]).T @ self.X


def pair_difference_scatter(X, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_k (x_{a_k} - x_{b_k})(x_{a_k} - x_{b_k})^T`` (d x d, dense) for
    the pairs ``(a_k, b_k)`` of rows of ``X`` (dense or CSR).

    Grouped by row, the sum is ``X_u^T B^T B X_u`` over the ``u`` distinct
    rows the pairs name, ``B`` the pairs' ``m x u`` incidence matrix (+1 at
    ``a_k``, -1 at ``b_k``; ``B^T B`` the Laplacian of the pair counts):
    ``O(m d + u d^2)`` instead of the ``O(m d^2)`` of one outer product per
    pair, never an ``(m, d)`` array of differences.  Answers about few items
    repeat their rows (20,000 answers about 57 images)."""
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    m, d = a.size, X.shape[1]
    if m == 0:
        return np.zeros((d, d))
    rows, local = np.unique(np.concatenate([a, b]), return_inverse=True)
    B = sp.csr_matrix((np.tile([1.0, -1.0], m), np.column_stack([local[:m], local[m:]]).ravel(),
                       np.arange(0, 2 * m + 1, 2)), shape=(m, rows.size))
    Xu = X[rows]
    with limit_threads(rows_work(rows.size, d)):     # the thread rule on its own product
        G = Xu.T @ ((B.T @ B) @ Xu)
    G = G.toarray() if sp.issparse(G) else np.asarray(G)
    return 0.5 * (G + G.T)
