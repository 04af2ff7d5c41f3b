"""Every triplet learner (and AutoSimilarity) is a scikit-learn transformer
(issue 29, item 3).

The references are written here from the definitions, without the
library's helpers: the PSD part of a bilinear W is ``eigh((W + W^T) / 2)``
with the negative eigenvalues clipped, and two embeddings of one model agree
up to a rotation, i.e. in their Gram matrices.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import tripletml as tm
from tripletml.registry import entries
from tripletml.core.base import BilinearMixin, MahalanobisMixin

TRIPLET = entries("triplet")
IDS = [e.name for e in TRIPLET]


def _iris():
    return load_iris(return_X_y=True)


def _fit(entry, X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # ConvergenceWarning of the quick settings
        return entry.make(0, **params).fit(X, y)


def _auto():
    return tm.AutoSimilarity(candidates=[{"learner": "KISSME"}, {"learner": "OASIS",
                                          "grid": {"n_triplets": [300]}}],
                             random_state=0, time_budget=1e4)


def _psd_reference(W, k=None):
    """eigh of the symmetric part, negatives clipped, top k: the Gram
    matrix ``W_+`` of the embedding (d x d)."""
    ev, U = np.linalg.eigh(0.5 * (W + W.T))
    order = np.argsort(ev)[::-1]
    ev, U = ev[order], U[:, order]
    keep = ev > 1e-12 * np.abs(ev).max()
    if k is not None:
        keep &= np.arange(ev.size) < k
    return (U[:, keep] * ev[keep]) @ U[:, keep].T, ev


# ------------------------------------------------------------- pipelines
@pytest.mark.parametrize("entry", TRIPLET, ids=IDS)
def test_pipeline_cross_val_score(entry):
    X, y = _iris()
    pipe = make_pipeline(StandardScaler(), entry.make(0), KNeighborsClassifier())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)     # chance is 1/3


def test_pipeline_cross_val_score_auto():
    X, y = _iris()
    pipe = make_pipeline(StandardScaler(), _auto(), KNeighborsClassifier())
    scores = cross_val_score(pipe, X, y, cv=3)
    assert np.all(scores > 0.8)


@pytest.mark.parametrize("entry", TRIPLET, ids=IDS)
def test_fit_transform_and_feature_names(entry):
    X, y = _iris()
    est = entry.make(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Z = est.fit_transform(X, y)
    np.testing.assert_allclose(Z, est.transform(X), atol=1e-12)
    names = est.get_feature_names_out()
    assert names.shape == (Z.shape[1],) and Z.shape[1] == est._n_features_out >= 1
    assert list(names) == [f"{entry.name.lower()}{i}" for i in range(Z.shape[1])]
    assert 0.0 < est.transform_fidelity_ <= 1.0 + 1e-12
    # the (preprocessed) rows come through transform's own checks
    with pytest.raises(ValueError, match="features"):
        est.transform(X[:, :3])


@pytest.mark.parametrize("entry", TRIPLET, ids=IDS)
def test_pandas_output(entry):
    pd = pytest.importorskip("pandas")
    X, y = _iris()
    Xf = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    est = entry.make(0).set_output(transform="pandas")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Z = est.fit_transform(Xf, y)
    assert isinstance(Z, pd.DataFrame)
    assert list(Z.columns) == list(est.get_feature_names_out())
    np.testing.assert_allclose(Z.to_numpy(), est.set_output(transform="default").transform(Xf))


def test_auto_is_a_transformer():
    X, y = _iris()
    auto = _auto()
    assert not hasattr(auto, "_n_features_out")
    Z = auto.fit_transform(X, y)
    np.testing.assert_allclose(Z, auto.best_estimator_.transform(X))
    assert list(auto.get_feature_names_out()) == [f"autosimilarity{i}"
                                                  for i in range(Z.shape[1])]
    assert auto.transform_fidelity_ == auto.best_estimator_.transform_fidelity_
    # a bilinear winner transforms too
    auto = tm.AutoSimilarity(candidates=[{"learner": "DotProduct"}], random_state=0).fit(X, y)
    np.testing.assert_allclose(auto.transform(X), X)
    pd = pytest.importorskip("pandas")
    Z = auto.set_output(transform="pandas").transform(X)
    assert isinstance(Z, pd.DataFrame) and Z.columns[0] == "autosimilarity0"


# ------------------------------------------------------------- exactness
def _fitted_sdca(X, y, W):
    est = tm.SDCA(n_triplets=200, max_iter=1, preprocessing=None, random_state=0).fit(X, y)
    est.W_ = W
    return est


def test_psd_W_is_embedded_exactly():
    """For a symmetric PSD W set by hand, inner products of transform are the
    similarity and squared distances are the Mahalanobis distance of W."""
    X, y = _iris()
    rng = np.random.default_rng(0)
    G = rng.normal(size=(4, 3))
    est = _fitted_sdca(X, y, G @ G.T)                  # rank 3 PSD
    Z = est.transform(X)
    assert Z.shape == (150, 3)                          # the positive directions only
    np.testing.assert_allclose(Z @ Z.T, est.similarity(X), atol=1e-10, rtol=0)
    Xp = est._check_fitted_X(X)                        # the rows W acts on
    D = Xp[:, None, :] - Xp[None, :, :]
    np.testing.assert_allclose(((Z[:, None] - Z[None]) ** 2).sum(-1),
                               np.einsum("ijk,kl,ijl->ij", D, G @ G.T, D), atol=1e-10)
    assert est.transform_fidelity_ == pytest.approx(1.0, abs=1e-12)
    # DotProduct (W = I) and COMET (PD W) are exact as fitted
    for m in (tm.DotProduct().fit(X), _fit(get_entry("COMET"), X, y)):
        Z = m.transform(X)
        np.testing.assert_allclose(Z @ Z.T, m.similarity(X), rtol=1e-9, atol=1e-9)
        assert m.transform_fidelity_ == pytest.approx(1.0, abs=1e-12)


def get_entry(name):
    return next(e for e in TRIPLET if e.name == name)


def test_non_symmetric_W_gives_the_psd_part_of_its_symmetric_part():
    X, y = _iris()
    W = np.random.default_rng(1).normal(size=(4, 4))   # indefinite, not symmetric
    est = _fitted_sdca(X, y, W)
    Z = est.transform(X)
    Wp, ev = _psd_reference(W)
    Xraw, X = X, est._check_fitted_X(X)                # the rows W acts on
    np.testing.assert_allclose(Z @ Z.T, X @ Wp @ X.T, atol=1e-10)
    assert Z.shape[1] == np.count_nonzero(ev > 0) < 4
    kept = np.sum(ev[ev > 0] ** 2) / np.sum(W * W)
    assert est.transform_fidelity_ == pytest.approx(kept, rel=1e-12)
    assert est.transform_fidelity_ == pytest.approx(
        1 - np.sum((W - Wp) ** 2) / np.sum(W * W), rel=1e-10)
    # the similarity is still W itself
    np.testing.assert_allclose(est.similarity(Xraw[:5]), X[:5] @ W @ X[:5].T, atol=1e-10)


def test_transform_follows_a_changed_W():
    """The cached map is keyed by the arrays: a new or updated W is seen,
    and transform leaves the estimator's __dict__ alone."""
    X, y = _iris()
    rng = np.random.default_rng(2)
    est = _fitted_sdca(X, y, np.eye(4))
    est.W_ = np.eye(4)
    Xraw, X = X, est._check_fitted_X(X)
    np.testing.assert_allclose(est.transform(Xraw) @ est.transform(Xraw).T, X @ X.T,
                               atol=1e-10)
    state = dict(vars(est))
    est.W_[0, 0] = 5.0                                   # in place, as partial_fit does
    assert dict(vars(est)).keys() == state.keys()
    Wp, _ = _psd_reference(est.W_)
    Z = est.transform(Xraw)
    np.testing.assert_allclose(Z @ Z.T, X @ Wp @ X.T, atol=1e-9)
    est.W_ = rng.normal(size=(4, 4))
    Wp, _ = _psd_reference(est.W_)
    Z = est.transform(Xraw)
    np.testing.assert_allclose(Z @ Z.T, X @ Wp @ X.T, atol=1e-9)


