"""LFDA against the paper's formulas written plainly (Sugiyama, JMLR 2007,
eqs. 4 and 11-16)."""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris, load_wine

import tripletml as tm
from tripletml.algorithms.lfda import estimator as lfda_mod
from tripletml.algorithms.lfda.estimator import LFDA, lfda_scatters


def _paper_scatters(X, y, k):
    """S_lw and S_lb by the definitions: double loops over all pairs.
    sigma_i: distance to the k-th nearest neighbor within the class (k
    capped at n_c - 1); A_ij = exp(-||x_i - x_j||^2 / (sigma_i sigma_j))."""
    n, d = X.shape
    sigma = np.zeros(n)
    for i in range(n):
        same = [j for j in range(n) if y[j] == y[i]]
        dists = sorted(np.linalg.norm(X[i] - X[j]) for j in same)   # dists[0] = 0 (itself)
        kk = min(k, len(same) - 1)
        sigma[i] = dists[kk]
    Sw = np.zeros((d, d))
    Sb = np.zeros((d, d))
    for i in range(n):
        for j in range(n):
            diff = np.outer(X[i] - X[j], X[i] - X[j])
            if y[i] == y[j]:
                nc = np.sum(y == y[i])
                A = np.exp(-np.sum((X[i] - X[j]) ** 2) / (sigma[i] * sigma[j]))
                wlw = A / nc
                wlb = A * (1.0 / n - 1.0 / nc)
            else:
                wlw = 0.0
                wlb = 1.0 / n
            Sw += 0.5 * wlw * diff
            Sb += 0.5 * wlb * diff
    return Sw, Sb


def _data(n=40, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + 2.0 * y[:, None] + 3.0     # offset: no cancellation hidden
    # a bimodal class 0: half its points far away
    X[(y == 0) & (np.arange(n) % 2 == 0)] += 6.0
    return X, y


@pytest.mark.parametrize("k", [1, 3, 7, 20])
def test_scatters_match_the_paper(k):
    X, y = _data()
    Sw_ref, Sb_ref = _paper_scatters(X, y, k)
    Sw, Sb, St = lfda_scatters(X, y, k)
    np.testing.assert_allclose(Sw, Sw_ref, rtol=1e-10, atol=1e-10 * np.abs(Sw_ref).max())
    np.testing.assert_allclose(Sb, Sb_ref, rtol=1e-10, atol=1e-10 * np.abs(Sb_ref).max())
    Z = X - X.mean(0)
    np.testing.assert_allclose(St, Z.T @ Z, rtol=1e-10)


def test_blocked_affinities_equal_one_block(monkeypatch):
    X, y = _data(n=60)
    ref = lfda_scatters(X, y, 5)
    monkeypatch.setattr(lfda_mod, "_BLOCK_ENTRIES", 50)      # blocks of 2 rows
    got = lfda_scatters(X, y, 5)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11 * np.abs(a).max())


def test_sparse_rows_equal_dense():
    X, y = _data()
    X[X < 4] = 0.0
    for a, b in zip(lfda_scatters(X, y, 7), lfda_scatters(sp.csr_matrix(X), y, 7)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("embedding_type", ["weighted", "orthonormalized", "plain"])
def test_generalized_eigen_equation(embedding_type):
    X, y = _data()
    m = LFDA(preprocessing=None, embedding_type=embedding_type).fit(X, y)
    Z = m.scaler_.transform(X)            # the rows the solver saw (X / feature unit)
    Sw, Sb = _paper_scatters(Z, y, 7)
    lam = m.eigenvalues_
    assert np.all(np.diff(lam) <= 1e-12)
    # the plain eigenvectors: S_lb phi = lambda S_lw phi, phi^T S_lw phi = 1
    P = LFDA(preprocessing=None, embedding_type="plain").fit(X, y).components_.T
    np.testing.assert_allclose(Sb @ P, (Sw @ P) * lam, atol=1e-8 * np.abs(Sb).max())
    np.testing.assert_allclose(P.T @ Sw @ P, np.eye(P.shape[1]), atol=1e-8)
    T = m.components_.T
    if embedding_type == "weighted":
        np.testing.assert_allclose(np.abs(T), np.abs(P * np.sqrt(np.maximum(lam, 0))),
                                   atol=1e-8)
    elif embedding_type == "orthonormalized":
        np.testing.assert_allclose(T.T @ T, np.eye(T.shape[1]), atol=1e-10)
        # the same span as the eigenvectors
        Q, _ = np.linalg.qr(P)
        np.testing.assert_allclose(Q @ Q.T, T @ T.T, atol=1e-8)
    np.testing.assert_allclose(m.M_, T @ T.T, atol=1e-12)
    assert np.linalg.eigvalsh(m.M_).min() > -1e-10 * np.abs(m.M_).max()


def test_n_components_keeps_the_top_directions():
    X, y = _data()
    full = LFDA(preprocessing=None).fit(X, y)
    two = LFDA(n_components=2, preprocessing=None).fit(X, y)
    assert two.components_.shape == (2, 4) and two.rank_ == 2
    np.testing.assert_allclose(two.eigenvalues_, full.eigenvalues_[:2])
    np.testing.assert_allclose(two.components_, full.components_[:2], atol=1e-10)


def test_lfda_separates_a_bimodal_class_better_than_euclidean():
    X, y = load_wine(return_X_y=True)
    m = LFDA(n_components=3).fit(X, y)
    e = tm.Euclidean(preprocessing="standardize").fit(X, y)
    assert m.score(X, y) > e.score(X, y) + 0.05


def test_triplets_use_the_components_of_the_positive_pairs():
    X, y = _data()
    t = tm.triplets.random_class_triplets(y, 300, random_state=0)
    a = LFDA(preprocessing=None).fit(X, triplets=t)
    b = LFDA(preprocessing=None).fit(X, y)
    np.testing.assert_allclose(a.M_, b.M_, rtol=1e-9, atol=1e-12)


def test_bad_input():
    X, y = _data()
    with pytest.raises(ValueError, match="1 class"):
        LFDA().fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match="single member"):
        LFDA().fit(X[:5], np.arange(5))
    # triplets whose positives connect every row: one class
    t = np.array([[i, i + 1, (i + 2) % 40] for i in range(39)])
    with pytest.raises(ValueError, match="two classes"):
        LFDA().fit(X, triplets=t)
    with pytest.raises(ValueError, match="embedding_type"):
        LFDA(embedding_type="bad").fit(X, y)
    with pytest.raises(ValueError, match="k"):
        LFDA(k=0).fit(X, y)


def test_small_classes_cap_k_and_duplicates_give_finite_model():
    X, y = _data(n=12)
    X[1] = X[4]                         # a duplicate pair in class 1
    m = LFDA(k=50, preprocessing=None).fit(X, y)
    assert np.isfinite(m.M_).all()
    Sw_ref, Sb_ref = _paper_scatters(m.scaler_.transform(X), y, 3)          # n_c = 4: k -> 3
    np.testing.assert_allclose(m.local_within_scatter_, Sw_ref, rtol=1e-10)


def test_iris_and_persistence(tmp_path):
    X, y = load_iris(return_X_y=True)
    m = LFDA().fit(X, y)
    assert m.history_["step"] == [0]
    m.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_allclose(back.transform(X), m.transform(X))
    # a tampered M_ is refused on load
    data = dict(np.load(tmp_path / "m.npz", allow_pickle=False))
    key = [k for k in data if k.endswith("M_")][0]
    data[key] = data[key] * 2.0
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError):
        tm.load_model(tmp_path / "bad.npz")
