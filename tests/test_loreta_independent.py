"""Independent check of ``tripletml.LORETA`` and the factored baselines against
Shalit, Weinshall & Chechik, "Online Learning in the Manifold of Low-Rank
Matrices" (NIPS 2010).

The reference below is written from the paper alone, with full n x n matrices
and ``np.linalg.pinv`` (no rank-one pseudo-inverse updates, no orthogonal
complements kept in factored form; the multi-step loop ``loreta_ref`` takes
the pseudo-inverses of its SVD factors in closed form and cross-checks them
against the ``np.linalg.pinv`` path along the run):

* Lemma 1: for x = A B^T (A, B of full column rank), P_A = A A^+, P_B = B B^+,
  the projection of an ambient Z onto T_x M is xi = xi^S + xi_l^P + xi_r^P with
      xi^S = P_A Z P_B,  xi_l^P = P_A Z (I - P_B),  xi_r^P = (I - P_A) Z P_B.
* Theorem 1 (eq. 3), x^+ = B^{+T} A^+:
      w1 = x + xi^S/2 + xi_r^P - xi^S x^+ xi^S / 8 - xi_r^P x^+ xi^S / 2
      w2 = x + xi^S/2 + xi_l^P - xi^S x^+ xi^S / 8 - xi^S x^+ xi_l^P / 2
      R_x(xi) = w1 x^+ w2.
* Algorithms 1-3 output Z1 Z2^T = R_x(P_x(G1 G2^T)) with G1 G2^T = -eta grad.
* Section 5.1: S_W(q, p) = q^T W p and l_W(q, p1, p2) = [1 - q^T W p1 + q^T W p2]_+,
  so with v = p1 - p2 the ambient gradient is -q v^T and G1 G2^T = eta q v^T
  (a step only when the loss is positive).  For a block of r triplets (general
  LORETA, ``batch_size=r``) the step is on the mean loss of the block:
  G1 G2^T = (eta / r) sum_{active} q v^T, all losses taken at the block's x.
* "Comparisons" (baselines), with the two readings documented by the library:
  the paper's "max(..., C)" is read as min(..., C) (C is called "the maximum
  magnitude of the step size"), and its GD line "B_new = A + eta (p1 - p2) q^T A"
  as the typo it is for B_new = B + eta (p1 - p2) q^T A.

Every test states why it can fail.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import LORETA, FactoredGD, IterativePA, NaivePA

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")

RTOL = 1e-8


# --------------------------------------------------------------------------
# reference (paper only)
# --------------------------------------------------------------------------
def pinv_x(A, B):
    """x^+ = B^{+T} A^+ (Theorem 1), cross-checked with pinv of the dense x."""
    xp = np.linalg.pinv(B).T @ np.linalg.pinv(A)
    x = A @ B.T
    s = np.linalg.svd(x, compute_uv=False)
    k = A.shape[1]
    xp_dense = np.linalg.pinv(x, rcond=0.5 * s[k - 1] / s[0])  # keep exactly k values
    np.testing.assert_allclose(xp, xp_dense, rtol=1e-7, atol=1e-9 * np.abs(xp).max())
    return xp


def tangent_parts(A, B, Z, Ap=None, Bp=None):
    """Lemma 1: (xi^S, xi_l^P, xi_r^P) of P_x(Z), x = A B^T (Ap, Bp: A^+, B^+
    when the caller already has them, else np.linalg.pinv)."""
    PA = A @ (np.linalg.pinv(A) if Ap is None else Ap)
    PB = B @ (np.linalg.pinv(B) if Bp is None else Bp)
    In, Im = np.eye(A.shape[0]), np.eye(B.shape[0])
    return PA @ Z @ PB, PA @ Z @ (Im - PB), (In - PA) @ Z @ PB


def project(A, B, Z):
    S, L, R = tangent_parts(A, B, Z)
    return S + L + R


def retract(A, B, Z, Ap=None, Bp=None):
    """R_x(P_x(Z)) of Theorem 1 (eq. 3), dense.  Ap, Bp: A^+ and B^+ when the
    caller has them in closed form (then x^+ = B^{+T} A^+ is formed from them
    without pinv_x's dense cross-check), else np.linalg.pinv."""
    x = A @ B.T
    xp = pinv_x(A, B) if Ap is None else Bp.T @ Ap
    S, L, R = tangent_parts(A, B, Z, Ap, Bp)
    common = x + S / 2 - S @ xp @ S / 8          # the terms w1 and w2 share
    w1 = common + R - R @ xp @ S / 2
    w2 = common + L - S @ xp @ L / 2
    return w1 @ xp @ w2


def algorithm1_factors(A, B, Z):
    """Algorithm 1's outputs (Z1, Z2), with explicit orthogonal complements."""
    n, k = A.shape
    m = B.shape[0]
    Ap, Bp = np.linalg.pinv(A), np.linalg.pinv(B)
    Aperp = np.linalg.svd(A, full_matrices=True)[0][:, k:]  # A_perp^T A = 0, orthonormal
    Bperp = np.linalg.svd(B, full_matrices=True)[0][:, k:]
    assert Aperp.shape == (n, n - k) and Bperp.shape == (m, m - k)
    M = Ap @ Z @ Bp.T
    N1 = Bperp.T @ Z.T @ Ap.T
    N2 = Aperp.T @ Z @ Bp.T
    Ik = np.eye(k)
    Z1 = A @ (Ik + M / 2 - M @ M / 8) + Aperp @ N2 @ (Ik - M / 2)
    Z2 = B @ (Ik + M.T / 2 - M.T @ M.T / 8) + Bperp @ N1 @ (Ik - M.T / 2)
    return Z1, Z2


def triplet_grad(X, t, W):
    """(loss, q v^T) of the section 5.1 hinge at W for triplet t = (q, p1, p2)."""
    q, v = X[t[0]], X[t[1]] - X[t[2]]
    return 1.0 - q @ W @ v, np.outer(q, v)


def loreta_ref(X, T, A, B, eta, batch=1, check_every=100):
    """Dense LORETA: one Theorem-1 retraction per block of `batch` triplets.

    R_x depends only on x = W, so every step re-factors the current rank-k W
    by its SVD, W = U_k S V_k^T, as A = U_k S^{1/2}, B = V_k S^{1/2}.  These
    have full column rank and orthonormal U_k, V_k, so their Moore-Penrose
    inverses are A^+ = (A^T A)^{-1} A^T = S^{-1/2} U_k^T and
    B^+ = S^{-1/2} V_k^T in closed form: one SVD per step instead of seven
    (re-factoring, two pinv for x^+, two for P_A and P_B, pinv_x's
    cross-check of x^+ against the dense pinv of x).  Every `check_every`-th
    step (the first one included) is also taken by the generic
    `retract` (np.linalg.pinv and the dense cross-check) and the two must
    agree to 1e-12: the closed forms cannot silently differ along the run."""
    W = A @ B.T
    k = A.shape[1]
    n_steps = 0
    for s in range(0, len(T), batch):
        block = T[s:s + batch]
        Z = np.zeros_like(W)
        for t in block:
            loss, G = triplet_grad(X, t, W)
            if loss > 0:
                Z += G
        if not np.any(Z):
            continue
        Z *= eta / len(block)
        # re-factor the current rank-k W (R depends only on x, not on the factors)
        U, sv, Vt = np.linalg.svd(W)
        r = np.sqrt(sv[:k])
        Af, Bf = U[:, :k] * r, Vt[:k].T * r
        Ap, Bp = U[:, :k].T / r[:, None], Vt[:k] / r[:, None]  # A^+, B^+
        W_new = retract(Af, Bf, Z, Ap, Bp)
        if check_every and n_steps % check_every == 0:
            assert rel(W_new, retract(Af, Bf, Z)) < 1e-12
        W = W_new
        n_steps += 1
    return W


def baseline_ref(kind, X, T, A, B, eta, C, trace=None):
    """The paper's three factored baselines, step by step (yields A, B)."""
    A, B = A.copy(), B.copy()
    for t in T:
        q, v = X[t[0]], X[t[1]] - X[t[2]]
        loss = 1.0 - q @ A @ (B.T @ v)
        if loss > 0:
            if kind == "gd":
                # both from the old A, B
                A, B = A + eta * np.outer(q, v @ B), B + eta * np.outer(v, q @ A)
            elif kind == "naive":
                e = min(loss / ((q @ q) * (v @ v)), C)
                if trace is not None:
                    trace.append(e < C)
                A, B = A + e * np.outer(q, v @ B), B + e * np.outer(v, q @ A)
            elif kind == "iterative":
                Btv = B.T @ v
                eA = min(loss / ((q @ q) * (Btv @ Btv)), C)
                if trace is not None:
                    trace.append(eA < C)
                A = A + eA * np.outer(q, Btv)
                loss2 = 1.0 - q @ A @ (B.T @ v)  # recomputed with the new A
                if loss2 > 0:
                    Atq = A.T @ q
                    eB = min(loss2 / ((v @ v) * (Atq @ Atq)), C)
                    B = B + eB * np.outer(v, Atq)
            else:  # pragma: no cover
                raise ValueError(kind)
        yield A, B


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def make_X(rng, n_samples, n_features, sparse=False, density=0.5):
    X = rng.normal(size=(n_samples, n_features))
    if sparse:
        X *= rng.random(X.shape) < density
        X[np.abs(X).sum(axis=1) == 0, 0] = 1.0
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def random_factors(rng, n, k, scale=1.0):
    return scale * rng.normal(size=(n, k)), scale * rng.normal(size=(n, k))


def primed(cls, X, A, B, **params):
    """A fitted model whose state is set to (A, B) by hand.

    The first ``partial_fit`` initializes the model on X with row 0 repeated
    at the end (row n) and the triplet (1, 0, n): its positive and negative
    are the same point at distinct indices, so v = p1 - p2 = 0, the gradient
    is zero and no step moves W.  Then the factors (and, for LORETA, the
    transposed pseudo-inverses it keeps) are overwritten with ours.
    """
    model = cls(preprocessing=None, **params)
    n = X.shape[0]
    Xd = sp.vstack([X, X[:1]]).tocsr() if sp.issparse(X) else np.vstack([X, X[:1]])
    model.partial_fit(Xd, [[1, 0, n]])
    model.A_, model.B_ = A.copy(), B.copy()
    if cls is LORETA:
        model.pinv_A_ = np.linalg.pinv(A).T.copy()
        model.pinv_B_ = np.linalg.pinv(B).T.copy()
    return model


def W_of(model):
    return model.A_ @ model.B_.T


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def pick_triplets(X, W, rng, want_active, count, lo=0.3, hi=1.7):
    """Random triplets with margin q^T W v well below (active) or above 1."""
    out = []
    n = X.shape[0]
    for _ in range(200000):
        t = rng.choice(n, size=3, replace=False)
        loss, _ = triplet_grad(X, t, W)
        if (want_active and loss > lo) or (not want_active and loss < 1.0 - hi):
            out.append(t)
            if len(out) == count:
                return np.array(out)
    raise AssertionError("could not find triplets")  # pragma: no cover


# --------------------------------------------------------------------------
# sanity of the reference itself
# --------------------------------------------------------------------------
def test_reference_is_a_projection_and_a_rank_k_retraction():
    # Fails if the reference misreads Lemma 1 / Theorem 1: P_x must be an
    # orthogonal projection with mutually orthogonal components, and R_x(xi)
    # must have rank exactly k and equal Algorithm 1's Z1 Z2^T.
    rng = np.random.default_rng(1)
    n, k = 9, 3
    A, B = random_factors(rng, n, k)
    Z = rng.normal(size=(n, n))
    S, L, R = tangent_parts(A, B, Z)
    xi = S + L + R
    np.testing.assert_allclose(project(A, B, xi), xi, atol=1e-12)  # idempotent
    for P, Q in [(S, L), (S, R), (L, R), (xi, Z - xi)]:
        assert abs(np.sum(P * Q)) < 1e-10 * np.linalg.norm(Z) ** 2  # orthogonal
    Rx = retract(A, B, 0.2 * Z)
    sv = np.linalg.svd(Rx, compute_uv=False)
    assert sv[k - 1] > 1e-3 * sv[0] and sv[k] < 1e-12 * sv[0]
    Z1, Z2 = algorithm1_factors(A, B, 0.2 * Z)
    assert rel(Z1 @ Z2.T, Rx) < 1e-12
    np.testing.assert_allclose(retract(A, B, 0 * Z), A @ B.T, rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------
# (1) one LORETA-1 step == Theorem 1
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed,n,k,eta", [(0, 8, 2, 0.3), (1, 12, 3, 1.0), (2, 15, 5, 0.05),
                                          (3, 10, 1, 2.0), (4, 7, 6, 0.5)])
