"""RCA: Relevant Component Analysis, a Mahalanobis metric in closed form from
chunklets of equivalent points (Bar-Hillel, Hertz, Shental & Weinshall,
"Learning a Mahalanobis metric from equivalence constraints", JMLR 6, 2005).

This folder holds the whole algorithm: ``estimator``.
"""
import importlib

__all__ = ['RCA']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.rca.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
