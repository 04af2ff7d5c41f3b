"""Symmetric low-rank eigen-updates, PSD projections and the spectral
subproblem of SML (low-rank DML, SML).

* :func:`lowrank_eig_update` -- Brand's incremental eigen-update of
  ``U diag(s) U^T + A diag(signs) A^T`` (Zhang & Zhang 2017, Algorithm 1),
  cut into named steps: :func:`_span_factor` (U's Gram matrix),
  :func:`_project_onto_span`, :func:`_residual_gram`,
  :func:`_gram_directions` (the Cholesky-QR path),
  :func:`_near_span_directions` (the QR path),
  :func:`_small_eigenproblem` and :func:`_assemble_eigenvectors`.
* :func:`project_spectrum` / :func:`project_psd` -- Theorems 1-3 of Zhang &
  Zhang (PSD cone, optionally within a spectral or Frobenius ball).
* :func:`solve_lemma3` -- the closed form of Lemma 3 of Ying, Huang &
  Campbell 2009 (SML's step 2).
* :func:`orthonormality_error`, :func:`reorthonormalize_eig` -- drift
  control of the incremental-SVD solver.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.linalg as sla

from tripletml.engine.threads import factor_work, limit_threads

__all__ = ["GRAM_COL_RTOL", "GRAM_COND_RTOL", "lowrank_eig_update", "project_spectrum",
           "project_psd", "psd_factor", "psd_factor_of_rows", "solve_lemma3",
           "orthonormality_error", "reorthonormalize_eig"]

#: A direction of ``A_perp`` is taken from the Gram matrix (Cholesky-QR) only
#: when its squared norm ``g`` is at least this fraction of the largest
#: squared column norm of A (far from span(U): no cancellation) ...
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
    orthogonalized once more against U and the Gram directions (the second
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
        ``"p"`` (and ``"dense"`` on the dense route below).

    With ``project`` and ``d <= r + c`` (few features, e.g. the span of a
    few rows: K would be as large as the matrix) the d x d matrix is formed
    and decomposed directly (:func:`_dense_update`): ``O(d^2 (r + c) + d^3)``.

    Returns
    -------
    V : ndarray (d, r + p), or (d, number kept) with ``project``
        Orthonormal eigenvectors.
    mu : ndarray
        Eigenvalues in decreasing order (after ``project`` when given).
    """
    d, r = U.shape
    s, A, signs, sparse, scale = _check_update_inputs(U, s, A, signs)
    c = A.shape[1]
    if project is not None and d <= r + c:
        return _dense_update(U, s, A, signs, sparse, project, info)
    Rs = Rinv = Sinv = None
    if r:
        Rs, Rinv, Sinv = _span_factor(U)
    M, Mt = _project_onto_span(U, Sinv, A, sparse)
    AtA, G = _residual_gram(A, M, Mt, sparse)
    gram_only, coefs, basis = True, None, None
    Bperp = np.zeros((0, c))
    if c and scale > 0.0:
        g, Vg = np.linalg.eigh(0.5 * (G + G.T))                 # ascending
        big = _gram_split(g, AtA)
        coefs, Bperp = _gram_directions(g, Vg, big)
        small = ~big
        if small.any():
            gram_only = False
            Bperp, Mt, basis = _near_span_directions(U, Sinv, A, sparse, Mt, coefs, Bperp,
                                                     Vg[:, small], rtol * scale)
    p = Bperp.shape[0]
    mu, Qk = _small_eigenproblem(Rs, s, Mt, Bperp, signs)
    if project is not None:
        mu = np.asarray(project(mu), dtype=float)
        keep = mu > 0.0
        mu, Qk = mu[keep], Qk[:, keep]
    if info is not None:
        info["gram_only"], info["p"] = gram_only, p
    if mu.size == 0:
        return np.zeros((d, 0)), mu
    return _assemble_eigenvectors(U, A, Rinv, Mt, Qk, p, coefs, basis), mu


