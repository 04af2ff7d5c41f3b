"""LFDA: Local Fisher Discriminant Analysis (Sugiyama, "Dimensionality
reduction of multimodal labeled data by local Fisher discriminant
analysis", JMLR 8, 2007).

This folder holds the whole algorithm: ``estimator``.
"""
import importlib

__all__ = ['LFDA', 'lfda_scatters', 'lfda_components']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.lfda.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
