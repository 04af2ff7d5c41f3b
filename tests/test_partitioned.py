"""The partitioned training driver (tripletml.distributed.partitioned): exact
preprocessing statistics over partitions, per-partition supervision, the
gather-a-sample strategy, input checks, and the local / Dask backends."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits

from tripletml import COMET, ITML, OASIS, RCA, DotProduct, Euclidean, load_model
from tripletml.registry import entries
from tripletml.distributed.sharded import ShardedCollection, read_npz_shards, write_npz_shards
from tripletml.distributed import statistics as stats
from tripletml.distributed.partitioned import (ClassesWarning, LocalBackend, _labels_task,
                                            partition_shares)


@pytest.fixture(autouse=True)
def _cluster_backend(monkeypatch):
    """These tests compare the cluster with the in-process fit on small
    data: keep them on the cluster (no cost model, issue 41 section 3)."""
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")

MODES = ["auto", None, "center", "standardize", "whiten", "sphere", "raw"]


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    return X[order], y[order]


def _pre(est, coll, d):
    be = LocalBackend(coll, type(est).__name__, d)
    return stats.fit_preprocessor(est, be, be.gather(be.map(_labels_task)))


def _same_pre(a, b, rtol=1e-10):
    assert a.mode_ == b.mode_
    assert a.decision_ == b.decision_
    for name in ("mean_", "scale_", "whitener_", "radius_", "unit_"):
        u, v = getattr(a, name), getattr(b, name)
        assert (u is None) == (v is None), name
        if u is not None:
            np.testing.assert_allclose(u, v, rtol=rtol, atol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------
# exact statistics
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [OASIS, ITML, Euclidean])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 3, 7])
def test_preprocessor_equals_in_memory_fit(digits, cls, mode, k):
    X, y = digits
    est = cls(preprocessing=mode)
    pre = _pre(est, ShardedCollection.from_arrays(X, y, n_partitions=k), X.shape[1])
    est._fit_preprocessing(X)
    _same_pre(pre, est.scaler_)


@pytest.mark.parametrize("kind", ["binary", "onehot", "mixed", "sparse_tfidf"])
def test_preprocessor_on_column_kinds_and_sparse(kind):
    rng = np.random.default_rng(1)
    n = 300
    if kind == "binary":
        X = (rng.random((n, 12)) < rng.random(12)).astype(float)
    elif kind == "onehot":
        X = np.eye(5)[rng.integers(0, 5, n)]
        X = np.hstack([X, np.eye(3)[rng.integers(0, 3, n)]])
    elif kind == "mixed":
        X = np.column_stack([rng.integers(0, 17, (n, 6)), rng.normal(size=(n, 3)) * 1e3,
                             rng.integers(0, 2, n), np.full(n, 4.0)]).astype(float)
    else:
        X = sp.random(n, 3000, density=0.01, random_state=1, format="csr")
    y = rng.integers(0, 3, n)
    for cls in (OASIS, ITML):
        for mode in (["auto", None] if sp.issparse(X) else MODES):
            est = cls(preprocessing=mode)
            pre = _pre(est, ShardedCollection.from_arrays(X, y, n_partitions=4), X.shape[1])
            est._fit_preprocessing(X)
            _same_pre(pre, est.scaler_)


def test_distributed_median_is_exact(digits, monkeypatch):
    """The sphere radius by histogram refinement (forced with a tiny gather
    limit) equals np.median, for odd and even row counts."""
    X, y = digits
    monkeypatch.setattr(stats, "_GATHER_MAX", 7)
    monkeypatch.setattr(stats, "_BINS", 16)
    for n in (len(y), len(y) - 1):
        coll = ShardedCollection.from_arrays(X[:n], y[:n], n_partitions=5)
        be = LocalBackend(coll, "t", X.shape[1])
        mean, scale = X[:n].mean(0), 1 / np.where(X[:n].std(0) > 0, X[:n].std(0), 1)
        got = stats.distributed_median(be, mean, scale)
        ref = np.median(np.linalg.norm((X[:n] - mean) * scale, axis=1))
        assert got == pytest.approx(ref, rel=1e-13)


def test_merge_moments_matches_numpy():
    rng = np.random.default_rng(2)
    blocks = [rng.normal(5, 3, size=(m, 4)) for m in (1, 10, 0, 33)]
    items = [(b.shape[0], b.mean(0) if len(b) else np.zeros(4),
              ((b - b.mean(0)) ** 2).sum(0) if len(b) else np.zeros(4)) for b in blocks]
    n, mean, m2 = stats.merge_moments(*items)
    allx = np.vstack(blocks)
    assert n == 44
    np.testing.assert_allclose(mean, allx.mean(0), rtol=1e-13)
    np.testing.assert_allclose(m2 / n, allx.var(0), rtol=1e-12)


# ---------------------------------------------------------------------------
# supervision
# ---------------------------------------------------------------------------
def test_partition_shares():
    assert partition_shares(10, [1, 1, 1]) == [4, 3, 3]
    assert partition_shares(7, [0, 5, 5]) == [0, 4, 3]
    assert sum(partition_shares(1000, [3, 7, 11, 0, 13])) == 1000
    assert partition_shares(5, [0, 0]) == [0, 0]


def test_sample_strategy_equals_in_memory_fit_on_gathered_rows(digits):
    """ITML on a collection = ITML fitted in memory on the gathered rows and
    triplets with the collection's preprocessing (here None: unit only)."""
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    a = ITML(preprocessing="standardize", max_iter=20, tol=None, random_state=0).fit(coll)
    assert a.partitioned_["strategy"] == "sample"
    assert a.partitioned_["n_triplets"] == 20 * 10 ** 2           # metric-learn's 20 c^2
    # rebuild the triplets: partition p samples its share with seed (seed, p)
    from tripletml.distributed.sample import gather_triplet_rows
    from tripletml.distributed.partitioned import (LocalBackend, PartitionedFit, Supervision,
                                                _label_table)
    seed = int(np.random.default_rng(0).integers(2 ** 63 - 1))
    be = LocalBackend(coll, "ITML", 64)
    infos = be.gather(be.map(_labels_task))
    sup = Supervision("ITML", a.scaler_, True, ITML()._sampler(),
                      partition_shares(2000, coll.n_rows), seed, _label_table(infos, "ITML"))
    plan = PartitionedFit(be, coll.n_rows, sup, 2000, np.random.default_rng(0))
    Xg, T = gather_triplet_rows(plan)
    assert T.shape == (2000, 3) and Xg.shape[0] == a.partitioned_["gathered_rows"]
    b = ITML(preprocessing="standardize", max_iter=20, tol=None, random_state=0)
    b._fit_preprocessing(X)                      # the statistics of all rows
    pre = b.scaler_
    b.scaler_ = a.scaler_
    _same_pre(pre, a.scaler_)
    rng = np.random.default_rng(0)
    rng.integers(2 ** 63 - 1)                    # the driver drew the seed first
    b._fit(a.scaler_.transform(Xg), T, rng)
    np.testing.assert_allclose(a.M_, b.M_, rtol=1e-10, atol=1e-12)


