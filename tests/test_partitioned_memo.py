"""The per-process memo of derived partition data (issue 41 section 1:
a strategy with rounds derived each partition's rows, triplets and order
again in every round).  The memo must not change any model, must keep to
its budget, must be emptied when the fit ends, and must actually save the
work it is there to save."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tripletml import KISSME, LORETA, OASIS, SDCA, LowRankDML
from tripletml.distributed import memo
from tripletml.distributed.partitioned import Supervision
from tripletml.distributed.sharded import ShardedCollection


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    return X[order][:900], y[order][:900]


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.clear()
    yield
    memo.clear()


def _arrays(est):
    out = {}
    for k, v in vars(est).items():
        if k.endswith("_") and not k.startswith("_") and isinstance(v, np.ndarray):
            out[k] = v
    return out


LEARNERS = [
    lambda: OASIS(n_triplets=3000, max_iter=2, random_state=0),
    lambda: LORETA(n_triplets=3000, max_iter=2, rank=5, random_state=0),
    lambda: SDCA(n_triplets=3000, max_iter=2, random_state=0),
    lambda: LowRankDML(n_triplets=2000, max_iter=3, random_state=0),
    lambda: KISSME(),
]


@pytest.mark.parametrize("make", LEARNERS, ids=["OASIS", "LORETA", "SDCA", "LowRankDML",
                                                "KISSME"])
def test_memo_changes_no_model_and_tasks_never_write_to_it(digits, make, monkeypatch):
    X, y = digits
    coll = ShardedCollection.from_arrays(X, y, n_partitions=3)
    monkeypatch.setattr(memo, "MEMO_FRACTION", 0.0)        # nothing admitted
    off = make().fit(coll)
    assert memo.stats()["entries"] == 0
    monkeypatch.setattr(memo, "MEMO_FRACTION", 0.25)
    # a task's write into a memoised array raises (LORETA's kernels would
    # compile again for read-only arrays: its tasks are checked for equality only)
    monkeypatch.setattr(memo, "FREEZE", not isinstance(off, LORETA))
    on = make().fit(coll)
    a, b = _arrays(off), _arrays(on)
    assert a and set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert memo.stats()["bytes"] == 0 and memo.stats()["entries"] == 0   # forgotten


def test_mixing_samples_each_partition_once(digits, monkeypatch):
    """OASIS mixes about 20 times per pass; with the memo each partition's
    triplets are sampled once per fit (without it: once per round)."""
    X, y = digits
    calls = []
    real = Supervision._sample

    def counting(self, p, n, X_):
        calls.append(p.index)
        return real(self, p, n, X_)

    monkeypatch.setattr(Supervision, "_sample", counting)
    est = OASIS(n_triplets=3000, max_iter=2, random_state=0).fit(
        ShardedCollection.from_arrays(X, y, n_partitions=3))
    assert est.partitioned_["mixing_rounds"] >= 6
    assert sorted(calls) == [0, 1, 2]
    calls.clear()
    monkeypatch.setattr(memo, "MEMO_FRACTION", 0.0)
    OASIS(n_triplets=3000, max_iter=2, random_state=0).fit(
        ShardedCollection.from_arrays(X, y, n_partitions=3))
    assert len(calls) > 3 * est.partitioned_["mixing_rounds"] // 2


def test_memo_is_forgotten_when_the_fit_fails(digits, monkeypatch):
    X, y = digits
    import tripletml.distributed.mixing as mixing

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(mixing._MixingRounds, "_mix", boom)
    with pytest.raises(RuntimeError, match="boom"):
        OASIS(n_triplets=3000, max_iter=1, random_state=0).fit(
            ShardedCollection.from_arrays(X, y, n_partitions=2))
    assert memo.stats()["entries"] == 0


def test_budget_admission_and_eviction(monkeypatch):
    monkeypatch.setattr(memo, "budget", lambda: 1000)
    a = memo.get("fit-a", (0, "x"), lambda: np.zeros(50))          # 400 bytes
    assert memo.get("fit-a", (0, "x"), lambda: np.ones(50)) is a    # a hit
    memo.get("fit-a", (1, "x"), lambda: np.zeros(50))
    big = memo.get("fit-a", (2, "x"), lambda: np.zeros(50))         # no room: not kept
    assert memo.get("fit-a", (2, "x"), lambda: np.ones(50)) is not big
    assert memo.stats()["bytes"] == 800 and memo.stats()["refused"] >= 2
    # another fit evicts fit-a's entries (least recently used first), never its own
    memo.get("fit-b", (0, "x"), lambda: np.zeros(50))
    assert memo.stats()["bytes"] == 800
    memo.get("fit-b", (1, "x"), lambda: np.zeros(50))
    assert memo.stats()["entries"] == 2 and memo.stats()["bytes"] == 800
    too_big = memo.get("fit-b", (2, "x"), lambda: np.zeros(200))    # over the budget
    assert too_big.shape == (200,) and memo.stats()["entries"] == 2
    assert memo.forget("fit-b") == 800 and memo.stats()["bytes"] == 0
    # no token: never memoised
    x = memo.get(None, (0, "x"), lambda: np.zeros(3))
    assert memo.get(None, (0, "x"), lambda: np.zeros(3)) is not x


def test_frozen_values_are_read_only_and_the_callers_data_is_not(monkeypatch):
    monkeypatch.setattr(memo, "FREEZE", True)
    v = memo.get("t", (0, "d"), lambda: np.zeros(4))
    with pytest.raises(ValueError):
        v[0] = 1.0
    mine = np.zeros(4)
    memo.get("t", (0, "p"), lambda: (mine, None, None), derived=False)
    mine[0] = 1.0                      # the caller's partition stays writeable


def test_budget_follows_the_available_memory(monkeypatch):
    import tripletml.core.validation as validation
    monkeypatch.setattr(validation, "available_memory", lambda: 4000)
    assert memo.budget() == int(memo.MEMO_FRACTION * 4000)
    monkeypatch.setattr(validation, "available_memory", lambda: None)
    assert memo.budget() == 0


def test_a_worker_keeps_nothing_past_dasks_first_threshold(monkeypatch):
    """In a Dask worker with a memory limit a value is kept only while the
    process memory is below the first of Dask's thresholds (target, spill,
    pause): the memo must never be what makes the worker spill, pause or
    restart (issue 41 section 4)."""
    import dask
    import psutil

    limit = 1000 * 2**20
    monkeypatch.setattr(memo, "_worker_limit", lambda: limit)
    monkeypatch.setattr(memo, "budget", lambda: 10**9)
    rss = {"now": 0.5 * limit}

    class _Info:
        def __init__(self):
            self.rss = rss["now"]

    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: _Info())
    a = memo.get("fit", (0, "x"), lambda: np.zeros(10))
    assert memo.get("fit", (0, "x"), lambda: np.ones(10)) is a          # 50 % < 60 %: kept
    rss["now"] = 0.65 * limit
    b = memo.get("fit", (1, "x"), lambda: np.zeros(10))
    assert memo.get("fit", (1, "x"), lambda: np.ones(10)) is not b      # past the target
    with dask.config.set({"distributed.worker.memory.target": False}):
        c = memo.get("fit", (2, "x"), lambda: np.zeros(10))             # 65 % < spill 70 %
        assert memo.get("fit", (2, "x"), lambda: np.ones(10)) is c
    # a worker's own fractions (its arguments) win over Dask's configuration
    class _Manager:
        memory_limit, memory_target_fraction = limit, 0.5
        memory_spill_fraction = memory_pause_fraction = False

    monkeypatch.setattr(memo, "_worker_memory", lambda: _Manager())
    rss["now"] = 0.55 * limit
    e = memo.get("fit", (4, "x"), lambda: np.zeros(10))
    assert memo.get("fit", (4, "x"), lambda: np.ones(10)) is not e      # past its 50 %
    # outside a worker the budget alone decides
    monkeypatch.setattr(memo, "_worker_memory", lambda: None)
    monkeypatch.setattr(memo, "_worker_limit", lambda: None)
    d = memo.get("fit", (3, "x"), lambda: np.zeros(10))
    assert memo.get("fit", (3, "x"), lambda: np.ones(10)) is d


def test_a_tasks_csr_is_a_view_of_the_rows_it_holds(digits, monkeypatch):
    """With the memo full (or off) a task that holds its partition's rows
    gets their CSR without a second copy of the rows (a 250,000 x 64
    partition's SDCA task held two: 122 MB more)."""
    from tripletml.distributed.partitioned import Partition

    monkeypatch.setattr(memo, "MEMO_FRACTION", 0.0)
    X, y = digits
    made = []
    sup = Supervision.__new__(Supervision)
    sup.token, sup.preprocessed = "fit", True

    class _Scale:
        def resolve(self, X):
            return "scale"

        def transform(self, X, copy=True):
            made.append(1)
            return X / 2.0

    sup.preprocessor = _Scale()
    p = Partition(0, X, y, None)
    rows = sup.rows(p)
    Xc = sup.csr_rows(p, rows)
    assert len(made) == 1 and np.shares_memory(Xc.data, rows)
    sup.csr_rows(p)                                   # without the rows: derived again
    assert len(made) == 2
    sup.owner = "SDCA"
    with pytest.raises(ValueError, match="SDCA.*partition 0.*rows"):
        sup.csr_rows(p, rows[:10])                    # not the partition's rows
