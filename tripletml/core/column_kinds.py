"""Column kinds of a training X, and the per-column scale a type-aware
``preprocessing="auto"`` divides by.

Why
---
``"standardize"`` (and ``"sphere"``, which standardizes first) divides every
column by its own standard deviation.  That is the right thing for columns in
*different* physical units (wine acidity in g/l next to alcohol in % vol): the
units are arbitrary, so only unit-free coordinates can be compared.  It is the
wrong thing for columns that share one unit:

* a rare 0/1 indicator (probability p) has std ``sqrt(p (1 - p))``; dividing
  by it makes one flip of a rare indicator worth ``1 / sqrt(p)`` flips of a
  common one (semeion pixels, one-hot categories);
* a near-constant border pixel (one dark pixel in 1000 images) is divided by
  a tiny std and becomes the loudest coordinate of the rows that have it.

So the scale is decided per column *kind*, and columns that share one unit
keep their relative variances by sharing one pooled divisor.

The rule (per kind), implemented by :func:`type_aware_scale`
------------------------------------------------------------
``constant``   (one value)                       divisor 1 (0 after centering).
``binary``     (exactly two values {a, b})       ``|b - a|``: every indicator
               flip is worth 1, the size of one standard deviation of a
               standardized column (``binary="pooled"`` multiplies by
               ``sqrt(mean_k p_k (1 - p_k))`` so that the indicator block has
               mean variance 1; measured worse, see below).
commensurate group (columns sharing one range)   ONE pooled std per group,
               ``sqrt(mean_k var_k)`` over its non-constant columns: relative
               variances are kept, near-constant pixels are not blown up, and
               the group has mean variance 1 like standardized columns.
``integer`` / ``continuous`` outside a group     their own std (mixed units:
               exactly ``"standardize"``).

Measured with ``bench/bench_column_kinds.py`` (BENCHMARKS.md, "Column kinds"):
binary ``|b - a|`` is never worse than the per-column std and much better
for the factored learners on binary pixels; pooled groups help the Euclidean
baseline and OASIS on every pixel / count set and lose for KISSME (which
inverts covariance matrices, so a per-column scale only enters through its
regularization).  Unchanged on continuous data by construction.

Commensurate groups (scale-free definition)
-------------------------------------------
A *shared range* is a pair (min, max) attained exactly by at least
:data:`MIN_ANCHOR_COLUMNS` non-constant columns, at least one of them not
binary (a device or encoding range: 8-bit pixels 0..255, counts capped at
16, Likert 1..5).  Its columns (the *anchors*) form a group when their values
lie on one lattice ``min + k * step`` with ``step`` the smallest positive
offset ``x - min`` over the anchors and at most :data:`MAX_LEVELS` levels
``(max - min) / step``: quantised values of one device.  Columns min-max
scaled to a common range (LIBSVM ``.scale`` files: every column in [-1, 1],
continuous values) are *not* grouped: a shared range alone is what min-max
scaling produces for any mixed-unit data.  A further non-constant, non-binary
column joins the group when it has the group's minimum, a maximum inside the
range, and values on the group's lattice (a border pixel whose brightest
value is 12, a count column that never reaches 16).  A binary column joins
only as an anchor (e.g. a pixel that is either 0 or 255).

Invariances (tested in ``tests/test_column_kinds.py``)
------------------------------------------------------
Every decision that affects a divisor depends only on equalities of minima
and maxima, on the count of distinct values (2 or not) and on ratios
``(x - min) / step``: it is unchanged when the whole X is multiplied by
``c > 0`` (then every divisor is multiplied by c, so the preprocessed rows
``(x - mean) / divisor`` are the same), when the columns are permuted (the
divisors are permuted), and when rows are duplicated (minima, maxima,
lattices and the mean of squares are unchanged).  Integrality only *names*
the kind: a column of integers is ``"integer"`` (``count`` when also
non-negative) while ``0.1 *`` that column is ``"continuous"``; both get the
same divisor up to the factor 0.1.

Cost
----
Three passes over blocks of at most :data:`BLOCK_ELEMENTS` values of a dense
X (min / max; sums and distinct-value checks; squares and lattice checks), so
memory is O(d + block) and never n x n or d x d.  A scipy.sparse X is read
through its stored values (CSC) plus the implicit zeros of each column, in
O(nnz + d) time and memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["ColumnKinds", "ColumnGroup", "column_kinds", "type_aware_scale",
           "KINDS", "MIN_ANCHOR_COLUMNS", "MAX_LEVELS", "BLOCK_ELEMENTS"]

#: the kinds :func:`column_kinds` assigns
KINDS = ("constant", "binary", "integer", "continuous")
#: columns that must share one exact (min, max) to anchor a commensurate group
MIN_ANCHOR_COLUMNS = 2
#: most lattice levels ``(max - min) / step`` of a commensurate group (16 bits)
MAX_LEVELS = 65536
#: values per block of rows of a dense X
BLOCK_ELEMENTS = 1 << 20
#: a value within this fraction of the column's range of its min or max
#: counts as that value (two-valued test)
_TWO_VALUE_RTOL = 1e-6
#: a lattice ratio within this of an integer counts as on the lattice
_LATTICE_ATOL = 1e-6
#: integrality tolerance (relative to max(1, |x|)) of the "integer" name
_INTEGER_RTOL = 1e-9
_INT_MAX = 2.0 ** 53


@dataclass(frozen=True)
class ColumnGroup:
    """Columns that share one unit (see the module docstring).

    Attributes
    ----------
    columns : ndarray of int
        Column indices (anchors and joined columns), sorted.
    low, high : float
        The shared range.
    step : float
        The lattice step; ``levels = (high - low) / step``.
    levels : int
    label : str
        ``"pixels"`` (integers 0..255), ``"counts"`` (integers from 0),
        ``"integers"`` or ``"quantised"`` (a scaled lattice).
    """

    columns: np.ndarray
    low: float
    high: float
    step: float
    levels: int
    label: str


@dataclass(frozen=True)
class ColumnKinds:
    """What :func:`column_kinds` found, per column.

    Attributes
    ----------
    kinds : ndarray of str, shape (d,)
        One of :data:`KINDS` per column.
    count : ndarray of bool, shape (d,)
        Integer-valued and non-negative.
    group : ndarray of int, shape (d,)
        Index into ``groups`` of the commensurate group, -1 for none.
    groups : tuple of ColumnGroup
    minimum, maximum, mean, std : ndarray of float, shape (d,)
        Column statistics of the training rows (std: population).
    one_hot : bool
        The binary columns outside groups, mapped to 0/1 (low value 0), sum
        to the same number in every row (one-hot blocks; e.g. the encoded
        categorical attributes of ``car``).
    n_samples : int
    """

    kinds: np.ndarray
    count: np.ndarray
    group: np.ndarray
    groups: tuple
    minimum: np.ndarray
    maximum: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    one_hot: bool
    n_samples: int
    #: std / (max - min) (the 0/1 std ``sqrt(p (1 - p))`` of a binary column)
    _z_std: np.ndarray = field(repr=False, default=None)
    #: ``m = max(|min|, |max|)`` and ``(max - min) / m``: the range without overflow
    _m: np.ndarray = field(repr=False, default=None)
    _rng: np.ndarray = field(repr=False, default=None)

    def counts(self) -> dict[str, int]:
        """Number of columns per kind."""
        return {k: int(np.sum(self.kinds == k)) for k in KINDS}


# --------------------------------------------------------------------- passes
def _blocks(X: np.ndarray):
    n, d = X.shape
    step = max(1, BLOCK_ELEMENTS // max(d, 1))
    for s0 in range(0, n, step):
        yield np.asarray(X[s0:s0 + step], dtype=np.float64)


def _is_int(V: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return (np.abs(V - np.round(V)) <= _INTEGER_RTOL * np.maximum(1.0, np.abs(V))) \
            & (np.abs(V) <= _INT_MAX)


def _scaled(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``m = max(|lo|, |hi|)`` (1 where 0) and the range in units of m
    (``(hi - lo) / m`` in [0, 2], without overflow)."""
    m = np.maximum(np.abs(lo), np.abs(hi))
    m = np.where(m > 0, m, 1.0)
    return m, hi / m - lo / m


