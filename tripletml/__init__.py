"""tripletml: fast metric and similarity learning from relative comparisons.

Learners share one scikit-learn style API (see :mod:`tripletml.core.base`):
``fit(X, y=None, *, triplets=None)``, ``similarity``, ``pair_score``,
``triplet_score``, ``score`` (leave-one-out mAP), ``save``.  The list of
learners is :mod:`tripletml.registry`; every public learner class is
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

from tripletml.registry import FEATURE_KINDS as _FEATURE_KINDS
from tripletml.registry import REGISTRY as _REGISTRY
from tripletml.registry import learner_names
from tripletml._version import __version__
from tripletml._moved import install as _install_moved

_install_moved()     # the 0.1 module paths, until 0.3

#: public names defined in a module of the package: name -> module
_LAZY_NAMES: dict[str, str] = {
    "LearnerBase": "core.base", "TripletLearner": "core.base", "BilinearMixin": "core.base",
    "MahalanobisMixin": "core.base",
    "AutoSimilarity": "auto",
    "load_model": "persistence", "save_model": "persistence",
}
#: the learners on features, through the registry (which imports a learner's
#: module on first use of its class); the item embeddings stay in
#: tripletml.embedding
_LEARNERS = {e.name: e for e in _REGISTRY if e.kind in _FEATURE_KINDS}

_SUBMODULES = frozenset({
    "algorithms", "auto", "cli", "core", "datasets", "distributed", "embedding", "engine",
    "linalg", "losses", "metrics", "pairs", "persistence", "plot", "registry", "reproduce",
    "search", "triplets",
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
