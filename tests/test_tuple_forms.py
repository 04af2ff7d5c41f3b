"""metric-learn's tuple forms at fit: point triplets (n, 3, d) are learned
from as their distinct points with index triplets; misplaced index tuples
get an error naming the right form (issue 29, items 1 and 5)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris

from tripletml.registry import entries
from tripletml.triplets import random_class_triplets


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    T = random_class_triplets(y, 150, random_state=np.random.default_rng(0))
    return X, y, T


@pytest.mark.parametrize("entry", entries("triplet"), ids=lambda e: e.name)
def test_point_triplets_equal_rows_with_index_triplets(entry, iris):
    X, _, T = iris
    P = X[T]                                       # (150, 3, 4): metric-learn's form
    # the distinct points, each once, and the triplets into them
    rows, inv = np.unique(P.reshape(-1, X.shape[1]), axis=0, return_inverse=True)
    idx = inv.reshape(-1, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = entry.make().fit(P)
        b = entry.make().fit(rows, triplets=idx)
    assert a.n_features_in_ == X.shape[1]          # not the tuple size (metric-learn's bug)
    np.testing.assert_allclose(a.similarity(X[:10]), b.similarity(X[:10]), rtol=1e-10,
                               atol=1e-12)
    # a list of lists is the same input
    if entry.name == "OASIS":
        c = entry.make().fit(P.tolist())
        np.testing.assert_allclose(c.similarity(X[:10]), a.similarity(X[:10]))


def test_tuple_form_errors_name_the_right_form(iris):
    from tripletml import ITML, OASIS
    X, y, T = iris
    with pytest.raises(ValueError, match=r"OASIS: y has shape \(150, 3\) of integers.*"
                                         r"fit\(X, triplets=T\)"):
        OASIS().fit(X, T)
    with pytest.raises(ValueError, match=r"ITML: X of shape \(150, 2, 4\) holds pairs; give "
                                         r"their labels"):
        ITML().fit(X[T[:, :2]])
    with pytest.raises(ValueError, match=r"OASIS: y has shape \(150, 2\) of integers: index "
                                         r"pairs go in the keyword argument, fit\(X, pairs=P"):
        OASIS().fit(X, T[:, :2])
    with pytest.raises(ValueError, match="carry their own supervision"):
        OASIS().fit(X[T], y)
    with pytest.raises(ValueError, match=r"pairs \(n_pairs, 2, n_features\) or triplets "
                                         r"\(n_triplets, 3, n_features\); got shape \(150, 4, 4\)"):
        OASIS().fit(np.zeros((150, 4, 4)))
    with pytest.raises(ValueError, match="holds no triplet"):
        OASIS().fit(np.zeros((0, 3, 4)))
