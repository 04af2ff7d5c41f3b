"""tripletml: fast metric and similarity learning from relative comparisons.

Learners share one scikit-learn style API (see :mod:`tripletml.base`):
``fit(X, y=None, *, triplets=None)``, ``similarity``, ``pair_score``,
``decision_function``, ``score`` (leave-one-out mAP), ``save``.  The list of
learners is :mod:`tripletml._registry`; every public learner class is
importable from here.  :class:`AutoSimilarity` (not a learner of the
registry: a search over them) picks and tunes one by validation.
"""
from __future__ import annotations

import importlib

from ._registry import REGISTRY as _REGISTRY
from ._registry import learner_names
from .base import BilinearMixin, LearnerBase, MahalanobisMixin, TripletLearner
from .auto import AutoSimilarity
from .persistence import load_model

__version__ = "0.1.0"

for _entry in _REGISTRY:
    globals()[_entry.name] = _entry.cls
del _entry

__all__ = [
    "LearnerBase", "TripletLearner", "BilinearMixin", "MahalanobisMixin",
    *(e.name for e in _REGISTRY),
    "AutoSimilarity", "load_model", "learner_names", "datasets", "metrics", "triplets", "__version__",
]

_SUBMODULES = {"datasets", "metrics", "triplets", "linalg", "reproduce", "cli", "preprocessing",
               "index", "neighbors", "plot", "cluster", "sharded", "streaming"}


def __getattr__(name):  # lazy submodules: `tripletml.datasets.load(...)`
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tripletml' has no attribute {name!r}")
