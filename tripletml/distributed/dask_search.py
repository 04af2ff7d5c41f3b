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
import os
import socket
import struct
import threading
import time
import uuid
import warnings
from typing import Any, Iterator
from urllib.parse import urlsplit

from joblib import parallel_config
from threadpoolctl import threadpool_info
from tripletml.engine.threads import kept_thread_environment

__all__ = ["use_cluster", "active_client", "require_dask", "INSTALL_HINT", "worker_blas_threads",
           "CONNECT_TIMEOUT", "CLUSTER_TIMEOUT", "cluster_timeout"]

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
    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


#: the worker preload of the local clusters (:mod:`tripletml.distributed.worker_preload`)
PRELOAD = "tripletml.distributed.worker_preload"

#: seconds an address may take to answer as a Dask scheduler (``use_cluster(timeout=)``,
#: ``--scheduler-timeout``)
CONNECT_TIMEOUT = 10.0

#: Dask's protocols; ``tcp`` (the default) is probed for the scheduler's handshake
_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")
_DEFAULT_PORT = 8786
#: a scheduler's handshake frame is a few hundred bytes
_HANDSHAKE_MAX = 1 << 16


def _parse_address(address: str) -> tuple[str, str | None, int | None]:
    """``(scheme, host, port)`` of a scheduler address, or a ValueError
    saying what is wrong with it (nothing is contacted)."""

    text = address.strip()
    hint = "a Dask scheduler address looks like tcp://host:8786"
    if not text:
        raise ValueError(f"use_cluster: the scheduler address is empty; {hint}")
    scheme, rest = text.split("://", 1) if "://" in text else ("tcp", text)
    scheme = scheme.lower()
    if scheme in ("http", "https"):
        raise ValueError(f"use_cluster: {address!r} is an {scheme.upper()} URL (a dashboard?), "
                         f"not a scheduler address; {hint}")
    if scheme not in _SCHEMES:
        raise ValueError(f"use_cluster: {address!r} has the protocol {scheme[:20]!r}, not one of "
                         f"Dask's ({', '.join(_SCHEMES)}); {hint}")
    if scheme == "inproc":
        return scheme, None, None
    try:
        parts = urlsplit("//" + rest)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port, parts = None, None, None
    if parts is None or not host or parts.path not in ("", "/") or parts.query \
            or parts.fragment or any(c.isspace() for c in rest) or parts.username:
        raise ValueError(f"use_cluster: {address!r} is not a scheduler address; {hint}")
    return scheme, host, _DEFAULT_PORT if port is None else int(port)


def _resolve(host: str, port: int, timeout: float) -> tuple:
    """The first socket address of ``host`` (getaddrinfo in a thread, as it
    has no timeout of its own: :func:`_bounded`)."""

    try:
        infos = _bounded(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                         timeout, f"resolving the host name {host!r}", hint="")
    except OSError as e:
        if isinstance(e, TimeoutError):
            raise
        raise ConnectionError(f"use_cluster: the host name {host!r} cannot be resolved "
                              f"({e})") from None
    info = infos[0]
    return info[0], info[4]


def _probe(address: str, timeout: float) -> None:
    """Check within ``timeout`` seconds that a Dask scheduler answers at
    ``address``: the address parses, the host resolves, something accepts
    the connection and -- over ``tcp`` -- it speaks first with a Dask
    handshake frame (an 8-byte length, then that many bytes, a few
    hundred).  ValueError for a malformed address or another service,
    ConnectionError / TimeoutError (both OSError) for nothing listening or
    a silent peer."""

    scheme, host, port = _parse_address(address)
    if host is None:
        return
    deadline = time.monotonic() + timeout
    family, sockaddr = _resolve(host, port, timeout)
    where = f"{address!r}"
    advice = ("start a scheduler there (dask scheduler) or check the address; "
              "--scheduler-timeout / use_cluster(timeout=) sets the wait")
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            sock.connect(sockaddr)
        except socket.timeout:
            raise TimeoutError(f"use_cluster: {where} did not accept a connection within "
                               f"{timeout:g} s; {advice}") from None
        except OSError as e:
            raise ConnectionError(f"use_cluster: nothing answers at {where} "
                                  f"({e.strerror or e}); {advice}") from None
        if scheme != "tcp":
            return

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout
                sock.settimeout(left)
                chunk = sock.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError(f"use_cluster: {where} closed the connection "
                                          f"without a Dask handshake; {advice}")
                buf += chunk
            return buf

        try:
            (size,) = struct.unpack("<Q", read(8))
            if not 16 <= size <= _HANDSHAKE_MAX:
                raise ValueError(f"use_cluster: {where} answered, but not as a Dask "
                                 "scheduler (another service on that port?); a scheduler "
                                 "listens on tcp://host:8786, its dashboard (HTTP) elsewhere")
            (n_frames,) = struct.unpack("<Q", read(size)[:8])
            if not 1 <= n_frames <= 64:
                raise ValueError(f"use_cluster: {where} answered, but not as a Dask "
                                 "scheduler (another service on that port?)")
        except socket.timeout:
            raise TimeoutError(f"use_cluster: {where} accepted the connection but did not "
                               f"answer as a Dask scheduler within {timeout:g} s (a silent or "
                               f"other service?); {advice}") from None
        except OSError as e:
            if isinstance(e, (ConnectionError, TimeoutError)) and str(e).startswith(
                    "use_cluster"):
                raise
            raise ConnectionError(f"use_cluster: {where} dropped the connection "
                                  f"({e.strerror or e}); {advice}") from None
    finally:
        sock.close()


