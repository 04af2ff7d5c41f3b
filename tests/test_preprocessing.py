"""Preprocessing inside every triplet learner (issue 14, item 2).

The reference is plain NumPy: the learner with ``preprocessing=mode`` on raw
X must equal the same learner with ``preprocessing=None`` fitted on the
manually preprocessed X (same triplets, same seed), through every public
method that takes X.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml._registry import entries
from tripletml.base import BilinearMixin, MahalanobisMixin
from tripletml.preprocessing import MAX_DENSIFY_FEATURES, MAX_WHITEN_FEATURES

MODES = (None, "center", "standardize", "whiten")
TRIPLET = entries("triplet")


def _data(seed=0, n=36, d=5):
    """Classes shifted along the features, columns on very different scales
    and offsets (what preprocessing is for)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]
    X = X * np.array([1.0, 3.0, 0.1, 2.0, 0.5])[:d] + np.array([2.0, -3.0, 0.3, 4.0, 1.0])[:d]
    t = tm.triplets.random_class_triplets(y, 120, random_state=seed)
    return X, y, t


def reference(mode, Xfit, X):
    """The documented map, written from the docstring with plain NumPy."""
    if mode is None:
        return np.asarray(X, float)
    mean = Xfit.mean(axis=0)
    if mode == "center":
        return X - mean
    std = Xfit.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    if mode == "standardize":
        return (X - mean) / std
    Z = (Xfit - mean) / std
    lam, U = np.linalg.eigh(np.cov(Z, rowvar=False, bias=True))
    f = np.where(lam > 1e-10 * lam.max(), 1 / np.sqrt(np.maximum(lam, 1e-300)), 0.0)
    return ((X - mean) / std) @ (U * f) @ U.T


