"""MMC against the paper's problem written plainly (Xing et al., NIPS 2002,
eqs. 3-6): objective, constraint, projections, gradient, optimality."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris, load_wine
from sklearn.preprocessing import StandardScaler

import tripletml as tm
from tripletml.algorithms.mmc.estimator import MMC
from tripletml.pairs import PairConstraints, class_pairs
from tripletml.algorithms.mmc.kernels import (diagonal_objective, full_gradient, mmc_diagonal, mmc_full,
                                   project_simplex_capped, project_spectraplex)


# -- the paper's quantities, plainly -------------------------------------------------
def g_paper(X, D, M):
    """sum over dissimilar pairs of ||x_i - x_j||_M (eq. 3's objective)."""
    return sum(np.sqrt((X[i] - X[j]) @ M @ (X[i] - X[j])) for i, j in D)


def f_paper(X, S, M):
    """sum over similar pairs of ||x_i - x_j||_M^2 (the constraint, <= 1)."""
    return sum((X[i] - X[j]) @ M @ (X[i] - X[j]) for i, j in S)


def h_paper(X, S, D, a):
    """eq. 6, the diagonal version's objective."""
    M = np.diag(a)
    return f_paper(X, S, M) - np.log(g_paper(X, D, M))


def _problem(seed=0, n=45, d=4):
    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(seed)
    keep = rng.choice(len(X), n, replace=False)
    X = StandardScaler().fit_transform(X)[keep][:, :d]
    y = y[keep]
    pc = class_pairs(y, 120, np.random.default_rng(seed))
    S = [tuple(p) for p in pc.pairs[pc.similar]]
    D = [tuple(p) for p in pc.pairs[~pc.similar]]
    return X, y, pc, S, D


def _diffs(X, pc):
    s = pc.similar
    return X[pc.pairs[s, 0]] - X[pc.pairs[s, 1]], X[pc.pairs[~s, 0]] - X[pc.pairs[~s, 1]]


def _fit_pairs(X, pc, **kw):
    """Through _fit with PairConstraints (what base.py hands a pair learner)."""
    m = MMC(preprocessing=None, **kw)
    m._fit(X, pc, np.random.default_rng(0))
    return m


# -- projections -------------------------------------------------------------------
def _dykstra(B, iters=5000):
    """The projection onto {PSD} cap {tr <= 1} by Dykstra's alternating
    projections (the paper's two projections, iterated to the exact one)."""
    def psd(A):
        w, V = np.linalg.eigh(0.5 * (A + A.T))
        return (V * np.maximum(w, 0)) @ V.T

    def half(A):
        n = A.shape[0]
        excess = np.trace(A) - 1.0
        return A - max(excess, 0.0) / n * np.eye(n)     # <A, I> <= 1, ||I||_F^2 = n

    x, p, q = B.copy(), np.zeros_like(B), np.zeros_like(B)
    for _ in range(iters):
        y = psd(x + p)
        p = x + p - y
        x = half(y + q)
        q = y + q - x
    return x


@pytest.mark.parametrize("seed", range(4))
def test_spectraplex_projection_is_the_exact_projection(seed):
    rng = np.random.default_rng(seed)
    R = rng.normal(size=(5, 5))
    B = R + R.T + (seed - 1.5) * np.eye(5)
    P, lam, V = project_spectraplex(B)
    assert np.all(lam >= 0) and lam.sum() <= 1 + 1e-12
    np.testing.assert_allclose(P, _dykstra(B), atol=1e-7)
    # variational inequality: <B - P, Y - P> <= 0 for feasible Y
    for _ in range(50):
        Y = rng.normal(size=(5, 3))
        Y = Y @ Y.T
        Y /= np.trace(Y) * rng.uniform(1, 3)
        assert np.vdot(B - P, Y - P) <= 1e-10


def test_simplex_projection_plain():
    rng = np.random.default_rng(0)
    for _ in range(100):
        v = rng.normal(size=6) * 2
        p = project_simplex_capped(v)
        # brute force: minimize ||x - v|| on {x >= 0, sum x <= 1} by a fine search on theta
        if np.maximum(v, 0).sum() <= 1:
            np.testing.assert_allclose(p, np.maximum(v, 0))
        else:
            assert abs(p.sum() - 1) < 1e-12 and np.all(p >= 0)
            theta = np.mean(v[p > 0] - p[p > 0])
            np.testing.assert_allclose(p, np.maximum(v - theta, 0), atol=1e-12)


def test_paper_projections_in_A_coordinates():
    """The learned A lies in both of the paper's sets: C1 = {f(A) <= 1} and
    C2 = {A PSD}: projecting onto either leaves it (to rounding)."""
    X, y, pc, S, D = _problem()
    A = _fit_pairs(X, pc).M_
    assert f_paper(X, S, A) <= 1 + 1e-9
    w = np.linalg.eigvalsh(A)
    assert w.min() >= -1e-12 * w.max()


# -- gradient ----------------------------------------------------------------------
def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(20, 4))
    R = rng.normal(size=(4, 4))
    B = R @ R.T + 0.1 * np.eye(4)
    g, G = full_gradient(Z, B)
    assert g == pytest.approx(sum(np.sqrt(z @ B @ z) for z in Z), rel=1e-12)
    h = 1e-6
    for i in range(4):
        for j in range(4):
            E = np.zeros((4, 4))
            E[i, j] = E[j, i] = 1.0 if i == j else 0.5
            fd = (sum(np.sqrt(z @ (B + h * E) @ z) for z in Z)
                  - sum(np.sqrt(z @ (B - h * E) @ z) for z in Z)) / (2 * h)
            assert np.vdot(G, E) == pytest.approx(fd, rel=1e-6)