def test_factored_path_equals_dense_path_without_a_square_matrix(monkeypatch):
    """LORETA's embedding (thin QR of [A B], 2k x 2k eigenproblem) has the
    Gram matrix of the dense reference on W = A B^T, and no d x d array is
    formed (W itself is never asked for)."""
    rng = np.random.default_rng(3)
    d, k, n = 40, 3, 25
    X = rng.normal(size=(n, d))
    y = np.arange(n) % 3
    est = tm.LORETA(rank=k, n_triplets=100, preprocessing=None, random_state=0).fit(X, y)
    est.A_ = rng.normal(size=(d, k))
    est.B_ = est.A_ @ rng.normal(size=(k, k)) + 0.3 * rng.normal(size=(d, k))
    W = est.A_ @ est.B_.T

    def no_square(self):
        raise AssertionError("the factored path formed W")
    monkeypatch.setattr(type(est), "_bilinear_matrix", no_square)
    real_eigh = np.linalg.eigh

    def small_eigh(a, *args, **kw):
        assert a.shape[0] <= 2 * k, a.shape
        return real_eigh(a, *args, **kw)
    monkeypatch.setattr(np.linalg, "eigh", small_eigh)
    Z = est.transform(X)
    monkeypatch.setattr(np.linalg, "eigh", real_eigh)
    X = est._check_fitted_X(X)                         # the rows W acts on
    Wp, ev = _psd_reference(W)
    assert Z.shape[1] == np.count_nonzero(ev > 1e-12 * np.abs(ev).max()) <= k
    np.testing.assert_allclose(Z @ Z.T, X @ Wp @ X.T, atol=1e-9 * np.abs(X @ Wp @ X.T).max())
    kept = np.sum(ev[ev > 1e-12 * np.abs(ev).max()] ** 2) / np.sum(W * W)
    assert est.transform_fidelity_ == pytest.approx(kept, rel=1e-9)