def _pair(entry, mode):
    a = entry.make(0, preprocessing=mode)
    b = entry.make(0, preprocessing=None)
    return a, b


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_raw_api_equals_solver_on_preprocessed_X(entry, mode):
    X, y, t = _data()
    a, b = _pair(entry, mode)
    a.fit(X, triplets=t)
    Z = reference(mode, X, X)
    b.fit(Z, triplets=t)
    assert a.preprocessing_ == mode
    Xq, Xd = X[:7], X[5:20]
    Zq, Zd = Z[:7], Z[5:20]
    S = a.similarity(Xq, Xd)
    scale = max(1.0, np.abs(S).max())
    kw = dict(rtol=1e-6, atol=1e-7 * scale)
    np.testing.assert_allclose(S, b.similarity(Zq, Zd), **kw)
    np.testing.assert_allclose(a.pair_score(Xq, Xd[:7]), b.pair_score(Zq, Zd[:7]), **kw)
    np.testing.assert_allclose(a.decision_function(X, t[:10]), b.decision_function(Z, t[:10]),
                               **kw)
    assert a.score(X, y) == pytest.approx(b.score(Z, y), rel=1e-9)
    # the learned matrix lives in the preprocessed coordinates
    if isinstance(a, BilinearMixin):
        W = a.get_bilinear_matrix()
        np.testing.assert_allclose(W, b.get_bilinear_matrix(), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(S, Zq @ W @ Zd.T, **kw)
    else:
        M = a.get_mahalanobis_matrix()
        np.testing.assert_allclose(M, b.get_mahalanobis_matrix(), rtol=1e-6, atol=1e-8)
        D = Zq[:, None, :] - Zd[None, :, :]
        np.testing.assert_allclose(S, -np.einsum("ijk,kl,ijl->ij", D, M, D), **kw)
        np.testing.assert_allclose(a.transform(Xq), b.transform(Zq), **kw)
        d = Z[0] - Z[5]
        assert a.get_metric(squared=True)(X[0], X[5]) == pytest.approx(d @ M @ d, rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_embeddings_reproduce_similarity(entry, mode):
    X, y, t = _data(seed=1)
    a = entry.make(0, preprocessing=mode).fit(X, triplets=t)
    Q, D = X[:6], X[6:17]
    Eq, Ed = a.embed_queries(Q), a.embed_database(D)
    S = a.similarity(Q, D)
    if a.embedding_similarity == "inner_product":
        got = Eq @ Ed.T
    else:
        got = -((Eq[:, None, :] - Ed[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(got, S, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(S).max()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_save_load_round_trip(entry, mode, tmp_path):
    X, y, t = _data(seed=2)
    a = entry.make(0, preprocessing=mode).fit(X, triplets=t)
    a.save(tmp_path / "m.npz")
    b = tm.load_model(tmp_path / "m.npz")
    assert b.preprocessing == mode and b.preprocessing_ == mode
    for name in ("preprocessing_mean_", "preprocessing_scale_", "preprocessing_whitener_"):
        assert hasattr(a, name) == hasattr(b, name)
        if hasattr(a, name):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.similarity(X[:5], X), b.similarity(X[:5], X))


@pytest.mark.parametrize("mode", ("auto",) + MODES)
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_csr_and_dense_agree(entry, mode):
    X, y, t = _data(seed=3)
    X[np.abs(X) < 2] = 0.0        # genuinely sparse rows
    a = entry.make(0, preprocessing=mode).fit(X, triplets=t)
    b = entry.make(0, preprocessing=mode).fit(sp.csr_matrix(X), triplets=t)
    S = a.similarity(X[:6], X)
    kw = dict(rtol=1e-6, atol=1e-7 * max(1.0, np.abs(S).max()))
    np.testing.assert_allclose(b.similarity(sp.csr_matrix(X[:6]), sp.csr_matrix(X)), S, **kw)
    np.testing.assert_allclose(b.similarity(X[:6], X), S, **kw)


def test_auto_is_standardize_except_high_dimensional_sparse():
    X, y, t = _data()
    m = tm.OASIS(n_triplets=50, random_state=0).fit(X, y)
    assert m.preprocessing == "auto" and m.preprocessing_ == "standardize"
    m.fit(sp.csr_matrix(X), y)
    assert m.preprocessing_ == "standardize"
    rng = np.random.default_rng(0)
    Xs = sp.random(30, MAX_DENSIFY_FEATURES + 1, density=0.01, format="csr", random_state=0)
    ys = np.arange(30) % 3
    m = tm.OASIS(n_triplets=50, random_state=0).fit(Xs, ys)
    assert m.preprocessing_ is None
    assert not any(hasattr(m, n) for n in ("preprocessing_mean_", "preprocessing_scale_"))
    ref = tm.OASIS(n_triplets=50, random_state=0, preprocessing=None).fit(Xs, ys)
    np.testing.assert_array_equal(m.W_, ref.W_)
    del rng


@pytest.mark.parametrize("mode", ("center", "standardize", "whiten"))
def test_high_dimensional_sparse_refused_without_densifying(mode):
    Xs = sp.random(30, MAX_DENSIFY_FEATURES + 1, density=0.01, format="csr", random_state=0)
    with pytest.raises(ValueError, match=f"OASIS: preprocessing='{mode}' centres the features"):
        tm.OASIS(preprocessing=mode).fit(Xs, np.arange(30) % 3)


def test_whiten_refuses_large_d():
    X = np.random.default_rng(0).normal(size=(10, MAX_WHITEN_FEATURES + 1))
    with pytest.raises(ValueError, match="SML: preprocessing='whiten' needs a .* limited to"):
        tm.SML(preprocessing="whiten").fit(X, np.arange(10) % 2)


@pytest.mark.parametrize("value", ["scale", "Standardize", 1, True])
def test_bad_value_named(value):
    X, y, t = _data()
    with pytest.raises(ValueError, match="LORETA: parameter preprocessing=.* must be one of"):
        tm.LORETA(rank=2, preprocessing=value).fit(X, y)


@pytest.mark.parametrize("mode", ("center", "standardize", "whiten"))
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_zero_variance_columns_give_no_nan(entry, mode):
    X, y, t = _data(seed=4)
    X[:, 2] = 3.25           # constant column
    X[:, 4] = 1e6            # constant and large
    a = entry.make(0, preprocessing=mode).fit(X, triplets=t)
    S = a.similarity(X)
    assert np.isfinite(S).all()
    Z = reference(mode, X, X)
    assert np.isfinite(Z).all()
    b = entry.make(0, preprocessing=None).fit(Z, triplets=t)
    np.testing.assert_allclose(S, b.similarity(Z), rtol=1e-6,
                               atol=1e-7 * max(1.0, np.abs(S).max()))


def test_large_finite_features_standardise_without_overflow():
    X, y, t = _data(seed=5)
    X = X * 1e300
    m = tm.SDCA(preprocessing="standardize", n_triplets=100, max_iter=2, tol=None,
                random_state=0).fit(X, y)
    ref = reference("standardize", X / 1e300, X / 1e300)
    np.testing.assert_allclose(m.preprocessing_scale_ * 1e300,
                               1 / (X / 1e300).std(axis=0), rtol=1e-9)
    assert np.isfinite(m.similarity(X[:3], X)).all()
    del ref


def test_old_file_without_preprocessing_loads_as_none(tmp_path):
    """A model saved before the parameter existed (no 'preprocessing' in the
    parameters, no statistics) loads as preprocessing=None."""
    import json
    import zipfile
    X, y, t = _data()
    m = tm.OASIS(preprocessing=None, n_triplets=50, random_state=0).fit(X, y)
    m.save(tmp_path / "new.npz")
    with zipfile.ZipFile(tmp_path / "new.npz") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    import io
    meta = json.loads(np.load(io.BytesIO(members["__meta__.npy"])).tobytes().decode())
    del meta["params"]["preprocessing"]
    del meta["attributes"]["preprocessing_"]
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    members["__meta__.npy"] = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "old.npz", "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    old = tm.load_model(tmp_path / "old.npz")
    assert old.preprocessing is None and old.preprocessing_ is None
    np.testing.assert_array_equal(old.similarity(X), m.similarity(X))


def test_inconsistent_statistics_refused(tmp_path):
    X, y, t = _data()
    m = tm.OASIS(preprocessing="standardize", n_triplets=50, random_state=0).fit(X, y)
    del m.preprocessing_scale_
    m.save(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="preprocessing_='standardize' needs the arrays"):
        tm.load_model(tmp_path / "bad.npz")


def test_partial_fit_fits_preprocessing_on_first_call():
    X, y, t = _data(seed=6)
    a = tm.OASIS(preprocessing="standardize").partial_fit(X, t[:60]).partial_fit(X, t[60:])
    Z = reference("standardize", X, X)
    b = tm.OASIS(preprocessing=None).partial_fit(Z, t[:60]).partial_fit(Z, t[60:])
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.similarity(X), b.similarity(Z), rtol=1e-9, atol=1e-9)


def test_baselines_default_to_raw_features():
    for cls in (tm.Euclidean, tm.DotProduct):
        assert cls().get_params()["preprocessing"] is None
    for e in TRIPLET:
        if e.name not in ("Euclidean", "DotProduct"):
            assert e.cls().get_params()["preprocessing"] == "auto", e.name


def test_objective_takes_raw_X():
    X, y, t = _data(seed=7)
    a = tm.SML(preprocessing="standardize", n_triplets=60, max_iter=10, tol=None).fit(
        X, triplets=t)
    b = tm.SML(preprocessing=None, n_triplets=60, max_iter=10, tol=None).fit(
        reference("standardize", X, X), triplets=t)
    assert a.objective(X, t) == pytest.approx(b.objective(reference("standardize", X, X), t),
                                              rel=1e-8)


def test_every_learner_documents_preprocessing_once():
    """The shared parameter text lands in each docstring exactly once, with
    no placeholder left (``document_preprocessing`` / the factored template)."""
    from tripletml._registry import entries
    for entry in entries():
        if entry.kind != "triplet" or entry.name in ("Euclidean", "DotProduct"):
            continue
        doc = entry.cls.__doc__
        assert "{preprocessing}" not in doc, entry.name
        params = doc.split("Parameters\n    ----------\n")[1].split("\n\n")[0]
        own = params.count("\n    preprocessing : ") + params.startswith("    preprocessing : ")
        grouped = [line for line in params.splitlines()
                   if line.startswith("    ") and not line.startswith("     ")
                   and "preprocessing" in line and " : " not in line]
        assert own == 1 or grouped, entry.name      # its own entry, or "..., preprocessing, ...: As X."
        if own:
            assert 'default="auto"' in params, entry.name
