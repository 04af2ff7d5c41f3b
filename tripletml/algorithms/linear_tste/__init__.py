"""LinearTSTE: t-STE's triplet likelihood (van der Maaten & Weinberger,
"Stochastic triplet embedding", MLSP 2012) on a linear map of the features.

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['LinearTSTE']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.linear_tste.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
