"""Training over the partitions of a :class:`~tripletml.distributed.sharded.ShardedCollection`:
in-process shard by shard (out of core), or on a Dask cluster.

``learner.fit(collection)`` lands here (:func:`fit_partitioned`).  The driver

1. validates every partition on the partition itself (a task) and fits the
   learner's preprocessing from per-partition statistics reduced in a tree
   (:mod:`tripletml.distributed.statistics`): the same statistics as an
   in-memory fit on the concatenated rows, to rounding;
2. decides the supervision of each partition: its own triplets (index
   arrays into the partition's rows) or ``n_p`` triplets sampled from its
   labels by the learner's ``sampling`` policy, with ``n_p`` the partition's
   share of the learner's ``n_triplets`` (largest remainders, proportional to
   its rows among the partitions that can form a triplet) and the seed
   ``(seed, p)`` -- ``seed`` one integer drawn from ``random_state`` -- so the
   triplets of a partition are the same in every round, on one worker or on
   many;
3. hands the learner and a :class:`PartitionedFit` to the learner's
   *strategy*, the :class:`~tripletml.distributed.strategy.PartitionedStrategy`
   its class holds as ``_partitioned_strategy`` (named in
   ``partitioned_["strategy"]``):

   ``"statistics"``  exact from per-partition sufficient statistics
                     (KISSME, RCA, the baselines) --
                     :data:`.statistics.STRATEGY`;
   ``"cocoa"``       CoCoA+ (Ma, Smith, Jaggi et al., ICML 2015) -- SDCA's
                     own, in :mod:`tripletml.algorithms.sdca.distributed`;
   ``"mixing"``      iterative parameter mixing (McDonald, Hall & Mann,
                     NAACL 2010) -- OASIS, LORETA, the factored learners --
                     :data:`.mixing.STRATEGY`;
   ``"gradients"``   per-partition gradient sums, the solver step on the
                     driver -- LowRankDML, SML (:mod:`.gradient_sums`, with
                     the problems in their algorithms' ``distributed.py``);
   ``"sample"``      gather a bounded sample (the triplets' rows) and fit on
                     the driver -- ITML, COMET, SparseCOMET and any
                     learner without a strategy of its own --
                     :data:`.sample.STRATEGY`.

Tasks are module-level functions of their arguments only: no estimator is
mutated inside a task, so a task a scheduler reruns (a lost worker) returns
the same value, and the model equals an undisturbed run's.  Reductions use
one fixed tree (:data:`FAN_IN`) in-process and on Dask, so the two give the
same floating-point results.
"""
from __future__ import annotations

import copy
import hashlib
from concurrent.futures import CancelledError
import numbers
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from tripletml.core.preprocessing import check_preprocessing
from tripletml.core.validation import as_generator, check_dense_memory, check_triplets, check_X
from tripletml.engine.threads import fit_work, limit_threads
from tripletml.distributed import cost, memo, sample
from tripletml.distributed.checkpoint import FINGERPRINT_ROWS, RoundCheckpoint
from tripletml.distributed.dask_search import active_client, cluster_timeout
from tripletml.distributed.reduction import FAN_IN, tree_sum  # noqa: F401  (re-exported)
from tripletml.distributed.statistics import fit_preprocessor
from tripletml.distributed.strategy import PartitionedStrategy, partition_shares
from tripletml.linalg.sparse_rows import as_csr
from tripletml.triplets import AllLabels

__all__ = ["Partition", "PartitionedFit", "LocalBackend", "DaskBackend", "fit_partitioned",
           "backend_for", "partition_shares", "PartitionedStrategy", "FAN_IN", "ClassesWarning",
           "RestartWarning", "MAX_RESTARTS", "tree_sum", "WorkerLostError"]


#: restarts of a fit after lost worker data before giving up
MAX_RESTARTS = 3

class WorkerLostError(ConnectionError):
    """A partitioned fit lost workers more often than :data:`MAX_RESTARTS`
    allows (the message names the worker and the error)."""


def _lost(exc: BaseException) -> str:
    """What a lost-worker error says: the worker for KilledWorker, else the
    error's type and text (which names the connection)."""
    last = getattr(exc, "last_worker", None)          # KilledWorker
    addr = getattr(last, "address", None)
    where = f"worker {addr}, " if isinstance(addr, str) else ""
    return f"{where}{type(exc).__name__}: {str(exc)[:200]}"


class RestartWarning(UserWarning):
    """A worker was lost with data the partitioned fit could not recompute;
    the fit restarted from its last checkpoint (or its first round)."""


class ClassesWarning(UserWarning):
    """A partition lacks classes (its triplets cannot reach them) or cannot
    form a triplet at all; shuffle the rows across shards
    (``write_npz_shards(..., shuffle=True)``)."""


# ---------------------------------------------------------------------------
# what a task sees
# ---------------------------------------------------------------------------
@dataclass
class Partition:
    """One partition inside a task: its number, validated raw rows ``X``
    (float64 C-contiguous array or canonical CSR), labels ``y`` (or None) and
    explicit local ``triplets`` (int64 (m, 3) into the rows of X, or None)."""

    index: int
    X: Any
    y: np.ndarray | None = None
    triplets: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])


def _is_dask(obj) -> bool:
    try:
        import dask
    except ImportError:        # pragma: no cover - no dask: nothing is a collection
        return False
    return dask.is_dask_collection(obj)


def _load(part, label, trip, index: int, owner: str, n_features: int | None) -> Partition:
    """Materialise partition ``index`` (a loader, an array, a tuple) and
    validate it; every error names the partition."""
    if _is_dask(part):                     # local backend: a Delayed part
        import dask
        part, label, trip = dask.compute(part, label, trip, scheduler="sync")
    if callable(part) and not hasattr(part, "shape"):
        part = part()
    T = None
    if isinstance(part, tuple):
        if len(part) == 3:
            X, y, T = part
        elif len(part) == 2:
            X, y = part
        else:
            raise ValueError(f"{owner}: partition {index} is a tuple of {len(part)} items; "
                             "expected (X, y) or (X, y, triplets)")
    else:
        X, y = part, None
    if label is not None:
        y = label
    if trip is not None:
        T = trip
    where = f"{owner} (partition {index})"
    X = check_X(X, where, n_features=n_features)
    if y is not None:
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"{where}: {y.shape} labels for {X.shape[0]} rows; labels must be "
                             "one per row")
    if T is not None:
        T = check_triplets(T, X.shape[0], where, allow_degenerate=False)
    return Partition(int(index), X, y, T)


