"""Dask features (tripletml.distributed.dask_search, tripletml.distributed.sharded, tripletml.distributed.streaming).

One 2-worker LocalCluster, with worker *processes* (one thread each): that
is what a real cluster does (pickling the models and loaders, per-process
BLAS limits) and the only way the BLAS pinning can be observed; its start (a
few seconds) is paid once per test session (the ``dask_client`` fixture of
tests/conftest.py, shared with the partitioned-training modules).  Every
distributed result is compared with the local one for exact equality.
"""
from __future__ import annotations

import builtins
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import LORETA, OASIS, SDCA, Euclidean
from tripletml.search.index import build
from tripletml.metrics import evaluate_retrieval as local_evaluate
from tripletml.distributed.streaming import fit_stream


@pytest.fixture(autouse=True)
def _cluster_backend(monkeypatch):
    """These tests compare the cluster with the in-process fit on small
    data: keep them on the cluster (no cost model, issue 41 section 3)."""
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_importing_tripletml_does_not_import_dask():
    code = ("import sys, tripletml, tripletml.distributed.dask_search, tripletml.distributed.sharded, tripletml.distributed.streaming, "
            "tripletml.cli.cluster, tripletml.reproduce._common\n"
            "assert not any(m == 'dask' or m.startswith(('dask.', 'distributed')) "
            "for m in sys.modules), sorted(m for m in sys.modules if 'dask' in m)")
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_missing_dask_gives_install_hint(monkeypatch):
    from tripletml.distributed import dask_search as cluster, sharded
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "dask" or name.startswith(("dask.", "distributed")):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r'pip install "tripletml\[dask\]"'):
        with cluster.use_cluster("tcp://127.0.0.1:1"):
            pass
    X = np.eye(4)
    m = Euclidean().fit(X)
    coll = sharded.ShardedCollection.from_loaders([lambda: (X, np.arange(4))], [4])
    with pytest.raises(ImportError, match="tripletml.distributed.sharded.search needs Dask"):
        sharded.search(m, coll, X, k=1)


# ---------------------------------------------------------------------------
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

# the workers cannot import this test module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client(dask_client):
    """The session's 2-worker LocalCluster (tests/conftest.py), shared with
    the tests/test_partitioned*.py modules."""
    return dask_client


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(230, 7))
    X[17] = X[3]                       # exact ties in every ranking
    X[150] = X[3]
    y = rng.integers(0, 4, 230)
    return X, y


@pytest.fixture(scope="module")
def models(data):
    X, y = data
    return {"OASIS": OASIS(n_triplets=400, random_state=0).fit(X, y),   # inner product
            "Euclidean": Euclidean().fit(X)}                             # -squared L2


def test_use_cluster_gridsearch_equals_local_and_pins_blas(client, data):
    from sklearn.model_selection import GridSearchCV

    from tripletml.distributed.dask_search import active_client, use_cluster, worker_blas_threads
    X, y = data
    grid = {"C": [0.01, 1.0]}
    local = GridSearchCV(OASIS(n_triplets=300, random_state=0), grid, cv=2, n_jobs=1).fit(X, y)
    before = client.run(worker_blas_threads)
    with use_cluster(client, blas_threads=2) as c:
        assert c is client and active_client() is client
        assert set(client.run(worker_blas_threads).values()) == {2}
        remote = GridSearchCV(OASIS(n_triplets=300, random_state=0), grid, cv=2,
                              n_jobs=-1).fit(X, y)
    assert active_client() is None
    assert client.run(worker_blas_threads) == before          # restored
    np.testing.assert_array_equal(local.cv_results_["mean_test_score"],
                                  remote.cv_results_["mean_test_score"])
    assert local.best_params_ == remote.best_params_
    np.testing.assert_array_equal(local.best_estimator_.W_, remote.best_estimator_.W_)


