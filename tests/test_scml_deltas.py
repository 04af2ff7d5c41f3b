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


@pytest.mark.parametrize("max_iter,check_every,tol", [(1700, 500, None), (900, 300, 1e-3),
                                                      (7, 500, None)])
def test_compiled_steps_equal_the_numpy_steps(max_iter, check_every, tol):
    """The compiled RDA steps on the basis coordinates (``_rda_block``, used
    for a :class:`TripletDeltas`) give the iterates of the NumPy steps on the
    formed m x K array (``_Dense``): the same weights, checks and stop, at
    the checks and between them (a budget that is not a multiple of
    ``check_every``)."""
    from tripletml.algorithms.scml.kernels import _Dense, scml_rda
    rng = np.random.default_rng(3)
    XU, T = rng.normal(size=(40, 60)), rng.integers(0, 40, size=(600, 3))
    D = TripletDeltas(XU, T)
    kw = dict(alpha=0.01, eta0=1.0, batch_size=7, max_iter=max_iter, tol=tol,
              check_every=check_every)
    fast = scml_rda(D, rng=np.random.default_rng(5), **kw)
    ref = scml_rda(_Dense(_formula(XU, np.eye(60), T)), rng=np.random.default_rng(5), **kw)
    assert fast.n_iter == ref.n_iter and fast.converged == ref.converged
    assert np.count_nonzero(fast.w) > 0
    np.testing.assert_allclose(fast.w, ref.w, rtol=1e-10, atol=1e-14)
    assert fast.history["step"] == ref.history["step"]
    np.testing.assert_allclose(fast.history["objective"], ref.history["objective"], rtol=1e-12)
