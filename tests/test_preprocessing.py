"""Preprocessing inside every triplet learner (issue 14, item 2).

The reference is plain NumPy: the learner with ``preprocessing=mode`` on raw
X must equal the same learner with ``preprocessing=None`` fitted on the
manually preprocessed X (same triplets, same seed), through every public
method that takes X.  ``"sphere"`` (standardize, then the inverse
stereographic lift onto the sphere of radius s in d + 1 dimensions) is
written here from its formula ``phi(z) = s [2u, ||u||^2 - 1] / (||u||^2 + 1)``,
``u = z / s``, s the median norm of the standardized training rows.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.registry import entries
from tripletml.core.base import BilinearMixin, MahalanobisMixin
from tripletml.core.preprocessing import MAX_DENSIFY_FEATURES, MAX_WHITEN_FEATURES

MODES = (None, "center", "standardize", "whiten", "sphere")
TRIPLET = entries("triplet")
BASELINES = ("Euclidean", "DotProduct")
BILINEAR = tuple(e for e in TRIPLET if issubclass(e.cls, BilinearMixin)
                 and e.name not in BASELINES)
def _data(seed=0, n=36, d=5):
    """Classes shifted along the features, columns on very different scales
    and offsets (what preprocessing is for)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]
    X = X * np.array([1.0, 3.0, 0.1, 2.0, 0.5])[:d] + np.array([2.0, -3.0, 0.3, 4.0, 1.0])[:d]
    t = tm.triplets.random_class_triplets(y, 120, random_state=seed)
    return X, y, t


def stereographic(Z, s):
    """The inverse stereographic projection of the rows of Z, from the
    formula: u = z / s, phi = s [2u, |u|^2 - 1] / (|u|^2 + 1)."""
    out = []
    for z in np.asarray(Z, float):
        u = z / s
        n2 = float(u @ u)
        out.append(s * np.concatenate([2 * u, [n2 - 1]]) / (n2 + 1))
    return np.array(out).reshape(len(out), np.asarray(Z).shape[1] + 1)


def sphere_radius(Xfit):
    """s = median row norm of the standardized training rows."""
    Z = reference("standardize", Xfit, Xfit)
    return float(np.median(np.linalg.norm(Z, axis=1)))


def unit(Z):
    """The feature unit: the root mean square of the non-zero entries."""
    v = np.asarray(Z, float).ravel()
    v = v[v != 0]
    return float(np.sqrt(np.mean(v ** 2))) if v.size else 1.0


def raw(est):
    """``est`` trained on the rows it is given, as they are (no feature
    unit): the solver on manually preprocessed rows."""
    est._feature_unit = False
    return est


def reference(mode, Xfit, X, with_unit=True):
    """The documented map, written from the docstring with plain NumPy
    (``with_unit=False``: a baseline, which has no feature unit)."""
    if mode is None:
        return np.asarray(X, float) / (unit(Xfit) if with_unit else 1.0)
    mean = Xfit.mean(axis=0)
    if mode == "center":
        return (X - mean) / (unit(Xfit - mean) if with_unit else 1.0)
    if mode == "center":
        return X - mean
    std = Xfit.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    if mode == "standardize":
        return (X - mean) / std
    if mode == "sphere":
        return stereographic((X - mean) / std, sphere_radius(Xfit))
    Z = (Xfit - mean) / std
    lam, U = np.linalg.eigh(np.cov(Z, rowvar=False, bias=True))
    f = np.where(lam > 1e-10 * lam.max(), 1 / np.sqrt(np.maximum(lam, 1e-300)), 0.0)
    return ((X - mean) / std) @ (U * f) @ U.T


def _start(entry, mode):
    """Whitened rows have one repeated eigenvalue: their principal subspace
    (the factored learners' init="pca") is any k-subspace, picked by
    rounding; the two routes compared here then start apart.  The identity
    start is unique."""
    has_pca = entry.make(0).get_params().get("init") == "pca"
    return {"init": "identity"} if has_pca and mode == "whiten" else {}


def _pair(entry, mode):
    a = entry.make(0, preprocessing=mode, **_start(entry, mode))
    b = raw(entry.make(0, preprocessing=None, **_start(entry, mode)))
    return a, b


def _matrix_cases():
    """(entry, mode) pairs."""
    return [pytest.param(e, mode, id=f"{e.name}-{mode}") for mode in MODES for e in TRIPLET]