def test_use_cluster_rejects_bad_arguments():
    from tripletml.distributed.dask_search import use_cluster
    with pytest.raises(TypeError, match="scheduler must be"):
        with use_cluster(3.5):
            pass
    with pytest.raises(ValueError, match="blas_threads"):
        with use_cluster("tcp://127.0.0.1:1", blas_threads=0):
            pass


def _brute_topk(model, Q, X, k, exclude=None):
    """Stable argsort of model.similarity (the metrics tie rule)."""
    S = model.similarity(Q, X).astype(float)
    if exclude is not None:
        S[np.arange(len(Q)), exclude] = -np.inf
    order = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(S, order, axis=1)


@pytest.mark.parametrize("name", ["OASIS", "Euclidean"])
def test_sharded_search_evaluate_embed_equal_local(client, data, models, name, tmp_path):
    from tripletml.distributed import sharded
    X, y = data
    m = models[name]
    sharded.write_npz_shards(tmp_path, X, y, rows_per_shard=60)       # 4 shards, last short
    coll = sharded.read_npz_shards(tmp_path)
    assert coll.n_rows == [60, 60, 60, 50]
    with dask.config.set(scheduler=client.get):
        # embedding partition by partition
        np.testing.assert_array_equal(sharded.embed(m, coll).compute(), m.embed_database(X))
        # exact top-k against brute force and the exact numpy index
        Q = X[:40]
        vals, ids = sharded.search(m, coll, Q, k=9)
        ref_ids, ref_vals = _brute_topk(m, Q, X, 9)
        np.testing.assert_array_equal(ids, ref_ids)
        # the workers' BLAS (one thread) may round a GEMM differently from this process
        np.testing.assert_allclose(vals, ref_vals, rtol=1e-13, atol=1e-13)
        np.testing.assert_array_equal(ids, build(m, X, backend="numpy").search(Q, 9)[1])
        _, ids_loo = sharded.search(m, coll, Q, k=5, query_ids=np.arange(40))
        np.testing.assert_array_equal(ids_loo, _brute_topk(m, Q, X, 5, np.arange(40))[0])
        # leave-one-out evaluation over the whole collection
        got = sharded.evaluate_retrieval(m, coll, X, y, k=(1, 5, 10), recall=True,
                                         query_ids=np.arange(len(X)), query_block=64)
        assert got == local_evaluate(m, X, y, k=(1, 5, 10), recall=True)
        # separate queries against a collection given as a dask array
        import dask.array as da
        darr = sharded.ShardedCollection.from_dask_array(
            da.from_array(X[50:], chunks=(45, 7)), da.from_array(y[50:], chunks=45))
        got = sharded.evaluate_retrieval(m, darr, X[:50], y[:50], k=(1, 3), recall=True)
        assert got == local_evaluate(m, X[:50], y[:50], X[50:], y[50:], k=(1, 3), recall=True)


def test_sharded_sparse_equals_exact_index(client, data, tmp_path):
    from tripletml.distributed import sharded
    X, y = data
    rng = np.random.default_rng(1)
    Xs = sp.random(230, 30, density=0.2, format="csr", random_state=rng)
    m = OASIS(n_triplets=300, random_state=0).fit(Xs, y)
    sharded.write_npz_shards(tmp_path, Xs, y, rows_per_shard=100)
    coll = sharded.read_npz_shards(tmp_path)
    index = build(m, Xs, backend="numpy")
    with dask.config.set(scheduler=client.get):
        got = sharded.evaluate_retrieval(m, coll, Xs[:60], y[:60], k=(1, 5), recall=True,
                                         query_ids=np.arange(60))
        _, ids = sharded.search(m, coll, Xs[:30], k=6)
    # (the index's leave-one-out takes every row as a query: brute force on 60 of them)
    assert got == _loo_subset(m, Xs, y, 60, (1, 5))
    with dask.config.set(scheduler="sync"):
        full = sharded.evaluate_retrieval(m, coll, Xs, y, k=(1, 5), query_ids=np.arange(230))
    local = local_evaluate(None, Xs, y, k=(1, 5), index=index)
    # ranks and P@k are equal; the mean of the APs may differ in its last bit
    # (scores of the standardized rows come from GEMMs of different shapes)
    assert {k: v for k, v in full.items() if k != "map"} == \
        {k: v for k, v in local.items() if k != "map"}
    assert full["map"] == pytest.approx(local["map"], rel=1e-12, abs=0)
    np.testing.assert_array_equal(ids, index.search(Xs[:30], 6)[1])


