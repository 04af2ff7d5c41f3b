"""LowRankDML (Zhang & Zhang 2017): incremental-SVD SGD against dense
references written from the paper, the five baselines, the gradient, and
the invariants (PSD, rank, orthonormal U)."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml import LowRankDML
from tripletml.linalg.eig_update import (lowrank_eig_update, orthonormality_error, project_psd,
                                         project_spectrum, reorthonormalize_eig)
from tripletml.solvers import lowrank_dml as dml_solvers
from tripletml.solvers.lowrank_dml import Minibatches, TripletDMLProblem
from tripletml.triplets import random_class_triplets


def _data(seed=0, n=40, d=12, m=60, sparse=False):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + 0.5 * y[:, None]
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    return X, random_class_triplets(y, m, random_state=seed)


def _dense_grad(X, t, W, loss="triplet", c=1.0):
    """sum over triplets of the (sub)gradient, a plain loop."""
    X = X.toarray() if sp.issparse(X) else X
    G = np.zeros((X.shape[1],) * 2)
    for i, j, k in t:
        a, b = X[i] - X[j], X[i] - X[k]
        act = 1.0 + a @ W @ a - b @ W @ b > 0
        if loss == "triplet":
            if act:
                G += np.outer(a, a) - np.outer(b, b)
        else:
            G += (c * act + 1.0) * np.outer(a, a) - c * act * np.outer(b, b)
    return G / len(t)


def _objective_loop(X, t, W, lam, loss="triplet", c=1.0):
    X = X.toarray() if sp.issparse(X) else X
    total = 0.0
    for i, j, k in t:
        a, b = X[i] - X[j], X[i] - X[k]
        h = max(1.0 + a @ W @ a - b @ W @ b, 0.0)
        total += h if loss == "triplet" else c * h + a @ W @ a
    return total / len(t) + lam * np.trace(W)


# ------------------------------------------------------------- kernels
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
    the QR path)."""
    rng = np.random.default_rng(0)
    d, c, shift = 40, 3, 0.02
    basis = rng.normal(size=(d, subspace)) / np.sqrt(subspace) if subspace else None
    U, s, W = np.zeros((d, 0)), np.zeros(0), np.zeros((d, d))
    worst_orth = worst_err = 0.0
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


# ------------------------------------------------------- the algorithm
@pytest.mark.parametrize("constraint,sparse", [(None, False), ("frobenius", True),
                                               ("spectral", False)])
def test_incsvd_iterates_equal_dense_projected_steps(constraint, sparse):
    """W_{t+1} = Pi[W_t - eta_t g_t - eta_t lam I] (eq. 3-5) by eigh, for
    four iterations in a row (full batches make g_t deterministic)."""
    X, t = _data(sparse=sparse)
    lam, eta0, tau = 0.02, 0.05, 0.1
    W = np.zeros((X.shape[1],) * 2)
    active = False
    for it in range(1, 5):
        eta = eta0 / np.sqrt(it)
        W_pre = W - eta * _dense_grad(X, t, W) - eta * lam * np.eye(W.shape[0])
        W = project_psd(W_pre, 0.0, None, None) if constraint is None else \
            project_psd(W_pre, 0.0, constraint, tau)
        active |= constraint is not None and not np.allclose(W, project_psd(W_pre))
        m = LowRankDML(alpha=lam, eta0=eta0, batch_size=len(t), max_iter=it,
                       constraint=constraint, tau=tau).fit(X, triplets=t)
        np.testing.assert_allclose(m.get_mahalanobis_matrix(), W, atol=1e-10 * np.abs(W).max())
        assert m.rank_ == np.linalg.matrix_rank(W, tol=1e-9)
    assert active or constraint is None


@pytest.mark.parametrize("loss", ["triplet", "lmnn"])
def test_incsvd_and_dense_sgd_compute_the_same_iterates(loss):
    X, t = _data(seed=4, sparse=True)
    kw = dict(alpha=0.01, eta0=0.05, batch_size=7, max_iter=40, loss=loss, push_weight=0.7,
              random_state=11)
    a = LowRankDML(solver="incsvd", **kw).fit(X, triplets=t)
    b = LowRankDML(solver="sgd", **kw).fit(X, triplets=t)
    Wa, Wb = a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix()
    np.testing.assert_allclose(Wa, Wb, atol=1e-9 * np.abs(Wb).max())
    assert a.history_["rank"] == b.history_["rank"]
    np.testing.assert_allclose(a.history_["objective"][-1], b.history_["objective"][-1],
                               rtol=1e-9)