@pytest.mark.parametrize("entry,mode", _matrix_cases())
def test_raw_api_equals_solver_on_preprocessed_X(entry, mode):
    X, y, t = _data()
    a, b = _pair(entry, mode)
    a.fit(X, triplets=t)
    Z = reference(mode, X, X, with_unit=a._feature_unit)
    b.fit(Z, triplets=t)
    assert a.preprocessing_ == mode
    assert a.n_features_in_ == X.shape[1]                 # always the raw width
    assert a.n_features_preprocessed_ == Z.shape[1]       # d + 1 with "sphere"
    Xq, Xd = X[:7], X[5:20]
    Zq, Zd = Z[:7], Z[5:20]
    S = a.similarity(Xq, Xd)
    scale = max(1.0, np.abs(S).max())
    kw = dict(rtol=1e-6, atol=1e-7 * scale)
    np.testing.assert_allclose(S, b.similarity(Zq, Zd), **kw)
    np.testing.assert_allclose(a.pair_score(Xq, Xd[:7]), b.pair_score(Zq, Zd[:7]), **kw)
    np.testing.assert_allclose(a.triplet_score(X, t[:10]), b.triplet_score(Z, t[:10]),
                               **kw)
    assert a.score(X, y) == pytest.approx(b.score(Z, y), rel=1e-9)
    # the learned matrix lives in the preprocessed coordinates
    if isinstance(a, BilinearMixin):
        W = b.get_bilinear_matrix()
        np.testing.assert_allclose(S, Zq @ W @ Zd.T, **kw)
        if mode in (None, "center"):    # in the caller's unit, on X (centered)
            C = 0.0 if mode is None else X.mean(axis=0)
            np.testing.assert_allclose(S, (Xq - C) @ a.get_bilinear_matrix() @ (Xd - C).T,
                                       **kw)
        else:
            np.testing.assert_allclose(a.get_bilinear_matrix(), W, rtol=1e-6, atol=1e-8)
    else:
        # get_mahalanobis_matrix is on the caller's rows: X for a, Z for b
        Mb = b.get_mahalanobis_matrix()
        D = Zq[:, None, :] - Zd[None, :, :]
        np.testing.assert_allclose(S, -np.einsum("ijk,kl,ijl->ij", D, Mb, D), **kw)
        np.testing.assert_allclose(a.transform(Xq), b.transform(Zq), **kw)
        M = a.get_mahalanobis_matrix()
        if mode == "sphere":        # not affine: M acts on the lifted rows
            np.testing.assert_allclose(M, Mb, rtol=1e-6, atol=1e-8)
            return
        D = Xq[:, None, :] - Xd[None, :, :]
        np.testing.assert_allclose(S, -np.einsum("ijk,kl,ijl->ij", D, M, D), **kw)
        d = X[0] - X[5]
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
    for name in ("preprocessing_mean_", "preprocessing_scale_", "preprocessing_whitener_",
                 "preprocessing_radius_"):
        assert hasattr(a, name) == hasattr(b, name)
        if hasattr(a, name):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.similarity(X[:5], X), b.similarity(X[:5], X))
    assert b.n_features_in_ == a.n_features_in_ == X.shape[1]
    if mode == "sphere":
        assert b.preprocessing_radius_ == a.preprocessing_radius_
        assert isinstance(b.preprocessing_radius_, float)


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


def test_auto_is_sphere_for_bilinear_standardize_for_mahalanobis_none_for_wide_sparse():
    """The default changed with the "sphere" mode (was "standardize" for
    every learner): bilinear learners lift, Mahalanobis ones standardize."""
    X, y, t = _data()
    for e in TRIPLET:
        if e.name in BASELINES:
            continue
        m = e.make(0).fit(X, triplets=t)
        assert m.preprocessing == "auto", e.name
        want = "sphere" if issubclass(e.cls, BilinearMixin) else "standardize"
        assert m.preprocessing_ == want, e.name
        assert e.cls._auto_preprocessing == want, e.name
    m = tm.OASIS(n_triplets=50, random_state=0).fit(X, y)
    assert m.preprocessing == "auto" and m.preprocessing_ == "sphere"
    assert m.W_.shape == (X.shape[1] + 1,) * 2
    m.fit(sp.csr_matrix(X), y)
    assert m.preprocessing_ == "sphere"
    assert tm.SML(n_triplets=50, max_iter=5, tol=None).fit(sp.csr_matrix(X), y) \
        .preprocessing_ == "standardize"
    rng = np.random.default_rng(0)
    Xs = sp.random(30, MAX_DENSIFY_FEATURES + 1, density=0.01, format="csr", random_state=0)
    ys = np.arange(30) % 3
    m = tm.OASIS(n_triplets=50, random_state=0).fit(Xs, ys)
    assert m.preprocessing_ is None
    assert not any(hasattr(m, n) for n in ("preprocessing_mean_", "preprocessing_scale_",
                                           "preprocessing_radius_"))
    ref = tm.OASIS(n_triplets=50, random_state=0, preprocessing=None).fit(Xs, ys)
    np.testing.assert_array_equal(m.W_, ref.W_)
    del rng