def test_loreta1_step_is_theorem1_retraction(seed, n, k, eta, sparse):
    # Fails if the library's rank-one step (Algorithm 3) is not the retraction
    # R_x(P_x(eta q v^T)) of Theorem 1: any wrong coefficient (1/2, 3/8, 1/8),
    # a sign error in the gradient (the hinge pushes q^T W p1 up), a missing
    # projection term or a wrong pseudo-inverse shows up at O(eta) or O(eta^2).
    rng = np.random.default_rng(seed)
    X = make_X(rng, 25, n, sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    for trial in range(3):
        A, B = random_factors(rng, n, k, scale=0.7)
        t = pick_triplets(X, A @ B.T, rng, want_active=True, count=1)[0]
        model = primed(LORETA, Xin, A, B, rank=k, eta0=eta, pinv_check_every=10**9)
        np.testing.assert_array_equal(W_of(model), A @ B.T)
        model.partial_fit(Xin, [t])
        loss, G = triplet_grad(X, t, A @ B.T)
        assert loss > 0
        expected = retract(A, B, eta * G)
        assert rel(W_of(model), expected) < RTOL, rel(W_of(model), expected)
        # the step really moved W (else the comparison would be vacuous)
        assert rel(A @ B.T, expected) > 1e-3
        # the maintained transposed pseudo-inverses are those of the new factors
        np.testing.assert_allclose(model.pinv_A_, np.linalg.pinv(model.A_).T, rtol=1e-7,
                                   atol=1e-9 * np.abs(model.pinv_A_).max())
        np.testing.assert_allclose(model.pinv_B_, np.linalg.pinv(model.B_).T, rtol=1e-7,
                                   atol=1e-9 * np.abs(model.pinv_B_).max())
        assert model.t_ == 2


def test_loreta1_factors_are_algorithm1_outputs():
    # Stricter than the W check: Algorithms 1 and 3 specify the factors
    # themselves (Z1 = A(I + M/2 - M^2/8) + A_perp N2 (I - M/2), Z2 likewise).
    # Fails if the library returns other factors of the same W (e.g. rebalanced).
    rng = np.random.default_rng(10)
    n, k, eta = 11, 3, 0.4
    X = make_X(rng, 20, n)
    A, B = random_factors(rng, n, k, scale=0.7)
    t = pick_triplets(X, A @ B.T, rng, want_active=True, count=1)[0]
    model = primed(LORETA, X, A, B, rank=k, eta0=eta)
    model.partial_fit(X, [t])
    Z1, Z2 = algorithm1_factors(A, B, eta * triplet_grad(X, t, A @ B.T)[1])
    assert rel(model.A_, Z1) < RTOL and rel(model.B_, Z2) < RTOL


def test_inactive_triplet_leaves_model_unchanged():
    # Fails if the library steps on a triplet whose hinge loss is zero
    # (margin q^T W v >= 1) or moves W on v = 0 (zero gradient).
    rng = np.random.default_rng(11)
    n, k = 10, 3
    X = make_X(rng, 20, n)
    A, B = random_factors(rng, n, k, scale=1.5)
    T = pick_triplets(X, A @ B.T, rng, want_active=False, count=5)
    for cls, kw in [(LORETA, {}), (LORETA, {"batch_size": 3}), (FactoredGD, {}),
                    (IterativePA, {}), (NaivePA, {})]:
        model = primed(cls, X, A, B, rank=k, **kw)
        # ... and a last triplet whose p+ and p- are the same point (row 20
        # repeats row 4 at a distinct index): v = 0
        model.partial_fit(np.vstack([X, X[4]]), np.vstack([T, [[3, 4, 20]]]))
        if kw.get("batch_size", 1) == 1:
            # LORETA-1 and the baselines keep the very same factors
            np.testing.assert_array_equal(model.A_, A)
            np.testing.assert_array_equal(model.B_, B)
        else:
            # The general path (Algorithm 2) returns W re-factored in a balanced
            # form (A^T A = B^T B diagonal), not the literal Z1 = A + A_delta B_hat^T
            # of Algorithm 2 (which would be A itself for a zero gradient); only
            # W = A B^T is a property of the paper, so only W is compared.
            assert rel(W_of(model), A @ B.T) < 1e-13


# --------------------------------------------------------------------------
# (2) general LORETA (Algorithm 2)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_general_rank_one_equals_loreta1(sparse):
    # Fails if Algorithm 2 (solver="general") and Algorithm 3 disagree on
    # rank-one gradients, or if either leaves the Theorem 1 retraction; over a
    # 60-step run both are also compared with the dense reference loop.
    rng = np.random.default_rng(20)
    n, k, eta = 12, 3, 0.3
    X = make_X(rng, 30, n, sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    A, B = random_factors(rng, n, k, scale=0.5)
    T = np.array([rng.choice(30, 3, replace=False) for _ in range(60)])
    m1 = primed(LORETA, Xin, A, B, rank=k, eta0=eta)
    mg = primed(LORETA, Xin, A, B, rank=k, eta0=eta, solver="general")
    n_active = 0
    for t in T[:8]:  # step by step
        A0, B0 = m1.A_.copy(), m1.B_.copy()
        m1.partial_fit(Xin, [t])
        mg.partial_fit(Xin, [t])
        loss, G = triplet_grad(X, t, A0 @ B0.T)
        expected = retract(A0, B0, eta * G) if loss > 0 else A0 @ B0.T
        n_active += loss > 0
        assert rel(W_of(m1), expected) < RTOL
        assert rel(W_of(mg), expected) < RTOL
    assert n_active >= 3
    m1.partial_fit(Xin, T[8:])
    mg.partial_fit(Xin, T[8:])
    ref = loreta_ref(X, T, A, B, eta)
    assert rel(W_of(m1), ref) < 1e-7
    assert rel(W_of(mg), ref) < 1e-7
    # (the factors themselves may differ: the general path re-balances them)
    assert rel(W_of(mg), W_of(m1)) < 1e-8


@pytest.mark.parametrize("solver", ["auto", "general"])
@pytest.mark.parametrize("sparse", [False, True])
def test_batch3_step_is_theorem1_with_rank3_gradient(solver, sparse):
    # Fails if a batch step is not R_x(P_x(Z)) with Z = (eta/r) sum_active q v^T:
    # wrong normalization (sum instead of mean, dividing by the number of
    # active triplets instead of r), inactive triplets contributing, losses
    # evaluated at a moving W within the block, or Algorithm 2 mis-implemented
    # for r > 1 (the rank-r cross terms Q = B^T A hat are where it differs).
    rng = np.random.default_rng(30)
    n, k, eta, r = 12, 3, 0.6, 3
    X = make_X(rng, 30, n, sparse=sparse)
    Xin = sp.csr_matrix(X) if sparse else X
    for trial in range(3):
        A, B = random_factors(rng, n, k, scale=0.8)
        W = A @ B.T
        act = pick_triplets(X, W, rng, True, 3)
        ina = pick_triplets(X, W, rng, False, 1)
        blocks = [act[:3], np.vstack([act[:2], ina])]  # 3 active / 2 active + 1 inactive
        for block in blocks:
            model = primed(LORETA, Xin, A, B, rank=k, eta0=eta, batch_size=r,
                           solver=solver)
            model.partial_fit(Xin, block)
            Z = sum(G for loss, G in (triplet_grad(X, t, W) for t in block) if loss > 0)
            expected = retract(A, B, eta / r * Z)
            assert rel(W_of(model), expected) < RTOL, rel(W_of(model), expected)
            assert model.t_ == 1 + r
            # ... and not the single-triplet steps taken one after another
            assert rel(W_of(model), loreta_ref(X, block, A, B, eta)) > 1e-4


def test_batch_short_last_block_and_several_blocks():
    # Fails if blocks are not consecutive groups of batch_size triplets, or if
    # the last, shorter block is not averaged over its own length (5 triplets
    # with batch_size=3: blocks of 3 and 2).
    rng = np.random.default_rng(31)
    n, k, eta = 10, 2, 0.5
    X = make_X(rng, 25, n)
    A, B = random_factors(rng, n, k, scale=0.3)  # small W: most triplets active
    T = np.array([rng.choice(25, 3, replace=False) for _ in range(5)])
    model = primed(LORETA, X, A, B, rank=k, eta0=eta, batch_size=3)
    model.partial_fit(X, T)
    ref = loreta_ref(X, T, A, B, eta, batch=3)
    assert rel(W_of(model), ref) < RTOL
    model2 = primed(LORETA, X, A, B, rank=k, eta0=eta, batch_size=3)
    model2.partial_fit(X, np.vstack([T, T, T]))
    ref2 = loreta_ref(X, np.vstack([T, T, T]), A, B, eta, batch=3)
    assert rel(W_of(model2), ref2) < 1e-7


# --------------------------------------------------------------------------
# (3) rank preserved, pseudo-inverses maintained over a long run
# --------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["identity", "random"])
def test_long_run_rank_and_pinv_drift(init):
    # Fails if the rank-one pseudo-inverse update (Meyer's procedure, Alg. 3)
    # is wrong or numerically unstable: the maintained pinv_A_, pinv_B_ would
    # drift from np.linalg.pinv of the factors (no refresh is allowed here:
    # pinv_check_every is larger than the run), and the steps, which use them,
    # would leave the Theorem 1 trajectory.  Also fails if W leaves M_k
    # (rank != k).  The observed drift is printed (run pytest -s).
    rng = np.random.default_rng(40 if init == "identity" else 41)
    n, k, eta, n_samples = 10, 3, 0.05, 40
    X = make_X(rng, n_samples, n)
    y = rng.integers(0, 4, n_samples)
    # 20,000 class triplets of distinct rows, drawn in bulk (uniform over the
    # ordered distinct triples, as rng.choice(n, 3, replace=False) one by one)
    T = rng.integers(0, n_samples, size=(200000, 3))
    ok = (T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])
    ok &= (y[T[:, 0]] == y[T[:, 1]]) & (y[T[:, 0]] != y[T[:, 2]])
    T = T[ok][:20000]
    assert len(T) == 20000
    model = LORETA(preprocessing=None, rank=k, eta0=eta, init=init, pinv_check_every=10**9, random_state=0)
    model.partial_fit(X, T[:1])
    A0, B0 = model.A_.copy(), model.B_.copy()
    if init == "identity":
        Ik0 = np.vstack([np.eye(k), np.zeros((n - k, k))])
        # the step on T[0] from A = B = [I_k; 0]
        np.testing.assert_allclose(W_of(model), loreta_ref(X, T[:1], Ik0, Ik0, eta), rtol=1e-10,
                                   atol=1e-12)
    drift_A = drift_B = ident = 0.0
    for s in range(1, len(T), 2000):
        model.partial_fit(X, T[s:s + 2000])
        for P, F in [(model.pinv_A_, model.A_), (model.pinv_B_, model.B_)]:
            d = rel(P, np.linalg.pinv(F).T)
            if F is model.A_:
                drift_A = max(drift_A, d)
            else:
                drift_B = max(drift_B, d)
            ident = max(ident, np.linalg.norm(P.T @ F - np.eye(k)))
        sv = np.linalg.svd(W_of(model), compute_uv=False)
        assert sv[k - 1] > 1e-4 * sv[0], sv
        assert np.all(sv[k:] < 1e-12 * sv[0]), sv
    assert model.t_ == len(T)
    assert model.n_pinv_refresh_ == 0  # nothing hid the drift
    print(f"\n[{init}] max rel drift pinv_A_ {drift_A:.2e}, pinv_B_ {drift_B:.2e}, "
          f"max ||pinv^T F - I||_F {ident:.2e}, cond(A_) {np.linalg.cond(model.A_):.1f}, "
          f"cond(B_) {np.linalg.cond(model.B_):.1f}, final mistake rate "
          f"{model.history_['mistake_rate'][-1]:.3f}")
    assert drift_A < 1e-8 and drift_B < 1e-8
    assert ident < 1e-8
    # the whole 20,000-step trajectory equals the dense Theorem 1 loop
    ref = loreta_ref(X, T[1:], A0, B0, eta)
    err = rel(W_of(model), ref)
    print(f"[{init}] 20,000-step rel. error vs dense reference: {err:.2e}")
    assert err < 1e-6


def test_pinv_refresh_when_drift_exceeds_tol():
    # Fails if the drift check never refreshes: with an artificially corrupted
    # maintained pseudo-inverse and pinv_check_every=1, the model must detect
    # ||A^+ A - I|| > pinv_tol and recompute (n_pinv_refresh_ grows, and the
    # pseudo-inverses are exact again).
    rng = np.random.default_rng(45)
    n, k = 10, 3
    X = make_X(rng, 20, n)
    A, B = random_factors(rng, n, k)
    model = primed(LORETA, X, A, B, rank=k, eta0=0.1, pinv_check_every=1, pinv_tol=1e-8)
    model.pinv_A_ = model.pinv_A_ * (1 + 1e-4)
    before = model.n_pinv_refresh_
    T = pick_triplets(X, A @ B.T, rng, want_active=False, count=1)
    model.partial_fit(X, np.vstack([T, pick_triplets(X, A @ B.T, rng, True, 1)]))
    assert model.n_pinv_refresh_ > before
    np.testing.assert_allclose(model.pinv_A_, np.linalg.pinv(model.A_).T, rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------
# (4) second-order retraction
# --------------------------------------------------------------------------
def test_second_order_retraction_dense_and_library():
    # Centering R_x(0) = x; local rigidity: ||R_x(t xi) - x|| / t -> ||xi|| (it
    # does not vanish), ||R_x(t xi) - x - t xi|| / t^2 stays bounded; second
    # order: the tangent part of that error is O(t^3), i.e. P_x(d^2 R / dt^2) = 0.
    # Fails for a mere first-order map (e.g. x + t xi followed by any other
    # rank-k map) or a wrong coefficient in eq. 3 (a 1/8 -> 1/4 change puts an
    # O(t^2) term into the tangent space).
    rng = np.random.default_rng(50)
    n, k = 9, 3
    X = make_X(rng, 20, n)
    A, B = random_factors(rng, n, k, scale=0.6)
    x = A @ B.T
    t_idx = pick_triplets(X, x, rng, True, 1)[0]
    _, G = triplet_grad(X, t_idx, x)  # the loss is linear in W: grad is fixed
    xi = project(A, B, G)
    np.testing.assert_allclose(retract(A, B, 0 * G), x, rtol=1e-13, atol=1e-14)  # centering
    ts = [1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4]
    first, second, tang = [], [], []
    lib_first, lib_second, lib_tang = [], [], []
    for t in ts:
        R = retract(A, B, t * G)  # = R_x(t xi) since P_x is linear
        first.append(np.linalg.norm(R - x) / t)
        second.append(np.linalg.norm(R - x - t * xi) / t**2)
        tang.append(np.linalg.norm(project(A, B, R - x - t * xi)) / t**2)
        model = primed(LORETA, X, A, B, rank=k, eta0=t)
        model.partial_fit(X, [t_idx])
        Wt = W_of(model)
        assert rel(Wt, R) < RTOL
        lib_first.append(np.linalg.norm(Wt - x) / t)
        lib_second.append(np.linalg.norm(Wt - x - t * xi) / t**2)
        lib_tang.append(np.linalg.norm(project(A, B, Wt - x - t * xi)) / t**2)
    nxi = np.linalg.norm(xi)
    for f in (first, lib_first):
        np.testing.assert_allclose(f[-1], nxi, rtol=1e-3)  # rigidity, not vanishing
    for s in (second, lib_second):
        assert max(s) < 2 * s[0] + 1e-12 and s[-1] > 0.1 * s[0]  # bounded, O(t^2) really
    # tangent part / t^2 goes to 0 like t: ratio at t and t/10 about 10
    for tg, s in ((tang, second), (lib_tang, lib_second)):
        assert tg[2] < tg[0] / 5 and tg[4] < tg[2] / 5, tg
        assert tg[4] < 1e-3 * s[4]


# --------------------------------------------------------------------------
# (5) baselines: step by step
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind,cls", [("gd", FactoredGD), ("iterative", IterativePA),
                                      ("naive", NaivePA)])
