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
    (target neighbors) paired with its ``n_impostors`` nearest points of
    other classes (impostors), as used by LMNN and SML.

semihard_triplets
    Random class anchor / positive pairs, each with a negative farther than
    the positive but within a margin of it (semi-hard negatives).

All are reproducible under ``random_state``.

Sampling policies
-----------------
A learner's ``fit(X, y)`` asks its policy (``_sampler()``, from its
``sampling`` parameter through :func:`resolve_sampling`) what to make of
class labels: :class:`ClassTriplets` (random class triplets, the default,
``sampling="class"``), :class:`KNNTriplets` (target neighbors and
impostors on the preprocessed rows, ``sampling="knn"``),
:class:`SemiHardTriplets` (semi-hard negatives, ``sampling="semihard"``) or
:class:`AllLabels` (the class codes
themselves, :class:`ClassCodes`, for a learner with exact label
statistics: KISSME).  Explicit ``triplets=`` bypass the policy.  Papers that write a triplet
as ``(i, j, k)`` with anchor ``j`` (e.g. SML's ``x_ij``, ``x_kj``) map onto
this layout as ``(j, i, k)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.neighbors import NearestNeighbors

from tripletml.core.model_writer import unstorable_sampler_message
from tripletml.core.validation import (available_memory, as_generator, check_scalar_param,
                          check_triplets, check_X)

__all__ = ["random_class_triplets", "knn_triplets", "semihard_triplets", "check_triplets",
           "check_labels", "TripletSampler", "ClassTriplets", "KNNTriplets", "SemiHardTriplets",
           "AllLabels", "ClassCodes", "resolve_sampling", "SAMPLING_CLASSES",
           "SAMPLING_PARAM_DOC", "document_sampling"]


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
    [1e-100, 1e100]: Euclidean neighbors are unchanged (the scaling is exact)
    while squared distances no longer overflow (values >= 1e154 gave inf/NaN
    distances and an unnamed broadcast error) or underflow."""
    vals = X.data if sp.issparse(X) else X
    top = float(np.max(np.abs(vals))) if vals.size else 0.0
    if top == 0.0 or 1e-100 <= top <= 1e100:
        return X
    return X * np.ldexp(1.0, -int(np.frexp(top)[1]))


def knn_triplets(X: Any, y: Any, n_neighbors: int = 3, n_impostors: int = 10, *,
                 n_triplets: int | None = None, random_state: Any = None) -> np.ndarray:
    """LMNN-style triplets from Euclidean nearest neighbors.

    For each sample ``i`` (whose class has at least two members), its
    ``n_neighbors`` nearest same-class samples ``j`` (target neighbors) are
    paired with its ``n_impostors`` nearest samples ``l`` of other classes
    (the closest differently-labeled points, i.e. the likeliest impostors),
    giving triplets ``(i, j, l)``.  Fewer neighbors are used where a class is
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
        keep = np.argsort(idx == np.arange(members.size)[:, None], axis=1, kind="stable")
        tgt = np.take_along_axis(idx, keep[:, :k], axis=1).astype(np.int64)
        kimp = min(n_impostors, others.size)
        nn_o = NearestNeighbors(n_neighbors=kimp).fit(X[others])
        _, imp = nn_o.kneighbors(Xc)
        q = np.repeat(members, k * kimp)
        j = np.repeat(members[tgt].reshape(-1), kimp)
        l = np.tile(others[imp], (1, k)).reshape(-1)
        parts.append(np.stack([q, j, l], axis=1))
    if not parts:
        raise ValueError(f"{who}: every class has a single member; no target neighbors exist.")
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


def _who_of(owner: Any, default: str) -> str:
    if isinstance(owner, str):
        return owner
    return type(owner).__name__ if owner is not None else default


class TripletSampler(BaseEstimator):
    """Base of the public sampling policies (triplet "miners").

    A policy is a small scikit-learn-style object: its constructor takes
    ``n_triplets`` and its own knobs (``get_params`` / ``set_params`` /
    ``clone`` work, and so does a learner's nested
    ``set_params(sampling__n_neighbors=5)``), and
    ``sample(X, codes, rng, owner=None)`` returns an ``(m, 3)`` int64 array
    of ``(query, positive, negative)`` rows of ``X`` from the class codes
    ``codes`` (0..C-1).  A learner's ``fit(X, y)`` calls it on the rows it
    trains on (after preprocessing), with its own ``random_state`` Generator.

    ``n_triplets=None`` takes the learner's ``n_triplets`` (see
    :func:`resolve_sampling`).
    """

    #: the string value of a learner's ``sampling`` that means this class
    #: default-constructed
    name: str = ""

    def __init__(self, n_triplets: int | None = None):
        self.n_triplets = n_triplets

    def _check_n(self, who: str) -> int | None:
        return check_scalar_param(self.n_triplets, "n_triplets", who, kind="int", low=1,
                                  allow_none=True)

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _model_file_form(self, owner: Any = None) -> dict:
        """What a model file stores (:func:`sampler_to_dict`; TypeError for
        a subclass, whose code a file cannot hold)."""
        return sampler_to_dict(self, owner)


class ClassTriplets(TripletSampler):
    """Uniform random class triplets (:func:`random_class_triplets`):
    ``sampling="class"``, the default of every learner.

    Parameters
    ----------
    n_triplets : int, optional
        How many; None: ``per_class_pair * n_classes ** 2`` (ITML's
        metric-learn default of 20 c^2), or the learner's ``n_triplets``.
    per_class_pair : int, optional
        See ``n_triplets``.
    """

    name = "class"

    def __init__(self, n_triplets: int | None = None, *, per_class_pair: int | None = None):
        self.n_triplets, self.per_class_pair = n_triplets, per_class_pair

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:
        who = _who_of(owner, "ClassTriplets")
        n = self._check_n(who)
        if n is None and self.per_class_pair is not None:
            n = int(self.per_class_pair) * (int(codes.max()) + 1) ** 2
        return random_class_triplets(codes, n, random_state=rng)


def _fill_to(t: np.ndarray, n: int | None, rng: np.random.Generator) -> np.ndarray:
    """Exactly ``n`` rows of ``t``: a subset without replacement when ``t``
    has more, else all of ``t`` plus rows drawn again uniformly (so a
    learner's ``n_triplets`` steps are kept whatever the pool size)."""
    if n is None or len(t) == n:
        return t
    if len(t) > n:
        return t[rng.choice(len(t), n, replace=False)]
    extra = t[rng.integers(0, len(t), size=n - len(t))]
    return np.ascontiguousarray(np.concatenate([t, extra]))


def _check_finite_distances(X: Any, who: str, what: str) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        sq = (np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X)
              else np.einsum("ij,ij->i", X, X))
        big = float(np.max(sq, initial=0.0)) * 4.0
    if not np.isfinite(big):
        raise FloatingPointError(f"{who}: the features are too large for {what} sampling "
                                 "(squared distances overflow float64); scale the features "
                                 "down (e.g. StandardScaler).")


