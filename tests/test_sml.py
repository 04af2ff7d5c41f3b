"""SML (Ying, Huang & Campbell 2009): eq. (4) against a plain loop, Lemma 3
against brute force, the smoothing bound, convergence rates, invariants."""
import numpy as np
import pytest

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from tripletml import SML as SMLClass


def SML(*args, **kwargs):
    """SML with the paper's plain fit on explicit triplets: these tests check
    the solver (early stopping on answers: tests/test_early_stopping.py)."""
    kwargs.setdefault("early_stopping", False)
    return SMLClass(*args, **kwargs)
from tripletml.linalg.eig_update import solve_lemma3
from tripletml.algorithms.sml.kernels import SMLProblem
from tripletml.triplets import random_class_triplets


def _data(seed=0, n=30, d=4, m=40, sparse=False):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) * 0.5 + 0.4 * y[:, None] * rng.normal(size=d)
    if sparse:
        X[rng.random(X.shape) < 0.4] = 0.0
        X = sp.csr_matrix(X)
    return X, random_class_triplets(y, m, random_state=seed)


def _f_loop(X, t, M, gamma):
    X = X.toarray() if sp.issparse(X) else X
    total = 0.0
    for q, p, n in t:                      # tau = (i, j, k) = (p, q, n)
        xij, xkj = X[p] - X[q], X[n] - X[q]
        total += max(1.0 + xij @ M @ xij - xkj @ M @ xkj, 0.0)
    return total + gamma * np.trace(M) ** 2


def _X_tau(X, t):
    X = X.toarray() if sp.issparse(X) else X
    return [np.outer(X[n] - X[q], X[n] - X[q]) - np.outer(X[p] - X[q], X[p] - X[q])
            for q, p, n in t]


# (short budgets: convergence is not what these tests check)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("sparse", [False, True])
def test_objective_equals_a_plain_loop(sparse):
    X, t = _data(sparse=sparse)
    m = SML(preprocessing=None, alpha=0.05, mu=1e-2, max_iter=30).fit(X, triplets=t)
    assert np.isclose(m.objective(X, t), _f_loop(X, t, m.M_, 0.05), rtol=1e-12)
    assert np.isclose(m.history_["objective"][-1], _f_loop(X, t, m.M_, 0.05), rtol=1e-10)


@pytest.mark.parametrize("seed", range(6))
def test_lemma3_closed_form_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    d = 5
    lam = rng.normal(size=d) * 2
    gamma, mu = rng.uniform(0.05, 1), rng.uniform(0.05, 1)
    radius = [0.3, 100.0][seed % 2]                   # binding and slack radius
    s = solve_lemma3(lam, gamma, mu, radius)

    def neg(x):
        return -(lam @ x - gamma * x.sum() ** 2 - mu * x @ x)

    best = min((minimize(neg, x0, method="SLSQP", bounds=[(0, None)] * d,
                         constraints=[{"type": "ineq", "fun": lambda x: radius - x.sum()}],
                         options={"ftol": 1e-14, "maxiter": 500})
                for x0 in (np.zeros(d), np.full(d, radius / d), rng.uniform(0, radius / d, d))),
               key=lambda r: r.fun)
    assert np.all(s >= 0) and s.sum() <= radius * (1 + 1e-10)
    assert -neg(s) >= -best.fun - 1e-9
    np.testing.assert_allclose(s, best.x, atol=1e-5)