def test_diagonal_objective_is_eq6():
    X, y, pc, S, D = _problem()
    Ds, Dd = _diffs(X, pc)
    a = np.abs(np.random.default_rng(0).normal(size=X.shape[1]))
    assert diagonal_objective((Ds ** 2).sum(0), Dd ** 2, a) == pytest.approx(
        h_paper(X, S, D, a), rel=1e-12)


# -- the fitted model --------------------------------------------------------------
def test_full_fit_is_feasible_psd_and_optimal():
    X, y, pc, S, D = _problem()
    m = _fit_pairs(X, pc)
    A = m.M_
    assert m.stop_reason_ == "tol"
    assert abs(f_paper(X, S, A) - 1) < 1e-9               # the constraint is active
    g_star = g_paper(X, D, A)
    # better than the initial point and than any feasible competitor tried
    assert g_star >= m.history_["objective"][0] - 1e-12
    assert g_star > m.history_["objective"][0]
    Ieye = np.eye(X.shape[1]) / f_paper(X, S, np.eye(X.shape[1]))
    assert g_star > g_paper(X, D, Ieye)
    rng = np.random.default_rng(0)
    for _ in range(300):
        R = rng.normal(size=(X.shape[1], rng.integers(1, X.shape[1] + 1)))
        M = R @ R.T
        assert g_paper(X, D, M / f_paper(X, S, M)) <= g_star * (1 + 1e-9)
    # first-order optimality: along the paper's gradient direction, projected
    # back onto the feasible set, no small step improves g
    Gp = sum(np.outer(X[i] - X[j], X[i] - X[j]) / (2 * np.sqrt((X[i] - X[j]) @ A @ (X[i] - X[j])))
             for i, j in D)
    for t in (1e-4, 1e-3, 1e-2):
        M = A + t * Gp
        w, V = np.linalg.eigh(M)
        M = (V * np.maximum(w, 0)) @ V.T
        M = M / max(f_paper(X, S, M), 1.0)
        assert g_paper(X, D, M) <= g_star * (1 + 1e-7)
    np.testing.assert_allclose(m.components_.T @ m.components_, A, atol=1e-12 * np.abs(A).max())


def test_diagonal_fit_is_stationary_for_eq6():
    X, y, pc, S, D = _problem()
    m = _fit_pairs(X, pc, diagonal=True)
    a = np.diag(m.M_)
    assert np.all(a >= 0)
    assert np.count_nonzero(m.M_ - np.diag(a)) == 0
    assert f_paper(X, S, m.M_) <= 1
    h_star = h_paper(X, S, D, a)
    assert h_star < m.history_["objective"][0]
    # KKT of min h(a), a >= 0, by finite differences of the plain eq. 6
    eps = 1e-7
    for k in range(len(a)):
        e = np.zeros_like(a)
        e[k] = eps
        up = (h_paper(X, S, D, a + e) - h_star) / eps
        if a[k] > 1e-6:
            down = (h_star - h_paper(X, S, D, a - e)) / eps
            assert abs(0.5 * (up + down)) < 1e-2 * (1 + abs(up))
        else:
            assert up > -1e-2
    rng = np.random.default_rng(1)
    for _ in range(200):
        b = np.maximum(a + 0.05 * rng.normal(size=a.size) * a.max(), 0)
        if b.any():
            assert h_paper(X, S, D, b) >= h_star - 1e-6     # tol: Newton decrement 1e-6


