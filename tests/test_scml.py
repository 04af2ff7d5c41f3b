"""SCML against the paper's problem written plainly (Shi, Bellet & Sha,
AAAI 2014, eq. 4) and the RDA/AdaGrad proximal step (Duchi et al. 2011)."""
import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.datasets import load_iris, load_wine

import tripletml as tm
from tripletml.algorithms.scml.estimator import SCML
from tripletml.algorithms.scml.kernels import rda_step, scml_objective, triplet_deltas


def F_paper(X, T, U, w, alpha):
    """(1/m) sum_t [1 + d_w(q, p+) - d_w(q, p-)]_+ + alpha ||w||_1 with
    d_w(x, x') = (x - x')^T (sum_b w_b u_b u_b^T) (x - x')."""
    M = sum(wb * np.outer(u, u) for wb, u in zip(w, U))
    loss = 0.0
    for q, p, n in T:
        dp = (X[q] - X[p]) @ M @ (X[q] - X[p])
        dn = (X[q] - X[n]) @ M @ (X[q] - X[n])
        loss += max(0.0, 1.0 + dp - dn)
    return loss / len(T) + alpha * np.sum(np.abs(w))


def _data(seed=0):
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    return X, y


def test_objective_is_eq4():
    X, y = _data()
    rng = np.random.default_rng(0)
    T = tm.triplets.random_class_triplets(y, 60, random_state=0)
    U = rng.normal(size=(7, 4))
    U /= np.linalg.norm(U, axis=1)[:, None]
    w = np.abs(rng.normal(size=7)) * (rng.random(7) < 0.6)
    delta = triplet_deltas(X @ U.T, T)
    assert scml_objective(delta, w, 0.01) == pytest.approx(F_paper(X, T, U, w, 0.01), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_proximal_step_minimizes_the_rda_model(seed):
    """w_b = argmin_{w >= 0} gbar_b w + alpha |w| + (delta0 + s_b) w^2 / (2 eta0 t)."""
    rng = np.random.default_rng(seed)
    K = 6
    gbar = rng.normal(size=K)
    s = np.abs(rng.normal(size=K))
    t, alpha, eta0 = int(rng.integers(1, 50)), 0.1 * rng.random(), 2.0 * rng.random() + 0.1
    w = rda_step(gbar, s, t, alpha, eta0)
    assert np.all(w >= 0)
    from tripletml.algorithms.scml.kernels import DELTA0
    for b in range(K):
        def model(v):
            return gbar[b] * v + alpha * abs(v) + (DELTA0 + s[b]) * v * v / (2 * eta0 * t)
        hi = max(10.0, 10 * w[b])
        best = minimize_scalar(model, bounds=(0.0, hi), method="bounded",
                               options={"xatol": 1e-12})
        ref = best.x if model(best.x) < model(0.0) else 0.0
        assert w[b] == pytest.approx(ref, abs=1e-6 * max(1.0, ref))


def test_fit_labels_weights_nonnegative_sparse_and_psd():
    X, y = _data()
    m = SCML(random_state=0, preprocessing=None).fit(X, y)
    assert np.all(m.weights_ >= 0)
    assert 0 < np.count_nonzero(m.weights_) < m.weights_.size           # sparse
    np.testing.assert_allclose(np.linalg.norm(m.basis_, axis=1), 1.0)
    M = sum(wb * np.outer(u, u) for wb, u in zip(m.weights_, m.basis_))
    np.testing.assert_allclose(m.M_, M, atol=1e-10 * np.abs(M).max())
    assert np.linalg.eigvalsh(m.M_).min() >= -1e-10 * np.abs(M).max()
    np.testing.assert_allclose(m.components_.T @ m.components_, m.M_,
                               atol=1e-10 * np.abs(M).max())
    assert m.stop_reason_ in ("tol", "max_iter") and m.n_iter_ > 0
    # the objective went down from w = 0 (where it is 1)
    Xs = m.scaler_.transform(X)             # the rows the solver saw
    T = tm.triplets.knn_triplets(Xs, y, 3, 10)
    F = F_paper(Xs, T[::7], m.basis_, m.weights_, m.alpha)
    assert F < 0.5
    assert m.score(X, y) > tm.Euclidean(preprocessing=None).fit(X, y).score(X, y)


def test_fit_triplets_takes_the_triplet_basis():
    X, y = _data()
    T = tm.triplets.random_class_triplets(y, 400, random_state=0)
    m = SCML(random_state=0, preprocessing=None, n_basis=30, max_iter=2000).fit(X, triplets=T)
    assert m.basis_.shape == (30, 4)
    assert np.all(m.weights_ >= 0)
    Xs = m.scaler_.transform(X)
    assert F_paper(Xs, T[::10], m.basis_, m.weights_, m.alpha) < \
        F_paper(Xs, T[::10], m.basis_, np.zeros(30), m.alpha)
    with pytest.raises(ValueError, match="labels"):
        SCML(basis="lda").fit(X, triplets=T)


def test_reproducible_and_history():
    X, y = load_wine(return_X_y=True)
    a = SCML(random_state=3, max_iter=1000, check_every=250).fit(X, y)
    b = SCML(random_state=3, max_iter=1000, check_every=250).fit(X, y)
    np.testing.assert_array_equal(a.M_, b.M_)
    h = a.history_
    assert len(h["step"]) == len(h["objective"]) == len(h["convergence"])
    assert h["objective"][0] == pytest.approx(1.0)       # w = 0: every hinge is 1


def test_bad_input():
    X, y = _data()
    with pytest.raises(ValueError, match="1 class"):
        SCML().fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match="single member"):
        SCML().fit(X[:4], np.arange(4))
    with pytest.raises(ValueError, match="basis"):
        SCML(basis="pca").fit(X, y)
    with pytest.raises(ValueError, match="eta0"):
        SCML(eta0=0).fit(X, y)


