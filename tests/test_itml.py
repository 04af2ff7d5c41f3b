"""ITML: the compiled projections against a plain NumPy loop of the
update, the contracts of a Bregman projection, and the estimator."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from tripletml import ITML as ITMLClass, Euclidean


def ITML(*args, **kwargs):
    """ITML with the paper's plain fit on explicit triplets: these tests
    check Algorithm 1 (early stopping on answers: tests/test_early_stopping.py)."""
    kwargs.setdefault("early_stopping", False)
    return ITMLClass(*args, **kwargs)
from tripletml.metrics import evaluate_retrieval
from tripletml.algorithms.itml.kernels import ITMLSolver, itml_bounds, triplet_pairs
from tripletml.triplets import random_class_triplets

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


def _reference(X, triplets, bounds, gamma, sweeps):
    """Algorithm 1 with the released code's projection, written out."""
    d = X.shape[1]
    A = np.eye(d)
    cons = []
    for q, p, n in triplets:
        cons += [(q, p, 1.0), (q, n, -1.0)]
    lam = np.zeros(len(cons))
    xi = np.array([bounds[0] if s > 0 else bounds[1] for _, _, s in cons])
    g = 1.0 if np.isinf(gamma) else gamma / (gamma + 1.0)
    convs = []
    for _ in range(sweeps):
        old = lam.copy()
        for c, (i, j, delta) in enumerate(cons):
            v = X[i] - X[j]
            p = v @ A @ v
            if p <= 0:
                continue
            alpha = min(lam[c], delta * g * (1.0 / p - 1.0 / xi[c]))
            beta = delta * alpha / (1.0 - delta * alpha * p)
            xi[c] = gamma * xi[c] / (gamma + delta * alpha * xi[c]) if np.isfinite(gamma) \
                else xi[c]
            lam[c] -= alpha
            A = A + beta * np.outer(A @ v, A @ v)
        total = np.abs(lam).sum() + np.abs(old).sum()      # l1 / l1 (issue 27)
        convs.append(0.0 if total == 0 else np.abs(lam - old).sum() / total)
    return A, lam, xi, np.array(convs)


def _problem(seed=0, n=30, d=5, m=40):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, d)
    y = rng.integers(0, 3, n)
    T = random_class_triplets(y, m, random_state=seed)
    return X, y, T


@pytest.mark.parametrize("gamma", [0.5, 1.0, 10.0, np.inf])
@pytest.mark.parametrize("seed", [0, 1])
def test_solver_matches_reference_loop(gamma, seed):
    X, _, T = _problem(seed)
    rows = np.unique(T)
    b = itml_bounds(X[rows], np.arange(len(rows)), np.random.default_rng(0))
    s = ITMLSolver(X, T, b, gamma)
    conv = s.run_sweeps(7, None)
    A, lam, xi, ref_conv = _reference(X, T, b, gamma, 7)
    np.testing.assert_allclose(s.A, A, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.dual, lam, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.xi, xi, rtol=1e-9)
    np.testing.assert_allclose(conv, ref_conv, rtol=1e-9, atol=1e-14)
    assert s.sweeps == 7


def test_triplet_pairs_order():
    pairs, sim = triplet_pairs(np.array([[0, 1, 2], [3, 4, 5]]))
    np.testing.assert_array_equal(pairs, [[0, 1], [0, 2], [3, 4], [3, 5]])
    np.testing.assert_array_equal(sim, [True, False, True, False])


def _one_violated(kind):
    """Triplet (0, 1, 2) on which only the ``kind`` constraint is violated
    (the other one holds with a zero dual variable, so it leaves A alone)."""
    if kind == "similar":       # d(0, 1) = 10 > u = 2;  d(0, 2) = 25 > l = 4
        X = np.array([[0.0, 0.0], [3.0, 1.0], [0.0, 5.0]])
    else:                       # d(0, 1) = 1 < u = 2;   d(0, 2) = 0.05 < l = 4
        X = np.array([[0.0, 0.0], [1.0, 0.0], [0.2, 0.1]])
    return X, (2.0, 4.0), 0 if kind == "similar" else 1


