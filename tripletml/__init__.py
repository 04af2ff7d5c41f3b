"""tripletml: fast metric and similarity learning from relative comparisons.

Learners share one scikit-learn style API (see :mod:`tripletml.base`):
``fit(X, y=None, *, triplets=None)``, ``similarity``, ``pair_score``,
``triplet_score``, ``score`` (leave-one-out mAP), ``save``.  The list of
learners is :mod:`tripletml._registry`; every public learner class is
importable from here.  :class:`AutoSimilarity` (not a learner of the
registry: a search over them) picks and tunes one by validation.

Everything here is imported lazily (PEP 562): ``import tripletml`` loads the
registry only; a learner's module (and its Numba kernels) is imported the
first time its class is asked for (``tripletml.OASIS``, ``from tripletml
import OASIS``), the base classes, :class:`AutoSimilarity`,
:func:`load_model` / :func:`save_model` and the submodules likewise.  No
module of the package imports this one, so the lazy imports close no circle.
"""
from __future__ import annotations

import importlib
from typing import Any

from ._registry import REGISTRY as _REGISTRY
from ._registry import learner_names
from ._version import __version__

#: public names defined in a module of the package: name -> module
_LAZY_NAMES: dict[str, str] = {
    "LearnerBase": "base", "TripletLearner": "base", "BilinearMixin": "base",
    "MahalanobisMixin": "base",
    "AutoSimilarity": "auto",
    "load_model": "persistence", "save_model": "persistence",
}
#: the learners, through the registry (which imports a learner's module on
#: first use of its class)
_LEARNERS = {e.name: e for e in _REGISTRY}

_SUBMODULES = frozenset({
    "datasets", "metrics", "triplets", "linalg", "reproduce", "cli", "preprocessing",
    "index", "neighbors", "plot", "cluster", "sharded", "streaming", "base", "learners",
    "solvers", "training", "persistence", "auto", "losses", "demo", "column_kinds", "pairs",
    "embedding",
})

__all__ = [
    "LearnerBase", "TripletLearner", "BilinearMixin", "MahalanobisMixin",
    *_LEARNERS,
    "AutoSimilarity", "load_model", "save_model", "learner_names", "datasets", "metrics", "pairs",
    "triplets", "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a learner, a public class or function, or a submodule on first
    use and cache it in the module namespace."""
    if name in _LEARNERS:
        value = _LEARNERS[name].cls
    elif name in _LAZY_NAMES:
        value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'tripletml' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
