"""Multi-label ranking with a low-rank label-by-feature matrix (LORETA paper,
section 5.2).

This folder holds the whole algorithm: ``estimator``, ``kernels``.
"""
import importlib

__all__ = ['LORETAMultilabel', 'IterativePAMultilabel', 'MatrixPerceptron', 'auto_step_size_multilabel']


def __getattr__(name: str):
    """The estimator classes, imported on first use (the kernels can be
    imported without the estimator)."""
    if name in __all__:
        return getattr(importlib.import_module("tripletml.algorithms.multilabel.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