@pytest.mark.parametrize("mode", ("center", "standardize", "whiten", "sphere"))
def test_high_dimensional_sparse_refused_without_densifying(mode):
    Xs = sp.random(30, MAX_DENSIFY_FEATURES + 1, density=0.01, format="csr", random_state=0)
    with pytest.raises(ValueError, match=f"OASIS: preprocessing='{mode}' centers the features"):
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


@pytest.mark.parametrize("mode", ("center", "standardize", "whiten", "sphere"))
@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_zero_variance_columns_give_no_nan(entry, mode):
    X, y, t = _data(seed=4)
    X[:, 2] = 3.25           # constant column
    X[:, 4] = 1e6            # constant and large
    a = entry.make(0, preprocessing=mode, **_start(entry, mode)).fit(X, triplets=t)
    S = a.similarity(X)
    assert np.isfinite(S).all()
    Z = reference(mode, X, X, with_unit=a._feature_unit)
    assert np.isfinite(Z).all()
    b = raw(entry.make(0, preprocessing=None, **_start(entry, mode))).fit(Z, triplets=t)
    np.testing.assert_allclose(S, b.similarity(Z), rtol=1e-6,
                               atol=1e-7 * max(1.0, np.abs(S).max()))


def test_large_finite_features_standardize_without_overflow():
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
    del meta["attributes"]["preprocessing_unit_"]       # 0.1 trained on the raw rows
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    members["__meta__.npy"] = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "old.npz", "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    old = tm.load_model(tmp_path / "old.npz")
    assert old.preprocessing is None and old.preprocessing_ is None
    assert not hasattr(old, "preprocessing_unit_")
    np.testing.assert_allclose(old.similarity(X), m.similarity(X * m.preprocessing_unit_),
                               rtol=1e-12)


def test_inconsistent_statistics_refused(tmp_path):
    import zipfile
    X, y, t = _data()
    m = tm.OASIS(preprocessing="standardize", n_triplets=50, random_state=0).fit(X, y)
    m.save(tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as src, \
            zipfile.ZipFile(tmp_path / "bad.npz", "w") as dst:
        for n in src.namelist():
            if n != "preprocessing_scale_.npy":        # the scale of "standardize" dropped
                dst.writestr(n, src.read(n))
    with pytest.raises(ValueError, match="preprocessing_='standardize' needs the arrays"):
        tm.load_model(tmp_path / "bad.npz")


def test_partial_fit_fits_preprocessing_on_first_call():
    X, y, t = _data(seed=6)
    a = tm.OASIS(preprocessing="standardize").partial_fit(X, t[:60]).partial_fit(X, t[60:])
    Z = reference("standardize", X, X)
    b = raw(tm.OASIS(preprocessing=None)).partial_fit(Z, t[:60]).partial_fit(Z, t[60:])
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.similarity(X), b.similarity(Z), rtol=1e-9, atol=1e-9)


def test_baselines_default_to_raw_features():
    for cls in (tm.Euclidean, tm.DotProduct):
        assert cls().get_params()["preprocessing"] is None
    for e in TRIPLET:
        if e.name not in ("Euclidean", "DotProduct"):
            assert e.cls().get_params()["preprocessing"] == "auto", e.name


@pytest.mark.parametrize("name,mode,params", [
    ("SML", "standardize", dict(n_triplets=60, max_iter=10, tol=None)),
    ("COMET", "sphere", dict(max_iter=2, tol=None)),
    ("COMET", "standardize", dict(max_iter=2, tol=None)),
    ("SparseCOMET", "sphere", dict(max_iter=2, tol=None)),
])
def test_objective_takes_raw_X(name, mode, params):
    X, y, t = _data(seed=7)
    cls = getattr(tm, name)
    a = cls(preprocessing=mode, random_state=0, **params).fit(X, triplets=t)
    Z = reference(mode, X, X)
    b = raw(cls(preprocessing=None, random_state=0, **params)).fit(Z, triplets=t)
    assert a.objective(X, t) == pytest.approx(b.objective(Z, t), rel=1e-8)
    with pytest.raises(ValueError, match=name):
        a.objective(X[:, :-1], t)
    with pytest.raises(ValueError, match=name):
        a.objective(X, [[0, 1, X.shape[0]]])


def test_every_learner_documents_preprocessing_once():
    """The shared parameter text lands in each docstring exactly once, with
    no placeholder left (``document_preprocessing`` / the factored template)."""
    from tripletml.registry import entries
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


