"""Strategy "statistics" of fit(ShardedCollection): KISSME and RCA from
per-partition class statistics (tripletml.distributed.class_stats), and the
baselines, equal to the in-memory fit on the concatenated rows to rounding.

Every comparison is against the in-memory ``fit`` (or a loop over the
triplets the partitions sampled) with rtol 1e-9: a statistic merged without
the between-partition term of Chan's update, a class scatter about the
partition's mean instead of the global one, a lost partition or a
mis-weighted class fails by orders of magnitude more.
"""
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits

from tripletml import KISSME, RCA, DotProduct, Euclidean
from tripletml.persistence import load_model
from tripletml.distributed.sharded import ShardedCollection
from tripletml.algorithms.kissme.kernels import pair_scatter_from_triplets
from tripletml.algorithms.kissme import distributed as kissme_distributed
from tripletml.distributed import class_stats
from tripletml.distributed.partitioned import ClassesWarning, Supervision


@pytest.fixture(autouse=True)
def _cluster_backend(monkeypatch):
    """These tests compare the cluster with the in-process fit on small
    data: keep them on the cluster (no cost model, issue 41 section 3)."""
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")

MODES = [None, "center", "standardize", "whiten", "sphere", "auto"]
RTOL = 1e-9


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    i = rng.permutation(X.shape[0])[:500]
    return X[i], y[i]


def _fit_coll(est, coll):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClassesWarning)
        return est.fit(coll)


def _uneven(X, y, sizes):
    """Partitions of the given sizes (consecutive rows)."""
    b = np.r_[0, np.cumsum(sizes)]
    assert b[-1] == X.shape[0]
    return ShardedCollection([X[a:c] for a, c in zip(b[:-1], b[1:])], list(sizes),
                             [y[a:c] for a, c in zip(b[:-1], b[1:])])


def _close(a, b, rtol=RTOL):
    scale = max(np.abs(b).max(), 1e-300)
    err = np.abs(a - b).max() / scale
    assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"


def _same_kissme(m, ref, rtol=RTOL):
    _close(m.similar_covariance_, ref.similar_covariance_, rtol)
    _close(m.dissimilar_covariance_, ref.dissimilar_covariance_, rtol)
    _close(m.M_, ref.M_, rtol)
    assert m.rank_ == ref.rank_
    assert m.components_.shape == ref.components_.shape


def _same_rca(m, ref, rtol=RTOL):
    _close(m.chunklet_covariance_, ref.chunklet_covariance_, rtol)
    _close(m.total_scatter_, ref.total_scatter_, rtol)
    _close(m.M_, ref.M_, 1e-8)           # through a generalized eigenproblem
    assert m.rank_ == ref.rank_


# ---------------------------------------------------------------------------
# KISSME from labels
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_kissme_labels_equals_in_memory_every_mode_and_K(digits, mode):
    X, y = digits
    ref = KISSME(preprocessing=mode).fit(X, y)
    for K in (1, 3, 7):
        m = _fit_coll(KISSME(preprocessing=mode), ShardedCollection.from_arrays(X, y,
                                                                            n_partitions=K))
        _same_kissme(m, ref)
        assert m.partitioned_["strategy"] == "statistics"
        assert m.partitioned_["partitions"] == K and m.partitioned_["passes"] == 1
        assert m.scaler_.mode_ == ref.scaler_.mode_
    # unequal partitions, one of 3 rows and one missing classes
    m = _fit_coll(KISSME(preprocessing=mode), _uneven(X, y, [3, 260, 17, 220]))
    _same_kissme(m, ref)


