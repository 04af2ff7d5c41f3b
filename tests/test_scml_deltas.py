"""SCML's triplet features without the m x K array (issue 39, speed):
:class:`TripletDeltas` must equal the formula ``delta_tb = (u_b.(q - p+))^2 -
(u_b.(q - p-))^2``, with pairs repeated (kNN triplets) or not, and with
sparse weights (its products skip the zero weights)."""
import numpy as np
import pytest

from tripletml.algorithms.scml.kernels import TripletDeltas, scml_objective


def _formula(X, U, T):
    return np.array([[(u @ (X[q] - X[p])) ** 2 - (u @ (X[q] - X[n])) ** 2 for u in U]
                     for q, p, n in T])


@pytest.mark.parametrize("repeat", [True, False])
def test_deltas_equal_the_formula(repeat):
    rng = np.random.default_rng(0)
    X, U = rng.normal(size=(15, 4)), rng.normal(size=(6, 4))
    if repeat:      # kNN-like: each query with 2 positives x 3 negatives
        T = np.array([(q, (q + a) % 15, (q + 5 + b) % 15) for q in range(15)
                      for a in (1, 2) for b in (0, 1, 2)])
    else:
        T = rng.integers(0, 15, size=(12, 3))
    D = TripletDeltas(X @ U.T, T)
    ref = _formula(X, U, T)
    np.testing.assert_allclose(D.dense(), ref, rtol=1e-12, atol=1e-12)
    idx = rng.integers(0, len(T), size=7)
    np.testing.assert_allclose(D.rows(idx), ref[idx], rtol=1e-12, atol=1e-12)
    w = rng.random(6) * (rng.random(6) < 0.6)
    np.testing.assert_allclose(D.dot(w), ref @ w, rtol=1e-10, atol=1e-12)
    assert scml_objective(D, w, 0.1) == pytest.approx(scml_objective(ref, w, 0.1), rel=1e-12)
    assert D.all_finite()


def test_overflowing_features_are_not_finite():
    T = np.array([[0, 1, 2]])
    assert not TripletDeltas(np.array([[1e200], [-1e200], [0.0]]), T).all_finite()
    assert not TripletDeltas(np.array([[np.nan], [0.0], [0.0]]), T).all_finite()
    assert TripletDeltas(np.array([[1e100], [-1e100], [0.0]]), T).all_finite()