# ---------------------------------------------------------------- "sphere"
def test_sphere_lift_matches_formula_and_has_norm_s():
    from tripletml.core.preprocessing import sphere_lift
    rng = np.random.default_rng(0)
    Z = np.vstack([rng.normal(size=(20, 4)) * 3, np.zeros((1, 4)), [[1e3, -2e3, 0, 5]]])
    for s in (0.3, 1.0, 2.5):
        P = sphere_lift(Z, s)
        np.testing.assert_allclose(P, stereographic(Z, s), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.linalg.norm(P / s, axis=1), 1.0, rtol=1e-12)  # no underflow
    # phi(q).phi(x) = s^2 - |phi(q) - phi(x)|^2 / 2 and the closed form of the chord
    s = 1.7
    P = sphere_lift(Z[:10], s)
    G = P @ P.T
    D2 = ((Z[:10, None, :] - Z[None, :10, :]) ** 2).sum(-1)
    n = 1 + (Z[:10] ** 2).sum(1) / s ** 2
    np.testing.assert_allclose(s ** 2 - G, 2 * D2 / np.outer(n, n), rtol=1e-9, atol=1e-12)
    # a row of norm s keeps its coordinates; the origin goes to the south
    # pole, huge rows tend to the north pole, without overflow
    z = np.array([[0.6, -0.8, 0.0, 0.0]]) * s
    np.testing.assert_allclose(sphere_lift(z, s), np.hstack([z, [[0.0]]]), atol=1e-15)
    np.testing.assert_allclose(sphere_lift(np.zeros((1, 4)), s), [[0, 0, 0, 0, -s]])
    big = sphere_lift(np.array([[1e200, -1e200, 0.0, 3.0]]), 2.0)
    assert np.isfinite(big).all()
    np.testing.assert_allclose(big, [[0, 0, 0, 0, 2.0]], atol=1e-150)


def test_sphere_identity_ranks_like_reweighted_euclidean():
    """W = I on the lifted rows (DotProduct with "sphere") ranks a query's
    database rows by |q - x|^2 / (1 + |x / s|^2): the formula's reweighted
    Euclidean distance."""
    X, y, t = _data(seed=8, n=40)
    m = tm.DotProduct(preprocessing="sphere").fit(X)
    Z = reference("standardize", X, X)
    s = sphere_radius(X)
    assert m.preprocessing_radius_ == pytest.approx(s, rel=1e-12)
    S = m.similarity(X[:8], X)
    D2 = ((Z[:8, None, :] - Z[None, :, :]) ** 2).sum(-1)
    nq, nx = 1 + (Z[:8] ** 2).sum(1) / s ** 2, 1 + (Z ** 2).sum(1) / s ** 2
    np.testing.assert_allclose(S, s ** 2 - 2 * D2 / np.outer(nq, nx), rtol=1e-9,
                               atol=1e-12 * s ** 2)
    key = D2 / nx[None, :]
    for i in range(8):
        np.testing.assert_array_equal(np.argsort(-S[i], kind="stable"),
                                      np.argsort(key[i], kind="stable"))
    # and only the reweighting separates it from the Euclidean ranking
    assert not np.array_equal(np.argsort(-S, axis=1), np.argsort(D2, axis=1))


@pytest.mark.parametrize("entry", BILINEAR, ids=lambda e: e.name)
def test_sphere_bilinear_learner_equals_learner_on_lifted_rows(entry, tmp_path):
    """Every bilinear learner with "sphere" on raw X equals the same learner
    with preprocessing=None on phi(standardized X): similarity, pair_score,
    embeddings (up to a rotation), W, and after a save / load round trip."""
    X, y, t = _data(seed=9)
    a = entry.make(0, preprocessing="sphere").fit(X, triplets=t)
    P = reference("sphere", X, X)
    b = raw(entry.make(0, preprocessing=None)).fit(P, triplets=t)
    d = X.shape[1]
    assert a.n_features_in_ == d and a.n_features_preprocessed_ == d + 1
    assert b.n_features_in_ == d + 1
    W = a.get_bilinear_matrix()
    assert W.shape == (d + 1, d + 1)
    np.testing.assert_allclose(W, b.get_bilinear_matrix(), rtol=1e-6, atol=1e-8)
    Q, D = X[:6], X[6:20]
    S = a.similarity(Q, D)
    kw = dict(rtol=1e-6, atol=1e-7 * max(1.0, np.abs(S).max()))
    np.testing.assert_allclose(S, b.similarity(P[:6], P[6:20]), **kw)
    np.testing.assert_allclose(S, P[:6] @ W @ P[6:20].T, **kw)
    np.testing.assert_allclose(a.pair_score(Q, D[:6]), b.pair_score(P[:6], P[6:12]), **kw)
    # a factored model's embeddings are defined up to one rotation of the
    # factor space (LAPACK versions pick different bases for equal singular
    # values): their Gram matrices are not
    for ea, eb in ((a.embed_queries(Q), b.embed_queries(P[:6])),
                   (a.embed_database(D), b.embed_database(P[6:20]))):
        np.testing.assert_allclose(ea @ ea.T, eb @ eb.T, rtol=1e-6,
                                   atol=1e-7 * max(1.0, np.abs(ea @ ea.T).max()))
    np.testing.assert_allclose(a.embed_queries(Q) @ a.embed_database(D).T, S, **kw)
    a.save(tmp_path / "m.npz")
    c = tm.load_model(tmp_path / "m.npz")
    assert c.preprocessing_ == "sphere" and c.n_features_in_ == d
    np.testing.assert_array_equal(c.similarity(Q, D), S)
    np.testing.assert_array_equal(c.pair_score(Q, D[:6]), a.pair_score(Q, D[:6]))


