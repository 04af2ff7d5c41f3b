"""One running top-k accumulator for every exact search of the package.

:class:`TopK` keeps, for each of ``n_queries`` rows, the ``k`` best
``(score, id)`` pairs seen so far, fed block by block (faiss's ``ResultHeap``
is the model: ``add`` blocks of scores, then ``finalize``).  It serves
:class:`tripletml.search.index.SimilarityIndex` (blocks of a database scan),
:mod:`tripletml.metrics` (whole rows of similarities) and
:mod:`tripletml.distributed.sharded` (merging the top-k lists of partitions).

The order is one rule everywhere: best score first (the largest with
``largest=True``, similarities; the smallest with ``largest=False``,
distances), equal scores by lower id.  A candidate whose score is NaN or the
worst possible value (``-inf`` when larger is better, ``+inf`` when smaller
is) never enters: rows with fewer than ``k`` valid candidates keep id ``-1``
and the worst score in their last slots.  Results come as ``(scores, ids)``,
the order of scikit-learn's ``kneighbors`` (distances, then indices).

Two strategies give the same answer: for ``k <=`` :data:`KERNEL_MAX_K` a
compiled insertion pass (``O(n_b)`` per row and block plus ``O(k)`` per
entering item), for larger ``k`` an ``np.partition`` selection over the kept
items and the block (``O(k + n_b)`` per row).
"""
from __future__ import annotations

import numbers

import numpy as np
from numba import njit, prange

from tripletml.engine.threads import limit_numba

__all__ = ["TopK", "topk", "KERNEL_MAX_K"]

#: largest k handled by the compiled insertion pass; above it, selection by
#: partition (the insertion pass is O(k) per entering item)
KERNEL_MAX_K = 128

_NO_IDS = np.empty((0, 0), dtype=np.int64)
_NO_NORMS = np.empty(0)


@njit(parallel=True, cache=True, nogil=True)
def _insert_block(S, ids_in, has_ids, offset, sign, l2, qn, xn, vals, ids):  # pragma: no cover
    """Merge one block into each row's running top k (``vals`` decreasing).

    The key of entry ``(i, j)`` is ``sign * S[i, j]`` -- or, with ``l2``,
    ``-(qn_i - 2 S_ij + xn_j)`` clamped to <= 0 (``S`` inner products) -- and
    its id ``ids_in[i, j]`` (``has_ids``) or ``offset + j``.  An entry enters
    when its key is larger than the k-th kept one, or equal with a lower id;
    NaN and -inf keys never enter.
    """
    n_q, n_b = S.shape
    k = vals.shape[1]
    for i in prange(n_q):
        thr = vals[i, k - 1]
        tid = ids[i, k - 1]
        for j in range(n_b):
            s = sign * np.float64(S[i, j])
            if l2:
                s = -((qn[i] - 2.0 * np.float64(S[i, j])) + xn[j])
                if s > 0.0:
                    s = 0.0
            if not s > -np.inf:            # NaN or -inf: never a result
                continue
            g = ids_in[i, j] if has_ids else offset + j
            if has_ids and g < 0:
                continue
            if s > thr or (s == thr and (tid < 0 or g < tid)):
                p = k - 1
                while p > 0 and (vals[i, p - 1] < s
                                 or (vals[i, p - 1] == s
                                     and (ids[i, p - 1] < 0 or ids[i, p - 1] > g))):
                    vals[i, p] = vals[i, p - 1]
                    ids[i, p] = ids[i, p - 1]
                    p -= 1
                vals[i, p] = s
                ids[i, p] = g
                thr = vals[i, k - 1]
                tid = ids[i, k - 1]