def test_U_stays_orthonormal_over_many_steps():
    X, t = _data(seed=5, d=15)
    m = LowRankDML(alpha=0.001, eta0=0.05, batch_size=3, max_iter=10_000, constraint=None,
                   eval_every=0, random_state=0).fit(X, triplets=t)
    assert m.rank_ > 3
    assert orthonormality_error(m.U_) < 1e-10
    assert np.all(m.s_ > 0)


def test_rank_history_psd_and_lam_effect():
    X, t = _data(seed=6)
    ranks = []
    for lam in (0.0, 0.05, 100.0):
        m = LowRankDML(alpha=lam, eta0=0.05, batch_size=10, max_iter=50,
                       random_state=0).fit(X, triplets=t)
        W = m.get_mahalanobis_matrix()
        assert np.linalg.eigvalsh(W).min() > -1e-12
        assert m.rank_ == m.history_["rank"][-1] == (np.linalg.matrix_rank(W) if m.rank_ else 0)
        assert np.linalg.norm(W) <= 1.0 + 1e-10                       # ||W||_F <= tau
        np.testing.assert_allclose(m.transform(X), X @ m.components_.T)
        ranks.append(m.rank_)
    assert ranks[0] > ranks[1] > ranks[2] == 0
    # a rank-0 metric still scores: every distance is 0
    assert not np.any(m.similarity(X[:3], X[3:7])) and m.transform(X).shape == (X.shape[0], 0)
    assert not np.any(m.pair_distance(X[:3], X[3:6]))


def test_objective_equals_a_plain_loop():
    X, t = _data(seed=7, sparse=True)
    for loss in ("triplet", "lmnn"):
        m = LowRankDML(alpha=0.03, loss=loss, push_weight=0.5, eta0=0.05, max_iter=20,
                       batch_size=10, random_state=0).fit(X, triplets=t)
        W = m.get_mahalanobis_matrix()
        ref = _objective_loop(X, t, W, 0.03, loss, 0.5)
        assert np.isclose(m.objective(X, t), ref, rtol=1e-10)
        assert np.isclose(m.history_["objective"][-1], ref, rtol=1e-10)


# ------------------------------------------------------------ gradients
@pytest.mark.parametrize("loss", ["triplet", "lmnn"])
def test_gradient_matches_finite_differences(loss):
    X, t = _data(seed=8, d=6, m=30)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(6, 6))
    W = 0.05 * Z @ Z.T
    prob = TripletDMLProblem(X, t, loss, alpha=0.1, push_weight=0.6)
    G = prob.dense_gradient(np.arange(len(t)), W, include_alpha=True)
    np.testing.assert_allclose(G, _dense_grad(X, t, W, loss, 0.6) + 0.1 * np.eye(6),
                               atol=1e-12)
    h = 1e-6
    for _ in range(10):
        E = rng.normal(size=(6, 6))
        E = E + E.T
        fd = (prob.objective_dense(W + h * E) - prob.objective_dense(W - h * E)) / (2 * h)
        assert np.isclose(fd, np.sum(G * E), rtol=1e-5, atol=1e-8)


def test_stochastic_gradient_is_unbiased():
    """The mean of the one-triplet gradients, and of the minibatch gradients
    over one pass of the permutation, equals the full gradient."""
    X, t = _data(seed=9, d=7, m=36, sparse=True)
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(7, 2))
    L = 0.1 * Z
    W = L @ L.T
    prob = TripletDMLProblem(X, t, "triplet")
    full = _dense_grad(X, t, W)
    singles = []
    for i in range(len(t)):
        A, sg = prob.gradient_factor([i], L=L)
        A = A.toarray()
        singles.append(-(A * sg) @ A.T)
    np.testing.assert_allclose(np.mean(singles, axis=0), full, atol=1e-12)
    batches = Minibatches(len(t), 9, np.random.default_rng(0))
    parts = []
    seen = []
    for _ in range(4):
        idx = batches.next()
        seen += list(idx)
        A, sg = prob.gradient_factor(idx, L=L)
        A = A.toarray()
        parts.append(-(A * sg) @ A.T)
    assert sorted(seen) == list(range(len(t)))
    np.testing.assert_allclose(np.mean(parts, axis=0), full, atol=1e-12)


