"""Issue 41 section 3: small data stays small.  The measured cost model of
:mod:`tripletml.distributed.cost` keeps a fit the cluster cannot speed up in
process, and says so in ``partitioned_``."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import tripletml
from tripletml.distributed import cost
from tripletml.distributed.sharded import ShardedCollection


def test_decide_follows_the_formula():
    rate = cost.machine_rate(16)
    assert rate > 0
    big = cost.decide(examples=10 ** 9, d=16, round_trip_s=0.05, threads=2)
    assert big["decision"] == "cluster"
    assert big["local_s"] == pytest.approx(10 ** 9 * 256 / rate)
    assert big["cluster_s"] == pytest.approx(0.05 + big["local_s"] / 2)
    small = cost.decide(examples=100, d=16, round_trip_s=0.05, threads=2)
    assert small["decision"] == "in-process"
    # the mixing's rounds within a pass each pay the round trip
    many = cost.decide(examples=10 ** 6, d=16, round_trip_s=0.05, threads=2, syncs=20)
    assert many["cluster_s"] == pytest.approx(20 * 0.05 + many["local_s"] / 2)
    assert many["syncs_per_pass"] == 20
    # one worker thread never pays off
    assert cost.decide(examples=10 ** 12, d=16, round_trip_s=0.0,
                       threads=1)["decision"] == "in-process"


def test_backend_choice_is_validated(monkeypatch):
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "gpu")
    with pytest.raises(ValueError, match="TRIPLETML_PARTITIONED_BACKEND"):
        cost.backend_choice()
    monkeypatch.delenv("TRIPLETML_PARTITIONED_BACKEND")
    assert cost.backend_choice() == "auto"


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


def test_small_fit_inside_use_cluster_runs_in_process_and_says_so(client, monkeypatch):
    from tripletml.distributed.dask_search import use_cluster
    monkeypatch.delenv("TRIPLETML_PARTITIONED_BACKEND", raising=False)
    X, y = load_digits(return_X_y=True)
    coll = ShardedCollection.from_arrays(X[:300], y[:300], n_partitions=3)

    def make():
        return tripletml.OASIS(n_triplets=600, max_iter=2, tol=None, random_state=0)

    ref = make().fit(coll)
    with use_cluster(client, blas_threads=None):
        got = make().fit(coll)
    report = got.partitioned_["cost_model"]
    assert got.partitioned_["backend"] == "local"
    assert report["decision"] == "in-process" and report["local_s"] < report["cluster_s"] * \
        cost.MARGIN
    np.testing.assert_array_equal(got.W_, ref.W_)
    # forced onto the cluster, the same model (mixing is exact across backends)
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")
    with use_cluster(client, blas_threads=None):
        forced = make().fit(coll)
    assert forced.partitioned_["backend"] == "dask" and "cost_model" not in forced.partitioned_
    np.testing.assert_allclose(forced.W_, ref.W_, rtol=1e-10, atol=1e-12)


def test_partitions_not_in_memory_stay_on_the_cluster_with_a_warning(client, monkeypatch):
    from tripletml.distributed.dask_search import use_cluster
    monkeypatch.delenv("TRIPLETML_PARTITIONED_BACKEND", raising=False)
    X, y = load_digits(return_X_y=True)
    X, y = X[:200], y[:200]
    parts = [lambda a=a: (X[a:a + 100], y[a:a + 100]) for a in (0, 100)]
    coll = ShardedCollection(parts, [100, 100])
    with use_cluster(client, blas_threads=None):
        with pytest.warns(cost.ClusterCostWarning, match="predicted slower than one process"):
            got = tripletml.OASIS(n_triplets=300, max_iter=1, tol=None,
                                  random_state=0).fit(coll)
    assert got.partitioned_["backend"] == "dask"
    assert got.partitioned_["cost_model"]["decision"].startswith("cluster (in-process")


def test_seconds_per_example_is_measured_and_positive():
    X, y = load_digits(return_X_y=True)
    s = None
    for _ in range(3):                 # None when noise hides the slope
        s = cost.seconds_per_example(tripletml.OASIS(random_state=0), X[:300], y[:300])
        if s is not None:
            break
    if s is None:
        pytest.skip("the machine is too noisy to resolve OASIS's cost per triplet")
    assert 0 < s < 1
    big = cost.decide(examples=10 ** 8, d=64, round_trip_s=0.1, threads=2, per_example_s=s)
    assert big["local_s"] == pytest.approx(10 ** 8 * s)
    assert cost.seconds_per_example(tripletml.OASIS(), X[:50], None) is None