def test_persistence_and_tampering(tmp_path):
    X, y = _data()
    m = SCML(random_state=0, max_iter=1000).fit(X, y)
    m.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_allclose(back.transform(X), m.transform(X))
    data = dict(np.load(tmp_path / "m.npz", allow_pickle=False))
    key = [k for k in data if k.endswith("weights_")][0]
    w = data[key].copy()
    w[np.argmax(w)] *= -1
    data[key] = w
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError):
        tm.load_model(tmp_path / "bad.npz")


def test_triplet_diff_basis_on_the_span_is_the_plain_basis():
    """Fewer distinct rows than features: each batch decomposed on the span's
    coordinates gives the plain decomposition's directions (up to sign), in
    the same order, from the same draws."""
    from tripletml.algorithms.scml.kernels import triplet_diff_basis
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 40))
    T = np.array([rng.choice(12, 3, replace=False) for _ in range(300)])
    a = triplet_diff_basis(X, T, 200, np.random.default_rng(1), span=False, by_rows=False)
    for span, by_rows in ((True, False), (True, None), (False, True)):
        # on the span and / or by the batch's row counts: the same directions
        b = triplet_diff_basis(X, T, 200, np.random.default_rng(1), span=span, by_rows=by_rows)
        assert a.shape == b.shape and a.shape[0] > 0
        np.testing.assert_allclose(np.abs(np.einsum("ij,ij->i", a, b)), 1.0, atol=1e-8)


def test_default_basis_size_follows_the_rows_span():
    """n_basis=None from triplets: 80 directions per dimension the answers'
    rows span, min(d, u - 1); metric-learn's 80 d when rows outnumber
    features."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(10, 30))
    T = np.array([rng.choice(10, 3, replace=False) for _ in range(200)])
    m = SCML(max_iter=50, tol=None, preprocessing=None, random_state=0).fit(X, triplets=T)
    assert m.basis_.shape[1] == 30 and m.basis_.shape[0] <= 80 * 9


def test_lda_basis_on_duplicate_rows_needs_no_kmeans_and_warns_nothing():
    """With no more distinct rows than the basis asks centers for
    (ionosphere at defaults: 245 centers, 244 distinct rows), every distinct
    row is a center, as k-means' optimum; k-means itself warned that it
    found fewer clusters than asked (a ConvergenceWarning at defaults)."""
    import warnings
    from tripletml.algorithms.scml.kernels import lda_basis
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 5))
    X = np.vstack([X, X[:4]])                       # 24 rows, 20 distinct
    y = np.arange(24) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        B = lda_basis(X, y, 2 * 24 - 1, np.random.default_rng(1))
        SCML(random_state=0, preprocessing=None).fit(X, y)
    assert B.shape == (40, 5)           # 20 centers x 2 scales x e = 1 direction
    np.testing.assert_allclose(np.linalg.norm(B, axis=1), 1.0)


def test_batch_counts_give_the_batch_matrix():
    """``Z^T S Z`` with the batch's k x k counts is ``sum (q - p-)(q - p-)^T -
    (q - p+)(q - p+)^T`` over the batch's triplets (repeats and a query
    equal to one of its items included)."""
    from tripletml.algorithms.scml.kernels import _batch_counts
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(7, 5))
    t = rng.integers(0, 7, size=(40, 3))
    t[:3] = [[1, 1, 2], [3, 4, 3], [5, 6, 2]]
    N = Z[t[:, 0]] - Z[t[:, 2]]
    P = Z[t[:, 0]] - Z[t[:, 1]]
    np.testing.assert_allclose(Z.T @ _batch_counts(t, 7) @ Z, N.T @ N - P.T @ P, atol=1e-12)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_lda_directions_on_the_rows_span_are_the_full_problems(n_classes):
    """With fewer rows than features, the local LDA directions computed on
    the span of the centered rows are those of the ``d x d`` generalized
    eigenproblem written from the definition (the between-class scatter
    and the within-class scatter plus the ridge of all ``d`` dimensions),
    up to sign, for every positive eigenvalue."""
    import scipy.linalg

    from tripletml.algorithms.scml.kernels import LDA_SHRINKAGE, _lda_directions
    rng = np.random.default_rng(n_classes)
    n, d, k = 24, 60, n_classes - 1
    y = np.arange(n) % n_classes
    X = rng.normal(size=(n, d)) + 2.0 * rng.normal(size=(n_classes, d))[y]
    m = X.mean(axis=0)
    Sw, Sb = np.zeros((d, d)), np.zeros((d, d))
    for c in range(n_classes):
        Z = X[y == c] - X[y == c].mean(axis=0)
        Sw += Z.T @ Z
        g = X[y == c].mean(axis=0) - m
        Sb += (y == c).sum() * np.outer(g, g)
    Sw += LDA_SHRINKAGE * np.trace(Sw) / d * np.eye(d)
    lam, V = scipy.linalg.eigh(Sb, Sw)
    assert np.sort(lam)[-k] > 1e-6                         # k positive eigenvalues
    want = V[:, np.argsort(lam)[::-1][:k]].T
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    got = _lda_directions(X, y, k)
    assert got.shape == (k, d)
    np.testing.assert_allclose(np.abs(np.sum(got * want, axis=1)), 1.0, atol=1e-9)