@pytest.mark.parametrize("kind", ["similar", "dissimilar"])
def test_hard_projection_lands_on_the_bound(kind):
    """gamma = inf: one projection onto a violated constraint puts the pair
    exactly on its bound, by a rank-one change along A v."""
    X, b, c = _one_violated(kind)
    s = ITMLSolver(X, np.array([[0, 1, 2]]), b, np.inf)
    s.run_sweeps(1, None)
    assert s.distances()[c] == pytest.approx(b[c], rel=1e-12)
    assert s.dual[c] > 0 and s.dual[1 - c] == 0
    v = X[0] - X[1 + c]
    dA = s.A - np.eye(2)
    assert np.linalg.matrix_rank(dA, tol=1e-12) == 1
    np.testing.assert_allclose(dA @ np.cross(np.r_[v, 0], [0, 0, 1])[:2], 0, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(s.A) > 0)


@pytest.mark.parametrize("kind", ["similar", "dissimilar"])
def test_slack_projection_meets_its_target(kind):
    """Finite gamma: after the projection the distance equals the updated
    slack target xi, which lies between the bound and the old distance."""
    X, b, c = _one_violated(kind)
    before = ITMLSolver(X, np.array([[0, 1, 2]]), b, 1.0).distances()[c]
    s = ITMLSolver(X, np.array([[0, 1, 2]]), b, 1.0)
    s.run_sweeps(1, None)
    assert s.distances()[c] == pytest.approx(s.xi[c], rel=1e-12)
    lo, hi = sorted((b[c], before))
    assert lo < s.xi[c] < hi


def test_satisfied_constraints_leave_A_alone():
    X = np.array([[0.0, 0.0], [0.5, 0.0], [5.0, 0.0]])
    s = ITMLSolver(X, np.array([[0, 1, 2]]), (1.0, 4.0), 1.0)
    conv = s.run_sweeps(3, None)
    np.testing.assert_array_equal(s.A, np.eye(2))
    np.testing.assert_array_equal(s.dual, 0.0)
    np.testing.assert_array_equal(conv, 0.0)


def test_positive_definite_and_dual_feasible_over_many_sweeps():
    X, _, T = _problem(3, n=60, d=6, m=200)
    rows = np.unique(T)
    b = itml_bounds(X[rows], np.arange(len(rows)), np.random.default_rng(0))
    s = ITMLSolver(X, T, b, 1.0)
    for _ in range(10):
        s.run_sweeps(20, None)
        assert np.all(s.dual >= 0)
        assert np.linalg.eigvalsh(0.5 * (s.A + s.A.T)).min() > 0
        np.testing.assert_allclose(s.A, s.A.T, atol=1e-10 * np.abs(s.A).max())


def test_identical_rows_are_left_out():
    X = np.array([[0.0, 1.0], [0.0, 1.0], [3.0, 0.0]])
    s = ITMLSolver(X, np.array([[0, 1, 2]]), (1.0, 4.0), 1.0)
    np.testing.assert_array_equal(s.active, [False, True])
    s.run_sweeps(2, None)
    assert s.skipped.sum() == 0 and s.dual[0] == 0
    assert np.isfinite(s.A).all()


def test_near_duplicate_dissimilar_pair_keeps_M_positive_definite():
    """Rows 1e-12 apart in different classes would need a step of order
    1e24 (with gamma = inf: M indefinite by rounding); they are left out."""
    X = np.array([[0, 0], [1e-12, 1e-12], [1, .3], [.2, 1], [2, -1]])
    T = np.array([[0, 2, 1], [2, 3, 4], [3, 0, 4], [4, 2, 0]])
    est = ITML(gamma=np.inf, bounds=(1.0, 20.0), preprocessing=None).fit(X, triplets=T)
    assert np.linalg.eigvalsh(est.M_).min() > 0


def test_every_constraint_degenerate_is_refused():
    # distinct indices whose rows are identical points: rows 0-2 and 3-5 repeat
    X = np.repeat(np.array([[0.0, 1.0], [2.0, 3.0]]), 3, axis=0)
    with pytest.raises(ValueError, match="ITML: every constraint pairs identical points"):
        ITML(bounds=(1.0, 4.0)).fit(X, triplets=[[0, 1, 2], [3, 4, 5]])