def _dense_update(U, s, A, signs, sparse, project, info):
    """The update when ``d <= r + c``: Brand's small matrix K would be as
    large as the d x d matrix itself, so that matrix is formed (``d^2 (r +
    c)`` flops) and decomposed by one ``eigh`` instead of the projections, the
    QR and the two small eigenproblems.  Eigenvalues within ``d eps`` of the
    largest are the complement of ``span[U, A]`` (exact zeros of the
    update, rounding here) and are set to 0 before ``project``, which drops
    them as Brand's basis never holds them."""
    d = U.shape[0]
    Ad = A.toarray() if sparse else A
    Wm = (U * s) @ U.T + (Ad * signs) @ Ad.T
    if not np.isfinite(Wm).all():
        raise FloatingPointError("lowrank_eig_update: the update overflows")
    try:
        mu, V = np.linalg.eigh(0.5 * (Wm + Wm.T))
    except np.linalg.LinAlgError:       # syevd did not converge: the QR algorithm (syev)
        mu, V = sla.eigh(0.5 * (Wm + Wm.T), driver="ev", check_finite=False)
    mu, V = mu[::-1], V[:, ::-1]
    mu = np.where(np.abs(mu) <= d * np.finfo(float).eps * np.max(np.abs(mu), initial=0.0),
                  0.0, mu)
    mu = np.asarray(project(mu), dtype=float)
    keep = mu > 0.0
    if info is not None:
        info["gram_only"], info["p"], info["dense"] = False, max(int(keep.sum()) - U.shape[1],
                                                                0), True
    return np.ascontiguousarray(V[:, keep]), mu[keep]


def _check_update_inputs(U, s, A, signs):
    """Shapes and finiteness of the inputs of :func:`lowrank_eig_update`;
    returns ``(s, A, signs, sparse, scale)`` with A as float (CSC when
    sparse) and ``scale`` its largest absolute entry."""
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
    return s, A, signs, sparse, scale


def _span_factor(U: np.ndarray):
    """U's own Gram matrix ``S = U^T U = R_s^T R_s`` (I up to round-off):
    returns ``(R_s, R_s^-1, S^-1)``.  Every projection uses the exact ``(I -
    U S^-1 U^T)`` and the result is expressed in the orthonormal basis ``U
    R_s^-1``, so U's drift from orthonormality is corrected each step
    instead of being amplified.

    (NumPy's LAPACK only on the regular path of the update: calling SciPy's
    too makes two OpenBLAS thread pools spin against each other, 10x slower
    on small matrices with threaded BLAS; SciPy's syev serves only the rare
    fallback of :func:`_small_eigenproblem`.)
    """
    S = U.T @ U                                                 # SYRK, d r^2 / 2
    if not np.isfinite(S).all():
        raise FloatingPointError("lowrank_eig_update: U has non-finite entries")
    try:
        Rs = np.linalg.cholesky(S).T                            # S = R_s^T R_s
    except np.linalg.LinAlgError:
        raise ValueError("lowrank_eig_update: U must have orthonormal columns "
                         "(U^T U is not positive definite)") from None
    Rinv = np.linalg.inv(Rs)                                    # S^-1 = Rinv Rinv^T
    return Rs, Rinv, Rinv @ Rinv.T


def _project_onto_span(U, Sinv, A, sparse):
    """``M = U^T A`` and the coefficients ``Mt = S^-1 M`` of A's projection
    onto span(U): ``A = U Mt + A_perp``.  O(nnz(A) r)."""
    M = np.asarray((A.T @ U).T) if sparse else U.T @ A
    Mt = Sinv @ M if Sinv is not None and A.shape[1] else M
    return M, Mt


def _residual_gram(A, M, Mt, sparse):
    """``(A^T A, G)`` with ``G = A_perp^T A_perp = A^T A - M^T S^-1 M``, the
    Gram matrix of the residual, without forming A_perp."""
    AtA = (A.T @ A).toarray() if sparse else A.T @ A
    return AtA, AtA - M.T @ Mt


