"""The span route (:mod:`tripletml.linalg.span`, issue 38 section 3): with
fewer training rows than features, learners that declare it fit on the
coordinates of the rows' span and lift the model back; the fitted model must
be the plain route's (to rounding), with the plain shapes."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import (COMET, SparseCOMET, ITML, KISSME, LMNN, LORETA, NCA, OASIS, SDCA, FactoredGD,
                       IterativePA, LowRankDML, MMC, NaivePA, SML)
from tripletml.linalg import psd_factor
from tripletml.linalg.span import (complement_basis, lift_psd_factor, lift_square,
                                   reduce_rows, span_basis, span_route_applies)

N, D = 12, 40


def _data(seed=0, n=N, d=D, m=300):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    T = rng.integers(0, n, size=(m, 3))
    T = T[(T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])]
    return X, T


# ------------------------------------------------------------- the algebra
def test_span_basis_orthonormal_and_reproduces_rows():
    X, _ = _data()
    X[5] = X[2] + 2 * X[3]                   # a dependent row: rank 11
    Q = span_basis(X)
    assert Q.shape == (D, N - 1)
    np.testing.assert_allclose(Q.T @ Q, np.eye(N - 1), atol=1e-12)
    np.testing.assert_allclose(reduce_rows(X, Q) @ Q.T, X, atol=1e-12)
    Qs = span_basis(sp.csr_matrix(X))
    np.testing.assert_allclose(Qs @ Qs.T, Q @ Q.T, atol=1e-12)     # same projector
    np.testing.assert_allclose(reduce_rows(sp.csr_matrix(X), Q), X @ Q, atol=1e-12)


def test_span_basis_degenerate():
    assert span_basis(np.zeros((3, 5))).shape == (5, 0)
    assert span_basis(np.zeros((0, 5))).shape == (5, 0)
    assert span_route_applies(3, 5) and not span_route_applies(5, 5)
    assert not span_route_applies(0, 5)


def test_lift_square_is_the_formula():
    rng = np.random.default_rng(1)
    Q = span_basis(rng.normal(size=(4, 9)))
    A = rng.normal(size=(4, 4))
    for c in (0.0, 1.0, 2.5):
        want = c * np.eye(9) + Q @ (A - c * np.eye(4)) @ Q.T
        np.testing.assert_allclose(lift_square(A, Q, c), want, atol=1e-13)
    with pytest.raises(ValueError, match="4 x 4"):
        lift_square(np.eye(3), Q, 1.0)


def test_complement_basis():
    Q = span_basis(np.random.default_rng(2).normal(size=(3, 8)))
    P = complement_basis(Q)
    assert P.shape == (8, 5)
    np.testing.assert_allclose(P.T @ P, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(Q.T @ P, 0, atol=1e-12)


@pytest.mark.parametrize("c", [1.0, 0.3, 0.0, 5.0])
def test_lift_psd_factor_matches_psd_factor(c):
    rng = np.random.default_rng(3)
    Q = span_basis(rng.normal(size=(4, 10)))
    B = rng.normal(size=(4, 4))
    A = B @ B.T + np.diag([0, 0, 1, 2])
    full = lift_square(A, Q, c)
    L0, r0 = psd_factor(full, 1e-6)
    L1, r1 = lift_psd_factor(A, Q, c, 1e-6)
    assert r1 == r0 and L1.shape == L0.shape
    np.testing.assert_allclose(L1.T @ L1, full, atol=1e-12)
    # rows in decreasing order of eigenvalue, as psd_factor's
    np.testing.assert_allclose(np.sum(L1 ** 2, axis=1), np.sum(L0 ** 2, axis=1), atol=1e-12)


# ---------------------------------------------------------- the learners
def _fit(cls, route, X, kw, **fit_kw):
    est = cls(random_state=0, **kw)
    est._span_route = route
    seen = []
    inner = est._fit

    def spy(Xf, sup, rng):
        seen.append(Xf.shape[1])
        return inner(Xf, sup, rng)

    est._fit = spy
    est.fit(X, **fit_kw)
    del est._fit
    return est, seen[0]


def _factor_product(est):
    """``U_ diag(s_) U_^T``: LowRankDML's eigenvectors are defined up to sign
    (and within repeated eigenvalues up to rotation), their product is not."""
    return (est.U_ * est.s_) @ est.U_.T


def _same_model(a, b, names, atol=1e-8):
    for name in names:
        if name == "U_ s_ U_^T":
            va, vb = _factor_product(a), _factor_product(b)
        else:
            va, vb = getattr(a, name), getattr(b, name)
        assert va.shape == vb.shape, name
        np.testing.assert_allclose(vb, va, atol=atol, rtol=0, err_msg=name)


CASES = [
    (OASIS, {}, ["W_"]),
    (OASIS, {"init": "zeros", "C": 1.0}, ["W_"]),
    (OASIS, {"preprocessing": None}, ["W_"]),
    (SDCA, {"max_iter": 3}, ["W_", "M_last_", "avg_accum_", "alpha_"]),
    (SDCA, {"max_iter": 2, "output": "random"}, ["W_", "M_last_", "random_iterate_"]),
    (SDCA, {"max_iter": 2, "output": "last", "preprocessing": "standardize"}, ["W_"]),
    (ITML, {}, ["M_", "bounds_", "dual_"]),
    (ITML, {"preprocessing": "standardize", "gamma": 10.0}, ["M_", "dual_"]),
    (FactoredGD, {}, ["A_", "B_"]),
    (IterativePA, {"init": "random"}, ["A_", "B_"]),
    (NaivePA, {"rank": 3, "max_iter": 2}, ["A_", "B_"]),
    # (the span's updates decompose the small d x d matrix directly: eigenvectors
    # up to sign, so the factors are compared through U diag(s) U^T and L^T L)
    (LowRankDML, {"max_iter": 10}, ["U_ s_ U_^T", "s_"]),     # identity part
    (LowRankDML, {"max_iter": 10, "start": "zero"}, ["U_ s_ U_^T", "s_"]),
    (LowRankDML, {"max_iter": 5, "constraint": "spectral", "alpha": 0.01},
     ["U_ s_ U_^T", "s_"]),
    (MMC, {}, ["M_"]),
    (SML, {"max_iter": 30, "tol": None}, ["M_"]),
    (SML, {"max_iter": 20, "solver": "subgradient", "tol": None}, ["M_"]),
    (MMC, {"preprocessing": "standardize", "max_iter": 20, "tol": None}, ["M_"]),
    (NCA, {"max_iter": 15, "tol": None}, ["M_"]),                 # identity, full width
    (NCA, {"n_components": 4, "max_iter": 15, "tol": None}, ["M_"]),   # pca
    (LMNN, {"max_iter": 15, "tol": None}, ["M_"]),
    (LMNN, {"n_components": 3, "init": "pca", "max_iter": 15, "tol": None}, ["M_"]),
]


@pytest.mark.parametrize("kw", [{}, {"init": "random", "rank": 4}, {"solver": "general",
                                                                     "batch_size": 5}])
def test_loreta_span_route_is_the_plain_model(kw):
    """LORETA: the same W = A B^T; the factors themselves are balanced by an
    SVD whose singular vectors are arbitrary within repeated singular values
    (the identity start), so they agree up to a k x k change of basis."""
    X, T = _data()
    a, wa = _fit(LORETA, False, X, kw, triplets=T)
    b, wb = _fit(LORETA, None, X, kw, triplets=T)
    assert wb < wa == a.n_features_preprocessed_
    for name in ("A_", "B_", "pinv_A_", "pinv_B_"):
        assert getattr(a, name).shape == getattr(b, name).shape
    np.testing.assert_allclose(b.A_ @ b.B_.T, a.A_ @ a.B_.T, atol=1e-8)
    np.testing.assert_allclose(b.pinv_A_.T @ b.A_, np.eye(b.rank_), atol=1e-8)
    np.testing.assert_allclose(b.pinv_B_.T @ b.B_, np.eye(b.rank_), atol=1e-8)
    assert a.n_pinv_refresh_ == b.n_pinv_refresh_
    np.testing.assert_allclose(b.history_["loss"], a.history_["loss"], rtol=1e-10)
    a.partial_fit(X, triplets=T[:30])
    b.partial_fit(X, triplets=T[:30])
    np.testing.assert_allclose(b.A_ @ b.B_.T, a.A_ @ a.B_.T, atol=1e-8)


@pytest.mark.parametrize("cls, kw, names", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_span_route_is_the_plain_model(cls, kw, names):
    X, T = _data()
    plain, w_plain = _fit(cls, False, X, kw, triplets=T)
    span, w_span = _fit(cls, None, X, kw, triplets=T)    # the default decides
    d = plain.n_features_preprocessed_
    assert w_plain == d and w_span < d and N < d        # the route was taken
    _same_model(plain, span, names)
    assert span.n_features_in_ == plain.n_features_in_ == D
    np.testing.assert_allclose(span.similarity(X), plain.similarity(X), atol=1e-8)
    Xn = np.random.default_rng(9).normal(size=(5, D))      # new rows, mostly off the span
    np.testing.assert_allclose(span.similarity(Xn, X), plain.similarity(Xn, X), atol=1e-8)
    if hasattr(plain, "components_"):
        L0, L1 = plain.components_, span.components_
        assert L0.shape == L1.shape and plain.rank_ == span.rank_
        np.testing.assert_allclose(L1.T @ L1, L0.T @ L0, atol=1e-8)


def test_span_route_on_pairs_and_sparse_rows():
    X, T = _data(seed=4)
    pairs = np.concatenate([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.repeat([1, -1], len(T))
    a, _ = _fit(ITML, False, X, {}, pairs=pairs, y=y)
    b, w = _fit(ITML, None, X, {}, pairs=pairs, y=y)
    assert w <= N
    _same_model(a, b, ["M_", "dual_"])
    Xs = X.copy()
    Xs[np.abs(Xs) < 1.0] = 0.0
    Xs = sp.csr_matrix(Xs)
    a, _ = _fit(OASIS, False, Xs, {"preprocessing": None}, triplets=T)
    b, w = _fit(OASIS, None, Xs, {"preprocessing": None}, triplets=T)
    assert w <= N
    _same_model(a, b, ["W_"])


def test_identity_kept_off_the_span():
    """A direction orthogonal to every training row keeps the plain geometry."""
    X, T = _data()
    est = OASIS(random_state=0, preprocessing=None).fit(X, triplets=T)
    Q = span_basis(X)
    z = complement_basis(Q)[:, 0]
    np.testing.assert_allclose(est.W_ @ z, z, atol=1e-12)
    np.testing.assert_allclose(z @ est.W_, z, atol=1e-12)


def test_plain_route_for_short_sparse_rows():
    """Sparse rows with fewer stored entries than the span's dimension (text)
    keep the plain route, whose steps follow the non-zeros."""
    rng = np.random.default_rng(8)
    X = sp.random(30, 400, density=0.01, random_state=1, format="csr") + \
        sp.eye(30, 400, format="csr")
    T = rng.integers(0, 30, size=(200, 3))
    T = T[(T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])]
    _, w = _fit(OASIS, None, X, {"preprocessing": None}, triplets=T)
    assert w == 400
    _, w = _fit(OASIS, True, X, {"preprocessing": None}, triplets=T)     # forced
    assert w <= 30


def test_plain_route_when_rows_outnumber_features():
    X, T = _data(n=50, d=6)
    _, w = _fit(OASIS, None, X, {"preprocessing": None}, triplets=T)
    assert w == 6


def test_undeclared_learner_stays_plain():
    X, T = _data(n=8, d=12, m=60)
    _, w = _fit(SparseCOMET, None, X, {"max_iter": 2, "tol": None}, triplets=T)   # groups
    assert w >= 12
    _, w = _fit(COMET, None, X, {"max_iter": 2, "tol": None, "beta": 0.0}, triplets=T)
    assert w >= 12                                   # no finite optimum off the span
    _, w = _fit(COMET, None, X, {"max_iter": 2, "tol": None}, triplets=T)
    assert w < 12                                    # tests/test_comet_span.py
    _, w = _fit(MMC, None, X, {"diagonal": True}, triplets=T)     # weighs the axes
    assert w >= 12


def test_partial_fit_continues_a_span_fit():
    """After a span-route fit the state is the plain route's: partial_fit
    takes the same steps."""
    X, T = _data()
    a, _ = _fit(SDCA, False, X, {"max_iter": 2}, triplets=T)
    b, _ = _fit(SDCA, None, X, {"max_iter": 2}, triplets=T)
    a.partial_fit(X, triplets=T[:20])
    b.partial_fit(X, triplets=T[:20])
    _same_model(a, b, ["W_", "M_last_"])
    a, _ = _fit(OASIS, False, X, {}, triplets=T)
    b, _ = _fit(OASIS, None, X, {}, triplets=T)
    a.partial_fit(X, triplets=T[:20])
    b.partial_fit(X, triplets=T[:20])
    _same_model(a, b, ["W_"])


def _classes(seed=5, n=N, d=D):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + 3.0 * rng.normal(size=(3, d))[y]
    return X, y


@pytest.mark.parametrize("kw", [{}, {"shrinkage": 0.0}, {"shrinkage": 0.3},
                                {"preprocessing": "standardize"}, {"preprocessing": None},
                                {"n_triplets": 400}])
def test_kissme_span_route_is_the_plain_model(kw):
    """KISSME's closed form splits into the span and its complement
    (``c I`` there, ``c > 0`` when the dissimilar pairs spread more)."""
    X, y = _classes()
    fits = []
    for route in (False, None):
        est = KISSME(random_state=0, **kw)
        est._span_route = route
        got = []
        inner = est._set_model
        est._set_model = lambda *a, **k: (got.append(a[4] if len(a) > 4 else None),
                                          inner(*a, **k))
        est.fit(X, y)
        del est._set_model
        fits.append((est, got[0]))
    (a, qa), (b, qb) = fits
    assert qa is None and qb is not None and qb.shape[1] <= N
    _same_model(a, b, ["M_", "similar_covariance_", "dissimilar_covariance_"])
    assert a.rank_ == b.rank_ and a.components_.shape == b.components_.shape
    np.testing.assert_allclose(b.components_.T @ b.components_, a.M_, atol=1e-8)
    off = complement_basis(qb)[:, 0]
    c = off @ b.M_ @ off
    if kw.get("shrinkage", 0.01) > 0:
        assert c > 0 and a.rank_ >= a.n_features_preprocessed_ - qb.shape[1]   # complement kept
    else:
        assert abs(c) < 1e-12


def test_kissme_span_route_on_pairs():
    X, T = _data(seed=6)
    pairs = np.concatenate([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.repeat([1, -1], len(T))
    a = KISSME()
    a._span_route = False
    a.fit(X, pairs=pairs, y=y)
    b = KISSME().fit(X, pairs=pairs, y=y)
    _same_model(a, b, ["M_", "similar_covariance_", "dissimilar_covariance_"])


def test_sdca_objective_gram_margins():
    """SDCA's per-pass objective by the Gram route (few rows under many
    triplets) equals the per-triplet margins, degenerate triplets included."""
    from tripletml.linalg.sparse_rows import as_csr, diff_buffers
    from tripletml.algorithms.sdca.kernels import _all_margins, _margins_gram, sdca_objectives

    rng = np.random.default_rng(7)
    X = rng.normal(size=(12, 41))
    X[11] = X[10]                                   # p+ = p- as points: degenerate
    T = rng.integers(0, 12, size=(3000, 3))
    T[:5] = [[0, 10, 11], [1, 11, 10], [2, 3, 3], [4, 5, 6], [7, 8, 9]]
    M = rng.normal(size=(41, 41))
    Xc = as_csr(X)
    mg, xn = _margins_gram(M, Xc, T)
    assert mg is not None
    ref, xr = np.empty(len(T)), np.empty(len(T))
    _all_margins(M, Xc.indptr, Xc.indices, Xc.data, T, ref, xr, *diff_buffers(Xc))
    np.testing.assert_allclose(mg, ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(xn > 0, xr > 0)
    assert not (xn[:3] > 0).any()
    alpha = rng.random(len(T))
    P, D, gap = sdca_objectives(M, alpha, Xc, T, 0.1)
    assert np.isfinite([P, D, gap]).all()
    assert _margins_gram(M, Xc, T[:3]) == (None, None)          # does not pay


def test_sdca_gram_margins_pay_where_answers_outnumber_the_rows():
    """The margins' Gram route prices ``H = R M R^T`` and two look-ups a
    triplet (not OASIS's k^2 a step): 70 rows in a 70-D span under 20,000
    answers take it; many rows with few triplets, or sparse text rows, do
    not."""
    from tripletml.algorithms.sdca.kernels import gram_margins_pay

    assert gram_margins_pay(70, 70 * 70, 20000, 70)            # span coords, many answers
    assert gram_margins_pay(57, 57 * 4096, 84440, 4096)        # Zappos, plain route
    assert not gram_margins_pay(2000, 2000 * 50, 1000, 50)     # many rows, few triplets
    assert not gram_margins_pay(1500, 1500 * 30, 1000, 20000)  # sparse text rows
    # H (k x k) must not outgrow the triplets' and the rows' own arrays
    assert not gram_margins_pay(10000, 10000 * 784, 10**6, 784)     # H: 0.8 GB
    assert not gram_margins_pay(20000, 20000 * 100, 5 * 10**7, 100)  # H: 3.2 GB


def test_span_route_checks_the_lifted_model_memory():
    """The lifted d x d model is checked before the reduced fit: a clear
    MemoryError naming the learner, as on the plain route."""
    X = np.random.default_rng(0).normal(size=(5, 200_000))
    T = np.array([[0, 1, 2], [3, 4, 0], [1, 2, 3]])
    for cls in (ITML, OASIS):
        with pytest.raises(MemoryError, match=cls.__name__):
            cls(preprocessing=None).fit(X, triplets=T)


@pytest.mark.parametrize("cls", [NCA, LMNN])
def test_neighborhood_learners_span_route_from_labels(cls):
    """NCA / LMNN from class labels (their papers' setting): the span route's
    metric is the plain route's, for the identity and the pca starts; a
    start outside the span (random, or the first coordinate axes of a
    narrower map) keeps the plain route."""
    X, _ = _data(seed=5, n=16)
    y = np.repeat(np.arange(4), 4)
    for kw in ({}, {"n_components": 5}):
        kw = {**kw, "max_iter": 15, "tol": None}
        plain, wa = _fit(cls, False, X, kw, y=y)
        span, wb = _fit(cls, None, X, kw, y=y)
        assert wb < wa and span.init_ == plain.init_
        assert span.components_.shape == plain.components_.shape and span.rank_ == plain.rank_
        np.testing.assert_allclose(span.M_, plain.M_, atol=1e-7)
    for kw in ({"init": "random"}, {"n_components": 20, "init": "auto"}):
        _, w = _fit(cls, None, X, {**kw, "max_iter": 3, "tol": None}, y=y)
        assert w == D
