"""metric-learn users' silent traps (issue 39, section 1; issue 42 item 5's
first case): each either a clear error or the right result."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import NotFittedError
from sklearn.metrics import accuracy_score
from sklearn.model_selection import cross_val_score

import tripletml as tm
from tripletml.registry import get_entry


def _make(name, **params):
    return get_entry(name).make(**params)


@pytest.fixture(scope="module")
def iris_pairs():
    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    P = rng.integers(0, X.shape[0], size=(240, 2))
    P = P[P[:, 0] != P[:, 1]][:200]
    lab = np.where(y[P[:, 0]] == y[P[:, 1]], 1, -1)
    return X, y, P, lab


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


# --------------------------------------------------- index pairs, no preprocessor
@pytest.mark.parametrize("name", ["ITML", "MMC", "KISSME", "SCML", "OASIS", "RCA"])
def test_index_pairs_without_preprocessor_are_refused(name, iris_pairs):
    """Integer (n, 2) index pairs with pair labels, no preprocessor=: refused
    naming the estimator and preprocessor= (they used to be fitted as n rows
    of two features, n_features_in_ == 2, without a word)."""
    X, _, P, lab = iris_pairs
    for y in (lab, (lab > 0).astype(int)):
        with pytest.raises(ValueError, match=rf"{name}: X is an integer array of shape "
                                             r"\(200, 2\).*preprocessor="):
            _make(name).fit(P, y)
        with pytest.raises(ValueError, match="preprocessor="):
            _make(name).fit(P.tolist(), y.tolist())
    # the ways out: the rows through preprocessor= (or pairs=), or float rows
    m = _quiet(_make(name, preprocessor=X).fit, P, lab)
    assert m.n_features_in_ == X.shape[1] and m.tuple_form_ == "pairs"
    assert _quiet(_make(name).fit, P.astype(float), lab).n_features_in_ == 2
    # genuine integer 2-feature rows with class labels are not pair labels
    Xi = np.random.default_rng(1).integers(0, 9, size=(60, 2))
    assert _quiet(_make(name).fit, Xi, np.arange(60) % 3).n_features_in_ == 2


def test_index_triplets_without_preprocessor_are_refused(iris_pairs):
    X, y, _, _ = iris_pairs
    T = tm.triplets.random_class_triplets(y, 50, random_state=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"OASIS: .*index triplets.*preprocessor="):
        _make("OASIS").fit(T)
    assert _make("OASIS", preprocessor=X).fit(T).n_features_in_ == X.shape[1]
    # the unsupervised baselines always take rows (integer RGB values, say)
    assert tm.Euclidean().fit(T).n_features_in_ == 3


@pytest.mark.parametrize("name", ["KISSME", "OASIS", "ITML", "LORETA"])
def test_float_index_pairs_with_preprocessor_are_index_pairs(name, iris_pairs):
    """Issue 42 item 5: float arrays of index pairs with preprocessor= are
    index pairs (integral values), not two-feature rows; non-integral values
    are refused."""
    X, _, P, lab = iris_pairs
    a = _quiet(_make(name, preprocessor=X).fit, P.astype(float), lab)
    b = _quiet(_make(name, preprocessor=X).fit, P, lab)
    assert a.n_features_in_ == X.shape[1] and a.tuple_form_ == "pairs"
    np.testing.assert_allclose(a.similarity(X[:8]), b.similarity(X[:8]))
    np.testing.assert_array_equal(a.predict(P[:20].astype(float)), b.predict(P[:20]))
    bad = P.astype(float)
    bad[3, 1] += 0.5
    with pytest.raises(ValueError, match=rf"{name}: with preprocessor= set.*non-integral"):
        _make(name, preprocessor=X).fit(bad, lab)


# ------------------------------------------------------------ pair labels {1, 0}
def test_predict_answers_in_the_pair_labels_given(iris_pairs, tmp_path):
    X, _, P, lab = iris_pairs
    y01 = (lab > 0).astype(int)
    pm = _quiet(tm.ITML(random_state=0).fit, X[P], lab)
    p01 = _quiet(tm.ITML(random_state=0).fit, X[P], y01)
    np.testing.assert_array_equal(pm.classes_, [-1, 1])
    np.testing.assert_array_equal(p01.classes_, [0, 1])
    pred = p01.predict(X[P])
    assert set(np.unique(pred)) <= {0, 1}
    np.testing.assert_array_equal(pred, (pm.predict(X[P]) > 0).astype(int))
    assert accuracy_score(y01, pred) == accuracy_score(lab, pm.predict(X[P])) > 0.8
    # cross-validated accuracy is the same in both conventions
    s01 = _quiet(cross_val_score, tm.ITML(random_state=0), X[P], y01, cv=3,
                 scoring="accuracy")
    spm = _quiet(cross_val_score, tm.ITML(random_state=0), X[P], lab, cv=3,
                 scoring="accuracy")
    np.testing.assert_allclose(s01, spm)
    assert s01.min() > 0.7
    # saved and loaded, and calibrate_threshold takes the labels' convention too
    p01.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(tm.load_model(tmp_path / "m.npz").predict(X[P]), pred)
    pm.calibrate_threshold(X[P], y01)
    assert set(np.unique(pm.predict(X[P]))) <= {0, 1}


def test_predict_before_fit_is_not_fitted_error(iris_pairs):
    X, _, P, _ = iris_pairs
    m = tm.ITML()
    assert not hasattr(m, "predict")
    for method in ("predict", "decision_function"):
        with pytest.raises(NotFittedError):
            getattr(m, method)(X[P])
    # fitted on class labels: a transformer, no predict (not "not fitted")
    m = _quiet(_make("ITML").fit, X, np.arange(150) // 50)
    with pytest.raises(AttributeError) as err:
        m.predict(X[P])
    assert not isinstance(err.value, NotFittedError)


# ------------------------------------------------------------------ RCA chunks
def test_rca_chunk_minus_one_is_in_no_chunklet():
    """metric-learn's RCA.fit(X, chunks): -1 = in no chunklet.  Reference:
    M = C^{-1}, C the within-chunklet covariance of the chunked rows only."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 3)) @ rng.normal(size=(3, 3))
    chunks = np.full(80, -1)
    chunks[:30] = np.repeat(np.arange(6), 5)
    C = sum((X[chunks == j] - X[chunks == j].mean(0)).T @ (X[chunks == j] - X[chunks == j]
                                                             .mean(0)) for j in range(6)) / 30
    m = tm.RCA(regularization=0.0, preprocessing=None).fit(X, chunks)
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), np.linalg.inv(C), rtol=1e-8)
    keep = chunks >= 0
    k = tm.RCA(regularization=0.0, preprocessing=None).fit(X[keep], chunks[keep])
    np.testing.assert_allclose(m.get_mahalanobis_matrix(), k.get_mahalanobis_matrix(),
                               rtol=1e-8)
    # binary class labels {-1, 1} (no chunk id 0) are two classes, as before
    yb = np.where(np.arange(80) < 40, -1, 1)
    a = tm.RCA(regularization=0.0, preprocessing=None).fit(X, yb)
    b = tm.RCA(regularization=0.0, preprocessing=None).fit(X, (yb > 0).astype(int))
    np.testing.assert_allclose(a.M_, b.M_)