def column_kinds(X: Any) -> ColumnKinds:
    """The kind of every column of the training rows X.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        Finite training rows.

    Returns
    -------
    ColumnKinds
        Kinds (``"constant"``, ``"binary"``, ``"integer"``,
        ``"continuous"``), the ``count`` flag, the commensurate groups, the
        column statistics and the one-hot flag.  See the module docstring for
        the rules and their invariances.

    Raises
    ------
    ValueError
        X is not 2-D, has no rows, or holds NaN or infinity.
    """
    if sp.issparse(X):
        return _sparse_kinds(X)
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"column_kinds: X must be 2-D, got shape {X.shape}.")
    n, d = X.shape
    if n == 0:
        raise ValueError("column_kinds: X has no rows.")
    # pass 1: min, max, integrality
    lo, hi, integer = np.full(d, np.inf), np.full(d, -np.inf), np.ones(d, bool)
    for B in _blocks(X):
        if not np.isfinite(B).all():
            raise ValueError("column_kinds: X contains NaN or infinity.")
        np.minimum(lo, B.min(axis=0), out=lo)
        np.maximum(hi, B.max(axis=0), out=hi)
        integer &= _is_int(B).all(axis=0)
    m, rng = _scaled(lo, hi)
    zlo = lo / m
    # pass 2: sums (in units of m, shifted by min), two-valued test, smallest
    # positive offset from the minimum
    total = np.zeros(d)
    two = np.ones(d, bool)
    minpos = np.full(d, np.inf)
    for B in _blocks(X):
        Z = B / m - zlo                          # in [0, 2]
        total += Z.sum(axis=0)
        tol = _TWO_VALUE_RTOL * rng
        two &= ((Z <= tol) | (Z >= rng - tol)).all(axis=0)
        minpos = np.minimum(minpos, np.where(Z > 0, Z, np.inf).min(axis=0))
    zmean = total / n
    state = _decide(lo, hi, m, rng, minpos, two)
    step_z = state["step_z"]                     # per column: group step / m, inf if none
    # pass 3: squares, lattice test, row sums of the binary indicators
    sq = np.zeros(d)
    on_lattice = np.ones(d, bool)
    ind = state["indicator"]
    rs_lo, rs_hi = np.inf, -np.inf
    has_step = np.isfinite(step_z)
    safe_step = np.where(has_step, step_z, 1.0)
    for B in _blocks(X):
        Z = B / m - zlo
        D = Z - zmean
        sq += (D * D).sum(axis=0)
        if has_step.any():
            R = Z[:, has_step] / safe_step[has_step]
            on_lattice[has_step] &= (np.abs(R - np.round(R)) <= _LATTICE_ATOL).all(axis=0)
        if ind.any():
            rs = (Z[:, ind] / rng[ind]).sum(axis=1)
            rs_lo, rs_hi = min(rs_lo, rs.min()), max(rs_hi, rs.max())
    zstd = np.sqrt(np.maximum(sq / n, 0.0))
    return _finish(lo, hi, m, rng, zmean, zstd, integer, two, on_lattice, state,
                   rs_lo, rs_hi, n)


