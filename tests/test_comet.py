"""Dense COMET (Algorithm 1) against dense references: finite-difference
gradients of eq. (2), PD-ness after every step, the Woodbury inverse and the
Cholesky root against numpy after many steps."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.learners.comet import comet_loss
from tripletml.solvers.comet import COMETSolver
from tripletml.triplets import random_class_triplets


def _problem(seed=0, n=40, d=6, m=120, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    y = rng.integers(0, 3, n)
    return X, random_class_triplets(y, m, random_state=seed)


def _started(X, t, W=None, **params):
    """A COMET solver at ``W = I + 0.1 11^T`` (or W) with its caches."""
    d = X.shape[1]
    W = np.eye(d) + 0.1 * np.ones((d, d)) if W is None else W
    return COMETSolver(X, t, W=W, **params)


def objective_loop(W, X, t, alpha, beta, loss):
    """Eq. (2) by a plain loop over triplets."""
    total = 0.0
    for q, p, s in t:
        lam = 1 - X[q] @ W @ X[p] + X[q] @ W @ X[s]
        total += comet_loss(np.array([lam]), loss)[0]
    return total - alpha * np.linalg.slogdet(W)[1] + beta / 2 * np.sum(W * W)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "log"])
@pytest.mark.parametrize("sparse", [False, True])
def test_coordinate_gradient_matches_finite_differences(loss, sparse):
    X, t = _problem(seed=1, sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    m = _started(Xin, t, alpha=0.7, beta=0.3, loss=loss)
    W = m.W.copy()
    assert m.objective() == pytest.approx(objective_loop(W, X, t, 0.7, 0.3, loss))
    k = 2
    g = m.coordinate_gradient(k)
    eps = 1e-6
    for j in range(X.shape[1]):
        E = np.zeros_like(W)
        E[k, j] = E[j, k] = 1.0          # symmetric perturbation of W_kj (and W_jk)
        fd = (objective_loop(W + eps * E, X, t, 0.7, 0.3, loss)
              - objective_loop(W - eps * E, X, t, 0.7, 0.3, loss)) / (2 * eps)
        expect = fd if j == k else fd / 2  # off-diagonal: two entries move
        assert g[j] == pytest.approx(expect, rel=1e-5, abs=1e-6), (j, g[j], expect)


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_w_stays_pd_after_every_step(scale):
    X, t = _problem(seed=2, d=8)
    X = X * scale  # huge gradients push hard towards the boundary
    m = _started(X, t, alpha=1e-3, beta=0.0, step_fraction=0.99, eta0=1e6)
    rng = np.random.default_rng(0)
    for _ in range(80):
        m.step(int(rng.integers(0, 8)))
        assert np.linalg.eigvalsh(m.W).min() > 0


def test_near_singular_start_stays_pd():
    X, t = _problem(seed=3, d=6)
    Q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(6, 6)))
    m = _started(X, t, W=(Q * np.array([1, 1, 1, 1, 1, 1e-9])) @ Q.T, alpha=1e-2,
                 step_fraction=0.9, eta0=1e3)
    for k in range(6):
        for _ in range(5):
            m.step(k)
            assert np.linalg.eigvalsh(m.W).min() > 0


def test_inverse_and_cholesky_track_w_over_many_steps():
    X, t = _problem(seed=4, d=7)
    m = _started(X, t, alpha=0.5, beta=0.1, eta0=10.0)
    rng = np.random.default_rng(2)
    for _ in range(400):
        m.step(int(rng.integers(0, 7)))
    W = m.W
    inv = np.linalg.inv(W)
    assert np.abs(m.W_inv - inv).max() <= 1e-8 * np.abs(inv).max()
    R = np.linalg.cholesky(W).T
    assert np.abs(m.R - R).max() <= 1e-8 * np.abs(R).max()
    np.testing.assert_allclose(W, W.T, atol=1e-14)
    # the tracked ||W||_F^2 and tr(W^-1) of the PD guard follow W
    assert m.fro_sq == pytest.approx(np.sum(W * W), rel=1e-10)
    assert m.tr_inv == pytest.approx(np.trace(inv), rel=1e-8)
    # the cache of linear terms equals a fresh evaluation
    lam0 = m.linear_terms.copy()
    m.refactor()
    np.testing.assert_allclose(lam0, m.linear_terms, atol=1e-9)


def test_fit_lowers_objective_and_embeds():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    m = tm.COMET(n_triplets=5000, max_iter=5, tol=None, random_state=0).fit(X[:1000], y[:1000])
    obj = m.history_["objective"]
    assert obj[-1] < obj[0]
    assert np.linalg.eigvalsh(m.W_).min() > 0
    Z = m.transform(X[1000:1010])
    np.testing.assert_allclose(Z @ Z.T, m.similarity(X[1000:1010]), rtol=1e-8, atol=1e-10)
    assert m.score(X[1000:], y[1000:]) > tm.Euclidean().fit(X).score(X[1000:], y[1000:]) + 0.05


# ------------------------------------------------------------ sparse COMET
def test_group_prox_solves_eq_8():
    from scipy.optimize import minimize
    from tripletml.learners.comet import group_prox
    rng = np.random.default_rng(5)
    d, k = 6, 2
    for lam, theta in [(0.3, 0.7), (5.0, 0.2), (0.0, 1.0)]:
        v = rng.normal(size=d)
        v[k] = 0.0
        g = rng.normal(size=d)
        g[k] = 0.0
        E = lambda w: np.outer(np.eye(d)[k], w) + np.outer(w, np.eye(d)[k])  # noqa: E731
        G, Vk = E(g), E(v)

        def objective(w):  # eq. (8) over the group's free entries
            w = np.insert(w, k, 0.0)
            V = E(w)
            return (np.sum(G * V) + np.sum((V - Vk) ** 2) / (2 * theta)
                    + lam * np.sqrt(np.sum(V * V) + 1e-300))

        best = minimize(objective, np.delete(v, k), method="Nelder-Mead",
                        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 40000}).x
        np.testing.assert_allclose(np.delete(group_prox(v, g, theta, lam), k), best,
                                   atol=1e-5)
    # a large lam zeroes the group
    assert not group_prox(v, g, 0.1, 1e3).any()


def test_sparse_comet_is_monotone_pd_and_sparse():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X[:800] / 16.0
    y = y[:800]
    dense = tm.COMET(n_triplets=4000, max_iter=3, tol=None, random_state=0).fit(X, y)
    scores = {}
    for lam in (0.0, 100.0, 1e4):
        m = tm.SparseCOMET(group_alpha=lam, n_triplets=4000, max_iter=3, tol=None,
                           random_state=0).fit(X, y)
        obj = m.history_["objective"]
        assert all(b <= a + 1e-9 for a, b in zip(obj, obj[1:]))      # monotone
        assert np.linalg.eigvalsh(m.W_).min() > 0
        np.testing.assert_allclose(m.W_inv_, np.linalg.inv(m.W_), rtol=1e-6,
                                   atol=1e-8 * np.abs(m.W_inv_).max())
        off = m.W_ - np.diag(np.diag(m.W_))
        active = np.flatnonzero(np.abs(off).sum(axis=1) > 0)
        assert set(m.active_features_) <= set(active)  # groups live on their rows
        scores[lam] = (m.score(X, y), m.density_, np.abs(off).max())
    assert scores[1e4][1] == 0.0 and scores[1e4][2] == 0.0         # diagonal W
    assert scores[0.0][1] > scores[100.0][1] > 0                    # density falls with group_alpha
    # group_alpha = 0 follows dense COMET (same objective, different step rule)
    assert scores[0.0][0] > dense.score(X, y) - 0.05
