"""Low-rank Mahalanobis DML by SGD with incremental SVD (Zhang & Zhang,
"Efficient stochastic optimization for low-rank distance metric learning",
AAAI 2017), with the five baselines of its Figure 2.

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['LowRankDML']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.lowrank_dml.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