def _gram_split(g: np.ndarray, AtA: np.ndarray) -> np.ndarray:
    """The eigen-directions of G that the Gram path resolves to working
    precision: ``g`` large against the column norms of A
    (:data:`GRAM_COL_RTOL`) and against the largest ``g``
    (:data:`GRAM_COND_RTOL`)."""
    big = g >= max(GRAM_COL_RTOL * float(np.max(np.diag(AtA))), GRAM_COND_RTOL * g[-1])
    big &= g > 0.0
    return big


def _gram_directions(g, Vg, big):
    """Cholesky-QR for the well-separated directions: ``P_b = A_perp coefs``
    with ``coefs = V_b g_b^{-1/2}`` (no QR, no d x c block for sparse A) and
    ``B_perp = P_b^T A_perp = g_b^{1/2} V_b^T``."""
    sq = np.sqrt(g[big])
    Vb = Vg[:, big]
    return Vb / sq, sq[:, None] * Vb.T


def _near_span_directions(U, Sinv, A, sparse, Mt, coefs, Bperp, Vs, tol):
    """The QR path for directions ``A_perp V_s`` close to span(U) or to each
    other: formed explicitly, orthogonalized once more against U and the
    Gram directions ``P_b`` (the second pass of classical Gram-Schmidt),
    then a Householder QR and the SVD of its small R, whose singular values
    above ``tol`` set the rank.  Returns the extended ``B_perp``, the
    corrected ``Mt`` and the basis ``(P_b, Q, Ur)`` of ``P = [P_b, Q Ur]``."""
    r = U.shape[1]
    Aperp = A.toarray() if sparse else A.copy()
    if r:
        Aperp -= U @ Mt
    Pb = Aperp @ coefs
    As = Aperp @ Vs
    if r:
        CU = Sinv @ (U.T @ As)
        As -= U @ CU
        Mt = Mt + CU @ Vs.T
    Cb = Pb.T @ As
    As -= Pb @ Cb
    Q, R = np.linalg.qr(As, mode="reduced")
    Ur, sv, Vrt = np.linalg.svd(R)
    ps = int(np.count_nonzero(sv > tol))
    Bperp = np.vstack([Bperp + Cb @ Vs.T, (sv[:ps, None] * Vrt[:ps]) @ Vs.T])
    return Bperp, Mt, (Pb, Q, Ur[:, :ps])


def _small_eigenproblem(Rs, s, Mt, Bperp, signs):
    """Eigen-decomposition (decreasing) of the small matrix of the update,

        K = diag(R_s diag(s) R_s^T, 0) + B diag(signs) B^T,  B = [R_s Mt; B_perp],

    the matrix in the basis ``[U R_s^-1, P]``.  LAPACK's divide and conquer
    (syevd) can lose orthogonality among clusters of tiny eigenvalues (e.g.
    ``sin^2(theta) |a|^2 ~ 1e-10 |K|`` for columns almost in span(U)); the
    QR algorithm (syev) then serves instead."""
    B = np.vstack([Rs @ Mt, Bperp]) if Rs is not None else Bperp
    K = (B * signs) @ B.T
    if Rs is not None:
        r = Rs.shape[0]
        K[:r, :r] += (Rs * s) @ Rs.T
    if not np.isfinite(K).all():
        raise FloatingPointError("lowrank_eig_update: the update overflows")
    K = 0.5 * (K + K.T)
    mu, Qk = np.linalg.eigh(K)
    if orthonormality_error(Qk) > max(1e-13, 10 * K.shape[0] * np.finfo(float).eps):
        mu, Qk = sla.eigh(K, driver="ev", check_finite=False)
    return mu[::-1], Qk[:, ::-1]


