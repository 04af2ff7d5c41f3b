"""Input and parameter validation shared by every estimator.

Every error raised here names the estimator (or function) that received the
bad input and says what is wrong, so users never see a bare NumPy traceback.
"""
from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "MAX_ABS_VALUE",
    "check_X",
    "check_triplets",
    "check_index_tuples",
    "check_scalar_param",
    "check_choice_param",
    "as_generator",
    "ComplexDataError",
]


class ComplexDataError(ValueError, TypeError):
    """Complex X: a ValueError worded as scikit-learn's ("Complex data not
    supported").  It is also a TypeError, the class tripletml raised before
    issue #25, so that ``except TypeError`` keeps working for one release."""


# Largest |value| check_X accepts (see check_X's Notes).
MAX_ABS_VALUE = 1e100

_INDEX_DTYPES = (np.int32, np.int64)


def _as_1d(arr: Any, what: str, who: str, name: str) -> np.ndarray:
    try:
        a = np.asarray(arr)
    except Exception as exc:  # noqa: BLE001 - anything odd stored on the matrix
        raise ValueError(f"{who}: {name} is a malformed sparse matrix: its {what} array "
                         f"cannot be read ({exc}).") from None
    if a.ndim != 1:
        raise ValueError(f"{who}: {name} is a malformed sparse matrix: its {what} array "
                         f"must be 1-D, got shape {a.shape}.")
    return a


def _index_array(arr: Any, what: str, who: str, name: str) -> np.ndarray:
    a = _as_1d(arr, what, who, name)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{who}: {name} is a malformed sparse matrix: its {what} array "
                         f"must hold integers, got dtype {a.dtype}.")
    return a


