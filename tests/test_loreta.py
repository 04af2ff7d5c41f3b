"""LORETA against the dense retraction of Theorem 1 (Shalit et al. 2010),
and the factored baselines against plain loops."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.linalg.pinv import balanced_factors
from tripletml.algorithms.loreta.kernels import loreta_general_step


def dense_retraction(A, B, Z):
    """R_x(P_x(Z)) = w1 x^+ w2 (Theorem 1, eq. 3) with full matrices."""
    n, m = A.shape[0], B.shape[0]
    x = A @ B.T
    PA = A @ np.linalg.pinv(A)
    PB = B @ np.linalg.pinv(B)
    xS = PA @ Z @ PB
    xl = PA @ Z @ (np.eye(m) - PB)
    xr = (np.eye(n) - PA) @ Z @ PB
    xp = np.linalg.pinv(x)
    w1 = x + 0.5 * xS + xr - xS @ xp @ xS / 8 - 0.5 * xr @ xp @ xS
    w2 = x + 0.5 * xS + xl - xS @ xp @ xS / 8 - 0.5 * xS @ xp @ xl
    return w1 @ xp @ w2


def _violated_triplet(X, A, B):
    """A triplet with positive hinge loss (so the step is not passive)."""
    W = A @ B.T
    for q in range(X.shape[0]):
        for p in range(X.shape[0]):
            for s in range(X.shape[0]):
                if len({q, p, s}) == 3 and X[q] @ W @ (X[p] - X[s]) < 0.5:
                    return q, p, s
    raise AssertionError("no violated triplet")


def _no_step_init(X):
    """``(X', T)`` for a first ``partial_fit`` that only initializes: X' is X
    with row 0 repeated at the end (row n), and T = [[1, 0, n]] has a positive
    and a negative that are the same point at distinct indices, so
    v = x_p+ - x_p- = 0, the gradient vanishes and the step does not move W."""
    n = X.shape[0]
    Xd = sp.vstack([X, X[:1]]).tocsr() if sp.issparse(X) else np.vstack([X, X[:1]])
    return Xd, [[1, 0, n]]


def _model_at(X, A, B, **params):
    """A LORETA model initialized on X, then set to the factors A, B."""
    m = tm.LORETA(preprocessing=None, rank=A.shape[1], **params).partial_fit(*_no_step_init(X))
    m.A_, m.B_ = A.copy(), B.copy()
    m.pinv_A_, m.pinv_B_ = np.linalg.pinv(A).T.copy(), np.linalg.pinv(B).T.copy()
    return m


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_step_equals_theorem_1(sparse, seed):
    rng = np.random.default_rng(seed)
    n, k = 15, 4
    X = rng.normal(size=(10, n))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    A, B = rng.normal(size=(n, k)), rng.normal(size=(n, k))
    m = _model_at(sp.csr_matrix(X) if sparse else X, A, B, eta0=0.05)
    q, p, neg = _violated_triplet(X, A, B)
    m.partial_fit(sp.csr_matrix(X) if sparse else X, [[q, p, neg]])
    R = dense_retraction(A, B, 0.05 * np.outer(X[q], X[p] - X[neg]))
    W = m.A_ @ m.B_.T
    assert np.linalg.norm(W - R) <= 1e-8 * np.linalg.norm(R)
    assert np.linalg.norm(W - A @ B.T) > 1e-3  # and it moved
    np.testing.assert_allclose(m.pinv_A_.T, np.linalg.pinv(m.A_), atol=1e-10)
    np.testing.assert_allclose(m.pinv_B_.T, np.linalg.pinv(m.B_), atol=1e-10)


def test_general_algorithm_agrees_with_loreta1_and_theorem_1():
    rng = np.random.default_rng(7)
    n, k = 12, 3
    X = rng.normal(size=(12, n))
    A, B = rng.normal(size=(n, k)), rng.normal(size=(n, k))
    t = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]])
    a = _model_at(X, A, B, eta0=0.02)
    b = _model_at(X, A, B, eta0=0.02, solver="general")
    a.partial_fit(X, t)
    b.partial_fit(X, t)
    np.testing.assert_allclose(a.A_ @ a.B_.T, b.A_ @ b.B_.T, rtol=1e-9, atol=1e-12)
    # a rank-3 mini-batch step is Theorem 1 with Z = (eta / r) sum_active q v^T
    c = _model_at(X, A, B, eta0=0.3, batch_size=3)
    c.partial_fit(X, t[:3])
    Z = sum(np.outer(X[q], X[p] - X[s]) for q, p, s in t[:3]
            if X[q] @ A @ B.T @ (X[p] - X[s]) < 1) * (0.3 / 3)
    R = dense_retraction(A, B, Z)
    assert np.linalg.norm(c.A_ @ c.B_.T - R) <= 1e-8 * np.linalg.norm(R)
    A2, B2 = loreta_general_step(A, B, 0.3 / 3 * np.stack([X[q] for q, _, _ in t[:3]], 1),
                                 np.stack([X[p] - X[s] for _, p, s in t[:3]], 1))
    assert np.linalg.norm(A2 @ B2.T - dense_retraction(
        A, B, 0.1 * sum(np.outer(X[q], X[p] - X[s]) for q, p, s in t[:3]))) < 1e-8


def test_retraction_is_second_order():
    rng = np.random.default_rng(8)
    n, k = 10, 3
    X = rng.normal(size=(6, n))
    A, B = rng.normal(size=(n, k)), rng.normal(size=(n, k))
    q, p, s = _violated_triplet(X, A, B)
    Z = np.outer(X[q], X[p] - X[s])
    PA, PB = A @ np.linalg.pinv(A), B @ np.linalg.pinv(B)
    xi = Z - (np.eye(n) - PA) @ Z @ (np.eye(n) - PB)  # P_x(Z)
    x = A @ B.T
    ratios, firsts = [], []
    for t in [1e-1, 1e-2, 1e-3]:
        m = _model_at(X, A, B, eta0=t)
        m.partial_fit(X, [[q, p, s]])
        R = m.A_ @ m.B_.T
        ratios.append(np.linalg.norm(R - (x + t * xi)) / t**2)
        firsts.append(np.linalg.norm(R - x) / t)
    assert max(ratios) < 10 * min(ratios) + 1e-6     # error ~ t^2: bounded ratio
    assert min(firsts) > 0.5 * np.linalg.norm(xi)    # first order: R - x ~ t xi
    assert ratios[-1] < 1e3                          # and not ~ 1/t


def test_rank_stays_k_and_pinv_drift_is_bounded_over_1e5_steps():
    rng = np.random.default_rng(9)
    n, k = 20, 4
    X = rng.normal(size=(60, n)) / np.sqrt(n)
    y = np.arange(60) % 3
    t = tm.triplets.random_class_triplets(y, 100_000, random_state=0)
    m = tm.LORETA(preprocessing=None, rank=k, eta0=0.05, pinv_check_every=1000, pinv_tol=1e-8,
                  init="random", random_state=0)
    m.partial_fit(X, t)
    s = np.linalg.svd(m.A_ @ m.B_.T, compute_uv=False)
    assert s[k - 1] > 1e-6 * s[0] and s[k] < 1e-10 * s[0]     # rank exactly k
    # the tolerance stated in the docs: drift <= pinv_tol at every check
    assert m.history_["pinv_drift"][-1] < 1e-6
    assert np.linalg.norm(m.pinv_A_.T @ m.A_ - np.eye(k)) < 1e-8
    assert np.linalg.norm(m.pinv_B_.T @ m.B_ - np.eye(k)) < 1e-8
    assert m.t_ == 100_000


def test_pinv_drift_without_refresh_stays_small():
    rng = np.random.default_rng(10)
    n, k = 20, 4
    X = rng.normal(size=(60, n)) / np.sqrt(n)
    y = np.arange(60) % 3
    t = tm.triplets.random_class_triplets(y, 20_000, random_state=1)
    m = tm.LORETA(preprocessing=None, rank=k, eta0=0.05, pinv_check_every=10**9, init="random",
                  random_state=0).partial_fit(X, t)
    assert m.n_pinv_refresh_ == 0
    drift = np.linalg.norm(m.pinv_A_.T @ m.A_ - np.eye(k))
    assert drift < 1e-6, drift


def test_refresh_rebalances_without_changing_W():
    # unstructured data (random labels): the loss never vanishes and, without
    # re-balancing, A grows while B shrinks until cond(A) ~ 1e12 and the
    # maintained pseudo-inverses are meaningless.  Refreshes keep them exact.
    rng = np.random.default_rng(11)
    X = rng.normal(size=(30, 8))
    y = np.arange(30) % 3
    m = tm.LORETA(preprocessing=None, rank=3, eta0=0.05, n_triplets=60_000, pinv_check_every=1000,
                  pinv_tol=1e-8, random_state=0).fit(X, y)
    assert m.n_pinv_refresh_ > 0
    assert max(m.history_["pinv_drift"]) < 1e-6
    assert np.linalg.cond(m.A_) < 1e4 and np.linalg.cond(m.B_) < 1e4
    np.testing.assert_allclose(m.pinv_A_.T, np.linalg.pinv(m.A_), atol=1e-8)
    W = m.A_ @ m.B_.T
    A, B, PA, PB = balanced_factors(m.A_, m.B_)      # the refresh the drift control makes
    np.testing.assert_allclose(A @ B.T, W, atol=1e-10 * np.abs(W).max())
    np.testing.assert_allclose(A.T @ A, B.T @ B, atol=1e-10 * np.abs(W).max())
    np.testing.assert_allclose(PA.T, np.linalg.pinv(A), atol=1e-8)


def test_identity_init_and_errors():
    X = np.random.default_rng(0).normal(size=(10, 6))
    m = tm.LORETA(preprocessing=None, rank=2, init="identity").partial_fit(*_no_step_init(X))
    np.testing.assert_array_equal(m.A_ @ m.B_.T, np.diag([1, 1, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="LORETA: rank=7 exceeds the number of features"):
        tm.LORETA(preprocessing=None, rank=7).partial_fit(X, [[0, 1, 2]])


# ---------------------------------------------------------------- baselines
def ref_factored(method, X, triplets, A, B, eta, C):
    A, B = A.copy(), B.copy()
    for q, p, s in triplets:
        xq, v = X[q], X[p] - X[s]
        loss = 1 - xq @ A @ B.T @ v
        if loss <= 0:
            continue
        if method == "gd":
            A, B = A + eta * np.outer(xq, B.T @ v), B + eta * np.outer(v, A.T @ xq)
        elif method == "pa2":
            e = min(loss / (xq @ xq * (v @ v)), C)
            A, B = A + e * np.outer(xq, B.T @ v), B + e * np.outer(v, A.T @ xq)
        else:
            ea = min(loss / (xq @ xq * np.sum((B.T @ v) ** 2)), C)
            A = A + ea * np.outer(xq, B.T @ v)
            loss2 = 1 - xq @ A @ B.T @ v
            if loss2 > 0:
                eb = min(loss2 / (v @ v * np.sum((A.T @ xq) ** 2)), C)
                B = B + eb * np.outer(v, A.T @ xq)
    return A, B


@pytest.mark.parametrize("cls, method", [(tm.FactoredGD, "gd"), (tm.IterativePA, "pa"),
                                         (tm.NaivePA, "pa2")])
@pytest.mark.parametrize("sparse", [False, True])
def test_factored_baselines_match_loops(cls, method, sparse):
    rng = np.random.default_rng(12)
    X = rng.normal(size=(30, 9))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    y = np.arange(30) % 3
    t = tm.triplets.random_class_triplets(y, 300, random_state=0)
    Xin = sp.csr_matrix(X) if sparse else X
    step = {"eta0": 0.01} if cls is tm.FactoredGD else {"C": 0.5}   # only what the rule uses
    m = cls(preprocessing=None, rank=3, init="random", random_state=0, **step)
    m.partial_fit(*_no_step_init(Xin))
    A0, B0 = m.A_.copy(), m.B_.copy()
    m.partial_fit(Xin, t)
    A, B = ref_factored(method, X, t, A0, B0, 0.01, 0.5)
    np.testing.assert_allclose(m.A_, A, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.B_, B, rtol=1e-9, atol=1e-12)
    assert not np.allclose(A, A0)


def test_loreta_learns_on_digits():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    m = tm.LORETA(preprocessing=None, rank=10, eta0=0.01, n_triplets=30000, random_state=0)
    m.fit(X[:1200], y[:1200])
    e = tm.Euclidean().fit(X[:1200])
    assert m.score(X[1200:], y[1200:]) > e.score(X[1200:], y[1200:]) + 0.05


# ------------------------------------------- divergence and stopping (12, 13)
@pytest.mark.data
def test_loreta_defaults_on_vowel_stop_with_advice(data_home):
    # issue 13 item 6: the defaults (eta0=0.1, rank 10 = d) blow the loss up
    # from 0.7 to hundreds within the first pass and used to return a model
    # worse than Euclidean without a word.  Now the block watch stops it.
    from tripletml import datasets
    b = datasets.load("vowel", data_home=data_home)
    X = b.data.toarray() if hasattr(b.data, "toarray") else np.asarray(b.data)
    with pytest.raises(FloatingPointError, match=r"LORETA: training diverged .*steps 1-5000.*"
                                                 r"lower the step size \(eta0\)"):
        tm.LORETA(preprocessing=None, rank=10, eta0=0.1, random_state=0).fit(X, b.target)
    with pytest.raises(FloatingPointError, match="LORETA: training diverged"):
        tm.LORETA(preprocessing=None, rank=10, eta0=0.1, n_triplets=10_000,
                  random_state=0).fit(X, b.target)
    m = tm.LORETA(preprocessing=None, rank=5, eta0=0.1, random_state=0).fit(X, b.target)  # a sane setting passes
    assert m.score(X, b.target) > tm.Euclidean().fit(X).score(X, b.target)


def test_a_blow_up_within_the_first_steps_is_caught_by_the_initial_loss():
    rng = np.random.default_rng(20)
    X = rng.normal(size=(40, 6)) * 3
    y = np.arange(40) % 3
    with pytest.raises(FloatingPointError, match="FactoredGD: training diverged"):
        tm.FactoredGD(preprocessing=None, rank=3, eta0=1.0, n_triplets=2000, random_state=0).fit(X, y)


@pytest.mark.parametrize("make", [
    lambda **kw: tm.LORETA(preprocessing=None, rank=2, eta0=0.01, **kw),
    lambda **kw: tm.FactoredGD(preprocessing=None, rank=2, eta0=0.01, **kw),
    lambda **kw: tm.IterativePA(preprocessing=None, rank=2, **kw),
    lambda **kw: tm.NaivePA(preprocessing=None, rank=2, **kw)])
def test_online_convergence_warning_only_with_tol(make):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    rng = np.random.default_rng(21)
    X = rng.normal(size=(30, 5)) / 2
    y = np.arange(30) % 3
    name = type(make()).__name__
    with pytest.warns(ConvergenceWarning, match=f"{name}: stopped at max_iter=1"):
        m = make(max_iter=1, tol=1e-4, n_triplets=200, random_state=0).fit(X, y)
    assert (m.n_iter_, m.stop_reason_, m.t_) == (1, "max_iter", 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = make(max_iter=3, tol=None, n_triplets=200, random_state=0).fit(X, y)
    assert (m.n_iter_, m.stop_reason_, m.t_) == (3, "max_iter", 600)
    m = make(max_iter=100, tol=0.9, n_triplets=200, random_state=0).fit(X, y)
    assert m.stop_reason_ == "tol" and m.n_iter_ == len(m.history_["loss"]) < 100
    m.partial_fit(X, [[0, 1, 2]])
    assert (m.n_iter_, m.stop_reason_) == (1, "max_iter")


def test_removed_parameters_are_gone():
    # only what the update rule uses (issue 12): no C in GD, no eta0 in the PAs
    assert "C" not in tm.FactoredGD(preprocessing=None).get_params() and "eta0" in tm.FactoredGD(preprocessing=None).get_params()
    for cls in (tm.IterativePA, tm.NaivePA):
        assert "eta0" not in cls().get_params() and "C" in cls().get_params()
    for cls in (tm.LORETA, tm.FactoredGD, tm.IterativePA, tm.NaivePA, tm.OASIS, tm.SDCA):
        p = cls().get_params()
        assert {"max_iter", "tol"} <= set(p) and not {"n_epochs", "step_size", "lam"} & set(p)


from hypothesis import given, reject, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(3, 9), k=st.integers(1, 3),
       batch=st.sampled_from([1, 1, 3]), init=st.sampled_from(["identity", "random"]))
def test_property_rank_stays_exactly_k(seed, d, k, batch, init):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(25, d)) / np.sqrt(d)
    y = rng.integers(0, 3, size=25)
    y[:3] = [0, 1, 2]
    m = tm.LORETA(preprocessing=None, rank=k, eta0=0.1, batch_size=batch, init=init, n_triplets=300,
                  random_state=seed)
    try:
        m.fit(X, y)
    except FloatingPointError:   # the divergence watch stopped it (e.g. seed 232, d=k=3)
        reject()
    s = np.linalg.svd(m.A_ @ m.B_.T, compute_uv=False)
    assert s[k - 1] > 1e-8 * s[0]                        # k non-zero singular values
    assert k == d or s[k] <= 1e-10 * s[0]                # and no more
    assert m.A_.shape == m.B_.shape == (d, k)
    np.testing.assert_allclose(m.pinv_A_.T @ m.A_, np.eye(k), atol=1e-6)


# ------------------------------------------- defaults (issue 14 item 1)
def _blobs(d, scale, shift, n=90, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    centers = rng.normal(size=(3, d)) * 2.0
    return shift + scale * (centers[y] + rng.normal(size=(n, d))), y


@pytest.mark.parametrize("cls", [tm.LORETA, tm.FactoredGD])
def test_eta0_auto_resolves_to_a_finite_step_that_does_not_diverge(cls):
    # N(100, 1)-scale raw features: a constant step of 0.1 blows up at once
    X, y = _blobs(6, 1.0, 100.0)
    with pytest.raises(FloatingPointError, match=f"{cls.__name__}: training diverged"):
        cls(preprocessing=None, rank=3, eta0=0.1, n_triplets=3000, random_state=0).fit(X, y)
    m = cls(preprocessing=None, rank=3, n_triplets=3000, random_state=0).fit(X, y)
    assert m.eta0 == "auto" and np.isfinite(m.eta_) and m.eta_ > 0
    # the resolved step is the formula on the (unpreprocessed) sampled triplets
    from tripletml.core.online import AUTO_ETA_HEAD
    assert np.isfinite(m.A_).all() and np.isfinite(m.B_).all()
    # the same step for a data set scaled by s is s^-4 times the step
    m2 = cls(preprocessing=None, rank=3, n_triplets=3000, random_state=0).fit(X * 10.0, y)
    assert m2.eta_ == pytest.approx(m.eta_ * 1e-4, rel=1e-9)
    assert AUTO_ETA_HEAD == 1000


def test_eta0_auto_formula_against_a_dense_loop():
    from tripletml.core.online import auto_step_size
    from tripletml.linalg.sparse_rows import as_csr
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4)) * 3 + 1
    T = rng.integers(0, 50, size=(1500, 3))
    head = T[:1000]
    qq = np.median([X[a] @ X[a] for a, _, _ in head])
    vv = np.median([(X[b] - X[c]) @ (X[b] - X[c]) for _, b, c in head])
    assert auto_step_size(as_csr(X), T, 0.2) == pytest.approx(0.2 / (qq * vv), rel=1e-12)


def test_explicit_eta0_is_used_as_is():
    X, y = _blobs(5, 1.0, 0.0)
    m = tm.LORETA(preprocessing=None, rank=2, eta0=0.005, n_triplets=300, random_state=0).fit(X, y)
    assert m.eta_ == 0.005
    for bad in ("fast", -1.0, 0.0):
        with pytest.raises((TypeError, ValueError), match="LORETA: parameter eta0"):
            tm.LORETA(eta0=bad).fit(X, y)


@pytest.mark.parametrize("cls", [tm.LORETA, tm.FactoredGD, tm.IterativePA, tm.NaivePA])
def test_default_rank_on_four_features(cls):
    # rank=None: the smallest rank holding ENERGY_SHARE of the preprocessed
    # rows' energy, capped at min(RANK_CAP, d) (LORETA: d // 2, below d)
    from tripletml.algorithms.factored.estimator import data_spectrum, spectral_rank
    pp = dict(preprocessing="standardize")
    for d in (4, 12):
        X, y = _blobs(d, 1.0, 5.0 if d == 4 else 0.0)
        m = cls(n_triplets=300, random_state=0, **pp).fit(X, y)
        cap = max(1, d // 2) if cls is tm.LORETA else d
        Xs = m.scaler_.transform(X)
        assert m.rank is None and 1 <= m.rank_ <= cap and m.A_.shape == (d, m.rank_)
        assert m.rank_ == spectral_rank(data_spectrum(Xs, cap), cap)
    X, y = _blobs(4, 1.0, 5.0)
    with pytest.raises(ValueError, match=f"{cls.__name__}: rank=5 exceeds the number of features"):
        cls(rank=5, n_triplets=100, **pp).fit(X, y)


def test_gaussian_classes_rank_8_above_the_dot_product():
    """Issue 43: five Gaussian classes, 800 rows x 200 features, 500 for
    training.  LORETA rank 8 with the start on the coordinate axes (k of d
    features) reached mAP .51 against the dot product's .75; from the
    principal subspace it must be above the dot product by at least .05."""
    from tripletml.metrics import validation_score
    rng = np.random.default_rng(0)
    y = np.arange(800) % 5
    rng.shuffle(y)
    X = rng.normal(size=(5, 200))[y] * 0.35 + rng.normal(size=(800, 200))
    m = tm.LORETA(rank=8, n_triplets=20000, preprocessing=None, random_state=0)
    m.fit(X[:500], y[:500])
    dot = validation_score(tm.DotProduct().fit(X[:500]), X[500:], y[500:])
    assert validation_score(m, X[500:], y[500:]) > dot + 0.05


def test_algorithm_is_gone():
    """``algorithm`` (renamed ``solver``) was removed: not a parameter."""
    from tripletml import LORETA
    assert "algorithm" not in LORETA().get_params()
    with pytest.raises(TypeError):
        LORETA(algorithm="general")


def test_a_file_saved_with_algorithm_loads_without_warning(tmp_path):
    """A 0.1 model file stores ``algorithm``: it loads as ``solver`` (no
    FutureWarning, the same model); a file of the 0.2 development stores both
    (``algorithm="deprecated"``, the placeholder) and loads too."""
    import io
    import json
    import warnings
    import zipfile

    from tripletml import LORETA, load_model
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 6))
    y = np.repeat(np.arange(3), 10)
    m = LORETA(rank=2, n_triplets=100, random_state=0, solver="general").fit(X, y)
    m.save(tmp_path / "new.npz")

    def rewrite(target, edit):
        with zipfile.ZipFile(tmp_path / "new.npz") as src, \
                zipfile.ZipFile(tmp_path / target, "w") as dst:
            assert "__meta__.npy" in src.namelist()
            for name in src.namelist():
                data = src.read(name)
                if name == "__meta__.npy":
                    meta = json.loads(np.load(io.BytesIO(data), allow_pickle=False).tobytes())
                    edit(meta["params"])
                    buf = io.BytesIO()
                    np.save(buf, np.frombuffer(json.dumps(meta).encode("utf-8"),
                                               dtype=np.uint8))
                    data = buf.getvalue()
                dst.writestr(name, data)

    rewrite("old.npz", lambda p: p.__setitem__("algorithm", p.pop("solver")))   # 0.1
    rewrite("dev.npz", lambda p: p.__setitem__("algorithm", "deprecated"))      # 0.2 dev
    for f in ("new.npz", "old.npz", "dev.npz"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            back = load_model(tmp_path / f)
        assert back.solver == "general" and "algorithm" not in back.get_params()
        np.testing.assert_array_equal(back.A_, m.A_)

