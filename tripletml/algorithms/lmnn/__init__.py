"""LMNN: Large Margin Nearest Neighbor (Weinberger & Saul, "Distance metric
learning for large margin nearest neighbor classification", JMLR 10, 2009).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['LMNN']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.lmnn.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