def _call(func, part, label, trip, index, owner, n_features, state, shared, with_state,
          token=None):
    """The body of every map task; the validated partition is memoised
    under the fit's ``token`` (:mod:`~tripletml.distributed.memo`: a
    strategy with rounds loads and checks each partition once per process,
    not once per round)."""
    if token is None:
        p = _load(part, label, trip, index, owner, n_features)
    else:
        p = Partition(index, *memo.get(token, (index, "partition"), lambda: _fields(
            _load(part, label, trip, index, owner, n_features)), derived=False))
    if with_state:
        return func(p, state, *shared)
    return func(p, *shared)


def _fields(p: Partition) -> tuple:
    return p.X, p.y, p.triplets


def _tree_groups(n: int) -> list[list[tuple[int, int]]]:
    """The fixed reduction tree over n items: per level, ``(start, stop)``
    groups of at most :data:`FAN_IN` consecutive items."""
    levels = []
    while n > 1:
        groups = [(i, min(i + FAN_IN, n)) for i in range(0, n, FAN_IN)]
        levels.append(groups)
        n = len(groups)
    return levels


# ---------------------------------------------------------------------------
# backends
# ---------------------------------------------------------------------------
class LocalBackend:
    """Run the tasks in this process, one partition in memory at a time.

    Handles are the values themselves."""

    name = "local"

    def __init__(self, collection, owner: str, n_features: int | None = None):
        self.collection = collection
        self.owner = owner
        self.n_features = n_features
        #: the running fit's memo key (:mod:`~tripletml.distributed.memo`)
        self.token: str | None = None

    @property
    def n_partitions(self) -> int:
        return self.collection.n_partitions

    def _args(self, i: int) -> tuple:
        c = self.collection
        return (c.parts[i], None if c.labels is None else c.labels[i],
                None if getattr(c, "triplets", None) is None else c.triplets[i])

    def broadcast(self, value):
        return value

    def scatter_each(self, values: Sequence) -> list:
        """One handle per value (per-partition state restored from a
        checkpoint)."""
        return list(values)

    def map(self, func: Callable, *shared, states: Sequence | None = None) -> list:
        """``func(partition, *shared)`` (or ``func(partition, state_p,
        *shared)`` with ``states``) on every partition; a list of handles."""
        out = []
        for i in range(self.n_partitions):
            out.append(_call(func, *self._args(i), i, self.owner, self.n_features,
                             None if states is None else states[i], shared,
                             states is not None, self.token))
        return out

    def apply(self, func: Callable, handles: Sequence, *shared) -> list:
        """``func(value_p, *shared)`` on each handle (no partition loaded)."""
        return [func(h, *shared) for h in handles]

    def reduce(self, func: Callable, handles: Sequence):
        """``func(*group)`` over the fixed tree; one handle."""
        items = list(handles)
        for level in _tree_groups(len(items)):
            items = [func(*items[a:b]) for a, b in level]
        return items[0]

    def gather(self, handles):
        return handles

    def release(self, handles) -> None:
        pass

    def settle(self) -> int | None:
        """Before a restart: nothing to wait for in process (None: no
        workers to count)."""
        return None

    def forget(self, token: str | None) -> None:
        """Drop the fit's memoised partition data (:mod:`~tripletml.distributed.memo`)."""
        memo.forget(token)

    def ping(self) -> int:
        """One empty task per partition, reduced and gathered."""
        return self.n_partitions

    @staticmethod
    def lost_data_errors() -> tuple:
        """Exceptions meaning a worker was lost with data (none in-process)."""
        return ()