def test_lemma3_solves_problem_15_over_matrices():
    """M_mu(u) = U diag(s*) U^T maximizes (15) over Q2 (compare with random
    feasible matrices and with a direct optimization over a factor)."""
    X, t = _data(seed=3, d=3, m=12)
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 1, len(t))
    A = sum(w * Xt for w, Xt in zip(u, _X_tau(X, t)))
    gamma, mu = 0.2, 0.3
    R = np.sqrt(len(t) / gamma)
    lam, U = np.linalg.eigh(A)
    s = solve_lemma3(lam, gamma, mu, R)
    M = (U * s) @ U.T

    def val(M):
        return np.sum(A * M) - gamma * np.trace(M) ** 2 - mu * np.sum(M * M)

    res = minimize(lambda v: -val(np.outer(v[:3], v[:3]) + np.outer(v[3:6], v[3:6])
                                  + np.outer(v[6:], v[6:])), rng.normal(size=9) * 0.1,
                   method="BFGS", options={"gtol": 1e-10})
    assert val(M) >= -res.fun - 1e-8
    for _ in range(200):
        Z = rng.normal(size=(3, 2))
        Y = Z @ Z.T
        assert val(M) >= val(Y) - 1e-12
    # the solver's phi_mu uses the same maximizer
    prob = SMLProblem(X, t, gamma)
    assert prob.radius == R
    np.testing.assert_allclose(prob.A(u), A, atol=1e-12)
    v, Mm = prob.phi(u, mu)
    np.testing.assert_allclose(Mm, M, atol=1e-10)
    assert np.isclose(v, val(M) - u.sum())


def test_smoothed_objective_is_within_mu_max_d2():
    """0 <= phi(u) - phi_mu(u) <= mu max_{Q2} ||M||_F^2 = mu T / gamma."""
    X, t = _data(seed=4, d=4, m=20)
    gamma, mu = 0.1, 0.05
    prob = SMLProblem(X, t, gamma)
    assert prob.radius == np.sqrt(len(t) / gamma)
    rng = np.random.default_rng(1)
    for _ in range(20):
        u = rng.uniform(0, 1, len(t))
        exact, _ = prob.phi(u, 0.0)
        smooth, _ = prob.phi(u, mu)
        assert -1e-12 <= exact - smooth <= mu * len(t) / gamma * (1 + 1e-10)
        # phi at mu -> 0 converges to the exact value
        tiny, _ = prob.phi(u, 1e-9)
        assert np.isclose(tiny, exact, atol=1e-6)


def test_smooth_converges_faster_than_subgradient():
    """Error to the best known value: smooth falls at least like 1/t; the
    subgradient method (best step of a grid) is slower."""
    X, t = _data(seed=5, d=3, m=30)
    gamma = 0.1
    ref = SML(preprocessing=None, alpha=gamma, mu=1e-3, max_iter=3000, tol=None).fit(X, triplets=t)
    sm = SML(preprocessing=None, alpha=gamma, mu=1e-2, max_iter=400, tol=None).fit(X, triplets=t)
    gds = [SML(preprocessing=None, alpha=gamma, solver="subgradient", eta0=e, max_iter=400,
               tol=None).fit(X, triplets=t)
           for e in (0.01, 0.05, 0.2)]
    fstar = min(min(m.history_["objective"]) for m in [ref, sm] + gds)
    es = np.array(sm.history_["objective"]) - fstar
    eg = min((np.minimum.accumulate(np.array(m.history_["objective"])) - fstar for m in gds),
             key=lambda e: e[-1])
    # O(1/t): t * error does not grow from 50 to 400 iterations
    assert 400 * es[399] <= 50 * es[49]
    assert es[99] < eg[99] and es[399] < eg[399]
    # the paper's conservative L (no line search) still converges, more slowly
    slow = SML(preprocessing=None, alpha=gamma, mu=1e-2, max_iter=400, tol=None, line_search=False).fit(X, triplets=t)
    assert slow.lipschitz_final_ == slow.lipschitz_ > sm.lipschitz_final_
    assert slow.history_["objective"][-1] - fstar < 0.5 * (slow.history_["objective"][49] - fstar)


