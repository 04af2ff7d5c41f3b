"""Scale equivariance (issue 27, item 1): every learner, at its defaults,
with ``preprocessing="auto"`` and with ``None``, ranks ``c * X`` as it
ranks X for c from 1e-3 to 1e3.

With None (and ``"center"``) the rows are divided by the feature unit (the
RMS of the non-zero training entries), so the step sizes, the margin of 1
and the regularization act on the same rows whatever the caller's unit;
the learned matrix is reported in the caller's coordinates
(``get_bilinear_matrix`` / ``get_mahalanobis_matrix`` scale by 1 / c**2).
"""
import functools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits

from tripletml.registry import entries
from tripletml.core.base import BilinearMixin, MahalanobisMixin
from tripletml.core.preprocessing import feature_unit

LEARNERS = [e for e in entries("triplet")]
SCALES = (1e-3, 1e3)


def _digits(n=150):
    """Integer pixel counts 0..16 (a scale the defaults were not tuned on)."""
    X, y = load_digits(return_X_y=True)
    keep = y < 4
    return X[keep][:n], y[keep][:n]


#: Purely computational budgets, cut where no stopping rule reads them
#: (``tol=None`` at the defaults): LORETA, IterativePA, NaivePA and FactoredGD
#: make 100,000 steps of one scale-free update, SDCA (``alpha`` 0.01 with
#: labels) 10 passes.  10,000 steps (past the 1,000 triplets ``eta0="auto"``
#: is measured on; ten of LORETA's pinv checks) and 4 passes (still averaged
#: over the second half) check the same equivariance; every default the
#: property is about (step size, C, alpha, rank, start, stopping rule) is kept.
BUDGET = {"SDCA": {"max_iter": 4},
          **{name: {"n_triplets": 10_000} for name in ("LORETA", "IterativePA", "NaivePA",
                                                       "FactoredGD")}}


def _fit(entry, X, y, preprocessing):
    params = dict(BUDGET.get(entry.name, {}), preprocessing=preprocessing)
    if "random_state" in entry.cls().get_params():
        params["random_state"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # convergence is another test's business
        return entry.cls(**params).fit(X, y)


@functools.lru_cache(maxsize=None)
def _base_fit(name, preprocessing):
    """The fit on ``_digits()`` itself: the reference of the rescaled fits
    and, with None, the model whose unit is checked (fitted once; read only)."""
    entry = next(e for e in LEARNERS if e.name == name)
    return _fit(entry, *_digits(), preprocessing)


@pytest.mark.parametrize("preprocessing", ["auto", None])
@pytest.mark.parametrize("entry", LEARNERS, ids=lambda e: e.name)
def test_rescaled_rows_give_the_same_rankings(entry, preprocessing):
    X, y = _digits()
    base = _base_fit(entry.name, preprocessing)
    S = base.similarity(X[:40], X)
    for c in SCALES:
        est = _fit(entry, c * X, y, preprocessing)
        Sc = est.similarity(c * X[:40], c * X)
        if entry.name in ("Euclidean", "DotProduct") and preprocessing is None:   # raw: c**2
            Sc = Sc / c ** 2
        np.testing.assert_allclose(Sc, S, rtol=1e-6, atol=1e-6 * np.abs(S).max())
        same = (np.argsort(-Sc, axis=1, kind="stable")[:, :10]
                == np.argsort(-S, axis=1, kind="stable")[:, :10]).mean()
        assert same > 0.95, (c, same)        # ties aside, the same top 10
        learned = entry.name not in ("Euclidean", "DotProduct")
        if isinstance(est, BilinearMixin) and preprocessing is None and learned:
            np.testing.assert_allclose(est.get_bilinear_matrix() * c ** 2,
                                       base.get_bilinear_matrix(), rtol=1e-6,
                                       atol=1e-6 * np.abs(base.get_bilinear_matrix()).max())
        if isinstance(est, MahalanobisMixin) and preprocessing is None and learned:
            M = base.get_mahalanobis_matrix()
            np.testing.assert_allclose(est.get_mahalanobis_matrix() * c ** 2, M, rtol=1e-6,
                                       atol=1e-6 * np.abs(M).max())


@pytest.mark.parametrize("entry", [e for e in LEARNERS
                                   if e.name not in ("Euclidean", "DotProduct")],
                         ids=lambda e: e.name)
def test_preprocessing_none_reports_the_unit(entry):
    X, _ = _digits()
    est = _base_fit(entry.name, None)
    assert est.preprocessing_unit_ == pytest.approx(feature_unit(X))
    if isinstance(est, BilinearMixin):       # x^T W y on the caller's rows
        np.testing.assert_allclose(est.similarity(X[:5], X[:7]),
                                   X[:5] @ est.get_bilinear_matrix() @ X[:7].T,
                                   rtol=1e-8, atol=1e-10)


def test_feature_unit_definition_and_invariances():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 7)) * rng.uniform(0.1, 10, size=7)
    X[X < -1] = 0.0                                     # some exact zeros
    nz = X[X != 0]
    assert feature_unit(X) == pytest.approx(np.sqrt(np.mean(nz ** 2)), rel=1e-12)
    for c in (1e-300, 1e-3, 7.0, 1e300):
        assert feature_unit(c * X) == pytest.approx(c * feature_unit(X), rel=1e-12)
    assert feature_unit(X[:, ::-1]) == pytest.approx(feature_unit(X), rel=1e-12)
    assert feature_unit(np.vstack([X, X, X])) == pytest.approx(feature_unit(X), rel=1e-12)
    assert feature_unit(sp.csr_matrix(X)) == pytest.approx(feature_unit(X), rel=1e-12)
    # a vocabulary's zeros do not dilute a sparse row's scale
    wide = sp.hstack([sp.csr_matrix(X), sp.csr_matrix((50, 10000))]).tocsr()
    assert feature_unit(wide) == pytest.approx(feature_unit(X), rel=1e-12)
    mean = X.mean(axis=0)
    Z = X - mean
    assert feature_unit(X, mean) == pytest.approx(np.sqrt(np.mean(Z[Z != 0] ** 2)), rel=1e-12)
    assert feature_unit(np.zeros((4, 3))) == 1.0
    assert np.isfinite(feature_unit(np.full((3, 3), 1e308)))