def test_duplicate_rows_are_not_pairs_of_the_default_bounds():
    rng = np.random.default_rng(9)
    base = rng.standard_normal((10, 3))
    X = np.repeat(base, 6, axis=0)
    y = np.repeat(np.arange(10) % 3, 6)
    est = ITML(preprocessing=None, random_state=0).fit(X, y)
    rows = np.unique(random_class_triplets(y, 180, random_state=np.random.default_rng(0)))
    Z = np.unique(X[rows], axis=0)                  # each distinct row once
    D = ((Z[:, None] - Z[None]) ** 2).sum(-1)[np.triu_indices(len(Z), 1)]
    np.testing.assert_allclose(est.bounds_, np.percentile(D, [5, 95]), rtol=1e-10)


@pytest.mark.parametrize("gamma", [0.3, 10.0])
def test_estimator_uses_gamma(gamma):
    X, _, T = _problem(10)
    A, *_ = _reference(X, T, (1.0, 9.0), gamma, 6)
    est = ITML(gamma=gamma, bounds=(1.0, 9.0), max_iter=6, tol=None,
               preprocessing=None).fit(X, triplets=T)
    np.testing.assert_allclose(est.M_, 0.5 * (A + A.T), rtol=1e-9, atol=1e-12)


def test_stops_at_the_first_sweep_within_tol():
    X, _, T = _problem(11, m=60)
    *_, conv = _reference(X, T, (1.0, 9.0), 1.0, 400)
    first = int(np.argmax(conv <= 1e-3)) + 1           # the default tol
    assert conv[first - 1] <= 1e-3 and first < 400
    est = ITML(bounds=(1.0, 9.0), preprocessing=None).fit(X, triplets=T)
    assert est.n_iter_ == first and est.stop_reason_ == "tol"


def test_tol_zero_stops_when_nothing_moves():
    X = np.array([[0.0, 0.0], [0.5, 0.0], [5.0, 0.0]])
    est = ITML(bounds=(1.0, 4.0), tol=0.0, preprocessing=None).fit(X, triplets=[[0, 1, 2]])
    assert est.n_iter_ == 1 and est.stop_reason_ == "tol"


@pytest.mark.parametrize("kw, exc, match", [
    (dict(triplets=np.array([[0.0, 1.0, 2.0]])), TypeError, "integer indices"),
    (dict(triplets=np.array([[0, 1, 9]])), ValueError, "out of range"),
    (dict(triplets=np.array([[0, 1, -1]])), ValueError, "out of range"),
    (dict(triplets=np.zeros((0, 3), int)), ValueError, "empty"),
    (dict(triplets=np.array([[0, 1]])), ValueError, "shape"),
    (dict(bounds=(0.0, 1.0)), ValueError, "0 < u <= l"),
    (dict(bounds=(2.0, 1.0)), ValueError, "0 < u <= l"),
    (dict(bounds=(1.0, np.inf)), ValueError, "0 < u <= l"),
    (dict(gamma=0.0), ValueError, "gamma"),
    (dict(gamma=np.nan), ValueError, "gamma"),
    (dict(A0=np.eye(3)), ValueError, "A0"),
    (dict(A0=-np.eye(2)), ValueError, "A0"),
    (dict(A0=np.array([[1.0, 0.5], [0.0, 1.0]])), ValueError, "A0"),
])
def test_solver_refuses_bad_input(kw, exc, match):
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    args = dict(triplets=np.array([[0, 1, 2]]), bounds=(1.0, 4.0), gamma=1.0)
    args.update(kw)
    with pytest.raises(exc, match=f"ITMLSolver: .*{match}"):
        ITMLSolver(X, args.pop("triplets"), args.pop("bounds"), args.pop("gamma"), **args)


def test_solver_run_refuses_bad_arguments():
    s = ITMLSolver(np.eye(3), np.array([[0, 1, 2]]), (1.0, 4.0), 1.0)
    for n in (-1, 1.5, True):
        with pytest.raises(ValueError, match="n_sweeps"):
            s.run_sweeps(n, None)
    for tol in (-1.0, np.nan):
        with pytest.raises(ValueError, match="tol"):
            s.run_sweeps(1, tol)