# ------------------------------------------------------- n_components columns
@pytest.mark.parametrize("name, k", [("MMC", 3), ("RCA", 5)])
def test_transform_has_exactly_n_components_columns(name, k):
    """MMC on iris learns a rank-1 M, RCA on iris with a repeated column a
    rank-4 one: n_components=k gives k columns, zero beyond the rank (they
    used to be dropped without a word), the same distances."""
    X, y = load_iris(return_X_y=True)
    X = np.hstack([X, X[:, :1]])                 # 5 columns of rank 4
    m = _quiet(_make(name, n_components=k).fit, X, y)
    full = _quiet(_make(name).fit, X, y)
    Z, Zf = m.transform(X), full.transform(X)
    assert Zf.shape[1] < k                       # the case: a lower-rank model
    assert Z.shape == (150, k) and len(m.get_feature_names_out()) == k
    r = Zf.shape[1]
    np.testing.assert_allclose(Z[:, :r], Zf, atol=1e-9 * np.abs(Zf).max())
    assert not Z[:, r:].any()
    np.testing.assert_allclose(m.pair_distance(X[:9], X[9:18]),
                               full.pair_distance(X[:9], X[9:18]))


# ------------------------------------------------------- pairs of one kind
@pytest.mark.parametrize("name", ["ITML", "KISSME", "OASIS"])
def test_pairs_of_one_kind_are_refused(name, iris_pairs):
    X, _, P, _ = iris_pairs
    for y, kind in ((np.ones(len(P)), "similar"), (-np.ones(len(P)), "dissimilar"),
                    (np.zeros(len(P)), "dissimilar")):
        with pytest.raises(ValueError, match=rf"{name}: all 200 pairs are labeled {kind}"):
            _make(name).fit(X[P], y)
        with pytest.raises(ValueError, match=rf"{name}: all 200 pairs"):
            _make(name).fit(X, pairs=P, y=y)
    # RCA learns from the similar pairs alone
    assert tm.RCA().fit(X, pairs=P[:20], y=np.ones(20)).n_features_in_ == 4


