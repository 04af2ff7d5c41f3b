"""The identity initialization of the factored learners skips dead axes
(issue 27: on MNIST, whose first pixels are constant, LORETA, IterativePA,
NaivePA and FactoredGD started on axes that carry nothing, scored every
pair 0 and never moved: 1-NN accuracy .11)."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.core.factored import live_axes

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


# ------------------------------------------------ the "pca" start (issue 43)
def _init_only(est, X):
    """Initialize ``est`` on X without a step: a triplet whose positive and
    negative are the same point (v = 0, no gradient)."""
    Xd = np.vstack([X, X[:1]])
    return est.partial_fit(Xd, [[1, 0, X.shape[0]]])


def _ref_top(X, k):
    """The top-k right singular vectors of X (dense reference)."""
    _, s, Vt = np.linalg.svd(X, full_matrices=False)
    return Vt[:k].T, s


@pytest.mark.parametrize("name", FACTORED)
def test_pca_start_is_the_best_rank_k_approximation_of_the_dot_product(name):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 9)) * np.linspace(3, 0.3, 9) + 0.5
    k = 3
    est = _init_only(getattr(tm, name)(rank=k, preprocessing=None), X)
    Xs = np.vstack([X, X[:1]]) / est.preprocessing_unit_        # the rows the solver saw
    V, s = _ref_top(Xs, k)
    np.testing.assert_allclose(est.A_, est.B_)
    np.testing.assert_allclose(est.A_.T @ est.A_, np.eye(k), atol=1e-10)   # cond(A) = 1
    W0 = est.A_ @ est.B_.T
    np.testing.assert_allclose(W0, V @ V.T, atol=1e-10)
    # Eckart-Young: X W0 X^T is the best rank-k approximation of X X^T
    U, sv, _ = np.linalg.svd(Xs @ Xs.T)
    np.testing.assert_allclose(Xs @ W0 @ Xs.T, (U[:, :k] * sv[:k]) @ U[:, :k].T, atol=1e-8)
    if hasattr(est, "pinv_A_"):                                  # exact pseudo-inverses
        np.testing.assert_allclose(est.pinv_A_.T, np.linalg.pinv(est.A_), atol=1e-10)


def test_pca_start_does_not_depend_on_the_unit_of_x():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 8)) * np.linspace(2, 0.5, 8)
    ref = _init_only(tm.LORETA(rank=3, preprocessing=None), X)
    for c in (1e-3, 1e3):
        est = _init_only(tm.LORETA(rank=3, preprocessing=None), c * X)
        np.testing.assert_allclose(est.A_ @ est.B_.T, ref.A_ @ ref.B_.T, atol=1e-10)
    # init="identity" and "random" stay available
    ident = _init_only(tm.LORETA(rank=2, init="identity", preprocessing=None), X)
    np.testing.assert_array_equal(ident.A_ @ ident.B_.T, np.diag([1, 1] + [0] * 6))
    rand = _init_only(tm.LORETA(rank=2, init="random", preprocessing=None, random_state=0), X)
    assert not np.allclose(rand.A_, ref.A_[:, :2])


def test_spectral_rank_rule():
    from tripletml.core.factored import ENERGY_SHARE, RANK_CAP, Spectrum, spectral_rank
    w = np.array([5.0, 2.0, 1.0, 1.0, 0.5, 0.5])          # trace 10
    spec = Spectrum(np.eye(6), w, w.sum())
    # cumulative shares .5, .7, .8, .9, ...: the smallest k holding ENERGY_SHARE
    want = int(np.argmax(np.cumsum(w) / w.sum() >= ENERGY_SHARE - 1e-12)) + 1
    assert spectral_rank(spec, 10) == want
    assert spectral_rank(spec, 2) == min(2, want)
    assert spectral_rank(Spectrum(np.eye(3), np.zeros(3), 0.0), 10) == 3   # no energy
    # isotropic noise in many features: the cap
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 80))
    est = _init_only(tm.IterativePA(preprocessing=None), X)
    assert est.rank_ == RANK_CAP
    # a few strong directions: their number
    Z = rng.normal(size=(300, 3)) @ rng.normal(size=(3, 40)) * 10 + 0.01 * rng.normal(size=(300, 40))
    assert _init_only(tm.IterativePA(preprocessing=None), Z).rank_ <= 3
    assert _init_only(tm.LORETA(preprocessing=None), X).rank_ == min(RANK_CAP, 40)


def test_subspace_iteration_route_agrees_with_the_exact_one(monkeypatch):
    from tripletml.core import factored
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 30)) * np.geomspace(10, 0.1, 30)
    exact = factored.data_spectrum(X, 5)
    monkeypatch.setattr(factored, "MOMENT_MAX_FEATURES", 10)
    for Xin in (X, sp.csr_matrix(X)):
        it = factored.data_spectrum(Xin, 5)
        np.testing.assert_allclose(it.values, exact.values, rtol=1e-8)
        np.testing.assert_allclose(it.vectors @ it.vectors.T, exact.vectors @ exact.vectors.T,
                                   atol=1e-8)
        assert it.trace == pytest.approx(exact.trace)


@pytest.mark.parametrize("route", ["moments", "subspace"])
@pytest.mark.parametrize("name", ["LORETA", "NaivePA"])
def test_partitioned_start_equals_the_in_memory_start(name, route, monkeypatch):
    """fit(ShardedCollection) starts from the spectrum of the merged second
    moments (or the summed products of the subspace iteration): the
    in-memory start and rank, to rounding."""
    from sklearn.datasets import load_digits
    from tripletml.core import factored
    from tripletml.distributed.sharded import ShardedCollection
    if route == "subspace":
        monkeypatch.setattr(factored, "MOMENT_MAX_FEATURES", 16)
    X, y = load_digits(return_X_y=True)
    X, y = X[:240], y[:240]
    cls = getattr(tm, name)
    seen = {}

    def spy_on(method, key):
        orig = getattr(cls, method)

        def spy(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            seen[key] = (self.A_ @ self.B_.T, self.rank_)
        monkeypatch.setattr(cls, method, spy)

    spy_on("_init_model_partitioned", "partitioned")
    spy_on("_init_model", "in_memory")
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    params = dict(n_triplets=300, preprocessing="standardize", random_state=0)
    cls(**params).fit(coll)
    cls(**params).fit(X, y)
    (W, k), (Wref, kref) = seen["partitioned"], seen["in_memory"]
    assert k == kref and k > 1
    np.testing.assert_allclose(W, Wref, atol=1e-8)
    assert not np.allclose(Wref, np.diag(np.diag(Wref)))     # not an axis-aligned start
