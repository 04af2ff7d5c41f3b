"""Linear-algebra kernels shared by the solvers.

Every kernel here has its own tests in ``tests/test_linalg.py``.

Sparse row kernels
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
import scipy.linalg as sla
from numba import njit

#: Numba fast-math flags for reduction-heavy kernels: re-association lets the
#: k-length dot products vectorise; no "nnan"/"ninf", so NaN/inf checks stay valid.
FAST = {"reassoc", "contract", "nsz", "arcp"}

__all__ = [
    "as_csr",
    "csr_row_diff",
    "sparse_bilinear",
    "sparse_rank_one_update",
    "diff_buffers",
    "rowwise_dot",
    "pinv_full_column_rank",
    "pinv_drift",
    "balanced_factors",
    "rank_one_update_with_pinv",
    "chol_update",
    "chol_downdate",
    "chol_update_downdate",
    "row_column_update",
    "schur_step_bound",
    "schur_coefficients",
    "inverse_row_column_update",
    "lowrank_eig_update",
    "project_spectrum",
    "project_psd",
    "orthonormality_error",
    "reorthonormalize_eig",
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


# --------------------------------------------------------------------------
# Full-column-rank factors and their pseudo-inverses (LORETA)
# --------------------------------------------------------------------------
def pinv_full_column_rank(A: np.ndarray) -> np.ndarray:
    """``(A^+)^T`` of a full-column-rank ``A`` (n x k) by a thin QR:
    ``A = QR``, ``A^+ = R^-1 Q^T``, returned transposed as ``Q R^-T`` (n x k)
    so that rows stay contiguous.  O(n k^2)."""
    Q, R = np.linalg.qr(A, mode="reduced")
    return np.ascontiguousarray(np.linalg.solve(R, Q.T).T)


def balanced_factors(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, ...]:
    """Re-factor ``W = A B^T`` (rank k) as ``W = A' B'^T`` with balanced,
    orthogonal-column factors ``A' = Q_A U S^(1/2)``, ``B' = Q_B V S^(1/2)``
    (thin QRs ``A = Q_A R_A``, ``B = Q_B R_B`` and the SVD
    ``R_A R_B^T = U S V^T``), and return ``(A', B', (A'^+)^T, (B'^+)^T)`` with
    the exact pseudo-inverses ``Q_A U S^(-1/2)``, ``Q_B V S^(-1/2)``.
    W is unchanged; ``cond(A') = cond(B') = sqrt(cond(W))``, the smallest
    possible.  O((n + m) k^2)."""
    QA, RA = np.linalg.qr(A, mode="reduced")
    QB, RB = np.linalg.qr(B, mode="reduced")
    U, s, Vt = np.linalg.svd(RA @ RB.T)
    if s[-1] <= 0.0:
        raise np.linalg.LinAlgError("W = A B^T has lost rank")
    r = np.sqrt(s)
    QAU, QBV = QA @ U, QB @ Vt.T
    return (np.ascontiguousarray(QAU * r), np.ascontiguousarray(QBV * r),
            np.ascontiguousarray(QAU / r), np.ascontiguousarray(QBV / r))


def pinv_drift(A: np.ndarray, PT: np.ndarray) -> float:
    """``||A^+ A - I_k||_F`` for ``PT = (A^+)^T``: how far a maintained
    pseudo-inverse has drifted (0 for the exact one).  O(n k^2)."""
    k = A.shape[1]
    return float(np.linalg.norm(PT.T @ A - np.eye(k)))


@njit(cache=True, nogil=True, fastmath=FAST)
def rank_one_update_with_pinv(A, PT, c, d, u, h):
    """In place ``A <- A + c d^T`` and ``PT <- ((A + c d^T)^+)^T``.

    Meyer (1973), Theorem 5, for a full-column-rank ``A`` (n x k; then
    ``v = d^T (I - A^+ A) = 0``) and ``beta = 1 + d^T A^+ c != 0``:

        kv = A^+ c,  h = d^T A^+,  u = c - A kv,  s = ||h||^2 ||u||^2 + beta^2,
        (A + c d^T)^+ = A^+ + (1/beta) A^+ h^T u^T - (beta/s) p q^T,
        p = -(||u||^2/beta) A^+ h^T - kv,   q = -(||h||^2/beta) u - h^T.

    Cost O(n k) in three passes (PT read; A read+write; PT read+write).
    ``u`` and ``h`` are length-n work vectors.  Returns False (and leaves
    ``PT`` stale, A updated) when ``|beta|`` is too small for the formula;
    the caller then recomputes the pseudo-inverse.
    """
    n, k = A.shape
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = _pinv_prepare(PT, PT, c, d, h, kv, Ah, np.zeros(k), 0.0)
    return _pinv_apply(A, PT, c, d, u, h, kv, Ah, hh)


@njit(cache=True, nogil=True, fastmath=FAST)
def _pinv_prepare(S, PT, c, d, h, kv, Ah, w, fa):
    """Pass 1 of Meyer's update over the rows of ``PT = (A^+)^T``:
    ``h = PT d``, ``kv = PT^T c``, ``Ah = PT^T h``; returns ``||h||^2``.
    With ``fa != 0`` the vector c is completed on the fly,
    ``c_i += fa * (S_i . w)``, so a caller whose c depends on a row-wise
    product (LORETA-1's A_delta, B_delta) needs no extra pass."""
    n, k = PT.shape
    hh = 0.0
    for i in range(n):
        if fa != 0.0:
            acc = 0.0
            for j in range(k):
                acc += S[i, j] * w[j]
            c[i] += fa * acc
        hi = 0.0
        for j in range(k):
            hi += PT[i, j] * d[j]
        h[i] = hi
        hh += hi * hi
        ci = c[i]
        for j in range(k):
            kv[j] += PT[i, j] * ci
            Ah[j] += PT[i, j] * hi
    return hh


@njit(cache=True, nogil=True, fastmath=FAST)
def _pinv_apply(A, PT, c, d, u, h, kv, Ah, hh):
    """Passes 2-3 of Meyer's update: ``A += c d^T`` (with ``u = c - A kv``),
    then ``PT`` by Theorem 5.  False when ``|beta|`` is too small."""
    n, k = A.shape
    beta = 1.0
    for j in range(k):
        beta += d[j] * kv[j]
    uu = 0.0
    for i in range(n):
        s = 0.0
        for j in range(k):
            s += A[i, j] * kv[j]
        ui = c[i] - s
        u[i] = ui
        uu += ui * ui
        ci = c[i]
        for j in range(k):
            A[i, j] += ci * d[j]
    if abs(beta) < 1e-10:
        return False
    sigma = hh * uu + beta * beta
    p = -(uu / beta) * Ah - kv
    a1 = 1.0 / beta
    a2 = beta / sigma
    for i in range(n):
        qi = -(hh / beta) * u[i] - h[i]
        f1 = u[i] * a1
        f2 = a2 * qi
        for j in range(k):
            PT[i, j] += f1 * Ah[j] - f2 * p[j]
    return True


# --------------------------------------------------------------------------
# Symmetric row-column updates of a PD matrix (COMET): Cholesky root,
# inverse and the Schur-complement step bound
# --------------------------------------------------------------------------
@njit(cache=True, nogil=True, fastmath=FAST)
def chol_update(R, x, work):
    """In place: upper-triangular ``R`` with ``W = R^T R`` becomes the root of
    ``W + x x^T`` (LINPACK dchud, Givens rotations).  O(d^2).  ``x`` is
    copied into ``work`` and not modified."""
    d = R.shape[0]
    work[:] = x
    for k in range(d):
        r = np.hypot(R[k, k], work[k])
        c = r / R[k, k]
        s = work[k] / R[k, k]
        ic = 1.0 / c
        R[k, k] = r
        for j in range(k + 1, d):
            rkj = (R[k, j] + s * work[j]) * ic
            R[k, j] = rkj
            work[j] = c * work[j] - s * rkj


@njit(cache=True, nogil=True, fastmath=FAST)
def chol_downdate(R, x, work):
    """In place: ``R`` (upper, ``W = R^T R``) becomes the root of
    ``W - x x^T`` (hyperbolic rotations).  Returns False, leaving ``R``
    partly modified, when ``W - x x^T`` is not positive definite."""
    d = R.shape[0]
    work[:] = x
    for k in range(d):
        t = R[k, k] * R[k, k] - work[k] * work[k]
        if not t > 0.0:
            return False
        r = np.sqrt(t)
        c = r / R[k, k]
        s = work[k] / R[k, k]
        ic = 1.0 / c
        R[k, k] = r
        for j in range(k + 1, d):
            rkj = (R[k, j] - s * work[j]) * ic
            R[k, j] = rkj
            work[j] = c * work[j] - s * rkj
    return True


@njit(cache=True, nogil=True, fastmath=FAST)
def chol_update_downdate(R, x, y, wx, wy):
    """In place ``R`` becomes the root of ``W + x x^T - y y^T`` in one sweep
    over R (the update's Givens and the downdate's hyperbolic rotation of
    row k are applied together).  Returns False (R partly modified) when the
    result is not positive definite.  O(d^2), half the memory traffic of
    :func:`chol_update` followed by :func:`chol_downdate`."""
    d = R.shape[0]
    wx[:] = x
    wy[:] = y
    for k in range(d):
        # Givens rotation with x
        r = np.hypot(R[k, k], wx[k])
        c1 = r / R[k, k]
        s1 = wx[k] / R[k, k]
        R[k, k] = r
        # hyperbolic rotation with y
        t = r * r - wy[k] * wy[k]
        if not t > 0.0:
            return False
        r2 = np.sqrt(t)
        c2 = r2 / r
        s2 = wy[k] / r
        R[k, k] = r2
        ic1, ic2 = 1.0 / c1, 1.0 / c2
        for j in range(k + 1, d):
            a = (R[k, j] + s1 * wx[j]) * ic1
            wx[j] = c1 * wx[j] - s1 * a
            b = (a - s2 * wy[j]) * ic2
            wy[j] = c2 * wy[j] - s2 * b
            R[k, j] = b
    return True


def row_column_update(W: np.ndarray, k: int, u: np.ndarray, eta: float) -> None:
    """In place ``W <- W + eta (e_k u^T + u e_k^T)``: row and column k move by
    ``eta u`` (the diagonal entry by ``2 eta u_k``), as in COMET's Eq. (11)."""
    W[k, :] += eta * u
    W[:, k] += eta * u


def schur_step_bound(W: np.ndarray, Winv: np.ndarray, k: int, u: np.ndarray,
                     return_Wu: bool = False):
    """Largest ``eta`` such that ``W + eta (e_k u^T + u e_k^T)`` stays PD.

    COMET Eq. (10)-(11): with ``c = W_kk``, ``b = W_{-k,k}``,
    ``A = W_{-k,-k}`` (unchanged by the step) and the step's ``u_1 = u_k``,
    ``u_r = u_{-k}``, the new matrix is PD iff

        (u_r^T A^-1 u_r) eta^2 - 2 (u_1 - u_r^T A^-1 b) eta - (c - b^T A^-1 b) < 0,

    so the bound is the positive root (``inf`` when the quadratic term
    vanishes and the linear one does not push towards the boundary).
    The coefficients come from ``W^-1`` without forming ``A^-1``: with
    ``w = W^-1 e_k``, the Schur identities ``c - b^T A^-1 b = 1 / w_k`` and
    ``A^-1 b = -w_{-k} / w_k`` give ``a0 = 1 / w_k``,
    ``a1 = u_1 + (u_r . w_r) / w_k`` and
    ``a2 = u_r^T (W^-1)_{-k,-k} u_r - (u_r . w_r)^2 / w_k``.  O(d^2), one
    matrix-vector product.  With ``return_Wu=True`` returns
    ``(bound, W^-1 u)`` so that :func:`inverse_row_column_update` can reuse
    the product.
    """
    a0, a1, a2, Wu = schur_coefficients(Winv, k, u)
    if not a0 > 0.0:  # W^-1 has lost accuracy (W at the edge of the cone): no safe step
        bound = 0.0
    elif a2 <= 1e-300 * max(1.0, abs(a1)):
        bound = np.inf if a1 >= 0 else a0 / (-2.0 * a1)
    else:  # a2 eta^2 - 2 a1 eta - a0 = 0, positive root (stable form)
        disc = np.sqrt(a1 * a1 + a2 * a0)
        bound = float(a0 / (disc - a1)) if a1 < 0 else float((a1 + disc) / a2)
    return (bound, Wu) if return_Wu else bound


def schur_coefficients(Winv: np.ndarray, k: int, u: np.ndarray):
    """``(a0, a1, a2, W^-1 u)`` with ``det(W + eta (e_k u^T + u e_k^T)) / det(W)
    = (a0 + 2 a1 eta - a2 eta^2) / a0`` (the Schur complement of row k; see
    :func:`schur_step_bound`).  ``a0 <= 0`` flags an inaccurate ``W^-1``."""
    ur = u.copy()
    ur[k] = 0.0                        # u_r, embedded with a zero at k
    Wur = Winv @ ur
    wk = float(Winv[k, k])
    Wu = Wur + u[k] * Winv[:, k]
    if not wk > 0.0:
        return 0.0, 0.0, 0.0, Wu
    uw = float(Wur[k])                 # u_r . w_r  (w = W^-1 e_k, symmetric W^-1)
    a0 = 1.0 / wk
    a1 = float(u[k]) + uw / wk
    # u_r^T A^-1 u_r >= 0 (A^-1 is PD); rounding in the difference may not know it
    a2 = max(0.0, float(ur @ Wur) - uw * uw / wk)
    return a0, a1, a2, Wu


def inverse_row_column_update(Winv: np.ndarray, k: int, u: np.ndarray, eta: float,
                              Wu: np.ndarray | None = None) -> None:
    """In place Woodbury update of ``W^-1`` for ``W <- W + eta (e_k u^T + u e_k^T)``
    (COMET Appendix B: ``U = [u, e_k]``, ``C = eta I_2``, ``V = [e_k, u]^T``):

        W_new^-1 = W^-1 - W^-1 U (eta^-1 I_2 + V W^-1 U)^-1 V W^-1.

    ``Wu`` may pass a precomputed ``W^-1 u``.  O(d^2): one matrix-vector
    product and one in-place rank-2 pass (:func:`_sub_rank2`)."""
    if Wu is None:
        Wu = Winv @ u                  # W^-1 u
    We = Winv[:, k].copy()             # W^-1 e_k
    VWU = np.array([[We @ u, Winv[k, k]], [u @ Wu, u @ We]])  # V W^-1 U
    K = np.linalg.inv(np.eye(2) / eta + VWU)
    P = np.stack([Wu, We], axis=1) @ K                       # W^-1 U K   (d x 2)
    _sub_rank2(Winv, P[:, 0].copy(), P[:, 1].copy(), We, Wu)  # - P [We, Wu]^T


@njit(cache=True, nogil=True, fastmath=FAST)
def _sub_rank2(M, a, b, c, e):
    """In place ``M -= a c^T + b e^T`` in one pass over M."""
    n, m = M.shape
    for i in range(n):
        ai, bi = a[i], b[i]
        for j in range(m):
            M[i, j] -= ai * c[j] + bi * e[j]


# --------------------------------------------------------------------------
# Symmetric low-rank eigen-updates and PSD projections (low-rank DML, SML)
# --------------------------------------------------------------------------
#: Gram (Cholesky-QR) path of :func:`lowrank_eig_update`: a direction of
#: ``A_perp`` is taken from the Gram matrix when its squared singular
#: value is at least this fraction of the largest squared column norm of A
#: (so its loss of orthogonality against U is below ~10 eps) ...
GRAM_COL_RTOL = 1e-2
#: ... and at least this fraction of the largest one (so the Cholesky-QR
#: orthogonality error eps * kappa^2 stays below ~1e-13).
GRAM_COND_RTOL = 1e-3


def lowrank_eig_update(U: np.ndarray, s: np.ndarray, A, signs=None, *,
                       rtol: float = 1e-12, project=None,
                       info: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of ``U diag(s) U^T + A diag(signs) A^T`` by Brand's
    incremental method (Brand 2006; Zhang & Zhang 2017, "Incremental SVD").

    With ``M = U^T A``, ``P`` an orthonormal basis of ``A_perp = (I - U U^T) A``
    and ``R_A = P^T A_perp``, ``[U A] = [U P] [[I, M], [0, R_A]]``, so the
    matrix is ``[U P] K [U P]^T`` with the small

        K = diag(s, 0_p) + [M; R_A] diag(signs) [M; R_A]^T

    whose eigen-decomposition ``K = Q diag(mu) Q^T`` gives the result
    ``([U P] Q, mu)``.  ``p = rank(A_perp) <= c`` (0 when A lies in span(U)).

    U's own Gram matrix ``S = U^T U = R_s^T R_s`` (I up to round-off, one
    SYRK) enters every projection, ``A_perp = (I - U S^-1 U^T) A``, and the
    result is formed in the orthonormal basis ``U R_s^-1``: a drift of U from
    orthonormality is corrected by the next update instead of being
    amplified by it (with S taken as I, a drift e grows to about ``e
    cot(theta)`` per update for columns at angle theta from span(U), i.e.
    geometrically over many updates).

    P comes from the Gram matrix ``G = A_perp^T A_perp = A^T A - M^T S^-1
    M = V diag(g) V^T`` (Cholesky-QR: ``P = A_perp V g^{-1/2}``, no QR, no
    d x c block for sparse A) for the directions whose ``g`` is large against
    both the column norms of A and the largest ``g`` (:data:`GRAM_COL_RTOL`,
    :data:`GRAM_COND_RTOL`), where that is accurate to working precision.
    The remaining directions ``A_perp V_small`` are formed explicitly,
    orthogonalised once more against U and the Gram directions (the second
    pass of classical Gram-Schmidt) and factored by a Householder QR and the
    SVD of its small R, whose singular values above ``rtol`` times the
    largest entry of A set the rank.  When A is well separated from span(U)
    an update costs one SYRK and one GEMM with U plus sparse products:
    ``O(d r (r + c) + nnz(A) (r + c))`` flops, memory ``O(d (r + c))``, no
    d x d array.

    Parameters
    ----------
    U : ndarray (d, r)
        Orthonormal columns up to round-off (r may be 0).
    s : ndarray (r,)
    A : ndarray or scipy.sparse matrix (d, c)
    signs : ndarray (c,), optional
        Weights of the columns of A (default all +1); a negative weight
        subtracts that rank-one term.
    rtol : float
    project : callable, optional
        Map from the eigenvalues ``mu`` to new ones (e.g. the shifted
        projection of :func:`project_spectrum`); the eigenpairs it sets to
        zero are dropped and never formed.
    info : dict, optional
        Receives ``"gram_only"`` (True when no direction needed the QR) and
        ``"p"``.

    Returns
    -------
    V : ndarray (d, r + p), or (d, number kept) with ``project``
        Orthonormal eigenvectors.
    mu : ndarray
        Eigenvalues in decreasing order (after ``project`` when given).
    """
    d, r = U.shape
    c = A.shape[1]
    signs = np.ones(c) if signs is None else np.asarray(signs, dtype=float)
    if np.shape(s) != (r,) or A.shape[0] != d or signs.shape != (c,):
        raise ValueError(f"lowrank_eig_update: shapes do not match: U {U.shape}, s "
                         f"{np.shape(s)}, A {A.shape}, signs {signs.shape}")
    s = np.asarray(s, dtype=float)
    sparse = sp.issparse(A)
    if sparse:
        A = sp.csc_matrix(A, dtype=float)
        scale = float(np.max(np.abs(A.data), initial=0.0))
    else:
        A = np.asarray(A, dtype=float)
        scale = float(np.max(np.abs(A), initial=0.0))
    # (scale: the largest |entry|; no squares before it is known to be safe)
    if not np.isfinite(scale) or scale > 1e150:
        raise FloatingPointError("lowrank_eig_update: A has non-finite or huge entries")
    if not np.isfinite(s).all() or not np.isfinite(signs).all():
        raise FloatingPointError("lowrank_eig_update: s or signs has non-finite entries")
    # U's own Gram matrix S = U^T U = R_s^T R_s (I up to round-off).  Every
    # projection below uses the exact (I - U S^-1 U^T) and the result is
    # expressed in the orthonormal basis U R_s^-1, so U's drift from
    # orthonormality is corrected each step instead of being amplified.
    if r:
        S = U.T @ U                                             # SYRK, d r^2 / 2
        if not np.isfinite(S).all():
            raise FloatingPointError("lowrank_eig_update: U has non-finite entries")
        # (NumPy's LAPACK only on the regular path of this function: calling
        # SciPy's too makes two OpenBLAS thread pools spin against each
        # other, 10x slower on small matrices with threaded BLAS; SciPy's
        # syev serves only the rare fallback below)
        try:
            Rs = np.linalg.cholesky(S).T                        # S = R_s^T R_s
        except np.linalg.LinAlgError:
            raise ValueError("lowrank_eig_update: U must have orthonormal columns "
                             "(U^T U is not positive definite)") from None
        Rinv = np.linalg.inv(Rs)                                # S^-1 = Rinv Rinv^T
        Sinv = Rinv @ Rinv.T
    M = np.asarray((A.T @ U).T) if sparse else U.T @ A          # O(nnz(A) r)
    Mt = Sinv @ M if r and c else M                             # A = U Mt + A_perp
    AtA = (A.T @ A).toarray() if sparse else A.T @ A
    G = AtA - M.T @ Mt                 # Gram matrix of A_perp, without forming A_perp
    gram_only, p, Aperp = True, 0, None
    Bperp = np.zeros((0, c))
    if c and scale > 0.0:
        g, Vg = np.linalg.eigh(0.5 * (G + G.T))                 # ascending
        big = g >= max(GRAM_COL_RTOL * float(np.max(np.diag(AtA))),
                       GRAM_COND_RTOL * g[-1])
        big &= g > 0.0
        sq = np.sqrt(g[big])
        Vb = Vg[:, big]
        coefs = Vb / sq                                        # P_b = A_perp coefs
        Bperp = sq[:, None] * Vb.T                             # P_b^T A_perp
        small = ~big
        if small.any():
            # directions close to span(U) or to each other: explicit A_perp,
            # orthogonalised once more (classical Gram-Schmidt, second pass),
            # then a rank-revealing QR + SVD
            gram_only = False
            Aperp = A.toarray() if sparse else A.copy()
            if r:
                Aperp -= U @ Mt
            Pb = Aperp @ coefs
            Vs = Vg[:, small]
            As = Aperp @ Vs
            if r:
                CU = Sinv @ (U.T @ As)
                As -= U @ CU
                Mt = Mt + CU @ Vs.T
            Cb = Pb.T @ As
            As -= Pb @ Cb
            Q, R = np.linalg.qr(As, mode="reduced")
            Ur, sv, Vrt = np.linalg.svd(R)
            ps = int(np.count_nonzero(sv > rtol * scale))
            Bperp = np.vstack([Bperp + Cb @ Vs.T, (sv[:ps, None] * Vrt[:ps]) @ Vs.T])
            basis = (Pb, Q, Ur[:, :ps])                        # P = [P_b, Q Ur]
        p = Bperp.shape[0]
    # the matrix is [U R_s^-1, P] K [U R_s^-1, P]^T with
    # K = diag(R_s diag(s) R_s^T, 0) + [R_s Mt; B_perp] diag(signs) [...]^T
    B = np.vstack([Rs @ Mt, Bperp]) if r else Bperp
    K = (B * signs) @ B.T
    if r:
        K[:r, :r] += (Rs * s) @ Rs.T
    if not np.isfinite(K).all():
        raise FloatingPointError("lowrank_eig_update: the update overflows")
    K = 0.5 * (K + K.T)
    mu, Qk = np.linalg.eigh(K)
    if orthonormality_error(Qk) > max(1e-13, 10 * K.shape[0] * np.finfo(float).eps):
        # divide-and-conquer (syevd) can lose orthogonality among clusters of
        # tiny eigenvalues (e.g. sin^2(theta)|a|^2 ~ 1e-10 |K| for columns
        # almost in span(U)); the QR algorithm (syev) does not
        mu, Qk = sla.eigh(K, driver="ev", check_finite=False)
    mu, Qk = mu[::-1], Qk[:, ::-1]
    if project is not None:
        mu = np.asarray(project(mu), dtype=float)
        keep = mu > 0.0
        mu, Qk = mu[keep], Qk[:, keep]
    if info is not None:
        info["gram_only"], info["p"] = gram_only, p
    Qp = Qk[r:]
    Qu = Rinv @ Qk[:r] if r else Qk[:0]
    if mu.size == 0:
        return np.zeros((d, 0)), mu
    if p == 0:
        return U @ Qu, mu
    if gram_only:
        # [U, P] [Q_u; Q_p] = U Q_u + (A - U Mt) coefs Q_p = U (Q_u - Mt Z) + A Z
        Z = coefs @ Qp
        V = np.asarray(A @ Z)                                  # O(nnz(A) k)
        Qu = Qu - Mt @ Z
    else:
        Pb, Q, Urs = basis
        nb = Pb.shape[1]
        V = Pb @ Qp[:nb]
        if Urs.shape[1]:
            V += Q @ (Urs @ Qp[nb:])
    if r:
        V += U @ Qu
    return V, mu


def project_spectrum(mu: np.ndarray, shift: float = 0.0, constraint: str | None = None,
                     tau: float | None = None) -> np.ndarray:
    """Eigenvalues of the projection of ``X - shift I`` (X with eigenvalues
    ``mu``; the eigenvectors do not change).

    * ``constraint=None``: onto the PSD cone (Theorem 1 of Zhang & Zhang):
      ``max(mu - shift, 0)``.
    * ``"spectral"``: onto ``PSD ∩ {||W||_2 <= tau}`` (Theorem 2):
      ``min(max(mu - shift, 0), tau)``.
    * ``"frobenius"``: onto ``PSD ∩ {||W||_F <= tau}`` (Theorem 3): the PSD
      projection scaled by ``min(1, tau / ||max(mu - shift, 0)||_2)``.

    Zeros mark the eigenvalues that are removed.
    """
    lam = np.maximum(np.asarray(mu, dtype=float) - shift, 0.0)
    if constraint is None:
        return lam
    if constraint == "spectral":
        return np.minimum(lam, tau)
    if constraint == "frobenius":
        norm = float(np.linalg.norm(lam))
        return lam * (tau / norm) if norm > tau else lam
    raise ValueError(f"unknown constraint {constraint!r}; use None, 'spectral' or 'frobenius'")


def project_psd(X: np.ndarray, shift: float = 0.0, constraint: str | None = None,
                tau: float | None = None) -> np.ndarray:
    """Dense projection of the symmetric ``X - shift I`` onto the PSD cone
    (optionally intersected with a spectral or Frobenius ball, see
    :func:`project_spectrum`) by one ``eigh``: O(d^3) time, O(d^2) memory."""
    mu, V = np.linalg.eigh(0.5 * (X + X.T))
    lam = project_spectrum(mu, shift, constraint, tau)
    keep = lam > 0
    Vk = V[:, keep]
    return (Vk * lam[keep]) @ Vk.T


def orthonormality_error(U: np.ndarray) -> float:
    """``max |U^T U - I|`` (0 for an empty U)."""
    if U.shape[1] == 0:
        return 0.0
    G = U.T @ U
    G[np.diag_indices_from(G)] -= 1.0
    return float(np.max(np.abs(G)))


def reorthonormalize_eig(U: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-orthonormalise the columns of U without changing ``U diag(s) U^T``:
    ``U = QR``, then ``R diag(s) R^T = Z diag(s') Z^T`` (r x r eigh) and the
    result is ``(Q Z, s')``.  O(d r^2)."""
    if U.shape[1] == 0:
        return U, s
    Q, R = np.linalg.qr(U, mode="reduced")
    s2, Z = np.linalg.eigh((R * s) @ R.T)
    s2, Z = s2[::-1], Z[:, ::-1]
    return Q @ Z, s2
