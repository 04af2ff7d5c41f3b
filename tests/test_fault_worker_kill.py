"""Issue 42 section 1: losing a worker never hangs and never leaks a raw Dask
error.  A worker process of a 2-worker ``LocalCluster`` is killed (SIGKILL)
at several points of a partitioned fit: before it, during a broadcast, during
a reduction, after the last round.  Each fit must end -- a hang guard, not a
timing assertion -- with the model of an undisturbed run (the tasks are
pure; a lost worker restarts the fit from its last checkpoint) or with a
:class:`WorkerLostError` naming what was lost.
"""
from __future__ import annotations

import os
import signal
import threading
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits

import tripletml
from tripletml.distributed import partitioned
from tripletml.distributed.partitioned import WorkerLostError, fit_partitioned
from tripletml.distributed.sharded import ShardedCollection

#: the real kills need a 2-process LocalCluster and minutes on a loaded 2-core
#: machine (each kill costs a worker restart, which imports tripletml); the
#: bounded calls themselves are tested by default below, without a kill
kills = pytest.mark.skipif(
    not os.environ.get("TRIPLETML_WORKER_KILL_TESTS") or not hasattr(signal, "SIGKILL"),
    reason="real worker kills take minutes on a loaded 2-core machine; set "
           "TRIPLETML_WORKER_KILL_TESTS=1 (the bounded calls are tested without a kill)")

#: seconds a fit may run before the test calls it a hang (an undisturbed fit
#: takes about a second; a lost worker adds at most a few cluster timeouts)
HANG_GUARD = 240


@pytest.fixture(scope="module")
def cluster2():
    distributed = pytest.importorskip("distributed")
    from tripletml.distributed.dask_search import PRELOAD
    # the preload: a worker the nanny starts in place of the killed one imports
    # tripletml before it registers, not in its event loop under a broadcast
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, preload=[PRELOAD])
    yield cluster
    cluster.close(timeout=60)


@pytest.fixture(scope="module")
def coll():
    X, y = load_digits(return_X_y=True)
    return ShardedCollection.from_arrays(X[:400], y[:400], n_partitions=4)


def _make(name):
    if name == "SDCA":
        return tripletml.SDCA(n_triplets=1500, max_iter=3, tol=None, random_state=0)
    return tripletml.OASIS(n_triplets=1500, max_iter=3, tol=None, random_state=0)


def _two_workers(client):
    """Wait for the nanny to bring a killed worker back; go on with one
    (the kill then takes the last worker: the fit must still end)."""
    try:
        client.wait_for_workers(2, timeout=60)
    except Exception:                             # noqa: BLE001 - WorkerStartTimeoutError
        client.wait_for_workers(1, timeout=120)


def _guarded(fn, limit=HANG_GUARD):
    """``fn()`` in a thread; a hang fails the test instead of blocking it."""
    box = {}

    def work():
        try:
            box["value"] = fn()
        except BaseException as e:             # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"the fit still runs after {limit} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box["value"]


@kills
@pytest.mark.parametrize("name, where", [
    ("SDCA", "before"), ("SDCA", "broadcast"), ("SDCA", "reduction"),
    ("SDCA", "after the last round"), ("OASIS", "reduction"),
])
def test_worker_killed_mid_fit_restarts_or_fails_clearly(cluster2, coll, tmp_path, monkeypatch,
                                                         name, where):
    from tripletml.distributed.dask_search import use_cluster
    ref = _make(name).fit(coll)                         # in-process, undisturbed
    # a call towards the dead worker gives up after 20 s (the default is 60)
    monkeypatch.setenv("TRIPLETML_CLUSTER_TIMEOUT", "20")
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")   # no cost model
    killed, client_box = [], []

    def kill():
        if killed:
            return
        pids = sorted(client_box[0].run(os.getpid).values())
        killed.append(pids[0])
        os.kill(pids[0], signal.SIGKILL)

    counter = []
    if where == "broadcast":
        real = partitioned.DaskBackend.broadcast

        def broadcast(self, value):
            counter.append(1)
            if len(counter) == 2:                        # round 2's model
                kill()
            return real(self, value)
        monkeypatch.setattr(partitioned.DaskBackend, "broadcast", broadcast)
    elif where == "reduction":
        real = partitioned.DaskBackend.reduce

        def reduce(self, func, handles):
            out = real(self, func, handles)
            counter.append(1)
            if len(counter) == 4:                        # in the rounds, not the survey
                kill()
            return out
        monkeypatch.setattr(partitioned.DaskBackend, "reduce", reduce)
    elif where == "after the last round":
        real = partitioned.PartitionedFit.save_round

        def save_round(self, r, arrays, *, last=False, meta=None):
            real(self, r, arrays, last=last, meta=meta)
            if last:
                kill()
        monkeypatch.setattr(partitioned.PartitionedFit, "save_round", save_round)

    def run():                         # the cluster context belongs to this thread
        with use_cluster(cluster2) as client:
            _two_workers(client)
            client_box.append(client)
            if where == "before":
                kill()
            est = fit_partitioned(_make(name), coll, checkpoint_dir=tmp_path)
            assert est.partitioned_["backend"] == "dask"
            return est

    import time
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = _guarded(run)
        except WorkerLostError as e:                     # a clear error is acceptable
            assert "lost a worker" in str(e)
            got = None
    print("worker kill:", name, where, f"{time.monotonic() - t0:.1f} s, model:",
          got is not None, [str(w.message)[:200] for w in caught
                            if w.category is partitioned.RestartWarning])
    assert killed
    messages = [str(w.message) for w in caught if w.category is partitioned.RestartWarning]
    assert all("a worker was lost" in m for m in messages)
    if got is not None:
        np.testing.assert_allclose(got.W_, ref.W_, rtol=1e-9, atol=1e-12)