def test_kissme_labels_equal_the_loop_over_every_class_triplet():
    """The driver's closed form from merged class statistics against the
    probability-weighted sum over every (query, positive, negative) the class
    sampler can draw (an independent reference, no solver code)."""
    rng = np.random.default_rng(3)
    y = np.r_[np.zeros(13), np.ones(7), np.full(5, 2), [3]].astype(int)
    X = rng.normal(size=(26, 4)) + 4.0 * y[:, None] * rng.normal(size=4) + 50.0
    order = rng.permutation(26)
    X, y = X[order], y[order]
    m = _fit_coll(KISSME(preprocessing=None), _uneven(X, y, [2, 11, 1, 12]))
    unit = m.scaler_.unit_ if m.scaler_.unit_ is not None else 1.0
    n = len(y)
    sizes = np.bincount(y)
    queries = [i for i in range(n) if sizes[y[i]] >= 2]
    S = np.zeros((4, 4))
    D = np.zeros((4, 4))
    for q in queries:
        pos = [j for j in range(n) if y[j] == y[q] and j != q]
        neg = [j for j in range(n) if y[j] != y[q]]
        for j in pos:
            S += np.outer(X[q] - X[j], X[q] - X[j]) / (len(queries) * len(pos))
        for j in neg:
            D += np.outer(X[q] - X[j], X[q] - X[j]) / (len(queries) * len(neg))
    _close(m.similar_covariance_ * unit ** 2, S, 1e-11)
    _close(m.dissimilar_covariance_ * unit ** 2, D, 1e-11)


def test_kissme_two_pass_path_and_extreme_scales(digits, monkeypatch):
    """Beyond PER_CLASS_BYTES the class means come first, then the weighted
    scatters about them (2 passes): the same model.  Columns of extreme
    scale are preprocessed before the statistics (not on raw rows)."""
    X, y = digits
    ref = KISSME().fit(X, y)
    monkeypatch.setattr(kissme_distributed, "PER_CLASS_BYTES", 0)
    m = _fit_coll(KISSME(), ShardedCollection.from_arrays(X, y, n_partitions=5))
    assert m.partitioned_["passes"] == 2
    _same_kissme(m, ref)
    Xb = X + np.random.default_rng(1).normal(scale=0.1, size=X.shape)
    Xb[:, 5] *= 1e60
    ref = KISSME(preprocessing="standardize").fit(Xb, y)
    assert not ref._on_raw()
    for passes, budget in ((2, 0), (1, 1 << 27)):
        monkeypatch.setattr(kissme_distributed, "PER_CLASS_BYTES", budget)
        m = _fit_coll(KISSME(preprocessing="standardize"),
                      ShardedCollection.from_arrays(Xb, y, n_partitions=3))
        assert m.partitioned_["passes"] == passes
        _same_kissme(m, ref)


