"""Kernels of tripletml.linalg.eig_update: Brand's incremental eigen-update
(and each of its named steps) against dense eigh, the projections of Zhang &
Zhang's Theorems 1-3, and SML's Lemma 3 (its robustness; the brute-force
comparison is in test_sml.py)."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tripletml.linalg import eig_update as eu
from tripletml.linalg.eig_update import (lowrank_eig_update, orthonormality_error, project_psd,
                                         project_spectrum, reorthonormalize_eig, solve_lemma3)


@pytest.mark.parametrize("case", ["mixed", "in_span", "rank_deficient", "empty_U", "sparse_A",
                                  "near_span", "half_near_span", "ill_conditioned"])
def test_brand_update_equals_eigh(case):
    rng = np.random.default_rng(1)
    d, r, c = 25, 6, 5
    U, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = rng.uniform(0.5, 2.0, r)
    A = rng.normal(size=(d, c))
    signs = np.where(rng.random(c) < 0.5, -1.0, 1.0)
    if case == "in_span":
        A = U @ rng.normal(size=(r, c))
    elif case == "rank_deficient":
        A[:, 3:] = A[:, :2] @ rng.normal(size=(2, c - 3))
    elif case == "empty_U":
        U, s = np.zeros((d, 0)), np.zeros(0)
    elif case == "near_span":                  # A_perp tiny: the Gram path would lose it
        A = U @ rng.normal(size=(r, c)) + 1e-7 * rng.normal(size=(d, c))
    elif case == "half_near_span":             # both paths in one update
        A[:, :2] = U @ rng.normal(size=(r, 2)) + 1e-6 * rng.normal(size=(d, 2))
    elif case == "ill_conditioned":            # kappa(A_perp) ~ 1e8: Cholesky-QR would fail
        A[:, 1] = A[:, 0] + 1e-8 * rng.normal(size=d)
    dense = (U * s) @ U.T + (A * signs) @ A.T
    info = {}
    V, mu = lowrank_eig_update(U, s, sp.csc_matrix(A) if case == "sparse_A" else A, signs,
                               info=info)
    assert info["gram_only"] == (case in ("mixed", "empty_U", "sparse_A"))
    expect_p = {"in_span": 0, "rank_deficient": 3, "empty_U": c}.get(case, c)
    assert V.shape == (d, U.shape[1] + expect_p)
    assert np.all(np.diff(mu) <= 0)
    np.testing.assert_allclose((V * mu) @ V.T, dense, atol=1e-12)
    assert orthonormality_error(V) < 1e-12
    ev = np.sort(np.linalg.eigvalsh(dense))[::-1][:mu.size]
    big = np.abs(ev) > 1e-9
    np.testing.assert_allclose(np.sort(mu)[::-1][big], ev[big], rtol=1e-10,
                               atol=1e-13 * np.abs(ev).max())   # eigh's own accuracy


@pytest.mark.parametrize("constraint", [None, "frobenius", "spectral"])
def test_projection_is_the_nearest_feasible_point(constraint):
    """Theorems 1-3: the result is feasible and satisfies the variational
    inequality <X - P, Y - P> <= 0 for feasible Y (projection onto a convex set)."""
    rng = np.random.default_rng(2)
    d, tau = 8, 1.5
    B = rng.normal(size=(d, d))
    X = 2.0 * (B + B.T)
    P = project_psd(X, 0.3, constraint, tau)
    ev = np.linalg.eigvalsh(P)
    assert ev.min() > -1e-10
    if constraint == "frobenius":
        assert np.linalg.norm(P) <= tau + 1e-10
        assert np.isclose(np.linalg.norm(P), tau)        # the ball is active here
    if constraint == "spectral":
        assert ev.max() <= tau + 1e-10 and np.isclose(ev.max(), tau)
    Xs = X - 0.3 * np.eye(d)
    for _ in range(200):
        Z = rng.normal(size=(d, 3))
        Y = Z @ Z.T
        if constraint == "frobenius":
            Y *= min(1.0, tau / np.linalg.norm(Y))
        elif constraint == "spectral":
            Y *= min(1.0, tau / np.linalg.eigvalsh(Y).max())
        assert np.sum((Xs - P) * (Y - P)) <= 1e-9
    # project_spectrum is the same map on eigenvalues
    mu, V = np.linalg.eigh(X)
    lam = project_spectrum(mu, 0.3, constraint, tau)
    np.testing.assert_allclose((V * lam) @ V.T, P, atol=1e-12)


@pytest.mark.parametrize("gram_only", [True, False])
def test_brand_update_with_projection_drops_the_removed_pairs(gram_only):
    """``project=`` gives the same W as projecting the full update afterwards,
    and forms only the surviving eigenvectors."""
    rng = np.random.default_rng(4)
    d, r, c = 40, 8, 6
    U, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = rng.uniform(0.5, 2.0, r)
    A = rng.normal(size=(d, c))
    if not gram_only:
        A[:, 0] = U @ rng.normal(size=r) + 1e-9 * rng.normal(size=d)
    signs = np.where(np.arange(c) % 2 == 0, -1.0, 1.0)
    V, mu = lowrank_eig_update(U, s, A, signs)
    lam = project_spectrum(mu, 0.4, "frobenius", 2.0)
    info = {}
    V2, mu2 = lowrank_eig_update(U, s, A, signs, info=info,
                                 project=lambda m: project_spectrum(m, 0.4, "frobenius", 2.0))
    assert info["gram_only"] == gram_only
    assert 0 < mu2.size == np.count_nonzero(lam) < mu.size and V2.shape == (d, mu2.size)
    np.testing.assert_allclose((V2 * mu2) @ V2.T, (V * lam) @ V.T, atol=1e-12)
    assert orthonormality_error(V2) < 1e-13


@pytest.mark.parametrize("subspace", [None, 10])
def test_brand_update_does_not_compound_round_off(subspace):
    """2000 projected updates in a row (W grows to nearly full rank, d = 40)
    equal the dense projected iteration and U stays orthonormal: a drift of
    U^T U from I must be corrected, not amplified, by the next update (with
    ``subspace`` the columns share a 10-dim space, so most directions take
    the QR path).

    On one BLAS thread: its 6,000 eigh calls of 40 x 40 (the update's and
    the dense reference's) are far below any size where a second thread
    helps, and with OpenBLAS's two threads on a busy 2-core machine each
    call waits for a scheduler slice (60 s against 1.4 s, issue 40).  The
    arithmetic is the same."""
    from threadpoolctl import threadpool_limits
    rng = np.random.default_rng(0)
    d, c, shift = 40, 3, 0.02
    basis = rng.normal(size=(d, subspace)) / np.sqrt(subspace) if subspace else None
    U, s, W = np.zeros((d, 0)), np.zeros(0), np.zeros((d, d))
    worst_orth = worst_err = 0.0
    with threadpool_limits(1, user_api="blas"):
        for _ in range(2000):
            A = 0.3 * (rng.normal(size=(d, c)) if basis is None
                       else basis @ rng.normal(size=(subspace, c)))
            sg = rng.choice([-1.0, 1.0], c)
            U, s = lowrank_eig_update(U, s, A, sg, project=lambda m: np.maximum(m - shift, 0.0))
            ev, V = np.linalg.eigh(W + (A * sg) @ A.T)
            lam = np.maximum(ev - shift, 0.0)
            W = (V * lam) @ V.T
            worst_orth = max(worst_orth, orthonormality_error(U))
            worst_err = max(worst_err, np.abs((U * s) @ U.T - W).max() / np.abs(W).max())
    assert U.shape[1] == np.count_nonzero(lam > 1e-12 * lam.max())
    assert worst_orth < 1e-12 and worst_err < 1e-11


def test_brand_update_corrects_a_drifted_U():
    rng = np.random.default_rng(6)
    d, r, c = 30, 8, 4
    U = np.linalg.qr(rng.normal(size=(d, r)))[0] + 1e-9 * rng.normal(size=(d, r))
    s = rng.uniform(0.5, 2.0, r)
    A = U @ rng.normal(size=(r, c)) + 0.1 * rng.normal(size=(d, c))   # sin(theta) ~ 0.1
    V, mu = lowrank_eig_update(U, s, A)
    assert orthonormality_error(U) > 1e-10 and orthonormality_error(V) < 1e-13
    np.testing.assert_allclose((V * mu) @ V.T, (U * s) @ U.T + A @ A.T, atol=1e-12)


def test_brand_update_stays_orthonormal_with_tiny_eigenvalue_clusters():
    """Mixed-sign columns at sin(theta) = 1e-5 from span(U) give K a cluster
    of eigenvalues ~1e-10 |K|, where LAPACK's divide-and-conquer eigh loses
    orthogonality (5e-9 here); the update must still return orthonormal V."""
    rng = np.random.default_rng(15)
    d, r, c, th = 200, 40, 12, 1e-5
    U = np.linalg.qr(rng.normal(size=(d, r)))[0]
    rng.choice([-1, 1], r)
    s = rng.uniform(0.5, 3, r)
    Au = U @ rng.normal(size=(r, c))
    Au /= np.linalg.norm(Au, axis=0)
    P = rng.normal(size=(d, c))
    P -= U @ (U.T @ P)
    P /= np.linalg.norm(P, axis=0)
    A = (np.sqrt(1 - th ** 2) * Au + th * P) * rng.uniform(0.3, 2, c)
    sg = rng.choice([-1.0, 1.0], c)
    V, mu = lowrank_eig_update(U, s, A, sg)
    assert V.shape[1] == r + c
    assert orthonormality_error(V) < 1e-13
    np.testing.assert_allclose((V * mu) @ V.T, (U * s) @ U.T + (A * sg) @ A.T, atol=1e-13)


def test_brand_update_edge_cases_and_bad_input():
    rng = np.random.default_rng(5)
    U = np.linalg.qr(rng.normal(size=(10, 2)))[0]
    V, mu = lowrank_eig_update(U, np.array([0.1, 0.1]), 0.1 * rng.normal(size=(10, 1)),
                               project=lambda m: np.maximum(m - 1.0, 0.0))   # all removed
    assert V.shape == (10, 0) and mu.shape == (0,)
    bad_U = U.copy()
    bad_U[0, 0] = np.nan
    with pytest.raises(FloatingPointError, match="lowrank_eig_update: U has non-finite"):
        lowrank_eig_update(bad_U, np.ones(2), rng.normal(size=(10, 2)))
    with pytest.raises(FloatingPointError, match="lowrank_eig_update: s or signs has non-finite"):
        lowrank_eig_update(U, np.array([1.0, np.inf]), np.zeros((10, 0)))
    with pytest.raises(FloatingPointError, match="lowrank_eig_update: A has non-finite"):
        lowrank_eig_update(U, np.ones(2), np.full((10, 1), np.nan))
    with pytest.raises(ValueError, match="U must have orthonormal columns"):
        lowrank_eig_update(np.ones((10, 2)), np.ones(2), rng.normal(size=(10, 1)))


def test_reorthonormalize_keeps_W():
    rng = np.random.default_rng(3)
    U = np.linalg.qr(rng.normal(size=(30, 5)))[0] + 1e-6 * rng.normal(size=(30, 5))
    s = rng.uniform(1, 3, 5)
    U2, s2 = reorthonormalize_eig(U, s)
    assert orthonormality_error(U) > 1e-8 and orthonormality_error(U2) < 1e-13
    np.testing.assert_allclose((U2 * s2) @ U2.T, (U * s) @ U.T, atol=1e-12)


def test_brand_update_rejects_mismatched_shapes():
    U = np.eye(5)[:, :2]
    with pytest.raises(ValueError, match="lowrank_eig_update: shapes do not match"):
        lowrank_eig_update(U, np.ones(2), np.ones((4, 3)))
    with pytest.raises(ValueError, match="lowrank_eig_update: shapes do not match"):
        lowrank_eig_update(U, np.ones(2), np.ones((5, 3)), np.ones(2))


# ------------------------------------------------ the named steps, one by one
def _state(seed=7, d=20, r=5, c=4, near=False):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(d, r)))[0] + 1e-9 * rng.normal(size=(d, r))  # drifted
    s = rng.uniform(0.5, 2.0, r)
    A = rng.normal(size=(d, c))
    if near:
        A[:, 0] = U @ rng.normal(size=r) + 1e-8 * rng.normal(size=d)
    return U, s, A, rng.choice([-1.0, 1.0], c)


@pytest.mark.parametrize("sparse", [False, True])
def test_steps_projection_and_residual_gram_equal_dense_formulas(sparse):
    U, s, A, _ = _state()
    Rs, Rinv, Sinv = eu._span_factor(U)
    S = U.T @ U
    np.testing.assert_allclose(Rs.T @ Rs, S, atol=1e-14)               # S = R_s^T R_s
    np.testing.assert_allclose(Sinv, np.linalg.inv(S), atol=1e-12)
    assert orthonormality_error(U @ Rinv) < 1e-14                       # U R_s^-1 orthonormal
    Ain = sp.csc_matrix(A) if sparse else A
    M, Mt = eu._project_onto_span(U, Sinv, Ain, sparse)
    np.testing.assert_allclose(M, U.T @ A, atol=1e-13)
    Aperp = A - U @ np.linalg.solve(S, U.T @ A)                          # (I - U S^-1 U^T) A
    np.testing.assert_allclose(A - U @ Mt, Aperp, atol=1e-13)
    np.testing.assert_allclose(U.T @ Aperp, 0, atol=1e-13)
    AtA, G = eu._residual_gram(Ain, M, Mt, sparse)
    np.testing.assert_allclose(AtA, A.T @ A, atol=1e-12)
    np.testing.assert_allclose(G, Aperp.T @ Aperp, atol=1e-12)


def test_steps_gram_path_gives_an_orthonormal_basis_of_the_residual():
    U, s, A, _ = _state()
    _, _, Sinv = eu._span_factor(U)
    M, Mt = eu._project_onto_span(U, Sinv, A, False)
    AtA, G = eu._residual_gram(A, M, Mt, False)
    g, Vg = np.linalg.eigh(0.5 * (G + G.T))
    big = eu._gram_split(g, AtA)
    assert big.all()                                      # A far from span(U): no QR needed
    coefs, Bperp = eu._gram_directions(g, Vg, big)
    Aperp = A - U @ Mt
    P = Aperp @ coefs
    assert orthonormality_error(P) < 1e-13
    np.testing.assert_allclose(Bperp, P.T @ Aperp, atol=1e-12)          # B_perp = P^T A_perp
    np.testing.assert_allclose(P @ Bperp, Aperp, atol=1e-12)            # A_perp in span(P)


def test_steps_qr_path_handles_a_column_near_span_U():
    U, s, A, sg = _state(near=True)
    _, _, Sinv = eu._span_factor(U)
    M, Mt = eu._project_onto_span(U, Sinv, A, False)
    AtA, G = eu._residual_gram(A, M, Mt, False)
    g, Vg = np.linalg.eigh(0.5 * (G + G.T))
    big = eu._gram_split(g, AtA)
    assert 0 < big.sum() < big.size                      # both paths in one update
    coefs, Bperp = eu._gram_directions(g, Vg, big)
    Bperp, Mt2, (Pb, Q, Ur) = eu._near_span_directions(U, Sinv, A, False, Mt, coefs, Bperp,
                                                       Vg[:, ~big], 1e-12 * np.abs(A).max())
    P = np.hstack([Pb, Q @ Ur])
    assert orthonormality_error(P) < 1e-12
    np.testing.assert_allclose(U.T @ P, 0, atol=1e-12)    # the second Gram-Schmidt pass
    np.testing.assert_allclose(U @ Mt2 + P @ Bperp, A, atol=1e-12)   # [U P] [Mt2; B_perp] = A


def test_steps_small_eigenproblem_and_assembly_reconstruct_the_update():
    U, s, A, sg = _state()
    Rs, Rinv, Sinv = eu._span_factor(U)
    M, Mt = eu._project_onto_span(U, Sinv, A, False)
    AtA, G = eu._residual_gram(A, M, Mt, False)
    g, Vg = np.linalg.eigh(0.5 * (G + G.T))
    coefs, Bperp = eu._gram_directions(g, Vg, eu._gram_split(g, AtA))
    mu, Qk = eu._small_eigenproblem(Rs, s, Mt, Bperp, sg)
    assert np.all(np.diff(mu) <= 0) and orthonormality_error(Qk) < 1e-13
    B = np.vstack([Rs @ Mt, Bperp])
    K = (B * sg) @ B.T
    K[:5, :5] += (Rs * s) @ Rs.T
    np.testing.assert_allclose((Qk * mu) @ Qk.T, K, atol=1e-12)
    V = eu._assemble_eigenvectors(U, A, Rinv, Mt, Qk, Bperp.shape[0], coefs, None)
    np.testing.assert_allclose((V * mu) @ V.T, (U * s) @ U.T + (A * sg) @ A.T, atol=1e-12)
    assert orthonormality_error(V) < 1e-13


# ----------------------------------------------------- SML's Lemma 3 kernel
def _lemma3_kkt(lam, alpha, mu, radius, s, tol=1e-9):
    """KKT of max lam.s - alpha (sum s)^2 - mu ||s||^2, s >= 0, sum s <= radius:
    s_i = max(lam_i - theta, 0) / (2 mu), theta = 2 alpha S + eta, eta >= 0,
    eta (radius - S) = 0."""
    S = s.sum()
    assert np.all(s >= 0) and S <= radius * (1 + 1e-10)
    act = s > 0
    if not act.any():
        assert lam.max() <= 2 * alpha * S + tol * (1 + abs(lam).max())
        return
    theta = np.mean(lam[act] - 2 * mu * s[act])
    scale = 1 + np.abs(lam).max()
    np.testing.assert_allclose(lam[act] - 2 * mu * s[act], theta, atol=tol * scale)
    assert np.all(lam[~act] <= theta + tol * scale)
    eta = theta - 2 * alpha * S
    assert eta >= -tol * scale
    assert eta * (radius - S) <= tol * scale * max(radius, 1.0)


@pytest.mark.parametrize("alpha,radius", [(1e300, np.sqrt(40 / 1e300)), (1.0, 1e-200),
                                          (1e-300, 1e300), (0.5, 1e-3)])
def test_lemma3_extreme_settings_do_not_crash(alpha, radius):
    """alpha = 1e300 gave an IndexError (no k passed the radius test by
    round-off): the active set is now the largest k with lam_k > theta_k."""
    lam = np.array([3.0, 2.0, 2.0, -1.0, 0.5])
    s = solve_lemma3(lam, alpha, 0.7, radius)
    assert np.isfinite(s).all()
    assert np.all(s >= 0) and s.sum() <= radius * (1 + 1e-10)
    if radius >= 1e-3:
        _lemma3_kkt(lam, alpha, 0.7, radius, s)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=1, max_size=8),
       st.floats(1e-3, 1e3), st.floats(1e-3, 1e3), st.floats(1e-2, 1e3))
def test_lemma3_satisfies_its_kkt_conditions(lam, alpha, mu, radius):
    lam = np.array(lam)
    _lemma3_kkt(lam, alpha, mu, radius, solve_lemma3(lam, alpha, mu, radius), tol=1e-8)


def test_psd_factor_reconstructs_the_kept_spectrum():
    from tripletml.linalg import psd_factor
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    ev = np.array([5.0, 2.0, 1e-9, 0.0, -1.0, 3.0])
    M = (Q * ev) @ Q.T
    L, r = psd_factor(M, 1e-6)
    assert r == 3 and L.shape == (3, 6)
    keep = ev > 1e-6 * 5.0
    want = (Q[:, keep] * ev[keep]) @ Q[:, keep].T          # the kept part, by definition
    np.testing.assert_allclose(L.T @ L, want, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(L, axis=1) ** 2, [5.0, 3.0, 2.0], rtol=1e-12)
    L0, r0 = psd_factor(-np.eye(3), 1e-6)                  # nothing positive
    assert r0 == 0 and L0.shape == (0, 3)
    L1, r1 = psd_factor(M, 0.5)                            # only eigenvalues > 2.5
    assert r1 == 2


@pytest.mark.parametrize("identity", [0.0, 0.3])
@pytest.mark.parametrize("n_rows, d, n_zero", [(7, 20, 3), (30, 12, 5), (12, 12, 0), (4, 9, 4)])
def test_psd_factor_of_rows_is_psd_factor_of_the_formed_matrix(n_rows, d, n_zero, identity):
    """The SVD route (fewer weighted rows than columns) and the eigh route
    give psd_factor's factor of B^T diag(w) B + identity I: same rank, same
    kept eigenvalues in the same order, the same rows up to sign where the
    eigenvalues are simple (the identity's eigenspace has no preferred basis)."""
    from tripletml.linalg import psd_factor, psd_factor_of_rows
    rng = np.random.default_rng(n_rows + d)
    B = rng.normal(size=(n_rows, d))
    B[1] = 2.0 * B[0]                                    # a repeated direction
    w = rng.uniform(0.1, 3.0, n_rows)
    w[rng.permutation(n_rows)[:n_zero]] = 0.0
    M = (B.T * w) @ B + identity * np.eye(d)
    for tol in (1e-12, 0.05):
        L0, r0 = psd_factor(M, tol)
        L1, r1 = psd_factor_of_rows(B, w, tol, identity)
        assert r1 == r0 and L1.shape == L0.shape == (r0, d)
        if r0 == 0:
            continue
        np.testing.assert_allclose(L1.T @ L1, L0.T @ L0, atol=1e-10 * np.abs(M).max())
        np.testing.assert_allclose(np.sum(L1 ** 2, 1), np.sum(L0 ** 2, 1), rtol=1e-10)
        simple = np.sum(L0 ** 2, 1) > identity * (1 + 1e-6)
        signs = np.sign(np.sum(L0[simple] * L1[simple], axis=1))
        np.testing.assert_allclose(L1[simple] * signs[:, None], L0[simple],
                                   atol=1e-8 * np.abs(L0).max())


def test_psd_factor_of_rows_refuses_bad_weights():
    from tripletml.linalg import psd_factor_of_rows
    B = np.ones((3, 4))
    for w in ([1.0, -1.0, 0.0], [1.0, np.nan, 0.0]):
        with pytest.raises(ValueError, match="non-negative"):
            psd_factor_of_rows(B, np.array(w), 1e-12)
    for c in (-1.0, np.inf):
        with pytest.raises(ValueError, match="non-negative"):
            psd_factor_of_rows(B, np.ones(3), 1e-12, c)
    with pytest.raises(ValueError, match="one weight per row"):
        psd_factor_of_rows(B, np.ones(2), 1e-12)
    Bn = B.copy()
    Bn[1, 2] = np.inf
    with pytest.raises(ValueError, match="finite"):
        psd_factor_of_rows(Bn, np.ones(3), 1e-12)
    L, r = psd_factor_of_rows(Bn, np.array([1.0, 0.0, 1.0]), 1e-12)   # a row without weight
    assert r == 1 and np.isfinite(L).all()
    L, r = psd_factor_of_rows(B, np.zeros(3), 1e-12)
    assert r == 0 and L.shape == (0, 4)
    L, r = psd_factor_of_rows(B, np.zeros(3), 1e-12, 4.0)      # the identity alone
    assert r == 4
    np.testing.assert_allclose(L.T @ L, 4.0 * np.eye(4), atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("shift,constraint", [(0.4, "frobenius"), (0.0, None), (0.1, "spectral")])
def test_dense_route_when_d_is_at_most_r_plus_c(sparse, shift, constraint):
    """With ``project`` and ``d <= r + c`` the matrix is decomposed directly:
    the same projected W, the same kept rank (the complement of span[U, A]
    is dropped even with no shift: A here has repeated columns), orthonormal
    vectors, against Brand's route projected afterwards and a dense eigh."""
    rng = np.random.default_rng(7)
    d, r = 12, 5
    U, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = rng.uniform(0.5, 2.0, r)
    A = rng.normal(size=(d, 4))
    A = np.hstack([A, A[:, :2], 2 * A[:, 1:3]])          # 8 columns of rank 4
    signs = np.array([1.0, -1.0, 1.0, 1.0, 0.5, -0.25, 1.0, 0.3])
    assert d <= r + A.shape[1] and r + 4 < d            # a complement of dimension 3
    Ain = sp.csr_matrix(A) if sparse else A
    tau = 2.0 if constraint else None

    def proj(m):
        return project_spectrum(m, shift, constraint, tau)
    V, mu = lowrank_eig_update(U, s, Ain, signs)         # Brand's route (no project)
    lam = proj(mu)
    info = {}
    V2, mu2 = lowrank_eig_update(U, s, Ain, signs, project=proj, info=info)
    assert info["dense"]
    assert mu2.size == np.count_nonzero(lam) and V2.shape == (d, mu2.size)
    np.testing.assert_allclose((V2 * mu2) @ V2.T, (V * lam) @ V.T, atol=1e-12)
    W = (U * s) @ U.T + (A * signs) @ A.T
    np.testing.assert_allclose((V2 * mu2) @ V2.T, project_psd(W, shift, constraint, tau),
                               atol=1e-12)
    assert orthonormality_error(V2) < 1e-13
    assert np.all(np.diff(mu2) <= 0)
