"""scikit-learn conventions, checked for every learner in the registry."""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import tripletml as tm
from tripletml.core.base import LearnerBase, MahalanobisMixin

from _estimators import _cases, ALL, ESTIMATORS, LEARNERS, MAHALANOBIS, MULTILABEL, toy_data, toy_multilabel


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_params_round_trip_and_clone(factory, alt):
    est = factory()
    params = est.get_params()
    assert set(alt) <= set(params)
    for name, value in alt.items():
        est.set_params(**{name: value})
        assert est.get_params()[name] == value
    c = clone(est)
    assert c.get_params() == est.get_params()


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_init_only_stores(factory, alt):
    est = factory()
    for name in est.get_params():
        est.set_params(**{name: "nonsense-value"})  # no validation until fit
    assert all(v == "nonsense-value" for v in est.get_params().values())


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
@pytest.mark.parametrize("sparse", [False, True])
def test_fit_returns_self_and_sets_n_features(factory, alt, sparse):
    X, y = toy_data()
    est = factory()
    out = est.fit(sp.csr_matrix(X) if sparse else X, y)
    assert out is est
    assert est.n_features_in_ == X.shape[1]
    assert isinstance(est.history_, dict)
    lengths = {len(v) for v in est.history_.values()}
    assert len(lengths) == 1 and "step" in est.history_ and "seconds" in est.history_


@pytest.mark.parametrize("factory, alt", LEARNERS)
def test_numpy_integer_params(factory, alt):
    X, y = toy_data()
    int_params = {k: np.int64(v) for k, v in alt.items()
                  if isinstance(v, int) and not isinstance(v, bool) and k not in ("verbose",)}
    est = factory().set_params(**int_params)
    est.fit(X, y)
    assert est.n_features_in_ == X.shape[1]


@pytest.mark.parametrize("factory, alt", LEARNERS)
def test_grid_search_with_numpy_ints(factory, alt):
    X, y = toy_data(n=45)
    grid = {k: [np.int64(v)] for k, v in alt.items() if k in ("max_iter", "n_triplets")}
    gs = GridSearchCV(factory(), grid, cv=3).fit(X, y)
    assert np.isfinite(gs.best_score_)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_triplet_score_on_few_items_equals_the_per_triplet_route(factory, alt):
    """Many triplets about a few rows are scored from one heads x rows
    similarity matrix; the margins are the per-triplet ones."""
    X, y = toy_data()
    est = factory().fit(X, y)
    rng = np.random.default_rng(0)
    t = np.array([rng.choice(8, 3, replace=False) for _ in range(400)])
    few = est.triplet_score(X, t)                 # 8 x 8 <= 4 * 400: by items
    per = np.concatenate([est.triplet_score(X, t[i:i + 1]) for i in range(0, 400, 37)])
    np.testing.assert_allclose(few[::37], per, rtol=1e-9, atol=1e-9)
    S = est.similarity(X[:8], X[:8])
    np.testing.assert_allclose(few, S[t[:, 0], t[:, 1]] - S[t[:, 0], t[:, 2]], atol=1e-9)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_scoring_contract(factory, alt):
    X, y = toy_data()
    est = factory().fit(X, y)
    S = est.similarity(X[:7], X[3:12])
    assert S.shape == (7, 9)
    diag = np.diag(S[:, :7])
    if isinstance(est, MahalanobisMixin):   # pair_score = -pair_distance (metric-learn)
        np.testing.assert_allclose(est.pair_score(X[:7], X[3:10]),
                                   -np.sqrt(np.maximum(-diag, 0)), atol=1e-9)
        np.testing.assert_allclose(est.pair_distance(X[:7], X[3:10], squared=True), -diag,
                                   atol=1e-9)
    else:
        np.testing.assert_allclose(est.pair_score(X[:7], X[3:10]), diag, atol=1e-9)
    np.testing.assert_allclose(est.similarity(sp.csr_matrix(X[:7]), X[3:12]), S, atol=1e-9)
    t = np.array([[0, 3, 1], [4, 7, 2]])
    expect = [S[0, 0] - est.similarity(X[[0]], X[[1]])[0, 0],
              S[4, 4] - est.similarity(X[[4]], X[[2]])[0, 0]]
    np.testing.assert_allclose(est.triplet_score(X, t), expect, atol=1e-9)
    from tripletml.metrics import mean_average_precision
    assert est.score(X, y) == pytest.approx(mean_average_precision(est.similarity(X), y))
    if isinstance(est, MahalanobisMixin):
        M = est.get_mahalanobis_matrix()
        d = X[0] - X[5]
        assert est.pair_distance(X[[0]], X[[5]])[0] == pytest.approx(np.sqrt(d @ M @ d))
        assert est.pair_distance(X[[0]], X[[5]], squared=True)[0] == pytest.approx(d @ M @ d)
        Z = est.transform(X)
        assert np.sum((Z[0] - Z[5]) ** 2) == pytest.approx(d @ M @ d)
        assert est.get_metric()(X[0], X[5]) == pytest.approx(np.sqrt(d @ M @ d))
        assert est.get_metric(squared=True)(X[0], X[5]) == pytest.approx(d @ M @ d)
    else:
        W = est.get_bilinear_matrix()
        np.testing.assert_allclose(S, X[:7] @ W @ X[3:12].T, atol=1e-9)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_save_load_round_trip(factory, alt, tmp_path):
    X, y = toy_data()
    est = factory().fit(X, y)
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    assert type(back) is type(est)
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.similarity(X), est.similarity(X))
    assert back.history_ == est.history_


