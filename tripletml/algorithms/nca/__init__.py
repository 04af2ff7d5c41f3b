"""NCA: Neighborhood Components Analysis (Goldberger, Roweis, Hinton &
Salakhutdinov, "Neighborhood components analysis", NIPS 2004).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['NCA']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.nca.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