# (short budgets: convergence is not what these tests check)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["smooth", "subgradient"])
def test_M_is_psd_with_bounded_trace_and_rank(solver):
    X, t = _data(seed=6, d=5)
    gamma = 0.05
    m = SML(preprocessing=None, alpha=gamma, solver=solver, mu=1e-2, eta0=0.01, max_iter=200).fit(X, triplets=t)
    ev = np.linalg.eigvalsh(m.M_)
    assert ev.min() > -1e-10
    assert np.trace(m.M_) <= np.sqrt(len(t) / gamma) + 1e-9
    assert m.rank_ == np.sum(ev > 1e-6 * ev.max())
    np.testing.assert_allclose(m.components_.T @ m.components_, m.M_,
                               atol=1e-5 * np.abs(m.M_).max())
    assert m.transform(X).shape == (X.shape[0], m.rank_)
    # history_ records the rank of every iterate; the last one is rank_
    assert all(r == int(r) and 0 <= r <= 5 for r in m.history_["rank"])
    assert m.history_["rank"][-1] == m.rank_


# (short budgets: convergence is not what these tests check)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_large_gamma_gives_lower_rank():
    X, t = _data(seed=7, d=6, m=60)
    r = [SML(preprocessing=None, alpha=g, mu=1e-2, max_iter=300).fit(X, triplets=t).rank_
         for g in (1e-3, 10.0)]
    assert r[1] <= r[0] and r[1] >= 1


def test_duality_gap_is_nonnegative_and_shrinks():
    X, t = _data(seed=8, d=4)
    m = SML(preprocessing=None, alpha=0.1, mu=1e-2, max_iter=300, tol=None).fit(X, triplets=t)
    g = np.array(m.history_["gap"])
    assert np.all(g >= -1e-8)
    assert g[-1] < 0.2 * g[0]
    gm = np.array(m.history_["smoothed_gap"])
    assert np.all(gm >= -1e-8) and gm[-1] < 0.2 * gm[0]


# (short budgets: convergence is not what these tests check)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_knn_sampling_and_label_fit():
    X, t = _data(seed=9)
    y = np.arange(X.shape[0]) % 3
    m = SML(preprocessing=None, sampling="knn", n_triplets=50, max_iter=20, random_state=0).fit(X, y)
    assert m.rank_ >= 1


@pytest.mark.parametrize("params,err,msg", [
    ({"alpha": 0}, ValueError, "parameter alpha=0 must be a real number > 0"),
    ({"mu": -1.0}, ValueError, "parameter mu=-1.0 must be a real number > 0"),
    ({"solver": "newton"}, ValueError, "parameter solver='newton' must be one of"),
    ({"sampling": "all"}, ValueError, "parameter sampling='all'"),
    ({"line_search": 1}, TypeError, "parameter line_search=1 must be True or False"),
    ({"max_iter": 2.0}, TypeError, "parameter max_iter=2.0 must be an integer"),
])
def test_bad_parameters(params, err, msg):
    X, t = _data()
    with pytest.raises(err, match="SML: " + msg):
        SML(preprocessing=None, **params).fit(X, triplets=t)


@pytest.mark.parametrize("args,msg", [
    ((np.array([np.nan, 1.0]), 1.0, 1.0, 1.0), "eigvals must be a 1-d array of finite eigenvalues"),
    ((np.array([1.0, 2.0]), -1.0, 1.0, 1.0), "alpha=-1.0 must be finite and > 0"),
    ((np.array([1.0, 2.0]), 1.0, 0.0, 1.0), "mu=0.0 must be finite and > 0"),
    ((np.array([1.0, 2.0]), 1.0, 1.0, -1.0), "radius=-1.0 must be finite and > 0"),
])
def test_lemma3_rejects_bad_input(args, msg):
    with pytest.raises(ValueError, match="solve_lemma3: " + msg):
        solve_lemma3(*args)


