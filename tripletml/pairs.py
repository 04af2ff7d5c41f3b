"""Pair constraints: ``(i, j)`` row indices with a label ``+1`` (similar) or
``-1`` (dissimilar), metric-learn's weakly supervised pair form.

A learner that learns from pairs natively (ITML, KISSME, MMC: their papers'
setting) receives a :class:`PairConstraints` in ``_fit`` and declares
``_accepts_pairs = True``.  Every other triplet learner receives the
triplets :func:`pairs_to_triplets` makes of the pairs (the rule is
documented there), or a ValueError naming the learners that take pairs when
the pairs form no triplet.

Pairs are never materialised as ``(m, 2, d)`` arrays inside the library;
metric-learn's point pairs are turned into rows and index pairs on entry
(:func:`tripletml.core.supervision.read_supervision`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from tripletml.core.validation import as_generator, check_index_tuples, check_scalar_param

__all__ = ["PairConstraints", "check_pairs", "check_pair_labels", "pair_classes", "class_pairs",
           "pairs_to_triplets", "PAIR_LEARNERS"]

#: the learners that learn from pairs natively (named in error messages)
PAIR_LEARNERS = ("ITML", "KISSME", "MMC", "RCA")


@dataclass(frozen=True)
class PairConstraints:
    """Validated pair supervision handed to a learner's ``_fit``.

    Attributes
    ----------
    pairs : ndarray of shape (m, 2), int64
        Row indices into X.
    labels : ndarray of shape (m,), int8
        ``+1`` similar, ``-1`` dissimilar.
    """

    pairs: np.ndarray
    labels: np.ndarray

    @property
    def similar(self) -> np.ndarray:
        """Boolean mask of the similar pairs."""
        return self.labels > 0

    @property
    def n_pairs(self) -> int:
        return int(self.labels.shape[0])


def _who(owner: Any) -> str:
    if isinstance(owner, str):
        return owner
    return type(owner).__name__ if owner is not None else "tripletml"


def check_pair_labels(y: Any, n_pairs: int, owner: Any = None,
                      name: str = "y") -> np.ndarray:
    """Pair labels as int8 ``+1`` / ``-1``.

    Accepted: values in ``{+1, -1}`` (metric-learn's convention) or in
    ``{1, 0}`` (0 = dissimilar; booleans too), one per pair.  Anything else
    (another value, NaN, strings, a 2-D array, a count that differs from the
    pairs') is a ValueError naming both conventions.
    """
    who = _who(owner)
    if y is None:
        raise ValueError(f"{who}: pairs need labels: {name} with one +1 (similar) or -1 "
                         "(dissimilar) per pair.")
    if sp.issparse(y):
        raise TypeError(f"{who}: {name} (pair labels) must be a dense 1-D array.")
    try:
        a = np.asarray(y)
    except ValueError:
        raise ValueError(f"{who}: {name} (pair labels) must be a 1-D array of +1/-1.") from None
    if a.ndim == 2 and a.shape[1] == 1:
        a = a.ravel()
    if a.ndim != 1:
        raise ValueError(f"{who}: {name} (pair labels) must be 1-D with one label per pair; "
                         f"got shape {a.shape}.")
    if a.shape[0] != n_pairs:
        raise ValueError(f"{who}: {name} has {a.shape[0]} labels for {n_pairs} pairs; give "
                         "one +1 (similar) or -1 (dissimilar) per pair.")
    if a.dtype == bool:
        return np.where(a, 1, -1).astype(np.int8)
    if a.dtype.kind not in "iuf":
        raise ValueError(f"{who}: {name} (pair labels) must be numbers in {{+1, -1}} (or "
                         f"{{1, 0}}, 0 meaning dissimilar); got dtype {a.dtype}.")
    vals = set(np.unique(a).tolist()) if a.size else set()
    if not vals <= {1, -1} and not vals <= {1, 0}:
        bad = sorted(v for v in vals if v not in (1, -1, 0))[:5] or sorted(vals)[:5]
        raise ValueError(f"{who}: pair labels must be +1 (similar) and -1 (dissimilar), or 1 "
                         f"and 0 (0 = dissimilar); {name} holds {bad}.")
    return np.where(a > 0, 1, -1).astype(np.int8)


def pair_classes(y: Any) -> np.ndarray:
    """The two pair labels in the convention of ``y`` (already checked by
    :func:`check_pair_labels`): ``[0, 1]`` when y holds a 0 (or is boolean),
    else ``[-1, 1]``.  ``predict`` on pairs answers in them, as a
    scikit-learn classifier answers in its ``classes_``."""
    a = np.asarray(y)
    if a.dtype == bool or (a.size and bool(np.any(a == 0))):
        return np.array([0, 1], dtype=np.int64)
    return np.array([-1, 1], dtype=np.int64)


def check_pairs(pairs: Any, labels: Any, n_samples: int, owner: Any = None,
                name: str = "pairs", *, both: bool = False) -> PairConstraints:
    """Validate index pairs ``(m, 2)`` into X and their labels.

    Indices must be integers in ``0..n_samples - 1``; a pair of one row with
    itself, ``(i, i)``, carries no information and is refused with its row
    numbers.  ``both`` (what ``fit`` asks): similar and dissimilar pairs
    must both occur -- pairs all labeled +1 (or all -1) do not say which
    distances to shrink and which to grow, and are a ValueError.
    """
    who = _who(owner)
    p = check_index_tuples(pairs, 2, n_samples, who, name,
                           "(n_pairs, 2) holding row indices into X")
    same = np.flatnonzero(p[:, 0] == p[:, 1])
    if same.size:
        rows = ", ".join(str(int(r)) for r in same[:10])
        more = f" (and {same.size - 10} more)" if same.size > 10 else ""
        raise ValueError(f"{who}: {same.size} of the {name} pair a row with itself (i, i), "
                         f"which says nothing about the metric: pairs at positions "
                         f"{rows}{more}.")
    lab = check_pair_labels(labels, p.shape[0], owner)
    if both and lab.size and np.unique(lab).size < 2:
        what = "similar (+1)" if lab[0] > 0 else "dissimilar (-1, or 0)"
        raise ValueError(f"{who}: all {lab.size} pairs are labeled {what}; a metric is "
                         "learned from both similar and dissimilar pairs (metric-learn's "
                         "+1 / -1, or 1 / 0). Add pairs of the other kind.")
    return PairConstraints(p, lab)


def class_pairs(codes: np.ndarray, n_pairs: int, rng: Any, owner: Any = None) -> PairConstraints:
    """``n_pairs`` random pairs from class codes: half similar (two distinct
    rows of one class), half dissimilar (rows of two classes).

    The similar pair's first row is uniform over the rows whose class has
    two or more members, its second uniform over the rest of that class;
    the dissimilar pair's first row is uniform over all rows, its second
    uniform over the rows of the other classes.  Reproducible under ``rng``.
    """
    who = _who(owner)
    codes = np.asarray(codes, dtype=np.int64)
    n_pairs = check_scalar_param(n_pairs, "n_pairs", who, kind="int", low=2)
    rng = as_generator(rng, who)
    n = codes.size
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.empty_like(order)
    rank[order] = np.arange(n) - starts[codes[order]]
    eligible = np.flatnonzero(sizes[codes] >= 2)
    if eligible.size == 0:
        raise ValueError(f"{who}: every class has a single member; no similar pair exists.")
    if sizes.max() == n:
        raise ValueError(f"{who}: every row has the same class; no dissimilar pair exists.")
    m_sim = n_pairs // 2
    m_dis = n_pairs - m_sim
    a = eligible[rng.integers(0, eligible.size, size=m_sim)]
    c = codes[a]
    r = rng.integers(0, sizes[c] - 1)
    r = r + (r >= rank[a])
    b = order[starts[c] + r]
    u = rng.integers(0, n, size=m_dis)
    cu = codes[u]
    r = rng.integers(0, n - sizes[cu])
    r = r + np.where(r >= starts[cu], sizes[cu], 0)
    v = order[r]
    pairs = np.concatenate([np.stack([a, b], 1), np.stack([u, v], 1)]).astype(np.int64)
    labels = np.concatenate([np.ones(m_sim, np.int8), -np.ones(m_dis, np.int8)])
    perm = rng.permutation(n_pairs)
    return PairConstraints(np.ascontiguousarray(pairs[perm]), labels[perm])


def pairs_to_triplets(pc: PairConstraints, *, max_per_pair: int = 8, rng: Any = None,
                      owner: Any = None) -> np.ndarray:
    """Triplets implied by pair constraints sharing a row.

    The rule: a similar pair ``{a, b}`` and a dissimilar pair ``{a, c}``
    with a common row ``a`` say that ``a`` is closer to ``b`` than to ``c``:
    the triplet ``(a, b, c)``.  Every similar pair yields such triplets from
    both of its ends, at most ``max_per_pair`` per end (drawn at random
    among the dissimilar pairs at that row when there are more), so the
    number of triplets is at most ``2 max_per_pair`` times the number of
    similar pairs.  Nothing else is assumed: pairs with no row in common
    imply no triplet (``d(a, b) < d(c, e)`` compares two different
    queries, which a similarity learner's triplet cannot express).

    Returns an int64 array of shape (t, 3), possibly empty (t = 0).
    """
    rng = as_generator(rng, _who(owner))
    p, sim = pc.pairs, pc.similar
    dis = p[~sim]
    # dissimilar partners of each row (both directions), grouped by row
    heads = np.concatenate([dis[:, 0], dis[:, 1]])
    tails = np.concatenate([dis[:, 1], dis[:, 0]])
    order = np.argsort(heads, kind="stable")
    heads, tails = heads[order], tails[order]
    out = []
    for a_col, b_col in ((0, 1), (1, 0)):
        a = p[sim, a_col]
        b = p[sim, b_col]
        lo = np.searchsorted(heads, a, "left")
        hi = np.searchsorted(heads, a, "right")
        cnt = hi - lo
        take = np.minimum(cnt, max_per_pair)
        if not take.any():
            continue
        idx = np.repeat(np.arange(a.size), take)
        k = np.arange(idx.size) - np.repeat(np.cumsum(take) - take, take)
        # all partners when few, else a random draw (with replacement) among them
        many = cnt[idx] > max_per_pair
        off = np.where(many, rng.integers(0, np.maximum(cnt[idx], 1)), k)
        c = tails[lo[idx] + off]
        t = np.stack([a[idx], b[idx], c], 1)
        out.append(t[t[:, 1] != t[:, 2]])
    if not out:
        return np.empty((0, 3), np.int64)
    return np.ascontiguousarray(np.unique(np.concatenate(out), axis=0), dtype=np.int64)