def test_load_model_rejects_bad_files(tmp_path):
    X, y = toy_data()
    tm.OASIS(n_triplets=50, random_state=0).fit(X, y).save(tmp_path / "m.npz")
    raw = (tmp_path / "m.npz").read_bytes()
    (tmp_path / "trunc.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="truncated or foreign|not a readable"):
        tm.load_model(tmp_path / "trunc.npz")
    np.savez(tmp_path / "foreign.npz", a=np.arange(3))
    with pytest.raises(ValueError, match="not a tripletml model"):
        tm.load_model(tmp_path / "foreign.npz")
    np.savez(tmp_path / "pickled.npz", __meta__=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a readable"):
        tm.load_model(tmp_path / "pickled.npz")
    with pytest.raises(FileNotFoundError):
        tm.load_model(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="unfitted"):
        tm.OASIS().save(tmp_path / "x.npz")


BAD_X = [
    (np.array([[0.0, np.nan], [1, 2], [3, 4]]), ValueError, "NaN or infinity"),
    (np.array([[0.0, np.inf], [1, 2], [3, 4]]), ValueError, "NaN or infinity"),
    (np.arange(6.0), ValueError, "must be 2-D"),
    (np.zeros((0, 3)), ValueError, "0 sample"),
    (np.array([["a", "b"], ["c", "d"], ["e", "f"]]), TypeError, "numeric"),
]


@pytest.mark.parametrize("factory, alt", LEARNERS)
@pytest.mark.parametrize("X, exc, msg", BAD_X)
def test_bad_X(factory, alt, X, exc, msg):
    est = factory()
    name = type(est).__name__
    with pytest.raises(exc, match=f"{name}: .*{msg}"):
        est.fit(X, np.arange(len(X)) % 2 if len(X) else [])


@pytest.mark.parametrize("factory, alt", LEARNERS)
def test_bad_labels_and_triplets(factory, alt):
    X, y = toy_data()
    name = type(factory()).__name__
    with pytest.raises(ValueError, match=f"{name}: y has 1 class"):
        factory().fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match=f"{name}: y has 29 labels but X has 30"):
        factory().fit(X, y[:-1])
    with pytest.raises(ValueError, match=f"{name}: .*labels y .*or an explicit triplets"):
        factory().fit(X)
    with pytest.raises(ValueError, match=f"{name}: triplets index 30 is out of range"):
        factory().fit(X, triplets=[[0, 1, 30]])
    with pytest.raises(ValueError, match=f"{name}: .*shape"):
        factory().fit(X, triplets=[[0, 1]])
    est = factory().fit(X, y)
    with pytest.raises(ValueError, match=f"{name}: X has 4 features, but {name} is expecting "
                                         "5 features as input"):
        est.similarity(X[:, :4])
    with pytest.raises(ValueError, match=f"{name}: .*index 99 is out of range"):
        est.triplet_score(X, [[0, 1, 99]])


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_decision_function_has_one_meaning(factory, alt):
    """decision_function(X, triplets), the 0.1 name of triplet_score, was
    removed in 0.3: a model fitted on labels has no decision_function (as
    scikit-learn expects of a transformer); after a fit on triplets of points
    it scores such triplets."""
    X, y = toy_data()
    est = factory().fit(X, y)
    t = np.array([[0, 3, 1], [4, 7, 2]])
    assert not hasattr(est, "decision_function")
    with pytest.raises(AttributeError, match="decision_function"):
        est.decision_function(X, t)
    tuples = factory().fit(X[np.array([[0, 3, 1], [4, 7, 2], [8, 11, 5]])])
    np.testing.assert_array_equal(tuples.decision_function(X[t]),
                                  tuples.triplet_score(X, t))


def test_autosimilarity_decision_function_is_removed_too():
    from tripletml.auto import AutoSimilarity
    X, y = toy_data()
    auto = AutoSimilarity()
    auto.best_estimator_ = tm.OASIS(n_triplets=50, random_state=0).fit(X, y)
    assert not hasattr(auto, "decision_function")


def test_check_X_words_errors_as_scikit_learn_and_names_the_estimator():
    """The checks of scikit-learn match these phrases (estimator_checks:
    check_complex_data, check_estimators_empty_data_messages,
    check_dtype_object, check_fit2d_predict1d); tripletml adds the name."""
    from tripletml.core.validation import ComplexDataError, check_X
    with pytest.raises(ValueError, match="^OASIS: X is complex. Complex data not supported"):
        check_X(np.ones((3, 2)) + 1j, tm.OASIS())
    assert issubclass(ComplexDataError, TypeError)        # the class of tripletml <= 0.1
    with pytest.raises(ValueError, match=r"^OASIS: X has 0 features: 0 feature\(s\) "
                                         r"\(shape=\(12, 0\)\) while a minimum of 1 is "
                                         "required."):
        check_X(np.empty((12, 0)), "OASIS")
    with pytest.raises(ValueError, match=r"^OASIS: X has 0 sample\(s\) \(shape=\(0, 3\)\) "
                                         "while a minimum of 1 is required."):
        check_X(np.empty((0, 3)), "OASIS")
    with pytest.raises(ValueError, match="^OASIS: X must be 2-D.*Reshape your data either "
                                         r"using X.reshape\(-1, 1\)"):
        check_X(np.ones(3), "OASIS")
    with pytest.raises(ValueError, match="^OASIS: X has 2 features, but OASIS is expecting 3 "
                                         "features as input"):
        check_X(np.ones((3, 2)), "OASIS", n_features=3)
    bad = np.ones((3, 2), dtype=object)
    bad[0, 0] = {"foo": "bar"}
    with pytest.raises(TypeError, match="^OASIS: X must be numeric.*argument must be a "
                                        "string or a real number"):
        check_X(bad, "OASIS")


@pytest.mark.parametrize("factory, alt", LEARNERS)
def test_bad_params(factory, alt):
    X, y = toy_data()
    name = type(factory()).__name__
    for param, value in alt.items():
        if param in ("random_state", "verbose") or not isinstance(value, (int, float)):
            continue
        with pytest.raises((TypeError, ValueError), match=f"{name}: parameter {param}"):
            factory().set_params(**{param: -1}).fit(X, y)
        with pytest.raises(TypeError, match=f"{name}: parameter {param}"):
            factory().set_params(**{param: "3"}).fit(X, y)
    if "init" in alt:
        with pytest.raises(ValueError, match=f"{name}: parameter init='bogus'"):
            factory().set_params(init="bogus").fit(X, y)


def test_explicit_triplets_ignore_y():
    X, y = toy_data()
    t = np.array([[0, 3, 1], [1, 4, 2]])
    a = tm.OASIS(random_state=0).fit(X, triplets=t)
    b = tm.OASIS(random_state=0).fit(X, np.zeros(len(X)), triplets=t)
    np.testing.assert_array_equal(a.W_, b.W_)


def _concrete(cls):
    """A learner class with its own constructor (not an abstract base)."""
    for c in cls.__mro__:
        if c is LearnerBase:
            return False
        if "__init__" in c.__dict__:
            return True
    return False


def test_registry_lists_every_public_learner():
    import importlib
    import pkgutil

    import tripletml.algorithms
    from tripletml.registry import FEATURE_KINDS, entries
    registered = {e.cls.__name__ for e in entries(FEATURE_KINDS)}
    assert registered == {e.name for e in entries(FEATURE_KINDS)} == {c.id.split("-")[0] for c in ALL}
    exported = {n for n in tm.__all__ if isinstance(getattr(tm, n, None), type)
                and issubclass(getattr(tm, n), LearnerBase) and _concrete(getattr(tm, n))}
    assert exported == registered
    found = set()
    for mod in pkgutil.iter_modules(tripletml.algorithms.__path__):
        m = importlib.import_module(f"tripletml.algorithms.{mod.name}.estimator")
        for name, obj in vars(m).items():
            if (isinstance(obj, type) and issubclass(obj, LearnerBase) and _concrete(obj)
                    and not name.startswith("_") and obj.__module__ == m.__name__):
                found.add(name)
    assert found == registered


def test_more_bad_inputs():
    X, y = toy_data()
    with pytest.raises(ValueError, match="OASIS: triplets must be a rectangular"):
        tm.OASIS().fit(X, triplets=[[0, 1, 2], [1, 2]])
    with pytest.raises(ValueError, match="OASIS: triplets index 18446744073709551615 is out"):
        tm.OASIS().fit(X, triplets=np.array([[0, 1, 2**64 - 1]], dtype=np.uint64))
    with pytest.raises(TypeError, match="OASIS: X is complex"):
        tm.OASIS().fit(sp.csr_matrix(X.astype(complex)), y)
    with pytest.raises(TypeError, match="OASIS: X must be numeric; it holds strings"):
        tm.OASIS().fit(np.array([["1", "2"]] * 6, dtype=object), np.arange(6) % 2)
    with pytest.raises(TypeError, match="OASIS: triplets must hold integer"):
        tm.OASIS().fit(X, triplets=[[0.0, 1.0, 2.0]])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
@pytest.mark.parametrize("factory, alt", LEARNERS)
def test_failed_training_leaves_model_unfitted(factory, alt, monkeypatch):
    from sklearn.exceptions import NotFittedError
    import tripletml.core.preprocessing as prep
    # the feature unit makes huge rows harmless; train on them as they are
    monkeypatch.setattr(prep, "feature_unit", lambda X, mean=None: 1.0)
    X = np.array([[1e155, 0.0], [0.0, 1e155], [1e155, 0.0], [0.0, 1e155]])
    est = factory()
    with pytest.raises(FloatingPointError, match=f"{type(est).__name__}: training diverged"):
        est.fit(X, triplets=[[0, 1, 2]])
    with pytest.raises(NotFittedError):
        est.similarity(X)
    if not hasattr(est, "partial_fit"):
        return
    with pytest.raises(FloatingPointError):
        est.partial_fit(X, [[0, 1, 2]])
    with pytest.raises(NotFittedError):
        est.similarity(X)


ONLINE = _cases("triplet", lambda cls: cls._needs_triplets and hasattr(cls, "partial_fit"))


@pytest.mark.parametrize("factory, alt", ONLINE)
def test_partial_fit_resumes_after_load(factory, alt, tmp_path):
    X, y = toy_data()
    t = np.array([[0, 3, 1], [4, 7, 2], [5, 8, 6]])
    a = factory().fit(X, y)
    a.save(tmp_path / "m.npz")
    b = tm.load_model(tmp_path / "m.npz")
    a.partial_fit(X, t)
    b.partial_fit(X, t)
    np.testing.assert_allclose(b.similarity(X), a.similarity(X), rtol=1e-12, atol=1e-12)
    assert b.history_["step"] == a.history_["step"]


def _rewrite_meta(src, dst, edit):
    import json
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    edit(meta, arrays)
    np.savez(dst, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)


@pytest.mark.parametrize("edit, msg", [
    (lambda m, a: m["params"].update(bogus=1), "unknown OASIS parameters"),
    (lambda m, a: m.update(attributes=[]), "malformed metadata"),
    (lambda m, a: m.update(params=None), "malformed metadata"),
    (lambda m, a: m["attributes"].update(similarity=3), "not a fitted attribute"),
    (lambda m, a: a.update(W_=np.zeros((2, 2))), "W_ has shape"),
    (lambda m, a: m.update(format_version=True), "format version"),
    (lambda m, a: m["attributes"].update(n_features_in_="5"), "n_features_in_"),
])
def test_load_model_checks_metadata(tmp_path, edit, msg):
    X, y = toy_data()
    tm.OASIS(n_triplets=50, random_state=0).fit(X, y).save(tmp_path / "m.npz")
    _rewrite_meta(tmp_path / "m.npz", tmp_path / "bad.npz", edit)
    with pytest.raises(ValueError, match=f"load_model: .*{msg}"):
        tm.load_model(tmp_path / "bad.npz")


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_sklearn_tags_declare_sparse_input(factory, alt):
    from sklearn.utils import get_tags
    assert get_tags(factory()).input_tags.sparse is True


# ---------------------------------------------------------------- multi-label
@pytest.mark.parametrize("factory, alt", MULTILABEL)
def test_multilabel_params_round_trip_and_clone(factory, alt):
    est = factory()
    assert set(alt) <= set(est.get_params())
    est.set_params(**alt)
    assert all(est.get_params()[k] == v for k, v in alt.items())
    assert clone(est).get_params() == est.get_params()
    for name in est.get_params():
        est.set_params(**{name: "nonsense-value"})  # no validation until fit


@pytest.mark.parametrize("factory, alt", MULTILABEL)
@pytest.mark.parametrize("sparse", [False, True])
def test_multilabel_fit_score_contract(factory, alt, sparse):
    from sklearn.exceptions import NotFittedError

    from tripletml.metrics import label_ranking_map
    X, Y = toy_multilabel()
    est = factory()
    with pytest.raises(NotFittedError):
        est.decision_function(X)
    assert est.fit(sp.csr_matrix(X) if sparse else X, Y) is est
    assert est.n_features_in_ == X.shape[1] and est.n_labels_ == Y.shape[1]
    S = est.decision_function(X)
    assert S.shape == Y.shape and np.isfinite(S).all()
    assert est.score(X, Y) == pytest.approx(label_ranking_map(Y, S))
    with pytest.raises(ValueError, match=f"{type(est).__name__}: .*4 features"):
        est.decision_function(X[:, :4])


@pytest.mark.parametrize("factory, alt", MULTILABEL)
def test_multilabel_save_load_round_trip(factory, alt, tmp_path):
    X, Y = toy_multilabel()
    est = factory().fit(X, Y)
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    assert type(back) is type(est) and back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.decision_function(X), est.decision_function(X))