def test_reproduction_cv_ties_go_to_the_stronger_regularization():
    from tripletml.reproduce.sml_uci import cv_argmin
    err = np.array([[0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])   # rows: reg grid ascending
    assert cv_argmin(err) == (1, 0)
    err = np.array([[0.5, 0.2], [0.3, 0.1], [0.2, 0.4]])    # a unique minimum wins
    assert cv_argmin(err) == (1, 1)
    assert cv_argmin(np.array([[0.3, 0.2], [0.4, 0.2]])) == (1, 1)
    assert cv_argmin(np.array([[0.2, 0.2], [0.4, 0.3]])) == (0, 0)   # then the smaller k


# ------------------------------------- hardening: every loop ends, cleanly
_HANG = """
import numpy as np
from sklearn.datasets import load_iris
from tripletml import SML
import tripletml.core.preprocessing as prep
prep.feature_unit = lambda X, mean=None: 1.0     # the raw huge rows (see raw_rows)
X, y = load_iris(return_X_y=True)
try:
    SML(preprocessing=None, random_state=0).fit(X * 1e76, y)
except FloatingPointError as e:
    print("FloatingPointError:", e)
"""


def test_huge_features_do_not_hang_the_line_search():
    """X * 1e76 made phi NaN and the `while True` line search never ended
    (run in a subprocess with a timeout so a regression cannot hang the suite)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-c", _HANG], capture_output=True, text=True,
                           timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("SML.fit(X * 1e76) did not return within 120 s")
    assert r.returncode == 0, r.stderr
    assert "FloatingPointError: SML: training diverged" in r.stdout
    assert "scale the features down" in r.stdout


@pytest.mark.parametrize("scale", [1e77, 1e100])
def test_overflowing_features_stop_with_advice(scale):
    X, t = _data()
    with pytest.raises(FloatingPointError, match=r"SML: training diverged .*not finite.*scale "
                                                 r"the features down"):
        SML(preprocessing=None).fit(X * scale, triplets=t)
    with pytest.raises(FloatingPointError, match="SML: training diverged"):
        SML(preprocessing=None, solver="subgradient").fit(X * scale, triplets=t)


def test_knn_sampling_refuses_features_whose_squares_overflow():
    X, t = _data()
    y = np.arange(X.shape[0]) % 3
    with pytest.raises(FloatingPointError, match="SML: the features are too large for k-NN "
                                                 "sampling"):
        SML(preprocessing=None, sampling="knn").fit(X * 1e155, y)
    with pytest.raises(FloatingPointError, match="SML: the features are too large"):
        SML(preprocessing=None, sampling="knn").fit(sp.csr_matrix(X * 1e160), y)


def test_huge_alpha_gives_the_zero_metric():
    """alpha = 1e300 (radius sqrt(T / alpha) ~ 1e-149) raised an IndexError
    in solve_lemma3; M is now feasible (tr M <= radius), i.e. zero."""
    X, t = _data()
    m = SML(preprocessing=None, alpha=1e300).fit(X, triplets=t)
    assert np.trace(m.M_) <= np.sqrt(len(t) / 1e300) and np.linalg.eigvalsh(m.M_).min() >= 0
    assert m.rank_ == 0 and m.transform(X).shape == (X.shape[0], 0)
    assert np.isclose(m.objective(X, t), _f_loop(X, t, m.M_, 1e300), rtol=1e-12)


def test_line_search_stops_at_the_papers_lipschitz_constant():
    """A descent test that never holds cannot loop: the estimate stops at the
    paper's L; a NaN phi stops training."""
    from tripletml.algorithms.sml.kernels import SmoothSolver
    X, t = _data()
    prob = SMLProblem(X, t, 0.1)
    solver = SmoothSolver(prob, mu=0.5)
    real_phi = prob.phi
    # the line search evaluates phi_mu at its trial points z, never at the
    # solver's current u (step 2 does)
    prob.phi = lambda u, mu=0.0, eig=None: (
        (1e300, None) if u is not solver.u and mu > 0 else real_phi(u, mu, eig))
    f, gap = solver.iterate()
    assert solver.L == solver.lipschitz and np.isfinite(f)
    solver = SmoothSolver(prob, mu=0.5)
    prob.phi = lambda u, mu=0.0, eig=None: (
        (np.nan, None) if u is not solver.u and mu > 0 else real_phi(u, mu, eig))
    with pytest.raises(FloatingPointError, match="SML: training diverged .*line search"):
        solver.iterate()


def test_a_blow_up_of_the_subgradient_method_stops_with_advice():
    X, t = _data()
    with pytest.raises(FloatingPointError, match=r"SML: training diverged \(loss .* more than "
                                                 r"1000 times .*\); lower eta0"):
        SML(preprocessing=None, solver="subgradient", eta0=1e3, max_iter=50).fit(X, triplets=t)


# ---------------------------------------------------------------- stopping
def test_tol_stops_at_the_first_small_smoothed_gap():
    """The smooth solver stops at the first iteration whose gap of the
    smoothed problem (12) per triplet, ``gap_mu / T`` (T = the objective at
    M = 0), is at most tol; the unsmoothed gap is only recorded."""
    X, t = _data(seed=10)
    m = SML(preprocessing=None, alpha=0.1, mu=1e-2, tol=1e-4, max_iter=4000).fit(X, triplets=t)
    h = m.history_
    fm, gm = np.array(h["smoothed_objective"]), np.array(h["smoothed_gap"])
    crit = gm / len(t)
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(fm) < 4000
    assert crit[-1] <= 1e-4 and np.all(crit[:-1] > 1e-4)
    # the smoothed objective (the primal of eq. 12) at the final iterate
    assert fm[-1] == pytest.approx(h["objective"][-1] + 1e-2 * np.sum(m.M_ * m.M_), rel=1e-10)


def test_subgradient_tol_is_the_relative_objective_change():
    X, t = _data(seed=10)
    m = SML(preprocessing=None, alpha=0.1, solver="subgradient", eta0=1e-2, tol=1e-4,
            max_iter=3000).fit(X, triplets=t)
    f = np.array(m.history_["objective"])
    crit = np.r_[np.inf, np.abs(np.diff(f)) / np.abs(f[1:])]
    assert m.stop_reason_ == "tol" and crit[-1] <= 1e-4 and np.all(crit[:-1] > 1e-4)
    assert all(g is None for g in m.history_["smoothed_gap"])


@pytest.mark.parametrize("seed, mu", [(11, 1e-2), (12, 1.0), (13, 10.0)])
def test_smoothed_gap_is_a_certificate(seed, mu):
    """``gap_mu = f(M) + mu ||M||_F^2 + phi_mu(z)`` is >= 0 (up to rounding)
    and bounds the true suboptimality of the smoothed objective: at every
    iteration it is at least ``f_mu(M^(t)) - f_ref``, ``f_ref`` the smallest
    smoothed objective of a long reference run (>= min f_mu)."""
    from tripletml.algorithms.sml.kernels import SmoothSolver
    X, t = _data(seed=seed)
    prob = SMLProblem(X, t, 0.1)
    # The solver is deterministic, so the 300 checked iterations are the first
    # 300 of the reference run itself: recorded as it goes, checked against
    # the run's best afterwards.  The run goes on until its own gap certifies
    # that best within 1e-4 of the smoothed optimum (67 to 1,877 iterations
    # here; at most 6,000), not for a fixed 6,000.
    ref = SmoothSolver(prob, mu=mu)
    best = np.inf
    checked = []
    for i in range(6000):
        f, gap = ref.iterate()
        best = min(best, ref.f_mu)
        if i < 300:
            assert ref.f_mu == pytest.approx(f + mu * np.sum(ref.M * ref.M), rel=1e-12)
            checked.append((f, gap, ref.f_mu, ref.gap_mu))
        elif ref.gap_mu <= 1e-4 * ref.f_mu:
            break
    assert ref.gap_mu <= 1e-4 * ref.f_mu           # the reference is (nearly) optimal
    assert len(checked) == 300
    for f, gap, f_mu, gap_mu in checked:
        assert gap_mu >= -1e-9 * f_mu
        assert gap_mu >= f_mu - best - 1e-9 * f_mu
        assert gap >= -1e-9 * f                       # the unsmoothed gap, recorded


def test_convergence_warning_and_fixed_budget():
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    X, t = _data()
    for solver in ("smooth", "subgradient"):
        with pytest.warns(ConvergenceWarning, match=r"SML: stopped at max_iter=3 .*tol=1e-12"):
            m = SML(preprocessing=None, solver=solver, tol=1e-12, max_iter=3).fit(X, triplets=t)
        assert (m.stop_reason_, m.n_iter_) == ("max_iter", 3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m = SML(preprocessing=None, solver=solver, tol=None, max_iter=3).fit(X, triplets=t)
        assert (m.stop_reason_, m.n_iter_) == ("max_iter", 3)


@pytest.mark.parametrize("params,err,msg", [
    ({"verbose": -1}, ValueError, "parameter verbose=-1 must be an integer >= 0"),
    ({"verbose": "yes"}, TypeError, "parameter verbose='yes' must be an integer"),
    ({"tol": -1.0}, ValueError, "parameter tol=-1.0 must be a real number >= 0 or None"),
])
def test_more_bad_parameters(params, err, msg):
    X, t = _data()
    with pytest.raises(err, match="SML: " + msg):
        SML(preprocessing=None, **params).fit(X, triplets=t)


def test_every_fitted_array_is_declared():
    X, t = _data()
    m = SML(preprocessing=None, max_iter=5, tol=None).fit(X, triplets=t)
    arrays = {k for k, v in vars(m).items() if k.endswith("_") and isinstance(v, np.ndarray)}
    from tripletml.core.preprocessed import PREPROCESSING_ARRAYS
    from tripletml.core.tuples import TUPLE_ARRAYS  # classes_: fitted on pairs only
    assert arrays == set(SMLClass._fitted_arrays) - set(PREPROCESSING_ARRAYS) - set(TUPLE_ARRAYS) - {"validation_scores_"} == {"M_", "components_"}
    assert SMLClass._fitted_arrays["M_"].shape == ("d", "d")
    assert SMLClass._fitted_arrays["components_"].shape == ("rank_", "d")


def test_reproduction_refuses_unknown_data_sets_before_writing(tmp_path):
    from tripletml.reproduce import sml_uci
    with pytest.raises(ValueError, match=r"reproduction 'sml-uci': unknown data set\(s\) 'foo' "
                                         r"in --only; choose from wine"):
        sml_uci.run(tmp_path, quick=True, only=("foo",))
    assert not any(tmp_path.iterdir())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), d=st.integers(2, 6), alpha=st.floats(1e-3, 10.0),
       solver=st.sampled_from(["smooth", "subgradient"]), mu=st.floats(1e-2, 10.0))
