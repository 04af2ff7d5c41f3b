"""Triplet sampling.

A triplet is a row ``(query, positive, negative)`` of an int64 index array
into the rows of X: the query is meant to be more similar to the positive
than to the negative.  Triplets are never materialised as (m, 3, d) arrays;
learners gather the rows they need.

Samplers
--------
random_class_triplets
    Query and positive share a class, the negative comes from another class
    (the protocol of the OASIS, SDCA and COMET papers).  O(n_triplets) memory.
knn_triplets
    LMNN-style: each query's ``n_neighbors`` nearest same-class points
    (target neighbours) paired with its ``n_impostors`` nearest points of
    other classes (impostors), as used by LMNN and SML.

Both are reproducible under ``random_state``.

Sampling policies
-----------------
A learner's ``fit(X, y)`` asks its policy (``_sampler()``) what to make of
class labels: :class:`ClassTriplets` (random class triplets, the default),
:class:`KNNTriplets` (target neighbours and impostors on the preprocessed
rows, SML's ``sampling="knn"``) or :class:`AllLabels` (the class codes
themselves, :class:`ClassCodes`, for a learner with exact label
statistics: KISSME).  Explicit ``triplets=`` bypass the policy.  Papers that write a triplet
as ``(i, j, k)`` with anchor ``j`` (e.g. SML's ``x_ij``, ``x_kj``) map onto
this layout as ``(j, i, k)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.neighbors import NearestNeighbors

from ._validation import (available_memory, as_generator, check_scalar_param,
                          check_triplets, check_X)

__all__ = ["random_class_triplets", "knn_triplets", "check_triplets", "check_labels",
           "ClassTriplets", "KNNTriplets", "AllLabels", "ClassCodes"]


def check_labels(y: Any, n_samples: int | None = None, owner: Any = None,
                 min_classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Validate class labels; return ``(classes, y_encoded)`` with codes 0..C-1."""
    who = owner if isinstance(owner, str) else (type(owner).__name__ if owner is not None
                                                else "tripletml")
    if y is None:
        raise ValueError(f"{who}: labels y are required to sample triplets (or pass "
                         "triplets=... explicitly).")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{who}: y must be 1-D class labels, got shape {y.shape}.")
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(f"{who}: y has {y.shape[0]} labels but X has {n_samples} rows.")
    if y.shape[0] == 0:
        raise ValueError(f"{who}: y is empty.")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"{who}: y contains NaN or infinity.")
    try:
        classes, codes = np.unique(y, return_inverse=True)
    except TypeError:
        raise TypeError(f"{who}: labels y must be sortable (all ints or all strings).") from None
    if classes.size < min_classes:
        raise ValueError(f"{who}: y has {classes.size} class(es); triplets need at least "
                         f"{min_classes} classes (a positive and a negative of another class).")
    return classes, codes.astype(np.int64)


#: Peak bytes per triplet while sampling: the (m, 3) int64 result (24 bytes) plus
#: the int64 temporaries of the draw (query, class, two ranks, positive, negative)
#: and the stacking copy.  Measured with ``tracemalloc``: 88 bytes per triplet
#: for 2e6 triplets (98 with ``unique=True``, counted here as 2 x n_triplets),
#: 89 for :func:`knn_triplets`.
BYTES_PER_TRIPLET = 96


def _check_triplet_memory(m: int, who: str, what: str) -> None:
    """Refuse to sample ``m`` triplets when the machine cannot hold them.

    Raises a ValueError naming the sampler, the request and the memory it needs
    (instead of a bare MemoryError from NumPy, or swapping)."""
    need = m * BYTES_PER_TRIPLET
    avail = available_memory()
    if avail is not None and need > avail:
        raise ValueError(f"{who}: {what} gives {m:,} triplets, which would need about "
                         f"{need / 2**30:,.1f} GiB while sampling ({BYTES_PER_TRIPLET} bytes "
                         f"per triplet) but only {avail / 2**30:,.1f} GiB of memory is "
                         "available; ask for fewer triplets (learners that take "
                         "n_triplets draw them per epoch).")


