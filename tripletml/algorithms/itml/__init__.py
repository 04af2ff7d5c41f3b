"""ITML: information-theoretic metric learning (Davis, Kulis, Jain, Sra &
Dhillon, ICML 2007) on the similar and dissimilar pairs of triplets.

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['ITML']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.itml.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
