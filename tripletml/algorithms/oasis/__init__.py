"""OASIS: Online Algorithm for Scalable Image Similarity (Chechik et al., JMLR 2010).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['OASIS']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.oasis.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