def _connect(scheduler: Any, distributed, timeout: float = CONNECT_TIMEOUT) -> tuple[Any, list]:
    """A Client for ``scheduler`` and the objects to close on exit."""
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    if isinstance(scheduler, Client):
        return scheduler, []
    if isinstance(scheduler, str):
        # fail fast, before a Client exists (a failed Client waits in __del__)
        _probe(scheduler, timeout)
        try:
            client = Client(scheduler, set_as_default=False, timeout=timeout)
        except (OSError, TimeoutError) as e:
            raise ConnectionError(f"use_cluster: cannot connect to the scheduler at "
                                  f"{scheduler!r} within {timeout:g} s ({str(e)[:200]})") \
                from None
        return client, [client]
    if isinstance(scheduler, dict):
        # workers import tripletml before they register (worker_preload)
        cluster = LocalCluster(**{"preload": [PRELOAD], **scheduler})
        client = Client(cluster, set_as_default=False)
        return client, [client, cluster]
    if isinstance(scheduler, numbers.Integral) and not isinstance(scheduler, bool):
        if scheduler < 1:
            raise ValueError(f"use_cluster: a number of local workers must be >= 1, got "
                             f"{scheduler}")
        cluster = LocalCluster(n_workers=int(scheduler), threads_per_worker=1,
                               processes=True, dashboard_address=None, preload=[PRELOAD])
        client = Client(cluster, set_as_default=False)
        return client, [client, cluster]
    if hasattr(scheduler, "scheduler_address"):          # LocalCluster, SpecCluster, ...
        client = Client(scheduler, set_as_default=False)
        return client, [client]
    raise TypeError("use_cluster: scheduler must be an address ('tcp://host:8786'), a "
                    "distributed.Client, a cluster object (LocalCluster, ...), a dict of "
                    "LocalCluster arguments or a number of local workers; got "
                    f"{type(scheduler).__name__}")


#: seconds a broadcast, a scatter or a plugin call on a Dask cluster may take
#: before the worker it waits for counts as lost (environment variable
#: ``TRIPLETML_CLUSTER_TIMEOUT`` overrides)
CLUSTER_TIMEOUT = 60.0


def cluster_timeout() -> float:
    """:data:`CLUSTER_TIMEOUT`, or ``TRIPLETML_CLUSTER_TIMEOUT`` when set (a
    positive number of seconds)."""
    env = os.environ.get("TRIPLETML_CLUSTER_TIMEOUT", "").strip()
    if not env:
        return float(CLUSTER_TIMEOUT)
    try:
        value = float(env)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"the TRIPLETML_CLUSTER_TIMEOUT environment variable must be a "
                         f"positive number of seconds, got {env[:40]!r}")
    return value


def _bounded(call, timeout: float, what: str,
             hint: str = " (a lost or unresponsive worker?)"):
    """``call()`` in a helper thread, waited for at most ``timeout`` seconds
    (TimeoutError naming ``what`` and ``hint`` after that; the call's own
    error is raised as is)."""
    box: dict = {}

    def work():
        try:
            box["value"] = call()
        except BaseException as e:        # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=work, daemon=True, name="tripletml-cluster-call")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"use_cluster: {what} did not finish within {timeout:g} s{hint}")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@contextlib.contextmanager
def use_cluster(scheduler: Any, *, blas_threads: int | None = 1,
                timeout: float = CONNECT_TIMEOUT) -> Iterator[Any]:
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
    timeout : float, default=10
        Seconds an address may take to answer as a Dask scheduler
        (:data:`CONNECT_TIMEOUT`).  Before a Client is made the address is
        parsed (``'not an address'`` and ``http://...`` are ValueErrors),
        connected to and -- over ``tcp`` -- read for the scheduler's
        handshake, which a scheduler sends first: nothing listening is a
        ConnectionError, a peer that accepts and stays silent a
        TimeoutError, another service (HTTP) a ValueError, all within
        ``timeout`` seconds.

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
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or \
            not 0 < timeout < float("inf"):
        raise ValueError(f"use_cluster: timeout must be a positive number of seconds, got "
                         f"{timeout!r}")
    with kept_thread_environment():      # Dask's nanny leaves its thread variables
        client, to_close = _connect(scheduler, distributed, float(timeout))
        name = None
        try:
            if blas_threads is not None:
                name = f"tripletml-blas-{uuid.uuid4().hex[:8]}"
                from tripletml.distributed.dask_plugins import BlasLimitPlugin
                plugin = BlasLimitPlugin(int(blas_threads))
                _bounded(lambda: client.register_plugin(plugin, name=name), cluster_timeout(),
                         "registering the BLAS-threads plugin on the workers")
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
                    # the work is done: a worker lost meanwhile (its connection closed,
                    # or no answer) must not turn it into an error; a new worker
                    # process starts with its own BLAS settings anyway
                    from distributed.comm.core import CommClosedError
                    try:
                        _bounded(lambda: client.unregister_worker_plugin(name),
                                 cluster_timeout(), "removing the BLAS-threads plugin")
                    except (CommClosedError, OSError, ValueError, KeyError) as e:
                        warnings.warn(f"use_cluster: the BLAS-threads plugin could not be "
                                      f"removed from every worker ({type(e).__name__}: "
                                      f"{str(e)[:200]})", RuntimeWarning, stacklevel=3)
            finally:
                for obj in to_close:
                    obj.close()
