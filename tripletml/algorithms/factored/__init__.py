"""Bilinear similarities on a factored model ``W = A B^T`` (rank k), and the
baselines the LORETA paper compares with (its section 5.1):

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['DEFAULT_RANK', 'resolve_rank', 'FactoredBilinearMixin', 'FactoredGD', 'IterativePA', 'NaivePA', 'init_factors', 'LOWRANK_PARAMS', 'PINV_PARAMS', 'column_energy', 'live_axes', 'Spectrum', 'spectrum_from', 'data_spectrum', 'second_moment', 'spectral_rank']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.factored.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