@pytest.mark.parametrize("diagonal", [False, True])
def test_labels_triplets_and_pairs(diagonal):
    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = MMC(diagonal=diagonal, random_state=0).fit(X, y)
    assert m.stop_reason_ == "tol" and m.n_iter_ >= 1
    assert m.score(X, y) > tm.Euclidean(preprocessing="standardize").fit(X, y).score(X, y) - 0.02
    t = tm.triplets.random_class_triplets(y, 200, random_state=0)
    a = MMC(diagonal=diagonal, preprocessing=None, shrinkage=0.0).fit(X, triplets=t)
    # the same as the pairs (q, p+) similar and (q, p-) dissimilar (the
    # paper's optimum: shrinkage="auto" holds out answers of each form)
    pc = PairConstraints(np.concatenate([t[:, [0, 1]], t[:, [0, 2]]]).astype(np.int64),
                         np.repeat(np.array([1, -1], np.int8), len(t)))
    b = _fit_pairs(a.scaler_.transform(X), pc, diagonal=diagonal, shrinkage=0.0)
    np.testing.assert_allclose(a.M_, b.M_, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("load", [load_iris, load_wine])
def test_defaults_converge_without_warnings(load):
    X, y = load(return_X_y=True)
    for diagonal in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m = MMC(diagonal=diagonal, random_state=0).fit(X, y)
        assert m.stop_reason_ == "tol"
        assert len(m.history_["objective"]) == len(m.history_["step"])


def test_public_pairs_equal_the_solver_on_the_same_pairs():
    """fit(X3d_pairs, y) with X3d of shape (m, 2, d) and fit(X, pairs=P, y=labels)
    hand MMC the pairs themselves (no triplets made of them)."""
    X, y, pc, S, D = _problem()
    a = MMC(preprocessing=None).fit(X, pairs=pc.pairs, y=pc.labels.astype(int))
    b = _fit_pairs(a.scaler_.transform(X), pc)
    np.testing.assert_allclose(a.M_, b.M_, rtol=1e-10, atol=1e-14)
    c = MMC(preprocessing=None).fit(X[pc.pairs], pc.labels.astype(int))
    assert c.M_.shape == (X.shape[1],) * 2
    assert c.score(X[pc.pairs], pc.labels) > 0.8           # ROC AUC of the pairs


@pytest.mark.parametrize("diagonal", [False, True])
def test_n_components_narrows_transform_only(diagonal):
    X, y = load_wine(return_X_y=True)
    full = MMC(diagonal=diagonal, random_state=0).fit(X, y)
    two = MMC(diagonal=diagonal, n_components=2, random_state=0).fit(X, y)
    np.testing.assert_array_equal(two.M_, full.M_)                  # the distance is kept
    k = min(2, full.rank_)
    Z = two.transform(X)
    assert Z.shape == (len(X), 2) and not Z[:, k:].any()     # zero beyond rank_ (issue 39)
    # the leading eigen-directions of M: Z Z^T's metric is the top-k part of M_
    w, V = np.linalg.eigh(full.M_)
    top = (V[:, ::-1][:, :k] * w[::-1][:k]) @ V[:, ::-1][:, :k].T
    Xs = full.scaler_.transform(X)
    np.testing.assert_allclose(Z @ Z.T, Xs @ top @ Xs.T, atol=1e-8 * np.abs(Z @ Z.T).max())


def test_bad_input():
    X, y, pc, S, D = _problem()
    with pytest.raises(ValueError, match="no similar pair"):
        _fit_pairs(X, PairConstraints(pc.pairs[~pc.similar], pc.labels[~pc.similar]))
    with pytest.raises(ValueError, match="dissimilar"):
        _fit_pairs(X, PairConstraints(pc.pairs[pc.similar], pc.labels[pc.similar]))
    with pytest.raises(ValueError, match="n_pairs"):
        MMC(n_pairs=1).fit(X, y)
    with pytest.raises(ValueError, match="single member"):
        MMC().fit(X[:4], np.arange(4))
    Xd = np.vstack([X, X])                     # similar pairs of a row and its copy
    n = len(X)
    dup = PairConstraints(np.array([[i, i + n] for i in range(10)] + [[0, 1], [2, 3]]),
                          np.array([1] * 10 + [-1, -1], np.int8))
    with pytest.raises(ValueError, match="identical"):
        _fit_pairs(Xd, dup)


def test_persistence_and_tampering(tmp_path):
    X, y = load_wine(return_X_y=True)
    m = MMC(random_state=0).fit(X, y)
    m.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_allclose(back.transform(X), m.transform(X))
    data = dict(np.load(tmp_path / "m.npz", allow_pickle=False))
    key = [k for k in data if k.endswith("M_")][0]
    data[key] = -data[key]
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError):
        tm.load_model(tmp_path / "bad.npz")
