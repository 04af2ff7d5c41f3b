"""RCA (Bar-Hillel et al., JMLR 2005) against the paper's formulas written
independently in plain NumPy, its invariance to invertible linear maps, the
singular and degenerate cases."""
import numpy as np
import pytest

from tripletml import RCA


def _data(seed=0, n=90, d=5, k=3):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n // k)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 3.0 * rng.normal(size=(k, d))[y]
    return X, y


def _reference_M(X, y):
    """The paper's Steps 2-3: C = (1/p) sum_j sum_i (x_ji - m_j)(x_ji - m_j)^T
    over chunklets (classes with >= 2 members), M = C^{-1} = (C^{-1/2})^2."""
    d = X.shape[1]
    C = np.zeros((d, d))
    p = 0
    for c in np.unique(y):
        Z = X[y == c]
        if len(Z) < 2:
            continue
        Z = Z - Z.mean(axis=0)
        C += Z.T @ Z
        p += len(Z)
    C /= p
    w, V = np.linalg.eigh(C)
    W = V @ np.diag(w ** -0.5) @ V.T             # C^{-1/2}
    return W @ W, W, C


def _sqdist(M, A, B):
    E = A - B
    return np.einsum("ij,jk,ik->i", E, M, E)


def test_matches_paper_formula():
    X, y = _data()
    model = RCA(regularization=0.0, preprocessing=None).fit(X, y)
    # scale-free: the reference's distances on the raw rows are the model's
    Q = np.random.default_rng(9).normal(size=(12, 5)) * 3
    np.testing.assert_allclose(model.pair_distance(Q, Q[::-1], squared=True),
                               _sqdist(_reference_M(X, y)[0], Q, Q[::-1]), rtol=1e-8)
    # and the fitted statistics are the paper's on the rows the model sees
    # (preprocessing=None still divides by one global unit)
    X = model.scaler_.transform(X)
    M_ref, W, C = _reference_M(X, y)
    np.testing.assert_allclose(model.chunklet_covariance_, C, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.M_, M_ref, rtol=1e-8, atol=1e-10 * np.abs(M_ref).max())
    # transform = an orthogonal rotation of the whitening x C^{-1/2}
    Z, Zr = X @ model.components_.T, X @ W
    np.testing.assert_allclose(Z @ Z.T, Zr @ Zr.T, rtol=1e-8, atol=1e-8 * np.abs(Zr @ Zr.T).max())
    # whitened: unit within-chunklet covariance
    L = model.components_
    np.testing.assert_allclose(L @ C @ L.T, np.eye(X.shape[1]), atol=1e-9)


def test_regularization_is_a_scale_free_ridge():
    X, y = _data(1)
    _, _, C = _reference_M(X, y)
    reg = 0.05
    Creg = C + reg * np.trace(C) / C.shape[0] * np.eye(C.shape[0])
    model = RCA(regularization=reg, preprocessing=None).fit(X, y)
    Q = X[:10] + 1.0
    np.testing.assert_allclose(model.pair_distance(Q, X[10:20], squared=True),
                               _sqdist(np.linalg.inv(Creg), Q, X[10:20]), rtol=1e-8)
    # the ridge follows the scale of X: distances of 7X are those of X
    m7 = RCA(regularization=reg, preprocessing=None).fit(7.0 * X, y)
    np.testing.assert_allclose(m7.pair_distance(7 * Q, 7 * X[10:20]),
                               model.pair_distance(Q, X[10:20]), rtol=1e-8)


def test_invariant_to_invertible_linear_map():
    X, y = _data(2)
    rng = np.random.default_rng(5)
    A = rng.normal(size=(5, 5)) + 3 * np.eye(5)
    XA = X @ A.T
    m = RCA(regularization=1e-12, preprocessing=None).fit(X, y)
    mA = RCA(regularization=1e-12, preprocessing=None).fit(XA, y)
    Q = rng.normal(size=(7, 5))
    np.testing.assert_allclose(mA.pair_distance(Q @ A.T, (Q[::-1]) @ A.T),
                               m.pair_distance(Q, Q[::-1]), rtol=1e-6)


def test_singular_covariance_duplicated_feature():
    X, y = _data(3)
    Xd = np.hstack([X, X[:, :1]])                   # C and T singular
    for reg in (0.0, 1e-3):
        m = RCA(regularization=reg, preprocessing=None).fit(Xd, y)
        assert np.isfinite(m.M_).all() and np.isfinite(m.components_).all()
        assert m.rank_ == 5
    for reg in (0.0, 1e-12):
        m = RCA(regularization=reg, preprocessing=None).fit(Xd, y)
        assert np.isfinite(m.M_).all() and np.isfinite(m.components_).all()
        assert m.rank_ == 5
        # the duplicate adds nothing: same distances as on X
        ref = RCA(regularization=reg, preprocessing=None).fit(X, y)
        np.testing.assert_allclose(m.pair_distance(Xd[:10], Xd[10:20]),
                                   ref.pair_distance(X[:10], X[10:20]), rtol=1e-6)
    # with the default preprocessing (standardized) too
    m = RCA().fit(Xd, y)
    assert np.isfinite(m.transform(Xd)).all()


