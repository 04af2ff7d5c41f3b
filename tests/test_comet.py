"""Dense COMET (Algorithm 1) against dense references: finite-difference
gradients of eq. (2), PD-ness after every step, the Woodbury inverse and the
Cholesky root against numpy after many steps."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.algorithms.comet.estimator import comet_loss
from tripletml.algorithms.comet.kernels import COMETSolver
from tripletml.triplets import random_class_triplets
from tripletml.linalg.pd_updates import PD_COND_LIMIT

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


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
    for i in range(80):
        m.coordinate_step(int(rng.integers(0, 8)))
        # the guard's cond bound uses the Woodbury-updated W^-1, exact again
        # after every d steps (COMETSolver.step's protocol): without the
        # refactorisation its drift near the boundary let cond(W) pass 1e13
        # here (the smallest eigenvalue -1.4e-16 with one BLAS thread)
        if (i + 1) % X.shape[1] == 0:
            m.refactor()
        ev = np.linalg.eigvalsh(m.W)
        assert ev.min() > 0.5 * ev.max() / PD_COND_LIMIT


def test_near_singular_start_stays_pd():
    X, t = _problem(seed=3, d=6)
    Q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(6, 6)))
    m = _started(X, t, W=(Q * np.array([1, 1, 1, 1, 1, 1e-9])) @ Q.T, alpha=1e-2,
                 step_fraction=0.9, eta0=1e3)
    for k in range(6):
        for _ in range(5):
            m.coordinate_step(k)
            assert np.linalg.eigvalsh(m.W).min() > 0


def test_inverse_and_cholesky_track_w_over_many_steps():
    X, t = _problem(seed=4, d=7)
    m = _started(X, t, alpha=0.5, beta=0.1, eta0=10.0)
    rng = np.random.default_rng(2)
    for _ in range(400):
        m.coordinate_step(int(rng.integers(0, 7)))
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
    m = tm.COMET(preprocessing=None, n_triplets=5000, max_iter=5, tol=None, random_state=0).fit(X[:1000], y[:1000])
    obj = m.history_["objective"]
    assert obj[-1] < obj[0]
    assert np.linalg.eigvalsh(m.W_).min() > 0
    Z = m.transform(X[1000:1010])
    np.testing.assert_allclose(Z @ Z.T, m.similarity(X[1000:1010]), rtol=1e-8, atol=1e-10)
    assert m.score(X[1000:], y[1000:]) > tm.Euclidean().fit(X).score(X[1000:], y[1000:]) + 0.05


# ------------------------------------------------------------ sparse COMET
def test_group_prox_solves_eq_8():
    from scipy.optimize import minimize
    from tripletml.algorithms.comet.estimator import group_prox
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
    dense = tm.COMET(preprocessing=None, n_triplets=4000, max_iter=3, tol=None, random_state=0).fit(X, y)
    scores = {}
    for lam in (0.0, 100.0, 1e4):
        m = tm.SparseCOMET(preprocessing=None, group_alpha=lam, n_triplets=4000, max_iter=3, tol=None,
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


# ------------------------------------------------- PD guarantee (issue 13.7)
def _aggressive_problem(seed, scale):
    """Features 0 and 1 nearly equal: the loss pulls W towards the boundary."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 8)) * scale
    X[:, 1] = X[:, 0] + 1e-8 * scale * rng.normal(size=60)
    y = rng.integers(0, 3, 60)
    return X, random_class_triplets(y, 300, random_state=seed)


def _assert_pd(W):
    assert np.linalg.eigvalsh(W).min() > 0
    np.linalg.cholesky(W)            # raises LinAlgError when not PD in floating point