class DaskBackend(LocalBackend):
    """Run the tasks on a Dask cluster through ``client``; handles are
    futures (results stay on the workers until gathered)."""

    name = "dask"

    def __init__(self, collection, owner: str, client, n_features: int | None = None):
        super().__init__(collection, owner, n_features)
        self.client = client
        #: workers seen during the fit (a gather watches for one leaving)
        self._known = self._workers()
        self._n_workers = len(self._known)
        #: the partitions' arguments with in-memory arrays sent once (futures)
        self._shipped: list | None = None

    def _args(self, i: int) -> tuple:
        """Partition ``i``'s arguments; arrays held in the driver's memory
        are scattered to the workers once per fit (not embedded in, hashed
        for and serialised with every round's task graph)."""
        if self._shipped is None:
            args = [LocalBackend._args(self, j) for j in range(self.n_partitions)]
            where = [(j, a) for j, row in enumerate(args) for a, v in enumerate(row)
                     if v is not None and _in_memory(v)]
            if where:
                limit = cluster_timeout()
                futures = self._sync("sending the partitions to the workers",
                                     self.client._scatter, [args[j][a] for j, a in where],
                                     hash=False, timeout=limit)
                rows = [list(row) for row in args]
                for (j, a), f in zip(where, futures):
                    rows[j][a] = f
                args = [tuple(row) for row in rows]
            self._shipped = args
        return self._shipped[i]

    def settle(self) -> int:
        """Before a restart: give the cluster up to :func:`cluster_timeout`
        seconds to get back the workers the fit started with (a nanny
        restarts a killed one) and to drop the dead ones it still lists,
        so the next attempt does not meet the same dead worker; the number
        of workers listed then (0: none came back, the restart is futile)."""
        limit = cluster_timeout()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            workers = self._workers()
            if len(workers) >= self._n_workers:
                break
            time.sleep(0.25)
        self._known = self._workers()
        self._shipped = None        # scattered partitions may be lost: send them again
        return len(self._known)

    def _sync(self, what: str, func, *args, **kwargs):
        """``client.sync(func, ...)`` bounded by :func:`cluster_timeout`: the
        coroutine is cancelled after that and a TimeoutError names ``what``
        (Dask's own ``timeout=`` of a scatter bounds only the wait for
        workers, not the transfer to a dead one the scheduler still lists)."""
        limit = cluster_timeout()
        try:
            return self.client.sync(func, *args, callback_timeout=limit, **kwargs)
        except TimeoutError as e:
            raise TimeoutError(f"{self.owner}: {what} did not finish within {limit:g} s "
                               f"(a lost or unresponsive worker?{self._lost_note()}; "
                               "TRIPLETML_CLUSTER_TIMEOUT sets the limit)") from e

    def forget(self, token: str | None) -> None:
        """Drop the fit's memoised partition data on every worker (bounded;
        a worker that does not answer keeps them until another fit's need
        evicts them)."""
        memo.forget(token)
        try:
            self._sync("dropping the fit's memoised partition data", self.client._run,
                       memo.forget, token, on_error="return")
        except Exception:       # noqa: BLE001 - cleanup after the fit, never its result
            pass

    def _workers(self) -> set:
        """The workers the scheduler lists now (bounded; empty when it does
        not answer)."""
        try:
            info = self.client.sync(self.client.scheduler.identity, n_workers=-1,
                                    callback_timeout=cluster_timeout())
            return set(info.get("workers", {}))
        except Exception:         # noqa: BLE001 - a closed client: no worker known
            return set()

    def ping(self) -> int:
        handles = [self.client.submit(_one, i, pure=False) for i in range(self.n_partitions)]
        return self.gather(self.reduce(tree_sum, handles))

    def _running_on(self, alive: set) -> bool:
        """Whether a live worker is running a task (the lost tasks rerun
        there, or the ones they wait for)."""
        try:
            processing = self._sync("asking the scheduler what runs",
                                    self.client.scheduler.processing)
        except Exception:         # noqa: BLE001 - no answer: nothing known to run
            return False
        return any(w in alive and len(ks) for w, ks in processing.items())

    def _lost_note(self) -> str:
        gone = sorted(self._known - self._workers()) if self._known else []
        return f"; lost: {', '.join(gone[:4])}" if gone else ""

    def broadcast(self, value):
        # unique keys: a value equal to an earlier round's (hash=True) would share
        # its key, and releasing the old round could drop the new data
        # in a list: scatter sends a bare dict / list item by item
        # bounded: a dead worker the scheduler still lists would block it for good
        # not broadcast=True: the scheduler's replicate step then waits on every
        # listed worker (a dead or restarting one held it past the timeout in
        # the worker-kill tests); the tasks fetch the value from its holder
        limit = cluster_timeout()
        return self._sync("broadcasting a value to the workers", self.client._scatter,
                          [value], broadcast=False, hash=False, timeout=limit)[0]

    def scatter_each(self, values: Sequence) -> list:
        limit = cluster_timeout()
        return list(self._sync("scattering per-partition state", self.client._scatter,
                               list(values), hash=False, timeout=limit))

    def map(self, func: Callable, *shared, states: Sequence | None = None) -> list:
        """One task per partition.  Partitions held as futures or arrays go
        to ``client.map`` as one graph with unique keys (no tokenising of the
        arguments, no graph optimisation: a mixing fit maps about 20 times
        per pass); a partition given as a Dask collection (a ``Delayed``
        that makes it) is computed inside its task's graph."""
        args = [self._args(i) for i in range(self.n_partitions)]
        rest = [(i, self.owner, self.n_features, None if states is None else states[i],
                 tuple(shared), states is not None, self.token)
                for i in range(self.n_partitions)]
        if any(_is_dask(a) for row in args for a in row):
            import dask
            tasks = [dask.delayed(_call, pure=True)(func, *a, *r) for a, r in zip(args, rest)]
            return list(self.client.compute(tasks))
        columns = list(zip(*[(func, *a, *r) for a, r in zip(args, rest)]))
        return list(self.client.map(_call, *columns, pure=False,
                                    key=[f"{getattr(func, '__name__', 'task')}-{uuid.uuid4().hex}"
                                         for _ in args]))

    def apply(self, func: Callable, handles: Sequence, *shared) -> list:
        return [self.client.submit(func, h, *shared, pure=True) for h in handles]

    def reduce(self, func: Callable, handles: Sequence):
        items = list(handles)
        for level in _tree_groups(len(items)):
            items = [self.client.submit(func, *items[a:b], pure=True) for a, b in level]
        return items[0]

    def gather(self, handles):
        """The values of ``handles`` (a future or a list of futures), waited
        for without end only while no worker is lost: once a worker the fit
        knew has left, the results must arrive (or make progress) within
        :func:`cluster_timeout` seconds -- the scheduler reruns the lost
        tasks from their lineage in that time -- else a TimeoutError names
        the lost worker; a future the scheduler lost or cancelled raises at
        once.  The transfer itself is bounded as a broadcast is."""
        from distributed.client import _wait
        single = not isinstance(handles, (list, tuple))
        futures = [handles] if single else list(handles)
        futures = [f for f in futures if hasattr(f, "status")]
        limit = cluster_timeout()
        poll = min(1.0, limit)
        deadline, done_before, lost = None, -1, []
        while futures:
            try:
                self.client.sync(_wait, futures, timeout=poll, return_when="ALL_COMPLETED")
                break
            except TimeoutError:
                pass
            status = [f.status for f in futures]
            if "lost" in status:            # scattered data without lineage
                raise CancelledError(f"{self.owner}: the cluster lost data the fit holds "
                                     f"on its workers{self._lost_note()}")
            if any(s in ("error", "cancelled") for s in status):
                break                       # gather raises the future's error
            now = self._workers()
            gone = sorted(self._known - now)
            self._known |= now
            done = sum(s == "finished" for s in status)
            if gone and gone != lost:
                lost, deadline = gone, time.monotonic() + limit
            elif deadline is not None and done > done_before:
                deadline = time.monotonic() + limit          # progress after the loss
            done_before = done
            if not now:
                raise TimeoutError(f"{self.owner}: no worker is left on the cluster "
                                   f"(lost: {', '.join(lost[:4]) or 'all'})")
            if deadline is not None and time.monotonic() > deadline \
                    and self._running_on(now):
                deadline = time.monotonic() + limit   # a live worker runs them (a new
                #                                        worker may import for a while)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.owner}: results did not arrive within {limit:g} s after worker(s) "
                    f"{', '.join(lost[:4])} were lost (TRIPLETML_CLUSTER_TIMEOUT sets the "
                    "limit)")
        out = self._sync("gathering results from the workers", self.client._gather, handles)
        self._known = self._workers() or self._known     # losses so far are dealt with
        return out

    @staticmethod
    def lost_data_errors() -> tuple:
        """A lost worker shows as canceled or killed tasks, a connection
        closed under a scatter or gather, a future the scheduler lost, or a
        call that timed out."""
        from distributed.comm.core import CommClosedError
        from distributed.scheduler import KilledWorker
        return (CancelledError, KilledWorker, CommClosedError, TimeoutError)

    def release(self, handles) -> None:
        if isinstance(handles, (list, tuple)):
            for h in handles:
                self.release(h)
        elif hasattr(handles, "release"):
            handles.release()


def backend_for(collection, owner: str, n_features: int | None = None):
    """The Dask backend inside :func:`tripletml.use_cluster` or with a
    default ``distributed`` client, else the local one."""
    client = active_client()
    if client is None:
        try:
            from distributed import default_client
            client = default_client()
        except (ImportError, ValueError):
            client = None
    if client is None:
        return LocalBackend(collection, owner, n_features)
    return DaskBackend(collection, owner, client, n_features)