def test_feature_unit_refuses_non_finite_rows():
    for bad in (np.nan, np.inf, -np.inf):
        X = np.ones((3, 2))
        X[1, 0] = bad
        with pytest.raises(ValueError, match="feature_unit: X contains NaN or infinity"):
            feature_unit(X)
    assert feature_unit(np.zeros((0, 3))) == 1.0


@pytest.mark.parametrize("name", ["OASIS", "LORETA", "LowRankDML", "KISSME"])
def test_auto_on_mixed_columns_with_a_duplicated_feature(name):
    """Binary, count and continuous columns plus a duplicated one: "auto"
    records each kind, stays finite, and ranks c * X as X."""
    import tripletml as tm
    rng = np.random.default_rng(3)
    y = np.arange(120) % 3
    cont = rng.normal(size=(120, 3)) * [1.0, 50.0, 0.01] + y[:, None]
    binary = (rng.random((120, 4)) < 0.1 + 0.2 * y[:, None]).astype(float)
    counts = rng.poisson(2 + y[:, None], size=(120, 3)).astype(float)
    X = np.hstack([cont, binary, counts, cont[:, :1]])          # last: a duplicate
    est = getattr(tm, name)(random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = est.fit(X, y)
        S = a.similarity(X[:20], X)
        kinds = set(a.preprocessing_decision_.get("columns", {}))
        b = getattr(tm, name)(random_state=0).fit(1e3 * X, y)
    assert np.isfinite(S).all()
    if name != "KISSME":                      # KISSME keeps per-column deviations
        assert {"binary", "continuous"} <= kinds
    # the solver sees the same rows, to rounding ...
    np.testing.assert_allclose(b.scaler_.transform(1e3 * X),
                               a.scaler_.transform(X), rtol=1e-12, atol=1e-12)
    # ... and LORETA's 100,000 online steps on 120 rows amplify that rounding
    # (a 1e-15 relative perturbation of X moves its scores as much), so the
    # model is compared by its ranking quality
    assert b.score(1e3 * X, y) == pytest.approx(a.score(X, y), abs=0.02)


@pytest.mark.parametrize("preprocessing", ["auto", None])
@pytest.mark.parametrize("name", ["LORETA", "IterativePA", "NaivePA", "FactoredGD"])
def test_factored_data_defaults_do_not_depend_on_the_unit(name, preprocessing):
    """Issue 43: the factored learners' data-dependent defaults -- the rank
    from the spectrum, the "pca" start, the step ``eta0="auto"`` -- are the
    same for X and c * X (they are computed on the rows the solver sees)."""
    import tripletml as tm
    X, y = _digits(120)
    seen = {}
    cls = getattr(tm, name)
    for c in (1.0, *SCALES):
        est = cls(n_triplets=1, random_state=0, preprocessing=preprocessing)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(c * X, y)
        seen[c] = est
    ref = seen[1.0]
    for c in SCALES:
        est = seen[c]
        assert est.rank_ == ref.rank_ > 1
        if hasattr(ref, "eta_"):
            assert est.eta_ == pytest.approx(ref.eta_, rel=1e-9)
        np.testing.assert_allclose(est.A_ @ est.B_.T, ref.A_ @ ref.B_.T, atol=1e-8)