@pytest.mark.parametrize("cls", [tm.COMET, tm.SparseCOMET])
def test_pd_under_aggressive_valid_settings(cls):
    """The probe of issue 13 item 7: alpha 0 or 1e-3, beta 0, step_fraction
    0.99, eta0 1e3 or 1e6, a near-duplicate column; before the conditioning
    guard COMET failed 8 and SparseCOMET 4 of these 20 fits."""
    extra = {"group_alpha": 0.1} if cls is tm.SparseCOMET else {}
    for i in range(20):
        X, t = _aggressive_problem(i, (1.0, 10.0)[(i // 4) % 2])
        m = cls(alpha=(0.0, 1e-3)[i % 2], beta=0.0, step_fraction=0.99,
                eta0=(1e3, 1e6)[(i // 2) % 2], max_iter=10, tol=None, random_state=i, **extra)
        _assert_pd(m.fit(X, triplets=t).W_)
        np.testing.assert_allclose(m.components_.T @ m.components_, m.W_,
                                   atol=1e-9 * np.abs(m.W_).max())


def test_w_is_pd_for_every_accepted_setting():
    """Property: W positive definite (eigenvalues and Cholesky) for random
    accepted settings on random small problems, near-duplicate features and
    extreme scales included."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=25, deadline=None, derandomize=True)
    @hypothesis.given(
        seed=st.integers(0, 2**16), alpha=st.sampled_from([0.0, 1e-12, 1e-6, 1e-3, 1.0, 10.0]),
        beta=st.sampled_from([0.0, 1e-3, 1.0]), step_fraction=st.floats(0.01, 0.999),
        eta0=st.sampled_from([1e-3, 1.0, 1e3, 1e8]),
        loss=st.sampled_from(["hinge", "squared_hinge", "log"]),
        group_alpha=st.sampled_from([0.0, 0.1, 10.0]), duplicate=st.booleans(),
        scale=st.sampled_from([1e-3, 1.0, 1e2]), sparse=st.booleans())
    def check(seed, alpha, beta, step_fraction, eta0, loss, group_alpha, duplicate, scale,
              sparse):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(30, 6)) * scale
        if sparse:
            X[rng.random(X.shape) < 0.5] = 0.0
        if duplicate:
            X[:, 1] = X[:, 0] + 1e-9 * scale * rng.normal(size=30)
        t = random_class_triplets(rng.integers(0, 3, 30), 120, random_state=seed)
        Xin = sp.csr_matrix(X) if sparse else X
        common = dict(alpha=alpha, beta=beta, loss=loss, step_fraction=step_fraction,
                      eta0=eta0, max_iter=4, tol=None, random_state=seed)
        for m in (tm.COMET(preprocessing=None, **common), tm.SparseCOMET(preprocessing=None, group_alpha=group_alpha, **common)):
            _assert_pd(m.fit(Xin, triplets=t).W_)

    check()


# ---------------------------------------------------------- data and cache
def test_refit_on_other_data_of_the_same_shape_uses_its_columns():
    """The CSC copy of X lives in the solver of one fit: a second X of the
    same shape gets its own columns (a cache keyed on shape gave stale ones)."""
    rng = np.random.default_rng(0)
    X1 = sp.random(40, 6, density=0.5, random_state=1, format="csr")
    X2 = sp.random(40, 6, density=0.5, random_state=2, format="csr")
    t = random_class_triplets(rng.integers(0, 3, 40), 100, random_state=0)
    for cls in (tm.COMET, tm.SparseCOMET):
        m = cls(max_iter=1, tol=None, random_state=0).fit(X1, triplets=t)
        m.fit(X2, triplets=t)
        fresh = cls(max_iter=1, tol=None, random_state=0).fit(X2, triplets=t)
        np.testing.assert_array_equal(m.W_, fresh.W_)
        dense = cls(max_iter=1, tol=None, random_state=0).fit(X2.toarray(), triplets=t)
        np.testing.assert_allclose(m.W_, dense.W_, rtol=1e-9, atol=1e-12)
    s1, s2 = COMETSolver(X1, t), COMETSolver(X2, t)
    for k in range(6):
        np.testing.assert_array_equal(s1.column(k), X1.toarray()[:, k])
        np.testing.assert_array_equal(s2.column(k), X2.toarray()[:, k])


def test_history_loss_is_the_triplet_hinge_of_the_triplet_score():
    X, t = _problem(seed=6, d=5)
    from tripletml.losses import triplet_hinge_array
    for cls in (tm.COMET, tm.SparseCOMET):
        m = cls(max_iter=2, tol=None, random_state=0).fit(X, triplets=t)
        margins = m.triplet_score(X, t)          # S(q, p+) - S(q, p-) = 1 - lambda_t
        assert m.history_["loss"][-1] == pytest.approx(np.sum(triplet_hinge_array(margins)),
                                                       rel=1e-9)


# ----------------------------------------------------------------- stopping
@pytest.mark.parametrize("cls", [tm.COMET, tm.SparseCOMET])
def test_convergence_warning_and_stop_reason(cls):
    from sklearn.exceptions import ConvergenceWarning
    X, t = _problem(seed=7)
    with pytest.warns(ConvergenceWarning, match=f"{cls.__name__}.*max_iter=1.*tol=1e-12"):
        m = cls(max_iter=1, tol=1e-12, random_state=0).fit(X, triplets=t)
    assert (m.n_iter_, m.stop_reason_) == (1, "max_iter")
    assert len(m.history_["objective"]) == 1
    # a loose tol stops early, without a warning
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = cls(max_iter=50, tol=0.5, random_state=0).fit(X, triplets=t)
    assert m.stop_reason_ == "tol" and m.n_iter_ < 50
    assert len(m.history_["objective"]) == m.n_iter_
    # tol=None is a fixed budget: max_iter epochs, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = cls(max_iter=3, tol=None, random_state=0).fit(X, triplets=t)
    assert (m.n_iter_, m.stop_reason_) == (3, "max_iter")


def test_tol_is_the_relative_change_of_the_objective():
    X, t = _problem(seed=8)
    full = tm.SparseCOMET(preprocessing=None, max_iter=8, tol=None, random_state=0).fit(X, triplets=t)
    obj = np.array(full.history_["objective"])
    change = np.abs(np.diff(obj)) / np.maximum(np.abs(obj[:-1]), np.abs(obj[1:]))
    tol = float(np.sort(change)[len(change) // 2]) * 1.0001
    first = int(np.flatnonzero(change < tol)[0]) + 2     # epochs run when it stops
    m = tm.SparseCOMET(preprocessing=None, max_iter=8, tol=tol, random_state=0).fit(X, triplets=t)
    assert (m.n_iter_, m.stop_reason_) == (first, "tol")
    # the same path as the full run, cut where the criterion first fell below tol
    np.testing.assert_array_equal(m.history_["objective"], obj[:first])


@pytest.mark.parametrize("cls", [tm.COMET, tm.SparseCOMET])
def test_divergence_stops_with_advice(cls):
    X, t = _problem(seed=9)
    with pytest.raises(FloatingPointError, match=f"{cls.__name__}: training diverged.*scale "
                                                 "the features down"):
        cls(max_iter=2, tol=None, random_state=0, preprocessing=None).fit(X * 1e100,
                                                                          triplets=t)


@pytest.mark.parametrize("cls", [tm.COMET, tm.SparseCOMET])
def test_fitted_arrays_are_declared(cls):
    from tripletml.core.arrayspec import ArraySpec
    X, t = _problem(seed=10, d=5)
    from tripletml.core.preprocessed import PREPROCESSING_ARRAYS
    from tripletml.core.tuples import TUPLE_ARRAYS  # classes_: fitted on pairs only
    m = cls(max_iter=2, tol=None, group_alpha=0.0, random_state=0) if cls is tm.SparseCOMET \
        else cls(max_iter=2, tol=None, random_state=0)
    m.set_params(preprocessing=None)
    m.fit(X, triplets=t)
    arrays = {k for k, v in vars(m).items() if k.endswith("_") and isinstance(v, np.ndarray)}
    assert arrays == set(cls._fitted_arrays) - set(PREPROCESSING_ARRAYS) - set(TUPLE_ARRAYS)
    assert not hasattr(cls, "_square_attrs") or cls._square_attrs == ()
    for name, spec in cls._fitted_arrays.items():
        assert isinstance(spec, ArraySpec)
        if name in PREPROCESSING_ARRAYS or name in TUPLE_ARRAYS:
            continue
        arr = getattr(m, name)
        dims = {"d": 5}
        assert arr.ndim == len(spec.shape)
        for n, s in zip(arr.shape, spec.shape):
            assert s is None or n == dims.get(s, s)
        assert arr.dtype.kind == spec.dtype
        if spec.dtype == "i":
            assert ((arr >= spec.low) & (arr < dims[spec.high])).all()
        else:
            assert np.isfinite(arr).all()


def test_renamed_parameters_are_gone():
    for old in ("n_epochs", "step_size", "theta", "lam"):
        assert old not in tm.COMET(preprocessing=None).get_params()
        assert old not in tm.SparseCOMET(preprocessing=None).get_params()
    X, t = _problem()
    with pytest.raises(ValueError, match="SparseCOMET.*group_alpha"):
        tm.SparseCOMET(preprocessing=None, group_alpha=-1.0).fit(X, triplets=t)
    with pytest.raises(ValueError, match="COMET.*eta0"):
        tm.COMET(preprocessing=None, eta0=0.0).fit(X, triplets=t)
    with pytest.raises(ValueError, match="COMET.*tol"):
        tm.COMET(preprocessing=None, tol=-1.0).fit(X, triplets=t)


def test_sparse_group_step_survives_a_failed_downdate(monkeypatch):
    """A group update whose Cholesky downdate fails (R partly modified, as
    the kernel leaves it) is not applied: W, W^-1 and the linear terms stay,
    and R is again a root of W (refactored from it)."""
    import tripletml.algorithms.comet.kernels as K

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6))
    y = rng.integers(0, 3, 40)
    T = random_class_triplets(y, 300, random_state=np.random.default_rng(1))
    s = K.SparseCOMETSolver(X, T, group_alpha=0.0)
    s.start(np.random.default_rng(2))
    real = K.chol_update_downdate

    def failing(R, x, y_, wx, wy):
        R[0, 0] *= 3.0                                   # partly modified, then "fails"
        return False

    W0, Winv0, lam0 = s.W.copy(), s.W_inv.copy(), s.linear_terms.copy()
    monkeypatch.setattr(K, "chol_update_downdate", failing)
    s.coordinate_step(0)
    np.testing.assert_array_equal(s.W, W0)
    np.testing.assert_array_equal(s.W_inv, Winv0)
    np.testing.assert_array_equal(s.linear_terms, lam0)
    np.testing.assert_allclose(s.R.T @ s.R, s.W, atol=1e-12 * np.abs(s.W).max())
    assert not s.V[0].any()
    monkeypatch.setattr(K, "chol_update_downdate", real)
    s.coordinate_step(0)                                  # and the next step proceeds
    assert s.V[0].any()
    np.testing.assert_allclose(s.R.T @ s.R, s.W, atol=1e-10 * np.abs(s.W).max())


def test_an_epoch_stops_within_a_block_of_steps_past_the_deadline():
    """Under AutoSimilarity's deadline (engine.training_deadline) an epoch on
    wide rows stops after at most DEADLINE_EVERY coordinate steps, not d;
    without one it makes all d."""
    import time

    from tripletml.algorithms.comet.kernels import DEADLINE_EVERY
    from tripletml.engine import training_deadline
    X, t = _problem(seed=4, d=3 * DEADLINE_EVERY, n=60, m=200)
    for late, expect in ((True, DEADLINE_EVERY), (False, X.shape[1])):
        m = _started(X, t, alpha=1.0, beta=0.1)
        m.start(np.random.default_rng(0))
        with training_deadline(time.time() - 1.0 if late else None):
            m.step()
        assert m.n_steps == expect