def _check_compressed(indptr: Any, indices: Any, n_major: int, n_minor: int, n_data: int,
                      who: str, name: str, major: str, minor: str
                      ) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Check the index structure of a compressed (CSR/CSC/BSR) matrix in O(nnz).

    Returns ``(indptr, indices, nnz, canonical)`` where ``canonical`` is True when
    the indices of every major slice are strictly increasing (sorted, no duplicates).
    """
    bad = f"{who}: {name} is a malformed sparse matrix"
    indptr = _index_array(indptr, "indptr", who, name)
    indices = _index_array(indices, "indices", who, name)
    if indptr.shape[0] != n_major + 1:
        raise ValueError(f"{bad}: indptr has {indptr.shape[0]} entries, expected "
                         f"{n_major + 1} (number of {major}s + 1).")
    if indptr[0] != 0:
        raise ValueError(f"{bad}: indptr[0] is {indptr[0]}, expected 0.")
    if n_major and (np.diff(indptr) < 0).any():
        raise ValueError(f"{bad}: indptr is not non-decreasing.")
    nnz = int(indptr[-1])
    if indices.shape[0] != n_data:
        raise ValueError(f"{bad}: indices has {indices.shape[0]} entries but data has "
                         f"{n_data}.")
    if nnz > indices.shape[0]:
        raise ValueError(f"{bad}: indptr[-1] is {nnz} but there are only "
                         f"{indices.shape[0]} stored entries.")
    indices = indices[:nnz]
    canonical = True
    if nnz:
        lo, hi = indices.min(), indices.max()
        if lo < 0 or hi >= n_minor:
            badv = lo if lo < 0 else hi
            raise ValueError(f"{bad}: {minor} index {badv} is out of range for "
                             f"{n_minor} {minor}s (valid: 0..{n_minor - 1}).")
        inc = indices[1:] > indices[:-1]          # strictly increasing (no int64 copy)
        # positions k where indices[k+1] starts a new slice do not count
        starts = indptr[1:-1]
        starts = starts[(starts > 0) & (starts < nnz)] - 1
        inc[starts] = True
        canonical = bool(inc.all())
    if indices.dtype not in _INDEX_DTYPES:
        indices = indices.astype(np.int64)
    if indptr.dtype not in _INDEX_DTYPES:
        indptr = indptr.astype(np.int64)
    return indptr, indices, nnz, canonical


def _data_array(data: Any, who: str, name: str) -> np.ndarray:
    a = _as_1d(data, "data", who, name)
    if np.iscomplexobj(a):
        raise TypeError(f"{who}: {name} is complex; only real data is supported.")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise TypeError(f"{who}: {name} has non-numeric dtype {a.dtype}.")
    return a


def _checked_csr(X: Any, who: str, name: str) -> sp.csr_matrix:
    """Validate the structure of any scipy.sparse matrix or array in O(nnz) and
    return a float64 CSR matrix with canonical indices (sorted, no duplicates).

    Nothing is handed to SciPy's compiled conversions before its index arrays are
    checked: ``tocsr`` on a CSC or COO matrix with out-of-range indices writes out
    of bounds.  The input is never modified; its arrays are shared when no fix-up
    is needed.
    """
    bad = f"{who}: {name} is a malformed sparse matrix"
    shape = getattr(X, "shape", None)
    if not isinstance(shape, tuple) or len(shape) != 2:
        raise ValueError(f"{who}: {name} must be 2-D (n_samples, n_features), got a "
                         f"sparse matrix with shape {shape}.")
    try:
        n, d = (operator.index(s) for s in shape)
    except TypeError:
        raise ValueError(f"{bad}: shape {shape} is not a pair of integers.") from None
    if n < 0 or d < 0:
        raise ValueError(f"{bad}: negative shape {shape}.")
    fmt = getattr(X, "format", None)
    if fmt in ("csr", "csc"):
        data = _data_array(X.data, who, name)
        n_major, n_minor = (n, d) if fmt == "csr" else (d, n)
        major, minor = ("row", "column") if fmt == "csr" else ("column", "row")
        indptr, indices, nnz, canonical = _check_compressed(
            X.indptr, X.indices, n_major, n_minor, data.shape[0], who, name, major, minor)
        data = data[:nnz]
        cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
        Y = cls((data, indices, indptr), shape=(n, d), copy=False)
        if fmt == "csr" and canonical:
            Y.has_sorted_indices = True
            Y.has_canonical_format = True
            return Y
        Y.has_sorted_indices = canonical
        Y.has_canonical_format = canonical
        if not canonical:
            Y = Y.copy()
            Y.sum_duplicates()  # sorts too; on a copy, never the caller's arrays
        return sp.csr_matrix(Y.tocsr())
    if fmt == "bsr":
        R, C = X.blocksize
        if R < 1 or C < 1 or n % R or d % C:
            raise ValueError(f"{bad}: blocksize {X.blocksize} does not divide shape {shape}.")
        data = np.asarray(X.data)
        if data.ndim != 3 or data.shape[1:] != (R, C):
            raise ValueError(f"{bad}: BSR data has shape {data.shape}, expected (nnzb, {R}, {C}).")
        _check_compressed(X.indptr, X.indices, n // R, d // C, data.shape[0], who, name,
                          "block row", "block column")
        _data_array(data.reshape(-1), who, name)  # dtype check before conversion
        X = X.tocoo()
    elif fmt != "coo":
        try:  # lil, dok, dia: conversions written in Python/NumPy
            X = X.tocoo()
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{bad}: it cannot be converted to COO ({exc}).") from None
    # COO: check every coordinate before SciPy's compiled coo -> csr pass
    coords = getattr(X, "coords", None)
    if coords is None:
        coords = (X.row, X.col)
    if len(coords) != 2:
        raise ValueError(f"{who}: {name} must be 2-D, got {len(coords)} coordinate arrays.")
    data = _data_array(X.data, who, name)
    row = _index_array(coords[0], "row", who, name)
    col = _index_array(coords[1], "col", who, name)
    if not (row.shape[0] == col.shape[0] == data.shape[0]):
        raise ValueError(f"{bad}: row, col and data have {row.shape[0]}, {col.shape[0]} and "
                         f"{data.shape[0]} entries.")
    for arr, lim, what in ((row, n, "row"), (col, d, "column")):
        if arr.size and (arr.min() < 0 or arr.max() >= lim):
            badv = arr.min() if arr.min() < 0 else arr.max()
            raise ValueError(f"{bad}: {what} index {badv} is out of range for {lim} "
                             f"{what}s (valid: 0..{lim - 1}).")
    Y = sp.coo_matrix((data, (row.astype(np.int64), col.astype(np.int64))), shape=(n, d))
    Y = Y.tocsr()
    Y.sum_duplicates()
    return sp.csr_matrix(Y)


def _owner(owner: Any) -> str:
    if owner is None:
        return "tripletml"
    if isinstance(owner, str):
        return owner
    return type(owner).__name__


def _dense_float64(X: Any, who: str, name: str) -> np.ndarray:
    """Dense ``X`` of :func:`check_X` as a C-contiguous 2-D float64 array:
    strings, non-numeric and object data that cannot be converted are a
    TypeError, complex data a :class:`ComplexDataError`, another number of
    dimensions a ValueError (with scikit-learn's "Reshape your data")."""
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
        except (TypeError, ValueError) as exc:
            # scikit-learn's wording: NumPy's "float() argument must be a
            # string or a real number, not 'dict'"
            raise TypeError(f"{who}: {name} must be numeric; got an object array that "
                            f"cannot be converted to float ({exc}).") from None
        except OverflowError:
            raise ValueError(f"{who}: {name} holds a number too large for float64; "
                             "scale the features.") from None
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{who}: {name} must be numeric, got dtype {arr.dtype}.")
    if np.iscomplexobj(arr):
        raise ComplexDataError(f"{who}: {name} is complex. Complex data not supported; "
                               "only real data is.")
    if arr.ndim != 2:
        hint = (f" Reshape your data either using {name}.reshape(-1, 1) if your data has "
                f"a single feature or {name}.reshape(1, -1) if it contains a single "
                "sample." if arr.ndim == 1 else "")
        raise ValueError(f"{who}: {name} must be 2-D (n_samples, n_features), got an array "
                         f"with shape {arr.shape}.{hint}")
    with np.errstate(over="ignore"):  # float128 beyond float64 -> inf, refused below
        return np.ascontiguousarray(arr, dtype=np.float64)


def _check_finite(values: np.ndarray, who: str, name: str, max_abs: float | None) -> None:
    """The values of :func:`check_X`: no NaN or infinity, none of magnitude
    above ``max_abs`` (when given)."""
    # two reductions, no temporary: NaN propagates through both
    lo, hi = float(values.min()), float(values.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"{who}: {name} contains NaN or infinity.")
    if max_abs is not None and max(-lo, hi) > max_abs:
        raise ValueError(
            f"{who}: {name} has a value of magnitude {max(-lo, hi):.3g}, above the "
            f"{max_abs:.0e} accepted here: squared distances and "
            "bilinear forms of such values overflow float64. Scale the features "
            "(e.g. sklearn.preprocessing.MaxAbsScaler or StandardScaler).")


def check_X(X: Any, owner: Any = None, *, accept_sparse: bool = True,
            n_features: int | None = None, min_samples: int = 1,
            name: str = "X", max_abs: float | None = None) -> np.ndarray | sp.csr_matrix:
    """Validate a data matrix.

    Returns a C-contiguous float64 ndarray or a float64 CSR matrix in canonical
    form (sorted indices, no duplicates; other sparse formats are converted to
    CSR).  Every Numba kernel of tripletml indexes rows and columns of what this
    function returns without bounds checks, so every public entry point that
    takes X must pass it through here first.

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
    max_abs : float, optional
        Refuse values with ``|x| > max_abs`` (ValueError advising to scale the
        features).  Pass :data:`MAX_ABS_VALUE` where an overflow would be silent
        (prediction: ``similarity``/``transform`` return inf or NaN with only a
        RuntimeWarning).  None (default) checks finiteness only: in ``fit`` a
        learner's divergence watch stops such data with its FloatingPointError
        and the same advice.

    Raises
    ------
    TypeError
        None, strings, non-numeric or object data, complex sparse data;
        sparse input where ``accept_sparse`` is False.
    ValueError
        Not 2-D, too few samples, no features, NaN or infinity, a value of
        magnitude above ``max_abs``, the wrong number of features, or a
        malformed sparse matrix.  Complex dense data raises
        :class:`ComplexDataError` (a ValueError and a TypeError).

    The messages start with the owner's name and contain scikit-learn's
    wording for the same errors (``"Complex data not supported"``, ``"0
    sample(s) (shape=(0, 3)) while a minimum of 1 is required"``, ``"Reshape
    your data"``, NumPy's ``"float() argument must be a string or a real
    number"``), so scikit-learn's estimator checks recognize them.

    Notes
    -----
    A sparse matrix's structure is verified in O(nnz) before anything reads
    through its indices (SciPy's constructor does not check them, and its
    compiled ``tocsr`` writes out of bounds on bad COO/CSC indices): index
    arrays 1-D integers, ``len(indptr) == n_major + 1``, ``indptr[0] == 0``,
    ``indptr`` non-decreasing, ``indptr[-1] <= len(indices) == len(data)``,
    every index in range.  Unsorted or duplicate indices are legal and are
    sorted / summed on a copy; the caller's matrix is never modified.

    ``MAX_ABS_VALUE`` (1e100) is the recommended ``max_abs``: every learner
    forms squared distances or bilinear forms ``x^T W x``, which overflow
    float64 (max 1.8e308) once ``|x|`` nears 1e154.  1e100 leaves room for a
    sum over 1e8 features and model entries up to 1e50 (``1e200 * 1e8 * 1e50``
    is still finite) and is beyond any measured quantity, so no real data set
    is refused.  It is not applied by default because training on such data
    already stops with the learner's FloatingPointError ("scale the features"),
    which the divergence tests rely on.
    """
    who = _owner(owner)
    if X is None:
        raise TypeError(f"{who}: {name} is None; expected a 2-D array or a scipy.sparse matrix.")
    if sp.issparse(X):
        if not accept_sparse:
            raise TypeError(f"{who}: {name} is a scipy.sparse matrix, which this method does "
                            "not accept; pass a dense array (X.toarray()).")
        X = _checked_csr(X, who, name)
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        values = X.data
    else:
        X = _dense_float64(X, who, name)
        values = X
    n, d = X.shape
    # scikit-learn's wording ("Found array with 0 sample(s) (shape=(0, 3)) while
    # a minimum of 1 is required."), after the estimator's name
    if n < min_samples:
        raise ValueError(f"{who}: {name} has {n} sample(s) (shape={X.shape}) while a minimum "
                         f"of {min_samples} is required.")
    if d == 0:
        raise ValueError(f"{who}: {name} has 0 features: 0 feature(s) (shape={X.shape}) "
                         "while a minimum of 1 is required.")
    if values.size:
        _check_finite(values, who, name, max_abs)
    if n_features is not None and d != n_features:
        raise ValueError(f"{who}: {name} has {d} features, but {who} is expecting "
                         f"{n_features} features as input (the model was fitted with "
                         f"{n_features} features).")
    return X


def check_index_tuples(x: Any, width: int, n_samples: int, who: str, name: str,
                       what: str) -> np.ndarray:
    """An ``(m, width)`` array of row indices into ``n_samples`` rows as
    C-contiguous int64 (the one check of index triplets and pairs): dense,
    rectangular, non-empty, integer, every index in range.  ``what`` says
    the expected shape and meaning in the errors, e.g. ``"(n_pairs, 2)
    holding row indices into X"``."""
    if x is None:
        raise TypeError(f"{who}: {name} is None; expected an integer array of shape "
                        f"(m, {width}).")
    if sp.issparse(x):
        raise TypeError(f"{who}: {name} must be a dense integer array of shape (m, {width}).")
    try:
        t = np.asarray(x)
    except ValueError:  # ragged nested lists
        raise ValueError(f"{who}: {name} must be a rectangular {what.split(' ')[0]} integer "
                         "array; got rows of different lengths.") from None
    if t.ndim != 2 or t.shape[1] != width:
        raise ValueError(f"{who}: {name} must have shape {what}; got shape {t.shape}.")
    if t.shape[0] == 0:
        raise ValueError(f"{who}: {name} is empty; at least one "
                         f"{'triplet' if width == 3 else 'pair'} is required.")
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


def check_triplets(triplets: Any, n_samples: int, owner: Any = None,
                   name: str = "triplets", *, allow_degenerate: bool = True) -> np.ndarray:
    """Validate a triplet index array.

    A triplet is a row ``(query, positive, negative)`` of integer indices into
    the rows of X.  Returns a C-contiguous int64 array of shape (m, 3).

    ``allow_degenerate=False`` (what training passes: ``fit``,
    ``partial_fit``, :func:`tripletml.distributed.streaming.fit_stream` and partitioned
    training) also refuses degenerate triplets, whose indices are not three
    distinct rows: ``q = p+``, ``q = p-`` or ``p+ = p-``.  The ValueError
    names the owner, how many rows are degenerate, the first row numbers (at
    most 10) and the kind of the first.  Scoring keeps the default (True): a
    degenerate triplet's margin is simply 0 (``p+ = p-``) or harmless.
    Identical points at distinct indices (duplicated rows of X) are not
    degenerate.
    """
    who = _owner(owner)
    t = check_index_tuples(triplets, 3, n_samples, who, name,
                           "(n_triplets, 3) holding (query, positive, negative) row indices "
                           "into X")
    if not allow_degenerate:
        _refuse_degenerate(t, who, name)
    return t


#: the kinds of a degenerate triplet, in the order one is named
_DEGENERATE_KINDS = (((0, 1), "q = p+ (the query is its own positive)"),
                     ((0, 2), "q = p- (the query is its own negative)"),
                     ((1, 2), "p+ = p- (the positive is also the negative)"))
_MAX_ROWS_NAMED = 10


def _refuse_degenerate(t: np.ndarray, who: str, name: str) -> None:
    """Raise a ValueError when a row of ``t`` repeats an index."""
    same = [t[:, a] == t[:, b] for (a, b), _ in _DEGENERATE_KINDS]
    bad = np.flatnonzero(same[0] | same[1] | same[2])
    if bad.size == 0:
        return
    first = int(bad[0])
    kind = next(text for (_, text), s in zip(_DEGENERATE_KINDS, same) if s[first])
    rows = ", ".join(str(int(r)) for r in bad[:_MAX_ROWS_NAMED])
    more = f", ... ({bad.size - _MAX_ROWS_NAMED} more)" if bad.size > _MAX_ROWS_NAMED else ""
    verb = "is" if bad.size == 1 else "are"
    q, pp, pm = (int(v) for v in t[first])
    raise ValueError(f"{who}: {bad.size} of the {t.shape[0]} rows of {name} {verb} degenerate "
                     f"(row{'s' if bad.size > 1 else ''} {rows}{more}); the first, row {first} "
                     f"= ({q}, {pp}, {pm}), has {kind}.  Training needs three distinct row "
                     "indices (query, positive, negative) per triplet; remove those rows (a "
                     "duplicated point at a distinct index is allowed).")


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


def as_generator(seed: Any, owner: Any = None) -> np.random.Generator:
    """Turn ``random_state`` into a :class:`numpy.random.Generator`.

    Accepts None, an integer (Python or NumPy), a ``Generator`` (returned
    as it is) or a legacy ``RandomState`` (its state seeds a new Generator).
    tripletml's seed rule, named apart from scikit-learn's
    ``check_random_state`` (which returns a RandomState).
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


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _limits() -> list[int]:
    """Headroom under the process's own limits: the address-space limit
    (``RLIMIT_AS``, e.g. ``ulimit -v``) less the current virtual size, and a
    cgroup v2 memory limit (a container's) less its current usage."""
    out = []
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                vm = int(f.read().split()[0]) * resource.getpagesize()
            out.append(max(soft - vm, 0))
    except (ImportError, OSError, ValueError, IndexError):
        pass
    limit = _read_int("/sys/fs/cgroup/memory.max")
    used = _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        out.append(max(limit - used, 0))
    return out


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation: Linux ``MemAvailable``,
    lowered to the headroom under an address-space limit or a cgroup memory
    limit when the process has one; None when unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            import os
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    limits = _limits()
    if limits:
        avail = min(limits) if avail is None else min([avail, *limits])
    return avail


def check_dense_memory(n_bytes: int, owner: Any, what: str) -> None:
    """Raise a clear MemoryError before allocating ``n_bytes`` when the
    machine does not have them (instead of exhausting memory or swapping)."""
    avail = available_memory()
    if avail is not None and n_bytes > avail:
        raise MemoryError(f"{_owner(owner)}: {what}; it needs about {n_bytes / 2**30:.1f} GiB "
                          f"but only {avail / 2**30:.1f} GiB is available.")
