"""Dense and sparse COMET estimators (Atzmon, Shalit & Chechik, "Learning
sparse metrics, one feature at a time", Algorithms 1 and 2).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['COMET', 'SparseCOMET', 'group_prox', 'comet_loss', 'comet_loss_derivative']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.comet.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
