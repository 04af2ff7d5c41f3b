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

__all__ = ["dask_setup", "MODULE", "module_names"]

#: the module name to pass as a preload
MODULE = __name__


def module_names() -> list[str]:
    """The modules a worker imports: the distributed package's modules and
    the module of every learner of the registry (nothing is imported but the
    packages walked).  A ``forkserver`` preload list
    (``multiprocessing.get_context("forkserver").set_forkserver_preload``)
    made from them lets a nanny fork a replacement worker with tripletml
    already imported, in a fraction of a second instead of seconds."""
    from tripletml import registry
    distributed = importlib.import_module("tripletml.distributed")
    names = [info.name for info in pkgutil.walk_packages(distributed.__path__,
                                                         distributed.__name__ + ".")]
    names += [f"tripletml.{entry.module}" for entry in registry.entries()]
    return list(dict.fromkeys(names))


def _import_all() -> None:
    """The registry's learner classes (each loads its algorithm's modules)
    and the distributed package's modules."""
    for name in module_names():
        try:
            importlib.import_module(name)
        except ImportError:               # an optional extra (faiss, ...) is missing
            pass


def dask_setup(worker=None) -> None:
    """Dask's preload hook: import tripletml's learners and their
    distributed strategies."""
    _import_all()
