"""Independent check of ``tripletml.LowRankDML`` and its linear-algebra kernels
against Zhang & Zhang, "Efficient Stochastic Optimization for Low-Rank Distance
Metric Learning" (AAAI 2017).

Everything used as a reference below is written from the paper alone, with
dense d x d matrices and ``np.linalg.eigh`` (no incremental SVD, no factored
iterates):

* Incremental SVD (Brand 2006), section "Updating W_t by Incremental SVD": the
  eigen decomposition of U Sigma U^T +- A A^T is V diag(mu) V^T with
  V = [U P] U_hat orthonormal, r + p columns, p = rank((I - U U^T) A)
  ("may be zero if A lies in the column space of U").  The reference is simply
  eigh of the dense matrix.
* Theorem 1:  Pi_{S+}[X] = sum_{i: l_i > 0} l_i u_i u_i^T.
* Theorem 2:  Pi_{S+ cap ||W||_2 <= tau}[X]
                = sum_{l_i > tau} tau u_i u_i^T + sum_{0 < l_i <= tau} l_i u_i u_i^T.
* Theorem 3:  Pi_{S+ cap ||W||_F <= tau}[X] = min(1, tau / ||Pi_{S+}[X]||_F) Pi_{S+}[X].
* Update (3)/(4)/(5), Algorithm 1:  W_1 = 0,
      W_{t+1} = Pi[W_t - eta_t g(W_t) - eta_t lam I],  eta_t = c / sqrt(t),
  i.e. with the eigenvalues mu_i of W_hat = W_t - eta_t g(W_t), the projection
  is taken of the eigenvalues mu_i - eta_t lam (``shift = eta_t lam``).
* Experiments: F(W) = (1/T) sum_{i,j,k} max(1 + ||x_i - x_j||_W^2
  - ||x_i - x_k||_W^2, 0) + lam tr(W), whose (sub)gradient on a mini-batch B is
      g = (1/|B|) sum_{active} (x_i - x_j)(x_i - x_j)^T - (x_i - x_k)(x_i - x_k)^T,
  a triplet being active when its hinge argument is strictly positive.

Every test states why it can fail.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import LowRankDML
from tripletml.linalg import lowrank_eig_update, project_psd, project_spectrum

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")

RTOL = 1e-8
TOL_EIG = 1e-10


# --------------------------------------------------------------------------
# reference (paper only, dense)
# --------------------------------------------------------------------------
def orthonormal(rng, d, r):
    """A random d x r matrix with orthonormal columns (r may be 0)."""
    if r == 0:
        return np.zeros((d, 0))
    Q, _ = np.linalg.qr(rng.standard_normal((d, r)))
    return Q


def dense_sum(U, s, A, signs=None):
    """U diag(s) U^T + A diag(signs) A^T, formed densely."""
    signs = np.ones(A.shape[1]) if signs is None else np.asarray(signs, float)
    return (U * s) @ U.T + (A * signs) @ A.T


def ref_spectrum(mu, shift=0.0, constraint=None, tau=None):
    """Theorems 1-3 on the eigenvalues (same order as ``mu``)."""
    v = np.asarray(mu, float) - shift
    pos = np.where(v > 0, v, 0.0)                      # Theorem 1
    if constraint is None:
        return pos
    if constraint == "spectral":                       # Theorem 2
        return np.where(v > tau, tau, pos)
    if constraint == "frobenius":                      # Theorem 3
        F = np.sqrt(np.sum(pos ** 2))
        return pos if F <= tau else pos * (tau / F)
    raise ValueError(constraint)


def ref_project(X, shift=0.0, constraint=None, tau=None):
    """Dense projection of X - shift I (Theorems 1-3 with eigh)."""
    lam, Q = np.linalg.eigh((X + X.T) / 2)
    return (Q * ref_spectrum(lam, shift, constraint, tau)) @ Q.T


def constraint_active(X, shift, constraint, tau):
    """Whether the norm ball of Theorem 2 / 3 actually cuts Pi_{S+}[X - shift I]."""
    lam = np.linalg.eigvalsh((X + X.T) / 2) - shift
    pos = np.where(lam > 0, lam, 0.0)
    if constraint == "spectral":
        return bool(np.any(pos > tau))
    if constraint == "frobenius":
        return bool(np.sqrt(np.sum(pos ** 2)) > tau)
    return False


def hinge_args(Xd, triplets, W):
    """1 + ||x_i - x_j||_W^2 - ||x_i - x_k||_W^2 for every triplet."""
    i, j, k = triplets.T
    A = Xd[i] - Xd[j]
    B = Xd[i] - Xd[k]
    return 1.0 + np.einsum("td,de,te->t", A, W, A) - np.einsum("td,de,te->t", B, W, B)


def ref_iterates(Xd, triplets, lam, eta0, n_iter, constraint=None, tau=None):
    """Algorithm 1 with full-batch gradients: returns [W_2, ..., W_{n_iter+1}],
    the smallest |hinge argument| met (to show the active sets are not
    decided by round-off) and whether the norm ball was active in any step."""
    d = Xd.shape[1]
    m = len(triplets)
    W = np.zeros((d, d))                                 # W_1 = 0
    out, min_abs_margin, active = [], np.inf, False
    i, j, k = triplets.T
    A = Xd[i] - Xd[j]
    B = Xd[i] - Xd[k]
    for t in range(1, n_iter + 1):
        eta = eta0 / np.sqrt(t)
        h = hinge_args(Xd, triplets, W)
        min_abs_margin = min(min_abs_margin, np.abs(h).min())
        on = h > 0
        g = (A[on].T @ A[on] - B[on].T @ B[on]) / m      # mean over the batch
        Y = W - eta * g
        active |= constraint_active(Y, eta * lam, constraint, tau)
        W = ref_project(Y, eta * lam, constraint, tau)   # Pi[W - eta g - eta lam I]
        out.append(W)
    return out, min_abs_margin, active


def ref_objective_loop(Xd, triplets, W, lam):
    """F(W) as a plain Python loop over triplets (Experiments section)."""
    total = 0.0
    for i, j, k in triplets:
        a = Xd[i] - Xd[j]
        b = Xd[i] - Xd[k]
        total += max(1.0 + a @ W @ a - b @ W @ b, 0.0)
    return total / len(triplets) + lam * np.trace(W)


def make_problem(seed, n=30, d=10, m=60, sparse_frac=0.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if sparse_frac:
        X[rng.random((n, d)) < sparse_frac] = 0.0
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(m)], dtype=np.int64)
    return X, T


def assert_mat_close(W, Wref, rtol=RTOL, what=""):
    err = np.linalg.norm(np.asarray(W) - Wref)
    bound = rtol * np.linalg.norm(Wref) + 1e-12
    assert err <= bound, f"{what}: ||W - W_ref||_F = {err:.3e} > {bound:.3e}"


def fitted_W(model):
    return np.asarray(model.get_mahalanobis_matrix(), dtype=float)


def fit(X, T, **kw):
    # the paper's fixed budget (tol=None): these tests compare max_iter
    # iterates with a reference (the default tol="auto" may stop earlier)
    kw.setdefault("tol", None)
    model = LowRankDML(preprocessing=None, start="zero", **kw)
    model.fit(X, triplets=T)
    return model


# --------------------------------------------------------------------------
# a. incremental SVD: lowrank_eig_update
# --------------------------------------------------------------------------
def check_eig_update(U, s, A, signs, expected_cols):
    """Fails if V is not orthonormal, has the wrong number of columns (r + p),
    mu is not sorted decreasingly, or V diag(mu) V^T / the spectrum differ
    from eigh of the dense U diag(s) U^T + A diag(signs) A^T."""
    d = U.shape[0]
    M = dense_sum(U, s, A, signs)
    V, mu = (lowrank_eig_update(U, s, A) if signs is None
             else lowrank_eig_update(U, s, A, signs))
    V = np.asarray(V, float)
    mu = np.asarray(mu, float)
    scale = max(1.0, np.abs(M).max())
    assert V.shape == (d, expected_cols)
    assert mu.shape == (expected_cols,)
    np.testing.assert_allclose(V.T @ V, np.eye(expected_cols), rtol=0, atol=TOL_EIG)
    assert np.all(np.diff(mu) <= 1e-12 * scale), f"mu not decreasing: {mu}"
    np.testing.assert_allclose((V * mu) @ V.T, M, rtol=0, atol=TOL_EIG * scale)
    # each column is an eigenvector of the dense matrix
    np.testing.assert_allclose(M @ V, V * mu, rtol=0, atol=TOL_EIG * scale)
    # the spectrum: mu plus d - (r + p) zeros is the spectrum of the dense matrix
    ev = np.sort(np.linalg.eigvalsh(M))
    np.testing.assert_allclose(np.sort(np.concatenate([mu, np.zeros(d - expected_cols)])),
                               ev, rtol=0, atol=TOL_EIG * scale)
    return V, mu


@pytest.mark.parametrize("d,r,c,seed", [(12, 4, 3, 0), (20, 7, 5, 1), (6, 2, 4, 2), (30, 10, 1, 3)])
def test_eig_update_random_mixed_signs(d, r, c, seed):
    # generic A: p = c new directions; s mixed (positive and negative)
    rng = np.random.default_rng(seed)
    U = orthonormal(rng, d, r)
    s = rng.uniform(0.2, 3.0, r) * rng.choice([-1.0, 1.0], r)
    s[0] = abs(s[0])
    A = rng.standard_normal((d, c))
    signs = np.array([1.0 if q % 2 == 0 else -1.0 for q in range(c)])
    check_eig_update(U, s, A, signs, r + c)


def test_eig_update_positive_iterate_minus_gradient():
    # the situation of update (3): W_t PSD, W_t - eta (a a^T - b b^T)
    rng = np.random.default_rng(10)
    d, r = 15, 5
    U = orthonormal(rng, d, r)
    s = np.sort(rng.uniform(0.1, 2.0, r))[::-1]
    A = rng.standard_normal((d, 6)) * 0.3
    signs = np.array([-1, -1, -1, 1, 1, 1])
    check_eig_update(U, s, A, signs, r + 6)


def test_eig_update_A_in_span_of_U():
    # A = U C lies in span(U): (I - U U^T) A = 0, so p = 0 and V has r columns
    rng = np.random.default_rng(4)
    d, r = 14, 5
    U = orthonormal(rng, d, r)
    s = rng.uniform(0.5, 2.0, r)
    A = U @ rng.standard_normal((r, 3))
    V, _ = check_eig_update(U, s, A, np.array([1, -1, 1]), r)
    # V spans the same space as U
    np.testing.assert_allclose(V @ V.T, U @ U.T, rtol=0, atol=TOL_EIG)


def test_eig_update_rank_deficient_A():
    # duplicate columns and a column inside span(U): rank((I - U U^T) A) = 2 < c = 4
    rng = np.random.default_rng(5)
    d, r = 16, 4
    U = orthonormal(rng, d, r)
    s = rng.uniform(0.5, 2.0, r)
    a = rng.standard_normal(d)
    b = rng.standard_normal(d)
    A = np.column_stack([a, a, b, U @ rng.standard_normal(r)])
    check_eig_update(U, s, A, np.array([1, 1, -1, 1]), r + 2)
    # duplicated column with opposite signs cancels in the sum, still exact
    A2 = np.column_stack([a, a, b])
    check_eig_update(U, s, A2, np.array([1, -1, -1]), r + 2)


@pytest.mark.parametrize("signs", [None, np.array([1.0, -1.0, 1.0])])
def test_eig_update_empty_U(signs):
    # r = 0: W_1 = 0 in Algorithm 1, the first step starts from an empty basis
    rng = np.random.default_rng(6)
    d = 9
    U = np.zeros((d, 0))
    s = np.zeros(0)
    A = rng.standard_normal((d, 3))
    V, mu = check_eig_update(U, s, A, signs, 3)
    if signs is None:  # default signs are all +1: A A^T is PSD
        assert np.all(mu > 0)


def test_eig_update_default_signs_are_plus():
    # signs=None must mean all +1 (spec), not e.g. the paper's "W - A A^T"
    rng = np.random.default_rng(7)
    d, r = 10, 3
    U = orthonormal(rng, d, r)
    s = rng.uniform(0.5, 2.0, r)
    A = rng.standard_normal((d, 2))
    V0, mu0 = lowrank_eig_update(U, s, A)
    V1, mu1 = lowrank_eig_update(U, s, A, np.ones(2))
    M = dense_sum(U, s, A)
    np.testing.assert_allclose((np.asarray(V0) * mu0) @ np.asarray(V0).T, M, atol=TOL_EIG)
    np.testing.assert_allclose(np.asarray(mu0), np.asarray(mu1), atol=TOL_EIG)


# --------------------------------------------------------------------------
# b. projections: Theorems 1-3
# --------------------------------------------------------------------------
SPECTRUM_CASES = [
    # (constraint, tau, shift)
    (None, None, 0.0),
    (None, None, 0.7),
    ("spectral", 1.5, 0.0),      # active: largest eigenvalues above tau
    ("spectral", 1.5, 0.4),
    ("spectral", 100.0, 0.3),    # inactive
    ("frobenius", 1.0, 0.0),     # active
    ("frobenius", 2.0, 0.5),     # active
    ("frobenius", 100.0, 0.2),   # inactive
]


@pytest.mark.parametrize("constraint,tau,shift", SPECTRUM_CASES)
def test_project_spectrum_matches_theorems(constraint, tau, shift):
    # fails if the thresholding / clipping / scaling of Theorems 1-3 (with the
    # eta_t lam shift of the update) is not what the paper states
    rng = np.random.default_rng(11)
    mu = np.sort(rng.uniform(-3, 3, 12))[::-1]
    got = np.asarray(project_spectrum(mu, shift=shift, constraint=constraint, tau=tau), float)
    ref = ref_spectrum(mu, shift, constraint, tau)
    assert got.shape == mu.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert np.all(got >= 0)
    assert np.all(got[mu - shift <= 0] == 0)  # removed eigenvalues are exact zeros
    if constraint == "spectral":
        assert got.max() <= tau * (1 + 1e-12)
    if constraint == "frobenius":
        assert np.linalg.norm(got) <= tau * (1 + 1e-12)


def test_project_spectrum_elementwise_order_and_edge_cases():
    # eigenvectors are unchanged, so the i-th output belongs to the i-th input
    mu = np.array([0.3, -1.0, 2.5, 0.05, 1.2])
    np.testing.assert_allclose(project_spectrum(mu, shift=0.1), [0.2, 0, 2.4, 0, 1.1], atol=1e-14)
    np.testing.assert_allclose(project_spectrum(mu, shift=0.1, constraint="spectral", tau=1.0),
                               [0.2, 0, 1.0, 0, 1.0], atol=1e-14)
    pos = np.array([0.2, 0, 2.4, 0, 1.1])
    np.testing.assert_allclose(project_spectrum(mu, shift=0.1, constraint="frobenius", tau=1.0),
                               pos / np.linalg.norm(pos), atol=1e-14)
    # nothing survives: the zero matrix (no division by ||0||_F)
    neg = np.array([-0.5, -2.0, 0.1])
    for c, tau in [(None, None), ("spectral", 1.0), ("frobenius", 1.0)]:
        out = np.asarray(project_spectrum(neg, shift=0.2, constraint=c, tau=tau), float)
        assert out.shape == (3,)
        assert np.all(np.isfinite(out)) and np.all(out == 0)
    # an eigenvalue exactly at the shift is removed (Theorem 1 keeps l_i > 0)
    out = np.asarray(project_spectrum(np.array([1.0, 0.5]), shift=0.5), float)
    np.testing.assert_allclose(out, [0.5, 0.0], atol=0)


def random_symmetric(rng, d, scale=2.0):
    G = rng.standard_normal((d, d))
    return scale * (G + G.T) / 2


@pytest.mark.parametrize("constraint,tau,shift", SPECTRUM_CASES)
def test_project_psd_matches_dense_reference_and_is_feasible(constraint, tau, shift):
    # fails if project_psd does not project X - shift I as Theorems 1-3 say,
    # or its output is outside S+ / the norm ball
    rng = np.random.default_rng(12)
    d = 8
    X = random_symmetric(rng, d)
    P = np.asarray(project_psd(X, shift=shift, constraint=constraint, tau=tau), float)
    Pref = ref_project(X, shift, constraint, tau)
    assert P.shape == (d, d)
    np.testing.assert_allclose(P, Pref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    ev = np.linalg.eigvalsh(P)
    assert ev.min() >= -1e-10                                    # PSD
    if constraint == "spectral":
        assert ev.max() <= tau + 1e-10                           # ||P||_2 <= tau
    if constraint == "frobenius":
        assert np.linalg.norm(P) <= tau + 1e-10                  # ||P||_F <= tau
    if constraint is not None and tau < 10:
        assert constraint_active(X, shift, constraint, tau)      # the case tests the ball


def feasible_points(rng, d, constraint, tau, count=40):
    """Random points of S+ (cap the norm ball), including boundary points."""
    pts = [np.zeros((d, d))]
    for q in range(count):
        k = 1 + q % d
        G = rng.standard_normal((d, k))
        Y = G @ G.T
        if constraint == "spectral":
            Y *= tau * rng.uniform(0.1, 1.0) / np.linalg.eigvalsh(Y).max()
            if q % 5 == 0:                               # on the boundary, mixed
                lam, Q = np.linalg.eigh(Y)
                lam[-1] = tau
                Y = (Q * lam) @ Q.T
        elif constraint == "frobenius":
            Y *= tau * (1.0 if q % 4 == 0 else rng.uniform(0.1, 1.0)) / np.linalg.norm(Y)
        else:
            Y *= rng.uniform(0.01, 3.0)
        pts.append(Y)
    return pts


@pytest.mark.parametrize("constraint,tau,shift", SPECTRUM_CASES)
def test_project_psd_variational_inequality(constraint, tau, shift):
    # projection onto a closed convex set C: <Z - P, Y - P> <= 0 for all Y in C,
    # with Z = X - shift I.  Independent of the closed forms of Theorems 1-3.
    rng = np.random.default_rng(13)
    d = 7
    X = random_symmetric(rng, d)
    Z = X - shift * np.eye(d)
    P = np.asarray(project_psd(X, shift=shift, constraint=constraint, tau=tau), float)
    dist = np.linalg.norm(Z - P)
    for Y in feasible_points(rng, d, constraint, tau):
        assert np.sum((Z - P) * (Y - P)) <= 1e-10
        assert dist <= np.linalg.norm(Z - Y) + 1e-10     # P is the nearest point


@pytest.mark.parametrize("constraint,tau", [(None, None), ("spectral", 0.8), ("frobenius", 1.2)])
def test_incremental_step_equals_dense_projection(constraint, tau):
    # one step of update (3)/(4)/(5) the paper's way (incremental SVD of
    # W_t - eta g, then Theorem 1-3 on mu - eta lam) equals the dense projection
    rng = np.random.default_rng(14)
    d, r = 12, 4
    U = orthonormal(rng, d, r)
    s = rng.uniform(0.2, 1.5, r)
    A = rng.standard_normal((d, 4)) * 0.5
    signs = np.array([-1.0, -1.0, 1.0, 1.0])
    shift = 0.15
    V, mu = lowrank_eig_update(U, s, A, signs)
    V = np.asarray(V, float)
    w = np.asarray(project_spectrum(np.asarray(mu), shift=shift, constraint=constraint, tau=tau), float)
    Wnext = (V * w) @ V.T
    Wref = ref_project(dense_sum(U, s, A, signs), shift, constraint, tau)
    np.testing.assert_allclose(Wnext, Wref, rtol=0, atol=1e-10)
    Pd = np.asarray(project_psd(dense_sum(U, s, A, signs), shift=shift, constraint=constraint, tau=tau))
    np.testing.assert_allclose(Pd, Wref, rtol=0, atol=1e-10)
    if constraint is not None:
        assert constraint_active(dense_sum(U, s, A, signs), shift, constraint, tau)


# --------------------------------------------------------------------------
# c. LowRankDML iterates, full batch (deterministic)
# --------------------------------------------------------------------------
ITERATE_CASES = [
    # (constraint, tau, lam, eta0, sparse, expect_ball_active)
    (None, None, 0.2, 0.5, False, False),
    ("frobenius", 0.3, 0.2, 0.5, False, True),
    ("spectral", 0.3, 0.2, 0.5, False, True),
    ("frobenius", 0.3, 0.2, 0.5, True, True),     # scipy.sparse CSR input
    ("spectral", 0.3, 0.2, 0.5, True, True),      # scipy.sparse CSR input
    ("frobenius", 50.0, 0.1, 0.3, True, False),   # loose ball: same as Theorem 1
]


@pytest.mark.parametrize("constraint,tau,lam,eta0,sparse,ball_active", ITERATE_CASES)
def test_full_batch_iterates_match_dense_reference(constraint, tau, lam, eta0, sparse, ball_active):
    # with batch_size = number of triplets g_t is the full gradient, so
    # fit(max_iter=k) must return W_{k+1} of update (3)/(4)/(5) exactly.
    # Fails on a wrong step size (eta0/sqrt(t)), sign of g, mean vs sum,
    # hinge activity test, shift eta_t lam, or projection.
    X, T = make_problem(21, n=30, d=10, m=60, sparse_frac=0.4 if sparse else 0.0)
    n_iter = 4
    refs, min_margin, active = ref_iterates(X, T, lam, eta0, n_iter, constraint, tau)
    assert min_margin > 1e-6          # active sets are not decided by round-off
    assert active == ball_active      # the norm ball is (not) binding, as intended
    ranks = [int(np.linalg.matrix_rank(W)) for W in refs]
    assert all(0 < rk < X.shape[1] for rk in ranks), ranks  # thresholding does something
    Xin = sp.csr_matrix(X) if sparse else X
    kw = dict(alpha=lam, eta0=eta0, batch_size=len(T), solver="incsvd",
              constraint=constraint, random_state=0)
    if tau is not None:
        kw["tau"] = tau
    for k in range(1, n_iter + 1):
        model = fit(Xin, T, max_iter=k, **kw)
        Wref = refs[k - 1]
        W = fitted_W(model)
        assert_mat_close(W, Wref, what=f"W_{k + 1}")
        U = np.asarray(model.U_, float)
        s = np.asarray(model.s_, float)
        r = int(model.rank_)
        assert r == ranks[k - 1]
        assert U.shape == (X.shape[1], r) and s.shape == (r,)
        np.testing.assert_allclose(U.T @ U, np.eye(r), rtol=0, atol=1e-10)
        assert np.all(s > 0)
        assert_mat_close((U * s) @ U.T, Wref, what=f"U_ diag(s_) U_^T at W_{k + 1}")
        L = np.asarray(model.components_, float)
        assert L.shape == (r, X.shape[1])
        assert_mat_close(L.T @ L, Wref, what="components_^T components_")
        Z = model.transform(Xin)
        Z = Z.toarray() if sp.issparse(Z) else np.asarray(Z)
        np.testing.assert_allclose(Z, X @ L.T, rtol=1e-10, atol=1e-12)
        if constraint == "frobenius":
            assert np.linalg.norm(W) <= tau * (1 + 1e-8)
        if constraint == "spectral":
            assert np.linalg.eigvalsh(W).max() <= tau * (1 + 1e-8)
    if ball_active:   # some iterate sits on the boundary of the ball
        if constraint == "frobenius":
            assert any(abs(np.linalg.norm(W) - tau) < 1e-9 for W in refs)
        else:
            assert any(abs(np.linalg.eigvalsh(W).max() - tau) < 1e-9 for W in refs)


def test_full_batch_first_iterate_closed_form():
    # W_1 = 0 makes every triplet active (hinge argument = 1), so
    # W_2 = Pi_{S+}[-eta0 (mean (aa^T - bb^T)) - eta0 lam I]; checked directly
    X, T = make_problem(22, n=20, d=8, m=30)
    eta0, lam = 0.4, 0.1
    i, j, k = T.T
    A = X[i] - X[j]
    B = X[i] - X[k]
    G = (A.T @ A - B.T @ B) / len(T)
    W2 = ref_project(-eta0 * G - eta0 * lam * np.eye(8))
    model = fit(X, T, alpha=lam, eta0=eta0, batch_size=len(T), max_iter=1,
                solver="incsvd", constraint=None, random_state=0)
    assert 0 < np.linalg.matrix_rank(W2) < 8
    assert_mat_close(fitted_W(model), W2, what="W_2")


# --------------------------------------------------------------------------
# d. incsvd == dense projected SGD with mini-batches
# --------------------------------------------------------------------------
@pytest.mark.parametrize("constraint,tau", [(None, None), ("frobenius", 0.5), ("spectral", 0.3)])
def test_incsvd_equals_sgd_minibatch(constraint, tau):
    # same random_state -> same mini-batches; the factored update must produce
    # the same iterates as the dense eigh baseline (they are the same algorithm)
    X, T = make_problem(23, n=30, d=10, m=40)
    kw = dict(alpha=0.2, eta0=0.5, batch_size=3, max_iter=20, constraint=constraint,
              random_state=7)
    if tau is not None:
        kw["tau"] = tau
    W_inc = fitted_W(fit(X, T, solver="incsvd", **kw))
    W_sgd = fitted_W(fit(X, T, solver="sgd", **kw))
    assert np.linalg.norm(W_sgd) > 1e-3            # a non-trivial metric
    assert_mat_close(W_inc, W_sgd, what="incsvd vs sgd")
    # with batch_size=3 the run is not the full-batch run (mini-batches used)
    full, _, _ = ref_iterates(X, T, 0.2, 0.5, 20, constraint, tau)
    assert np.linalg.norm(W_inc - full[-1]) > 1e-6


def test_incsvd_equals_sgd_sparse_input():
    X, T = make_problem(24, n=30, d=12, m=45, sparse_frac=0.5)
    kw = dict(alpha=0.1, eta0=0.5, batch_size=4, max_iter=20, constraint="frobenius",
              tau=0.8, random_state=3)
    W_inc = fitted_W(fit(sp.csr_matrix(X), T, solver="incsvd", **kw))
    W_sgd = fitted_W(fit(sp.csr_matrix(X), T, solver="sgd", **kw))
    W_dense_in = fitted_W(fit(X, T, solver="incsvd", **kw))
    assert np.linalg.norm(W_sgd) > 1e-3
    assert_mat_close(W_inc, W_sgd, what="incsvd vs sgd (CSR)")
    assert_mat_close(W_inc, W_dense_in, what="CSR vs dense input")


# --------------------------------------------------------------------------
# e. rank, PSD, history, effect of lam
# --------------------------------------------------------------------------
@pytest.mark.parametrize("constraint,tau", [(None, None), ("frobenius", 1.0), ("spectral", 0.5)])
def test_rank_psd_and_history(constraint, tau):
    X, T = make_problem(25, n=40, d=12, m=80)
    kw = dict(alpha=0.3, eta0=0.5, batch_size=10, max_iter=30, solver="incsvd",
              constraint=constraint, random_state=1)
    if tau is not None:
        kw["tau"] = tau
    model = fit(X, T, **kw)
    W = fitted_W(model)
    np.testing.assert_allclose(W, W.T, atol=1e-12)
    assert np.linalg.eigvalsh(W).min() >= -1e-10                      # W in S+
    r = int(model.rank_)
    assert r == np.linalg.matrix_rank(W)
    assert 0 < r < X.shape[1]                                         # low rank, non-zero
    assert np.asarray(model.U_).shape == (X.shape[1], r)
    h = model.history_
    for key in ("step", "rank", "objective"):
        assert key in h, key
    assert len(h["step"]) == len(h["rank"]) > 0
    assert int(h["rank"][-1]) == r
    assert all(0 <= int(q) <= X.shape[1] for q in h["rank"])
    assert list(h["step"]) == sorted(h["step"])
    if constraint == "frobenius":
        assert np.linalg.norm(W) <= tau * (1 + 1e-8)
    if constraint == "spectral":
        assert np.linalg.eigvalsh(W).max() <= tau * (1 + 1e-8)


def test_larger_lam_gives_smaller_trace_and_rank():
    # "the eigenvalues of W_hat smaller than eta_t lam will be removed, and thus
    # W_{t+1} tends to be low-rank": on this deterministic (full-batch) problem
    # the dense reference gives ranks 6 > 4 > 1 > 0 for the lams below.
    X, T = make_problem(1, n=30, d=10, m=60)
    lams = [0.03, 0.3, 1.0, 1e3]
    ref_ranks, ref_traces, models = [], [], []
    for lam in lams:
        refs, min_margin, _ = ref_iterates(X, T, lam, 0.5, 10)
        assert min_margin > 1e-6
        ref_ranks.append(int(np.linalg.matrix_rank(refs[-1])))
        ref_traces.append(np.trace(refs[-1]))
        models.append(fit(X, T, alpha=lam, eta0=0.5, batch_size=len(T), max_iter=10,
                          solver="incsvd", constraint=None, random_state=0))
        assert_mat_close(fitted_W(models[-1]), refs[-1], what=f"lam={lam}")
    assert ref_ranks == sorted(ref_ranks, reverse=True) and ref_ranks[-1] == 0
    ranks = [int(m.rank_) for m in models]
    traces = [np.trace(fitted_W(m)) for m in models]
    assert ranks == ref_ranks
    assert all(a > b for a, b in zip(ranks, ranks[1:])), ranks
    assert all(a > b for a, b in zip(traces, traces[1:])), traces


@pytest.mark.parametrize("solver", ["incsvd", "sgd"])
def test_huge_lam_gives_the_zero_metric(solver):
    # lam > ||g||_2 for every mini-batch: every eigenvalue of W_hat - eta lam I
    # is negative at every step, so W stays 0 (rank 0)
    X, T = make_problem(26, n=30, d=9, m=50)
    model = fit(X, T, alpha=1e6, eta0=0.5, batch_size=5, max_iter=15, solver=solver,
                constraint="frobenius", tau=1.0, random_state=2)
    W = fitted_W(model)
    assert W.shape == (9, 9)
    assert np.abs(W).max() <= 1e-12
    assert int(model.rank_) == 0
    assert int(model.history_["rank"][-1]) == 0
    if solver == "incsvd":
        assert np.asarray(model.U_).shape == (9, 0)
        assert np.asarray(model.s_).shape == (0,)
    assert np.asarray(model.components_).shape == (0, 9)
    assert np.asarray(model.transform(X)).shape == (30, 0)
    # F(0) = (1/m) sum max(1, 0) = 1
    assert abs(model.objective(X, T) - 1.0) < 1e-12


# --------------------------------------------------------------------------
# f. objective
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_objective_matches_python_loop(sparse):
    # fails if the hinge, the 1/m mean, the margin 1, or the lam tr(W) term of
    # the paper's experimental objective is implemented differently
    X, T = make_problem(27, n=35, d=11, m=70, sparse_frac=0.3 if sparse else 0.0)
    Xin = sp.csr_matrix(X) if sparse else X
    lam = 0.15
    model = fit(Xin, T, alpha=lam, eta0=0.5, batch_size=7, max_iter=25, solver="incsvd",
                constraint="frobenius", tau=1.0, random_state=4)
    W = fitted_W(model)
    assert np.trace(W) > 1e-3
    ref = ref_objective_loop(X, T, W, lam)
    assert abs(model.objective(Xin, T) - ref) <= 1e-10 * max(1.0, abs(ref))
    # on triplets the model was not fitted on, some active and some not
    rng = np.random.default_rng(99)
    T2 = np.array([rng.choice(35, 3, replace=False) for _ in range(50)], dtype=np.int64)
    h = hinge_args(X, T2, W)
    assert np.any(h > 0) and np.any(h < 0)
    ref2 = ref_objective_loop(X, T2, W, lam)
    assert abs(model.objective(Xin, T2) - ref2) <= 1e-10 * max(1.0, abs(ref2))