def _sparse_kinds(X) -> ColumnKinds:
    """:func:`column_kinds` on a scipy.sparse X through its stored values
    (CSC) and the implicit zeros of each column."""
    if X.ndim != 2:
        raise ValueError(f"column_kinds: X must be 2-D, got shape {X.shape}.")
    n, d = X.shape
    if n == 0:
        raise ValueError("column_kinds: X has no rows.")
    C = sp.csc_matrix(X, dtype=np.float64, copy=True)
    C.sum_duplicates()
    v = C.data
    if not np.isfinite(v).all():
        raise ValueError("column_kinds: X contains NaN or infinity.")
    nnz = np.diff(C.indptr)
    col = np.repeat(np.arange(d), nnz)
    zeros = nnz < n                              # the column holds implicit zeros
    lo = np.where(zeros, 0.0, np.inf)
    hi = np.where(zeros, 0.0, -np.inf)
    np.minimum.at(lo, col, v)
    np.maximum.at(hi, col, v)
    bad = np.bincount(col, weights=(~_is_int(v)).astype(float), minlength=d)
    integer = bad == 0
    m, rng = _scaled(lo, hi)
    zlo = lo / m
    z = v / m[col] - zlo[col]
    z0 = -zlo                                    # where the implicit zero maps
    nz = (n - nnz).astype(float)
    total = np.bincount(col, weights=z, minlength=d) + nz * z0
    zmean = total / n
    tol = _TWO_VALUE_RTOL * rng
    okv = (z <= tol[col]) | (z >= (rng - tol)[col])
    ok0 = (z0 <= tol) | (z0 >= rng - tol)
    two = (np.bincount(col, weights=(~okv).astype(float), minlength=d) == 0) \
        & (ok0 | ~zeros)
    minpos = np.full(d, np.inf)
    pos = z > 0
    np.minimum.at(minpos, col[pos], z[pos])
    minpos = np.where(zeros & (z0 > 0), np.minimum(minpos, z0), minpos)
    state = _decide(lo, hi, m, rng, minpos, two)
    step_z = state["step_z"]
    dz = z - zmean[col]
    sq = np.bincount(col, weights=dz * dz, minlength=d) + nz * (z0 - zmean) ** 2
    zstd = np.sqrt(np.maximum(sq / n, 0.0))
    has = np.isfinite(step_z)
    safe = np.where(has, step_z, 1.0)
    r = z / safe[col]
    offv = has[col] & (np.abs(r - np.round(r)) > _LATTICE_ATOL)
    r0 = z0 / safe
    off0 = has & zeros & (np.abs(r0 - np.round(r0)) > _LATTICE_ATOL)
    on_lattice = (np.bincount(col, weights=offv.astype(float), minlength=d) == 0) & ~off0
    ind = state["indicator"]
    rs_lo = rs_hi = 0.0
    if ind.any():
        # row i sums zval_ij / rng_j over the indicators: z0_j / rng_j for
        # every indicator, corrected by each stored value
        safe_rng = np.where(rng > 0, rng, 1.0)
        base = float(np.sum(np.where(ind, z0 / safe_rng, 0.0)))
        R = C.tocsr()
        rcol = R.indices
        rz = R.data / m[rcol] - zlo[rcol]
        contrib = np.where(ind[rcol], (rz - z0[rcol]) / safe_rng[rcol], 0.0)
        rows = np.repeat(np.arange(n), np.diff(R.indptr))
        rs = base + np.bincount(rows, weights=contrib, minlength=n)
        rs_lo, rs_hi = float(rs.min()), float(rs.max())
    return _finish(lo, hi, m, rng, zmean, zstd, integer, two, on_lattice, state,
                   rs_lo, rs_hi, n)


