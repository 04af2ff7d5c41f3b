"""Input and parameter validation shared by every estimator.

Every error raised here names the estimator (or function) that received the
bad input and says what is wrong, so users never see a bare NumPy traceback.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "check_X",
    "check_triplets",
    "check_scalar_param",
    "check_choice_param",
    "check_random_state",
]


def _owner(owner: Any) -> str:
    if owner is None:
        return "tripletml"
    if isinstance(owner, str):
        return owner
    return type(owner).__name__


def check_X(X: Any, owner: Any = None, *, accept_sparse: bool = True,
            n_features: int | None = None, min_samples: int = 1,
            name: str = "X") -> np.ndarray | sp.csr_matrix:
    """Validate a data matrix.

    Returns a C-contiguous float64 ndarray or a float64 CSR matrix with sorted
    indices (other sparse formats are converted to CSR).

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
    owner : estimator or str
        Named in error messages.
    accept_sparse : bool
        Whether scipy.sparse input is allowed.
    n_features : int, optional
        Required number of columns (e.g. ``n_features_in_`` of a fitted model).
    min_samples : int
        Minimum number of rows.
    name : str
        Name of the argument, for messages.
    """
    who = _owner(owner)
    if X is None:
        raise TypeError(f"{who}: {name} is None; expected a 2-D array or a scipy.sparse matrix.")
    if sp.issparse(X):
        if not accept_sparse:
            raise TypeError(f"{who}: {name} is a scipy.sparse matrix, which this method does "
                            "not accept; pass a dense array (X.toarray()).")
        X = sp.csr_matrix(X)  # copy-free when already CSR
        if np.iscomplexobj(X.data):
            raise TypeError(f"{who}: {name} is complex; only real data is supported.")
        if X.dtype != np.float64:
            if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
                raise TypeError(f"{who}: {name} has non-numeric dtype {X.dtype}.")
            X = X.astype(np.float64)
        if not X.has_sorted_indices:
            X = X.copy()
            X.sort_indices()
        if X.has_canonical_format is False:
            X = X.copy()
            X.sum_duplicates()
        values = X.data
    else:
        if isinstance(X, (str, bytes)):
            raise TypeError(f"{who}: {name} must be a 2-D numeric array, got a string.")
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists and friends
            raise ValueError(f"{who}: {name} could not be converted to an array: {exc}") from None
        if arr.dtype == object:
            if any(isinstance(v, (str, bytes)) for v in arr.flat):
                raise TypeError(f"{who}: {name} must be numeric; it holds strings.")
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"{who}: {name} must be numeric; got an object array that "
                                "cannot be converted to float.") from None
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise TypeError(f"{who}: {name} must be numeric, got dtype {arr.dtype}.")
        if np.iscomplexobj(arr):
            raise TypeError(f"{who}: {name} is complex; only real data is supported.")
        if arr.ndim != 2:
            hint = " Reshape 1-D data with X.reshape(-1, 1) (one feature) or X.reshape(1, -1) (one sample)." if arr.ndim == 1 else ""
            raise ValueError(f"{who}: {name} must be 2-D (n_samples, n_features), got an array "
                             f"with shape {arr.shape}.{hint}")
        X = np.ascontiguousarray(arr, dtype=np.float64)
        values = X
    n, d = X.shape
    if n < min_samples:
        raise ValueError(f"{who}: {name} has {n} sample(s); at least {min_samples} required.")
    if d == 0:
        raise ValueError(f"{who}: {name} has 0 features; at least 1 required.")
    if not np.isfinite(values).all():
        raise ValueError(f"{who}: {name} contains NaN or infinity.")
    if n_features is not None and d != n_features:
        raise ValueError(f"{who}: {name} has {d} features, but the model was fitted with "
                         f"{n_features} features.")
    return X


def check_triplets(triplets: Any, n_samples: int, owner: Any = None,
                   name: str = "triplets") -> np.ndarray:
    """Validate a triplet index array.

    A triplet is a row ``(query, positive, negative)`` of integer indices into
    the rows of X.  Returns a C-contiguous int64 array of shape (m, 3).
    """
    who = _owner(owner)
    if triplets is None:
        raise TypeError(f"{who}: {name} is None; expected an integer array of shape (m, 3).")
    if sp.issparse(triplets):
        raise TypeError(f"{who}: {name} must be a dense integer array of shape (m, 3).")
    try:
        t = np.asarray(triplets)
    except ValueError:  # ragged nested lists
        raise ValueError(f"{who}: {name} must be a rectangular (n_triplets, 3) integer array; "
                         "got rows of different lengths.") from None
    if t.ndim != 2 or t.shape[1] != 3:
        raise ValueError(f"{who}: {name} must have shape (n_triplets, 3) holding (query, "
                         f"positive, negative) row indices into X; got shape {t.shape}.")
    if t.shape[0] == 0:
        raise ValueError(f"{who}: {name} is empty; at least one triplet is required.")
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"{who}: {name} must hold integer indices, got dtype {t.dtype}.")
    if t.dtype.kind == "u" and t.max() >= n_samples:
        raise ValueError(f"{who}: {name} index {t.max()} is out of range for X with "
                         f"{n_samples} rows (valid: 0..{n_samples - 1}).")
    t = np.ascontiguousarray(t, dtype=np.int64)
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= n_samples:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{who}: {name} index {bad} is out of range for X with {n_samples} "
                         f"rows (valid: 0..{n_samples - 1}).")
    return t


def check_scalar_param(value: Any, name: str, owner: Any, *, kind: str = "real",
                       low: float | None = None, high: float | None = None,
                       low_inclusive: bool = True, high_inclusive: bool = True,
                       allow_none: bool = False) -> Any:
    """Check a numeric hyper-parameter with :mod:`numbers` (NumPy scalars pass).

    ``kind`` is ``"int"`` (``numbers.Integral``) or ``"real"`` (``numbers.Real``).
    Booleans are rejected for both.
    """
    who = _owner(owner)
    if value is None and allow_none:
        return None
    cls = numbers.Integral if kind == "int" else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, cls):
        expected = "an integer" if kind == "int" else "a real number"
        raise TypeError(f"{who}: parameter {name}={value!r} must be {expected}"
                        f"{' or None' if allow_none else ''}.")
    if kind == "real" and not np.isfinite(value):
        raise ValueError(f"{who}: parameter {name}={value!r} must be finite.")
    if low is not None and (value < low or (value == low and not low_inclusive)):
        op = ">=" if low_inclusive else ">"
        raise ValueError(f"{who}: parameter {name}={value!r} must be {op} {low}.")
    if high is not None and (value > high or (value == high and not high_inclusive)):
        op = "<=" if high_inclusive else "<"
        raise ValueError(f"{who}: parameter {name}={value!r} must be {op} {high}.")
    return int(value) if kind == "int" else float(value)


def check_choice_param(value: Any, name: str, owner: Any, choices: tuple) -> Any:
    """Check that a string-like parameter is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{_owner(owner)}: parameter {name}={value!r} must be one of "
                         f"{', '.join(repr(c) for c in choices)}.")
    return value


def check_random_state(seed: Any, owner: Any = None) -> np.random.Generator:
    """Turn ``random_state`` into a :class:`numpy.random.Generator`.

    Accepts None, an integer (Python or NumPy), a ``Generator`` or a legacy
    ``RandomState`` (its state seeds a new Generator).
    """
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    if isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)):
        if seed < 0:
            raise ValueError(f"{_owner(owner)}: random_state={seed} must be non-negative.")
        return np.random.default_rng(int(seed))
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise TypeError(f"{_owner(owner)}: random_state={seed!r} must be None, an int, a "
                    "numpy Generator or RandomState.")


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``;
    None when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import os
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_dense_memory(n_bytes: int, owner: Any, what: str) -> None:
    """Raise a clear MemoryError before allocating ``n_bytes`` when the
    machine does not have them (instead of exhausting memory or swapping)."""
    avail = available_memory()
    if avail is not None and n_bytes > avail:
        raise MemoryError(f"{_owner(owner)}: {what}; it needs about {n_bytes / 2**30:.1f} GiB "
                          f"but only {avail / 2**30:.1f} GiB is available.")
