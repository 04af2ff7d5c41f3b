"""The ``--scheduler`` option of the command line (``tripletml reproduce``,
searches): run the joblib-parallel work on a Dask cluster."""
from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator

from tripletml.distributed.dask_search import CONNECT_TIMEOUT, use_cluster

__all__ = ["add_scheduler_argument", "scheduler_context"]


def add_scheduler_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--scheduler ADDRESS`` and ``--blas-threads N`` to ``parser``."""
    parser.add_argument(
        "--scheduler", metavar="ADDRESS", default=None,
        help="run the parallel work (reproduce: seeds x data sets x settings; fit auto: the "
             "candidate race) on a Dask cluster: a scheduler address "
             "(tcp://host:8786) or 'local:N' for N local worker processes. Needs "
             'pip install "tripletml[dask]"; the workers must reach the data (--data-home).')
    parser.add_argument(
        "--blas-threads", metavar="N", type=int, default=1,
        help="BLAS threads per Dask worker while the run lasts (default 1).")
    parser.add_argument(
        "--scheduler-timeout", metavar="SECONDS", type=float, default=None,
        help="seconds the --scheduler address may take to answer as a Dask scheduler before "
             "the run stops with an error (default 10).")


@contextlib.contextmanager
def scheduler_context(args: argparse.Namespace) -> Iterator[Any]:
    """``tripletml.distributed.dask_search.use_cluster`` for ``args.scheduler`` (a no-op
    yielding None when it is not set)."""
    address = getattr(args, "scheduler", None)
    if not address:
        yield None
        return
    target: Any = address
    if isinstance(address, str) and address.startswith("local:"):
        try:
            target = int(address.split(":", 1)[1])
        except ValueError:
            raise SystemExit(f"tripletml: --scheduler {address!r}: expected local:N") from None
    timeout = getattr(args, "scheduler_timeout", None)
    if timeout is None:
        timeout = CONNECT_TIMEOUT
    if not 0 < timeout < float("inf"):
        raise ValueError(f"--scheduler-timeout must be a positive number of seconds, got "
                         f"{timeout!r}")
    with use_cluster(target, blas_threads=getattr(args, "blas_threads", 1),
                     timeout=timeout) as client:
        yield client