@pytest.mark.parametrize("factory, alt", MULTILABEL)
def test_multilabel_bad_params(factory, alt):
    X, Y = toy_multilabel()
    name = type(factory()).__name__
    for param, value in alt.items():
        if param in ("random_state", "verbose") or isinstance(value, bool) \
                or not isinstance(value, (int, float)):
            continue
        with pytest.raises((TypeError, ValueError), match=f"{name}: parameter {param}"):
            factory().set_params(**{param: -1}).fit(X, Y)
        with pytest.raises(TypeError, match=f"{name}: parameter {param}"):
            factory().set_params(**{param: "3"}).fit(X, Y)


# ------------------------------------------------------- one fitted-ness rule
def _every_public_accessor(est, X):
    calls = [lambda: est.similarity(X), lambda: est.pair_score(X, X),
             lambda: est.triplet_score(X, [[0, 1, 2]])]
    if isinstance(est, MahalanobisMixin):
        calls += [lambda: est.transform(X), lambda: est.get_mahalanobis_matrix(),
                  lambda: est.get_metric(), lambda: est.pair_distance(X, X),
                  lambda: est.get_feature_names_out()]
    else:
        calls += [lambda: est.get_bilinear_matrix()]
    return calls


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_unfitted_accessors_raise_not_fitted(factory, alt):
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted
    X, y = toy_data()
    est = factory()
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    for call in _every_public_accessor(est, X):
        with pytest.raises(NotFittedError):
            call()
    est.fit(X, y)
    check_is_fitted(est)
    for call in _every_public_accessor(est, X):
        call()


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_failed_refit_looks_unfitted_to_every_accessor(factory, alt):
    """A refit that fails (here: in input validation) leaves the model
    unfitted for every accessor, not half-old."""
    from sklearn.exceptions import NotFittedError
    X, y = toy_data()
    est = factory().fit(X, y)
    with pytest.raises(ValueError):
        est.fit(np.full_like(X, np.nan), y)
    for call in _every_public_accessor(est, X):
        with pytest.raises(NotFittedError):
            call()