@pytest.mark.parametrize("entry", BILINEAR, ids=lambda e: e.name)
def test_sphere_wrong_width_names_the_raw_d(entry):
    X, y, t = _data(seed=10)
    m = entry.make(0, preprocessing="sphere").fit(X, triplets=t)
    d = X.shape[1]
    for bad in (X[:, :d - 1], np.hstack([X, X[:, :1]])):
        with pytest.raises(ValueError, match=f"{entry.cls.__name__}: X has {bad.shape[1]} "
                                             f"features, but .* expecting {d} features"):
            m.similarity(bad)


def test_sphere_partial_fit_and_mahalanobis_transform():
    X, y, t = _data(seed=11)
    P = reference("sphere", X, X)
    a = tm.OASIS(preprocessing="sphere").partial_fit(X, t[:60]).partial_fit(X, t[60:])
    b = raw(tm.OASIS(preprocessing=None)).partial_fit(P, t[:60]).partial_fit(P, t[60:])
    assert a.n_features_in_ == X.shape[1] and a.W_.shape == (X.shape[1] + 1,) * 2
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.similarity(X), b.similarity(P), rtol=1e-9, atol=1e-9)
    # an explicit "sphere" works for a Mahalanobis learner too (not its "auto")
    m = tm.SML(preprocessing="sphere", n_triplets=60, max_iter=10, tol=None,
               random_state=0).fit(X, triplets=t)
    r = raw(tm.SML(preprocessing=None, n_triplets=60, max_iter=10, tol=None,
                   random_state=0)).fit(P, triplets=t)
    assert m.components_.shape[1] == X.shape[1] + 1 and m.n_features_in_ == X.shape[1]
    np.testing.assert_allclose(m.transform(X), r.transform(P), rtol=1e-6, atol=1e-9)


def test_sphere_bad_radius_refused_on_load(tmp_path):
    import io
    import json
    import zipfile
    X, y, t = _data()
    tm.OASIS(preprocessing="sphere", n_triplets=50, random_state=0).fit(X, y).save(
        tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(np.load(io.BytesIO(members["__meta__.npy"])).tobytes().decode())
    for value, msg in ((-1.0, "preprocessing_radius_=-1.0 must be a positive finite float"),
                       ("2", "must be a positive finite float"),
                       (True, "must be a positive finite float"),
                       (10 ** 400, "must be a positive finite float"),
                       (1e-320, "must be a positive finite float"),
                       (1e300, "must be a positive finite float"),
                       (None, "needs the arrays")):
        bad = json.loads(json.dumps(meta))
        if value is None:
            del bad["attributes"]["preprocessing_radius_"]
        else:
            bad["attributes"]["preprocessing_radius_"] = value
        buf = io.BytesIO()
        np.save(buf, np.frombuffer(json.dumps(bad).encode(), dtype=np.uint8))
        with zipfile.ZipFile(tmp_path / "bad.npz", "w") as zf:
            for n, data in {**members, "__meta__.npy": buf.getvalue()}.items():
                zf.writestr(n, data)
        with pytest.raises(ValueError, match=msg):
            tm.load_model(tmp_path / "bad.npz")


def test_tiny_columns_are_standardized_not_taken_for_constant():
    """The constant-column floor is relative to the column: features in
    units of 1e-15 are standardized like the same features in units of 1."""
    X, y, t = _data(seed=11)
    a = tm.OASIS(n_triplets=200, random_state=0).fit(X, triplets=t)
    b = tm.OASIS(n_triplets=200, random_state=0).fit(X * 1e-15, triplets=t)
    np.testing.assert_allclose(b.preprocessing_scale_, a.preprocessing_scale_ * 1e15, rtol=1e-9)
    np.testing.assert_allclose(b.similarity(X[:6] * 1e-15), a.similarity(X[:6]), rtol=1e-7,
                               atol=1e-9)
    Xc = X.copy()
    Xc[:, 1] = 0.1                               # constant (to rounding): scale 1
    assert tm.SML(preprocessing="standardize", max_iter=2, tol=None).fit(
        Xc, triplets=t).preprocessing_scale_[1] == 1.0


def test_sphere_lift_far_rows_reach_the_pole_without_overflow():
    """|z| up to the largest float and s from 1e-300 to 1e150: finite, norm s,
    and the limit of the formula (u -> infinity: phi -> [0, s])."""
    from tripletml.core.preprocessing import sphere_lift
    Z = np.array([[1e308, -1e308, 0.0], [0.0, 0.0, 0.0]])
    for s in (1e-300, 1.0, 1e150):
        P = sphere_lift(Z, s)
        assert np.isfinite(P).all()
        np.testing.assert_allclose(np.linalg.norm(P / s, axis=1), 1.0, rtol=1e-12)  # no underflow
        np.testing.assert_allclose(P[1], [0.0, 0.0, 0.0, -s])          # the center: the pole
    np.testing.assert_allclose(sphere_lift(Z, 1e-300)[0], [0.0, 0.0, 0.0, 1e-300], atol=1e-310)


def test_sphere_functions_refuse_bad_input():
    from tripletml.core.preprocessing import sphere_lift, sphere_radius
    from tripletml.search.index import embedding_cone
    Z = np.ones((3, 2))
    for bad, msg in ((np.ones(3), "2-D"), (np.array([[1.0, np.nan]]), "NaN or infinity")):
        with pytest.raises(ValueError, match=f"sphere_lift: Z .*{msg}|sphere_lift: .*{msg}"):
            sphere_lift(bad, 1.0)
        with pytest.raises(ValueError, match=f"sphere_radius: .*{msg}"):
            sphere_radius(bad)
        with pytest.raises(ValueError, match=f"embedding_cone: .*{msg}"):
            embedding_cone(bad)
    for r in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="sphere_lift: radius"):
            sphere_lift(Z, r)
    with pytest.raises(TypeError, match="sphere_lift: radius"):
        sphere_lift(Z, "1")
    assert sphere_lift(np.zeros((0, 2)), 1.0).shape == (0, 3)
    assert sphere_radius(np.zeros((0, 2))) == 1.0 and embedding_cone(np.zeros((0, 2))) == 0.0