def test_singular_within_class_needs_regularization():
    X, y = _data(4)
    X = np.hstack([X, y[:, None] * 1.0])            # constant within every class
    with pytest.raises(ValueError, match="RCA.*regularization > 0"):
        RCA(regularization=0.0, preprocessing=None).fit(X, y)
    m = RCA(preprocessing=None).fit(X, y)
    assert np.isfinite(m.M_).all() and m.rank_ == 6


def test_singleton_class_contributes_nothing():
    X, y = _data(5)
    X1 = np.vstack([X, [[40.0, -3, 2, 5, 1]]])
    y1 = np.append(y, 7)
    m = RCA(regularization=0.0, preprocessing=None).fit(X1, y1)
    Q = X[:10] + 1.0
    np.testing.assert_allclose(m.pair_distance(Q, X[10:20], squared=True),
                               _sqdist(_reference_M(X, y)[0], Q, X[10:20]), rtol=1e-8)


def test_every_class_a_singleton_raises():
    X = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(ValueError, match="RCA: every class has a single member"):
        RCA().fit(X, np.arange(6))


def test_n_components_keeps_fisher_directions():
    X, y = _data(6, d=6)
    full = RCA(regularization=0.0, preprocessing=None).fit(X, y)
    two = RCA(2, regularization=0.0, preprocessing=None).fit(X, y)
    assert two.components_.shape == (2, 6) and two.rank_ == 2
    np.testing.assert_allclose(np.abs(two.components_), np.abs(full.components_[:2]), rtol=1e-8)
    # the kept directions have the largest ratio of total to within variance
    C, T = full.chunklet_covariance_, full.total_scatter_
    ratios = [(v @ T @ v) / (v @ C @ v) for v in full.components_]
    assert np.all(np.diff(ratios) <= 1e-9 * max(ratios))
    assert RCA(50, preprocessing=None).fit(X, y).rank_ == 6


def test_triplets_pairs_are_chunklets():
    X, y = _data(7)
    t = np.array([[0, 1, 50], [31, 33, 2], [62, 64, 5], [3, 9, 70], [35, 40, 80],
                  [70, 75, 1], [10, 20, 60]])
    m = RCA(regularization=0.0, preprocessing=None).fit(X, triplets=t)
    X = m.scaler_.transform(X)
    E = X[t[:, 0]] - X[t[:, 1]]
    np.testing.assert_allclose(m.chunklet_covariance_, E.T @ E / (4 * len(t)), rtol=1e-10)


def test_span_from_the_rows_equals_the_scatters_eigendecomposition():
    """Fewer rows than features: the data's span from the SVD of the
    centered rows (O(n^2 d)) gives the model of T's eigendecomposition
    (O(d^3)), every direction and the top k."""
    from tripletml.algorithms.rca.estimator import _centered_scatters, rca_components
    rng = np.random.default_rng(3)
    X = rng.normal(size=(14, 50)) * rng.uniform(0.1, 10, size=50)
    groups = np.repeat(np.arange(7), 2)
    C, T, _ = _centered_scatters(X, groups, 7)
    for k in (None, 4):
        by_T = rca_components(C, T, 1e-3, k)
        by_rows = rca_components(C, T, 1e-3, k, rows=X)
        assert by_rows.shape == by_T.shape == (13 if k is None else k, 50)
        np.testing.assert_allclose(by_rows.T @ by_rows, by_T.T @ by_T, rtol=1e-7,
                                   atol=1e-9 * np.abs(by_T.T @ by_T).max())


@pytest.mark.parametrize("sparse", [False, True])
def test_triplet_chunklets_covariance_is_the_papers_formula(sparse):
    """Triplets' (query, positive) pairs as chunklets of two: the fitted
    within-chunklet covariance equals the covariance of the 2 m chunklet
    rows about their chunklet means (the paper's formula, one chunklet at a
    time, rows repeated as the answers repeat items)."""
    import scipy.sparse as sps
    from tripletml import RCA
    rng = np.random.default_rng(5)
    X = rng.normal(size=(9, 6))
    T = np.array([rng.choice(9, 3, replace=False) for _ in range(40)])
    want = np.zeros((6, 6))
    for q, p, _ in T:
        m = (X[q] + X[p]) / 2
        want += np.outer(X[q] - m, X[q] - m) + np.outer(X[p] - m, X[p] - m)
    want /= 2 * len(T)
    est = RCA(preprocessing="raw").fit(sps.csr_matrix(X) if sparse else X, triplets=T)
    np.testing.assert_allclose(est.chunklet_covariance_, want, rtol=1e-12, atol=1e-14)