@kills
def test_gather_of_a_future_whose_data_was_lost_raises_instead_of_waiting(cluster2, coll,
                                                                         monkeypatch):
    """Scattered data without lineage on a killed worker: the gather raises a
    lost-data error (which restarts a fit) rather than waiting for it."""
    from tripletml.distributed.dask_search import use_cluster
    monkeypatch.setenv("TRIPLETML_CLUSTER_TIMEOUT", "10")

    def run():
        with use_cluster(cluster2) as client:
            _two_workers(client)
            be = partitioned.DaskBackend(coll, "Probe", client)
            workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
            fut = client.scatter([np.arange(5.0)], workers=[workers[0]], hash=False)[0]
            pid = client.run(os.getpid, workers=[workers[0]])[workers[0]]
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(be.lost_data_errors()) as info:
                be.gather(be.apply(np.sum, [fut]))
            return str(info.value)

    text = _guarded(run)
    assert text


# ---------------------------------------------------------------------------
# the bounded calls, without a kill (run by default; an in-process cluster)
# ---------------------------------------------------------------------------
_RELEASE = threading.Event()


def _hold():
    """A task that waits until the test releases it (in-process workers)."""
    return _RELEASE.wait(600)


@pytest.fixture(scope="module")
def threads_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def test_a_broadcast_that_never_finishes_is_cancelled_after_the_timeout(threads_client,
                                                                      coll, monkeypatch):
    import asyncio
    monkeypatch.setenv("TRIPLETML_CLUSTER_TIMEOUT", "1")
    be = partitioned.DaskBackend(coll, "Probe", threads_client)

    async def never(*args, **kwargs):              # a scheduler that never answers
        await asyncio.sleep(3600)

    monkeypatch.setattr(threads_client, "_scatter", never)
    for call in (lambda: be.broadcast(np.eye(3)), lambda: be.scatter_each([1, 2])):
        with pytest.raises(TimeoutError, match=r"Probe: .* did not finish within 1 s"):
            _guarded(call, limit=60)
    assert TimeoutError in be.lost_data_errors()    # so a fit restarts on it


def test_a_gather_after_a_lost_worker_ends_in_a_timeout_naming_it(threads_client, coll,
                                                                  monkeypatch):
    """A result that never comes while a worker the fit knew has left (and
    nothing runs on the live ones): a TimeoutError naming the lost worker,
    after the timeout, instead of a wait without end."""
    monkeypatch.setenv("TRIPLETML_CLUSTER_TIMEOUT", "1")
    be = partitioned.DaskBackend(coll, "Probe", threads_client)
    alive = sorted(be._known)
    gone = "tcp://10.0.0.1:4242"
    be._known = set(alive) | {gone}                  # a worker the fit knew, now gone
    monkeypatch.setattr(partitioned.DaskBackend, "_running_on", lambda self, now: False)
    _RELEASE.clear()
    fut = threads_client.submit(_hold, pure=False)
    try:
        with pytest.raises(TimeoutError, match="after worker.*10.0.0.1:4242 were lost"):
            _guarded(lambda: be.gather([fut]), limit=60)
    finally:
        _RELEASE.set()
    assert threads_client.gather(fut) is True


def test_a_gather_without_a_lost_worker_waits_for_a_long_task(threads_client, coll,
                                                            monkeypatch):
    """No worker lost: a task longer than the timeout is waited for."""
    import time
    monkeypatch.setenv("TRIPLETML_CLUSTER_TIMEOUT", "0.5")
    be = partitioned.DaskBackend(coll, "Probe", threads_client)
    fut = threads_client.submit(time.sleep, 1.5, pure=False)
    assert _guarded(lambda: be.gather([fut]), limit=60) == [None]


def test_a_lost_future_raises_a_lost_data_error(threads_client, coll, monkeypatch):
    be = partitioned.DaskBackend(coll, "Probe", threads_client)
    fut = threads_client.submit(np.sum, np.arange(3), pure=False)
    threads_client.gather(fut)
    monkeypatch.setattr(type(fut), "status", property(lambda self: "lost"))
    monkeypatch.setattr(partitioned, "cluster_timeout", lambda: 1.0)
    from distributed.client import _wait as real_wait

    async def slow_wait(fs, timeout=None, return_when=None):   # not done in time
        raise TimeoutError
    monkeypatch.setattr("distributed.client._wait", slow_wait)
    try:
        with pytest.raises(be.lost_data_errors(), match="lost data the fit holds"):
            _guarded(lambda: be.gather([fut]), limit=60)
    finally:
        monkeypatch.setattr("distributed.client._wait", real_wait)


def test_in_memory_partitions_are_sent_once_and_the_fit_equals_in_process(threads_client,
                                                                         coll, monkeypatch):
    from tripletml.distributed.dask_search import use_cluster
    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")
    ref = _make("OASIS").fit(coll)
    with use_cluster(threads_client, blas_threads=None):
        got = _make("OASIS").fit(coll)
    assert got.partitioned_["backend"] == "dask"
    np.testing.assert_allclose(got.W_, ref.W_, rtol=1e-10, atol=1e-12)
    be = partitioned.DaskBackend(coll, "Probe", threads_client)
    args = be._args(0)
    assert type(args[0]).__name__ == "Future" and type(args[1]).__name__ == "Future"
    assert be._args(1)[0] is be._shipped[1][0]       # sent once, reused every round
