"""SCML: Sparse Compositional Metric Learning (Shi, Bellet & Sha, AAAI
2014), a sparse non-negative combination of rank-one metrics learned from
triplets.  The optimization is :mod:`tripletml.algorithms.scml.kernels`.

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['SCML']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.scml.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
