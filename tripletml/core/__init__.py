"""What every learner shares: the small base classes and model-kind mixins
(:mod:`.base`; the factored kind ``W = A B^T`` and its initialization in
:mod:`.factored`), the supervision forms (:mod:`.tuples`), validation and
declared parameters, the fitted preprocessing and the model-file writer.

Imports nothing of :mod:`tripletml.algorithms`.
"""

import importlib as _importlib

#: the user-facing modules, reachable as attributes (``tripletml.core.base``)
_SUBMODULES = ('base', 'preprocessing', 'column_kinds')


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