def _loo_subset(m, X, y, n_q, ks):
    """Leave-one-out scores of the first n_q rows from the dense embeddings
    (brute force, the metrics tie rule)."""
    from tripletml.metrics import _recall
    Eq, E = m.embed_queries(X[:n_q]), m.embed_database(X)
    S = Eq @ E.T
    S[np.arange(n_q), np.arange(n_q)] = -np.inf
    ap = np.full(n_q, np.nan)
    hits = np.zeros((n_q, len(ks)))
    n_rel = np.zeros(n_q, dtype=int)
    for i in range(n_q):
        order = np.argsort(-S[i], kind="stable")[:-1]       # self (-inf) ranked last, dropped
        rel = y[order] == y[i]
        n_rel[i] = rel.sum()
        pos = np.flatnonzero(rel)
        ap_sum = np.bincount(np.zeros(pos.size, dtype=int),
                             weights=np.arange(1, pos.size + 1) / (pos + 1.0), minlength=1)[0]
        if n_rel[i]:
            ap[i] = ap_sum / n_rel[i]
        for j, k in enumerate(ks):
            hits[i, j] = rel[:k].sum()
    out = {"map": float(ap[~np.isnan(ap)].mean())}
    for j, k in enumerate(ks):
        out[f"precision_at_{k}"] = float(hits[:, j].mean() / k)
    out.update(_recall(hits, list(ks), n_rel))
    return out


def test_per_partition_indexes_equal_sharded_search(client, data, models, tmp_path):
    from tripletml.distributed import sharded
    X, y = data
    m = models["OASIS"]
    coll = sharded.ShardedCollection.from_loaders(
        [lambda: (X[:100], y[:100]), lambda: (X[100:], y[100:])], [100, 130])
    with dask.config.set(scheduler=client.get):
        paths = sharded.build_indexes(m, coll, tmp_path / "idx", backend="numpy")
        got = sharded.search_indexes(paths, coll, X[:20], k=7)
        ref = sharded.search(m, coll, X[:20], k=7)
    np.testing.assert_array_equal(got[1], ref[1])          # (scores, ids): the ids


def test_reproduce_parallel_path_equals_serial(client):
    from tripletml.distributed.dask_search import use_cluster
    from tripletml.reproduce import _common
    jobs = [((s, n), {"scale": 0.5}) for s in range(3) for n in (5, 8)]
    serial = _common.run_jobs(_job, jobs)
    with use_cluster(client):
        parallel = _common.run_jobs(_job, jobs)
    assert len(serial) == 6
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)
    home = os.environ.get("TRIPLETML_DATA")
    if not home or not os.path.isdir(home):
        pytest.skip("TRIPLETML_DATA not set: the euclidean-baseline part needs the data")
    from tripletml.reproduce import euclidean
    # the reproduction's own jobs (real data read on the workers through
    # data_home), on its sets but letter (6,000 test rows: a 6,000^2
    # similarity matrix per run, most of this test's time before); the whole
    # table is tests/test_cli.py::test_euclidean_reproduces_sdca_table2_eucl_row
    jobs = [((name, 0, home), {}) for name in euclidean.PAPER_EUCL if name != "letter"]
    maps = _common.run_jobs(euclidean.euclidean_map, jobs)
    with use_cluster(client):
        maps_c = _common.run_jobs(euclidean.euclidean_map, jobs)
    assert len(maps) == 4 and maps == maps_c


