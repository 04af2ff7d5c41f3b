"""A per-process memo of what a partitioned fit derives from a partition.

A strategy with rounds (parameter mixing makes about 20 per pass, CoCoA+ one
per pass) runs a task on every partition in every round, and each task used
to derive the same things again from the partition it was given: the
preprocessed rows as the solver's CSR, the triplets sampled from the labels
with the seed ``(seed, p)`` and the pass's order of them.  These are pure
functions of the partition and of the fit's :class:`Supervision`, so a task
may take them from a memo instead of recomputing them: the tasks stay pure
(their outputs depend only on their inputs), and a task that misses the memo
(another process, a restarted worker, a full memo) computes the same values.

The memo lives in the process that runs the tasks (the driver for the
in-process backend, each Dask worker), keyed by the fit's token (a fresh
random hex string per fit, carried by the supervision), the partition and
what was derived.  It holds at most :func:`budget` bytes: a value that does
not fit after the entries of *other* fits (least recently used first) are
dropped is not kept, so a fit whose derived data exceed the memo keeps the
partitions it admitted first instead of thrashing; in a Dask worker with a
memory limit a value is also refused when keeping it would take the
process past the first of Dask's thresholds (:func:`_worker_room`).  The fit drops its
entries when it ends (:func:`forget`, on every worker for a cluster).
Tasks must not write into what they get from the memo (the next round
would see the change); the tests run the strategies with :data:`FREEZE`
set, which makes memoised arrays read-only so that a write raises.  It is
off by default because Numba compiles its kernels again for read-only
arrays.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

__all__ = ["budget", "get", "forget", "clear", "stats", "MEMO_FRACTION", "FREEZE"]

#: The share of the memory available to the process (a Dask worker's
#: ``memory_limit`` when it has one, else the machine's available memory)
#: that the memo may hold.
MEMO_FRACTION: float = 0.25

#: Make memoised arrays read-only (tests: a task writing to one raises).
FREEZE: bool = False

_LOCK = threading.Lock()
_ENTRIES: "OrderedDict[tuple, tuple[Any, int]]" = OrderedDict()
_STATE = {"bytes": 0, "hits": 0, "misses": 0, "refused": 0}


def _worker_memory():
    """This Dask worker's memory manager (None outside a worker)."""
    try:
        from distributed import get_worker
        return get_worker().memory_manager
    except (ImportError, ValueError, AttributeError):
        return None


def _worker_limit() -> int | None:
    """This Dask worker's memory limit in bytes (None outside a worker or
    without a limit)."""
    return getattr(_worker_memory(), "memory_limit", None) or None


def _worker_fractions() -> list[float]:
    """The worker's own target, spill and pause fractions (its arguments,
    else Dask's configuration; a disabled one is left out)."""
    manager = _worker_memory()
    out = []
    for k in ("target", "spill", "pause"):
        f = getattr(manager, f"memory_{k}_fraction", None)
        if f is None:
            import dask
            f = dask.config.get(f"distributed.worker.memory.{k}", False)
        if f:
            out.append(float(f))
    return out


def budget() -> int:
    """Bytes the memo may hold in this process: :data:`MEMO_FRACTION` of a
    Dask worker's memory limit, or of the available memory (0 when
    unknown: nothing is memoised)."""
    limit = _worker_limit()
    if not limit:
        from tripletml.core.validation import available_memory
        limit = available_memory()
    return int(MEMO_FRACTION * limit) if limit else 0


def _worker_room(n: int) -> bool:
    """Whether a Dask worker can keep a value of ``n`` bytes that its task
    just made: the process memory (which holds the value already) is below
    the first of Dask's own thresholds (``target``, ``spill``, ``pause``:
    60 % of its limit by default), where Dask starts spilling or pausing
    the worker's tasks.  The memo holds values a task may compute
    again; it must never be what pushes a worker into spilling, pausing or
    a restart (a worker with a 1 GB limit kept 250 MB of one partition's
    copies of 200 and paused at every later task).  True outside a worker
    with a limit (the budget alone applies)."""
    limit = _worker_limit()
    if not limit:
        return True
    try:
        import psutil
        fractions = _worker_fractions()
        rss = psutil.Process().memory_info().rss
    except Exception:             # no psutil or config: the budget alone
        return True
    return not fractions or rss <= min(fractions) * limit


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if sp.issparse(value):
        return sum(int(getattr(value, a).nbytes) for a in ("data", "indices", "indptr"))
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return 64


def _freeze(value: Any) -> None:
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif sp.issparse(value):
        for a in ("data", "indices", "indptr"):
            getattr(value, a).flags.writeable = False
    elif isinstance(value, tuple):
        for v in value:
            _freeze(v)


def _admit(key: tuple, value: Any, n: int) -> bool:
    """Keep ``value`` when it fits, dropping other fits' entries (least
    recently used first) to make room; under the lock."""
    cap = budget()
    if n > cap or not _worker_room(n):
        return False
    if _STATE["bytes"] + n > cap:
        for k in [k for k in _ENTRIES if k[0] != key[0]]:
            _STATE["bytes"] -= _ENTRIES.pop(k)[1]
            if _STATE["bytes"] + n <= cap:
                break
    if _STATE["bytes"] + n > cap:
        return False
    _ENTRIES[key] = (value, n)
    _STATE["bytes"] += n
    return True


def get(token: str | None, key: tuple, make: Callable[[], Any], *,
        derived: bool = True) -> Any:
    """The memoised ``make()`` of fit ``token`` under ``key`` (computed and
    kept on a miss when it fits the budget).  ``token=None``: no memo,
    ``make()`` every time.  ``derived=False``: the value may be the caller's
    own data (a partition held in memory), never made read-only."""
    if token is None:
        return make()
    full = (token, *key)
    with _LOCK:
        hit = _ENTRIES.get(full)
        if hit is not None:
            _ENTRIES.move_to_end(full)
            _STATE["hits"] += 1
            return hit[0]
    value = make()
    if FREEZE and derived:
        _freeze(value)
    with _LOCK:
        _STATE["misses"] += 1
        if full not in _ENTRIES and not _admit(full, value, _nbytes(value)):
            _STATE["refused"] += 1
    return value


def forget(token: str | None) -> int:
    """Drop fit ``token``'s entries; the bytes freed."""
    freed = 0
    with _LOCK:
        for k in [k for k in _ENTRIES if k[0] == token]:
            n = _ENTRIES.pop(k)[1]
            _STATE["bytes"] -= n
            freed += n
    return freed


def clear() -> None:
    """Drop every entry and reset the counters."""
    with _LOCK:
        _ENTRIES.clear()
        _STATE.update(bytes=0, hits=0, misses=0, refused=0)


def stats() -> dict:
    """Entries, bytes held, hits, misses and values refused (too big)."""
    with _LOCK:
        return {"entries": len(_ENTRIES), **_STATE}
