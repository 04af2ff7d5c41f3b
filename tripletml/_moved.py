"""Module paths of tripletml 0.1 that moved in 0.2 (one folder per
algorithm), kept importable until 0.3 with a FutureWarning.

``import tripletml.sharded`` (or ``from tripletml.streaming import
fit_stream``) still works and warns with the new path; so do pickles of
0.1 estimators, which name ``tripletml.learners.<name>``.  Nothing else is
kept: the solvers and training modules were never public.  The table goes
in 0.3.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: the old public module paths -> where they live now
MOVED: dict[str, str] = {
    "tripletml.base": "tripletml.core.base",
    "tripletml.preprocessing": "tripletml.core.preprocessing",
    "tripletml.column_kinds": "tripletml.core.column_kinds",
    "tripletml.sharded": "tripletml.distributed.sharded",
    "tripletml.streaming": "tripletml.distributed.streaming",
    "tripletml.cluster": "tripletml.distributed.dask_search",
    "tripletml.index": "tripletml.search.index",
    "tripletml.neighbors": "tripletml.search.neighbors",
    "tripletml.demo": "tripletml.cli.demo",
    "tripletml.training": "tripletml.engine",
    "tripletml.training.partitioned": "tripletml.distributed.partitioned",
    **{f"tripletml.learners.{name}": f"tripletml.algorithms.{name}.estimator" for name in (
        "baselines", "comet", "factored", "itml", "kissme", "lfda", "lmnn", "loreta",
        "lowrank_dml", "mmc", "multilabel", "nca", "oasis", "rca", "scml", "sdca", "sml")},
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and hands out the module at its new
    path (the same module object, so classes and isinstance checks agree)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "tripletml.learners" or fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        if spec.name == "tripletml.learners":       # the old package: empty
            return None
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new} in tripletml 0.2; the old path goes in "
                      "0.3.", FutureWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):
        if module.__spec__.name == "tripletml.learners":
            module.__path__ = []


def install() -> None:
    """Put the finder in front of the import system (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