def _job(seed, n, scale=1.0):
    """A seeded job as the reproductions run them (fit + score)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, n)) * scale
    y = rng.integers(0, 3, 60)
    m = OASIS(n_triplets=200, random_state=seed).fit(X, y)
    return np.append(m.W_.ravel(), m.score(X, y))


# ---------------------------------------------------------------------------
# training from shards with checkpoints (no Dask needed)
# ---------------------------------------------------------------------------
class _Crash(Exception):
    pass


def _shards():
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(70, 6)), rng.integers(0, 3, 70)) for _ in range(3)]


@pytest.mark.parametrize("make", [
    lambda: OASIS(C=0.1, random_state=0),
    lambda: SDCA(alpha=0.1, n_triplets=750, random_state=0, tol=None),
    lambda: LORETA(rank=3, eta0=0.01, random_state=0, pinv_check_every=100),
], ids=["OASIS", "SDCA", "LORETA"])
def test_resume_after_interrupt_equals_uninterrupted(make, tmp_path):
    shards = _shards()
    kw = dict(n_triplets_per_shard=250, max_iter=2, batch_size=50, checkpoint_every=200,
              random_state=3)
    full = fit_stream(make(), shards, checkpoint_dir=tmp_path / "full", **kw)
    plain = fit_stream(make(), shards, **kw)                   # no checkpoints at all
    crashing = make()
    orig, calls = crashing.partial_fit, {"n": 0}

    def partial_fit(*a, **k):
        calls["n"] += 1
        if calls["n"] == 17:               # between two checkpoints, in the first pass
            raise _Crash
        return orig(*a, **k)

    crashing.partial_fit = partial_fit
    with pytest.raises(_Crash):
        fit_stream(crashing, shards, checkpoint_dir=tmp_path / "run", **kw)
    resumed = fit_stream(make(), shards, checkpoint_dir=tmp_path / "run", **kw)
    assert resumed.t_ == full.t_ == plain.t_ == 2 * 3 * 250
    arrays = [k for k, v in vars(full).items() if k.endswith("_") and isinstance(v, np.ndarray)]
    assert arrays
    for name in arrays:
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name), err_msg=name)
        np.testing.assert_array_equal(getattr(plain, name), getattr(full, name), err_msg=name)
    # a finished run resumes to the same model without steps
    again = fit_stream(make(), shards, checkpoint_dir=tmp_path / "run", **kw)
    assert again.t_ == full.t_


def test_stream_checkpoint_settings_are_checked(tmp_path):
    shards = _shards()
    fit_stream(OASIS(random_state=0), shards, n_triplets_per_shard=100, batch_size=50,
               checkpoint_dir=tmp_path, checkpoint_every=100)
    with pytest.raises(ValueError, match="other stream settings"):
        fit_stream(OASIS(random_state=0), shards, n_triplets_per_shard=100, batch_size=50,
                   checkpoint_dir=tmp_path, checkpoint_every=100, random_state=9)
    with pytest.raises(ValueError, match="multiple of batch_size"):
        fit_stream(OASIS(random_state=0), shards, n_triplets_per_shard=100, batch_size=50,
                   checkpoint_dir=tmp_path / "x", checkpoint_every=70)
    with pytest.raises(ValueError, match="output='random'"):
        fit_stream(SDCA(output="random"), shards, n_triplets_per_shard=100,
                   checkpoint_dir=tmp_path / "y")


def test_stream_from_npz_shards(tmp_path):
    from tripletml.distributed import sharded
    X = np.concatenate([s[0] for s in _shards()])
    y = np.concatenate([s[1] for s in _shards()])
    sharded.write_npz_shards(tmp_path / "d", X, y, rows_per_shard=70)
    coll = sharded.read_npz_shards(tmp_path / "d")
    a = fit_stream(OASIS(C=0.1, random_state=0), coll, n_triplets_per_shard=100, batch_size=25)
    b = fit_stream(OASIS(C=0.1, random_state=0), _shards(), n_triplets_per_shard=100,
                   batch_size=25)
    np.testing.assert_array_equal(a.W_, b.W_)
