"""No-learning baselines reported by every paper: Euclidean distance and the
plain dot product (cosine similarity for l2-normalized data).

This folder holds the whole algorithm: ``estimator``.
"""
import importlib

__all__ = ['Euclidean', 'DotProduct']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.baselines.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
