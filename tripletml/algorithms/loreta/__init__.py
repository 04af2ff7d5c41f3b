"""LORETA: online learning on the manifold of rank-k matrices
(Shalit, Weinshall & Chechik, NIPS 2010).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['LORETA']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.loreta.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