# ----------------------------------------------------- transformer interface
@pytest.mark.parametrize("factory, alt", MAHALANOBIS)
def test_mahalanobis_learners_are_transformers(factory, alt):
    from sklearn.base import TransformerMixin
    X, y = toy_data()
    est = factory()
    assert isinstance(est, TransformerMixin)
    Z = est.fit_transform(X, y)
    np.testing.assert_allclose(Z, est.transform(X))
    names = est.get_feature_names_out()
    assert names.shape == (Z.shape[1],)
    assert names[0] == type(est).__name__.lower() + "0"
    est.set_output(transform="default")


# ------------------------------------------------------- true distances
class _FixedL(MahalanobisMixin, tm.TripletLearner):
    """A Mahalanobis learner on a fixed random L (tests the mixin alone)."""

    _needs_triplets = False
    _feature_unit = False       # a fixed L on the raw rows
    _fitted_arrays = {"components_": tm.core.base.ArraySpec((None, "d"))}

    def __init__(self, seed=0, rank=4):
        self.seed = seed
        self.rank = rank

    def _fit(self, X, triplets, rng):
        self.components_ = np.random.default_rng(self.seed).normal(size=(self.rank, X.shape[1]))


def _iris_knn_distances(metric, algorithm):
    """Sorted distances (by ``metric``) of the 5 neighbors each query gets.
    (Neighbor *sets* may differ on iris's duplicate points and ties; the
    distances of a correct 5-NN search may not.)"""
    from sklearn.datasets import load_iris
    from sklearn.neighbors import NearestNeighbors
    X, _ = load_iris(return_X_y=True)
    nn = NearestNeighbors(n_neighbors=5, metric=metric, algorithm=algorithm).fit(X)
    idx = nn.kneighbors(X, return_distance=False)
    return np.sort([[metric(X[i], X[j]) for j in row] for i, row in enumerate(idx)], axis=1)