# ---------------------------------------------------------------------------
# the plan handed to a strategy
# ---------------------------------------------------------------------------
@dataclass
class Supervision:
    """What a task needs to make its partition's training data (picklable):
    the fitted preprocessor, whether the learner trains on preprocessed rows,
    the sampling policy (None: explicit triplets), the triplets per partition
    and the seed."""

    owner: str
    preprocessor: Any
    preprocessed: bool
    sampler: Any
    n_triplets: list[int] | None
    seed: int
    codes: dict | None = None
    #: the fit's key in the per-process memo of derived partition data
    #: (:mod:`tripletml.distributed.memo`); None: nothing is memoised
    token: str | None = None

    def rows(self, p: Partition):
        """The rows the learner's solver sees (preprocessed when it trains on
        preprocessed rows; memoised when derived)."""
        if self.preprocessor is None or not self.preprocessed:
            return p.X
        return memo.get(self.token, (p.index, "rows"), lambda: self._transform(p.X))

    def _transform(self, X):
        if self.preprocessor.resolve(X) is not None and sp.issparse(X):
            X = np.ascontiguousarray(X.toarray(), dtype=np.float64)
            return self.preprocessor.transform(X, copy=False)
        return self.preprocessor.transform(X, copy=True)

    def csr_rows(self, p: Partition, X=None) -> sp.csr_matrix:
        """:meth:`rows` as the solvers' float64 CSR (memoised).  ``X``: those
        rows when the caller holds them already (a dense float64 X becomes
        the CSR's data without a copy; without it a memo miss on the rows
        would derive a second copy beside the caller's)."""
        if X is not None and X.shape[0] != p.n_rows:    # memoised under p's key
            raise ValueError(f"{self.owner} (partition {p.index}): csr_rows got {X.shape[0]} "
                             f"rows for a partition of {p.n_rows}; pass the rows of rows(p)")
        return memo.get(self.token, (p.index, "csr"),
                        lambda: as_csr(self.rows(p) if X is None else X))

    def codes_of(self, p: Partition) -> np.ndarray:
        """Global class codes 0..C-1 of the partition's labels."""
        keys, values = self.codes["keys"], self.codes["values"]
        pos = np.searchsorted(keys, p.y)
        pos = np.minimum(pos, len(keys) - 1)
        if not np.all(keys[pos] == p.y):
            raise ValueError(f"{self.owner} (partition {p.index}): labels changed between "
                             "passes over the partition (the data must be deterministic)")
        return values[pos]

    def triplets(self, p: Partition, X=None) -> np.ndarray:
        """The partition's triplets (local row ids): its own, or sampled from
        its labels with the seed ``(seed, p)`` -- the same in every round.
        ``X``: the partition's preprocessed rows when already computed."""
        if self.sampler is None:
            if p.triplets is None:
                raise ValueError(f"{self.owner}: partition {p.index} has no triplets")
            return p.triplets
        n = self.n_triplets[p.index]
        if n == 0:
            return np.zeros((0, 3), np.int64)
        return memo.get(self.token, (p.index, "triplets"), lambda: self._sample(p, n, X))

    def _sample(self, p: Partition, n: int, X) -> np.ndarray:
        sampler = clone(self.sampler) if hasattr(self.sampler, "get_params") else self.sampler
        if hasattr(sampler, "set_params") and "n_triplets" in sampler.get_params():
            sampler.set_params(n_triplets=int(n))
        rng = np.random.default_rng([self.seed, p.index])
        rows = self.rows(p) if X is None else X
        T = sampler.sample(rows, self.codes_of(p), rng, owner=self.owner)
        return np.ascontiguousarray(T, dtype=np.int64)

    def order(self, p: Partition | int, m: int, round_: int) -> np.ndarray:
        """The order of a partition's m triplets in round ``round_`` (seed
        ``(seed, p, round + 1)``)."""
        i = p.index if isinstance(p, Partition) else int(p)
        return memo.get(self.token, (i, "order", int(round_), int(m)),
                        lambda: np.random.default_rng([self.seed, i, round_ + 1]).permutation(m))


@dataclass
class PartitionedFit:
    """What a strategy gets: the backend, the partition sizes, the
    supervision, the total number of triplets, a driver-side generator and
    the checkpoint (None without ``checkpoint_dir``).

    ``resumed`` is ``(round, arrays, meta)`` of the checkpoint the run
    continues from (None for a fresh run): a strategy with rounds restores
    its state from it and calls :meth:`save_round` after each round."""

    backend: Any
    n_rows: list[int]
    supervision: Supervision
    n_triplets_total: int
    rng: np.random.Generator
    info: dict = field(default_factory=dict)
    checkpoint: Any = None
    resumed: tuple | None = None

    def save_round(self, round_: int, arrays: dict, *, last: bool = False,
                   meta: dict | None = None) -> None:
        """Checkpoint ``round_`` completed rounds (when a checkpoint
        directory was given and the round is due)."""
        ck = self.checkpoint
        if ck is not None and ck.due(round_, last):
            ck.save(round_, arrays, {**(meta or {}), "seed": str(self.supervision.seed)})

    @property
    def n_partitions(self) -> int:
        return len(self.n_rows)

    @property
    def n_total(self) -> int:
        return int(sum(self.n_rows))


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------
def _fingerprint(p: Partition, labels) -> str:
    """A hash of a partition for its checkpoint: shape and kind, the column
    sums weighted by a fixed pseudo-random weight in [1, 2) per row (every
    value and the rows' order count), at most
    :data:`~tripletml.distributed.checkpoint.FINGERPRINT_ROWS` rows -- the
    first, the last and evenly spaced ones --, the labels (all of them when
    numeric, else those of the hashed rows, and the label counts) and the
    explicit triplets.  One pass of O(n d) arithmetic (about as long as
    reading the rows once) and O(n + d) memory beyond the rows the task holds
    anyway."""
    X, n = p.X, p.n_rows
    h = hashlib.sha256()
    h.update(repr((tuple(X.shape), bool(sp.issparse(X)))).encode())
    k = FINGERPRINT_ROWS // 4
    if n <= FINGERPRINT_ROWS:
        rows = np.arange(n)
    else:
        rows = np.unique(np.concatenate([np.arange(k), np.arange(n - k, n),
                                         np.linspace(0, n - 1, FINGERPRINT_ROWS - 2 * k)
                                         .astype(np.int64)]))
    if sp.issparse(X):
        sub = X[rows]
        h.update(np.int64(X.nnz).tobytes())
        for a in (np.diff(sub.indptr), sub.indices, sub.data):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    else:
        h.update(np.ascontiguousarray(X[rows]).tobytes())
    # weights 1 + ((i * 2654435761) mod 2^16) / 2^16: Knuth's multiplicative hash of the row
    w = 1.0 + ((np.arange(n, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 16)
               ).astype(np.float64) / (1 << 16)
    h.update(np.ascontiguousarray(np.asarray(X.T @ w).ravel(), dtype=np.float64).tobytes())
    y = p.y
    numeric = y is not None and y.dtype.kind in "biuf"
    for a in ((None, None) if labels is None else labels) + (
            None if y is None else (y if numeric else y[rows]),):
        if a is None:
            h.update(b"-")
        elif a.dtype.kind in "biuf":
            h.update(a.dtype.str.encode() + np.ascontiguousarray(a).tobytes())
        else:
            h.update(repr(a.tolist()).encode())
    if p.triplets is not None:
        h.update(np.ascontiguousarray(p.triplets, dtype=np.int64).tobytes())
    return h.hexdigest()


def _one(index: int) -> int:
    """A task that does nothing (the cost model's round trip)."""
    return 1


def _labels_task(p: Partition, fingerprint: bool = False):
    """Per partition: rows, columns, sparse, unique labels with counts,
    explicit triplet count (and the data's fingerprint with
    ``fingerprint``)."""
    out = {"n": p.n_rows, "d": int(p.X.shape[1]), "sparse": bool(sp.issparse(p.X)),
           "triplets": None if p.triplets is None else int(p.triplets.shape[0])}
    if p.y is not None:
        try:
            keys, counts = np.unique(p.y, return_counts=True)
        except TypeError as exc:        # e.g. None, or ints mixed with strings
            out["labels"], out["labels_error"] = None, str(exc)
            return out
        out["labels"] = (keys, counts)
    else:
        out["labels"] = None
    if fingerprint:
        out["fingerprint"] = _fingerprint(p, out["labels"])
    return out


def _label_kinds(keys: np.ndarray) -> set:
    """``"numbers"`` and / or ``"strings"`` (or a type name) of sorted labels."""
    if keys.dtype.kind in "biuf":
        return {"numbers"}
    if keys.dtype.kind in "US":
        return {"strings"}
    return {"numbers" if isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, (bool, np.bool_)) else
            "strings" if isinstance(v, (str, bytes, np.str_)) else type(v).__name__
            for v in keys.tolist()}


