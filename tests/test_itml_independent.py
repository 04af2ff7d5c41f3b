"""Independent reference tests of :class:`tripletml.ITML` and
:mod:`tripletml.algorithms.itml.kernels`.

Davis, Kulis, Jain, Sra & Dhillon, "Information-theoretic metric learning",
ICML 2007 (Algorithm 1), with the projection of the authors' released MATLAB
code (Kulis et al., JMLR 2009).  The reference below is a plain NumPy loop
written from that specification, without looking at the library's
implementation:

* triplet t = (q, p+, p-) gives constraint 2t, the similar pair (q, p+), and
  constraint 2t+1, the dissimilar pair (q, p-);
* p = v^T A v with v = x_i - x_j; each constraint c has a dual variable
  lambda_c (starts at 0) and a slack target xi_c (starts at u for a similar
  pair, at l for a dissimilar pair); g = gamma / (gamma + 1) (1 if gamma is
  inf, and alpha / gamma = 0 then);
* one projection (skipped when p is not > 0):
  similar     alpha = min(lambda_c, g (1/p - 1/xi_c)), beta = alpha / (1 - alpha p),
              xi_c <- 1 / (1/xi_c + alpha/gamma)
  dissimilar  alpha = min(lambda_c, g (1/xi_c - 1/p)), beta = -alpha / (1 + alpha p),
              xi_c <- 1 / (1/xi_c - alpha/gamma)
  then lambda_c <- lambda_c - alpha, A <- A + beta (A v)(A v)^T;
* after each sweep over all constraints in order,
  conv = ||lambda - lambda_old||_1 / (||lambda||_2 + ||lambda_old||_2) (0 if
  the denominator is 0); stop when conv < tol;
* default bounds (u, l): 5th / 95th percentile (linear) of the squared
  Euclidean distances between the distinct pairs of the unique rows used by
  the triplets (preprocessed coordinates); A0 = I.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import tripletml
from tripletml.algorithms.itml.kernels import ITMLSolver, itml_bounds, triplet_pairs
from tripletml.triplets import random_class_triplets


def _itml(*args, **kwargs):
    """ITML with the paper's plain fit on explicit triplets: these tests
    check Algorithm 1 (early stopping on answers: tests/test_early_stopping.py)."""
    kwargs.setdefault("early_stopping", False)
    return tripletml.ITML(*args, **kwargs)

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")

RTOL = 1e-10


# ---------------------------------------------------------------- reference
def ref_pairs(T, order="triplet"):
    """(pairs, similar) in constraint order.  ``order="grouped"`` (all similar
    pairs first, then all dissimilar ones) is a deliberately wrong order, used
    only to show that the data tell the orders apart."""
    T = np.asarray(T)
    if order == "triplet":
        pairs = [pr for q, p, n in T for pr in ((q, p), (q, n))]
        sim = [s for _ in T for s in (True, False)]
    else:
        pairs = [(q, p) for q, p, n in T] + [(q, n) for q, p, n in T]
        sim = [True] * len(T) + [False] * len(T)
    return np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(sim, dtype=bool)


def ref_conv(lam, lam_old):
    """||lam - lam_old||_1 / (||lam||_1 + ||lam_old||_1), 0 if the denominator
    is 0 (the released code's test with the l1 norm in the denominator too:
    free of the number of constraints, issue 27)."""
    den = np.abs(lam).sum() + np.abs(lam_old).sum()
    return float(np.abs(lam - lam_old).sum() / den) if den > 0 else 0.0


def ref_itml(X, T, u, l, gamma, n_sweeps, tol=None, A0=None, *, order="triplet",
             use_g=True):
    """Plain loop of Algorithm 1 (``use_g=False``: a deliberately wrong variant
    without the gamma / (gamma + 1) factor).  Returns A, lambda, xi, convs."""
    X = np.asarray(X, dtype=float)
    pairs, sim = ref_pairs(T, order)
    d = X.shape[1]
    A = np.eye(d) if A0 is None else np.array(A0, dtype=float)
    lam = np.zeros(len(pairs))
    lam_old = lam.copy()
    xi = np.where(sim, float(u), float(l))
    if np.isinf(gamma):
        g, inv_gamma = 1.0, 0.0
    else:
        g, inv_gamma = gamma / (gamma + 1.0), 1.0 / gamma
    if not use_g:
        g = 1.0
    convs = []
    for _ in range(n_sweeps):
        for c, (i, j) in enumerate(pairs):
            v = X[i] - X[j]
            Av = A @ v
            p = float(v @ Av)
            if not p > 0:
                continue
            if sim[c]:
                alpha = min(lam[c], g * (1.0 / p - 1.0 / xi[c]))
                beta = alpha / (1.0 - alpha * p)
                xi[c] = 1.0 / (1.0 / xi[c] + alpha * inv_gamma)
            else:
                alpha = min(lam[c], g * (1.0 / xi[c] - 1.0 / p))
                beta = -alpha / (1.0 + alpha * p)
                xi[c] = 1.0 / (1.0 / xi[c] - alpha * inv_gamma)
            lam[c] -= alpha
            A = A + beta * np.outer(Av, Av)
        conv = ref_conv(lam, lam_old)
        convs.append(conv)
        lam_old = lam.copy()
        if tol is not None and conv < tol:
            break
    return A, lam, xi, np.array(convs)


def ref_bounds(X, T, percentiles=(5.0, 95.0)):
    rows = np.unique(np.asarray(T).ravel())
    Z = np.asarray(X, dtype=float)[rows]
    d2 = [float(np.sum((Z[a] - Z[b]) ** 2))
          for a in range(len(rows)) for b in range(a + 1, len(rows))]
    u, l = np.percentile(d2, percentiles)
    return float(u), float(l)


def close(A, B, rtol=RTOL):
    """Entrywise closeness relative to the largest magnitude of B."""
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    assert A.shape == B.shape, (A.shape, B.shape)
    scale = max(np.max(np.abs(B)) if B.size else 0.0, 1e-300)
    np.testing.assert_allclose(A, B, rtol=0, atol=rtol * scale)


# --------------------------------------------------------------------- data
def random_triplets(n, m, seed):
    """Arbitrary index triplets (not label based), q != p, q != n, p != n."""
    rng = np.random.default_rng(seed)
    T = []
    while len(T) < m:
        q, p, k = rng.integers(0, n, size=3)
        if q != p and q != k and p != k:
            T.append((q, p, k))
    return np.array(T, dtype=np.int64)


def small_problem(seed, n=12, d=3, m=15):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 0.3, 2.0, 0.7, 1.5])[:d]
    T = random_triplets(n, m, seed + 100)
    return X, T


GAMMAS = [0.1, 1.0, 10.0, np.inf]


# ------------------------------------------------------ 1. solver vs reference
def test_triplet_pairs_order():
    T = random_triplets(9, 7, seed=0)
    pairs, sim = triplet_pairs(T)
    rp, rs = ref_pairs(T)
    assert pairs.shape == (14, 2) and sim.shape == (14,)
    assert pairs.dtype == np.int64 and sim.dtype == bool
    np.testing.assert_array_equal(pairs, rp)
    np.testing.assert_array_equal(sim, rs)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_solver_matches_reference(gamma, seed):
    X, T = small_problem(seed)
    u, l = ref_bounds(X, T)
    n_sweeps = 4
    A, lam, xi, convs = ref_itml(X, T, u, l, gamma, n_sweeps)
    assert np.max(lam) > 0                              # something was projected
    s = ITMLSolver(X, T, bounds=(u, l), gamma=gamma)
    out = np.asarray(s.run_sweeps(n_sweeps, None))
    assert out.shape == (n_sweeps,)
    assert s.sweeps == n_sweeps
    close(s.A, A)
    close(s.dual, lam)
    close(s.xi, xi)
    close(out, convs)
    _, sim = ref_pairs(T)
    np.testing.assert_array_equal(s.similar, sim)
    np.testing.assert_array_equal(s.bound, np.where(sim, u, l))
    # distances(): p of every constraint with the current A
    pairs, _ = ref_pairs(T)
    V = X[pairs[:, 0]] - X[pairs[:, 1]]
    close(s.distances(), np.einsum("ij,jk,ik->i", V, A, V))


def test_solver_runs_continue_state():
    """run(2) then run(3) is run(5): lambda_old, xi and A carry over."""
    X, T = small_problem(3)
    u, l = ref_bounds(X, T)
    A, lam, xi, convs = ref_itml(X, T, u, l, 1.0, 5)
    s = ITMLSolver(X, T, bounds=(u, l), gamma=1.0)
    c1 = np.asarray(s.run_sweeps(2, None))
    c2 = np.asarray(s.run_sweeps(3, None))
    assert s.sweeps == 5
    close(np.concatenate([c1, c2]), convs)
    close(s.A, A)
    close(s.dual, lam)
    close(s.xi, xi)


def test_solver_tol_stops_at_reference_sweep():
    X, T = small_problem(4)
    u, l = ref_bounds(X, T)
    tol = 0.05
    A, _lam, _xi, convs = ref_itml(X, T, u, l, 1.0, 200, tol=tol)
    assert 2 < len(convs) < 200 and convs[-1] < tol <= convs[-2]
    s = ITMLSolver(X, T, bounds=(u, l), gamma=1.0)
    out = np.asarray(s.run_sweeps(200, tol))
    assert len(out) == len(convs) == s.sweeps
    close(out, convs)
    close(s.A, A)


def test_solver_non_identity_start():
    X, T = small_problem(5, d=4)
    rng = np.random.default_rng(6)
    B = rng.normal(size=(4, 4))
    A0 = B @ B.T + 0.5 * np.eye(4)
    u, l = ref_bounds(X, T)
    A, lam, _xi, convs = ref_itml(X, T, u, l, 2.0, 3, A0=A0)
    s = ITMLSolver(X, T, bounds=(u, l), gamma=2.0, A0=A0.copy())
    close(np.asarray(s.run_sweeps(3, None)), convs)
    close(s.A, A)
    close(s.dual, lam)


def test_reference_variants_are_distinguishable():
    """The data of the comparison tests tell the right update from plausible
    wrong ones (no g factor, grouped constraint order), so the tests above
    would fail on those mistakes."""
    for seed in (0, 1, 2):
        X, T = small_problem(seed)
        u, l = ref_bounds(X, T)
        A, *_ = ref_itml(X, T, u, l, 1.0, 4)
        A_nog, *_ = ref_itml(X, T, u, l, 1.0, 4, use_g=False)
        A_grp, *_ = ref_itml(X, T, u, l, 1.0, 4, order="grouped")
        assert np.max(np.abs(A_nog - A)) > 1e-3 * np.max(np.abs(A))
        assert np.max(np.abs(A_grp - A)) > 1e-3 * np.max(np.abs(A))
        # and with gamma = inf the order still matters
        A, *_ = ref_itml(X, T, u, l, np.inf, 4)
        A_grp, *_ = ref_itml(X, T, u, l, np.inf, 4, order="grouped")
        assert np.max(np.abs(A_grp - A)) > 1e-3 * np.max(np.abs(A))


# ---------------------------------------------------------- 2. the learner
@pytest.mark.parametrize("gamma", [0.5, np.inf])
def test_learner_matches_reference_fixed_sweeps(gamma):
    X, T = small_problem(7, n=14, d=4, m=20)
    u, l = 0.5, 6.0
    k = 6
    A, lam, _xi, _convs = ref_itml(X, T, u, l, gamma, k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)     # tol=None: no warning
        m = _itml(gamma=gamma, bounds=(u, l), tol=None, max_iter=k,
                           preprocessing=None).fit(X, triplets=T)
    M = (A + A.T) / 2
    close(m.M_, M)
    close(m.dual_, lam)
    assert tuple(np.asarray(m.bounds_, dtype=float)) == (u, l)
    assert m.n_iter_ == k
    assert m.stop_reason_ == "max_iter"
    assert m.rank_ == 4
    L = m.components_
    assert L.shape == (4, 4)
    close(L.T @ L, M, rtol=1e-9)
    close(m.get_mahalanobis_matrix(), M, rtol=1e-9)
    assert isinstance(m.history_, dict)
    # the model's distance is (x - y)^T M (x - y)
    rng = np.random.default_rng(8)
    P, Q = rng.normal(size=(2, 9, 4))
    d2 = np.array([(a - b) @ M @ (a - b) for a, b in zip(P, Q)])
    close(m.pair_distance(P, Q, squared=True), d2, rtol=1e-9)
    close(m.pair_score(P, Q), -np.sqrt(d2), rtol=1e-9)   # -pair_distance (metric-learn)
    sim = np.array([[-(a - b) @ M @ (a - b) for b in Q] for a in P])
    close(m.similarity(P, Q), sim, rtol=1e-9)
    dec = np.array([(X[q] - X[n]) @ M @ (X[q] - X[n]) - (X[q] - X[p]) @ M @ (X[q] - X[p])
                    for q, p, n in T])
    close(m.triplet_score(X, T), dec, rtol=1e-9)


def test_learner_default_bounds_are_percentiles():
    X, T = small_problem(9, n=20, d=3, m=12)
    # only some rows are used, one of them by several triplets
    used = np.unique(T)
    assert 3 <= len(used) < 20
    u, l = ref_bounds(X, T)
    # the percentile is over the used rows only, not over all of X
    u_all, l_all = ref_bounds(X, np.arange(20)[None, :])
    assert abs(u_all - u) > 1e-3 * u or abs(l_all - l) > 1e-3 * l
    bu, bl = itml_bounds(X, used, np.random.default_rng(0))
    assert bu == pytest.approx(u, rel=1e-12) and bl == pytest.approx(l, rel=1e-12)
    bu, bl = itml_bounds(X, used, np.random.default_rng(0), percentiles=(10.0, 80.0))
    ru, rl = ref_bounds(X, T, percentiles=(10.0, 80.0))
    assert bu == pytest.approx(ru, rel=1e-12) and bl == pytest.approx(rl, rel=1e-12)
    m = _itml(preprocessing=None, tol=None, max_iter=3).fit(X, triplets=T)
    np.testing.assert_allclose(np.asarray(m.bounds_, dtype=float), [u, l], rtol=1e-12)
    A, lam, *_ = ref_itml(X, T, u, l, 1.0, 3)
    close(m.M_, (A + A.T) / 2)
    close(m.dual_, lam)


def test_learner_bounds_in_preprocessed_coordinates():
    X, T = small_problem(10, n=15, d=3, m=20)
    X = X * np.array([100.0, 0.01, 3.0]) + np.array([5.0, -2.0, 1e3])
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    u, l = ref_bounds(Z, T)
    A, _lam, *_ = ref_itml(Z, T, u, l, 1.0, 4)
    for prep in ("standardize", "auto"):
        m = _itml(preprocessing=prep, tol=None, max_iter=4).fit(X, triplets=T)
        assert m.preprocessing_ == "standardize"
        np.testing.assert_allclose(np.asarray(m.bounds_, dtype=float), [u, l], rtol=1e-9)
        M = (A + A.T) / 2
        close(m.M_, M, rtol=1e-8)
        i, j = np.random.default_rng(11).integers(0, 15, size=(2, 10))
        d2 = np.array([(Z[a] - Z[b]) @ M @ (Z[a] - Z[b]) for a, b in zip(i, j)])
        close(m.pair_distance(X[i], X[j], squared=True), d2, rtol=1e-8)


def test_learner_sampled_triplets():
    """fit(X, y): 20 c^2 class triplets from random_state, then Algorithm 1."""
    rng = np.random.default_rng(12)
    y = np.repeat([0, 1, 2], 6)
    X = rng.normal(size=(3, 3))[y] * 1.5 + rng.normal(size=(18, 3))
    m = _itml(preprocessing=None, tol=None, max_iter=3, random_state=4).fit(X, y)
    assert m.dual_.shape == (2 * 20 * 9,)
    T = random_class_triplets(y, 180, random_state=np.random.default_rng(4))
    u, l = ref_bounds(X, T)
    np.testing.assert_allclose(np.asarray(m.bounds_, dtype=float), [u, l], rtol=1e-12)
    A, lam, *_ = ref_itml(X, T, u, l, 1.0, 3)
    close(m.M_, (A + A.T) / 2)
    close(m.dual_, lam)
    m2 = _itml(preprocessing=None, n_triplets=50, tol=None, max_iter=2,
                        random_state=4).fit(X, y)
    assert m2.dual_.shape == (100,)


def test_learner_tol_and_max_iter():
    X, T = small_problem(13, n=14, d=3, m=20)
    u, l = ref_bounds(X, T)
    A, _lam, _xi, convs = ref_itml(X, T, u, l, 1.0, 1000, tol=1e-2)
    assert 2 < len(convs) < 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = _itml(preprocessing=None, tol=1e-2, max_iter=1000).fit(X, triplets=T)
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(convs)
    close(m.M_, (A + A.T) / 2)
    # max_iter reached with a tol set: ConvergenceWarning
    with pytest.warns(ConvergenceWarning):
        m = _itml(preprocessing=None, tol=1e-12, max_iter=2).fit(X, triplets=T)
    assert m.stop_reason_ == "max_iter" and m.n_iter_ == 2
    A2, *_ = ref_itml(X, T, u, l, 1.0, 2)
    close(m.M_, (A2 + A2.T) / 2)


# ------------------------------------------------- 3. mathematical contracts
def axis_problem(a2, b2):
    """q = 0, p+ = sqrt(a2) e1, p- = sqrt(b2) e2: the two projections act on
    orthogonal directions (A = I), so each is a single projection."""
    X = np.array([[0.0, 0.0], [np.sqrt(a2), 0.0], [0.0, np.sqrt(b2)]])
    return X, np.array([[0, 1, 2]])


def test_hard_projection_reaches_bound():
    """gamma = inf: one projection onto a violated constraint puts the pair
    exactly on its bound (similar: p > u -> u; dissimilar: p < l -> l)."""
    X, T = axis_problem(9.0, 1.0)
    u, l = 2.0, 5.0
    s = ITMLSolver(X, T, bounds=(u, l), gamma=np.inf)
    s.run_sweeps(1, None)
    np.testing.assert_allclose(s.distances(), [u, l], rtol=1e-13)
    np.testing.assert_allclose(s.A, np.diag([u / 9.0, l / 1.0]), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(s.xi, [u, l], rtol=1e-15)     # alpha / inf = 0
    np.testing.assert_allclose(s.dual, [1 / u - 1 / 9.0, 1 / 1.0 - 1 / l], rtol=1e-13)
    assert np.all(s.dual > 0)


@pytest.mark.parametrize("gamma", [0.1, 1.0, 7.0])
def test_soft_projection_reaches_slack(gamma):
    """Finite gamma: after a projection whose dual variable did not hit 0, the
    pair's distance equals the updated slack xi_c (strictly between the old
    distance and the bound)."""
    X, T = axis_problem(9.0, 1.0)
    u, l = 2.0, 5.0
    s = ITMLSolver(X, T, bounds=(u, l), gamma=gamma)
    s.run_sweeps(1, None)
    assert np.all(s.dual > 0)
    p = s.distances()
    np.testing.assert_allclose(p, s.xi, rtol=1e-13)
    assert u < p[0] < 9.0 and 1.0 < p[1] < l
    _A, _lam, xi, _ = ref_itml(X, T, u, l, gamma, 1)
    close(s.xi, xi)
    # the same for a general A0 (similar pair alone: the dissimilar pair is an
    # identical row, skipped)
    rng = np.random.default_rng(14)
    B = rng.normal(size=(3, 3))
    A0 = B @ B.T + np.eye(3)
    X3 = rng.normal(size=(3, 3))
    X3 = np.vstack([X3, X3[0]])
    for T3, kind in (([[0, 1, 3]], 0), ([[0, 3, 1]], 1)):
        v = X3[0] - X3[1]
        p0 = v @ A0 @ v
        bounds = (p0 / 4, p0 / 2) if kind == 0 else (2 * p0, 4 * p0)   # violated
        s = ITMLSolver(X3, np.array(T3), bounds=bounds, gamma=gamma, A0=A0.copy())
        s.run_sweeps(1, None)
        assert s.dual[kind] > 0 and s.dual[1 - kind] == 0
        assert s.distances()[kind] == pytest.approx(s.xi[kind], rel=1e-12)


@pytest.mark.parametrize("kind", ["similar", "dissimilar"])
def test_projection_is_rank_one_along_Av(kind):
    rng = np.random.default_rng(15)
    d = 5
    B = rng.normal(size=(d, d))
    A0 = B @ B.T + 0.3 * np.eye(d)
    X = rng.normal(size=(3, d))
    X = np.vstack([X, X[0]])                       # row 3 == row 0: a skipped pair
    T = np.array([[0, 1, 3]]) if kind == "similar" else np.array([[0, 3, 1]])
    v = X[0] - X[1]
    w = A0 @ v
    p = v @ w
    bounds = (p / 3, p / 2) if kind == "similar" else (2 * p, 3 * p)
    for gamma in (0.5, np.inf):
        s = ITMLSolver(X, T, bounds=bounds, gamma=gamma, A0=A0.copy())
        s.run_sweeps(1, None)
        D = s.A - A0
        c = (w @ D @ w) / (w @ w) ** 2
        assert np.linalg.norm(D) > 1e-3 * np.linalg.norm(A0)
        close(D, c * np.outer(w, w), rtol=1e-11)
        # the coefficient is beta of the spec, negative (shrink) for similar
        A, _lam, *_ = ref_itml(X, T, *bounds, gamma, 1, A0=A0)
        close(s.A, A)
        assert (c < 0) if kind == "similar" else (c > 0)


def test_spd_and_nonnegative_duals_over_many_sweeps():
    rng = np.random.default_rng(16)
    X = rng.normal(size=(30, 5)) * np.array([3.0, 1.0, 0.1, 1.0, 0.5])
    T = random_triplets(30, 120, seed=17)
    u, l = ref_bounds(X, T)
    for gamma in (1.0, np.inf):
        s = ITMLSolver(X, T, bounds=(u, l), gamma=gamma)
        for _ in range(40):
            s.run_sweeps(1, None)
            assert np.all(s.dual >= 0)
            assert np.all(np.isfinite(s.A))
        A = s.A
        close(A, A.T, rtol=1e-12)
        w = np.linalg.eigvalsh((A + A.T) / 2)
        assert w.min() > 0, w
        assert np.all(s.xi > 0)
        assert np.max(s.dual) > 0


def test_satisfied_constraint_with_zero_dual_is_a_no_op():
    X, T = axis_problem(1.0, 9.0)           # similar 1 < u, dissimilar 9 > l
    for gamma in (1.0, np.inf):
        s = ITMLSolver(X, T, bounds=(2.0, 5.0), gamma=gamma)
        conv = np.asarray(s.run_sweeps(1, None))
        np.testing.assert_array_equal(s.A, np.eye(2))
        np.testing.assert_array_equal(s.dual, 0.0)
        np.testing.assert_array_equal(s.xi, [2.0, 5.0])
        np.testing.assert_array_equal(conv, [0.0])     # 0/0 -> 0
    # general A0, random data, bounds that every pair satisfies
    rng = np.random.default_rng(18)
    X = rng.normal(size=(10, 3))
    T = random_triplets(10, 8, seed=19)
    B = rng.normal(size=(3, 3))
    A0 = B @ B.T + np.eye(3)
    pairs, sim = ref_pairs(T)
    V = X[pairs[:, 0]] - X[pairs[:, 1]]
    p = np.einsum("ij,jk,ik->i", V, A0, V)
    # u = l just above every similar distance; keep the triplets whose
    # dissimilar pair is beyond it: every constraint is satisfied
    u = l = 1.01 * p[sim].max()
    T = T[p[~sim] > l]
    assert len(T) >= 3
    s = ITMLSolver(X, T, bounds=(u, l), gamma=1.0, A0=A0.copy())
    s.run_sweeps(2, None)
    np.testing.assert_array_equal(s.A, A0)
    np.testing.assert_array_equal(s.dual, 0.0)
    assert np.max(np.asarray(s.violation())) <= 0
    # and a violated set is reported as such
    s = ITMLSolver(X, T, bounds=(0.5 * u, 0.5 * u), gamma=1.0, A0=A0.copy())
    assert np.max(np.asarray(s.violation())) > 0


def test_hard_constraints_feasible_and_complementary_at_convergence():
    """gamma = inf on data that a metric can separate (a noise feature
    dominates the Euclidean distances): at convergence every constraint holds,
    and each constraint with lambda_c > 0 is active (p_c = bound), the KKT
    conditions of the ITML problem."""
    rng = np.random.default_rng(30)
    y = np.repeat([0, 1, 2], 8)
    X = np.column_stack([rng.normal(size=(3, 2))[y] * 3 + 0.1 * rng.normal(size=(24, 2)),
                         3 * rng.normal(size=24)])
    T = random_class_triplets(y, 60, random_state=np.random.default_rng(31))
    u, l = 1.0, 4.0
    pairs, sim = ref_pairs(T)
    V = X[pairs[:, 0]] - X[pairs[:, 1]]
    d2 = np.einsum("ij,ij->i", V, V)
    assert d2[sim].max() > 10 * u                   # violated at A = I
    s = ITMLSolver(X, T, bounds=(u, l), gamma=np.inf)
    convs = np.asarray(s.run_sweeps(500, 1e-10))
    assert len(convs) < 500 and convs[-1] < 1e-10
    p = s.distances()
    assert p[sim].max() <= u * (1 + 1e-9) and p[~sim].min() >= l * (1 - 1e-9)
    active = s.dual > 0
    assert active.sum() >= 1
    np.testing.assert_allclose(p[active], s.bound[active], rtol=1e-8)
    assert np.max(np.asarray(s.violation())) <= 1e-9
    A, lam, *_ = ref_itml(X, T, u, l, np.inf, len(convs))
    close(s.A, A, rtol=1e-9)
    close(s.dual, lam, rtol=1e-9)


def test_bounds_row_subsample():
    """More used rows than max_rows: the percentiles come from a random subset,
    fixed by the generator; with max_rows >= the rows the generator is unused."""
    rng = np.random.default_rng(32)
    X = rng.normal(size=(40, 3))
    rows = np.arange(40)
    exact = ref_bounds(X, rows[None, :])
    for seed in (0, 1):
        got = itml_bounds(X, rows, np.random.default_rng(seed), max_rows=40)
        np.testing.assert_allclose(got, exact, rtol=1e-12)
    a = itml_bounds(X, rows, np.random.default_rng(5), max_rows=10)
    b = itml_bounds(X, rows, np.random.default_rng(5), max_rows=10)
    np.testing.assert_array_equal(a, b)
    c = [itml_bounds(X, rows, np.random.default_rng(s), max_rows=10) for s in range(6)]
    assert len({tuple(np.round(v, 12)) for v in c}) > 1     # really a random subset
    d2 = np.sum((X[:, None] - X[None]) ** 2, -1)[np.triu_indices(40, 1)]
    for u, l in c:
        assert d2.min() <= u < l <= d2.max()


# ------------------------------------------------------------ 4. invariance
def test_translation_invariance():
    X, T = small_problem(20, n=15, d=3, m=25)
    shift = np.array([10.0, -4.0, 7.0])
    for prep in (None, "standardize"):
        m1 = _itml(preprocessing=prep, tol=None, max_iter=5).fit(X, triplets=T)
        m2 = _itml(preprocessing=prep, tol=None, max_iter=5).fit(X + shift,
                                                                          triplets=T)
        np.testing.assert_allclose(np.asarray(m2.bounds_, float),
                                   np.asarray(m1.bounds_, float), rtol=1e-10)
        close(m2.M_, m1.M_, rtol=1e-9)
        close(m2.dual_, m1.dual_, rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-3, 1e3, 1e-30, 1e30])
def test_scale_invariance_default_bounds(scale):
    """X -> c X with the default bounds (which scale by c^2): A is unchanged
    (the constraints v^T A v <= u are the same), lambda scales by 1/c^2, the
    conv values and hence the sweep at which tol stops are unchanged."""
    X, T = small_problem(24, n=14, d=3, m=20)
    m1 = _itml(preprocessing=None, tol=1e-2).fit(X, triplets=T)
    m2 = _itml(preprocessing=None, tol=1e-2).fit(scale * X, triplets=T)
    assert m1.stop_reason_ == m2.stop_reason_ == "tol"
    assert m2.n_iter_ == m1.n_iter_ > 1
    np.testing.assert_allclose(np.asarray(m2.bounds_, float) / scale ** 2,
                               np.asarray(m1.bounds_, float), rtol=1e-12)
    close(m2.M_, m1.M_, rtol=1e-9)
    close(m2.dual_ * scale ** 2, m1.dual_, rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-80, 1e100])
def test_scale_invariance_extreme_scale(scale):
    X, T = small_problem(24, n=14, d=3, m=20)
    u, l = ref_bounds(scale * X, T)
    A, _lam, _xi, convs = ref_itml(scale * X, T, u, l, 1.0, 1000, tol=1e-2)
    A1, *_ = ref_itml(X, T, u / scale ** 2, l / scale ** 2, 1.0, 1000, tol=1e-2)
    assert len(convs) > 1
    close(A, A1, rtol=1e-9)                       # the reference is scale-free
    s = ITMLSolver(scale * X, T, bounds=(u, l), gamma=1.0)
    out = np.asarray(s.run_sweeps(1000, 1e-2))
    assert len(out) == len(convs)
    close(out, convs)
    m = _itml(preprocessing=None, tol=1e-2).fit(scale * X, triplets=T)
    assert m.n_iter_ == len(convs)
    close(m.M_, (A + A.T) / 2, rtol=1e-9)


@pytest.mark.parametrize("shift, rtol", [(1e3, 1e-8), (1e6, 1e-8), (1e8, 1e-6)])
def test_default_bounds_translation_invariant_far_from_origin(shift, rtol):
    """The default bounds are squared distances between rows: a translation of
    X by a large offset leaves them unchanged up to the rounding of X + shift
    (differences accurate to ~1e-10 relative at shift 1e6)."""
    X, T = small_problem(20, n=15, d=3, m=25)
    Y = X + shift
    u, l = ref_bounds(X, T)
    np.testing.assert_allclose(ref_bounds(Y, T), (u, l), rtol=rtol)   # the reference is
    got = itml_bounds(Y, np.unique(T), np.random.default_rng(0))       # accurate there
    np.testing.assert_allclose(got, (u, l), rtol=rtol)
    m = _itml(preprocessing=None, tol=None, max_iter=3).fit(Y, triplets=T)
    np.testing.assert_allclose(np.asarray(m.bounds_, float), (u, l), rtol=rtol)


def test_identical_pair_is_skipped():
    X, T = small_problem(21, n=12, d=3, m=15)
    X = X.copy()
    q, p, _ = T[0]
    X[p] = X[q]                               # triplet 0's similar pair: same values
    u, l = 0.5, 4.0
    A, lam, _xi, _convs = ref_itml(X, T, u, l, 1.0, 4)
    with np.errstate(all="raise"):
        s = ITMLSolver(X, T, bounds=(u, l), gamma=1.0)
        out = np.asarray(s.run_sweeps(4, None))
    assert np.all(np.isfinite(s.A)) and np.all(np.isfinite(s.dual))
    assert np.all(np.isfinite(s.xi)) and np.all(np.isfinite(out))
    assert s.dual[0] == 0 and s.xi[0] == u
    close(s.A, A)
    close(s.dual, lam)
    m = _itml(preprocessing=None, bounds=(u, l), tol=None,
                       max_iter=4).fit(X, triplets=T)
    assert np.all(np.isfinite(m.M_))
    close(m.M_, (A + A.T) / 2)


# ------------------------------------------------------------ 5. real data
def test_iris_beats_euclidean():
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    from tripletml.metrics import evaluate_retrieval

    X, y = load_iris(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    eu = evaluate_retrieval(tripletml.Euclidean().fit(Xtr, ytr), Xte, yte)["map"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = _itml(random_state=0).fit(Xtr, ytr)
    assert m.stop_reason_ in ("tol", "max_iter")
    w = np.linalg.eigvalsh(m.M_)
    assert w.min() > 0 and m.rank_ == 4
    close(m.M_, m.M_.T, rtol=1e-12)
    it = evaluate_retrieval(m, Xte, yte)["map"]
    # the learner starts from M = I on standardized rows (mAP 0.8124 here)
    eu_std = evaluate_retrieval(tripletml.Euclidean(preprocessing="standardize").fit(Xtr, ytr),
                                Xte, yte)["map"]
    # measured: Euclidean 0.8958, standardized 0.8124, ITML 0.9782 (random_state
    # 0, stops by tol after 333 sweeps; seeds 0-4: 0.9746-0.9806)
    assert it > eu + 0.05, (it, eu)
    assert it > eu_std + 0.1, (it, eu_std)


# ------------------------------------------------------------------ 6. errors
@pytest.mark.parametrize("kwargs, exc", [
    ({"gamma": 0}, ValueError),
    ({"gamma": 0.0}, ValueError),
    ({"gamma": -1.0}, ValueError),
    ({"gamma": float("nan")}, ValueError),
    ({"gamma": "1.0"}, TypeError),
    ({"gamma": True}, TypeError),
    ({"bounds": (1.0,)}, ValueError),
    ({"bounds": (1.0, 2.0, 3.0)}, ValueError),
    ({"bounds": (0.0, 2.0)}, ValueError),
    ({"bounds": (-1.0, 2.0)}, ValueError),
    ({"bounds": (3.0, 2.0)}, ValueError),
    ({"bounds": (float("nan"), 2.0)}, ValueError),
    ({"bounds": (1.0, float("nan"))}, ValueError),
    ({"max_iter": 0}, ValueError),
    ({"tol": -1e-3}, ValueError),
])
def test_bad_parameters(kwargs, exc):
    X, T = small_problem(22)
    with pytest.raises(exc, match="ITML"):
        _itml(preprocessing=None, **kwargs).fit(X, triplets=T)


def test_gamma_inf_and_numpy_scalars_accepted():
    X, T = small_problem(23)
    u, l = 0.5, 4.0
    A, *_ = ref_itml(X, T, u, l, np.inf, 3)
    m = _itml(gamma=np.inf, bounds=(np.float32(0.5), np.int64(4)), tol=None,
                       max_iter=np.int32(3), preprocessing=None).fit(X, triplets=T)
    close(m.M_, (A + A.T) / 2)
    A, *_ = ref_itml(X, T, u, l, 0.25, 3)
    m = _itml(gamma=np.float64(0.25), bounds=(u, l), tol=None, max_iter=3,
                       preprocessing=None).fit(X, triplets=T)
    close(m.M_, (A + A.T) / 2)