def _select(keys: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (key desc, id asc) of each row; invalid (NaN, -inf or id
    -1) items last as ``(-inf, -1)``.  ``keys`` is consumed."""
    neg = np.negative(keys, out=keys)
    bad = ~(neg < np.inf) | (ids < 0)               # NaN, -inf key, or no id
    neg[bad] = np.inf
    c, n = neg.shape
    if k >= n:
        cols = np.broadcast_to(np.arange(n), (c, n))
    else:
        thr = np.partition(neg, k - 1, axis=1)[:, k - 1:k]   # k-th best key
        sel = neg < thr
        eq = neg == thr
        need = k - sel.sum(axis=1)
        split = np.flatnonzero(eq.sum(axis=1) > need)        # ties straddle k
        sel |= eq
        if split.size:                  # keep the `need` tied items of lowest id
            tied_ids = np.where(eq[split], ids[split], np.iinfo(np.int64).max)
            order = np.argsort(tied_ids, axis=1, kind="stable")
            rank = np.empty_like(order)
            np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(split.size, 0), axis=1)
            sel[split] &= ~eq[split] | (rank < need[split, None])
        cols = np.nonzero(sel)[1].reshape(c, k)
    cneg = np.take_along_axis(neg, cols, axis=1)
    cids = np.take_along_axis(ids, cols, axis=1)
    order = np.lexsort((cids, cneg), axis=1)
    out_keys = -np.take_along_axis(cneg, order, axis=1)
    out_ids = np.take_along_axis(cids, order, axis=1)
    invalid = np.isneginf(out_keys)
    out_ids[invalid] = -1
    if out_keys.shape[1] < k:                               # fewer than k candidates
        pad = k - out_keys.shape[1]
        out_keys = np.hstack([out_keys, np.full((c, pad), -np.inf)])
        out_ids = np.hstack([out_ids, np.full((c, pad), -1, dtype=np.int64)])
    return out_keys, out_ids


class TopK:
    """Running top ``k`` of ``n_queries`` rows of scores.

    Parameters
    ----------
    n_queries : int
        Rows (queries) tracked.
    k : int
        Results kept per row, ``k >= 1``.
    largest : bool, default=True
        True: larger scores are closer (similarities); False: smaller are
        (distances).

    Examples
    --------
    >>> import numpy as np
    >>> acc = TopK(1, 2)
    >>> acc.add(np.array([[0.5, 2.0, 1.0]]))
    >>> acc.add(np.array([[2.0, -1.0]]), offset=3)
    >>> scores, ids = acc.finalize()
    >>> scores.tolist(), ids.tolist()
    ([[2.0, 2.0]], [[1, 3]])
    """

    def __init__(self, n_queries: int, k: int, *, largest: bool = True) -> None:
        for name, v, low in (("n_queries", n_queries, 0), ("k", k, 1)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"TopK: {name} must be an int, got {v!r}.")
            if v < low:
                raise ValueError(f"TopK: {name} must be >= {low}, got {v}.")
        self.n_queries, self.k, self.largest = int(n_queries), int(k), bool(largest)
        self._sign = 1.0 if self.largest else -1.0
        self._keys = np.full((self.n_queries, self.k), -np.inf)   # larger is better
        self._ids = np.full((self.n_queries, self.k), -1, dtype=np.int64)

    def add(self, scores: np.ndarray, ids: np.ndarray | None = None, *, offset: int = 0,
            rows: slice | None = None, sq_norms: tuple[np.ndarray, np.ndarray] | None = None
            ) -> None:
        """Merge a block of candidates into the running top k.

        Parameters
        ----------
        scores : ndarray of shape (n_rows, n_b)
            Scores of ``n_b`` candidates for each row (float32 or float64).
        ids : ndarray of int of shape (n_rows, n_b), optional
            The candidates' ids (-1: no candidate).  Default: ``offset + j``
            for column ``j``.
        offset : int, default=0
            Id of the block's first column when ``ids`` is None.
        rows : slice, optional
            The rows of the accumulator the block belongs to (default: all).
        sq_norms : (ndarray of shape (n_rows,), ndarray of shape (n_b,)), optional
            ``scores`` holds inner products ``<q_i, x_j>``; the score is then
            ``-||q_i - x_j||^2 = -(qn_i - 2 <q_i, x_j> + xn_j)`` clamped to
            <= 0 (as scikit-learn's ``euclidean_distances``), computed in
            float64.  Only with ``largest=True``.
        """
        S = np.asarray(scores)
        r = slice(None) if rows is None else rows
        keys, kept = self._keys[r], self._ids[r]
        if S.ndim != 2 or S.shape[0] != keys.shape[0]:
            raise ValueError(f"TopK.add: scores must have shape ({keys.shape[0]}, n), got "
                             f"{S.shape}.")
        if ids is not None:
            ids = np.asarray(ids)
            if ids.shape != S.shape or ids.dtype.kind not in "iu":
                raise ValueError(f"TopK.add: ids must be integers of shape {S.shape}, got "
                                 f"{ids.dtype} of shape {ids.shape}.")
        if sq_norms is not None and not self.largest:
            raise ValueError("TopK.add: sq_norms needs largest=True (scores are -distances).")
        if S.shape[1] == 0:
            return
        if self.k <= KERNEL_MAX_K:
            if S.dtype.kind != "f":
                S = S.astype(np.float64)
            qn, xn = (_NO_NORMS, _NO_NORMS) if sq_norms is None else (
                np.ascontiguousarray(sq_norms[0], dtype=np.float64),
                np.ascontiguousarray(sq_norms[1], dtype=np.float64))
            ids_in = _NO_IDS if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
            kv, ki = np.ascontiguousarray(keys), np.ascontiguousarray(kept)
            with limit_numba(S.size):      # one thread for a small block (tripletml.engine.threads)
                _insert_block(S, ids_in, ids is not None, int(offset), self._sign,
                              sq_norms is not None, qn, xn, kv, ki)
            if kv is not keys:
                keys[...] = kv
                kept[...] = ki
            return
        block = S.astype(np.float64)                     # a copy: _select consumes it
        if sq_norms is not None:
            block = -((np.asarray(sq_norms[0], dtype=np.float64)[:, None] - 2.0 * block)
                      + np.asarray(sq_norms[1], dtype=np.float64)[None, :])
            np.minimum(block, 0.0, out=block)
        elif not self.largest:
            np.negative(block, out=block)
        bids = (np.broadcast_to(np.arange(offset, offset + S.shape[1], dtype=np.int64), S.shape)
                if ids is None else ids.astype(np.int64))
        if np.isneginf(keys[:, 0]).all():                # nothing kept yet
            cand_k, cand_i = block, bids
        else:
            cand_k, cand_i = np.hstack([keys, block]), np.hstack([kept, bids])
        keys[...], kept[...] = _select(cand_k, np.ascontiguousarray(cand_i), self.k)

    def finalize(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each of shape ``(n_queries, k)``, best first.

        Returns
        -------
        scores : ndarray of float64
            The kept scores (worst value -- ``-inf``, or ``+inf`` with
            ``largest=False`` -- in empty slots).
        ids : ndarray of int64
            The kept ids (-1 in empty slots).
        """
        return self._sign * self._keys, self._ids.copy()


def topk(scores: np.ndarray, k: int, *, largest: bool = True, ids: np.ndarray | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each row of ``scores`` as ``(scores, ids)``.

    One :class:`TopK` fed one block: equal to a stable ``argsort`` of the
    rows (by decreasing score, or increasing with ``largest=False``) cut at
    ``k``, except that NaN and worst-value (``-inf`` / ``+inf``) entries are
    dropped, leaving ``(worst, -1)`` slots.

    Parameters
    ----------
    scores : ndarray of shape (n_rows, n)
    k : int
    largest : bool, default=True
    ids : ndarray of int of shape (n_rows, n), optional
        Ids of the entries (default: column numbers).

    Returns
    -------
    scores : ndarray of shape (n_rows, k), float64
    ids : ndarray of shape (n_rows, k), int64
    """
    S = np.asarray(scores)
    if S.ndim != 2:
        raise ValueError(f"topk: scores must be 2-D, got shape {S.shape}.")
    acc = TopK(S.shape[0], k, largest=largest)
    acc.add(S, ids)
    return acc.finalize()