def _check_partition_labels(infos: list[dict], owner: str) -> None:
    """Clear errors for labels no partitioned fit can use: unsortable ones,
    NaN, and numbers in one partition with strings in another (which NumPy
    would compare as strings, or not at all)."""
    seen = {}
    for i, inf in enumerate(infos):
        if inf.get("labels_error"):
            raise ValueError(f"{owner}: the labels of partition {i} cannot be sorted "
                             f"({inf['labels_error']}); labels must be all numbers or all "
                             "strings.")
        if inf["labels"] is None:
            continue
        keys = inf["labels"][0]
        if keys.dtype.kind in "fc" and not np.isfinite(keys).all():
            raise ValueError(f"{owner}: the labels of partition {i} hold NaN or infinity; "
                             "every row needs a class label (drop or label those rows).")
        for kind in _label_kinds(keys):
            seen.setdefault(kind, i)
    if len(seen) > 1:
        (k1, p1), (k2, p2) = sorted(seen.items(), key=lambda kv: kv[1])[:2]
        where = (f"partition {p1} has {k1} and {k2} as labels" if p1 == p2 else
                 f"partition {p1} has {k1} as labels but partition {p2} has {k2}")
        raise ValueError(f"{owner}: {where}; labels must be of one kind in every partition "
                         "(all numbers or all strings).")


def _label_table(infos: list[dict], owner: str):
    """Global sorted labels (keys -> codes) from the per-partition uniques."""
    _check_partition_labels(infos, owner)
    all_keys = [i["labels"][0] for i in infos if i["labels"] is not None]
    if not all_keys:
        return None
    try:
        keys = np.unique(np.concatenate(all_keys))
    except TypeError as e:
        raise ValueError(f"{owner}: labels of different partitions cannot be compared ({e})") \
            from None
    return {"keys": keys, "values": np.arange(keys.shape[0], dtype=np.int64)}


def _can_sample(keys, counts) -> bool:
    """At least two classes and a class with two members."""
    return keys.shape[0] >= 2 and int(np.max(counts)) >= 2


#: the largest dense d x d model update shipped per partition and round
#: (float64 bytes): 2 GiB, d = 16,384
MAX_UPDATE_BYTES = 2 << 30


def _check_shipping(learner, d: int, k: int) -> None:
    """A dense d x d model is shipped to and from every partition each round
    and the driver reduces up to FAN_IN of them at once: refuse one too
    large to ship (ValueError) or to reduce in the driver's memory
    (MemoryError), pointing to the low-rank learners."""
    owner = type(learner).__name__
    per = 8 * d * d
    hint = ("use a low-rank learner, whose rounds ship factors of size O(d k) (LORETA, "
            "IterativePA, LowRankDML), or reduce the dimension first")
    if per > MAX_UPDATE_BYTES:
        raise ValueError(f"{owner}: a partitioned fit ships a dense {d} x {d} model update "
                         f"({per / 2**30:.1f} GiB) per partition and round, more than the "
                         f"{MAX_UPDATE_BYTES / 2**30:.0f} GiB limit (MAX_UPDATE_BYTES); {hint}")
    check_dense_memory((min(FAN_IN, k) + 2) * per, learner,
                       f"reducing {min(FAN_IN, k)} dense {d} x {d} updates on the driver "
                       f"does not fit; {hint}")


def _settings(learner, collection, strategy: str) -> dict:
    """What a checkpoint must match: the learner's class and parameters, the
    partition sizes and the strategy."""
    params = {k: (v if isinstance(v, (bool, int, float, str, type(None))) else repr(v))
              for k, v in sorted(learner.get_params(deep=False).items())}
    return {"learner": type(learner).__name__, "params": params,
            "n_rows": [int(n) for n in collection.n_rows], "strategy": strategy}