def _constant(lo: np.ndarray, hi: np.ndarray, rng: np.ndarray) -> np.ndarray:
    """One value to rounding: range below 10 eps of the magnitude (scale-free)."""
    fi = np.finfo(float)
    return (rng <= 10 * fi.eps) | (hi - lo < fi.tiny)


def _decide(lo, hi, m, rng, minpos, two) -> dict:
    """Candidate groups from the pass-2 statistics: the shared ranges, each
    column's candidate group and the group's lattice step (in units of the
    column's m)."""
    d = lo.shape[0]
    const = _constant(lo, hi, rng)
    binary = two & ~const
    cand = np.full(d, -1)
    anchor = np.zeros(d, bool)
    groups: list[dict] = []
    nc = np.flatnonzero(~const)
    if nc.size:
        keys = np.stack([lo[nc], hi[nc]], axis=1)
        uniq, inv, cnt = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        inv = inv.ravel()
        order = np.argsort(-cnt, kind="stable")       # largest shared ranges first
        for u in order:
            if cnt[u] < MIN_ANCHOR_COLUMNS:
                break
            cols = nc[inv == u]
            inside = [g for g, info in enumerate(groups)
                      if info["low"] == uniq[u, 0] and uniq[u, 1] <= info["high"]]
            if inside:                                # a sub-range of a larger group
                cand[cols] = inside[0]
                continue
            if binary[cols].all():
                continue                              # indicators only: the binary rule
            # lattice step in raw units: smallest positive offset of the anchors
            step = float(np.min(minpos[cols] * m[cols]))
            span = float(uniq[u, 1] - uniq[u, 0])
            if not (np.isfinite(step) and step > 0) or not np.isfinite(span) \
                    or span / step > MAX_LEVELS + 0.5:
                continue
            g = len(groups)
            groups.append({"low": float(uniq[u, 0]), "high": float(uniq[u, 1]), "step": step,
                           "levels": int(round(span / step))})
            cand[cols] = g
            anchor[cols] = True
        # joiners: columns with a group's minimum and a maximum inside its
        # range (the largest group first); binary ones too when their two
        # values are not adjacent levels (a pixel that is 0 or 37 is a dim
        # pixel; a 0/1 column next to 0..255 pixels stays an indicator)
        for g, info in enumerate(groups):
            adjacent = binary & (hi - lo <= 1.5 * info["step"])
            join = (cand == -1) & ~const & ~adjacent & (lo == info["low"]) \
                & (hi <= info["high"])
            cand[join] = g
    step_z = np.full(d, np.inf)
    for g, info in enumerate(groups):
        cols = cand == g
        step_z[cols] = info["step"] / m[cols]
    return {"const": const, "binary": binary, "cand": cand, "anchor": anchor,
            "groups": groups, "step_z": step_z,
            "indicator": binary & (cand == -1)}


