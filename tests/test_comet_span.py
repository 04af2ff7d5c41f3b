"""COMET's span route (fewer rows than features): the minimizer of eq. (2)
is ``Q W_r Q^T + sqrt(alpha / beta) (I - Q Q^T)`` (Fischer's inequality);
the route reaches it on the span's coordinates and the plain route, run to
convergence, reaches the same matrix."""
import numpy as np
import pytest

from tripletml import COMET, SparseCOMET
from tripletml.triplets import random_class_triplets


def _wide(seed=0, n=8, d=12, m=40):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, d)) + 0.8 * y[:, None]
    return X, random_class_triplets(y, m, random_state=seed)


def _fit(route, X, t, **kw):
    est = COMET(preprocessing="raw", random_state=0, **kw)
    est._span_route = route
    return est.fit(X, triplets=t)


def test_span_route_reaches_the_plain_routes_minimizer():
    """With a smooth loss both routes' coordinate descents converge to the
    unique minimizer.  (With the hinge, block-coordinate descent can stall
    at a kink, on either route's axes: no equality is claimed there.)"""
    X, t = _wide()
    kw = dict(alpha=1.0, beta=0.25, tol=1e-11, max_iter=1000, loss="log")   # c = 2
    plain, span = _fit(False, X, t, **kw), _fit(None, X, t, **kw)
    W0, W1 = plain.W_, span.W_
    np.testing.assert_allclose(W1, W0, atol=1e-4 * np.abs(W0).max())
    # the complement of the rows' span is exactly c I on the span route
    u = np.linalg.svd(X)[2][-1]
    assert u @ W1 @ u == pytest.approx(2.0, rel=1e-10)
    assert span.objective(X, t) == pytest.approx(plain.objective(X, t), rel=1e-8)


def test_span_route_model_arrays_are_consistent():
    X, t = _wide(seed=1)
    m = _fit(None, X, t, max_iter=20)
    np.testing.assert_allclose(m.components_.T @ m.components_, m.W_,
                               atol=1e-9 * np.abs(m.W_).max())
    np.testing.assert_allclose(m.W_ @ m.W_inv_, np.eye(X.shape[1]), atol=1e-8)
    m._check_loaded()
    c = np.sqrt(m.alpha / m.beta_)
    u = np.linalg.svd(X)[2][-1]
    assert u @ m.W_ @ u == pytest.approx(c, rel=1e-10)


def test_sparse_comet_and_zero_weights_stay_on_the_plain_route():
    X, t = _wide()
    assert SparseCOMET()._span_lift_spec(X, t) is None
    assert COMET(alpha=0.0)._span_lift_spec(X, t) is None
    assert COMET(beta=0.0)._span_lift_spec(X, t) is None
    assert COMET(beta=1e-3)._span_lift_spec(X, t) == pytest.approx(
        {"W_": np.sqrt(1e3), "W_inv_": 1 / np.sqrt(1e3), "components_": 1e3 ** 0.25})


def test_beta_auto_on_answers_starts_at_the_identitys_margin_scale():
    """beta="auto": with labels the paper's 1e-3 and W_0 = I; on answers
    c = 1 / median |x_q^T (x_p - x_n)| (a plain loop), beta = alpha c^-2 and
    W_0 = c I (one epoch with eta0 tiny stays there)."""
    X, t = _wide(n=30, d=6, m=80)
    y = np.arange(30) % 2
    lab = COMET(preprocessing="raw", max_iter=1, tol=None).fit(X, y)
    assert lab.beta_ == 1e-3 and lab.start_scale_ == 1.0
    m = np.median([abs(X[q] @ (X[p] - X[n])) for q, p, n in t])
    ans = COMET(preprocessing="raw", alpha=2.0, max_iter=1, tol=None, eta0=1e-12).fit(
        X, triplets=t)
    assert ans.start_scale_ == pytest.approx(1.0 / m, rel=1e-10)
    assert ans.beta_ == pytest.approx(2.0 * m ** 2, rel=1e-10)
    np.testing.assert_allclose(ans.W_, np.eye(6) / m, atol=1e-9 / m)
    fixed = COMET(preprocessing="raw", beta=1e-3, max_iter=1, tol=None).fit(X, triplets=t)
    assert fixed.beta_ == 1e-3 and fixed.start_scale_ == 1.0
    # SparseCOMET: the same start and beta, and its group lasso in the start's units
    sl = SparseCOMET(preprocessing="raw", max_iter=1, tol=None, group_alpha=0.3).fit(X, y)
    assert (sl.beta_, sl.start_scale_, sl.group_alpha_) == (1e-3, 1.0, 0.3)
    sa = SparseCOMET(preprocessing="raw", alpha=2.0, max_iter=1, tol=None, eta0=1e-12,
                     group_alpha=0.3).fit(X, triplets=t)
    assert sa.start_scale_ == pytest.approx(1.0 / m, rel=1e-10)
    assert sa.beta_ == pytest.approx(2.0 * m ** 2, rel=1e-10)
    assert sa.group_alpha_ == pytest.approx(0.3 * m, rel=1e-10)
    np.testing.assert_allclose(np.diag(sa.W_inv_) * np.diag(sa.W_), 1.0, rtol=1e-9)