def _n_wrong(metric):
    tree = _iris_knn_distances(metric, "ball_tree")
    brute = _iris_knn_distances(metric, "brute")
    return int(np.sum(~np.isclose(tree, brute, rtol=1e-9, atol=1e-12).all(axis=1)))


@pytest.mark.parametrize("est", [tm.Euclidean(), _FixedL(seed=0), _FixedL(seed=1, rank=2)],
                         ids=["Euclidean", "fixedL4", "fixedL2"])
def test_get_metric_ball_tree_equals_brute_force(est):
    """BallTree pruning needs the triangle inequality: the default metric (a
    true distance) finds the brute-force 5-NN of every iris query; the
    squared one (not a metric) misses some."""
    from sklearn.datasets import load_iris
    from sklearn.neighbors import KNeighborsClassifier
    X, y = load_iris(return_X_y=True)
    est.fit(X, y)
    assert _n_wrong(est.get_metric()) == 0
    assert _n_wrong(est.get_metric(squared=True)) > 0
    metric = est.get_metric()
    p1 = KNeighborsClassifier(n_neighbors=5, metric=metric, algorithm="ball_tree").fit(X, y)
    p2 = KNeighborsClassifier(n_neighbors=5, metric=metric, algorithm="brute").fit(X, y)
    np.testing.assert_array_equal(p1.predict(X), p2.predict(X))