def _finish(lo, hi, m, rng, zmean, zstd, integer, two, on_lattice, state,
            rs_lo, rs_hi, n) -> ColumnKinds:
    const, binary, cand, anchor = state["const"], state["binary"], state["cand"], state["anchor"]
    d = lo.shape[0]
    group = np.full(d, -1)
    groups = []
    for g, info in enumerate(state["groups"]):
        members = (cand == g) & on_lattice
        if np.sum(members & anchor) < MIN_ANCHOR_COLUMNS:
            continue                              # the anchors are not quantised
        cols = np.flatnonzero(members)
        ints = bool(integer[cols].all())
        if ints and info["low"] == 0 and info["high"] == 255:
            label = "pixels"
        elif ints and info["low"] == 0:
            label = "counts"
        elif ints:
            label = "integers"
        else:
            label = "quantised"
        group[cols] = len(groups)
        groups.append(ColumnGroup(cols, info["low"], info["high"], info["step"],
                                  info["levels"], label))
    kinds = np.where(const, "constant",
                     np.where(binary, "binary",
                              np.where(integer, "integer", "continuous"))).astype(object)
    kinds = np.asarray(kinds, dtype="<U10")
    indicator = binary & (group == -1)
    one_hot = bool(indicator.any() and (rs_hi - rs_lo) <= 1e-9 * max(1.0, abs(rs_hi)))
    with np.errstate(over="ignore"):
        mean = lo + zmean * m
        std = zstd * m
    safe_rng = np.where(rng > 0, rng, 1.0)
    return ColumnKinds(kinds=kinds, count=integer & (lo >= 0) & ~const, group=group,
                       groups=tuple(groups), minimum=lo, maximum=hi, mean=mean, std=std,
                       one_hot=one_hot, n_samples=int(n), _z_std=zstd / safe_rng,
                       _m=m, _rng=rng)