# ------------------------------------------------------ metric-learn keywords
@pytest.mark.parametrize("name, kw, says", [
    ("LMNN", {"k": 3}, "use n_neighbors"),
    ("ITML", {"prior": "covariance"}, "preprocessing='whiten'"),
    ("MMC", {"n_constraints": 100}, r"n_pairs=2 \* n"),
    ("ITML", {"n_constraints": 100}, "n_triplets"),
    ("SCML", {"beta": 1e-5}, "use alpha"),
    ("OASIS", {"bounds": (1, 2)}, "OASIS has no bounds"),
    ("OASIS", {"nonsense": 1}, "OASIS's __init__.. takes: C, max_iter"),
])
def test_metric_learn_keywords_name_tripletmls(name, kw, says):
    cls = get_entry(name).cls
    with pytest.raises(TypeError, match=rf"{name}: __init__.. got an unexpected keyword "
                                        rf"argument '{next(iter(kw))}'.*{says}"):
        cls(**kw)


def test_fit_bounds_and_get_metric_squared(iris_pairs):
    X, _, P, lab = iris_pairs
    with pytest.raises(TypeError, match=r"ITML\(bounds=\(u, l\)\)"):
        tm.ITML().fit(X[P], lab, bounds=(1.0, 2.0))
    # the wrapped constructors keep scikit-learn's view of the parameters
    assert "n_neighbors" in tm.LMNN().get_params()
    m = _quiet(_make("ITML").fit, X[P], lab)
    d2 = m.pair_distance(X[:5], X[5:10], squared=True)
    f = m.get_metric()
    got = [f(X[i], X[i + 5], squared=True) for i in range(5)]
    np.testing.assert_allclose(got, d2, rtol=1e-10)
    np.testing.assert_allclose([f(X[i], X[i + 5]) for i in range(5)], np.sqrt(d2),
                               rtol=1e-10)
    g = m.get_metric(squared=True)
    np.testing.assert_allclose(g(X[0], X[5]), d2[0], rtol=1e-10)


# --------------------------------------------------------------------- CLI
def test_cli_evaluate_reads_a_shard_folder(tmp_path, capsys):
    from tripletml.cli import main
    from tripletml.distributed.sharded import write_npz_shards

    X, y = load_iris(return_X_y=True)
    write_npz_shards(tmp_path / "sh", X, y, rows_per_shard=50, random_state=0)
    assert main(["fit", "euclidean", str(tmp_path / "sh"), "-o", str(tmp_path / "m.npz")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "m.npz"), str(tmp_path / "sh")]) == 0
    out = capsys.readouterr()
    ref = tm.metrics.evaluate_retrieval(tm.Euclidean().fit(X), X, y, k=())["map"]
    line = [ln for ln in out.out.splitlines() if ln.startswith("map")][0]
    assert float(line.split()[1]) == pytest.approx(ref, abs=1e-4)
    assert "in-sample" in out.err
    # shards without labels: a clear error
    write_npz_shards(tmp_path / "nolab", X, rows_per_shard=50)
    assert main(["evaluate", str(tmp_path / "m.npz"), str(tmp_path / "nolab")]) == 2
    assert "holds none" in capsys.readouterr().err


def test_cli_zero_based_file_points_to_the_flag(tmp_path, capsys):
    from tripletml.cli import main

    p = tmp_path / "z.svm"
    p.write_text("".join(f"{i % 2} 0:{i} 1:{i * i % 7} 2:1\n" for i in range(12)))
    assert main(["fit", "euclidean", str(p), "-o", str(tmp_path / "m.npz")]) == 2
    assert "--zero-based" in capsys.readouterr().err
    assert main(["fit", "euclidean", str(p), "-o", str(tmp_path / "m.npz"),
                 "--zero-based"]) == 0


def test_load_model_raises_a_public_error(tmp_path):
    from tripletml.persistence import ModelFileError

    assert issubclass(ModelFileError, ValueError)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip at all")
    with pytest.raises(ModelFileError) as err:
        tm.load_model(bad)
    assert type(err.value).__name__ == "ModelFileError" and str(bad) in str(err.value)
    m = tm.Euclidean().fit(np.eye(3))
    m.save(tmp_path / "ok.npz")
    raw = dict(np.load(tmp_path / "ok.npz", allow_pickle=False))
    raw["W_"] = np.zeros((2, 2))
    np.savez(tmp_path / "extra.npz", **raw)
    with pytest.raises(ModelFileError, match="does not declare"):
        tm.load_model(tmp_path / "extra.npz")


def test_score_with_index_triplets_as_y_names_the_right_call():
    """A cblearn / metric-learn habit: ``model.score(X, T)`` with T index
    triplets into X.  The rows' score takes class labels: say which call
    scores triplets instead of numpy's "y_query must be 1-D"."""
    from tripletml import OASIS

    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 4))
    T = np.array([rng.choice(20, 3, replace=False) for _ in range(60)])
    m = OASIS(random_state=0).fit(X, triplets=T)
    with pytest.raises(ValueError, match=r"OASIS: score\(X, y\).*index triplets.*triplet_accuracy"):
        m.score(X, T)
    with pytest.raises(ValueError, match=r"index pairs.*pair_score"):
        m.score(X, T[:, :2])
