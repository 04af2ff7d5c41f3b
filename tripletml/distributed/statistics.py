"""Exact statistics over the partitions of a collection, reduced in a tree.

:func:`fit_preprocessor` fits a learner's :class:`~tripletml.core.preprocessing.Preprocessor`
on a partitioned collection and gives the statistics of the in-memory fit
on the concatenated rows, to rounding:

* column means and standard deviations merged by Chan, Golub & LeVeque's
  pairwise update (count, mean, sum of squared deviations);
* the feature unit (:func:`tripletml.core.preprocessing.feature_unit`): each
  partition's largest magnitude and its sum of squares below it, rescaled to
  the global largest magnitude;
* the whitening covariance as a sum of per-partition Gram matrices;
* the ``"sphere"`` radius, a *median* of row norms, by an exact distributed
  selection (:func:`distributed_median`: histogram refinement until the
  middle ranks fall in a bin small enough to gather);
* the column kinds of a type-aware ``"auto"``
  (:mod:`tripletml.core.column_kinds`) in its own three passes, each a
  per-partition reduction (min / max / and, sums, lattice tests).

The learners whose model *is* a statistic (KISSME's class scatters, the
baselines) use the same tree (strategy ``"statistics"``, :func:`fit`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from tripletml.core import column_kinds as ck
from tripletml.core.preprocessing import (MAX_DENSIFY_FEATURES, MIN_NETWORK_FEATURES, Preprocessor, _mean_std,
                             apply_preprocessing, column_scales, merge_network_summaries,
                             network_decision, network_summary, normalize_rows,
                             resolve_preprocessing, whitener_from_cov)
from tripletml.distributed.reduction import tree_sum
from tripletml.distributed.strategy import PartitionedStrategy

__all__ = ["fit_preprocessor", "distributed_median", "merge_moments", "fit", "STRATEGY"]

#: rows per dense block of a partition (bounded temporaries)
_BLOCK_ELEMENTS = ck.BLOCK_ELEMENTS
#: values gathered at most by the last step of :func:`distributed_median`
_GATHER_MAX = 1 << 20
_BINS = 4096


def _dense_blocks(X):
    """Dense float64 row blocks of a partition (CSR rows densified block by
    block: the implicit zeros are values)."""
    n, d = X.shape
    step = max(1, _BLOCK_ELEMENTS // max(d, 1))
    for s0 in range(0, n, step):
        B = X[s0:s0 + step]
        yield np.asarray(B.toarray() if sp.issparse(B) else B, dtype=np.float64)


# ---------------------------------------------------------------------------
# moments
# ---------------------------------------------------------------------------
def _moments_task(p) -> tuple:
    """(n, mean, M2) of a partition's columns."""
    X = p.X
    n = X.shape[0]
    if n == 0:
        d = X.shape[1]
        return 0, np.zeros(d), np.zeros(d)
    Xd = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    mean, std = _mean_std(Xd)
    return n, mean, n * std * std


def merge_moments(*items) -> tuple:
    """Chan et al.'s pairwise merge of ``(n, mean, M2)`` triples."""
    n, mean, m2 = items[0]
    mean, m2 = mean.copy(), m2.copy()
    for nb, mb, m2b in items[1:]:
        if nb == 0:
            continue
        if n == 0:
            n, mean, m2 = nb, mb.copy(), m2b.copy()
            continue
        tot = n + nb
        delta = mb - mean
        mean += delta * (nb / tot)
        m2 += m2b + delta * delta * (n * nb / tot)
        n = tot
    return n, mean, m2


# ---------------------------------------------------------------------------
# feature unit
# ---------------------------------------------------------------------------
def _unit_task(p, mean) -> tuple:
    """(largest magnitude, sum of squares divided by it, non-zero count) of
    the partition's entries (of ``X - mean`` when given)."""
    X = p.X
    if sp.issparse(X) and mean is None:
        blocks = [np.asarray(X.data, dtype=np.float64)]
    else:
        blocks = [b if mean is None else b - mean for b in _dense_blocks(X)]
    big = max((float(np.max(np.abs(b), initial=0.0)) for b in blocks), default=0.0)
    if not big > 0:
        return 0.0, 0.0, 0
    total, count = 0.0, 0
    for b in blocks:
        z = (b / big).ravel()
        total += float(z @ z)
        count += int(np.count_nonzero(b))
    return big, total, count


def _unit_task_normalized(p) -> tuple:
    """:func:`_unit_task` of the partition's rows divided by their norms
    (the mode ``"normalize"``)."""
    return _unit_task(_Rows(normalize_rows(p.X)), None)


class _Rows:
    """A stand-in partition holding only rows ``X``."""

    def __init__(self, X):
        self.X = X


