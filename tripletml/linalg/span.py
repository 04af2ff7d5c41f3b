"""The span route: fit on the coordinates of the training rows' span when
there are fewer rows than features, and lift the model back to ``d x d``.

With ``n`` preprocessed training rows ``X`` (``n x d``, ``n < d``) and ``Q``
(``d x r``, ``r <= n``) an orthonormal basis of their span (:func:`span_basis`),
``X = Z Q^T`` with ``Z = X Q`` (``n x r``, :func:`reduce_rows`).  A learner
whose model starts at ``c I`` (``c`` = 1 for the identity, 0 for the zero
matrix) and whose every update is ``sum_k a_k b_k^T`` with ``a_k, b_k`` in the
span of the rows (a rank-one step on a query and a difference of rows, a
Bregman projection ``M x x^T M`` with ``x`` a difference of rows), with step
sizes that use only inner products of rows under the current model, has
after any number of steps

    W = c I + Q (W_r - c I_r) Q^T,

where ``W_r`` is the same learner run on ``Z`` (every inner product
``x_i^T W x_j`` equals ``z_i^T W_r z_j``, so the two runs take the same
steps).  :func:`lift_square` forms it; the complement of the span keeps
``c I``, so a new row at test time keeps its plain geometry outside the
span.  The cost is ``O(n d r)`` for the basis, the fit at width ``r``, and
``O(d^2 r)`` for the lift, against a fit whose steps cost ``O(d^2)`` each.

:func:`lift_psd_factor` gives ``components_`` (``diag(sqrt(s)) U^T``, rows
in decreasing order of eigenvalue, as
:func:`tripletml.linalg.eig_update.psd_factor`) of a lifted symmetric
matrix from the ``r x r`` eigendecomposition and an orthonormal basis of the
complement, without a ``d x d`` eigendecomposition.  Where the lifted
matrix has a repeated eigenvalue (``c`` on the complement), its eigenvectors
are unique only up to a rotation of that eigenspace, exactly as for the
plain route's ``eigh``: ``components_^T components_`` is the same matrix.

Learners declare the route with ``_span_lift_spec`` (see
:meth:`tripletml.core.base.TripletLearner._span_lift_spec`); the fit hook is
:meth:`tripletml.core.base.TripletLearner._fit_span`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.engine.threads import factor_work, limit_threads

__all__ = ["span_basis", "reduce_rows", "lift_square", "lift_psd_factor",
           "complement_basis", "span_route_applies"]

#: singular values below ``SPAN_RTOL * max(n, d) * s_max`` do not count
#: (numpy's ``matrix_rank`` rule): the rows are ``Z Q^T`` to that accuracy
SPAN_RTOL = np.finfo(np.float64).eps


def span_route_applies(n_rows: int, n_features: int) -> bool:
    """Whether the span route pays: fewer rows than features (so the span
    is a proper subspace, ``r <= n < d``)."""
    return 0 < int(n_rows) < int(n_features)


def _dense(X) -> np.ndarray:
    if sp.issparse(X):
        return np.asarray(X.toarray(), dtype=np.float64)
    return np.asarray(X, dtype=np.float64)


def span_basis(X) -> np.ndarray:
    """An orthonormal basis ``Q`` (``d x r``) of the span of the rows of X
    (dense or sparse, ``n x d``): the right singular vectors with singular
    values above ``eps * max(n, d) * s_max`` (numpy's ``matrix_rank`` rule).

    ``r`` = 0 (a ``d x 0`` array) for rows that are all zero.  Cost: a thin
    QR of ``X^T`` and the SVD of its ``n x n`` triangle, ``O(n^2 d)`` (a
    third of a wide thin SVD's time).
    """
    Xd = _dense(X)
    n, d = Xd.shape
    if n == 0 or d == 0:
        return np.zeros((d, 0))
    # the thread rule (tripletml.engine.threads) on the decomposition's own
    # synchronised calls: the caller's fit may be priced as d x d work
    with limit_threads(factor_work(max(n, d), min(n, d))):
        if n < d:      # X^T = Q0 R, R = U S V^T: X's right singular vectors are Q0 U
            Q0, R = np.linalg.qr(Xd.T, mode="reduced")
            U, s, _ = np.linalg.svd(R)
            V = Q0 @ U
        else:
            _, s, Vt = np.linalg.svd(Xd, full_matrices=False)
            V = Vt.T
    top = float(s[0]) if s.size else 0.0
    if not (np.isfinite(top) and top > 0.0):
        return np.zeros((d, 0))
    keep = s > SPAN_RTOL * max(n, d) * top
    Q = V[:, keep]
    return np.ascontiguousarray(Q)


def reduce_rows(X, Q: np.ndarray) -> np.ndarray:
    """``X Q`` (dense ``n x r``), the coordinates of the rows in the basis."""
    if sp.issparse(X):
        return np.ascontiguousarray(np.asarray(X @ Q, dtype=np.float64))
    return np.ascontiguousarray(np.asarray(X, dtype=np.float64) @ Q)


def lift_square(A_r: np.ndarray, Q: np.ndarray, c: float) -> np.ndarray:
    """``c I_d + Q (A_r - c I_r) Q^T`` (a new ``d x d`` array)."""
    A_r = np.asarray(A_r, dtype=np.float64)
    r = Q.shape[1]
    if A_r.shape != (r, r):
        raise ValueError(f"lift_square: A_r must be {r} x {r}, got {A_r.shape}")
    D = A_r - c * np.eye(r)
    with limit_threads(float(Q.shape[0]) ** 2 * r):
        out = (Q @ D) @ Q.T
    out[np.diag_indices_from(out)] += c
    return out


def complement_basis(Q: np.ndarray) -> np.ndarray:
    """An orthonormal basis (``d x (d - r)``) of the orthogonal complement of
    the columns of the orthonormal ``Q`` (the last columns of a complete QR,
    ``O(d^2 r)``)."""
    d, r = Q.shape
    if r == 0:
        return np.eye(d)
    with limit_threads(factor_work(d, d, r)):   # the complete d x d Q from r reflectors
        Qc, _ = np.linalg.qr(Q, mode="complete")
    return np.ascontiguousarray(Qc[:, r:])


def lift_psd_factor(A_r: np.ndarray, Q: np.ndarray, c: float, rank_tol: float
                    ) -> tuple[np.ndarray, int]:
    """:func:`~tripletml.linalg.eig_update.psd_factor` of
    ``lift_square(A_r, Q, c)`` (symmetric ``A_r``) without forming it:
    the eigenvalues are those of ``A_r`` (eigenvectors ``Q U_r``) and ``c``
    (``d - r`` times, on the complement).  Returns ``(L, rank)``, ``L`` of
    shape ``(rank, d)``, rows ``sqrt(s) u^T`` in decreasing order of ``s``,
    eigenvalues below ``rank_tol`` times the largest dropped."""
    d, r = Q.shape
    ev_r, U_r = np.linalg.eigh(0.5 * (A_r + A_r.T))
    n_c = d - r
    ev = np.concatenate([ev_r, np.full(n_c, float(c))])
    top = float(ev.max()) if ev.size else 0.0
    keep = ev > rank_tol * top if top > 0 else np.zeros(ev.shape, bool)
    keep_r, keep_c = keep[:r], keep[r:]
    vecs = [Q @ U_r[:, keep_r]]
    vals = [ev_r[keep_r]]
    if n_c and keep_c.any():                 # all or none: one value c
        vecs.append(complement_basis(Q))
        vals.append(np.full(n_c, float(c)))
    V = np.concatenate(vecs, axis=1)
    s = np.concatenate(vals)
    order = np.argsort(-s, kind="stable")
    L = np.ascontiguousarray((V[:, order] * np.sqrt(s[order])).T)
    return L, int(L.shape[0])
