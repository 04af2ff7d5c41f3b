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
    """The registry's learner classes (each loads its algorithm's modules)
    and the distributed package's modules."""
    from tripletml import registry
    distributed = importlib.import_module("tripletml.distributed")
    for info in pkgutil.walk_packages(distributed.__path__, distributed.__name__ + "."):
        try:
            importlib.import_module(info.name)
        except ImportError:               # an optional extra is missing
            pass
    for entry in registry.entries():
        try:
            registry.learner_class(entry.name)
        except ImportError:               # an optional extra (faiss, ...) is missing
            pass


def dask_setup(worker=None) -> None:
    """Dask's preload hook: import tripletml's learners and their
    distributed strategies."""
    _import_all()