# ------------------------------------------------------- overflowing outputs
@pytest.mark.parametrize("est", [tm.Euclidean(), tm.DotProduct(), _FixedL()],
                         ids=["Euclidean", "DotProduct", "fixedL"])
def test_overflowing_outputs_raise_clearly(est):
    import warnings
    X = np.array([[1e154, -1e154, 3e154], [-2e154, 1e154, 1e154], [1.0, 2.0, 3.0]])
    est.fit(np.vstack([X[2:]] * 3))
    name = type(est).__name__
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no RuntimeWarning either
        with pytest.raises(ValueError, match=f"{name}: similarity is not finite.*scale"):
            est.similarity(X)
        with pytest.raises(ValueError, match=f"{name}: pair_score is not finite.*scale"):
            est.pair_score(X[:2], X[[1, 0]])
        with pytest.raises(ValueError, match=f"{name}: triplet_score is not finite"):
            est.triplet_score(X, [[0, 1, 2]])
        if isinstance(est, MahalanobisMixin) and not isinstance(est, tm.Euclidean):
            with pytest.raises(ValueError, match=f"{name}: transform is not finite"):
                est.transform(np.full((2, 3), 1e308))
        # moderate values stay fine
        assert np.isfinite(est.similarity(X[2:] * 1e10)).all()