def test_M_is_psd_on_random_problems(seed, d, alpha, solver, mu):
    X, t = _data(seed=seed % 1000, n=15, d=d, m=25)
    m = SML(preprocessing=None, alpha=alpha, mu=mu, solver=solver, eta0=1e-2, max_iter=20, tol=None).fit(
        X, triplets=t)
    scale = max(1.0, float(np.abs(m.M_).max()))
    assert np.linalg.eigvalsh(m.M_).min() >= -1e-10 * scale
    if solver == "smooth":                  # an average of points of Q2
        assert np.trace(m.M_) <= np.sqrt(len(t) / alpha) * (1 + 1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_A_reuses_its_pattern_and_matches_outer_products_on_every_call(sparse):
    """``A u`` (C's pattern assembled once, values per call) equals the sum
    of ``u_tau (x_kj x_kj^T - x_ij x_ij^T)`` for several u in a row, with
    repeated rows, degenerate triplets (query = positive, positive =
    negative) and zero weights."""
    X, t = _data(seed=21, sparse=sparse)
    t = t.copy()
    t[:3, 1] = t[:3, 0]
    t[3:5, 2] = t[3:5, 1]
    t[5:8] = t[8:11]                         # repeated triplets
    prob = SMLProblem(X, t, 0.1)
    Xd = X.toarray() if sparse else X
    rng = np.random.default_rng(3)
    for u in (rng.random(len(t)), np.zeros(len(t)), (rng.random(len(t)) > 0.5) * 1.0,
              rng.random(len(t))):
        ref = np.zeros((X.shape[1], X.shape[1]))
        for (q, p, n), w in zip(t, u):
            a, b = Xd[p] - Xd[q], Xd[n] - Xd[q]
            ref += w * (np.outer(b, b) - np.outer(a, a))
        np.testing.assert_allclose(prob.A(u), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("ratio", [0.0, 1e9])          # direct form / through used rows
def test_margins_equal_a_plain_loop_on_both_paths(sparse, ratio, monkeypatch):
    """``<X_tau, M>`` by either form equals the loop over triplets, also for a
    non-symmetric M (the quadratic form only sees its symmetric part) and
    degenerate triplets."""
    import tripletml.algorithms.sml.kernels as sml_solver
    monkeypatch.setattr(sml_solver, "MARGIN_ROWS_RATIO", ratio)
    X, t = _data(seed=22, sparse=sparse)
    t = t.copy()
    t[:2, 1] = t[:2, 0]
    t[2:4, 2] = t[2:4, 1]
    prob = SMLProblem(X, t, 0.1)
    assert (prob._XU is None) == (ratio == 0.0)
    Xd = X.toarray() if sparse else X
    M = np.random.default_rng(4).normal(size=(X.shape[1], X.shape[1]))
    ref = [(Xd[n] - Xd[q]) @ M @ (Xd[n] - Xd[q]) - (Xd[p] - Xd[q]) @ M @ (Xd[p] - Xd[q])
           for q, p, n in t]
    np.testing.assert_allclose(prob.margins(M), ref, rtol=1e-12, atol=1e-12)
    assert np.isclose(prob.objective(M), _f_loop(X, t, M, 0.1), rtol=1e-12)


def test_smooth_solver_margins_of_the_averaged_iterate_are_exact():
    """The margins of ``M^(t)`` kept by linearity equal a fresh evaluation,
    and the recorded objective is eq. (4) at M^(t), after many iterations."""
    from tripletml.algorithms.sml.kernels import SmoothSolver
    X, t = _data(seed=23)
    prob = SMLProblem(X, t, 0.05)
    solver = SmoothSolver(prob, mu=0.5)
    for _ in range(300):
        f, _ = solver.iterate()
    np.testing.assert_allclose(solver.margins_M, prob.margins(solver.M), rtol=1e-9, atol=1e-11)
    assert f == pytest.approx(_f_loop(X, t, solver.M, 0.05), rel=1e-10)


def test_partitioned_rounds_run_on_one_blas_thread_for_small_work(monkeypatch):
    """Issue 40: the partitioned fit limits the threads with the in-memory
    rule on the collection's rows (tripletml.distributed.partitioned): SML's
    rounds' products run on one BLAS thread, as the
    in-memory fit's do (OpenBLAS's threads made a 600-triplet digits fit 8
    times as costly on a busy 2-core machine), and the threads are restored
    afterwards.  Trivial where the process already has one thread."""
    from threadpoolctl import threadpool_info

    from tripletml.algorithms.sml import distributed as dist
    from tripletml.distributed.sharded import ShardedCollection

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    seen = []
    orig = dist.PartitionedSMLProblem.A_sum

    def A_sum(self, u):
        seen.append(blas_threads())
        return orig(self, u)

    monkeypatch.setattr(dist.PartitionedSMLProblem, "A_sum", A_sum)
    X, _ = _data(seed=4, n=40)
    coll = ShardedCollection.from_arrays(X, np.arange(40) % 3, n_partitions=2)
    m = SML(n_triplets=60, max_iter=3, tol=None, random_state=0).fit(coll)
    assert m.n_iter_ == 3 and seen
    assert all(t == [1] * len(t) for t in seen), seen
    assert blas_threads() == before