def test_beta_auto_invariances():
    """Answers on rows times 1e-3 and 1e3 (default preprocessing) give the
    same similarity ranking; binary rows (most triplets tied) and a
    duplicated feature still give a finite, positive scale."""
    rng = np.random.default_rng(2)
    X, t = _wide(n=30, d=6, m=80)
    S = COMET(max_iter=3, tol=None, random_state=0).fit(X, triplets=t).similarity(X)
    for k in (1e-3, 1e3):
        Sk = COMET(max_iter=3, tol=None, random_state=0).fit(X * k, triplets=t).similarity(X * k)
        np.testing.assert_allclose(Sk, S, rtol=1e-6, atol=1e-6 * np.abs(S).max())
    B = (rng.random((30, 6)) < 0.3).astype(float)
    m = COMET(max_iter=3, tol=None, preprocessing="raw").fit(B, triplets=t)
    assert np.isfinite(m.W_).all() and m.start_scale_ > 0 and m.beta_ > 0
    Xd = np.c_[X, X[:, :1]]
    m = COMET(max_iter=3, tol=None).fit(Xd, triplets=t)
    assert np.isfinite(m.W_).all() and m.start_scale_ > 0
    # SparseCOMET shares the start: the same invariances, its lambda finite
    S = SparseCOMET(max_iter=3, tol=None, random_state=0).fit(X, triplets=t).similarity(X)
    for k in (1e-3, 1e3):
        Sk = SparseCOMET(max_iter=3, tol=None, random_state=0).fit(
            X * k, triplets=t).similarity(X * k)
        np.testing.assert_allclose(Sk, S, rtol=1e-6, atol=1e-6 * np.abs(S).max())
    for rows in (B, Xd):
        m = SparseCOMET(max_iter=3, tol=None, preprocessing="raw").fit(rows, triplets=t)
        assert np.isfinite(m.W_).all() and m.start_scale_ > 0 and np.isfinite(m.group_alpha_)


@pytest.mark.parametrize("k", [1e-2, 1e2])
def test_sparse_comet_on_answers_is_equivariant_in_the_rows_scale(k):
    """Raw rows times k with the step cap in W's units (eta0 k^-4: W scales
    as k^-2, its gradient as k^2): the same groups and similarities, W_ / k^2.
    With the paper's absolute lambda the penalty would weigh the groups
    k^-2 times less; in the start's units it does not."""
    X, t = _wide(n=30, d=6, m=80)
    kw = dict(preprocessing="raw", max_iter=4, tol=None, random_state=0, group_alpha=3.0)
    a = SparseCOMET(**kw).fit(X, triplets=t)
    b = SparseCOMET(eta0=k ** -4, **kw).fit(X * k, triplets=t)
    assert 0 < a.density_ < 1                     # the penalty binds on some groups
    np.testing.assert_array_equal(b.active_features_, a.active_features_)
    np.testing.assert_allclose(b.W_ * k ** 2, a.W_, rtol=1e-6, atol=1e-9 * np.abs(a.W_).max())
    np.testing.assert_allclose(b.similarity(X * k), a.similarity(X), rtol=1e-6,
                               atol=1e-9 * np.abs(a.similarity(X)).max())