def _assemble_eigenvectors(U, A, Rinv, Mt, Qk, p, coefs, basis):
    """The surviving eigenvectors ``[U R_s^-1, P] Q_k`` without forming P on
    the Gram path: ``[U, P] [Q_u; Q_p] = U (Q_u - Mt Z) + A Z`` with ``Z =
    coefs Q_p`` (O(nnz(A) k)); on the QR path from the explicit basis."""
    r = U.shape[1]
    Qp = Qk[r:]
    Qu = Rinv @ Qk[:r] if r else Qk[:0]
    if p == 0:
        return U @ Qu
    if basis is None:
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
    return V


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


def psd_factor(M: np.ndarray, rank_tol: float) -> tuple[np.ndarray, int]:
    """The factor ``L`` (r x d) with ``L^T L`` = the symmetric PSD ``M``
    restricted to its eigenvalues above ``rank_tol`` times the largest:
    ``L = diag(sqrt(s)) U^T``, rows in decreasing order of eigenvalue.

    ``r`` = 0 (an empty (0, d) factor) when no eigenvalue is positive.
    Used for the ``components_`` / ``rank_`` of the Mahalanobis learners
    (SML, KISSME).  Returns ``(L, r)``.
    """
    with limit_threads(factor_work(*M.shape)):    # the rule on its own panels
        ev, V = np.linalg.eigh(0.5 * (M + M.T))
    top = float(ev.max()) if ev.size else 0.0
    keep = ev > rank_tol * top if top > 0 else np.zeros(ev.shape, bool)
    L = np.ascontiguousarray((V[:, keep] * np.sqrt(ev[keep])).T[::-1])
    return L, int(keep.sum())


def psd_factor_of_rows(B: np.ndarray, w: np.ndarray, rank_tol: float, identity: float = 0.0
                       ) -> tuple[np.ndarray, int]:
    """:func:`psd_factor` of ``M = B^T diag(w) B + identity I`` (``w >= 0``,
    ``identity >= 0``) without forming or decomposing the d x d ``M`` when
    fewer rows carry weight than there are columns.

    With ``C = diag(sqrt(w_a)) B_a`` over the ``a`` rows of positive weight,
    ``M = C^T C``; for ``a < d`` the thin SVD ``C = U S V^T`` gives its
    eigenvalues ``S^2`` and eigenvectors ``V``, so ``L = S V^T`` (the rows
    whose ``s^2`` exceed ``rank_tol`` times the largest, in decreasing
    order): O(a^2 d) instead of ``eigh``'s O(d^3).  With ``identity > 0``
    the eigenvalues are ``s^2 + identity`` on ``V`` and ``identity`` on its
    complement (:func:`tripletml.linalg.span.lift_psd_factor`, a ``d x d``
    factor).  Otherwise ``M`` is formed and :func:`psd_factor` decomposes it.
    The result equals :func:`psd_factor`'s up to rounding and the sign of
    each row (and the basis chosen within an eigenvalue's space).

    Returns ``(L, r)`` as :func:`psd_factor`.
    """
    B = np.asarray(B, dtype=float)
    w = np.asarray(w, dtype=float).ravel()
    if B.ndim != 2 or w.shape != (B.shape[0],):
        raise ValueError(f"psd_factor_of_rows: B of shape {B.shape} needs one weight per row, "
                         f"got {w.shape}")
    if not ((w >= 0).all() and np.isfinite(w).all() and identity >= 0
            and np.isfinite(identity)):
        raise ValueError("psd_factor_of_rows: the weights must be finite and non-negative")
    active = np.flatnonzero(w > 0)
    d = B.shape[1]
    C = np.sqrt(w[active])[:, None] * B[active]
    if not np.isfinite(C).all():
        raise ValueError("psd_factor_of_rows: the weighted rows of B must be finite")
    if active.size >= d:
        M = C.T @ C
        M = 0.5 * (M + M.T)
        M[np.diag_indices_from(M)] += identity
        return psd_factor(M, rank_tol)
    if active.size == 0 and identity == 0:
        return np.zeros((0, d)), 0
    with limit_threads(factor_work(d, active.size)):    # the rule on its own panels
        _, s, Vt = np.linalg.svd(C, full_matrices=False)
    if identity > 0:
        from tripletml.linalg.span import lift_psd_factor
        return lift_psd_factor(np.diag(s * s + identity), Vt.T, identity, rank_tol)
    ev = s * s
    keep = ev > rank_tol * ev[0] if ev[0] > 0 else np.zeros(ev.shape, bool)
    L = np.ascontiguousarray(s[keep, None] * Vt[keep])
    return L, int(keep.sum())