def fit_partitioned(learner, collection, *, checkpoint_dir: Any = None, resume: bool = True,
                    checkpoint_every: int = 1) -> Any:
    """Fit ``learner`` on a :class:`~tripletml.distributed.sharded.ShardedCollection`
    (what ``learner.fit(collection)`` does); returns the learner.

    Parameters
    ----------
    learner : triplet learner
    collection : ShardedCollection
        Partitions with labels or triplets.
    checkpoint_dir : path, optional
        The strategies with rounds (CoCoA+, mixing, gradient sums: a round
        is a pass) write a checkpoint there every ``checkpoint_every`` rounds
        (:class:`~tripletml.distributed.checkpoint.RoundCheckpoint`); running
        the same call again after a crash of the driver resumes from it and
        ends with the model of an uninterrupted run.  A checkpoint belongs
        to its data and settings: it records a fingerprint of every
        partition (shape, weighted column sums, sampled rows, labels,
        triplets) and the learner's parameters, and a run on other data or
        with other settings is refused with a ValueError saying what
        differs.  A path that is a file or a device, or a folder holding a
        ``state.json`` or ``round-*.npz`` the library did not write, is
        refused; other files there are left alone.
    resume : bool, default=True
        Continue from the checkpoint in ``checkpoint_dir`` when there is one.
    checkpoint_every : int, default=1
        Rounds between checkpoints.

    Notes
    -----
    **Small data stays small** (:mod:`tripletml.distributed.cost`).  Inside
    ``use_cluster`` the fit first measures the cluster's round trip (a
    map-reduce over the partitions) and this machine's rate on a product of
    the model's shape; when one process is predicted faster than the
    cluster's worker threads (a round's work ``m d^2`` against the round
    trip), a collection held in memory is fitted in process and
    ``partitioned_["backend"]`` is ``"local"`` with the prediction in
    ``partitioned_["cost_model"]``; a collection of loaders stays on the
    cluster with a :class:`~tripletml.distributed.cost.ClusterCostWarning`.
    ``TRIPLETML_PARTITIONED_BACKEND=cluster`` (or ``local``) overrides.

    **Losing a worker.**  Every call to the cluster is bounded by
    :func:`~tripletml.distributed.dask_search.cluster_timeout` (60 s,
    ``TRIPLETML_CLUSTER_TIMEOUT``): a broadcast or scatter is cancelled after
    it; a gather waits without limit only while no worker is lost -- once a
    worker the fit knew has left, the results must arrive or make progress
    (a task running on a live worker) within the timeout.  A lost worker
    restarts the fit (the survey, the preprocessing or the rounds) from the
    last checkpoint, or from the first round, with a
    :class:`RestartWarning`, at most :data:`MAX_RESTARTS` times; then a
    :class:`WorkerLostError` names the lost worker.  When no worker is back
    within the timeout (every worker lost for good) the fit does not
    restart: a :class:`WorkerLostError` says so at once.  Local clusters
    preload tripletml in their workers
    (:mod:`tripletml.distributed.worker_preload`) so that a worker a nanny
    starts in place of a lost one answers at once; pass
    ``--preload tripletml.distributed.worker_preload`` to ``dask worker``
    for the same on a real cluster.
    """
    owner = type(learner).__name__
    rng, seed = _prepare_learner(learner)
    strategy = _strategy_of(learner)
    ckpt = None if checkpoint_dir is None else _open_checkpoint(
        learner, collection, strategy, checkpoint_dir, resume, checkpoint_every)
    backend, choice, infos, round_trip = _survey(collection, owner, ckpt is not None)
    d = infos[0]["d"]
    resumed = None
    if ckpt is not None:
        resumed, seed = _resume(ckpt, learner, infos, seed, checkpoint_dir)
    _check_partitions(infos, collection, owner)
    backend.n_features = d
    table = _label_table(infos, owner)
    sampler, shares, total = _plan_supervision(learner, infos, table, collection)
    backend, costs = _cost_model(learner, backend, collection, infos, total, round_trip,
                                 choice, owner, strategy)
    pre = _with_restarts(owner, backend, lambda: fit_preprocessor(learner, backend, infos),
                         "fitting the preprocessing")
    learner.scaler_ = pre
    try:
        learner._check_square_memory(pre.n_features_out_)
        if strategy.ships_model and getattr(learner, "_square_arrays", 0):
            _check_shipping(learner, pre.n_features_out_, len(infos))
        sup = Supervision(owner=owner, preprocessor=pre,
                          preprocessed=bool(getattr(learner, "_fit_preprocessed", True)),
                          sampler=sampler, n_triplets=shares, seed=seed, codes=table,
                          token=uuid.uuid4().hex)
        plan = PartitionedFit(backend=backend, n_rows=list(collection.n_rows),
                              supervision=sup, n_triplets_total=int(total), rng=rng,
                              info={"partitions": len(infos), "backend": backend.name},
                              checkpoint=ckpt, resumed=resumed)
        _run_memoised(strategy, learner, plan, checkpoint_dir)
    except BaseException:
        learner._clear_preprocessing()
        raise
    learner.partitioned_ = {"strategy": strategy.name, "partitions": len(infos),
                            "backend": backend.name, "n_triplets": int(total),
                            **({"cost_model": costs} if costs else {}),
                            **plan.info.get("report", {})}
    learner._set_fitted(d)
    return learner


def _survey(collection, owner: str, fingerprint: bool) -> tuple[Any, str, list, Any]:
    """The backend (``TRIPLETML_PARTITIONED_BACKEND`` or the active one), the
    choice it came from, every partition's survey and, for the cost model,
    the cluster's measured round trip (None when not measured).  Partitions
    in the driver's memory are surveyed here: the cost model may keep the
    fit here, and then nothing is sent to the cluster."""
    backend = backend_for(collection, owner)
    choice = cost.backend_choice()
    if choice == "local":
        backend = LocalBackend(collection, owner)
    surveyor = backend
    if backend.name == "dask" and choice == "auto" and all(
            _in_memory(p) for p in getattr(collection, "parts", [None])):
        surveyor = LocalBackend(collection, owner)
    infos = _with_restarts(owner, surveyor,
                           lambda: surveyor.gather(surveyor.map(_labels_task, fingerprint)),
                           "the survey of the partitions")
    round_trip = None
    if backend.name == "dask" and choice == "auto":
        # one task per partition, a tree reduction and the gather, on the cluster
        started = time.perf_counter()
        _with_restarts(owner, backend, backend.ping, "the survey of the partitions")
        round_trip = time.perf_counter() - started
    return backend, choice, infos, round_trip


def _in_memory(part) -> bool:
    """Whether a partition is held in the driver's memory (arrays, not a
    loader or a Dask collection)."""
    if isinstance(part, tuple):
        return all(_in_memory(p) for p in part if p is not None)
    return isinstance(part, np.ndarray) or sp.issparse(part)


