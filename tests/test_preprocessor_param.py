"""metric-learn's ``preprocessor``: an array of rows, or a callable from a
1-D index array to rows, that turns index inputs (1-D row indices, index
pairs (n, 2), index triplets (n, 3)) into rows, in fit and in every method
that takes X; each mistake a clear error."""
import numpy as np
import pytest
from sklearn.datasets import load_iris

from tripletml import ITML, KISSME, OASIS
from tripletml.pairs import class_pairs
from tripletml.triplets import random_class_triplets


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y, class_pairs(y, 200, 0), random_class_triplets(y, 200, random_state=0)


def test_index_pairs_equal_point_pairs(iris):
    X, _, pc, _ = iris
    a = KISSME(preprocessor=X).fit(pc.pairs, pc.labels)
    b = KISSME().fit(X[pc.pairs], pc.labels)
    np.testing.assert_allclose(a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix(),
                               rtol=1e-10)
    np.testing.assert_allclose(a.decision_function(pc.pairs), b.decision_function(X[pc.pairs]))
    np.testing.assert_array_equal(a.predict(pc.pairs), b.predict(X[pc.pairs]))
    assert a.score(pc.pairs, pc.labels) == pytest.approx(b.score(X[pc.pairs], pc.labels))
    assert a.n_features_in_ == 4


def test_index_triplets_equal_point_triplets(iris):
    X, _, _, T = iris
    a = OASIS(preprocessor=X, n_triplets=500, random_state=0).fit(T)
    b = OASIS(n_triplets=500, random_state=0).fit(X[T])
    np.testing.assert_allclose(a.decision_function(T), b.decision_function(X[T]), rtol=1e-10)
    assert a.score(T) == b.score(X[T])


def test_callable_preprocessor_and_row_indices(iris):
    X, y, pc, _ = iris
    calls = []

    def rows(idx):
        calls.append(np.asarray(idx).copy())
        return X[idx]

    a = ITML(preprocessor=rows, tol=1e-2, random_state=0).fit(np.arange(150), y)  # row indices
    b = ITML(tol=1e-2, random_state=0).fit(X, y)
    np.testing.assert_allclose(a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix())
    np.testing.assert_allclose(a.transform(np.arange(5)), b.transform(X[:5]))
    # index tuples: each distinct index is looked up once
    a.calibrate_threshold(pc.pairs, pc.labels)
    assert calls[-1].size == np.unique(pc.pairs).size
    # rows still pass through unchanged
    np.testing.assert_allclose(a.transform(X[:5]), b.transform(X[:5]))


@pytest.mark.parametrize("pre,match", [
    (lambda idx: np.zeros((len(idx) + 1, 4)), r"KISSME: the preprocessor must return one row "
                                              r"per index.*shape \(\d+, 5\)|shape \(\d+, 4\)"),
    (lambda idx: np.zeros(len(idx)), r"KISSME: the preprocessor must return one row per index"),
    (lambda idx: 1 / 0, r"KISSME: the preprocessor raised ZeroDivisionError"),
    (np.zeros(10), r"KISSME: preprocessor must be a 2-D array of rows"),
])
def test_bad_preprocessor(pre, match, iris):
    _, _, pc, _ = iris
    with pytest.raises(ValueError, match=match):
        KISSME(preprocessor=pre).fit(pc.pairs, pc.labels)


def test_index_out_of_the_preprocessors_range(iris):
    X, _, pc, _ = iris
    with pytest.raises(ValueError, match=r"KISSME: index 150 is out of range for the "
                                         r"preprocessor's 150 rows"):
        KISSME(preprocessor=X).fit(np.r_[pc.pairs, [[0, 150]]], np.r_[pc.labels, 1])
    with pytest.raises(ValueError, match=r"index -1 is out of range"):
        KISSME(preprocessor=X).fit(np.r_[pc.pairs, [[-1, 3]]], np.r_[pc.labels, 1])


def test_tuple_width_must_match_the_model(iris):
    X, y, pc, _ = iris
    m = KISSME().fit(X[pc.pairs], pc.labels)
    with pytest.raises(ValueError, match=r"KISSME: X1 has 3 features, but KISSME is expecting "
                                         r"4 features"):
        m.predict(X[pc.pairs][:, :, :3])


def test_save_leaves_the_preprocessor_out(iris, tmp_path):
    from tripletml import load_model
    X, _, pc, _ = iris
    m = KISSME(preprocessor=X).fit(pc.pairs, pc.labels)
    with pytest.warns(UserWarning, match="KISSME: the preprocessor .* is not saved"):
        m.save(tmp_path / "m.npz")
    m2 = load_model(tmp_path / "m.npz")
    assert m2.preprocessor is None and m.preprocessor is X          # the model keeps its own
    np.testing.assert_allclose(m2.decision_function(X[pc.pairs]), m.decision_function(pc.pairs))


def test_callable_preprocessor_takes_string_ids(iris):
    """metric-learn's file-name example: ids are strings, the callable maps
    them to rows."""
    X, _, pc, _ = iris
    names = np.array([f"img{i:03d}.png" for i in range(len(X))])
    lookup = {n: i for i, n in enumerate(names)}

    def load(ids):
        return X[[lookup[str(i)] for i in ids]]

    a = KISSME(preprocessor=load).fit(names[pc.pairs], pc.labels)
    b = KISSME().fit(X[pc.pairs], pc.labels)
    np.testing.assert_allclose(a.decision_function(names[pc.pairs]),
                               b.decision_function(X[pc.pairs]), rtol=1e-10)