def _class_layout(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sample indices sorted by class, class start offsets, sizes, rank of each sample."""
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - starts[codes[order]]
    return order, starts, sizes, rank


def random_class_triplets(y: Any, n_triplets: int | None = None, *,
                          per_query: int | None = None, unique: bool = False,
                          random_state: Any = None) -> np.ndarray:
    """Sample triplets whose query and positive share a class.

    The query is drawn uniformly among samples whose class has at least two
    members (``per_query=None``), or every such sample is the query of exactly
    ``per_query`` triplets.  The positive is uniform over the other members of
    the query's class, the negative uniform over all samples of other classes.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels.
    n_triplets : int, optional
        Number of triplets (required unless ``per_query`` is given).
    per_query : int, optional
        Fixed number of triplets per eligible query.
    unique : bool, default=False
        Reject duplicate triplets (resampling until ``n_triplets`` distinct
        ones are found; ValueError if there are not that many).
    random_state : None, int or numpy Generator

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), int64
        Rows ``(query, positive, negative)``.
    """
    who = "random_class_triplets"
    classes, codes = check_labels(y, owner=who)
    rng = as_generator(random_state, who)
    n = codes.size
    order, starts, sizes, rank = _class_layout(codes)
    eligible = np.flatnonzero(sizes[codes] >= 2)
    if eligible.size == 0:
        raise ValueError(f"{who}: every class has a single member; no (query, positive) pair "
                         "of the same class exists.")
    if per_query is not None:
        per_query = check_scalar_param(per_query, "per_query", who, kind="int", low=1)
        _check_triplet_memory(eligible.size * per_query, who,
                              f"per_query={per_query} x {eligible.size} eligible queries")
        queries = np.repeat(eligible, per_query)
        if n_triplets is not None and int(n_triplets) != queries.size:
            raise ValueError(f"{who}: n_triplets={n_triplets} conflicts with per_query="
                             f"{per_query} x {eligible.size} eligible queries.")
        n_triplets = queries.size
    else:
        if n_triplets is None:
            raise ValueError(f"{who}: give n_triplets or per_query.")
        n_triplets = check_scalar_param(n_triplets, "n_triplets", who, kind="int", low=1)
        _check_triplet_memory(n_triplets * (2 if unique else 1), who,
                              f"n_triplets={n_triplets}")
        queries = None

    def draw(m: int, q: np.ndarray | None) -> np.ndarray:
        if q is None:
            q = eligible[rng.integers(0, eligible.size, size=m)]
        c = codes[q]
        # positive: uniform over the class minus the query itself
        r = rng.integers(0, sizes[c] - 1)
        r = r + (r >= rank[q])
        pos = order[starts[c] + r]
        # negative: uniform over the n - |class| samples outside the class
        r = rng.integers(0, n - sizes[c])
        r = r + np.where(r >= starts[c], sizes[c], 0)
        neg = order[r]
        return np.stack([q, pos, neg], axis=1).astype(np.int64)

    t = draw(n_triplets, queries)
    if unique:
        t = np.unique(t, axis=0)
        for _ in range(50):
            if t.shape[0] >= n_triplets:
                break
            extra = draw(2 * (n_triplets - t.shape[0]) + 16, None)
            t = np.unique(np.concatenate([t, extra]), axis=0)
        if t.shape[0] < n_triplets:
            raise ValueError(f"{who}: could only find {t.shape[0]} distinct triplets, "
                             f"fewer than n_triplets={n_triplets}.")
        t = t[rng.permutation(t.shape[0])[:n_triplets]]
    return np.ascontiguousarray(t)


def _rescaled_for_distances(X):
    """X times a power of two that brings max|x| near 1 when it lies outside
    [1e-100, 1e100]: Euclidean neighbours are unchanged (the scaling is exact)
    while squared distances no longer overflow (values >= 1e154 gave inf/NaN
    distances and an unnamed broadcast error) or underflow."""
    vals = X.data if sp.issparse(X) else X
    top = float(np.max(np.abs(vals))) if vals.size else 0.0
    if top == 0.0 or 1e-100 <= top <= 1e100:
        return X
    return X * np.ldexp(1.0, -int(np.frexp(top)[1]))


def knn_triplets(X: Any, y: Any, n_neighbors: int = 3, n_impostors: int = 10, *,
                 n_triplets: int | None = None, random_state: Any = None) -> np.ndarray:
    """LMNN-style triplets from Euclidean nearest neighbours.

    For each sample ``i`` (whose class has at least two members), its
    ``n_neighbors`` nearest same-class samples ``j`` (target neighbours) are
    paired with its ``n_impostors`` nearest samples ``l`` of other classes
    (the closest differently-labelled points, i.e. the likeliest impostors),
    giving triplets ``(i, j, l)``.  Fewer neighbours are used where a class is
    smaller than ``n_neighbors + 1``.  Dense or CSR X.

    Parameters
    ----------
    X : array-like or CSR matrix of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    n_neighbors : int, default=3
    n_impostors : int, default=10
    n_triplets : int, optional
        If given, a uniform random subset of this size (without replacement)
        is returned.
    random_state : None, int or numpy Generator
        Used only for the subset.

    Returns
    -------
    triplets : ndarray of shape (m, 3), int64, sorted by query.
    """
    who = "knn_triplets"
    X = check_X(X, who)
    classes, codes = check_labels(y, X.shape[0], who)
    n_neighbors = check_scalar_param(n_neighbors, "n_neighbors", who, kind="int", low=1)
    n_impostors = check_scalar_param(n_impostors, "n_impostors", who, kind="int", low=1)
    sizes = np.bincount(codes)
    total = int(np.sum(sizes * np.minimum(n_neighbors, np.maximum(sizes - 1, 0))
                       * np.minimum(n_impostors, codes.size - sizes), dtype=object))
    _check_triplet_memory(total, who, f"n_neighbors={n_neighbors}, n_impostors={n_impostors} "
                          f"on {codes.size} samples")
    X = _rescaled_for_distances(X)
    parts = []
    for c in range(classes.size):
        members = np.flatnonzero(codes == c)
        others = np.flatnonzero(codes != c)
        k = min(n_neighbors, members.size - 1)
        if k < 1:
            continue
        Xc = X[members]
        nn = NearestNeighbors(n_neighbors=k + 1).fit(Xc)
        _, idx = nn.kneighbors(Xc)
        # drop the point itself (it may not come first when duplicates exist)
        tgt = np.empty((members.size, k), dtype=np.int64)
        for row in range(members.size):
            cand = idx[row][idx[row] != row][:k]
            tgt[row] = cand
        kimp = min(n_impostors, others.size)
        nn_o = NearestNeighbors(n_neighbors=kimp).fit(X[others])
        _, imp = nn_o.kneighbors(Xc)
        q = np.repeat(members, k * kimp)
        j = np.repeat(members[tgt].reshape(-1), kimp)
        l = np.tile(others[imp], (1, k)).reshape(-1)
        parts.append(np.stack([q, j, l], axis=1))
    if not parts:
        raise ValueError(f"{who}: every class has a single member; no target neighbours exist.")
    t = np.concatenate(parts).astype(np.int64)
    t = t[np.argsort(t[:, 0], kind="stable")]
    if n_triplets is not None:
        n_triplets = check_scalar_param(n_triplets, "n_triplets", who, kind="int", low=1)
        if n_triplets > t.shape[0]:
            raise ValueError(f"{who}: n_triplets={n_triplets} exceeds the {t.shape[0]} "
                             "k-NN triplets available.")
        rng = as_generator(random_state, who)
        keep = np.sort(rng.choice(t.shape[0], size=n_triplets, replace=False))
        t = t[keep]
    return np.ascontiguousarray(t)


# --------------------------------------------------------------------------
# Sampling policies: what a learner's ``fit`` turns class labels into.
# --------------------------------------------------------------------------
class ClassCodes:
    """Class labels handed to a learner that uses them directly (KISSME's
    exact statistics) instead of sampled triplets: ``codes`` are the
    validated class codes 0..k-1 of the rows."""

    __slots__ = ("codes",)

    def __init__(self, codes: np.ndarray):
        self.codes = np.asarray(codes, dtype=np.int64)

    @property
    def n_classes(self) -> int:
        return int(self.codes.max()) + 1 if self.codes.size else 0


class ClassTriplets:
    """Random class triplets (:func:`random_class_triplets`).

    Parameters
    ----------
    n_triplets : int, optional
        How many; None: ``per_class_pair * n_classes ** 2`` (ITML's
        metric-learn default of 20 c^2), or the sampler's own default when
        ``per_class_pair`` is None too.
    per_class_pair : int, optional
        See ``n_triplets``.
    """

    def __init__(self, n_triplets: int | None = None, *, per_class_pair: int | None = None):
        self.n_triplets, self.per_class_pair = n_triplets, per_class_pair

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:
        n = self.n_triplets
        if n is None and self.per_class_pair is not None:
            n = int(self.per_class_pair) * (int(codes.max()) + 1) ** 2
        return random_class_triplets(codes, n, random_state=rng)


class AllLabels:
    """No sampling: the learner receives :class:`ClassCodes`."""

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> ClassCodes:
        return ClassCodes(codes)


class KNNTriplets:
    """LMNN-style triplets (:func:`knn_triplets` on the rows the learner
    trains on, i.e. after preprocessing), at most ``n_triplets`` of them
    drawn without replacement (SML's ``sampling="knn"``)."""

    def __init__(self, n_triplets: int | None = None):
        self.n_triplets = n_triplets

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:
        who = owner if isinstance(owner, str) else type(owner).__name__ if owner else "knn"
        with np.errstate(over="ignore", invalid="ignore"):
            sq = (np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X)
                  else np.einsum("ij,ij->i", X, X))
            big = float(np.max(sq, initial=0.0)) * 4.0
        if not np.isfinite(big):
            raise FloatingPointError(f"{who}: the features are too large for k-NN sampling "
                                     "(squared distances overflow float64); scale the features "
                                     "down (e.g. StandardScaler).")
        t = knn_triplets(X, codes, n_triplets=None, random_state=rng)
        if self.n_triplets is not None and len(t) > self.n_triplets:
            t = t[rng.choice(len(t), self.n_triplets, replace=False)]
        return t
