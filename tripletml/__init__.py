"""tripletml: fast metric and similarity learning from relative comparisons.

Learners share one scikit-learn style API (see :mod:`tripletml.base`):
``fit(X, y=None, *, triplets=None)``, ``similarity``, ``pair_score``,
``decision_function``, ``score`` (leave-one-out mAP), ``save``.
"""
from __future__ import annotations

import importlib

from .base import BilinearMixin, MahalanobisMixin, TripletLearner
from .learners.baselines import DotProduct, Euclidean
from .learners.oasis import OASIS
from .learners.sdca import SDCA
from .learners.factored import FactoredGD, IterativePA, NaivePA
from .learners.comet import COMET, SparseCOMET
from .learners.loreta import LORETA
from .learners.lowrank_dml import LowRankDML
from .learners.sml import SML
from .learners.multilabel import IterativePAMultilabel, LORETAMultilabel, MatrixPerceptron
from .persistence import load_model

__version__ = "0.1.0"

__all__ = [
    "TripletLearner", "BilinearMixin", "MahalanobisMixin",
    "Euclidean", "DotProduct", "OASIS", "SDCA", "LORETA", "COMET", "SparseCOMET", "LowRankDML", "SML", "FactoredGD", "IterativePA", "NaivePA",
    "LORETAMultilabel", "IterativePAMultilabel", "MatrixPerceptron",
    "load_model", "datasets", "metrics", "triplets", "__version__",
]

_SUBMODULES = {"datasets", "metrics", "triplets", "linalg", "reproduce", "cli"}


def __getattr__(name):  # lazy submodules: `tripletml.datasets.load(...)`
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tripletml' has no attribute {name!r}")