def _network_task(p) -> dict:
    """The partition's :func:`~tripletml.core.preprocessing.network_summary`
    (dense rows only; a sparse partition is never taken for network
    features)."""
    if sp.issparse(p.X):
        return {"nonneg": False, "sq_lo": np.inf, "sq_hi": -np.inf, "values": np.empty(0)}
    return network_summary(p.X)


def _merge_network(*items) -> dict:
    out = items[0]
    for it in items[1:]:
        out = merge_network_summaries(out, it)
    return out


def _merge_unit(*items) -> tuple:
    big = max(i[0] for i in items)
    if not big > 0:
        return 0.0, 0.0, 0
    total = sum(t * (b / big) ** 2 for b, t, _ in items if b > 0)
    return big, total, sum(c for _, _, c in items)


def _unit_of(merged) -> float:
    big, total, count = merged
    if not big > 0 or count == 0:
        return 1.0
    unit = big * float(np.sqrt(total / count))
    return unit if np.isfinite(unit) and unit >= np.finfo(float).tiny else 1.0


# ---------------------------------------------------------------------------
# row norms: the sphere test and the median radius
# ---------------------------------------------------------------------------
def _sqnorm_range_task(p) -> tuple:
    X = p.X
    if X.shape[0] == 0:
        return np.inf, -np.inf
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(X):
            sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
        else:
            sq = np.einsum("ij,ij->i", X, X)
    return float(np.min(sq)), float(np.max(sq))


def _merge_range(*items) -> tuple:
    return min(i[0] for i in items), max(i[1] for i in items)


def _norms(p, mean, scale) -> np.ndarray:
    out = []
    for b in _dense_blocks(p.X):
        Z = apply_preprocessing(b, mean, scale)
        out.append(np.sqrt(np.einsum("ij,ij->i", Z, Z)))
    return np.concatenate(out) if out else np.zeros(0)


def _norm_range_task(p, mean, scale) -> tuple:
    v = _norms(p, mean, scale)
    if v.size == 0:
        return 0, np.inf, -np.inf
    return int(v.size), float(v.min()), float(v.max())


def _merge_norm_range(*items) -> tuple:
    return sum(i[0] for i in items), min(i[1] for i in items), max(i[2] for i in items)