# ------------------------------------------------- the Preprocessor object (issue 25)
def _manual(mode, X):
    """The preprocessed rows from NumPy (population std, constant columns
    kept), for the modes with a closed form here."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    if mode is None:
        return X / unit(X)
    if mode == "center":
        return (X - mean) / unit(X - mean)
    Z = (X - mean) / std
    if mode == "standardize":
        return Z
    if mode == "sphere":
        s = float(np.median(np.linalg.norm(Z, axis=1)))
        return stereographic(Z, s)
    lam, U = np.linalg.eigh(np.cov(Z, rowvar=False, bias=True))
    return Z @ (U / np.sqrt(lam)) @ U.T                      # ZCA


@pytest.mark.parametrize("mode", MODES)
def test_preprocessor_fit_transform_second_moment(mode):
    from tripletml.core.preprocessing import Preprocessor
    X, y, t = _data(seed=11)
    pre = Preprocessor(mode, owner="OASIS")
    assert pre.fit(X) is pre and pre.mode_ == mode
    assert pre.n_features_in_ == 5 and pre.n_features_out_ == 5 + (mode == "sphere")
    Z = pre.transform(X)
    np.testing.assert_allclose(Z, _manual(mode, X), rtol=1e-9, atol=1e-9)
    Zs = pre.transform(sp.csr_matrix(X))
    assert sp.issparse(Zs) == (mode is None)                # None leaves sparse X sparse
    np.testing.assert_allclose(Zs.toarray() if mode is None else Zs, Z, rtol=1e-12,
                               atol=1e-12)
    X0 = X.copy()
    pre.transform(X)
    np.testing.assert_array_equal(X, X0)                    # copy=True: X untouched
    D = X[t[:, 0]] - X[t[:, 1]]
    C = D.T @ D / len(D)
    if mode == "sphere":
        with pytest.raises(ValueError, match="OASIS: the 'sphere' preprocessing is not linear"):
            pre.second_moment(C)
    else:
        E = Z[t[:, 0]] - Z[t[:, 1]]
        np.testing.assert_allclose(pre.second_moment(C), E.T @ E / len(E), rtol=1e-9,
                                   atol=1e-12)
    with pytest.raises(ValueError, match="OASIS: X has 4 features, but the preprocessing "
                                         "was fitted with 5"):
        pre.transform(X[:, :4])


def test_preprocessor_resolves_auto_and_refuses_unfitted_use():
    from sklearn.exceptions import NotFittedError

    from tripletml.core.preprocessing import Preprocessor
    X, y, t = _data()
    assert Preprocessor("auto", auto="sphere").resolve(X) == "sphere"
    wide = sp.random(10, MAX_DENSIFY_FEATURES + 1, density=0.01, format="csr", random_state=0)
    assert Preprocessor("auto", auto="sphere").resolve(wide) is None
    with pytest.raises(ValueError, match="LORETA: preprocessing='center' centers"):
        Preprocessor("center", owner="LORETA").resolve(wide)
    with pytest.raises(ValueError, match="OASIS: parameter preprocessing='bogus'"):
        Preprocessor("bogus", owner="OASIS").fit(X)
    for call in (lambda p: p.transform(X), lambda p: p.second_moment(np.eye(5)),
                 lambda p: p.n_features_out_, lambda p: p.to_attributes()):
        with pytest.raises(NotFittedError):
            call(Preprocessor("standardize"))


@pytest.mark.parametrize("mode", MODES)
def test_preprocessor_attributes_round_trip_and_equality(mode):
    from tripletml.core.preprocessing import Preprocessor
    X, y, t = _data(seed=3)
    pre = Preprocessor(mode, owner="SML").fit(X)
    attrs = pre.to_attributes()
    want = {None: {"unit_"}, "center": {"mean_", "unit_"}, "standardize": {"mean_", "scale_"},
            "whiten": {"mean_", "whitener_"}, "sphere": {"mean_", "scale_", "radius_"}}[mode]
    assert set(attrs) == {"preprocessing_"} | {"preprocessing_" + n for n in want}
    back = Preprocessor.from_attributes(attrs, 5, mode=mode, owner="SML")
    assert back == pre and not back != pre
    np.testing.assert_array_equal(back.transform(X), pre.transform(X))
    assert Preprocessor(mode, owner="SML").fit(X + 1.0) != pre
    assert Preprocessor(mode, owner="other").fit(X) != pre            # parameters differ
    with pytest.raises(TypeError):
        hash(pre)


def test_preprocessor_from_attributes_refuses_inconsistent_state():
    from tripletml.core.preprocessing import Preprocessor
    X, y, t = _data()
    good = Preprocessor("standardize").fit(X).to_attributes()
    bad_cases = [
        ({"preprocessing_mean_": good["preprocessing_mean_"]}, "stored without preprocessing_"),
        ({**good, "preprocessing_": "zca"}, "'zca' is not a fitted preprocessing mode"),
        ({**good, "preprocessing_": ["center"]}, "is not a fitted preprocessing mode"),
        ({**good, "preprocessing_whitener_": np.eye(5)}, "needs the arrays"),
        ({**good, "preprocessing_other_": 1}, "are not preprocessing attributes"),
        ({**good, "preprocessing_scale_": np.ones(4)}, "preprocessing_scale_ has shape"),
        ({**good, "preprocessing_scale_": np.array([1, 2, 3, 4, np.nan])},
         "preprocessing_scale_ contains NaN"),
        ({**good, "preprocessing_scale_": [1.0] * 5}, "preprocessing_scale_ is a list"),
    ]
    for attrs, msg in bad_cases:
        with pytest.raises(ValueError, match=msg):
            Preprocessor.from_attributes(attrs, 5)
    assert Preprocessor.from_attributes({}, 5).mode_ is None   # tripletml before issue 14


def test_learner_holds_one_preprocessor():
    """The statistics live in scaler_ only; the preprocessing_* names
    read it; a refit replaces it and a failed refit removes it."""
    X, y, t = _data()
    from tripletml.registry import get_entry
    m = get_entry("LowRankDML").make(0, preprocessing="whiten").fit(X, triplets=t)
    pre = m.scaler_
    assert pre.mode_ == m.preprocessing_ == "whiten" and pre.owner == "LowRankDML"
    assert not [k for k in vars(m) if k.startswith("preprocessing_")]
    assert m.preprocessing_mean_ is pre.mean_ and m.preprocessing_whitener_ is pre.whitener_
    assert not hasattr(m, "preprocessing_scale_") and not hasattr(m, "preprocessing_radius_")
    np.testing.assert_allclose(m.transform(X), pre.transform(X) @ m.components_.T)
    m.set_params(preprocessing="center").fit(X, triplets=t)
    assert m.scaler_ is not pre and m.preprocessing_ == "center"
    with pytest.raises(ValueError):
        m.fit(X, triplets=[[0, 1, 99]])
    assert not hasattr(m, "scaler_") and not hasattr(m, "preprocessing_")
    assert not hasattr(m, "n_features_in_")


def _write_v01_file(path, cls_name, params, attrs, arrays):
    """A model file laid out as tripletml 0.1 wrote it (format 1: the
    preprocessing as flat attributes), built here without ``save``."""
    import json
    meta = {"format": "tripletml-model", "format_version": 1, "class": cls_name,
            "params": params, "attributes": attrs}
    blob = np.frombuffer(json.dumps(meta, default=lambda o: o.item()).encode("utf-8"),
                         dtype=np.uint8)
    np.savez(path, __meta__=blob, **arrays)


@pytest.mark.parametrize("mode", ["standardize", "sphere", "whiten"])
def test_a_file_of_tripletml_0_1_loads(mode, tmp_path):
    X, y, t = _data(seed=4)
    m = tm.OASIS(preprocessing=mode, n_triplets=60, random_state=0).fit(X, y)
    pre = m.scaler_
    arrays = {k: v for k, v in vars(m).items() if isinstance(v, np.ndarray)}
    attrs = {k: v for k, v in vars(m).items() if k.endswith("_") and not k.startswith("_")
             and k != "scaler_" and k not in arrays}
    attrs["preprocessing_"] = mode
    for name in ("mean_", "scale_", "whitener_"):
        if getattr(pre, name) is not None:
            arrays["preprocessing_" + name] = getattr(pre, name)
    if mode == "sphere":
        attrs["preprocessing_radius_"] = pre.radius_
    params = {k: v for k, v in m.get_params().items()}
    _write_v01_file(tmp_path / "old.npz", "OASIS", params, attrs, arrays)
    back = tm.load_model(tmp_path / "old.npz")
    assert back.scaler_ == pre
    np.testing.assert_array_equal(back.similarity(X), m.similarity(X))
    back.save(tmp_path / "again.npz")                         # and is written the same way
    with np.load(tmp_path / "again.npz") as f:
        assert set(f.files) == {"__meta__", *arrays}


def test_a_pickle_of_tripletml_0_1_is_adopted():
    """A learner pickled by tripletml 0.1 held the statistics as attributes;
    unpickling rebuilds scaler_ (else the map would be silently lost)."""
    X, y, t = _data(seed=5)
    m = tm.SML(preprocessing="standardize", random_state=0, max_iter=5, tol=None).fit(
        X, triplets=t)
    state = dict(m.__getstate__())                          # (a copy: not m's own dict)
    pre = state.pop("scaler_")
    state.update(pre.to_attributes())                        # the 0.1 layout
    old = tm.SML.__new__(tm.SML)
    old.__setstate__(state)
    assert old.scaler_ == pre
    assert not [k for k in vars(old) if k.startswith("preprocessing_")]
    np.testing.assert_array_equal(old.transform(X), m.transform(X))


def test_a_pickle_of_tripletml_0_2_is_adopted():
    """tripletml 0.2 held the fitted scaler in ``preprocessor_`` (metric-learn's
    name for the row lookup); unpickling moves it to ``scaler_``."""
    X, y, t = _data(seed=5)
    m = tm.SML(preprocessing="standardize", random_state=0, max_iter=5, tol=None).fit(
        X, triplets=t)
    state = dict(m.__getstate__())
    state["preprocessor_"] = state.pop("scaler_")             # the 0.2 layout
    old = tm.SML.__new__(tm.SML)
    old.__setstate__(state)
    assert old.scaler_ == m.scaler_ and "preprocessor_" not in vars(old)
    np.testing.assert_array_equal(old.transform(X), m.transform(X))


def test_a_file_cannot_plant_a_preprocessor(tmp_path):
    """scaler_ is never read from a file: a metadata value under that
    name is refused, and so is a state whose n_features_in_ is not a width."""
    from tripletml.core.preprocessing import Preprocessor
    X, y, t = _data(seed=7)
    m = tm.OASIS(preprocessing=None, n_triplets=40, random_state=0).fit(X, y)
    arrays = {k: v for k, v in vars(m).items() if isinstance(v, np.ndarray)}
    attrs = {k: v for k, v in vars(m).items() if k.endswith("_") and not k.startswith("_")
             and k != "scaler_" and k not in arrays}
    _write_v01_file(tmp_path / "bad.npz", "OASIS", m.get_params(),
                    {**attrs, "preprocessing_": None, "scaler_": {"mode_": "whiten"}},
                    arrays)
    with pytest.raises(ValueError, match="scaler_ is a dict, not a Preprocessor"):
        tm.load_model(tmp_path / "bad.npz")
    _write_v01_file(tmp_path / "bad2.npz", "OASIS", m.get_params(),
                    {**attrs, "preprocessing_": None, "preprocessor_": {"mode_": "whiten"}},
                    arrays)
    with pytest.raises(ValueError, match="preprocessor_ is a dict, not a Preprocessor"):
        tm.load_model(tmp_path / "bad2.npz")
    with pytest.raises(ValueError, match="n_features_in_=0 is not a positive integer"):
        Preprocessor.adopt_saved({"n_features_in_": 0, "preprocessing_": None})
    state = {"n_features_in_": 5, "preprocessing_": "center",
             "preprocessing_mean_": np.zeros(5)}
    Preprocessor.adopt_saved(state, owner="OASIS")
    assert set(state) == {"n_features_in_", "scaler_"}
    assert state["scaler_"].mode_ == "center" and state["scaler_"].owner == "OASIS"