# ------------------------------------------------------------ baselines
def _one_step(solver, X, t, **kw):
    return LowRankDML(solver=solver, max_iter=1, eval_every=1, **kw).fit(X, triplets=t)


def test_gd_and_sgd_batch_steps_match_the_reference():
    X, t = _data(seed=10)
    lam, eta, tau = 0.02, 0.03, 0.8
    ref = project_psd(-eta * _dense_grad(X, t, np.zeros((12, 12))), eta * lam, "frobenius", tau)
    m = _one_step("gd", X, t, alpha=lam, eta0=eta, tau=tau)
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), ref, atol=1e-12)
    m = _one_step("sgd_batch", X, t, alpha=lam, eta0=eta, tau=tau, random_state=3)
    idx = Minibatches(len(t), 10, np.random.default_rng(3)).next()
    ref = project_psd(-eta * _dense_grad(X, t[idx], np.zeros((12, 12))), eta * lam,
                      "frobenius", tau)
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), ref, atol=1e-12)


@pytest.mark.parametrize("constraint", ["frobenius", "spectral"])
def test_frank_wolfe_step_matches_the_linear_oracle(constraint):
    X, t = _data(seed=11)
    lam, tau, c = 0.02, 0.8, 2.0
    m2 = LowRankDML(solver="fw", alpha=lam, tau=tau, eta0=c, constraint=constraint,
                    max_iter=2).fit(X, triplets=t)
    # reference: W1 = gamma_1 S_1 (gamma_1 = min(1, c/3)), then one more step
    W = np.zeros((12, 12))
    for it in (1, 2):
        G = _dense_grad(X, t, W) + lam * np.eye(12)
        mu, V = np.linalg.eigh(-G)
        pos = mu > 0
        if constraint == "frobenius":
            S = tau * (V[:, pos] * mu[pos]) @ V[:, pos].T / np.linalg.norm(mu[pos])
        else:
            S = tau * V[:, pos] @ V[:, pos].T
        # the oracle: <G, S> is minimal over feasible points
        Z = np.random.default_rng(it).normal(size=(12, 12))
        Y = Z @ Z.T
        Y *= tau / (np.linalg.norm(Y) if constraint == "frobenius" else np.linalg.eigvalsh(Y).max())
        assert np.sum(G * S) <= np.sum(G * Y) + 1e-12
        g = min(1.0, c / (it + 2))
        W = (1 - g) * W + g * S
    np.testing.assert_allclose(m2.get_mahalanobis_matrix(), W, atol=1e-10)


def test_sgd_one_is_projected_once_at_the_end():
    X, t = _data(seed=12)
    m = LowRankDML(solver="sgd_one", alpha=0.02, eta0=0.02, max_iter=30, batch_size=10,
                   random_state=0).fit(X, triplets=t)
    W = m.get_mahalanobis_matrix()
    assert np.linalg.eigvalsh(W).min() > -1e-10 and np.linalg.norm(W) <= 1 + 1e-10
    assert np.isclose(m.history_["objective"][-1], _objective_loop(X, t, W, 0.02), rtol=1e-8)


@pytest.mark.parametrize("solver", ["incsvd", "gd", "sgd", "sgd_batch", "fw", "sgd_one"])
def test_every_solver_decreases_the_objective(solver):
    X, t = _data(seed=13)
    F0 = _objective_loop(X, t, np.zeros((12, 12)), 0.02)     # W_1 = 0: F = 1
    eta = {"fw": 1.0, "gd": 0.02, "sgd_one": 0.01}.get(solver, 0.05)
    m = LowRankDML(solver=solver, alpha=0.02, eta0=eta, max_iter=60, eval_every=20,
                   random_state=0).fit(X, triplets=t)
    F = m.objective(X, t)
    assert F < 0.9 * F0
    assert np.isclose(F, _objective_loop(X, t, m.get_mahalanobis_matrix(), 0.02), rtol=1e-8)


