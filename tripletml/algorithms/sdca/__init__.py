"""SDCA for relative similarity (Wu, Ding, Zhao, Miao & Hoi, AAAI 2015).

This folder holds the whole algorithm: ``distributed``, ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['SDCA', 'sdca_objectives']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.sdca.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
