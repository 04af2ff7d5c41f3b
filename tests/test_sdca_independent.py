"""Independent check of ``tripletml.SDCA`` against Wu et al. (AAAI 2015).

The reference below is written from the paper alone (Algorithm 1, eqs. 3-8,
the closed-form dual step and the conjugate l*): plain NumPy, explicit dual
matrices Theta_i (d x d), no PSD projection (M is an unconstrained bilinear
matrix, as in Algorithm 1).

    l_i(M)      = ([1 - <M, X_i>]_+)^2,  X_i = x_i (x_i+ - x_i-)^T          (3)
    P(M)        = 1/n sum_i l_i(M) + lam/2 ||M||_F^2                         (4)
    D(Theta)    = 1/n sum_i -l_i*(-Theta_i) - lam/2 ||M(Theta)||_F^2          (5)
    M(Theta)    = (lam n)^-1 sum_i Theta_i                                    (7)
    l_i*(-Theta)= -a + a^2/4 if Theta = a X_i, a >= 0; +inf otherwise.
                  When X_i = 0, l_i is the constant 1 and l_i*(0) = -1
                  (= min over a >= 0 of -a + a^2/4).
    step        : da = max((1 - <M, X_i> - a_i/2) / (1/2 + ||X_i||^2/(lam n)), -a_i)
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from _triplet_draws import distinct_triplets
from tripletml import SDCA

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")

RTOL = 1e-10
ATOL = 1e-12


# --------------------------------------------------------------------------
# reference
# --------------------------------------------------------------------------
def triplet_matrices(X, T):
    """X_i = x_i (x_i+ - x_i-)^T, shape (n, d, d)."""
    return np.stack([np.outer(X[q], X[p] - X[m]) for q, p, m in T])


def neg_conjugate(Theta_i, X_i):
    """-l_i*(-Theta_i) for the squared hinge l(M) = ([1 - <M, X_i>]_+)^2."""
    nx = float(np.sum(X_i * X_i))
    if nx == 0.0:
        # l_i == 1 everywhere: l_i*(U) = +inf unless U = 0, l_i*(0) = -1
        assert np.all(Theta_i == 0.0)
        return 1.0
    a = float(np.sum(Theta_i * X_i)) / nx
    # Theta_i must lie on the ray {a X_i, a >= 0}, else the conjugate is +inf
    assert a >= -1e-12
    np.testing.assert_allclose(Theta_i, a * X_i, rtol=1e-9, atol=1e-13)
    return a - a * a / 4.0


def primal(M, Xs, lam):
    n = len(Xs)
    z = np.einsum("ijk,jk->i", Xs, M)
    return float(np.sum(np.maximum(0.0, 1.0 - z) ** 2) / n + lam / 2 * np.sum(M * M))


def dual(Theta, Xs, lam):
    n = len(Xs)
    M = Theta.sum(axis=0) / (lam * n)
    conj = sum(neg_conjugate(Theta[i], Xs[i]) for i in range(n))
    return float(conj / n - lam / 2 * np.sum(M * M))


def primal_grad(M, Xs, lam):
    n = len(Xs)
    z = np.einsum("ijk,jk->i", Xs, M)
    h = np.maximum(0.0, 1.0 - z)
    return -(2.0 / n) * np.einsum("i,ijk->jk", h, Xs) + lam * M


class Ref:
    """Algorithm 1 with explicit Theta_i, run over a given index sequence."""

    def __init__(self, Xs, lam, n_scale, track_dual=False):
        self.Xs = Xs
        self.lam = lam
        self.n = n_scale                     # the n in (lam n)^-1
        d = Xs.shape[1]
        self.M = np.zeros((d, d))
        self.Theta = np.zeros_like(Xs)
        self.alpha = np.zeros(len(Xs))
        self.iterates = [self.M.copy()]      # M^0, M^1, ...
        self.hinge = []                      # [1 - <M^{t-1}, X_i>]_+ before step t
        self.margin = []                     # <M^{t-1}, X_i> before step t
        self.track_dual = track_dual
        self.duals = [dual(self.Theta, Xs, lam)] if track_dual else None

    def step(self, i):
        X_i = self.Xs[i]
        z = float(np.sum(self.M * X_i))      # x_i^T M (x_i+ - x_i-)
        self.margin.append(z)
        self.hinge.append(max(0.0, 1.0 - z))
        a = self.alpha[i]
        nx = float(np.sum(X_i * X_i))
        da = max((1.0 - z - a / 2.0) / (0.5 + nx / (self.lam * self.n)), -a)
        dTheta = da * X_i
        self.alpha[i] = a + da
        self.Theta[i] = self.Theta[i] + dTheta
        self.M = self.M + dTheta / (self.lam * self.n)
        self.iterates.append(self.M.copy())
        if self.track_dual:
            self.duals.append(dual(self.Theta, self.Xs, self.lam))

    def P(self):
        return primal(self.M, self.Xs, self.lam)

    def D(self):
        return dual(self.Theta, self.Xs, self.lam)


def reference_fit(X, T, lam, max_iter, random_state, output="last", tol=None,
                  track_dual=False):
    Xs = triplet_matrices(X, T)
    n = len(T)
    ref = Ref(Xs, lam, n, track_dual=track_dual)
    rng = np.random.default_rng(random_state)
    hist = {"primal": [], "dual": [], "gap": [], "rel_gap": [], "avg_loss": [],
            "mistake_rate": [], "step": []}
    for _ in range(max_iter):
        idx = rng.integers(0, n, size=n)
        if output == "random":
            rng.random(n)
        for i in idx:
            ref.step(int(i))
        P, D = ref.P(), ref.D()
        # M^t is M(Theta^t) (eq. 7) along the whole run
        np.testing.assert_allclose(ref.M, ref.Theta.sum(0) / (lam * n), rtol=1e-9, atol=1e-13)
        hist["primal"].append(P)
        hist["dual"].append(D)
        hist["gap"].append(P - D)
        hist["rel_gap"].append((P - D) / max(abs(P), 1e-12))
        hist["avg_loss"].append(float(np.mean(ref.hinge)))
        hist["mistake_rate"].append(float(np.mean(np.array(ref.margin) <= 0.0)))
        hist["step"].append(len(ref.hinge))
        if tol is not None and (P - D) / max(abs(P), 1e-12) <= tol:  # relative gap
            break
    return ref, hist


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------
def tricky_data(seed=0, n_rows=9, d=4):
    """Rows with zeros (one all-zero row), duplicate triplets, a positive and
    a negative that are the same point (row ``n_rows`` repeats row 5: distinct
    indices, since training refuses p+ == p- as indices)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, d)) / math.sqrt(d)
    X[rng.random(X.shape) < 0.3] = 0.0
    X[4] = 0.0                                   # all-zero row
    X = np.vstack([X, X[5]])                     # row n_rows: a copy of row 5
    T = np.array([
        [0, 1, 2],
        [0, 1, 2],            # duplicate
        [4, 1, 3],            # zero query -> X_i = 0
        [3, 4, 0],            # zero positive
        [2, 5, n_rows],       # positive == negative point -> X_i = 0
        [5, 6, 7],
        [6, 0, 8],
        [7, 3, 1],
        [8, 2, 6],
        [1, 7, 4],            # zero negative
    ], dtype=np.int64)
    return X, T


