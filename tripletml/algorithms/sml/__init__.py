"""Sparse metric learning by smooth optimization (Ying, Huang & Campbell,
"Sparse metric learning via smooth optimization", NIPS 2009).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['SML']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.sml.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