def test_triplets_are_within_partitions_and_deterministic(digits):
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=4)
    m1 = COMET(n_triplets=400, max_iter=2, tol=None, random_state=3).fit(coll)
    m2 = COMET(n_triplets=400, max_iter=2, tol=None, random_state=3).fit(coll)
    np.testing.assert_array_equal(m1.W_, m2.W_)
    m3 = COMET(n_triplets=400, max_iter=2, tol=None, random_state=4).fit(coll)
    assert not np.array_equal(m1.W_, m3.W_)


def test_explicit_triplets_per_partition(digits):
    X, y = digits
    coll = ShardedCollection.from_arrays(X[:300], None, n_partitions=2)
    rng = np.random.default_rng(0)
    T = [np.column_stack([rng.integers(0, 150, 50)] * 3) for _ in range(2)]
    for t in T:
        t[:, 1] = (t[:, 0] + 1) % 150
        t[:, 2] = (t[:, 0] + 2) % 150
    m = ITML(max_iter=5, tol=None, random_state=0).fit(coll.with_triplets(T))
    assert m.partitioned_["n_triplets"] == 100
    with pytest.raises(ValueError, match=r"partition 1\): triplets index 500"):
        bad = [T[0], np.array([[0, 1, 500]])]
        ITML(max_iter=5).fit(coll.with_triplets(bad))


class _SampledRCA(RCA):
    """RCA through the gather-a-sample strategy (a learner that uses the
    labels themselves and has no strategy of its own)."""

    _partitioned_strategy = None