# ----------------------------------------------------------- errors etc.
def test_dense_solvers_refuse_to_exhaust_memory(monkeypatch):
    X, t = _data()
    monkeypatch.setattr("tripletml._validation.available_memory", lambda: 1000)
    with pytest.raises(MemoryError, match=r"LowRankDML: solver='gd' keeps dense 12 x 12 "
                                          r"matrices; solver='incsvd'"):
        LowRankDML(solver="gd").fit(X, triplets=t)
    LowRankDML(solver="incsvd", max_iter=2).fit(X, triplets=t)       # O(d r): fine


@pytest.mark.parametrize("params,err,msg", [
    ({"solver": "newton"}, ValueError, "parameter solver='newton' must be one of"),
    ({"constraint": "nuclear"}, ValueError, "parameter constraint='nuclear'"),
    ({"solver": "fw", "constraint": None}, ValueError, "solver='fw' needs a bounded"),
    ({"eta0": 0}, ValueError, "parameter eta0=0 must be > 0"),
    ({"batch_size": 2.5}, TypeError, "parameter batch_size=2.5 must be an integer"),
    ({"alpha": -1}, ValueError, "parameter alpha=-1 must be >= 0"),
    ({"loss": "hinge"}, ValueError, "parameter loss='hinge'"),
])
def test_bad_parameters(params, err, msg):
    X, t = _data()
    with pytest.raises(err, match="LowRankDML: " + msg.replace("(", r"\(").replace("[", r"\[")):
        LowRankDML(**params).fit(X, triplets=t)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("solver", ["incsvd", "sgd", "fw"])
def test_divergence_stops_with_a_message(solver):
    X, t = _data()
    X = X * 1e200
    with pytest.raises(FloatingPointError, match="LowRankDML: training diverged"):
        LowRankDML(solver=solver, eta0=1e10, max_iter=5).fit(X, triplets=t)


def test_numpy_integers_and_time_budget():
    X, t = _data()
    m = LowRankDML(max_iter=np.int64(50), batch_size=np.int32(5), max_time=1e-9,
                   eval_every=np.int64(0)).fit(X, triplets=t)
    assert m.n_iter_ == 1 and m.history_["objective"][-1] is not None


def test_save_and_load_roundtrip(tmp_path):
    X, t = _data(sparse=True)
    m = LowRankDML(max_iter=30, batch_size=10, eta0=0.05, random_state=0).fit(X, triplets=t)
    m.save(tmp_path / "m.npz")
    m2 = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_allclose(m2.transform(X), m.transform(X))
    assert m2.rank_ == m.rank_


def test_solver_registry_is_complete():
    assert set(dml_solvers.SOLVERS) == set(dml_solvers.AUTO_LEARNING_RATE) == \
        set(dml_solvers.DEFAULT_BATCH) == {"incsvd", "sgd", "sgd_batch", "gd", "fw", "sgd_one"}


def test_sgd_one_first_step_matches_the_reference():
    """From W = 0 (multiplier 0): W_1 = P_ball(-eta (g + lam I)); the
    average is W_1 and the one projection gives Pi_PSD∩ball(W_1)."""
    X, t = _data(seed=14)
    lam, eta, tau = 0.02, 0.03, 0.8
    m = LowRankDML(solver="sgd_one", alpha=lam, eta0=eta, tau=tau, max_iter=1, batch_size=len(t),
                   random_state=0).fit(X, triplets=t)
    W1 = -eta * (_dense_grad(X, t, np.zeros((12, 12))) + lam * np.eye(12))
    W1 *= min(1.0, tau / np.linalg.norm(W1))
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), project_psd(W1, 0.0, "frobenius", tau),
                               atol=1e-12)


def test_brand_update_rejects_mismatched_shapes():
    U = np.eye(5)[:, :2]
    with pytest.raises(ValueError, match="lowrank_eig_update: shapes do not match"):
        lowrank_eig_update(U, np.ones(2), np.ones((4, 3)))
    with pytest.raises(ValueError, match="lowrank_eig_update: shapes do not match"):
        lowrank_eig_update(U, np.ones(2), np.ones((5, 3)), np.ones(2))