def test_kissme_large_class_mean_keeps_digits():
    """A class mean 1e6 times its spread: raw sums of x x^T would lose about
    12 digits; the per-partition scatters about class means merged by Chan's
    update keep the in-memory (blocked, class-centered) result."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 4, 300)
    X = rng.normal(size=(300, 6)) + 1e6 + y[:, None] * rng.normal(size=6)
    ref = KISSME(preprocessing=None).fit(X, y)
    m = _fit_coll(KISSME(preprocessing=None), ShardedCollection.from_arrays(X, y,
                                                                           n_partitions=7))
    _same_kissme(m, ref, 1e-8)


@pytest.mark.parametrize("mode", [None, "center", "standardize", "whiten", "sphere"])
def test_kissme_and_rca_sparse_partitions(mode):
    rng = np.random.default_rng(2)
    n, d = 400, 60
    y = rng.integers(0, 5, n)
    X = sp.random(n, d, density=0.15, format="csr", random_state=3, dtype=np.float64)
    X = (X + sp.csr_matrix(np.eye(5)[y] @ rng.random((5, d)) * (rng.random((n, d)) < 0.1))
         ).tocsr()
    parts = [X[:37], X[37:250], X[250:]]
    coll = ShardedCollection(parts, [37, 213, 150], [y[:37], y[37:250], y[250:]])
    assert all(sp.issparse(p) for p in coll.parts)
    _same_kissme(_fit_coll(KISSME(preprocessing=mode), coll),
                 KISSME(preprocessing=mode).fit(X, y))
    _same_rca(_fit_coll(RCA(preprocessing=mode), coll), RCA(preprocessing=mode).fit(X, y))


# ---------------------------------------------------------------------------
# KISSME from triplets
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [None, "standardize", "sphere"])
def test_kissme_sampled_triplets_equal_in_memory_on_their_union(digits, monkeypatch, mode):
    """With an int n_triplets, each partition samples its share (seed (seed,
    p)); the pair scatters are the in-memory ones of the concatenated rows
    and the triplets offset into them."""
    X, y = digits
    seen = {}
    orig = Supervision.triplets

    def record(self, p, X=None):
        T = orig(self, p, X)
        seen[p.index] = T.copy()
        return T

    monkeypatch.setattr(Supervision, "triplets", record)
    sizes = [60, 300, 140]
    m = _fit_coll(KISSME(n_triplets=900, random_state=4, preprocessing=mode),
                  _uneven(X, y, sizes))
    off = np.r_[0, np.cumsum(sizes)]
    T = np.vstack([seen[i] + off[i] for i in range(3)])
    assert T.shape == (900, 3) and m.partitioned_["triplets"] == 900
    assert [seen[i].shape[0] for i in range(3)] == [108, 540, 252]   # shares by rows
    assert (y[T[:, 0]] == y[T[:, 1]]).all() and (y[T[:, 0]] != y[T[:, 2]]).all()
    monkeypatch.setattr(Supervision, "triplets", orig)
    ref = KISSME(preprocessing=mode).fit(X, triplets=T)
    _same_kissme(m, ref)
    # and the raw scatter through the fitted preprocessing, from the solver kernel
    if mode != "sphere":
        S, D = pair_scatter_from_triplets(X, T)
        _close(m.similar_covariance_, m.scaler_.second_moment(S))
        _close(m.dissimilar_covariance_, m.scaler_.second_moment(D))
    # deterministic: the same model again
    again = _fit_coll(KISSME(n_triplets=900, random_state=4, preprocessing=mode),
                      _uneven(X, y, sizes))
    np.testing.assert_array_equal(again.M_, m.M_)


def test_kissme_and_rca_explicit_triplets(digits):
    X, y = digits
    rng = np.random.default_rng(8)
    sizes = [100, 250, 150]
    off = np.r_[0, np.cumsum(sizes)]
    Ts = []
    for i, n in enumerate(sizes):
        yy = y[off[i]:off[i + 1]]
        q = rng.integers(0, n, 200)
        pos = np.array([rng.choice(np.flatnonzero((yy == yy[a]) & (np.arange(n) != a)))
                        for a in q])
        neg = np.array([rng.choice(np.flatnonzero(yy != yy[a])) for a in q])
        Ts.append(np.c_[q, pos, neg])
    coll = _uneven(X, y, sizes).with_triplets(Ts)
    T = np.vstack([t + o for t, o in zip(Ts, off)])
    _same_kissme(_fit_coll(KISSME(), coll), KISSME().fit(X, triplets=T))
    m = _fit_coll(RCA(), coll)
    # "auto" needs the rows for its held-out choice: a partitioned fit keeps
    # the paper's shrinkage 0; a given shrinkage is exact
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")
    _same_rca(m, RCA(shrinkage=0.0).fit(X, triplets=T))
    assert m.partitioned_["triplets"] == 600
    _same_rca(_fit_coll(RCA(shrinkage=0.3), coll), RCA(shrinkage=0.3).fit(X, triplets=T))


# ---------------------------------------------------------------------------
# RCA from labels
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_rca_labels_equals_in_memory_every_mode_and_K(digits, mode):
    X, y = digits
    y = y.copy()
    y[7] = 10                       # a singleton class: in no chunklet, in T
    ref = RCA(preprocessing=mode).fit(X, y)
    for K in (1, 3, 7):
        m = _fit_coll(RCA(preprocessing=mode), ShardedCollection.from_arrays(X, y,
                                                                         n_partitions=K))
        _same_rca(m, ref)
    m = _fit_coll(RCA(preprocessing=mode), _uneven(X, y, [3, 260, 17, 220]))
    _same_rca(m, ref)


def test_rca_labels_equal_the_paper_formula(digits):
    """C = (1/p) sum over chunklets (classes of >= 2 rows) of the scatter about
    the chunklet mean (Step 2 of Algorithm 1), T the total scatter, written
    out on the preprocessed rows; partitions sorted by class (each lacks
    most classes)."""
    X, y = digits
    o = np.argsort(y, kind="stable")
    X, y = X[o], y[o]
    with pytest.warns(ClassesWarning):
        m = RCA(preprocessing="standardize").fit(
            ShardedCollection.from_arrays(X, y, n_partitions=7))
    Z = m.scaler_.transform(X)
    C = sum((Z[y == c] - Z[y == c].mean(0)).T @ (Z[y == c] - Z[y == c].mean(0))
            for c in np.unique(y)) / len(y)
    Zc = Z - Z.mean(0)
    _close(m.chunklet_covariance_, C)
    _close(m.total_scatter_, Zc.T @ Zc)


# ---------------------------------------------------------------------------
# merge, baselines, persistence, quality
# ---------------------------------------------------------------------------
def test_merge_class_moments_is_chan_exact():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3)) * 10 + 1e3
    c = rng.integers(0, 4, 90)
    c[:30] = np.where(c[:30] == 3, 0, c[:30])         # class 3 absent from the first part
    whole = class_stats.class_moments(X, c, 5, True)   # class 4 absent everywhere
    parts = [class_stats.class_moments(X[a:b], c[a:b], 5, True) for a, b in
             ((0, 30), (30, 31), (31, 90))]
    got = class_stats.merge_class_moments(*parts)
    np.testing.assert_array_equal(got[0], whole[0])
    np.testing.assert_allclose(got[1], whole[1], rtol=1e-13)
    np.testing.assert_allclose(got[2], whole[2], rtol=1e-10, atol=1e-9)
    pooled = class_stats.merge_class_moments(
        *[class_stats.class_moments(X[a:b], c[a:b], 5, False) for a, b in ((0, 30), (30, 90))])
    np.testing.assert_allclose(pooled[2], whole[2].sum(0), rtol=1e-10)
    assert got[2][4].sum() == 0 and got[1][4].sum() == 0


@pytest.mark.parametrize("Est", [Euclidean, DotProduct])
def test_baselines_similarity_equals_in_memory(digits, Est):
    X, y = digits
    Xs = sp.csr_matrix(X)
    for mode in MODES:
        ref = Est(preprocessing=mode).fit(X)
        m = Est(preprocessing=mode).fit(ShardedCollection.from_arrays(X, y, n_partitions=3))
        assert m.partitioned_["strategy"] == "statistics"
        _close(m.similarity(X[:50], X[50:120]), ref.similarity(X[:50], X[50:120]))
        ref = Est(preprocessing=mode).fit(Xs)
        m = Est(preprocessing=mode).fit(ShardedCollection([Xs[:90], Xs[90:]], [90, 410]))
        _close(m.similarity(Xs[:50], Xs[50:120]), ref.similarity(Xs[:50], Xs[50:120]))


@pytest.mark.parametrize("Est", [KISSME, RCA])
def test_save_load_round_trip_and_quality(digits, Est, tmp_path):
    X, y = digits
    tr, te = np.arange(350), np.arange(350, 500)
    m = _fit_coll(Est(), ShardedCollection.from_arrays(X[tr], y[tr], n_partitions=4))
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert type(back) is Est
    np.testing.assert_array_equal(back.M_, m.M_)
    np.testing.assert_array_equal(back.similarity(X[te]), m.similarity(X[te]))
    ref = Est().fit(X[tr], y[tr])
    s, s_ref = m.score(X[te], y[te]), ref.score(X[te], y[te])
    # the test mAP of the in-memory fit (KISSME .79, RCA .59 with 350 training
    # rows of 64 features; Euclidean .66)
    assert abs(s - s_ref) < 1e-9 and s > {KISSME: 0.75, RCA: 0.55}[Est]


# ---------------------------------------------------------------------------
# Dask: identical to the in-process path
# ---------------------------------------------------------------------------
def test_dask_equals_local(digits, dask_client):
    pytest.importorskip("dask")
    pytest.importorskip("distributed")
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from tripletml.distributed.dask_search import use_cluster
    X, y = digits
    coll = _uneven(X, y, [60, 300, 140])
    Xs = sp.csr_matrix(X)
    coll_s = ShardedCollection([Xs[:60], Xs[60:360], Xs[360:]], [60, 300, 140],
                               [y[:60], y[60:360], y[360:]])
    makers = [lambda: (KISSME(), coll), lambda: (KISSME(n_triplets=500, random_state=1), coll),
              lambda: (RCA(), coll), lambda: (KISSME(preprocessing=None), coll_s)]
    local = [_fit_coll(est, c) for est, c in (f() for f in makers)]
    with use_cluster(dask_client):
        dist = [_fit_coll(est, c) for est, c in (f() for f in makers)]
    for a, b in zip(local, dist):
        assert b.partitioned_["backend"] == "dask" and a.partitioned_["backend"] == "local"
        np.testing.assert_array_equal(a.M_, b.M_)
        np.testing.assert_array_equal(a.components_, b.components_)