def _cost_model(learner, backend, collection, infos, total, round_trip, choice, owner,
                strategy: "PartitionedStrategy | None" = None):
    """``(backend, report)``: the local backend instead of the cluster when
    the measured cost model (:mod:`tripletml.distributed.cost`) predicts the
    cluster slower and the partitions are small and in memory; a
    :class:`~tripletml.distributed.cost.ClusterCostWarning` when they are
    not.  The round trips per pass are the ``strategy``'s
    (:attr:`PartitionedStrategy.syncs_per_pass`; parameter mixing mixes
    once per in-memory block)."""
    if backend.name != "dask" or choice == "cluster" or round_trip is None:
        return backend, None
    d = int(infos[0]["d"])
    examples = int(total) if total else int(sum(inf["n"] for inf in infos))
    syncs = strategy.syncs_per_pass(examples, learner) \
        if strategy is not None and strategy.syncs_per_pass else 1
    try:
        threads = int(sum(backend.client.nthreads().values()))
    except Exception:                   # noqa: BLE001 - no answer: assume one
        threads = 1
    nbytes = 8 * d * int(sum(inf["n"] for inf in infos))
    parts = getattr(collection, "parts", ())
    local_ok = nbytes <= cost.LOCAL_BYTES and all(_in_memory(p) for p in parts)
    per_example = None
    if local_ok:                  # the learner's own cost, measured on partition 0
        p0 = _load(*LocalBackend._args(backend, 0), 0, owner, d)
        per_example = cost.seconds_per_example(learner, p0.X, p0.y)
    rounds = getattr(learner, "max_iter", 1)
    rounds = int(rounds) if isinstance(rounds, numbers.Integral) and rounds > 0 else 1
    report = cost.decide(examples=examples, d=d, round_trip_s=round_trip, threads=threads,
                         per_example_s=per_example, ship_bytes=nbytes if local_ok else 0,
                         rounds=rounds, syncs=syncs)
    report = {k: (float(f"{v:.6g}") if isinstance(v, float) else v)
              for k, v in report.items()}
    if report["decision"] == "cluster":
        return backend, report
    if local_ok:
        return LocalBackend(collection, owner, d), report
    report["decision"] = "cluster (in-process predicted faster; partitions not in memory)"
    warnings.warn(f"{owner}: the cluster is predicted slower than one process for this "
                  f"fit (a round: {report['cluster_s']:.3g} s on {threads} worker threads "
                  f"against {report['local_s']:.3g} s in process; the round trip alone "
                  f"{round_trip:.3g} s), but the partitions are not in the driver's memory; "
                  "fit outside use_cluster, or set TRIPLETML_PARTITIONED_BACKEND=local",
                  cost.ClusterCostWarning, stacklevel=4)
    return backend, report


def _prepare_learner(learner) -> tuple[np.random.Generator, int]:
    """Validate the learner's parameters and preprocessing (its fitted
    attributes reset); its generator and the sampling seed drawn from it."""
    owner = type(learner).__name__
    if getattr(learner, "_needs_triplets", True) is None:   # pragma: no cover
        raise TypeError(f"{owner} cannot be fitted on a ShardedCollection")
    learner._reset_fitted()
    learner._validate_params()
    check_preprocessing(getattr(learner, "preprocessing", None), learner)
    rng = as_generator(getattr(learner, "random_state", None), learner)
    seed = int(rng.integers(2 ** 63 - 1))
    return rng, seed


def _strategy_of(learner) -> PartitionedStrategy:
    """The :class:`~tripletml.distributed.strategy.PartitionedStrategy` the
    learner's class holds (``_partitioned_strategy``); gather a sample
    (:data:`tripletml.distributed.sample.STRATEGY`) for a learner without
    one of its own (None, the base class's default)."""
    strategy = getattr(type(learner), "_partitioned_strategy", None)
    if strategy is None:
        return sample.STRATEGY
    if not isinstance(strategy, PartitionedStrategy):
        raise ValueError(f"{type(learner).__name__}: unknown partitioned strategy "
                         f"{strategy!r}")
    return strategy


def _open_checkpoint(learner, collection, strategy: PartitionedStrategy, checkpoint_dir,
                     resume: bool, checkpoint_every) -> RoundCheckpoint:
    """The checkpoint of ``checkpoint_dir`` for this learner, collection and
    strategy (``checkpoint_every`` checked)."""
    owner = type(learner).__name__
    if isinstance(checkpoint_every, bool) or not isinstance(
            checkpoint_every, numbers.Integral) or checkpoint_every < 1:
        raise ValueError(f"{owner}: checkpoint_every must be an int >= 1, got "
                         f"{checkpoint_every!r}")
    return RoundCheckpoint(checkpoint_dir, _settings(learner, collection, strategy.name),
                           resume=resume, every=int(checkpoint_every))