# ---------------------------------------------------------------------- scale
def _pooled(s: np.ndarray) -> float:
    """``sqrt(mean(s ** 2))`` without overflow or underflow."""
    top = float(np.max(s)) if s.size else 0.0
    if not top > 0:
        return 0.0
    return top * float(np.sqrt(np.mean((s / top) ** 2)))


def type_aware_scale(X: Any, kinds: ColumnKinds | None = None, *,
                     binary: str = "amplitude") -> tuple[np.ndarray, dict[str, Any]]:
    """The per-column divisor a type-aware ``"standardize"`` uses instead of
    the column standard deviation, and a summary of the decision.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        The training rows (only read when ``kinds`` is None).
    kinds : ColumnKinds, optional
        ``column_kinds(X)``, computed when not given.
    binary : {"amplitude", "pooled"}, default="amplitude"
        Divisor of a binary indicator {a, b} outside groups: ``|b - a|``
        (every flip is worth 1, like one standard deviation of a
        standardized column) or ``|b - a| * sqrt(mean_k p_k (1 - p_k))``
        (the indicator block gets mean variance 1).  Both give every
        indicator the same weight; see the module docstring for the
        measurement that picked the default.

    Returns
    -------
    divisor : ndarray of shape (n_features,)
        Positive and finite: 1 for constant columns; one pooled standard
        deviation ``sqrt(mean var)`` per commensurate group; for binary
        indicators (outside groups) ``|b - a|`` times the pooled standard
        deviation of the 0/1-mapped indicators; the column's own standard
        deviation otherwise.  Multiplying X by c > 0 multiplies every
        divisor of a non-constant column by c.
    summary : dict
        Per kind with columns: ``{"columns": int, "scale": str}``, plus
        ``"groups"`` (one entry per commensurate group: label, range,
        levels, columns) and ``"one_hot"`` under ``"binary"``; meant for a
        fitted attribute.
    """
    if kinds is None:
        kinds = column_kinds(X)
    k = kinds
    std = np.asarray(k.std, dtype=np.float64)
    div = std.copy()
    const = k.kinds == "constant"
    # commensurate groups: one pooled std each
    for g in k.groups:
        cols = g.columns[~const[g.columns]]
        if cols.size:
            div[cols] = _pooled(std[cols])
    # binary indicators outside groups: amplitude times the pooled 0/1 std
    ind = (k.kinds == "binary") & (k.group == -1)
    if ind.any():
        if binary not in ("amplitude", "pooled"):
            raise ValueError(f"type_aware_scale: binary={binary!r} must be 'amplitude' or "
                             "'pooled'.")
        # std / range = sqrt(p (1 - p))
        pooled = _pooled(k._z_std[ind]) if binary == "pooled" else 1.0
        # |b - a| * pooled = m * ((b - a) / m * pooled): no overflow
        div[ind] = k._m[ind] * (k._rng[ind] * pooled)
    div[const] = 1.0
    bad = ~(np.isfinite(div) & (div > 0))
    div[bad] = 1.0
    # summary
    summary: dict[str, Any] = {}
    grouped = k.group >= 0
    n_bin = int(np.sum(ind))
    if n_bin:
        summary["binary"] = {"columns": n_bin, "one_hot": k.one_hot,
                             "scale": ("|b - a|" if binary == "amplitude"
                                       else "|b - a| * sqrt(mean p (1 - p))")}
    if grouped.any():
        summary["commensurate"] = {
            "columns": int(np.sum(grouped)), "scale": "one pooled std per group",
            "groups": [{"label": g.label, "range": [g.low, g.high], "levels": g.levels,
                        "columns": int(g.columns.size)} for g in k.groups]}
    for kind in ("integer", "continuous"):
        own = (k.kinds == kind) & ~grouped
        if own.any():
            entry = {"columns": int(np.sum(own)), "scale": "own std"}
            if kind == "integer":
                entry["counts"] = int(np.sum(own & k.count))
            summary[kind] = entry
    if const.any():
        summary["constant"] = {"columns": int(np.sum(const)), "scale": "1 (0 after centering)"}
    return div, summary