def as_input(X, kind):
    return sp.csr_matrix(X) if kind == "csr" else X


def fit_lib(X, T, **kw):
    params = dict(alpha=0.05, max_iter=3, output="last", tol=None, random_state=7)
    params.update(kw)
    return SDCA(start="zero", preprocessing=None, **params).fit(X, triplets=T)


# --------------------------------------------------------------------------
# sanity of the reference itself
# --------------------------------------------------------------------------
def test_reference_conjugate_and_gradient():
    """The closed-form l* and the primal gradient, checked numerically."""
    rng = np.random.default_rng(3)
    Xi = rng.normal(size=(3, 3))
    # l*(-a X) = max_M <-a X, M> - l(M); on M = z X/||X||^2 it is 1-D in z
    nx = np.sum(Xi * Xi)
    z = np.linspace(-10, 10, 400001)
    for a in [0.0, 0.3, 1.0, 2.0, 3.7]:
        num = np.max(-a * z - np.maximum(0.0, 1.0 - z) ** 2)
        assert abs(num - (-a + a * a / 4)) < 1e-8
        assert abs(-neg_conjugate(a * Xi, Xi) - num) < 1e-8
    assert nx > 0
    # gradient of P by central differences
    X, T = tricky_data()
    Xs = triplet_matrices(X, T)
    M = rng.normal(size=(X.shape[1],) * 2)
    g = primal_grad(M, Xs, 0.05)
    h = 1e-6
    fd = np.zeros_like(M)
    for j in range(M.shape[0]):
        for k in range(M.shape[1]):
            E = np.zeros_like(M)
            E[j, k] = h
            fd[j, k] = (primal(M + E, Xs, 0.05) - primal(M - E, Xs, 0.05)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------
# (1) fit, output="last", against the reference
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("max_iter,lam,seed", [(2, 0.05, 7), (3, 0.5, 1), (3, 0.01, 12)])
def test_fit_last_matches_reference(kind, max_iter, lam, seed):
    X, T = tricky_data()
    ref, _ = reference_fit(X, T, lam, max_iter, seed)
    m = fit_lib(as_input(X, kind), T, alpha=lam, max_iter=max_iter, random_state=seed)
    np.testing.assert_allclose(m.M_last_, ref.M, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.W_, ref.M, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.alpha_, ref.alpha, rtol=RTOL, atol=ATOL)
    # Theta_i = alpha_i X_i and M = M(Theta) (eq. 7) with the library's alphas
    Xs = triplet_matrices(X, T)
    np.testing.assert_allclose(
        np.einsum("i,ijk->jk", m.alpha_, Xs) / (lam * len(T)), m.M_last_,
        rtol=1e-9, atol=1e-12)


def test_dense_and_csr_agree():
    X, T = tricky_data(seed=5)
    a = fit_lib(X, T, max_iter=3, random_state=3)
    b = fit_lib(sp.csr_matrix(X), T, max_iter=3, random_state=3)
    np.testing.assert_allclose(a.M_last_, b.M_last_, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a.alpha_, b.alpha_, rtol=RTOL, atol=ATOL)
    for k in ("primal", "dual", "gap", "avg_loss", "mistake_rate"):
        np.testing.assert_allclose(a.history_[k], b.history_[k], rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------
# (2) history primal / dual / gap; weak duality
# --------------------------------------------------------------------------
def _degenerate(X, T):
    Xs = triplet_matrices(X, T)
    return [i for i in range(len(T)) if not np.any(Xs[i])]


def _seeds_first_epoch_visits(X, T, want, k):
    """The first k seeds whose first epoch visits (want=True) or misses
    (want=False) some triplet with X_i = 0."""
    deg, n, out = set(_degenerate(X, T)), len(T), []
    for seed in range(1000):
        idx = set(np.random.default_rng(seed).integers(0, n, size=n).tolist())
        if (deg <= idx) == want:
            out.append(seed)
        if len(out) == k:
            return out
    raise AssertionError("no seed found")  # pragma: no cover


def _history_cases():
    X, T = tricky_data()
    cases = [("tricky", s) for s in _seeds_first_epoch_visits(X, T, True, 3)]
    return cases + [("plain", 0), ("plain", 5)]


def _history_data(name):
    if name == "tricky":
        return tricky_data()
    rng = np.random.default_rng(21)
    X = rng.normal(size=(12, 4)) / 2
    T = distinct_triplets(rng, 12, 15)
    assert not _degenerate(X, T)
    return X, T


@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("data,seed", _history_cases())
def test_history_primal_dual_gap(kind, data, seed):
    X, T = _history_data(data)
    lam, ne = 0.05, 4
    ref, hist = reference_fit(X, T, lam, ne, seed)
    m = fit_lib(as_input(X, kind), T, alpha=lam, max_iter=ne, random_state=seed)
    h = m.history_
    assert len(h["primal"]) == ne
    np.testing.assert_allclose(h["primal"], hist["primal"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(h["dual"], hist["dual"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(h["gap"], hist["gap"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.array(h["primal"]) - np.array(h["dual"]), h["gap"],
                               rtol=1e-9, atol=1e-12)
    assert list(h["step"]) == hist["step"]
    # P of the library's own fitted state
    Xs = triplet_matrices(X, T)
    assert primal(m.M_last_, Xs, lam) == pytest.approx(h["primal"][-1], rel=RTOL)


@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("seed", range(6))
def test_weak_duality_every_epoch(kind, seed):
    X, T = tricky_data(seed=seed)
    lam = [0.005, 0.05, 0.5][seed % 3]
    ref, hist = reference_fit(X, T, lam, 5, seed)
    assert np.all(np.array(hist["primal"]) >= np.array(hist["dual"]) - 1e-12)
    m = fit_lib(as_input(X, kind), T, alpha=lam, max_iter=5, random_state=seed)
    h = m.history_
    assert np.all(np.array(h["primal"]) >= np.array(h["dual"]) - 1e-12)
    assert np.all(np.array(h["gap"]) >= -1e-12)
    # the library's D never exceeds the paper's D(Theta) (it is a lower bound of P*)
    assert np.all(np.array(h["dual"]) <= np.array(hist["dual"]) + 1e-12)


def test_unvisited_degenerate_triplet_dual():
    """A triplet with X_i = 0 that no step has picked yet: Theta_i = 0 and
    -l_i*(0) = min l_i = 1, so it contributes 1/n to D (eq. 5), not 0.
    (Found by this independent reference; the library once gave 0.)"""
    X, T = tricky_data()
    assert _degenerate(X, T) == [2, 4]
    seed = _seeds_first_epoch_visits(X, T, False, 1)[0]
    ref, hist = reference_fit(X, T, 0.05, 1, seed)
    m = fit_lib(X, T, alpha=0.05, max_iter=1, random_state=seed)
    assert np.any(ref.alpha[[2, 4]] == 0.0)            # really unvisited
    np.testing.assert_allclose(m.alpha_, ref.alpha, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.history_["primal"], hist["primal"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.history_["dual"], hist["dual"], rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------
# (3) dual ascent step by step; alpha >= 0
# --------------------------------------------------------------------------
@pytest.mark.parametrize("lam", [0.005, 0.05, 1.0])
def test_dual_monotone_and_alpha_nonnegative(lam):
    X, T = tricky_data(seed=2)
    ref, _ = reference_fit(X, T, lam, 4, 11, track_dual=True)
    D = np.array(ref.duals)
    assert len(D) == 4 * len(T) + 1
    assert D[0] == pytest.approx(2 / len(T))   # D(0) = 1/n sum min l_i: two X_i = 0
    assert np.all(np.diff(D) >= -1e-13), np.diff(D).min()
    assert D[-1] > D[0]
    m = fit_lib(X, T, alpha=lam, max_iter=4, random_state=11)
    assert np.all(m.alpha_ >= 0.0)
    np.testing.assert_allclose(m.alpha_, ref.alpha, rtol=RTOL, atol=ATOL)
    # and on a longer run with larger data
    rng = np.random.default_rng(9)
    X2 = rng.normal(size=(30, 5))
    T2 = distinct_triplets(rng, 30, 60)
    m2 = fit_lib(X2, T2, alpha=lam, max_iter=8, random_state=2)
    assert np.all(m2.alpha_ >= 0.0)
    assert np.all(np.array(m2.history_["gap"]) >= -1e-12)


# --------------------------------------------------------------------------
# (4) convergence to the primal minimizer found by L-BFGS
# --------------------------------------------------------------------------
def test_converges_to_lbfgs_minimizer():
    X, T = tricky_data(seed=1)
    lam = 0.1
    d = X.shape[1]
    Xs = triplet_matrices(X, T)

    def f(v):
        M = v.reshape(d, d)
        return primal(M, Xs, lam), primal_grad(M, Xs, lam).ravel()

    # gradient check at a random point before trusting it
    rng = np.random.default_rng(0)
    v0 = rng.normal(size=d * d)
    g = f(v0)[1]
    e = 1e-6
    fd = np.array([(f(v0 + e * u)[0] - f(v0 - e * u)[0]) / (2 * e) for u in np.eye(d * d)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)

    res = minimize(f, np.zeros(d * d), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 10000})
    Mstar = res.x.reshape(d, d)
    # strong convexity (modulus lam): ||M - M*|| <= ||grad P(M)|| / lam
    assert np.linalg.norm(primal_grad(Mstar, Xs, lam)) / lam < 1e-7

    m = fit_lib(X, T, alpha=lam, max_iter=300, tol=None, random_state=0)
    gap = np.array(m.history_["gap"])
    assert len(gap) == 300
    assert gap[-1] < 1e-6
    assert np.min(gap) >= -1e-12
    np.testing.assert_allclose(m.M_last_, Mstar, rtol=0, atol=1e-5)
    assert m.history_["primal"][-1] == pytest.approx(primal(Mstar, Xs, lam), abs=1e-9)
    # KKT: alpha_i* = -l'(<M*, X_i>) = 2 [1 - <M*, X_i>]_+ (2 for X_i = 0)
    z = np.einsum("ijk,jk->i", Xs, Mstar)
    np.testing.assert_allclose(m.alpha_, 2 * np.maximum(0.0, 1 - z), rtol=0, atol=1e-5)
    assert np.all(m.alpha_ >= 0)


def test_tol_stops_after_first_epoch_below_tol():
    X, T = tricky_data(seed=1)
    tol = 1e-4
    ref, hist = reference_fit(X, T, 0.1, 300, 5, tol=tol)
    assert hist["rel_gap"][-1] <= tol < min(hist["rel_gap"][:-1])
    m = fit_lib(X, T, alpha=0.1, max_iter=300, tol=tol, random_state=5)
    assert len(m.history_["gap"]) == len(hist["gap"])
    np.testing.assert_allclose(m.history_["rel_gap"], hist["rel_gap"], rtol=1e-9, atol=1e-12)
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(hist["gap"])
    np.testing.assert_allclose(m.M_last_, ref.M, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------
# (5) average output; random output
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("max_iter,average_start", [(3, 0.5), (2, 0.0), (3, 0.37), (1, 0.95)])
def test_average_output(kind, max_iter, average_start):
    X, T = tricky_data()
    lam, seed = 0.05, 7
    ref, _ = reference_fit(X, T, lam, max_iter, seed, output="average")
    Ttot = max_iter * len(T)
    T0 = math.floor(average_start * Ttot)
    # Mbar = 1/(T-T0) sum_{t=T0+1}^{T} M^{t-1}
    Mbar = np.mean(ref.iterates[T0:Ttot], axis=0)
    m = fit_lib(as_input(X, kind), T, alpha=lam, max_iter=max_iter, random_state=seed,
                output="average", average_start=average_start)
    np.testing.assert_allclose(m.M_last_, ref.M, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.W_, Mbar, rtol=1e-9, atol=1e-12)
    # the average is not the last iterate (so this test can tell them apart)
    assert not np.allclose(Mbar, ref.M, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_output_is_one_of_the_iterates(seed):
    X, T = tricky_data()
    lam, ne, a0 = 0.05, 3, 0.5
    ref, _ = reference_fit(X, T, lam, ne, seed, output="random")
    Ttot = ne * len(T)
    T0 = math.floor(a0 * Ttot)
    m = fit_lib(X, T, alpha=lam, max_iter=ne, random_state=seed, output="random",
                average_start=a0)
    np.testing.assert_allclose(m.M_last_, ref.M, rtol=RTOL, atol=ATOL)
    # M^t for some t in {T0+1, ..., T}
    cands = ref.iterates[T0 + 1:Ttot + 1]
    assert any(np.allclose(m.W_, C, rtol=RTOL, atol=ATOL) for C in cands)


# --------------------------------------------------------------------------
# (6) avg_loss and mistake_rate
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("seed,lam", [(7, 0.05), (3, 0.005)])
def test_avg_loss_and_mistake_rate(kind, seed, lam):
    X, T = tricky_data(seed=4)
    ne = 4
    ref, hist = reference_fit(X, T, lam, ne, seed)
    m = fit_lib(as_input(X, kind), T, alpha=lam, max_iter=ne, random_state=seed)
    np.testing.assert_allclose(m.history_["avg_loss"], hist["avg_loss"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.history_["mistake_rate"], hist["mistake_rate"],
                               rtol=RTOL, atol=ATOL)
    # no margin sits so close to 0 that "<= 0" is decided by rounding
    z = np.abs(np.array(ref.margin))
    assert np.all((z == 0.0) | (z > 1e-8))


# --------------------------------------------------------------------------
# (7) partial_fit with triplet ids
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dense", "csr"])
def test_partial_fit_with_ids(kind):
    X, T = tricky_data(seed=6)
    lam, n_scale = 0.05, 6
    batches = [
        (T[[0, 1, 2, 3]], [10, 11, 12, 13]),
        (T[[1, 5, 0, 1]], [11, 15, 10, 11]),   # revisits 11 twice and 10
        (T[[4, 5, 6]], [14, 15, 99]),           # 14, 99 unseen -> alpha 0
        (T[[0, 0]], [10, 10]),
    ]
    # reference: dual variables keyed by id; n in (lam n)^-1 is n_triplets
    d = X.shape[1]
    M = np.zeros((d, d))
    alpha, Theta = {}, {}
    model = SDCA(start="zero", preprocessing=None, alpha=lam, n_triplets=n_scale, random_state=0)
    for Tb, ids in batches:
        for (q, p, r), k in zip(Tb, ids):
            X_i = np.outer(X[q], X[p] - X[r])
            a = alpha.get(k, 0.0)
            z = float(np.sum(M * X_i))
            da = max((1 - z - a / 2) / (0.5 + np.sum(X_i * X_i) / (lam * n_scale)), -a)
            alpha[k] = a + da
            Theta[k] = Theta.get(k, np.zeros((d, d))) + da * X_i
            M = M + da * X_i / (lam * n_scale)
        model.partial_fit(as_input(X, kind), Tb, triplet_ids=np.array(ids))
        np.testing.assert_allclose(model.M_last_, M, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(M, sum(Theta.values()) / (lam * n_scale), rtol=1e-9, atol=1e-12)
    assert np.all(model.alpha_ >= 0)
    # one dual variable per distinct id (layout-agnostic comparison)
    np.testing.assert_allclose(np.sort(np.asarray(model.alpha_)),
                               np.sort(np.array(list(alpha.values()))), rtol=RTOL, atol=ATOL)


def test_partial_fit_default_ids_are_new():
    X, T = tricky_data(seed=6)
    lam, n_scale = 0.1, 4
    # the same triplet given twice without ids: two separate dual variables
    model = SDCA(start="zero", preprocessing=None, alpha=lam, n_triplets=n_scale, random_state=0)
    model.partial_fit(X, T[[0, 5]])
    model.partial_fit(X, T[[0, 5, 0]])
    d = X.shape[1]
    M = np.zeros((d, d))
    for q, p, r in T[[0, 5, 0, 5, 0]]:
        X_i = np.outer(X[q], X[p] - X[r])
        z = float(np.sum(M * X_i))
        da = max((1 - z) / (0.5 + np.sum(X_i * X_i) / (lam * n_scale)), 0.0)
        M = M + da * X_i / (lam * n_scale)
    np.testing.assert_allclose(model.M_last_, M, rtol=RTOL, atol=ATOL)


def test_partial_fit_matches_fit_sequence():
    """partial_fit over fit's own index sequence, one id per triplet and
    n_triplets = m, reproduces fit's last iterate."""
    X, T = tricky_data()
    lam, seed, ne = 0.05, 7, 2
    ref, _ = reference_fit(X, T, lam, ne, seed)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.integers(0, len(T), size=len(T)) for _ in range(ne)])
    model = SDCA(start="zero", preprocessing=None, alpha=lam, n_triplets=len(T), random_state=0)
    model.partial_fit(X, T[idx[:7]], triplet_ids=idx[:7])
    model.partial_fit(sp.csr_matrix(X), T[idx[7:]], triplet_ids=idx[7:])
    np.testing.assert_allclose(model.M_last_, ref.M, rtol=RTOL, atol=ATOL)
