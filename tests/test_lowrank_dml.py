"""LowRankDML (Zhang & Zhang 2017): incremental-SVD SGD against dense
references written from the paper, the five baselines, the gradient, and
the invariants (PSD, rank, orthonormal U)."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import tripletml as tm
from tripletml import LowRankDML
from tripletml.linalg.eig_update import orthonormality_error, project_psd
from tripletml.algorithms.lowrank_dml import kernels as dml_solvers
from tripletml.algorithms.lowrank_dml.kernels import Minibatches
from tripletml.linalg.triplet_dml import TripletDMLProblem
from tripletml.triplets import random_class_triplets

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


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
        m = LowRankDML(preprocessing=None, start="zero", alpha=lam, eta0=eta0, batch_size=len(t), max_iter=it,
                       constraint=constraint, tau=tau).fit(X, triplets=t)
        np.testing.assert_allclose(m.get_mahalanobis_matrix(), W, atol=1e-10 * np.abs(W).max())
        assert m.rank_ == np.linalg.matrix_rank(W, tol=1e-9)
    assert active or constraint is None


@pytest.mark.parametrize("loss", ["triplet", "lmnn"])
def test_incsvd_and_dense_sgd_compute_the_same_iterates(loss):
    X, t = _data(seed=4, sparse=True)
    kw = dict(alpha=0.01, eta0=0.05, batch_size=7, max_iter=40, loss=loss, push_weight=0.7,
              random_state=11)
    a = LowRankDML(preprocessing=None, start="zero", solver="incsvd", **kw).fit(X, triplets=t)
    b = LowRankDML(preprocessing=None, start="zero", solver="sgd", **kw).fit(X, triplets=t)
    Wa, Wb = a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix()
    np.testing.assert_allclose(Wa, Wb, atol=1e-9 * np.abs(Wb).max())
    assert a.history_["rank"] == b.history_["rank"]
    np.testing.assert_allclose(a.history_["objective"][-1], b.history_["objective"][-1],
                               rtol=1e-9)


def test_U_stays_orthonormal_over_many_steps():
    X, t = _data(seed=5, d=15)
    m = LowRankDML(preprocessing=None, start="zero", alpha=0.001, eta0=0.05, batch_size=3, max_iter=10_000, constraint=None,
                   eval_every=0, random_state=0).fit(X, triplets=t)
    assert m.rank_ > 3
    assert orthonormality_error(m.U_) < 1e-10
    assert np.all(m.s_ > 0)


def test_rank_history_psd_and_lam_effect():
    X, t = _data(seed=6)
    ranks = []
    for lam in (0.0, 0.05, 100.0):
        m = LowRankDML(preprocessing=None, start="zero", alpha=lam, eta0=0.05, batch_size=10, max_iter=50,
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
        m = LowRankDML(preprocessing=None, start="zero", alpha=0.03, loss=loss, push_weight=0.5, eta0=0.05, max_iter=20,
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
    return LowRankDML(preprocessing=None, start="zero", solver=solver, max_iter=1, eval_every=1, **kw).fit(X, triplets=t)


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
    m2 = LowRankDML(preprocessing=None, start="zero", solver="fw", alpha=lam, tau=tau, eta0=c, constraint=constraint,
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
    m = LowRankDML(preprocessing=None, start="zero", solver="sgd_one", alpha=0.02, eta0=0.02, max_iter=30, batch_size=10,
                   random_state=0).fit(X, triplets=t)
    W = m.get_mahalanobis_matrix()
    assert np.linalg.eigvalsh(W).min() > -1e-10 and np.linalg.norm(W) <= 1 + 1e-10
    assert np.isclose(m.history_["objective"][-1], _objective_loop(X, t, W, 0.02), rtol=1e-8)


@pytest.mark.parametrize("solver", ["incsvd", "gd", "sgd", "sgd_batch", "fw", "sgd_one"])
def test_every_solver_decreases_the_objective(solver):
    X, t = _data(seed=13)
    F0 = _objective_loop(X, t, np.zeros((12, 12)), 0.02)     # W_1 = 0: F = 1
    eta = {"fw": 1.0, "gd": 0.02, "sgd_one": 0.01}.get(solver, 0.05)
    m = LowRankDML(preprocessing=None, start="zero", solver=solver, alpha=0.02, eta0=eta, max_iter=60, eval_every=20,
                   random_state=0).fit(X, triplets=t)
    F = m.objective(X, t)
    assert F < 0.9 * F0
    assert np.isclose(F, _objective_loop(X, t, m.get_mahalanobis_matrix(), 0.02), rtol=1e-8)


# ----------------------------------------------------------- errors etc.
def test_dense_solvers_refuse_to_exhaust_memory(monkeypatch):
    X, t = _data()
    monkeypatch.setattr("tripletml.core.validation.available_memory", lambda: 1000)
    with pytest.raises(MemoryError, match=r"LowRankDML: solver='gd' keeps dense 12 x 12 "
                                          r"matrices; solver='incsvd'"):
        LowRankDML(preprocessing=None, start="zero", solver="gd").fit(X, triplets=t)
    LowRankDML(preprocessing=None, start="zero", solver="incsvd", max_iter=2).fit(X, triplets=t)       # O(d r): fine


@pytest.mark.parametrize("params,err,msg", [
    ({"solver": "newton"}, ValueError, "parameter solver='newton' must be one of"),
    ({"constraint": "nuclear"}, ValueError, "parameter constraint='nuclear'"),
    ({"solver": "fw", "constraint": None}, ValueError, "solver='fw' needs a bounded"),
    ({"eta0": 0}, ValueError, "parameter eta0=0 must be a real number > 0"),
    ({"batch_size": 2.5}, TypeError, "parameter batch_size=2.5 must be an integer"),
    ({"alpha": -1}, ValueError, "parameter alpha=-1 must be a real number >= 0"),
    ({"loss": "hinge"}, ValueError, "parameter loss='hinge'"),
])
def test_bad_parameters(params, err, msg):
    X, t = _data()
    with pytest.raises(err, match="LowRankDML: " + msg.replace("(", r"\(").replace("[", r"\[")):
        LowRankDML(preprocessing=None, start="zero", **params).fit(X, triplets=t)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("solver", ["incsvd", "sgd", "fw"])
def test_divergence_stops_with_a_message(solver):
    X, t = _data()
    X = X * 1e200
    with pytest.raises(FloatingPointError, match="LowRankDML: training diverged"):
        LowRankDML(preprocessing=None, start="zero", solver=solver, eta0=1e10, max_iter=5).fit(X, triplets=t)


def test_numpy_integers_and_time_budget():
    X, t = _data()
    m = LowRankDML(preprocessing=None, start="zero", max_iter=np.int64(50), batch_size=np.int32(5), max_time=1e-9,
                   eval_every=np.int64(0)).fit(X, triplets=t)
    assert m.n_iter_ == 1 and m.history_["objective"][-1] is not None
    assert m.stop_reason_ == "max_time"


def test_save_and_load_roundtrip(tmp_path):
    X, t = _data(sparse=True)
    m = LowRankDML(preprocessing=None, start="zero", max_iter=30, batch_size=10, eta0=0.05, random_state=0).fit(X, triplets=t)
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
    m = LowRankDML(preprocessing=None, start="zero", solver="sgd_one", alpha=lam, eta0=eta, tau=tau, max_iter=1, batch_size=len(t),
                   random_state=0).fit(X, triplets=t)
    W1 = -eta * (_dense_grad(X, t, np.zeros((12, 12))) + lam * np.eye(12))
    W1 *= min(1.0, tau / np.linalg.norm(W1))
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), project_psd(W1, 0.0, "frobenius", tau),
                               atol=1e-12)


# ------------------------------------------- stopping, divergence, invariants
def test_tol_stops_at_the_first_small_relative_change_of_the_objective():
    X, t = _data(seed=15)
    m = LowRankDML(preprocessing=None, start="zero", alpha=0.01, eta0=0.05, batch_size=10, max_iter=400, tol=2e-2, eval_every=5,
                   random_state=0).fit(X, triplets=t)
    obj = [o for o in m.history_["objective"] if o is not None]
    rel = [abs(b - a) / max(abs(a), abs(b)) for a, b in zip(obj, obj[1:])]
    assert m.stop_reason_ == "tol" and m.n_iter_ < 400 and m.n_iter_ == 5 * len(obj)
    assert rel[-1] <= 2e-2 and all(r > 2e-2 for r in rel[:-1])      # the first one, not later
    assert m.n_iter_ == m.history_["step"][-1]


def test_convergence_warning_when_tol_is_not_met():
    from sklearn.exceptions import ConvergenceWarning
    X, t = _data()
    with pytest.warns(ConvergenceWarning, match=r"LowRankDML: stopped at max_iter=4 .*tol=1e-12"):
        m = LowRankDML(preprocessing=None, start="zero", max_iter=4, tol=1e-12, eval_every=1, batch_size=10,
                       random_state=0).fit(X, triplets=t)
    assert (m.stop_reason_, m.n_iter_) == ("max_iter", 4)
    with pytest.warns(ConvergenceWarning, match=r"LowRankDML: stopped at max_time"):
        m = LowRankDML(preprocessing=None, start="zero", max_iter=50, tol=1e-12, eval_every=1, max_time=1e-9,
                       random_state=0).fit(X, triplets=t)
    assert (m.stop_reason_, m.n_iter_) == ("max_time", 1)


def test_the_default_fixed_budget_does_not_warn():
    import warnings
    X, t = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = LowRankDML(preprocessing=None, start="zero", max_iter=30, batch_size=10, eval_every=0, random_state=0).fit(X, triplets=t)
    assert (m.stop_reason_, m.n_iter_, m.tol) == ("max_iter", 30, "auto")


def test_auto_tol_stops_when_the_best_objective_stalls():
    """tol="auto" (issue 40): one evaluation per pass over the triplets;
    stop when the best F of the last PATIENCE evaluations is not below the
    best before them by more than AUTO_TOL of its size -- recomputed here
    from the recorded objectives; no warning at the budget."""
    import warnings
    from tripletml.algorithms.lowrank_dml.estimator import AUTO_TOL, PATIENCE
    X, t = _data(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = LowRankDML(preprocessing=None, start="zero", batch_size=10, max_iter=2000, random_state=0).fit(
            X, triplets=t)
    per_pass = -(-t.shape[0] // 10)
    steps = [s for s, o in zip(m.history_["step"], m.history_["objective"]) if o is not None]
    objs = [o for o in m.history_["objective"] if o is not None]
    assert all(s % per_pass == 0 for s in steps[:-1])            # once per pass
    assert m.stop_reason_ == "tol" and m.n_iter_ < 2000

    def stalled(k):                   # the rule after the k-th evaluation
        before = min(o for s, o in zip(steps[:k], objs[:k]) if s <= steps[k - 1] - PATIENCE * per_pass)
        best = min(objs[:k])
        return (before - best) / abs(best) <= AUTO_TOL
    assert stalled(len(objs))
    assert not any(stalled(k) for k in range(PATIENCE + 1, len(objs)))


def test_explicit_settings_give_the_same_iterates_as_before():
    """The stopping rule changes when a run ends, nothing else: a default
    run that reaches max_iter equals the old default (tol=None,
    eval_every=10) bit for bit."""
    X, t = _data(seed=7)
    new = LowRankDML(preprocessing=None, start="zero", batch_size=10, max_iter=40, random_state=0).fit(
        X, triplets=t)
    old = LowRankDML(preprocessing=None, start="zero", batch_size=10, max_iter=40, tol=None, eval_every=10,
                     random_state=0).fit(X, triplets=t)
    assert new.n_iter_ == old.n_iter_ == 40
    np.testing.assert_array_equal(new.U_, old.U_)
    np.testing.assert_array_equal(new.s_, old.s_)


@pytest.mark.parametrize("solver", ["incsvd", "sgd"])
def test_a_blow_up_stops_with_advice(solver):
    """eta0 = 1e3 on the unconstrained problem: the loss grows from 1 (W =
    0) to ~1e4 and stays finite, so only the divergence watch sees it."""
    X, t = _data()
    with pytest.raises(FloatingPointError, match=r"LowRankDML: training diverged \(loss .* more "
                                                 r"than 1000 times .*\); lower eta0"):
        LowRankDML(preprocessing=None, start="zero", solver=solver, eta0=1e3, constraint=None, max_iter=30, batch_size=10,
                   random_state=0).fit(X, triplets=t)


def test_history_records_the_minibatch_loss():
    X, t = _data(seed=16)
    m = LowRankDML(preprocessing=None, start="zero", alpha=0.01, eta0=0.05, batch_size=7, max_iter=5, random_state=4).fit(
        X, triplets=t)
    assert m.history_["batch_loss"][0] == 1.0                 # W_1 = 0: every hinge is 1
    # iteration 2's minibatch loss, from the fitted W_2 of a 1-iteration run and its batches
    m1 = LowRankDML(preprocessing=None, start="zero", alpha=0.01, eta0=0.05, batch_size=7, max_iter=1, random_state=4).fit(
        X, triplets=t)
    b = Minibatches(len(t), 7, np.random.default_rng(4))
    b.next()
    idx = b.next()
    W = m1.get_mahalanobis_matrix()
    ref = _objective_loop(X, t[idx], W, 0.0)
    assert np.isclose(m.history_["batch_loss"][1], ref, rtol=1e-12)


@pytest.mark.parametrize("params,err,msg", [
    ({"verbose": -1}, ValueError, "parameter verbose=-1 must be an integer >= 0"),
    ({"verbose": 1.5}, TypeError, "parameter verbose=1.5 must be an integer"),
    ({"learning_rate": "optimal"}, ValueError, "parameter learning_rate='optimal' must be one"),
    ({"tol": -1e-3}, ValueError, "parameter tol=-0.001 must be a real number >= 0, one of 'auto' or None"),
    ({"tol": 1e-3, "eval_every": 0}, ValueError, "tol needs the objective during training"),
])
def test_more_bad_parameters(params, err, msg):
    X, t = _data()
    with pytest.raises(err, match="LowRankDML: " + msg):
        LowRankDML(preprocessing=None, start="zero", **params).fit(X, triplets=t)


def test_every_fitted_array_is_declared():
    X, t = _data(sparse=True)
    m = LowRankDML(preprocessing=None, start="zero", max_iter=10, batch_size=10, eta0=0.05, random_state=0).fit(X, triplets=t)
    arrays = {k for k, v in vars(m).items() if k.endswith("_") and isinstance(v, np.ndarray)}
    from tripletml.core.preprocessed import PREPROCESSING_ARRAYS
    from tripletml.core.tuples import TUPLE_ARRAYS  # classes_: fitted on pairs only
    assert (arrays == set(LowRankDML._fitted_arrays) - set(PREPROCESSING_ARRAYS) - set(TUPLE_ARRAYS)
            == {"U_", "s_", "components_"})
    spec = LowRankDML._fitted_arrays
    assert spec["U_"].shape == ("d", "rank_") and spec["s_"].shape == ("rank_",)
    assert spec["components_"].shape == (None, "d")      # rank_ rows, d with start_scale_
    assert m.components_.shape == (m.rank_, X.shape[1]) and m.start_scale_ == 0.0



@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), d=st.integers(2, 8), alpha=st.floats(0.0, 0.5),
       eta0=st.floats(1e-3, 1.0), constraint=st.sampled_from([None, "frobenius", "spectral"]),
       batch=st.integers(1, 20))
def test_incsvd_W_is_psd_on_random_problems(seed, d, alpha, eta0, constraint, batch):
    X, t = _data(seed=seed % 1000, n=15, d=d, m=30)
    m = LowRankDML(preprocessing=None, start="zero", alpha=alpha, eta0=eta0, constraint=constraint, tau=1.0, batch_size=batch,
                   max_iter=15, eval_every=0, random_state=seed).fit(X, triplets=t)
    W = m.get_mahalanobis_matrix()
    scale = max(1.0, float(np.abs(W).max()))
    assert np.linalg.eigvalsh(W).min() >= -1e-10 * scale
    assert np.all(m.s_ > 0) and orthonormality_error(m.U_) < 1e-10


def test_solver_step_alias_is_removed():
    """The solvers' step (0.2's deprecated name of update) was removed in 0.3."""
    from tripletml.algorithms.lowrank_dml.kernels import SOLVERS
    X = np.random.default_rng(0).normal(size=(20, 4))
    prob = TripletDMLProblem(X, np.array([[0, 1, 2], [3, 4, 5]]), "triplet", 0.1)
    for make in SOLVERS.values():
        s = make(prob, "frobenius", 1.0)
        assert not hasattr(s, "step") and callable(s.update)
