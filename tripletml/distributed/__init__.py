"""Training and evaluation over partitions: the partitioned fit and its
backends (in-process or Dask), reduction trees, checkpoints, exact
statistics, parameter mixing, gradient sums, sharded collections, streaming
and the Dask glue.

Imports nothing of :mod:`tripletml.algorithms`: an algorithm hands its
strategy to :func:`tripletml.distributed.partitioned.fit_partitioned`.
"""

import importlib as _importlib

#: the user-facing modules, reachable as attributes (``tripletml.distributed.sharded``)
_SUBMODULES = ('sharded', 'streaming', 'dask_search', 'partitioned')


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