def test_feature_names_in_recorded_and_checked(monkeypatch, tmp_path):
    """Set through scikit-learn's own validation (_check_feature_names); no
    DataFrame library is installed here, so sklearn's name extractor is
    taught the Frame class below."""
    import sklearn.utils.validation as skv
    class Frame:  # the smallest DataFrame-like: columns + __array__
        def __init__(self, a, cols):
            self.a, self.columns = a, np.asarray(cols, dtype=object)

        def __dataframe__(self, nan_as_null=False, allow_copy=True):
            import types
            return types.SimpleNamespace(column_names=lambda: list(self.columns))

        def __array__(self, dtype=None, copy=None):
            return self.a if dtype is None else self.a.astype(dtype)

        @property
        def shape(self):
            return self.a.shape
    real = skv._get_feature_names
    monkeypatch.setattr(skv, "_get_feature_names",
                        lambda X: X.columns if isinstance(X, Frame) else real(X))
    X, y = toy_data()
    est = tm.Euclidean().fit(Frame(X, [f"f{i}" for i in range(5)]), y)
    assert list(est.feature_names_in_) == [f"f{i}" for i in range(5)]
    with pytest.warns(UserWarning, match="feature names"):
        est.similarity(X)
    with pytest.raises(ValueError, match="feature names"):
        est.similarity(Frame(X, [f"g{i}" for i in range(5)]))
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    assert back.feature_names_in_.dtype == object
    assert list(back.feature_names_in_) == list(est.feature_names_in_)


def test_the_0_2_deprecations_are_removed():
    """similarity_kind (read embedding_similarity), tripletml.core.base.History
    (tripletml.engine.History) and the decision_function switch are gone."""
    import tripletml.core.base as base
    from tripletml import OASIS, KISSME
    for cls, emb in ((OASIS, "inner_product"), (KISSME, "neg_squared_l2")):
        assert cls().embedding_similarity == emb
        assert not hasattr(cls, "similarity_kind") and not hasattr(cls(), "similarity_kind")
    assert not hasattr(base, "History") and not hasattr(base, "legacy_decision_function")


@pytest.mark.parametrize("entry", [e for e in __import__("tripletml.registry", fromlist=["x"])
                                   .entries("triplet")], ids=lambda e: e.name)
def test_float16_input_is_upcast(entry):
    """Half-precision X (a common storage type of embeddings) is upcast:
    every learner fits it and scores like its float64 copy (no bare NumPy
    TypeError)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float16)
    y = np.repeat(np.arange(4), 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = entry.make(0).fit(X, y)
        b = entry.make(0).fit(X.astype(np.float64), y)
    np.testing.assert_allclose(a.similarity(X[:5]), b.similarity(X[:5].astype(np.float64)))


def test_declarations_table_matches_the_core_classes():
    """Every private class-level switch that a core base class (the shared
    code) defines is in tripletml.core.base.DECLARATIONS, and each entry's
    default lives on the class it names."""
    import inspect

    from tripletml.core.base import DECLARATIONS
    from tripletml.registry import entries
    core = {}
    for e in entries():
        for klass in e.cls.__mro__:
            if klass.__module__.startswith("tripletml.core."):
                core[klass.__name__] = klass
    found = set()
    for klass in core.values():
        for name, value in vars(klass).items():
            if name.startswith("_") and not name.startswith(("__", "_sklearn")) \
                    and not callable(value) and not inspect.isdatadescriptor(value) \
                    and not isinstance(value, (staticmethod, classmethod)):
                found.add(name)
    assert found == set(DECLARATIONS), found ^ set(DECLARATIONS)
    for name, (owner, meaning) in DECLARATIONS.items():
        assert name in vars(core[owner]), (name, owner)
        assert len(meaning) > 20