def test_labels_only_learner_gets_a_row_sample(digits, monkeypatch):
    from tripletml.distributed import sample
    X, y = digits
    m = _SampledRCA().fit(ShardedCollection.from_arrays(X, y, n_partitions=3))
    assert m.partitioned_["strategy"] == "sample"
    assert m.partitioned_["gathered_rows"] == len(y)      # all rows: under SAMPLE_ROWS
    ref = RCA().fit(X, y)
    np.testing.assert_allclose(m.similarity(X[:20]), ref.similarity(X[:20]), rtol=1e-8,
                               atol=1e-10)
    monkeypatch.setattr(sample, "SAMPLE_ROWS", 300)
    m = _SampledRCA().fit(ShardedCollection.from_arrays(X, y, n_partitions=3))
    assert m.partitioned_["gathered_rows"] == 300


# ---------------------------------------------------------------------------
# every learner takes a collection
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("entry", entries("triplet"), ids=lambda e: e.name)
def test_every_triplet_learner_fits_a_collection(digits, entry, tmp_path):
    X, y = digits
    X, y = X[:400], y[:400]
    est = entry.make()
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # budget-starved test settings
        assert est.fit(coll) is est
    assert est.n_features_in_ == X.shape[1]
    assert est.partitioned_["partitions"] == 3
    S = est.similarity(X[:20])
    assert np.isfinite(S).all()
    est.save(tmp_path / "m.npz")
    np.testing.assert_allclose(load_model(tmp_path / "m.npz").similarity(X[:20]), S,
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("entry", entries("multilabel"), ids=lambda e: e.name)
def test_multilabel_learners_refuse_a_collection(digits, entry):
    X, y = digits
    coll = ShardedCollection.from_arrays(X[:100], y[:100], n_partitions=2)
    with pytest.raises((TypeError, ValueError), match="ShardedCollection"):
        entry.make().fit(coll, np.eye(10)[y[:100]])


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------
def test_bad_collections(digits):
    X, y = digits
    with pytest.raises(ValueError, match="partition 1 has 63 features"):
        ITML().fit(ShardedCollection([X[:50], X[50:100, :63]], [50, 50], [y[:50], y[50:100]]))
    with pytest.raises(ValueError, match="sparse and some dense"):
        ITML().fit(ShardedCollection([X[:50], sp.csr_matrix(X[50:100])], [50, 50],
                                     [y[:50], y[50:100]]))
    with pytest.raises(ValueError, match="partition 0 has 50 rows, the collection says 40"):
        ITML().fit(ShardedCollection([X[:50]], [40], [y[:50]]))
    with pytest.raises(ValueError, match="needs labels in every partition"):
        ITML().fit(ShardedCollection([X[:50]], [50]))
    with pytest.raises(ValueError, match="do not pass y"):
        ITML().fit(ShardedCollection([X[:50]], [50], [y[:50]]), y[:50])
    Xn = X[:50].copy()
    Xn[3, 3] = np.nan
    with pytest.raises(ValueError, match=r"ITML \(partition 1\).*NaN"):
        ITML().fit(ShardedCollection([X[:50], Xn], [50, 50], [y[:50], y[:50]]))
    with pytest.raises(ValueError, match="no partition has two classes"):
        ITML().fit(ShardedCollection([X[:50], X[50:100]], [50, 50],
                                     [np.zeros(50), np.ones(50)]))


def test_partition_lacking_classes_warns(digits):
    X, y = digits
    order = np.argsort(y, kind="stable")
    coll = ShardedCollection.from_arrays(X[order], y[order], n_partitions=4)
    with pytest.warns(ClassesWarning, match="lack some of the 10 classes.*shuffle=True"):
        ITML(max_iter=3, tol=None).fit(coll)


def test_write_npz_shards_shuffle(tmp_path, digits):
    X, y = digits
    order = np.argsort(y, kind="stable")
    write_npz_shards(tmp_path / "a", X[order], y[order], rows_per_shard=450, shuffle=True,
                     random_state=0)
    coll = read_npz_shards(tmp_path / "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClassesWarning)       # every shard has every class
        m = ITML(max_iter=3, tol=None, random_state=0).fit(coll)
    assert m.partitioned_["partitions"] == 4
    perm = np.random.default_rng(0).permutation(len(y))
    from tripletml.distributed.sharded import load_npz_shard
    X0, y0 = load_npz_shard(tmp_path / "a" / "shard-00000.npz")
    np.testing.assert_array_equal(X0, X[order][perm][:450])
    with pytest.raises(ValueError, match="labels for"):
        write_npz_shards(tmp_path / "b", X, y[:5], rows_per_shard=10)


def test_loaders_and_three_tuples(digits):
    X, y = digits
    T = np.array([[0, 1, 2], [3, 4, 5]])
    parts = [functools.partial(_loader, X[:60], y[:60], T), (X[60:120], y[60:120], T)]
    coll = ShardedCollection(parts, [60, 60])
    m = ITML(max_iter=3, tol=None).fit(coll)
    assert m.partitioned_["n_triplets"] == 4


def _loader(X, y, T):
    return X, y, T


def test_baselines_through_statistics(digits):
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=4)
    for cls in (Euclidean, DotProduct):
        for mode in MODES:
            a = cls(preprocessing=mode).fit(coll)
            b = cls(preprocessing=mode).fit(X, y)
            assert a.partitioned_["strategy"] == "statistics"
            np.testing.assert_allclose(a.similarity(X[:30]), b.similarity(X[:30]),
                                       rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------
# Dask: the same model as in-process
# ---------------------------------------------------------------------------
def test_dask_backend_equals_local(digits, dask_client):
    pytest.importorskip("distributed")
    from tripletml.distributed.dask_search import use_cluster
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=5)
    params = dict(preprocessing="auto", max_iter=10, tol=None, random_state=0)
    local = ITML(**params).fit(coll)
    with use_cluster(dask_client):
        remote = ITML(**params).fit(coll)
        eu = Euclidean(preprocessing="sphere").fit(coll)
    assert remote.partitioned_["backend"] == "dask"
    np.testing.assert_array_equal(local.M_, remote.M_)
    _same_pre(local.scaler_, remote.scaler_, rtol=0)
    assert eu.scaler_.radius_ == Euclidean(preprocessing="sphere").fit(
        coll).scaler_.radius_


# ---------------------------------------------------------------------------
# round checkpoints (the files are untrusted)
# ---------------------------------------------------------------------------
def test_round_checkpoint_roundtrip_and_refusals(tmp_path):
    import json
    import os
    from _crash import reseal

    from tripletml.distributed.checkpoint import RoundCheckpoint
    d = tmp_path / "ck"
    ck = RoundCheckpoint(d, {"a": 1})
    assert ck.load() is None
    ck.save(3, {"M": np.eye(3), "alpha": np.arange(5.0)}, {"seed": "7"})
    ck.save(4, {"M": 2 * np.eye(3), "alpha": np.arange(5.0)}, {"seed": "7"})
    assert sorted(p.name for p in d.iterdir()) == ["round-000000000004.npz", "state.json"]
    r, arrays, meta = RoundCheckpoint(d, {"a": 1}).load()
    assert r == 4 and meta == {"seed": "7"}
    np.testing.assert_array_equal(arrays["M"], 2 * np.eye(3))
    with pytest.raises(ValueError, match="written by another run"):
        RoundCheckpoint(d, {"a": 2}).load()
    assert RoundCheckpoint(d, {"a": 2}, resume=False).load() is None
    # a forged file name in state.json
    state = json.loads((d / "state.json").read_text())
    state["state"]["file"] = "../../etc/passwd"
    (d / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="modified after tripletml wrote it"):
        RoundCheckpoint(d, {"a": 1}).load()
    reseal(d)
    with pytest.raises(ValueError, match="not one this library writes"):
        RoundCheckpoint(d, {"a": 1}).load()
    # a symbolic link in place of the arrays
    state["state"]["file"] = "round-000000000004.npz"
    (d / "state.json").write_text(json.dumps(state))
    reseal(d)
    os.replace(d / "round-000000000004.npz", tmp_path / "real.npz")
    os.symlink(tmp_path / "real.npz", d / "round-000000000004.npz")
    with pytest.raises(ValueError, match="not a regular file|did not write"):
        RoundCheckpoint(d, {"a": 1}).load()
    # a pickled object member is never unpickled
    os.unlink(d / "round-000000000004.npz")
    np.savez(d / "round-000000000004.npz", M=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="did not write"):      # no marker: foreign
        RoundCheckpoint(d, {"a": 1})
    from tripletml.distributed import checkpoint
    np.savez(d / "round-000000000004.npz", M=np.array([{"x": 1}], dtype=object),
             tripletml_checkpoint=np.frombuffer(checkpoint._MARK_BYTES, np.uint8))
    reseal(d)
    with pytest.raises(ValueError, match="allow_pickle"):
        RoundCheckpoint(d, {"a": 1}).load()
    # stale temporaries of a killed write are removed, foreign files kept
    RoundCheckpoint(tmp_path / "other", {"a": 1}).save(1, {"M": np.eye(3)})
    raw = (tmp_path / "other" / "round-000000000001.npz").read_bytes()
    (d / ".round-000000000009.npz.abc123.tmp").write_bytes(raw[:100])
    (d / ".round-000000000008.npz.abc123.tmp").write_bytes(b"x")     # not ours: kept
    (d / "notes.txt").write_text("mine")
    RoundCheckpoint(d, {"a": 1})
    assert not (d / ".round-000000000009.npz.abc123.tmp").exists()
    assert (d / ".round-000000000008.npz.abc123.tmp").exists()
    assert (d / "notes.txt").exists()


def test_dense_update_too_large_to_ship_is_refused(monkeypatch):
    from tripletml.distributed import partitioned
    monkeypatch.setattr(partitioned, "MAX_UPDATE_BYTES", 8 * 63 * 63)
    X, y = load_digits(return_X_y=True)
    coll = ShardedCollection.from_arrays(X, y, n_partitions=2)
    est = OASIS(preprocessing="standardize")
    if est._partitioned_strategy.name != "mixing":
        pytest.skip("OASIS is not trained by parameter mixing")
    with pytest.raises(ValueError, match="dense 64 x 64 model update.*LORETA"):
        est.fit(coll)


def test_checkpoint_dir_without_rounds_warns(tmp_path, digits):
    from tripletml.distributed.partitioned import fit_partitioned
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=2)
    with pytest.warns(UserWarning, match="no rounds to checkpoint"):
        fit_partitioned(Euclidean(), coll, checkpoint_dir=tmp_path / "ck")


