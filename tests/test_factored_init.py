"""The identity initialisation of the factored learners skips dead axes
(issue 27: on MNIST, whose first pixels are constant, LORETA, IterativePA,
NaivePA and FactoredGD started on axes that carry nothing, scored every
pair 0 and never moved: 1-NN accuracy .11)."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.learners.factored import live_axes

FACTORED = ["LORETA", "IterativePA", "NaivePA", "FactoredGD"]


def test_live_axes_rule():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 8))
    X[:, [0, 2]] = 0.0                        # dead
    X[:, 3] *= 1e-3                           # nearly dead: energy 1e-6 of the others
    np.testing.assert_array_equal(live_axes(X, 3), [1, 4, 5])
    np.testing.assert_array_equal(live_axes(sp.csr_matrix(X), 3), [1, 4, 5])
    np.testing.assert_array_equal(live_axes(X, 7), [1, 4, 5, 6, 7, 0, 2])
    np.testing.assert_array_equal(live_axes(rng.normal(size=(10, 5)), 3), [0, 1, 2])
    np.testing.assert_array_equal(live_axes(np.zeros((4, 3)), 2), [0, 1])


@pytest.mark.parametrize("name", FACTORED)
def test_constant_leading_columns_do_not_freeze_the_model(name):
    rng = np.random.default_rng(1)
    y = np.arange(90) % 3
    X = np.hstack([np.zeros((90, 12)), rng.normal(size=(90, 6)) + y[:, None]])
    est = getattr(tm, name)(rank=4, n_triplets=3000, random_state=0).fit(X, y)
    S = est.similarity(X[:10], X)
    assert np.ptp(S) > 0                      # not every pair scored alike
    assert est.score(X, y) > tm.Euclidean().fit(X).score(X, y) - 0.05