def _resume(ckpt: RoundCheckpoint, learner, infos: list[dict], seed: int,
            checkpoint_dir) -> tuple[tuple | None, int]:
    """Tie the checkpoint to the data (refused when made from other rows)
    and load it: ``(resumed, seed)``, the seed the checkpoint records when
    it resumes (checked against an integer ``random_state``)."""
    owner = type(learner).__name__
    ckpt.data = {"n_features": int(infos[0]["d"]),
                 "partitions": [inf["fingerprint"] for inf in infos]}
    resumed = ckpt.load()
    if resumed is None:
        return None, seed
    try:
        saved = int(resumed[2]["seed"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{owner}: the checkpoint in {checkpoint_dir} records no "
                         "seed") from None
    rs = getattr(learner, "random_state", None)
    if isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and saved != seed:
        raise ValueError(f"{owner}: the checkpoint in {checkpoint_dir} records the "
                         f"sampling seed {saved}, but random_state={rs} gives {seed}; "
                         "it was edited or written by another run (use another "
                         "checkpoint_dir or resume=False)")
    return resumed, saved


def _check_partitions(infos: list[dict], collection, owner: str) -> None:
    """Every partition has partition 0's columns, the rows the collection
    says, and one kind (all dense or all scipy.sparse)."""
    d = infos[0]["d"]
    for i, inf in enumerate(infos):
        if inf["d"] != d:
            raise ValueError(f"{owner}: partition {i} has {inf['d']} features, partition 0 "
                             f"has {d}; every partition must have the same columns")
        if inf["n"] != collection.n_rows[i]:
            raise ValueError(f"{owner}: partition {i} has {inf['n']} rows, the collection "
                             f"says {collection.n_rows[i]}")
    if len({inf["sparse"] for inf in infos}) > 1:
        raise ValueError(f"{owner}: some partitions are scipy.sparse and some dense; make "
                         "them all one kind")


def _plan_supervision(learner, infos: list[dict], table, collection) -> tuple:
    """``(sampler, shares, total)``: the partitions' explicit triplets
    (``sampler`` None) or the learner's sampling policy with each
    partition's share of its ``n_triplets`` (:func:`partition_shares`, in
    proportion to the rows of the partitions that can form a triplet)."""
    owner = type(learner).__name__
    explicit = [inf["triplets"] for inf in infos]
    needs = getattr(learner, "_needs_triplets", True)
    if not needs:
        return None, None, 0
    if all(m is not None for m in explicit):
        total = int(sum(explicit))
        if total == 0:
            raise ValueError(f"{owner}: the collection's partitions hold no triplet")
        return None, None, total
    if any(m is not None for m in explicit):
        raise ValueError(f"{owner}: some partitions have triplets and some do not; give "
                         "triplets for every partition or labels only")
    if table is None or any(inf["labels"] is None for inf in infos):
        raise ValueError(f"{owner}: fitting on a ShardedCollection needs labels in every "
                         "partition (ShardedCollection(..., labels=) or shards with y) "
                         "or triplets in every partition (triplets=)")
    sampler = learner._sampler()
    ok = [_can_sample(*inf["labels"]) for inf in infos]
    n_classes = table["keys"].shape[0]
    _warn_missing_classes(owner, infos, ok, n_classes)
    if isinstance(sampler, AllLabels):
        return sampler, None, 0
    total = getattr(sampler, "n_triplets", None)
    if total is None and getattr(sampler, "per_class_pair", None) is not None:
        total = int(sampler.per_class_pair) * n_classes ** 2
    if total is None:
        raise ValueError(f"{owner}: the sampling policy {sampler!r} has no n_triplets; "
                         "give the learner's n_triplets (the total over all "
                         "partitions)")
    shares = partition_shares(int(total), [n if o else 0 for n, o in
                                           zip(collection.n_rows, ok)])
    return sampler, shares, total


def _warn_missing_classes(owner: str, infos: list[dict], ok: list[bool],
                          n_classes: int) -> None:
    """ValueError when no partition can form a triplet; a
    :class:`ClassesWarning` when some partitions lack classes."""
    lacking = [i for i, inf in enumerate(infos) if inf["labels"][0].shape[0] < n_classes]
    if not any(ok):
        raise ValueError(f"{owner}: no partition has two classes and a class with two "
                         "rows, so no partition can form a triplet; shuffle the rows "
                         "across partitions (write_npz_shards(..., shuffle=True))")
    if lacking:
        bad = [i for i, o in enumerate(ok) if not o]
        warnings.warn(
            f"{owner}: {len(lacking)} of {len(infos)} partitions lack some of the "
            f"{n_classes} classes (e.g. partition {lacking[0]} has "
            f"{infos[lacking[0]]['labels'][0].shape[0]}); triplets are sampled within "
            "partitions, so those classes are never compared there"
            + (f"; partitions {bad[:10]} cannot form a triplet and are skipped"
               if bad else "")
            + ". Shuffle the rows across shards (write_npz_shards(..., shuffle=True)).",
            ClassesWarning, stacklevel=5)


def _with_restarts(owner: str, backend, call, what: str, *, restart=None, ckpt=None,
                   checkpoint_dir=None, count: bool = False):
    """``call()``, run again (after ``restart()``) when a worker is lost
    with data it needs, at most :data:`MAX_RESTARTS` times, then a
    :class:`WorkerLostError` naming the worker; ``call``'s value, or the
    number of restarts with ``count``."""
    restarts = 0
    while True:
        try:
            value = call()
            return restarts if count else value
        except backend.lost_data_errors() as e:
            # a worker was lost with state that lineage cannot rebuild (the
            # CoCoA+ duals of earlier rounds were released), or a call timed
            # out: run again from the last checkpoint, or from the start; the
            # tasks are pure, so the model is the one of an undisturbed run
            restarts += 1
            resume = (f"; run it again to resume from {checkpoint_dir}"
                      if ckpt is not None else "")
            if restarts > MAX_RESTARTS:
                raise WorkerLostError(
                    f"{owner}: the partitioned fit lost a worker {restarts} times during "
                    f"{what} (last: {_lost(e)}); giving up" + resume) from None
            if backend.settle() == 0:      # no worker came back: a restart is futile
                raise WorkerLostError(
                    f"{owner}: the partitioned fit lost every worker of the cluster during "
                    f"{what} (last: {_lost(e)}) and none came back within "
                    f"{cluster_timeout():g} s (or the scheduler stopped answering; "
                    "TRIPLETML_CLUSTER_TIMEOUT sets the wait)"
                    + resume) from None
            warnings.warn(f"{owner}: a worker was lost with data the fit needs during "
                          f"{what} ({_lost(e)}); restarting "
                          + ("from the last checkpoint" if ckpt is not None
                             else "it" if restart is None
                             else "from the first round (give fit_partitioned a "
                             "checkpoint_dir to resume from the last round)"),
                          RestartWarning, stacklevel=5)
            if restart is not None:
                restart()


def _run_memoised(strategy, learner, plan, checkpoint_dir) -> None:
    """:func:`_run_strategy` with the fit's memo of derived partition data
    (:mod:`~tripletml.distributed.memo`, keyed by the supervision's token)
    on; the memo is dropped in every process when the fit ends, however."""
    backend, token = plan.backend, plan.supervision.token
    backend.token = token
    try:
        _run_strategy(strategy, learner, plan, checkpoint_dir)
    finally:
        backend.token = None
        backend.forget(token)


def _run_strategy(strategy: PartitionedStrategy, learner, plan: PartitionedFit,
                  checkpoint_dir) -> None:
    """``strategy.fit(learner, plan)``, run again from the last checkpoint
    (or the start) when a worker is lost with data the fit needs, at most
    :data:`MAX_RESTARTS` times; the restarts go to ``plan.info["report"]``."""
    owner = type(learner).__name__
    ckpt, backend, rng = plan.checkpoint, plan.backend, plan.rng
    if ckpt is not None and not strategy.checkpoints:
        warnings.warn(f"{owner}: strategy {strategy.name!r} has no rounds to checkpoint; "
                      "checkpoint_dir is not used", UserWarning, stacklevel=4)
    rng_state = copy.deepcopy(rng.bit_generator.state)

    def restart():
        rng.bit_generator.state = copy.deepcopy(rng_state)
        plan.resumed = ckpt.load() if ckpt is not None else None
        plan.info.pop("report", None)

    def fit() -> None:
        # the in-memory fit's thread rule (tripletml.engine.threads) on the
        # rows the fit can touch (the collection's, at most three per
        # triplet): the driver's steps (CoCoA+'s and mixing's reductions,
        # SVDs of d x k factors, Nesterov's d x d eigh) and the in-process
        # partitions' passes are as small as an in-memory fit's (issue 40:
        # LORETA on 8 partitions of digits took 24.3 CPU s with OpenBLAS's
        # threads on a busy 2-core machine, 4.2 s with one)
        rows = int(sum(plan.n_rows))
        if plan.n_triplets_total > 0:
            rows = min(rows, 3 * int(plan.n_triplets_total))
        with limit_threads(fit_work(rows, int(learner.scaler_.n_features_out_))):
            strategy.fit(learner, plan)

    restarts = _with_restarts(owner, backend, fit, "the fit",
                              restart=restart, ckpt=ckpt, checkpoint_dir=checkpoint_dir,
                              count=True)
    plan.info.setdefault("report", {})["restarts"] = restarts
