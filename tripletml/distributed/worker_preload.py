"""A Dask worker preload: import tripletml before the worker registers with
its scheduler (``dask worker --preload tripletml.distributed.worker_preload``,
or ``LocalCluster(preload=[...])``; the local clusters of
:func:`~tripletml.distributed.dask_search.use_cluster` use it).

Without it, a fresh worker -- one that joins late, or the one a nanny starts
in place of a lost worker -- imports tripletml (seconds: NumPy, SciPy,
scikit-learn, Numba) while unpickling its first task, *in its event loop*:
for those seconds it answers no scatter or data request, and a broadcast of
a partitioned fit waits for it.  Imported here, before the worker is listed,
the worker is ready when the scheduler first hands it work.
"""
from __future__ import annotations

import importlib
import pkgutil

__all__ = ["dask_setup", "MODULE"]

#: the module name to pass as a preload
MODULE = __name__


def _import_all() -> None:
    import tripletml
    import tripletml.algorithms as algorithms
    import tripletml.distributed as distributed
    importlib.import_module("tripletml.distributed.partitioned")
    for pkg in (distributed, algorithms):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            name = info.name
            if name.endswith(("distributed", "estimator")) or pkg is distributed:
                try:
                    importlib.import_module(name)
                except ImportError:       # an optional extra (faiss, ...) is missing
                    pass
    del tripletml


def dask_setup(worker=None) -> None:
    """Dask's preload hook: import tripletml's learners and their
    distributed strategies."""
    _import_all()