def test_dask_array_and_delayed_collections_train_in_process(digits):
    """Without a cluster, Delayed partitions (from_dask_array, from_delayed)
    are computed in this process, one at a time; the model equals the one of
    the same rows as in-memory blocks."""
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    X, y = digits
    X, y = X[:900], y[:900]
    ref = ITML(max_iter=5, tol=None, random_state=0).fit(
        ShardedCollection.from_arrays(X, y, n_partitions=3))
    coll = ShardedCollection.from_dask_array(da.from_array(X, chunks=(300, 64)),
                                             da.from_array(y, chunks=300))
    got = ITML(max_iter=5, tol=None, random_state=0).fit(coll)
    np.testing.assert_array_equal(got.M_, ref.M_)
    parts = [dask.delayed(lambda a, b: (a, b))(X[i:i + 300], y[i:i + 300])
             for i in range(0, 900, 300)]
    got = ITML(max_iter=5, tol=None, random_state=0).fit(
        ShardedCollection.from_delayed(parts, n_rows=[300] * 3))
    np.testing.assert_array_equal(got.M_, ref.M_)


def test_tree_sum_is_pure_and_sums_nested_parts():
    from tripletml.distributed.reduction import tree_sum
    a, b = np.ones(3), np.arange(3.0)
    out = tree_sum((a, 2), None, (b, 3))
    np.testing.assert_array_equal(out[0], a + b)
    assert out[1] == 5
    np.testing.assert_array_equal(a, np.ones(3))          # inputs unchanged
    assert tree_sum(None, None) is None


def test_empty_and_infinite_partitions_are_refused(digits):
    X, y = digits
    with pytest.raises(ValueError, match=r"ITML \(partition 1\)"):
        ITML().fit(ShardedCollection([X[:50], X[:0]], [50, 0], [y[:50], y[:0]]))
    Xi = X[:50].copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"OASIS \(partition 0\).*infinity"):
        OASIS().fit(ShardedCollection([Xi], [50], [y[:50]]))
    with pytest.raises(ValueError, match="checkpoint_every"):
        from tripletml.distributed.partitioned import fit_partitioned
        fit_partitioned(OASIS(), ShardedCollection([X[:50]], [50], [y[:50]]),
                        checkpoint_dir="/tmp/unused-ck", checkpoint_every=0)
