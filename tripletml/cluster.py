"""Run tripletml's model searches on a Dask cluster (optional: ``pip install
"tripletml[dask]"``).

:func:`use_cluster` is a context manager that connects to a Dask scheduler
(an address, a :class:`distributed.Client`, a :class:`distributed.LocalCluster`
or a ``LocalCluster`` spec), pins the BLAS threads of every worker with
:mod:`threadpoolctl` (restored on exit) and makes Dask the active
:mod:`joblib` backend.  Inside it, everything that parallelises through joblib
runs on the cluster, unchanged:

* ``GridSearchCV(learner, grid, n_jobs=-1)`` / ``cross_validate`` over any
  tripletml learner;
* estimators that call ``joblib.Parallel(n_jobs=...)`` themselves (the auto
  estimator's validation);
* the reproductions (``tripletml reproduce NAME --scheduler tcp://...``): their
  seeds x data sets x settings go through :func:`tripletml.reproduce._common.run_jobs`.

Each job is a pure function of its arguments (data, parameters, seed), so the
results equal the local run's for the same seeds.  The workers must be able to
import tripletml and read the data (``data_home``) themselves.

Importing this module does not import Dask; entering the context without Dask
installed raises ImportError with the install hint.
"""
from __future__ import annotations

import contextlib
import numbers
import threading
import uuid
from typing import Any, Iterator

__all__ = ["use_cluster", "active_client", "require_dask", "INSTALL_HINT", "worker_blas_threads"]

#: what to install for the Dask features
INSTALL_HINT = 'pip install "tripletml[dask]"  (dask[array] and distributed)'

_state = threading.local()


def require_dask(feature: str = "this feature"):
    """Import ``dask`` and ``distributed`` or raise ImportError with the
    install hint; returns the two modules."""
    try:
        import dask
        import distributed
    except ImportError as exc:
        raise ImportError(f"tripletml: {feature} needs Dask, which is not installed "
                          f"({exc}). Install it with: {INSTALL_HINT}") from None
    return dask, distributed


def active_client():
    """The :class:`distributed.Client` of the innermost :func:`use_cluster`
    context of this thread, or None outside one."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def worker_blas_threads() -> int | None:
    """The BLAS thread count of this process (threadpoolctl), None if no BLAS
    is loaded.  Run it on the workers with ``client.run(worker_blas_threads)``."""
    from threadpoolctl import threadpool_info
    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


def _connect(scheduler: Any, distributed) -> tuple[Any, list]:
    """A Client for ``scheduler`` and the objects to close on exit."""
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    if isinstance(scheduler, Client):
        return scheduler, []
    if isinstance(scheduler, str):
        client = Client(scheduler, set_as_default=False)
        return client, [client]
    if isinstance(scheduler, dict):
        cluster = LocalCluster(**scheduler)
        client = Client(cluster, set_as_default=False)
        return client, [client, cluster]
    if isinstance(scheduler, numbers.Integral) and not isinstance(scheduler, bool):
        if scheduler < 1:
            raise ValueError(f"use_cluster: a number of local workers must be >= 1, got "
                             f"{scheduler}")
        cluster = LocalCluster(n_workers=int(scheduler), threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster, set_as_default=False)
        return client, [client, cluster]
    if hasattr(scheduler, "scheduler_address"):          # LocalCluster, SpecCluster, ...
        client = Client(scheduler, set_as_default=False)
        return client, [client]
    raise TypeError("use_cluster: scheduler must be an address ('tcp://host:8786'), a "
                    "distributed.Client, a cluster object (LocalCluster, ...), a dict of "
                    "LocalCluster arguments or a number of local workers; got "
                    f"{type(scheduler).__name__}")


@contextlib.contextmanager
def use_cluster(scheduler: Any, *, blas_threads: int | None = 1) -> Iterator[Any]:
    """Run joblib-parallel work (model searches, reproductions) on a Dask cluster.

    Parameters
    ----------
    scheduler : str, distributed.Client, cluster, dict or int
        ``"tcp://host:8786"`` (a running scheduler), a Client (used as is,
        not closed), a cluster object such as ``LocalCluster`` (a Client is
        opened on it and closed on exit), a dict of ``LocalCluster``
        arguments (the cluster is created and closed on exit), or a number
        of local worker processes (one thread each).
    blas_threads : int or None, default=1
        BLAS threads per worker process while the context is active
        (threadpoolctl, set on every worker, also on workers that join
        later, and restored on exit).  With one task per worker thread,
        ``threads_per_worker * blas_threads`` should not exceed the cores
        of a worker's machine.  None leaves the workers' BLAS alone.

    Yields
    ------
    client : distributed.Client

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV       # doctest: +SKIP
    >>> with use_cluster("tcp://scheduler:8786"):              # doctest: +SKIP
    ...     GridSearchCV(OASIS(), {"C": [0.01, 0.1]}, n_jobs=-1).fit(X, y)

    Raises
    ------
    ImportError
        If dask / distributed are not installed (with the install hint).
    """
    _, distributed = require_dask("use_cluster")
    if blas_threads is not None and (isinstance(blas_threads, bool) or not isinstance(
            blas_threads, numbers.Integral) or blas_threads < 1):
        raise ValueError(f"use_cluster: blas_threads must be a positive int or None, got "
                         f"{blas_threads!r}")
    from joblib import parallel_config

    client, to_close = _connect(scheduler, distributed)
    name = None
    try:
        if blas_threads is not None:
            name = f"tripletml-blas-{uuid.uuid4().hex[:8]}"
            from ._dask_plugins import BlasLimitPlugin
            client.register_plugin(BlasLimitPlugin(int(blas_threads)), name=name)
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        stack.append(client)
        try:
            with parallel_config(backend="dask", client=client):
                yield client
        finally:
            stack.pop()
    finally:
        try:
            if name is not None and client.status == "running":
                client.unregister_worker_plugin(name)
        finally:
            for obj in to_close:
                obj.close()