@pytest.mark.parametrize("init", ["set", "identity"])
def test_baselines_step_by_step(kind, cls, init):
    # Fails on any deviation from the paper's update formulas (with the min/C
    # and B-typo readings): wrong factor order, the B update of GD computed
    # from the new A, iterative PA not recomputing the loss after updating A,
    # PA v2 using the factored step size, a cap not applied, or the hinge
    # condition ignored.  The cap is checked to be both hit and missed.
    rng = np.random.default_rng(60)
    n, k, eta, C = 10, 3, 0.1, 0.6
    X = make_X(rng, 30, n)
    T = np.array([rng.choice(30, 3, replace=False) for _ in range(150)])
    # each baseline has exactly the parameter its update uses: eta0 or C
    step = {"eta0": eta} if cls is FactoredGD else {"C": C}
    if init == "set":
        A, B = random_factors(rng, n, k, scale=0.5)
        model = primed(cls, X, A, B, rank=k, **step)
    else:
        A = B = np.vstack([np.eye(k), np.zeros((n - k, k))])
        model = cls(preprocessing=None, rank=k, init="identity", **step)
    trace = []
    n_moves = 0
    for (Ar, Br), t in zip(baseline_ref(kind, X, T, A, B, eta, C, trace), T):
        Wold = W_of(model) if hasattr(model, "A_") else None
        model.partial_fit(X, [t])
        np.testing.assert_allclose(model.A_, Ar, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(model.B_, Br, rtol=1e-10, atol=1e-12)
        if Wold is not None and not np.array_equal(Wold, W_of(model)):
            n_moves += 1
    assert n_moves > 20
    if kind != "gd":
        assert any(trace) and not all(trace), (sum(trace), len(trace))


def test_iterative_pa_b_update_only_when_loss_remains():
    # Uncapped eta_A makes the A update zero the loss exactly, so B must stay
    # (up to rounding); with a tiny C the loss remains and B moves by eta_B.
    # Fails if B is always updated with the old loss, or never.
    rng = np.random.default_rng(61)
    n, k = 8, 2
    X = make_X(rng, 15, n)
    A, B = random_factors(rng, n, k, scale=0.5)
    t = pick_triplets(X, A @ B.T, rng, True, 1)[0]
    big = primed(IterativePA, X, A, B, rank=k, C=1e6)
    big.partial_fit(X, [t])
    np.testing.assert_allclose(big.B_, B, rtol=0, atol=1e-12)
    assert 1 - X[t[0]] @ W_of(big) @ (X[t[1]] - X[t[2]]) == pytest.approx(0, abs=1e-12)
    small = primed(IterativePA, X, A, B, rank=k, C=1e-3)
    small.partial_fit(X, [t])
    (Ar, Br), = list(baseline_ref("iterative", X, [t], A, B, 0.0, 1e-3))
    assert np.linalg.norm(Br - B) > 1e-6
    np.testing.assert_allclose(small.A_, Ar, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(small.B_, Br, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------
# (6) sparse CSR == dense
# --------------------------------------------------------------------------
@pytest.mark.parametrize("cls,params", [
    (LORETA, {"eta0": 0.2, "init": "identity"}),
    (LORETA, {"eta0": 0.2, "solver": "general", "init": "identity"}),
    (LORETA, {"eta0": 0.2, "batch_size": 3, "init": "identity"}),
    (LORETA, {"eta0": 0.2, "init": "random"}),
    (FactoredGD, {"eta0": 0.05}),
    (IterativePA, {"C": 0.5}),
    (NaivePA, {"C": 0.5, "init": "random"}),
])
def test_sparse_and_dense_give_same_model(cls, params):
    # Fails if the CSR path (never densified) computes different products,
    # norms or losses than the dense path: fit over 2 epochs (same seed, so the
    # same triplet order) and partial_fit must give the same factors.  The CSR
    # matrix has unsorted indices and an explicit zero, to exercise the raw
    # sparse structure.
    rng = np.random.default_rng(70)
    n, k = 14, 3
    X = make_X(rng, 40, n, sparse=True, density=0.35)
    Xs = sp.csr_matrix(X)
    Xs = sp.csr_matrix((Xs.data, Xs.indices, Xs.indptr), shape=X.shape)
    # reverse indices within each row (unsorted) and add an explicit zero to row 0
    rows = []
    for i in range(X.shape[0]):
        idx = Xs.indices[Xs.indptr[i]:Xs.indptr[i + 1]][::-1]
        rows.append((idx, X[i, idx]))
    zero_col = int(np.flatnonzero(X[0] == 0)[0])
    rows[0] = (np.append(rows[0][0], zero_col), np.append(rows[0][1], 0.0))
    indptr = np.cumsum([0] + [len(r[0]) for r in rows])
    Xs = sp.csr_matrix((np.concatenate([r[1] for r in rows]),
                        np.concatenate([r[0] for r in rows]), indptr), shape=X.shape)
    assert not Xs.has_sorted_indices or Xs.nnz > np.count_nonzero(X)
    np.testing.assert_array_equal(Xs.toarray(), X)
    y = rng.integers(0, 3, 40)
    T = np.array([t for t in (rng.choice(40, 3, replace=False) for _ in range(3000))
                  if y[t[0]] == y[t[1]] != y[t[2]]][:300])
    common = dict(preprocessing=None, rank=k, max_iter=2, random_state=3, **params)
    md = cls(**common).fit(X, triplets=T)
    ms = cls(**common).fit(Xs.copy(), triplets=T)
    np.testing.assert_allclose(ms.A_, md.A_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ms.B_, md.B_, rtol=1e-9, atol=1e-12)
    assert not np.allclose(W_of(md), np.eye(n)[:, :k] @ np.eye(n)[:, :k].T)  # it learned
    pd = cls(**common).partial_fit(X, T)
    ps = cls(**common).partial_fit(Xs.copy(), T)
    np.testing.assert_allclose(ps.A_, pd.A_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ps.B_, pd.B_, rtol=1e-9, atol=1e-12)
    if cls is LORETA and params.get("init") == "identity":
        # partial_fit from the identity start also equals the dense reference
        I0 = np.vstack([np.eye(k), np.zeros((n - k, k))])
        ref = loreta_ref(X, T, I0, I0, params["eta0"], batch=params.get("batch_size", 1))
        assert rel(W_of(pd), ref) < 1e-7