def _bin_index(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if not hi > lo:
        return np.zeros(v.shape[0], np.int64)
    return np.clip(np.floor((v - lo) / (hi - lo) * _BINS), 0, _BINS - 1).astype(np.int64)


def _keep(v: np.ndarray, path) -> np.ndarray:
    """The values inside the chain of bins ``path`` ((lo, hi, bin) per level)."""
    for lo, hi, b in path:
        v = v[_bin_index(v, lo, hi) == b]
    return v


def _hist_task(p, mean, scale, path, lo, hi) -> np.ndarray:
    v = _keep(_norms(p, mean, scale), path)
    return np.bincount(_bin_index(v, lo, hi), minlength=_BINS)


def _values_task(p, mean, scale, path) -> np.ndarray:
    return _keep(_norms(p, mean, scale), path)


def _concat(*arrays) -> np.ndarray:
    return np.concatenate(arrays)


def _select(backend, mean, scale, rank: int, lo: float, hi: float) -> float:
    """The value of 0-based ``rank`` among the row norms (all in [lo, hi]):
    histograms of :data:`_BINS` bins refine the bin holding the rank until it
    holds at most :data:`_GATHER_MAX` values, which are gathered."""
    path: list = []
    k = rank
    for _ in range(64):
        hist = backend.gather(backend.reduce(
            tree_sum, backend.map(_hist_task, mean, scale, tuple(path), lo, hi)))
        cum = np.cumsum(hist)
        b = int(np.searchsorted(cum, k + 1))
        k -= int(cum[b - 1]) if b > 0 else 0
        path.append((lo, hi, b))
        w = (hi - lo) / _BINS
        if hist[b] <= _GATHER_MAX or not lo + b * w < lo + (b + 1) * w:
            if hist[b] > _GATHER_MAX:             # pragma: no cover - equal to rounding
                return float(lo + b * w)
            vals = np.sort(backend.gather(backend.reduce(
                _concat, backend.map(_values_task, mean, scale, tuple(path)))))
            return float(vals[k])
        lo, hi = lo + b * w, lo + (b + 1) * w
    return float(lo)                                 # pragma: no cover - 64 refinements


def distributed_median(backend, mean, scale) -> float:
    """The median (``np.median``'s: the mean of the two middle values for an
    even count) of the norms of ``(x - mean) * scale`` over all rows, exactly,
    without gathering the rows."""
    n, lo, hi = backend.gather(backend.reduce(
        _merge_norm_range, backend.map(_norm_range_task, mean, scale)))
    if n == 0:
        return float("nan")
    if n <= _GATHER_MAX:
        vals = backend.gather(backend.reduce(
            _concat, backend.map(_values_task, mean, scale, ())))
        return float(np.median(vals))
    if n % 2:
        return _select(backend, mean, scale, n // 2, lo, hi)
    a = _select(backend, mean, scale, n // 2 - 1, lo, hi)
    b = _select(backend, mean, scale, n // 2, lo, hi)
    return float((a + b) / 2)


# ---------------------------------------------------------------------------
# column kinds (the three passes of tripletml.core.column_kinds.column_kinds)
# ---------------------------------------------------------------------------
def _kinds1_task(p) -> tuple:
    d = p.X.shape[1]
    lo, hi, integer = np.full(d, np.inf), np.full(d, -np.inf), np.ones(d, bool)
    for B in _dense_blocks(p.X):
        np.minimum(lo, B.min(axis=0, initial=np.inf), out=lo)
        np.maximum(hi, B.max(axis=0, initial=-np.inf), out=hi)
        integer &= ck._is_int(B).all(axis=0)
    return lo, hi, integer


def _merge_kinds1(*items) -> tuple:
    lo, hi, integer = (a.copy() for a in items[0])
    for a, b, c in items[1:]:
        np.minimum(lo, a, out=lo)
        np.maximum(hi, b, out=hi)
        integer &= c
    return lo, hi, integer


def _kinds2_task(p, m, zlo, rng) -> tuple:
    d = p.X.shape[1]
    total, two, minpos = np.zeros(d), np.ones(d, bool), np.full(d, np.inf)
    tol = ck._TWO_VALUE_RTOL * rng
    for B in _dense_blocks(p.X):
        Z = B / m - zlo
        total += Z.sum(axis=0)
        two &= ((Z <= tol) | (Z >= rng - tol)).all(axis=0)
        minpos = np.minimum(minpos, np.where(Z > 0, Z, np.inf).min(axis=0))
    return total, two, minpos


def _merge_kinds2(*items) -> tuple:
    total, two, minpos = (a.copy() for a in items[0])
    for a, b, c in items[1:]:
        total += a
        two &= b
        np.minimum(minpos, c, out=minpos)
    return total, two, minpos


def _kinds3_task(p, m, zlo, zmean, step_z, ind, rng) -> tuple:
    d = p.X.shape[1]
    sq, on_lattice = np.zeros(d), np.ones(d, bool)
    rs_lo, rs_hi = np.inf, -np.inf
    has = np.isfinite(step_z)
    safe = np.where(has, step_z, 1.0)
    for B in _dense_blocks(p.X):
        Z = B / m - zlo
        D = Z - zmean
        sq += (D * D).sum(axis=0)
        if has.any():
            R = Z[:, has] / safe[has]
            on_lattice[has] &= (np.abs(R - np.round(R)) <= ck._LATTICE_ATOL).all(axis=0)
        if ind.any():
            rs = (Z[:, ind] / rng[ind]).sum(axis=1)
            rs_lo, rs_hi = min(rs_lo, float(rs.min())), max(rs_hi, float(rs.max()))
    return sq, on_lattice, rs_lo, rs_hi


def _merge_kinds3(*items) -> tuple:
    sq, on = items[0][0].copy(), items[0][1].copy()
    lo, hi = items[0][2], items[0][3]
    for a, b, c, e in items[1:]:
        sq += a
        on &= b
        lo, hi = min(lo, c), max(hi, e)
    return sq, on, lo, hi


def column_kinds_partitioned(backend, n: int) -> ck.ColumnKinds:
    """:func:`tripletml.core.column_kinds.column_kinds` of the concatenated rows,
    in three map-reduce passes."""
    g = backend.gather
    lo, hi, integer = g(backend.reduce(_merge_kinds1, backend.map(_kinds1_task)))
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError("column_kinds: X contains NaN or infinity.")
    m, rng = ck._scaled(lo, hi)
    zlo = lo / m
    total, two, minpos = g(backend.reduce(_merge_kinds2, backend.map(_kinds2_task, m, zlo, rng)))
    zmean = total / n
    state = ck._decide(lo, hi, m, rng, minpos, two)
    sq, on_lattice, rs_lo, rs_hi = g(backend.reduce(
        _merge_kinds3, backend.map(_kinds3_task, m, zlo, zmean, state["step_z"],
                                   state["indicator"], rng)))
    if not state["indicator"].any():
        rs_lo = rs_hi = 0.0
    zstd = np.sqrt(np.maximum(sq / n, 0.0))
    return ck._finish(lo, hi, m, rng, zmean, zstd, integer, two, on_lattice, state,
                      rs_lo, rs_hi, n)


# ---------------------------------------------------------------------------
# the preprocessor
# ---------------------------------------------------------------------------
def _gram_task(p, mean, s) -> np.ndarray:
    d = p.X.shape[1]
    G = np.zeros((d, d))
    for B in _dense_blocks(p.X):
        Z = (B - mean) / s
        G += Z.T @ Z
    return G


def _placeholder(sparse: bool, d: int):
    """A 0-row X of the collection's kind (for the mode rules)."""
    return sp.csr_matrix((0, d)) if sparse else np.zeros((0, d))


def fit_preprocessor(learner, backend, infos: list[dict]) -> Preprocessor:
    """The learner's fitted :class:`Preprocessor` on the collection
    (``infos``: the per-partition shapes of the driver's first pass)."""
    owner = type(learner).__name__
    pre = Preprocessor(getattr(learner, "preprocessing", None),
                       auto=learner._auto_preprocessing, owner=owner,
                       unit=learner._feature_unit, column_scale=learner._auto_column_scale)
    d, sparse = infos[0]["d"], infos[0]["sparse"]
    n = int(sum(i["n"] for i in infos))
    g = backend.gather
    network = False
    if pre.mode == "auto" and not sparse and d >= MIN_NETWORK_FEATURES:
        network = network_decision(g(backend.reduce(_merge_network,
                                                    backend.map(_network_task))), d)
    if pre.mode == "auto":
        if sparse and d > MAX_DENSIFY_FEATURES:
            mode = None
        elif network:
            mode = "normalize"
        elif pre.auto == "sphere":
            lo, hi = g(backend.reduce(_merge_range, backend.map(_sqnorm_range_task)))
            on_sphere = bool(np.isfinite(hi) and hi > 0 and hi - lo <= 1e-6 * hi)
            mode = None if on_sphere else pre.auto
        else:
            mode = pre.auto
    else:
        mode = resolve_preprocessing(pre.mode, _placeholder(sparse, d), owner)
    divisor, decision = None, None
    if pre.mode == "auto":
        if mode is not None and mode != "normalize" and pre.column_scale:
            kinds = column_kinds_partitioned(backend, n)
            divisor, summary = ck.type_aware_scale(None, kinds)
            decision = {"mode": mode,
                        "reason": f"{owner}'s family choice; type-aware column scales",
                        "columns": summary}
        else:
            _, decision = pre._decide(_placeholder(sparse, d), mode)
            if mode is None and not (sparse and d > MAX_DENSIFY_FEATURES):
                decision["reason"] = "the rows already lie on a sphere (equal norms): no lift"
    stats: dict[str, Any] = {}
    if mode == "normalize":
        stats["unit"] = _unit_of(g(backend.reduce(_merge_unit,
                                                  backend.map(_unit_task_normalized))))
    elif mode is None:
        if pre.mode != "raw":                           # "raw": the rows as given
            stats["unit"] = _unit_of(g(backend.reduce(_merge_unit,
                                                      backend.map(_unit_task, None))))
    else:
        cnt, mean, m2 = g(backend.reduce(merge_moments, backend.map(_moments_task)))
        std = np.sqrt(np.maximum(m2 / max(cnt, 1), 0.0))
        stats["mean"] = mean
        if mode == "center":
            stats["unit"] = _unit_of(g(backend.reduce(_merge_unit,
                                                      backend.map(_unit_task, mean))))
        elif mode in ("standardize", "sphere"):
            scale = column_scales(mean, std, divisor)
            stats["scale"] = scale
            if mode == "sphere":
                med = distributed_median(backend, mean, scale)
                stats["radius"] = med if np.isfinite(med) and med > 0 else 1.0
        else:                                           # whiten
            s = np.where(std > 0, std, 1.0)
            G = g(backend.reduce(tree_sum, backend.map(_gram_task, mean, s)))
            stats["whitener"] = whitener_from_cov(G / max(n, 1), std)
    if not pre.unit:
        stats.pop("unit", None)
    pre.decision_ = decision
    pre.mode_ = mode
    for name in ("mean_", "scale_", "whitener_", "radius_", "unit_"):
        setattr(pre, name, stats.get(name[:-1]))
    pre.n_features_in_ = int(d)
    return pre


def fit(learner, plan) -> None:
    """Strategy ``"statistics"``: the learner's ``_fit_statistics(plan)``
    (its model from per-partition sufficient statistics, reduced with the
    plan's backend), or for a learner without parameters beyond its
    preprocessing (the baselines) nothing but that preprocessing."""
    own = getattr(learner, "_fit_statistics", None)
    if own is not None:
        own(plan)
    elif not getattr(learner, "_needs_triplets", True):
        learner._fit(None, None, plan.rng)
    else:
        raise TypeError(f"{type(learner).__name__}: no exact-statistics fit "
                        "(_fit_statistics)")


#: the closed-form learners' strategy (KISSME, RCA, the baselines)
STRATEGY = PartitionedStrategy("statistics", fit)