def test_default_bounds_are_distance_percentiles():
    X, y, _ = _problem(4, n=40)
    est = ITML(preprocessing=None, max_iter=2, tol=None, random_state=0).fit(X, y)
    rows = np.unique(random_class_triplets(y, 20 * 9, random_state=np.random.default_rng(0)))
    Z = X[rows]
    D = ((Z[:, None] - Z[None]) ** 2).sum(-1)[np.triu_indices(len(rows), 1)]
    np.testing.assert_allclose(est.bounds_, np.percentile(D, [5, 95]), rtol=1e-10)


def test_estimator_equals_solver_dense_and_sparse():
    X, _, T = _problem(5)
    A, *_ = _reference(X, T, (1.0, 9.0), 1.0, 5)
    dense = ITML(bounds=(1.0, 9.0), max_iter=5, tol=None, preprocessing=None).fit(X, triplets=T)
    csr = ITML(bounds=(1.0, 9.0), max_iter=5, tol=None, preprocessing=None).fit(
        sp.csr_matrix(X), triplets=T)
    np.testing.assert_allclose(dense.M_, 0.5 * (A + A.T), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(csr.M_, dense.M_, rtol=1e-12, atol=1e-14)
    L = dense.components_
    np.testing.assert_allclose(L.T @ L, dense.M_, rtol=1e-8, atol=1e-10)
    assert dense.n_iter_ == 5 and dense.stop_reason_ == "max_iter"
    assert dense.dual_.shape == (2 * len(T),) and np.all(dense.dual_ >= 0)


def test_stops_at_tol_or_warns_at_max_iter():
    X, y, _ = _problem(6, n=60)
    est = ITML(random_state=0).fit(X, y)
    assert est.stop_reason_ == "tol" and est.n_iter_ < 1000
    assert est.history_["convergence"][-1] <= 1e-3
    with pytest.warns(ConvergenceWarning, match="ITML: stopped at max_iter=2"):
        ITML(max_iter=2, tol=1e-12, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ITML(max_iter=2, tol=None, random_state=0).fit(X, y)


def test_overflow_stops_with_advice():
    X = np.array([[1e160, 0.0], [0.0, 1e160], [2e160, 1.0]])
    with pytest.raises(FloatingPointError, match="ITML: training diverged"):
        ITML(preprocessing=None, bounds=(1.0, 2.0)).fit(X, triplets=[[0, 1, 2]])
    with pytest.raises(FloatingPointError, match="ITML: training diverged"):
        ITML(preprocessing=None).fit(X, triplets=[[0, 1, 2]])


def test_identical_rows_give_no_default_bounds():
    X = np.zeros((6, 2))
    with pytest.raises(ValueError, match=r"ITML: the rows the triplets use are all identical"):
        ITML().fit(X, triplets=[[0, 1, 5], [2, 3, 5], [0, 4, 5]])


@pytest.mark.parametrize("params, exc, match", [
    (dict(gamma=0), ValueError, "gamma=0 must be a real number > 0"),
    (dict(gamma=-1.0), ValueError, "gamma"),
    (dict(gamma=np.nan), ValueError, "gamma"),
    (dict(gamma="1"), TypeError, "gamma"),
    (dict(gamma=True), TypeError, "gamma"),
    (dict(bounds=(1.0,)), ValueError, "bounds"),
    (dict(bounds="ab"), TypeError, "bounds"),
    (dict(bounds={1.0, 4.0}), TypeError, "bounds"),
    (dict(bounds=np.ones((2, 1))), TypeError, "bounds"),
    (dict(bounds=(0.0, 1.0)), ValueError, r"bounds\[0\]"),
    (dict(bounds=(2.0, 1.0)), ValueError, "must not exceed"),
    (dict(bounds=(1.0, np.inf)), ValueError, r"bounds\[1\]"),
    (dict(max_iter=0), ValueError, "max_iter"),
    (dict(tol=-1e-3), ValueError, "tol"),
    (dict(n_triplets=0), ValueError, "n_triplets"),
])
def test_bad_parameters(params, exc, match):
    X, y, _ = _problem(7)
    with pytest.raises(exc, match=f"ITML: .*{match}"):
        ITML(**params).fit(X, y)


def test_numpy_scalars_and_inf_gamma_accepted():
    X, y, _ = _problem(8)
    est = ITML(gamma=np.float32(np.inf), max_iter=np.int64(5), n_triplets=np.int32(30),
               bounds=(np.float64(0.5), np.int64(20)), tol=None, random_state=0).fit(X, y)
    assert est.n_iter_ == 5


def test_iris_beats_euclidean_on_held_out_rows():
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split
    X, y = load_iris(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    learned = evaluate_retrieval(ITML(random_state=0).fit(Xtr, ytr), Xte, yte, k=())["map"]
    base = evaluate_retrieval(Euclidean().fit(Xtr), Xte, yte, k=())["map"]
    assert learned > base + 0.05


@pytest.mark.parametrize("how", ["indefinite", "breakdown"])
def test_lost_positive_definiteness_stops_with_advice(monkeypatch, how):
    """Rounding that breaks positive definiteness (an indefinite M after the
    sweeps, or an active pair with a non-positive distance during them)
    stops the fit with the learner's FloatingPointError."""
    import tripletml.algorithms.itml.estimator as mod
    run = ITMLSolver.run_sweeps

    def broken(self, n, tol):
        out = run(self, n, tol)
        if how == "indefinite":
            self.A[...] = np.diag(np.r_[-1.0, np.ones(len(self.A) - 1)])
        else:
            self.skipped[0] += 1
        return out

    monkeypatch.setattr(mod.ITMLSolver, "run_sweeps", broken)
    X, y, _ = _problem(12)
    est = ITML(random_state=0, max_iter=3, tol=None)
    with pytest.raises(FloatingPointError, match="ITML: training diverged .*positive definiteness"):
        est.fit(X, y)
    assert not hasattr(est, "n_features_in_")


@pytest.mark.parametrize("X, exc, match", [
    (np.array([[0.0, np.nan], [1.0, 0.0], [0.0, 2.0]]), ValueError, "NaN or infinity"),
    (np.array([[0.0, np.inf], [1.0, 0.0], [0.0, 2.0]]), ValueError, "NaN or infinity"),
    (np.zeros(3), ValueError, "2-D"),
])
def test_solver_refuses_bad_X(X, exc, match):
    with pytest.raises(exc, match=f"ITMLSolver: .*{match}"):
        ITMLSolver(X, np.array([[0, 1, 2]]), (1.0, 4.0), 1.0)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: triplet_pairs(np.array([[0.5, 1, 2]])), TypeError, "triplet_pairs: .*integer"),
    (lambda: triplet_pairs(np.array([[0, -1, 2]])), ValueError, "triplet_pairs: .*out of range"),
    (lambda: triplet_pairs(np.zeros((0, 3), int)), ValueError, "triplet_pairs: .*empty"),
    (lambda: itml_bounds(np.array([[np.nan, 0.0], [1.0, 1.0]]), np.array([0, 1]), 0),
     ValueError, "itml_bounds: .*NaN"),
    (lambda: itml_bounds(np.eye(3), np.array([0, 3]), 0), ValueError, "itml_bounds: .*rows"),
    (lambda: itml_bounds(np.eye(3), np.array([0.0, 1.0]), 0), TypeError, "itml_bounds: .*rows"),
    (lambda: itml_bounds(np.eye(3), np.array([], int), 0), TypeError, "itml_bounds: .*rows"),
    (lambda: itml_bounds(np.eye(3), np.array([0, 1]), 0, percentiles=(95, 5)), ValueError,
     "itml_bounds: .*percentiles"),
    (lambda: itml_bounds(np.eye(3), np.array([0, 1]), 0, max_rows=1), ValueError,
     "itml_bounds: .*max_rows"),
])
def test_public_helpers_refuse_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_overflowing_pair_is_overflow_not_breakdown():
    """A difference that overflows (finite rows near +-1.7e308) is reported
    as overflow (the learner's advice: scale the features), not as a loss of
    positive definiteness."""
    X = np.array([[1.7e308, 0.0], [-1.7e308, 0.0], [0.0, 1.0]])
    s = ITMLSolver(X, np.array([[0, 2, 1]]), (1.0, 4.0), 1.0)
    s.run_sweeps(1, None)
    assert s.skipped[1] >= 1 and s.skipped[0] == 0


def test_run_alias_is_removed():
    """ITMLSolver.run (0.2's deprecated name of run_sweeps) was removed in 0.3."""
    a = ITMLSolver(np.eye(3), np.array([[0, 1, 2]]), (1.0, 4.0), 1.0)
    assert not hasattr(a, "run") and callable(a.run_sweeps)