def orthonormality_error(U: np.ndarray) -> float:
    """``max |U^T U - I|`` (0 for an empty U)."""
    if U.shape[1] == 0:
        return 0.0
    G = U.T @ U
    G[np.diag_indices_from(G)] -= 1.0
    return float(np.max(np.abs(G)))


def reorthonormalize_eig(U: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-orthonormalize the columns of U without changing ``U diag(s) U^T``:
    ``U = QR``, then ``R diag(s) R^T = Z diag(s') Z^T`` (r x r eigh) and the
    result is ``(Q Z, s')``.  O(d r^2)."""
    if U.shape[1] == 0:
        return U, s
    Q, R = np.linalg.qr(U, mode="reduced")
    s2, Z = np.linalg.eigh((R * s) @ R.T)
    s2, Z = s2[::-1], Z[:, ::-1]
    return Q @ Z, s2


def solve_lemma3(eigvals: np.ndarray, alpha: float, mu: float, radius: float) -> np.ndarray:
    """Closed-form solution of Lemma 3's problem (16) of Ying, Huang &
    Campbell 2009 (alpha is their gamma),

        max_s  lam . s - alpha (sum s)^2 - mu ||s||^2
        s.t.   s >= 0,  sum s <= radius,

    over the eigenvalues ``lam`` (``eigvals``) of ``A u``: a strongly concave
    quadratic over a scaled simplex.  KKT: ``s_i = max(lam_i - theta, 0) /
    (2 mu)`` with ``theta = 2 alpha S + eta``, S = sum s and eta >= 0 the
    multiplier of the radius.  With the top-k eigenvalues active (sorted
    decreasingly, prefix sum c_k): ``theta = alpha c_k / (mu + alpha k)`` when
    the radius is slack, else ``theta = (c_k - 2 mu radius) / k``.  In both
    cases ``lam_k > theta_k`` holds exactly for the active k (the test is
    monotone, as in the projection onto a simplex), so the largest such k is
    taken; k = 1 when round-off leaves none (e.g. a radius far below the
    spacing of the eigenvalues).  O(d log d) for the sort, no loop.
    """
    lam = np.asarray(eigvals, dtype=float)
    if lam.ndim != 1 or not np.isfinite(lam).all():
        raise ValueError("solve_lemma3: eigvals must be a 1-d array of finite eigenvalues")
    for name, v in (("alpha", alpha), ("mu", mu), ("radius", radius)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"solve_lemma3: {name}={v!r} must be finite and > 0")
    if lam.size == 0 or lam.max() <= 0.0:
        return np.zeros_like(lam)
    order = np.argsort(-lam, kind="stable")
    ls = lam[order]
    csum = np.cumsum(ls)
    k = np.arange(1, ls.size + 1)
    theta = _active_threshold(ls, alpha * csum / (mu + alpha * k))
    if np.sum(np.maximum(ls - theta, 0.0)) / (2.0 * mu) > radius * (1 + 1e-12):
        theta = _active_threshold(ls, (csum - 2.0 * mu * radius) / k)   # the radius binds
    s = np.zeros_like(lam)
    s[order] = np.maximum(ls - theta, 0.0) / (2.0 * mu)
    return s


def _active_threshold(ls: np.ndarray, thetas: np.ndarray) -> float:
    """``thetas[k-1]`` for the largest k with ``ls[k-1] > thetas[k-1]`` (1
    when none, by round-off)."""
    ok = np.flatnonzero(ls > thetas)
    return float(thetas[ok[-1] if ok.size else 0])
