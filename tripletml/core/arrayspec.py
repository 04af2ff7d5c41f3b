"""Declarations of a learner's fitted arrays, checked by ``load_model``.

Each learner class lists the arrays its kernels index, so a crafted model
file cannot hand a Numba kernel an array of the wrong shape or dtype::

    _fitted_arrays = {
        "W_": ArraySpec(("d", "d")),                    # float64, finite
        "alpha_": ArraySpec(("=m",)),
        "dual_ids_": ArraySpec(("=m",), dtype="i", low=0, high="n_samples_fit_"),
        "A_": ArraySpec(("d", "rank")),
    }

Shape entries: an int (exact), None (any length), ``"d"`` (the width of
the rows the solver saw: ``n_features_preprocessed_`` when the model has it,
d + 1 with a lifting preprocessing, else ``n_features_in_``), the name of an
int parameter or fitted attribute of the model (``"rank"``, ``"n_labels_"``, ``"rank_"``), or ``"=sym"``: every
entry with the same symbol must have the same length.  A name entry may be a
sum of names, ``"d+fit_intercept"`` (a bool counts 0 or 1).  ``dtype`` is a
NumPy kind: ``"f"`` (float64, all finite unless ``finite=False``), ``"i"``
(int64, values in ``[low, high)`` when given; ``high`` may name an int
attribute like a shape entry) or ``"b"`` (bool).  ``optional=True``: the
array may be absent (e.g. only kept for some settings).

Every ndarray fitted attribute a learner stores must be declared: a file
holding an undeclared array is refused before the array is read, and a
declared, non-optional array that is missing is refused too.

The checks (:func:`check_header` on the shape and dtype a file declares,
before any data is read; :func:`check_values` on the data) are shared by
:func:`tripletml.load_model` and :func:`check_fitted_arrays`, which checks a
model in memory.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

__all__ = ["ArraySpec", "check_header", "check_values", "check_fitted_arrays",
           "expected_nbytes", "resolve_dim"]

Dim = Union[int, str, None]

_DTYPES = {"f": np.dtype(np.float64), "i": np.dtype(np.int64), "b": np.dtype(np.bool_)}


@dataclass(frozen=True)
class ArraySpec:
    shape: tuple[Dim, ...]
    dtype: str = "f"
    finite: bool = True
    low: Optional[int] = None
    high: Dim = None
    optional: bool = False


def _int_value(model: Any, name: str) -> int:
    """The value of one term of a shape entry (``"d"``, a parameter or a
    fitted attribute): a non-negative int (a bool counts 0/1)."""
    if name == "d":     # the width of the rows the solver saw
        attr = ("n_features_preprocessed_" if hasattr(model, "n_features_preprocessed_")
                else "n_features_in_")
    else:
        attr = name
    if not hasattr(model, attr):
        raise ValueError(f"shape symbol {name!r} names no parameter or attribute")
    value = getattr(model, attr)
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{attr}={value!r} must be a non-negative integer")
    return int(value)


def resolve_dim(model: Any, dim: Dim) -> Optional[int]:
    """The length a shape entry requires (None: free or bound by ``"=sym"``)."""
    if dim is None or (isinstance(dim, str) and dim.startswith("=")):
        return None
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        return int(dim)
    if isinstance(dim, str):
        return sum(_int_value(model, term.strip()) for term in dim.split("+"))
    raise TypeError(f"invalid shape entry {dim!r} in an ArraySpec")


def check_header(model: Any, name: str, spec: ArraySpec, shape: tuple, dtype: np.dtype,
                 bindings: dict) -> None:
    """Check an array's declared shape and dtype against ``spec`` (before its
    data is read).  ``bindings`` collects the lengths of ``"=sym"`` entries
    across the arrays of one model.  Raises ValueError."""
    want = _DTYPES[spec.dtype]
    if np.dtype(dtype) != want:
        raise ValueError(f"{name} has dtype {np.dtype(dtype).str}, expected {want.name}")
    if len(shape) != len(spec.shape):
        raise ValueError(f"{name} has shape {tuple(shape)}, expected {len(spec.shape)} "
                         f"dimension(s) {spec.shape}")
    for axis, (n, dim) in enumerate(zip(shape, spec.shape)):
        req = resolve_dim(model, dim)
        if req is not None and n != req:
            raise ValueError(f"{name} has shape {tuple(shape)}, expected {dim!r}={req} along "
                             f"axis {axis}")
        if isinstance(dim, str) and dim.startswith("="):
            bound = bindings.setdefault(dim, (n, name))
            if bound[0] != n:
                raise ValueError(f"{name} has length {n} along axis {axis}, but {bound[1]} "
                                 f"has {bound[0]} (both {dim!r})")


def expected_nbytes(shape: tuple, dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize


def check_values(model: Any, name: str, spec: ArraySpec, arr: np.ndarray) -> None:
    """Finiteness of float arrays and the ``[low, high)`` bounds of int arrays."""
    if spec.dtype == "f" and spec.finite and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity")
    if spec.dtype == "i" and arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if spec.low is not None and lo < spec.low:
            raise ValueError(f"{name} holds {lo}, below its lower bound {spec.low}")
        if spec.high is not None:
            high = resolve_dim(model, spec.high)
            if high is not None and hi >= high:
                raise ValueError(f"{name} holds {hi}, not below {spec.high!r}={high}")


def check_fitted_arrays(model: Any, specs: dict | None = None) -> None:
    """Check every declared array of a model in memory (presence, shape,
    dtype, values) and that no undeclared ndarray fitted attribute exists."""
    specs = type(model)._fitted_arrays if specs is None else specs
    bindings: dict = {}
    for name, value in vars(model).items():
        if (name.endswith("_") and not name.startswith("_") and isinstance(value, np.ndarray)
                and name not in specs and name != "feature_names_in_"):
            raise ValueError(f"{name} is not a declared fitted array of "
                             f"{type(model).__name__}")
    for name, spec in specs.items():
        if name not in vars(model):
            if spec.optional:
                continue
            raise ValueError(f"the fitted array {name} is missing")
        arr = vars(model)[name]
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} is a {type(arr).__name__}, not an array")
        check_header(model, name, spec, arr.shape, arr.dtype, bindings)
        check_values(model, name, spec, arr)
