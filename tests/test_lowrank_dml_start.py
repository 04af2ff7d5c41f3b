"""LowRankDML's identity start (``start="identity"``, the default on
answers): ``W = c (I + W')`` with ``W'`` Algorithm 1's iterate on the rows
scaled by ``sqrt(c)``, checked against a plain loop written from the
formulas, by finite differences, and by its invariants (scale, span, save
and load, the refusals)."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import LowRankDML
from tripletml.algorithms.lowrank_dml import estimator as lr_estimator
from tripletml.linalg.eig_update import project_psd
from tripletml.linalg.triplet_dml import TripletDMLProblem
from test_lowrank_dml import _data    # the paper tests' rows and class triplets


def _scale(X, t):
    """``c = 1 / median |d_I(q, n) - d_I(q, p)|``, a plain loop."""
    Xd = X.toarray() if sp.issparse(X) else X
    marg = [np.sum((Xd[i] - Xd[k]) ** 2) - np.sum((Xd[i] - Xd[j]) ** 2) for i, j, k in t]
    return 1.0 / np.median(np.abs(marg))


def _grad_loop(Xs, t, W):
    """The (sub)gradient of ``1/m sum max(1 + ||a||^2_{I+W} - ||b||^2_{I+W}, 0)``."""
    G = np.zeros((Xs.shape[1],) * 2)
    for i, j, k in t:
        a, b = Xs[i] - Xs[j], Xs[i] - Xs[k]
        if 1.0 + a @ a + a @ W @ a - b @ b - b @ W @ b > 0:
            G += np.outer(a, a) - np.outer(b, b)
    return G / len(t)


def _objective_loop(Xs, t, W, lam):
    h = [max(1.0 + (Xs[i] - Xs[j]) @ (np.eye(len(W)) + W) @ (Xs[i] - Xs[j])
             - (Xs[i] - Xs[k]) @ (np.eye(len(W)) + W) @ (Xs[i] - Xs[k]), 0.0) for i, j, k in t]
    return float(np.mean(h)) + lam * np.trace(W)


@pytest.mark.parametrize("constraint,sparse", [(None, False), ("frobenius", True),
                                               ("spectral", False)])
def test_identity_iterates_equal_a_plain_loop(constraint, sparse):
    """``W'_{t+1} = Pi[W'_t - eta_t g_t - eta_t lam I]`` with g the gradient
    of the shifted loss on ``sqrt(c) X``; the model is ``c (I + W')``."""
    X, t = _data(sparse=sparse)
    Xd = X.toarray() if sp.issparse(X) else X
    c = _scale(X, t)
    Xs = np.sqrt(c) * Xd
    lam, eta0, tau = 0.02, 0.05, 0.5
    W = np.zeros((X.shape[1],) * 2)
    for it in range(1, 5):
        eta = eta0 / np.sqrt(it)
        W = project_psd(W - eta * _grad_loop(Xs, t, W) - eta * lam * np.eye(len(W)), 0.0,
                        constraint, tau if constraint else None)
        m = LowRankDML(preprocessing="raw", start="identity", alpha=lam, eta0=eta0,
                       batch_size=len(t), max_iter=it, constraint=constraint, tau=tau,
                       tol=None).fit(X, triplets=t)
        assert m.start_scale_ == pytest.approx(c, rel=1e-12)
        np.testing.assert_allclose(m.get_mahalanobis_matrix(), c * (np.eye(len(W)) + W),
                                   rtol=0, atol=1e-10 * c)
        assert m.rank_ == np.linalg.matrix_rank(W, tol=1e-9)
    assert np.abs(W).max() > 0                                   # it learned something
    assert m.objective(X, t) == pytest.approx(_objective_loop(Xs, t, W, lam), rel=1e-10)


def test_shifted_gradient_by_finite_differences():
    """The problem's dense gradient with ``identity_weight`` is the derivative
    of its loss at a W where no triplet sits at the hinge's kink."""
    X, t = _data(seed=2)
    prob = TripletDMLProblem(X * 0.3, t, identity_weight=1.0)
    rng = np.random.default_rng(0)
    B = rng.normal(size=(X.shape[1],) * 2) * 0.05
    W = B @ B.T
    idx = np.arange(len(t))
    G = prob.dense_gradient(idx, W)
    f = lambda V: prob.loss_sum_dense(V) / prob.m           # noqa: E731
    assert 0 < prob.batch_loss == pytest.approx(f(W))
    E = rng.normal(size=W.shape)
    E = E + E.T
    h = 1e-6
    fd = (f(W + h * E) - f(W - h * E)) / (2 * h)
    assert fd == pytest.approx(np.sum(G * E), rel=1e-6)
    # and the identity part is in the margins: the same W without it differs
    assert f(W) != pytest.approx(TripletDMLProblem(X * 0.3, t).loss_sum_dense(W) / prob.m)


@pytest.mark.parametrize("loss", ["triplet", "lmnn"])
def test_incsvd_and_dense_sgd_same_iterates_with_identity(loss):
    X, t = _data(seed=4, sparse=True)
    kw = dict(alpha=0.01, eta0=0.05, batch_size=7, max_iter=40, loss=loss, push_weight=0.7,
              random_state=11, start="identity", preprocessing="raw")
    a = LowRankDML(solver="incsvd", **kw).fit(X, triplets=t)
    b = LowRankDML(solver="sgd", **kw).fit(X, triplets=t)
    Wa, Wb = a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix()
    np.testing.assert_allclose(Wa, Wb, atol=1e-9 * np.abs(Wb).max())
    np.testing.assert_allclose(a.history_["objective"][-1], b.history_["objective"][-1],
                               rtol=1e-9)


def test_auto_start_identity_on_answers_zero_with_labels(monkeypatch):
    X, t = _data()
    y = np.arange(len(X)) % 3
    kw = dict(max_iter=20, random_state=0)
    lab = LowRankDML(**kw).fit(X, y)
    assert lab.start_scale_ == 0.0 and lab.components_.shape == (lab.rank_, X.shape[1])
    ans = LowRankDML(**kw).fit(X, triplets=t)
    d = ans.n_features_in_
    assert ans.start_scale_ > 0 and ans.components_.shape == (d, d)
    c = ans.start_scale_
    W = c * np.eye(d) + (ans.U_ * ans.s_) @ ans.U_.T
    L = ans.components_
    np.testing.assert_allclose(L, L.T, atol=1e-12)               # symmetric square root
    np.testing.assert_allclose(L.T @ L, W, atol=1e-10 * np.abs(W).max())
    assert np.linalg.eigvalsh(W).min() >= c * (1 - 1e-10)      # W >= c I
    same = LowRankDML(start="identity", **kw).fit(X, triplets=t)
    np.testing.assert_array_equal(same.components_, ans.components_)
    zero = LowRankDML(start="zero", **kw).fit(X, triplets=t)
    assert zero.start_scale_ == 0.0
    monkeypatch.setattr(lr_estimator, "AUTO_IDENTITY_MAX_FEATURES", d - 1)
    wide = LowRankDML(**kw).fit(X, triplets=t)
    assert wide.start_scale_ == 0.0
    np.testing.assert_array_equal(wide.components_, zero.components_)


def test_identity_start_is_scale_free():
    """Rows times 1e3 (preprocessing 'raw': nothing fitted): c falls by 1e6
    and the scaled rows, hence every step, are the same."""
    X, t = _data(seed=1)
    kw = dict(preprocessing="raw", start="identity", max_iter=30, random_state=0)
    a = LowRankDML(**kw).fit(X, triplets=t)
    b = LowRankDML(**kw).fit(X * 1e3, triplets=t)
    assert b.start_scale_ == pytest.approx(a.start_scale_ * 1e-6, rel=1e-10)
    np.testing.assert_allclose(b.similarity(X * 1e3), a.similarity(X), rtol=1e-8)


def test_new_item_outside_the_learned_directions_keeps_the_features_geometry():
    X, t = _data(seed=3, n=12, d=20)        # 12 rows in 20 dimensions: the span route
    m = LowRankDML(preprocessing="raw", max_iter=40, random_state=0).fit(X, triplets=t)
    u = np.linalg.svd(np.vstack([X, m.U_.T]))[2][-1]          # off the rows and off U
    c = m.start_scale_
    assert c > 0
    d2 = m.pair_distance(X[:1] + 2.0 * u, X[:1], squared=True)
    assert d2[0] == pytest.approx(4.0 * c, rel=1e-8)
    Z = m.transform(np.vstack([X[:3], X[:3] + u]))
    np.testing.assert_allclose(np.sum((Z[:3] - Z[3:]) ** 2, axis=1), c, rtol=1e-8)


def test_save_load_and_tampered_factor(tmp_path):
    from tripletml.persistence import load_model

    X, t = _data()
    m = LowRankDML(max_iter=20, random_state=0).fit(X, triplets=t)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.start_scale_ == m.start_scale_
    np.testing.assert_array_equal(back.similarity(X), m.similarity(X))
    bad = LowRankDML(max_iter=20, random_state=0).fit(X, triplets=t)
    bad.start_scale_ = 2.0 * bad.start_scale_
    bad.save(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="components_ is not the factor"):
        load_model(tmp_path / "bad.npz")


def test_partitioned_fit_refuses_identity_and_auto_starts_at_zero():
    from tripletml.distributed.sharded import ShardedCollection

    X, _ = _data()
    coll = ShardedCollection.from_arrays(X, None, n_partitions=2)
    rng = np.random.default_rng(0)
    coll = coll.with_triplets([np.stack([rng.permutation(n)[:3] for _ in range(20)])
                               for n in coll.n_rows])
    with pytest.raises(ValueError, match="start='identity'.*partitioned"):
        LowRankDML(start="identity", max_iter=5).fit(coll)
    m = LowRankDML(max_iter=5, random_state=0).fit(coll)
    assert m.start_scale_ == 0.0


def test_ties_do_not_set_the_scale_and_all_ties_are_refused():
    """One-hot rows: most triplets tie under the identity; the scale comes
    from those it separates.  Rows on which it ties every triplet: "auto"
    starts at zero, "identity" says why it cannot."""
    from tripletml.linalg.sparse_rows import margin_scale

    rng = np.random.default_rng(0)
    X = np.eye(6)[rng.integers(0, 6, 40)]
    t = np.array([rng.permutation(40)[:3] for _ in range(200)])
    marg = np.array([np.sum((X[i] - X[k]) ** 2) - np.sum((X[i] - X[j]) ** 2) for i, j, k in t])
    assert np.mean(marg == 0) > 0.5
    m = LowRankDML(start="identity", preprocessing="raw", max_iter=5).fit(X, triplets=t)
    assert m.start_scale_ == pytest.approx(1.0 / np.median(np.abs(marg[marg != 0])))
    assert margin_scale(marg * 1e3) == pytest.approx(margin_scale(marg) * 1e-3)
    assert margin_scale(np.zeros(5)) == 0.0
    same = np.ones((10, 3))
    t2 = np.array([[0, 1, 2], [3, 4, 5]])
    assert LowRankDML(preprocessing="raw", max_iter=2).fit(same, triplets=t2).start_scale_ == 0
    with pytest.raises(ValueError, match="start='identity'.*ties every triplet"):
        LowRankDML(start="identity", preprocessing="raw", max_iter=2).fit(same, triplets=t2)


def test_identity_distances_exact_under_a_large_offset():
    X, t = _data(seed=5)
    da, db = TripletDMLProblem.identity_distances(X + 1e7, t)
    ref_a = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1)
    ref_b = np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
    np.testing.assert_allclose(da, ref_a, rtol=1e-6)
    np.testing.assert_allclose(db, ref_b, rtol=1e-6)


def test_the_race_counts_the_factor_only_for_an_explicit_identity():
    from tripletml.auto.resources import _dense_work

    def work(est):
        return _dense_work(est, est.get_params())[0]

    assert work(LowRankDML()) == 0 and work(LowRankDML(start="zero")) == 0
    assert work(LowRankDML(start="identity")) == 1


def test_metric_factor_refuses_bad_input():
    from tripletml.algorithms.lowrank_dml.estimator import metric_factor

    U = np.linalg.qr(np.random.default_rng(0).normal(size=(5, 2)))[0]
    L = metric_factor(U, np.array([2.0, 1.0]), 0.5)          # against the formula
    np.testing.assert_allclose(L.T @ L, 0.5 * np.eye(5) + (U * [2.0, 1.0]) @ U.T, atol=1e-12)
    for args in [(U, np.ones(3), 0.5), (U, np.array([1.0, -1.0]), 0.5),
                 (U, np.array([1.0, np.nan]), 0.5), (U, np.ones(2), -1.0)]:
        with pytest.raises(ValueError, match="metric_factor"):
            metric_factor(*args)
