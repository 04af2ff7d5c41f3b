"""MMC: Mahalanobis Metric for Clustering (Xing, Ng, Jordan & Russell,
"Distance metric learning, with application to clustering with
side-information", NIPS 2002), from similar and dissimilar pairs.

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['MMC']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.mmc.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
