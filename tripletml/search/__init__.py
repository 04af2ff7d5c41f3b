"""Search with a learned similarity: nearest-neighbor indexes
(:mod:`.index`) and k-NN classification (:mod:`.neighbors`)."""

import importlib as _importlib

#: the user-facing modules, reachable as attributes (``tripletml.search.index``)
_SUBMODULES = ('index', 'neighbors')


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