def test_sparse_input():
    X, y = _iris()
    for est in (_fit(get_entry("OASIS"), X, y), _fit(get_entry("LORETA"), X, y),
                _fit(get_entry("KISSME"), X, y)):
        np.testing.assert_allclose(est.transform(sp.csr_matrix(X)), est.transform(X),
                                   atol=1e-12)
    Zs = tm.Euclidean(n_components=2).fit(X).transform(sp.csr_matrix(X))
    assert sp.issparse(Zs) and Zs.shape == (150, 2)


# --------------------------------------------------------- n_components
def _n_components_entries():
    return [e for e in TRIPLET if "n_components" in e.cls().get_params()
            and "rank" not in e.cls().get_params()
            and e.name not in ("RCA", "LFDA", "LMNN", "NCA", "LinearTSTE")]   # what they fit


@pytest.mark.parametrize("entry", _n_components_entries(), ids=lambda e: e.name)
def test_n_components_keeps_the_top_directions(entry):
    """The truncated embedding is the leading part of the full one: its
    Gram matrix is the reference top-k eigen-part of the model's full Gram
    matrix ``G = L^T L`` (W_+ or M)."""
    X, y = _iris()
    full = _fit(entry, X, y)
    Zf = full.transform(X)
    r = Zf.shape[1]
    k = min(2, r)
    est = clone(full).set_params(n_components=k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    Z = est.transform(X)
    assert Z.shape == (150, k) and est._n_features_out == k
    Xp = est._check_fitted_X(X)                        # the preprocessed rows
    if isinstance(est, (tm.Euclidean, tm.DotProduct)):  # W = I: ties, the first k
        np.testing.assert_allclose(Z, Xp[:, :k])
        assert est.transform_fidelity_ == k / Xp.shape[1]
        return
    # G of the full embedding, from the identity Zf = Xp P: P = pinv(Xp) Zf
    P = np.linalg.lstsq(Xp, Zf, rcond=None)[0]
    G = P @ P.T
    Gk, ev = _psd_reference(G, k)
    np.testing.assert_allclose(Z @ Z.T, Xp @ Gk @ Xp.T,
                               atol=1e-8 * np.abs(Xp @ G @ Xp.T).max())
    np.testing.assert_allclose(Z, Zf[:, :k] * np.sign(np.sum(Z * Zf[:, :k], axis=0)),
                               atol=1e-8 * np.abs(Zf).max())
    assert est.transform_fidelity_ < full.transform_fidelity_ or r == k
    # similarity is unchanged by n_components
    np.testing.assert_allclose(est.similarity(X[:9]), full.similarity(X[:9]), atol=1e-9)
    # more than there are: all of them, zero-padded to exactly n_components
    # columns (issue 39), no error
    big = clone(full).set_params(n_components=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        big.fit(X, y)
    Zb = big.transform(X)
    assert Zb.shape == (150, 50) and big._n_features_out == 50
    np.testing.assert_allclose(Zb[:, :r], Zf, atol=1e-8 * np.abs(Zf).max())
    assert not Zb[:, r:].any()
    assert big.transform_fidelity_ == pytest.approx(full.transform_fidelity_)


def test_kissme_rank_tol_bounds_n_components():
    """rank_tol drops the small eigenvalues first; n_components then keeps
    the leading ones of what is left; beyond rank_ the columns are zeros
    (exactly n_components of them, issue 39)."""
    X, y = _iris()
    m = tm.KISSME(rank_tol=0.5, n_components=4).fit(X, y)
    Z = m.transform(X)
    assert m.rank_ < 4 and Z.shape[1] == 4 and not Z[:, m.rank_:].any()
    m2 = tm.KISSME(rank_tol=0.5, n_components=1).fit(X, y)
    np.testing.assert_allclose(m2.transform(X), m.transform(X)[:, :1])
    ev = np.sort(np.linalg.eigvalsh(m.M_))[::-1]
    assert m2.transform_fidelity_ == pytest.approx(ev[0] ** 2 / np.sum(ev[:m.rank_] ** 2))


def test_bad_n_components():
    X, y = _iris()
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="OASIS: parameter n_components"):
            tm.OASIS(n_components=bad).fit(X, y)


# ------------------------------------------------------------ persistence
@pytest.mark.parametrize("entry", TRIPLET, ids=IDS)
def test_save_load_keeps_transform(entry, tmp_path):
    X, y = _iris()
    kw = {"n_components": 2} if "n_components" in entry.cls().get_params() \
        and entry.name != "RCA" else {}
    est = _fit(entry, X, y, **kw)
    Z = est.transform(X)
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.transform(X), Z)
    assert back.transform_fidelity_ == est.transform_fidelity_
    assert list(back.get_feature_names_out()) == list(est.get_feature_names_out())


def test_unfitted():
    from sklearn.exceptions import NotFittedError
    X, _ = _iris()
    for est in (tm.OASIS(), tm.LORETA(), tm.KISSME(), tm.DotProduct()):
        with pytest.raises(NotFittedError):
            est.transform(X)
        with pytest.raises(NotFittedError):
            est.get_feature_names_out()
        assert not hasattr(est, "transform_fidelity_")
