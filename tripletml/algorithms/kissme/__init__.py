"""KISSME: a Mahalanobis metric in closed form from the triplets' similar and
dissimilar pairs (Koestinger, Hirzer, Wohlhart, Roth & Bischof, "Large scale
metric learning from equivalence constraints", CVPR 2012).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['KISSME']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.kissme.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