class KNNTriplets(TripletSampler):
    """LMNN-style triplets, ``sampling="knn"``: :func:`knn_triplets` on the
    rows the learner trains on (after preprocessing): each query's
    ``n_neighbors`` nearest same-class points (target neighbors) paired
    with its ``n_impostors`` nearest other-class points (impostors).

    Parameters
    ----------
    n_triplets : int, optional
        How many: a uniform subset without replacement of the pool of k-NN
        triplets when it is larger, else the whole pool plus triplets drawn
        again from it uniformly (exactly ``n_triplets`` either way).  None:
        the learner's ``n_triplets``; the whole pool when that is None too.
    n_neighbors : int, default=3
        Target neighbors per query.
    n_impostors : int, default=10
        Impostors per query.
    """

    name = "knn"

    def __init__(self, n_triplets: int | None = None, *, n_neighbors: int = 3,
                 n_impostors: int = 10):
        self.n_triplets = n_triplets
        self.n_neighbors = n_neighbors
        self.n_impostors = n_impostors

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:
        who = _who_of(owner, "KNNTriplets")
        n = self._check_n(who)
        _check_finite_distances(X, who, "k-NN")
        try:
            t = knn_triplets(X, codes, self.n_neighbors, self.n_impostors, n_triplets=None,
                             random_state=rng)
        except (TypeError, ValueError) as e:
            raise type(e)(str(e).replace("knn_triplets:", f"{who}: KNNTriplets", 1)) from None
        return _fill_to(t, n, rng)


#: triplets per eligible query drawn by :class:`SemiHardTriplets` when no
#: ``n_triplets`` is given anywhere
SEMIHARD_PER_QUERY = 10
#: the "auto" margin: this fraction of the median query-positive distance
SEMIHARD_AUTO_MARGIN = 0.5
#: distances held at once by the semi-hard search (rows x candidates)
_SEMIHARD_CHUNK = 2**20


def semihard_triplets(X: Any, y: Any, n_triplets: int | None = None, *,
                      margin: Any = "auto", n_candidates: int | None = 100,
                      fallback: str = "hardest", random_state: Any = None) -> np.ndarray:
    """Semi-hard negatives for random anchor / positive pairs.

    The ``(query, positive)`` pairs are drawn as in
    :func:`random_class_triplets`; each gets a negative ``l`` of another
    class with ``d(q, p) < d(q, l) < d(q, p) + margin`` in the Euclidean
    distance of ``X`` (FaceNet's and pytorch-metric-learning's semi-hard
    triplets, in the starting metric), uniform among the candidates in that
    band.  The candidates are the query's ``n_candidates`` nearest
    other-class points (sklearn ``NearestNeighbors``, chunked over the
    queries; None: all of them, exact).  When none of them lies in the band
    (the band lies beyond them: a far positive), as many uniform
    other-class points are tried and the first in the band is taken.  A pair
    with still none gets its nearest other-class point
    (``fallback="hardest"``: the hardest negative) or a uniform other-class
    point (``"random"``).  Memory: about ``2**20`` distances at once.

    Parameters
    ----------
    X : array-like or CSR matrix of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    n_triplets : int, optional
        None: ``SEMIHARD_PER_QUERY`` (10) per query whose class has two members.
    margin : float > 0 or "auto", default="auto"
        Width of the band; "auto": half the median ``d(q, p)`` of the pairs.
    n_candidates : int or None, default=100
    fallback : {"hardest", "random"}, default="hardest"
    random_state : None, int or numpy Generator

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), int64
    """
    who = "semihard_triplets"
    X = check_X(X, who)
    classes, codes = check_labels(y, X.shape[0], who)
    rng = as_generator(random_state, who)
    if not (isinstance(margin, str) and margin == "auto"):
        margin = check_scalar_param(margin, "margin", who, kind="real", low=0,
                                    low_inclusive=False)
    n_candidates = check_scalar_param(n_candidates, "n_candidates", who, kind="int", low=1,
                                      allow_none=True)
    if fallback not in ("hardest", "random"):
        raise ValueError(f"{who}: parameter fallback={fallback!r} must be one of "
                         "'hardest', 'random'.")
    if n_triplets is None:
        sizes = np.bincount(codes)
        n_triplets = SEMIHARD_PER_QUERY * max(1, int(np.sum(sizes[sizes >= 2])))
    t = random_class_triplets(codes, n_triplets, random_state=rng)
    X = _rescaled_for_distances(X)
    q, p = t[:, 0], t[:, 1]
    # d(q, p), chunked
    d_qp = np.empty(q.size)
    step = max(1, _SEMIHARD_CHUNK // max(1, X.shape[1]))
    for a in range(0, q.size, step):
        d_qp[a:a + step] = _row_distances(X, q[a:a + step], p[a:a + step])
    if isinstance(margin, str):
        med = float(np.median(d_qp))
        margin = SEMIHARD_AUTO_MARGIN * med if med > 0 else 1.0
    neg = np.empty(q.size, dtype=np.int64)
    for c in np.unique(codes[q]):
        sel = np.flatnonzero(codes[q] == c)
        others = np.flatnonzero(codes != c)
        k = others.size if n_candidates is None else min(n_candidates, others.size)
        nn = NearestNeighbors(n_neighbors=k).fit(X[others])
        sel = sel[np.argsort(q[sel], kind="stable")]
        rows = max(1, _SEMIHARD_CHUNK // k)
        for a in range(0, sel.size, rows):
            part = sel[a:a + rows]
            uq, inv = np.unique(q[part], return_inverse=True)
            dist, idx = nn.kneighbors(X[uq])
            D, I = dist[inv], idx[inv]              # (pairs, k), ascending distance
            lo = d_qp[part][:, None]
            band = (D > lo) & (D < lo + margin)
            count = band.sum(axis=1)
            r = np.floor(rng.random(part.size) * np.maximum(count, 1)).astype(np.int64)
            pos = np.argmax(np.cumsum(band, axis=1) > r[:, None], axis=1)
            pick = I[np.arange(part.size), pos]
            none = np.flatnonzero(count == 0)
            if none.size and k < others.size:
                # the band may lie beyond the nearest candidates: try as many
                # uniform other-class points
                got = _band_draw(X, q[part[none]], others, d_qp[part[none]], margin, k, rng)
                ok = got >= 0
                pick[none[ok]] = got[ok]
                none = none[~ok]
            if fallback == "hardest":
                pick[none] = I[none, 0]
            else:
                pick[none] = rng.integers(0, others.size, size=none.size)
            neg[part] = others[pick]
    t[:, 2] = neg
    return np.ascontiguousarray(t)


def _row_distances(X: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows ``X[a]`` and ``X[b]`` (pairwise
    in order)."""
    diff = X[a] - X[b]
    if sp.issparse(diff):
        return np.sqrt(np.asarray(diff.multiply(diff).sum(axis=1)).ravel())
    return np.sqrt(np.einsum("ij,ij->i", diff, diff))


def _band_draw(X: Any, q: np.ndarray, others: np.ndarray, d_qp: np.ndarray, margin: float,
               n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """For each query ``q[i]``: ``n_draws`` uniform positions into ``others``;
    the first whose point lies in the band ``(d_qp[i], d_qp[i] + margin)``,
    or -1.  Chunked: at most about ``_SEMIHARD_CHUNK`` values at once."""
    out = np.full(q.size, -1, dtype=np.int64)
    rows = max(1, _SEMIHARD_CHUNK // max(1, n_draws * X.shape[1]))
    for a in range(0, q.size, rows):
        qq = q[a:a + rows]
        cand = rng.integers(0, others.size, size=(qq.size, n_draws))
        d = _row_distances(X, np.repeat(qq, n_draws), others[cand.ravel()])
        d = d.reshape(qq.size, n_draws)
        lo = d_qp[a:a + rows, None]
        band = (d > lo) & (d < lo + margin)
        first = np.argmax(band, axis=1)
        hit = band[np.arange(qq.size), first]
        out[a:a + rows][hit] = cand[np.flatnonzero(hit), first[hit]]
    return out


class SemiHardTriplets(TripletSampler):
    """Semi-hard negatives, ``sampling="semihard"``
    (:func:`semihard_triplets` on the rows the learner trains on): random
    class anchor / positive pairs, each with a negative farther than the
    positive but within ``margin`` of it in the starting metric (the
    Euclidean distance of the preprocessed rows).

    Parameters
    ----------
    n_triplets : int, optional
        None: the learner's ``n_triplets`` (10 per query when that is None too).
    margin : float > 0 or "auto", default="auto"
        Band width; "auto": half the median anchor-positive distance.
    n_candidates : int or None, default=100
        Negatives searched per query: its nearest other-class points (None: all).
    fallback : {"hardest", "random"}, default="hardest"
        The negative of a pair without a candidate in the band: the query's
        nearest other-class point, or a uniform one.
    """

    name = "semihard"

    def __init__(self, n_triplets: int | None = None, *, margin: Any = "auto",
                 n_candidates: int | None = 100, fallback: str = "hardest"):
        self.n_triplets = n_triplets
        self.margin = margin
        self.n_candidates = n_candidates
        self.fallback = fallback

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> np.ndarray:
        who = _who_of(owner, "SemiHardTriplets")
        n = self._check_n(who)
        _check_finite_distances(X, who, "semi-hard")
        try:
            return semihard_triplets(X, codes, n, margin=self.margin,
                                     n_candidates=self.n_candidates, fallback=self.fallback,
                                     random_state=rng)
        except (TypeError, ValueError) as e:
            msg = str(e).replace("semihard_triplets:", f"{who}: SemiHardTriplets", 1)
            raise type(e)(msg) from None


class AllLabels:
    """No sampling: the learner receives :class:`ClassCodes`."""

    def sample(self, X: Any, codes: np.ndarray, rng: np.random.Generator,
               owner: Any = None) -> ClassCodes:
        return ClassCodes(codes)


#: the string values of a learner's ``sampling`` and their policies
SAMPLING_CLASSES: dict[str, type] = {"class": ClassTriplets, "knn": KNNTriplets,
                                     "semihard": SemiHardTriplets}
#: SML's former name of ``"class"`` (still accepted everywhere)
SAMPLING_ALIASES = {"random": "class"}


def resolve_sampling(sampling: Any, n_triplets: int | None = None, *,
                     owner: Any = None) -> TripletSampler:
    """The policy a learner's ``sampling`` parameter names.

    A string (``"class"``, ``"knn"``, ``"semihard"``; ``"random"`` is
    ``"class"``) gives the default-constructed policy; a policy object is
    cloned (the learner never changes the user's object).  When the policy's
    ``n_triplets`` is None it takes ``n_triplets`` (the learner's).  Any
    other object with a ``sample`` method is used as it is.
    """
    who = _who_of(owner, "tripletml")
    if isinstance(sampling, str):
        name = SAMPLING_ALIASES.get(sampling, sampling)
        if name not in SAMPLING_CLASSES:
            raise ValueError(f"{who}: parameter sampling={sampling!r} must be one of "
                             "'class', 'knn', 'semihard' or a sampler object.")
        policy = SAMPLING_CLASSES[name]()
    elif isinstance(sampling, TripletSampler):
        policy = clone(sampling)
    elif callable(getattr(sampling, "sample", None)):
        return sampling
    else:
        raise TypeError(f"{who}: parameter sampling={sampling!r} must be one of "
                        "'class', 'knn', 'semihard' or a sampler object.")
    if policy.n_triplets is None and n_triplets is not None:
        policy.set_params(n_triplets=n_triplets)
    return policy


def is_class_sampling(sampling: Any) -> bool:
    """Whether ``sampling`` means uniform class triplets (the string or a
    :class:`ClassTriplets`)."""
    if isinstance(sampling, str):
        return SAMPLING_ALIASES.get(sampling, sampling) == "class"
    return type(sampling) is ClassTriplets


def sampler_to_dict(sampling: Any, owner: Any = None) -> Any:
    """The JSON form of a ``sampling`` value for a model file: a string as
    it is, a tripletml policy as ``{"sampler": class name, "params": {...}}``.

    Raises
    ------
    TypeError
        Any other object: a model file stores no code.
    """
    if sampling is None or isinstance(sampling, str):
        return sampling
    cls = type(sampling)
    if cls in SAMPLING_CLASSES.values():
        return {"sampler": cls.__name__, "params": sampling.get_params()}
    raise TypeError(unstorable_sampler_message(sampling, _who_of(owner, "model")))


def sampler_from_dict(value: Any) -> Any:
    """Inverse of :func:`sampler_to_dict`; ValueError for anything but a
    tripletml policy's name with a dict of parameters."""
    if not isinstance(value, dict):
        return value
    by_name = {c.__name__: c for c in SAMPLING_CLASSES.values()}
    name, params = value.get("sampler"), value.get("params")
    if set(value) != {"sampler", "params"} or name not in by_name \
            or not isinstance(params, dict):
        raise ValueError(f"parameter sampling={value!r} is not a stored tripletml sampler "
                         f"(one of {', '.join(by_name)} with its parameters).")
    try:
        return by_name[name](**params)
    except TypeError as e:
        raise ValueError(f"parameter sampling={value!r}: {e}") from None



#: The numpydoc entry of the ``sampling`` parameter, written once for every
#: learner that samples triplets from labels (see :func:`document_sampling`).
SAMPLING_PARAM_DOC = """    sampling : {"class", "knn", "semihard"} or sampler object, default="class"
        How ``fit(X, y)`` turns class labels into ``n_triplets`` triplets,
        on the rows the learner trains on (after preprocessing), reproducibly
        under ``random_state`` (see :mod:`tripletml.triplets`).  ``"class"``
        (:class:`~tripletml.triplets.ClassTriplets`): uniform random class
        triplets, the papers' protocol, good for ranking (mAP).  ``"knn"``
        (:class:`~tripletml.triplets.KNNTriplets`): LMNN-style -- each
        query's 3 nearest same-class points as positives and its 10 nearest
        other-class points (impostors) as negatives, local constraints for
        nearest-neighbor classification; the pool (30 per query) is
        subsampled, or reused, to ``n_triplets``.  ``"semihard"``
        (:class:`~tripletml.triplets.SemiHardTriplets`): random class
        anchor / positive pairs, each with a negative farther than the
        positive but less than a margin (half the median anchor-positive
        distance) beyond it in the preprocessed Euclidean distance, among the
        query's 100 nearest other-class points; a pair without one gets its
        nearest other-class point.  A sampler object (e.g.
        ``KNNTriplets(n_neighbors=5)``) sets the knobs; its ``n_triplets``,
        when None, is the learner's.  Neighbor searches use scikit-learn's
        ``NearestNeighbors`` per class (chunked, no n x n matrix).
        ``"random"`` is accepted as ``"class"``.  Explicit ``triplets=``
        bypass the sampling.
"""


def document_sampling(cls: type) -> type:
    """Class decorator: replace the line ``    {sampling}`` of the class
    docstring by :data:`SAMPLING_PARAM_DOC`."""
    if cls.__doc__ and "    {sampling}\n" in cls.__doc__:
        cls.__doc__ = cls.__doc__.replace("    {sampling}\n", SAMPLING_PARAM_DOC)
    return cls
