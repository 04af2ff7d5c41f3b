"""Retrieval and classification metrics for learned similarities.

Conventions
-----------
* ``S`` is a similarity matrix: **higher means more similar**.  Rows are
  queries, columns are database items.
* When ``y_db is None`` the queries *are* the database: ``S`` must be square
  and every item is excluded from its own ranking (leave-one-out), so each
  query ranks the ``n - 1`` other items.
* Labels may be any hashable values (ints, strings, tuples, ...); two items
  are relevant to each other when their labels compare equal (``==``).
* **Tie rule.**  Rankings are deterministic: among database items with equal
  scores, the item with the *lower index* ranks first.  This is exactly the
  order of a stable sort of ``-score``.  Every function of this module uses
  this rule, including precision@k and k-NN (whose top-k selection is exact:
  see below), so results never depend on the sorting algorithm.

Average precision (AP) of one query is the mean, over its relevant database
items, of the precision at that item's rank.  A query without any relevant
item has an undefined AP (NaN in :func:`average_precision_per_query`) and is
left out of :func:`mean_average_precision`.  Precision@k is the fraction of
the top-k items that are relevant, averaged over *all* queries (queries with
no relevant item count as 0).

Implementation
--------------
All metrics share one chunk-wise core: queries are processed by blocks of
rows, each block of similarities is ranked with vectorized numpy operations
(no Python loop over database items), and per-query results are accumulated.
The full-matrix functions simply feed row blocks of a precomputed ``S`` to
that core; :func:`evaluate_retrieval` and :func:`knn_error` feed blocks
computed on the fly by ``estimator.similarity(X_query[rows], X_db)``, so the
full similarity matrix is never formed (memory ``O(chunk_size * n_db)``).

* AP uses a stable ``argsort`` of each block; the AP of a query is
  ``sum_m m / rank_m / n_rel`` where ``rank_m`` is the rank of its ``m``-th
  relevant item.
* Precision@k alone (and k-NN) only needs the top ``K = max(k)`` items.  The
  exact top-K under the tie rule is found in ``O(n_db)`` per query: the K-th
  largest score ``t`` is found with ``np.partition``; every item scoring
  strictly above ``t`` is taken, and the remaining slots are filled with the
  items scoring exactly ``t`` in increasing index order.  Those K items are
  then stably sorted by ``-score``.  (A plain ``argpartition`` would pick an
  arbitrary subset of the items tied at the boundary.)

The default chunk size keeps one block of similarities at about 64 MB
(``64 MB / (8 * n_db)`` rows); the peak working memory of a block is about
2-3 times that (measured: ~150 MB with the default chunk, whatever n_db).
"""
from __future__ import annotations

import numbers
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from tripletml.engine.progress import progress_bar
from tripletml.core.validation import check_triplets, check_X
from tripletml.linalg.topk import topk

__all__ = [
    "average_precision_per_query",
    "label_ranking_map",
    "mean_average_precision",
    "precision_at_k",
    "knn_error",
    "knn_accuracy",
    "check_scoring",
    "validation_score",
    "validation_item_scores",
    "validation_score_and_items",
    "SCORINGS",
    "triplet_accuracy",
    "evaluate_retrieval",
]

#: Target size in bytes of one chunk of similarities (float64).
CHUNK_BYTES = 64 * 2**20


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------
def _as_label_array(y: Any, name: str, func: str) -> np.ndarray:
    """Return ``y`` as a 1-D array (object dtype unless it already was one)."""
    if y is None:
        raise ValueError(f"{func}: {name} must not be None")
    if sp.issparse(y):
        raise TypeError(f"{func}: {name} must be a 1-D sequence of labels, "
                        "got a sparse matrix")
    if isinstance(y, np.ndarray):
        if y.ndim != 1:
            raise ValueError(f"{func}: {name} must be 1-D, got shape {y.shape}")
        return y
    if isinstance(y, (str, bytes)) or not hasattr(y, "__len__"):
        raise TypeError(f"{func}: {name} must be a 1-D sequence of labels, "
                        f"got {type(y).__name__}")
    values = list(y)
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # element-wise: labels may be tuples
        arr[i] = v
    return arr


def _encode_labels(func: str, *labels: tuple[Any, str]) -> list[np.ndarray]:
    """Map labels of several arrays to shared integer codes (equal <=> ==)."""
    arrays = [_as_label_array(y, name, func) for y, name in labels]
    sizes = [a.shape[0] for a in arrays]
    kinds = {a.dtype.kind for a in arrays}
    if kinds <= set("biufc") or kinds == {"U"} or kinds == {"S"}:
        _, codes = np.unique(np.concatenate(arrays), return_inverse=True)
        codes = codes.reshape(-1)
    else:
        mapping: dict[Any, int] = {}
        codes = np.empty(sum(sizes), dtype=np.intp)
        pos = 0
        for a, (_, name) in zip(arrays, labels):
            try:
                for v in a.tolist():
                    codes[pos] = mapping.setdefault(v, len(mapping))
                    pos += 1
            except TypeError as exc:
                raise TypeError(f"{func}: labels in {name} must be hashable "
                                f"({exc})") from None
    codes = codes.astype(np.intp, copy=False)
    return np.split(codes, np.cumsum(sizes)[:-1])


def _check_ks(k: Any, n_avail: int, func: str, name: str = "k"
              ) -> tuple[list[int], bool]:
    """Validate ``k`` (int or sequence of ints); return (list, is_scalar)."""
    scalar = isinstance(k, numbers.Integral) and not isinstance(k, bool)
    if scalar:
        ks = [int(k)]
    else:
        if isinstance(k, (str, bytes)) or not hasattr(k, "__iter__"):
            raise TypeError(f"{func}: {name} must be an int or a sequence of "
                            f"ints, got {type(k).__name__}")
        ks = list(np.ravel(k)) if isinstance(k, np.ndarray) else list(k)
        if len(ks) == 0:
            raise ValueError(f"{func}: {name} must not be an empty sequence")
        for v in ks:
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise TypeError(f"{func}: every {name} must be an int, "
                                f"got {v!r}")
        ks = [int(v) for v in ks]
    for v in ks:
        if not 1 <= v <= n_avail:
            raise ValueError(f"{func}: {name} must satisfy 1 <= {name} <= "
                             f"{n_avail} (number of database items available "
                             f"to each query), got {name}={v}")
    return ks, scalar


def _check_chunk_size(chunk_size: Any, n_rows: int, n_db: int, func: str
                      ) -> int:
    if chunk_size is None:
        return int(max(1, min(n_rows, CHUNK_BYTES // (8 * max(n_db, 1)))))
    if not isinstance(chunk_size, numbers.Integral) or isinstance(chunk_size,
                                                                   bool):
        raise TypeError(f"{func}: chunk_size must be a positive int or None, "
                        f"got {chunk_size!r}")
    if chunk_size < 1:
        raise ValueError(f"{func}: chunk_size must be >= 1, got {chunk_size}")
    return int(min(chunk_size, max(n_rows, 1)))


def _check_S(S: Any, func: str) -> np.ndarray | sp.csr_matrix:
    if sp.issparse(S):
        S = S.tocsr()
    else:
        S = np.asarray(S)
    if S.ndim != 2:
        raise ValueError(f"{func}: S must be a 2-D similarity matrix, got "
                         f"{S.ndim} dimension(s)")
    if S.dtype.kind not in "biuf":
        raise TypeError(f"{func}: S must be real-valued numeric, got dtype "
                        f"{S.dtype}")
    return S


def _check_X(X: Any, name: str, func: str) -> np.ndarray | sp.csr_matrix:
    if X is None:
        raise ValueError(f"{func}: {name} must not be None")
    if sp.issparse(X):
        # structure verified in O(nnz) before SciPy's compiled tocsr sees it
        X = check_X(X, func, name=name)
    else:
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{func}: {name} must be 2-D (n_samples, n_features),"
                         f" got shape {X.shape}")
    return X


def _setup_sets(func: str, X_a: Any, y_a: Any, X_b: Any, y_b: Any,
                names_a: tuple[str, str], names_b: tuple[str, str], queries_in_a: bool):
    """Validate a pair of labeled sets; ``X_b is None`` means leave-one-out
    within set a.  Returns ``(X_a, codes_a, X_b, codes_b, loo)`` with labels
    encoded on a shared code book."""
    X_a = _check_X(X_a, names_a[0], func)
    loo = X_b is None
    if loo:
        if y_b is not None:
            raise ValueError(f"{func}: {names_b[1]} given but {names_b[0]} is None")
        (a, ) = _encode_labels(func, (y_a, names_a[1]))
        X_b, b = X_a, a
    else:
        if y_b is None:
            raise ValueError(f"{func}: {names_b[0]} given but {names_b[1]} is None")
        X_b = _check_X(X_b, names_b[0], func)
        a, b = _encode_labels(func, (y_a, names_a[1]), (y_b, names_b[1]))
    for codes, X, (xn, yn) in ((a, X_a, names_a), (b, X_b, names_b)):
        if codes.shape[0] != X.shape[0]:
            raise ValueError(f"{func}: len({yn})={codes.shape[0]} does not match "
                             f"{xn}.shape[0]={X.shape[0]}")
    # which set holds the queries and which the ranked items (leave-one-out: both a)
    (Xq, qn), (Xr, rn) = ((X_a, names_a[0]), (X_b, names_b[0])) if queries_in_a else \
        ((X_b, names_b[0]), (X_a, names_a[0]))
    if loo:
        Xq, qn, Xr, rn = X_a, names_a[0], X_a, names_a[0]
    if Xq.shape[0] == 0:
        raise ValueError(f"{func}: {qn} has no rows")
    if Xr.shape[0] - (1 if loo else 0) < 1:
        raise ValueError(f"{func}: nothing to rank: {rn} has {Xr.shape[0]} row(s)"
                         f"{' and each query leaves itself out' if loo else ''}")
    return X_a, a, X_b, b, loo


def _check_estimator(estimator: Any, method: str, func: str) -> Callable:
    fn = getattr(estimator, method, None)
    if not callable(fn):
        raise TypeError(f"{func}: estimator must have a callable "
                        f"`{method}` method, got {type(estimator).__name__}")
    return fn


def _prepare_block(block: Any, n_rows: int, n_db: int, func: str, what: str
                   ) -> np.ndarray:
    """Validate a block of similarities; return ``-block`` as a new float64."""
    owned = sp.issparse(block)          # a fresh dense copy may be reused
    if owned:
        block = block.toarray()
    block = np.asarray(block)
    if block.shape != (n_rows, n_db):
        raise ValueError(f"{func}: {what} must have shape ({n_rows}, {n_db}) "
                         f"for this chunk, got {block.shape}")
    if block.dtype.kind not in "biuf":
        raise TypeError(f"{func}: {what} must be real-valued numeric, got "
                        f"dtype {block.dtype}")
    neg = block.astype(np.float64, copy=not owned)
    np.negative(neg, out=neg)
    if not np.isfinite(neg).all():
        raise ValueError(f"{func}: {what} contains NaN or infinity")
    return neg


# --------------------------------------------------------------------------
# chunk-wise core
# --------------------------------------------------------------------------
def _exclude_self(neg: np.ndarray, offset: int) -> None:
    """Push each query's own column to the very end of its ranking."""
    r = np.arange(neg.shape[0])
    neg[r, offset + r] = np.inf


def _retrieval_block(neg: np.ndarray, q_codes: np.ndarray,
                     db_codes: np.ndarray, loo: bool, offset: int,
                     ks: Sequence[int], need_ap: bool
                     ) -> tuple[np.ndarray | None, np.ndarray]:
    """AP (NaN if no relevant item) and top-k hit counts of one row block.

    ``q_codes`` are the label codes of the block's queries; ``neg`` is the
    negated similarity block (modified in place).
    """
    c = neg.shape[0]
    if loo:
        _exclude_self(neg, offset)
    hits = np.zeros((c, len(ks)))
    if need_ap:
        order = np.argsort(neg, axis=1, kind="stable")
        rel = np.take_along_axis(db_codes[None, :] == q_codes[:, None], order,
                                 axis=1)
        del order
        if loo:
            rel[:, -1] = False          # the query itself, ranked last
        rows, cols = np.nonzero(rel)    # row-major: ranks ascending per row
        del rel
        n_rel = np.bincount(rows, minlength=c)
        m = np.arange(1, rows.size + 1) - (np.cumsum(n_rel) - n_rel)[rows]
        ap_sum = np.bincount(rows, weights=m / (cols + 1.0), minlength=c)
        ap = np.full(c, np.nan)
        has = n_rel > 0
        ap[has] = ap_sum[has] / n_rel[has]
        for j, k in enumerate(ks):
            hits[:, j] = np.bincount(rows[cols < k], minlength=c)
        return ap, hits
    if ks:
        top = topk(neg, max(ks), largest=False)[1]     # best first, ties: lower index
        cum = np.cumsum(db_codes[top] == q_codes[:, None], axis=1)
        for j, k in enumerate(ks):
            hits[:, j] = cum[:, k - 1]
    return None, hits


def _run_retrieval(blocks: Iterator[tuple[int, np.ndarray]],
                   q_codes: np.ndarray, db_codes: np.ndarray, loo: bool,
                   ks: Sequence[int], need_ap: bool, verbose: bool = False,
                   desc: str = "retrieval"
                   ) -> tuple[np.ndarray | None, np.ndarray]:
    """Accumulate per-query AP and hit counts over row blocks."""
    n_q = q_codes.shape[0]
    ap = np.full(n_q, np.nan) if need_ap else None
    hits = np.zeros((n_q, len(ks)))
    bar = progress_bar(n_q, verbose=verbose, desc=desc, unit="query")
    try:
        for start, neg in blocks:
            stop = start + neg.shape[0]
            ap_b, hits_b = _retrieval_block(neg, q_codes[start:stop], db_codes,
                                            loo, start, ks, need_ap)
            if need_ap:
                ap[start:stop] = ap_b
            hits[start:stop] = hits_b
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    return ap, hits


def _matrix_blocks(S, chunk_size: int, func: str
                   ) -> Iterator[tuple[int, np.ndarray]]:
    n_q, n_db = S.shape
    for start in range(0, n_q, chunk_size):
        stop = min(start + chunk_size, n_q)
        yield start, _prepare_block(S[start:stop], stop - start, n_db, func,
                                    "S")


def _estimator_blocks(similarity: Callable, X_query, X_db, chunk_size: int,
                      func: str) -> Iterator[tuple[int, np.ndarray]]:
    n_q, n_db = X_query.shape[0], X_db.shape[0]
    for start in range(0, n_q, chunk_size):
        stop = min(start + chunk_size, n_q)
        block = similarity(X_query[start:stop], X_db)
        yield start, _prepare_block(block, stop - start, n_db, func,
                                    "estimator.similarity(X_query, X_db)")


def _setup_matrix(S, y_query, y_db, func):
    """Validate S and labels; return (S, q_codes, db_codes, loo, n_avail)."""
    S = _check_S(S, func)
    n_q, n_db = S.shape
    loo = y_db is None
    if loo:
        (q_codes,) = _encode_labels(func, (y_query, "y_query"))
        db_codes = q_codes
        if n_q != n_db:
            raise ValueError(f"{func}: with y_db=None (leave-one-out) S must "
                             f"be square, got shape {S.shape}")
    else:
        q_codes, db_codes = _encode_labels(func, (y_query, "y_query"),
                                           (y_db, "y_db"))
    if q_codes.shape[0] != n_q:
        raise ValueError(f"{func}: len(y_query)={q_codes.shape[0]} does not "
                         f"match the number of rows of S ({n_q})")
    if db_codes.shape[0] != n_db:
        raise ValueError(f"{func}: len(y_db)={db_codes.shape[0]} does not "
                         f"match the number of columns of S ({n_db})")
    if n_q == 0:
        raise ValueError(f"{func}: S has no query (0 rows)")
    n_avail = n_db - 1 if loo else n_db
    if n_avail < 1:
        raise ValueError(f"{func}: no database item to rank (S has shape "
                         f"{S.shape}{', leave-one-out' if loo else ''})")
    return S, q_codes, db_codes, loo, n_avail


def _mean_ap(ap: np.ndarray, func: str) -> float:
    has = ~np.isnan(ap)
    if not has.any():
        raise ValueError(f"{func}: no query has a relevant database item "
                         "(same label); mean average precision is undefined")
    return float(ap[has].mean())


# --------------------------------------------------------------------------
# full-matrix retrieval metrics
# --------------------------------------------------------------------------
def average_precision_per_query(S: ArrayLike, y_query: ArrayLike,
                                y_db: ArrayLike | None = None, *,
                                chunk_size: int | None = None) -> np.ndarray:
    """Average precision of each query.

    Parameters
    ----------
    S : array-like of shape (n_query, n_db)
        Similarities, higher = more similar (dense or scipy.sparse).
    y_query : sequence of hashable, length n_query
        Query labels.
    y_db : sequence of hashable, length n_db, or None
        Database labels.  None means leave-one-out: S must be square over one
        set and each item is excluded from its own ranking.
    chunk_size : int or None, keyword-only
        Number of query rows ranked at a time (None: ~64 MB of scores).

    Returns
    -------
    ap : ndarray of shape (n_query,)
        AP of each query: mean over its relevant database items of the
        precision at that item's rank (ties: lower index first).  NaN for
        queries with no relevant item.

    Raises
    ------
    ValueError
        If S is not 2-D, contains NaN or infinity, its shape does not match
        the labels, or (leave-one-out) is not square.
    """
    func = "average_precision_per_query"
    S, q, d, loo, _ = _setup_matrix(S, y_query, y_db, func)
    cs = _check_chunk_size(chunk_size, S.shape[0], S.shape[1], func)
    ap, _ = _run_retrieval(_matrix_blocks(S, cs, func), q, d, loo, [], True)
    return ap


def mean_average_precision(S: ArrayLike, y_query: ArrayLike,
                           y_db: ArrayLike | None = None, *,
                           chunk_size: int | None = None) -> float:
    """Mean average precision (mAP).

    The mean of :func:`average_precision_per_query` over the queries that
    have at least one relevant database item; queries without any are left
    out (their AP is undefined).

    Parameters
    ----------
    S, y_query, y_db, chunk_size
        See :func:`average_precision_per_query`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On invalid input (see :func:`average_precision_per_query`), or if no
        query has a relevant item.
    """
    func = "mean_average_precision"
    S, q, d, loo, _ = _setup_matrix(S, y_query, y_db, func)
    cs = _check_chunk_size(chunk_size, S.shape[0], S.shape[1], func)
    ap, _ = _run_retrieval(_matrix_blocks(S, cs, func), q, d, loo, [], True)
    return _mean_ap(ap, func)


def precision_at_k(S: ArrayLike, y_query: ArrayLike,
                   y_db: ArrayLike | None = None, k: int | Sequence[int] = 10,
                   *, chunk_size: int | None = None) -> float | np.ndarray:
    """Precision at k, averaged over all queries.

    Parameters
    ----------
    S, y_query, y_db, chunk_size
        See :func:`average_precision_per_query`.
    k : int or sequence of int, default 10
        Cut-off(s); each must satisfy ``1 <= k <= n_db`` (``n - 1`` in the
        leave-one-out case).

    Returns
    -------
    float or ndarray of float
        For each k, the mean over queries of the fraction of the top-k
        database items (ties: lower index first) that share the query's
        label.  A float for an int ``k``, an array in the order of ``k``
        otherwise.  Queries with no relevant item contribute 0.

    Raises
    ------
    ValueError
        On invalid input or k out of range.
    TypeError
        If k is not an int or a sequence of ints.
    """
    func = "precision_at_k"
    S, q, d, loo, n_avail = _setup_matrix(S, y_query, y_db, func)
    ks, scalar = _check_ks(k, n_avail, func)
    cs = _check_chunk_size(chunk_size, S.shape[0], S.shape[1], func)
    _, hits = _run_retrieval(_matrix_blocks(S, cs, func), q, d, loo, ks,
                             False)
    p = hits.mean(axis=0) / np.asarray(ks, dtype=float)
    return float(p[0]) if scalar else p


# --------------------------------------------------------------------------
# estimator-based evaluation
# --------------------------------------------------------------------------
def _ranking_setup(estimator: Any, X_a: ArrayLike, y_a: ArrayLike, X_b: ArrayLike | None,
                   y_b: ArrayLike | None, k: int | Sequence[int], chunk_size: int | None,
                   func: str, *, queries: bool) -> tuple:
    """The checks of a brute-force ranking by ``estimator.similarity``:
    ``(similarity, X_query, query codes, X_db, db codes, loo, ks, k was a
    scalar, chunk rows)``.  ``queries``: ``(X_a, y_a)`` are the queries
    (retrieval; an empty ``k`` allowed: mAP only), else the database (k-NN:
    ``(X_b, y_b)`` are the test points)."""
    similarity = _check_estimator(estimator, "similarity", func)
    names = (("X_query", "y_query"), ("X_db", "y_db")) if queries else \
        (("X_train", "y_train"), ("X_test", "y_test"))
    X_a, a, X_b, b, loo = _setup_sets(func, X_a, y_a, X_b, y_b, *names, queries_in_a=queries)
    (X_q, q), (X_db, db) = ((X_a, a), (X_b, b)) if queries else ((X_b, b), (X_a, a))
    n_avail = X_db.shape[0] - 1 if loo else X_db.shape[0]
    if queries and isinstance(k, (list, tuple, np.ndarray)) and len(k) == 0:
        ks, scalar = [], False
    else:
        ks, scalar = _check_ks(k, n_avail, func)
    cs = _check_chunk_size(chunk_size, X_q.shape[0], X_db.shape[0], func)
    return similarity, X_q, q, X_db, db, loo, ks, scalar, cs


def _retrieval_per_query(estimator: Any, X_query: ArrayLike, y_query: ArrayLike,
                         X_db: ArrayLike | None, y_db: ArrayLike | None,
                         k: int | Sequence[int], chunk_size: int | None, verbose: bool,
                         func: str) -> tuple:
    """Brute-force ranking by ``estimator.similarity``: per query, its AP
    (NaN without a relevant item) and hits in the top ``ks``.  Returns
    ``(ap, hits, ks, q_codes, db_codes, loo)`` (see :func:`evaluate_retrieval`)."""
    similarity, X_query, q, X_db, d, loo, ks, _, cs = _ranking_setup(
        estimator, X_query, y_query, X_db, y_db, k, chunk_size, func, queries=True)
    blocks = _estimator_blocks(similarity, X_query, X_db, cs, func)
    ap, hits = _run_retrieval(blocks, q, d, loo, ks, True, verbose,
                              desc=func)
    return ap, hits, ks, q, d, loo


def evaluate_retrieval(estimator: Any, X_query: ArrayLike, y_query: ArrayLike,
                       X_db: ArrayLike | None = None,
                       y_db: ArrayLike | None = None, *,
                       k: int | Sequence[int] = (1, 5, 10),
                       chunk_size: int | None = None,
                       verbose: bool = False, index: Any = None,
                       search_k: int | None = None,
                       recall: bool = False) -> dict[str, float]:
    """Retrieval scores of a fitted estimator, without the full matrix.

    Calls ``estimator.similarity(X_query[rows], X_db)`` for consecutive row
    chunks and ranks each chunk at once, so memory is
    ``O(chunk_size * n_db)``.  The results equal those of
    :func:`mean_average_precision` and :func:`precision_at_k` applied to the
    full ``estimator.similarity(X_query, X_db)``.

    Parameters
    ----------
    estimator : object
        Fitted, with ``similarity(X, Y) -> (n_X, n_Y)`` array (dense or
        sparse), higher = more similar.
    X_query : array-like or sparse matrix of shape (n_query, n_features)
    y_query : sequence of hashable, length n_query
    X_db : array-like or sparse matrix of shape (n_db, n_features), or None
        None: leave-one-out within ``X_query`` (each query is excluded from
        its own ranking).
    y_db : sequence of hashable, length n_db, or None
        Required iff ``X_db`` is given.
    k : int or sequence of int, default (1, 5, 10)
        Cut-offs for precision@k (may be empty: mAP only).
    chunk_size : int or None
        Query rows per ``similarity`` call (None: ~64 MB of scores).
    verbose : bool, default False
        Show a tqdm progress bar.
    index : tripletml.search.index.SimilarityIndex or None, keyword-only
        Rank with this index instead of ``estimator.similarity`` (for
        collections too big for brute force).  The index holds the database:
        ``X_db`` must be None and ``y_db`` gives the labels of its rows in id
        order; ``y_db=None`` means leave-one-out with ``X_query`` being the
        index's rows (each query's own id is removed from its results).
        ``estimator`` may be None (the index's model is used).  With an exact
        index (numpy backend) and ``search_k=None`` the results equal the
        brute-force ones.
    search_k : int or None, keyword-only
        With ``index``: items retrieved per query (None: all of them, the
        full ranking).  When it is smaller than the number of rankable items
        the AP is truncated -- relevant items not retrieved add precision 0
        (the divisor is still the number of relevant items) -- and its key is
        ``"map_at_<search_k>"`` instead of ``"map"``.
    recall : bool, default False, keyword-only
        Also report ``recall_at_<k>``: the fraction of a query's relevant
        items found in its top k, averaged over the queries that have a
        relevant item.

    Returns
    -------
    dict
        ``{"map": float, "precision_at_<k>": float, ...}`` (plus
        ``"recall_at_<k>"`` with ``recall=True``).

    Raises
    ------
    ValueError
        On inconsistent shapes, labels, k, non-finite similarities, or when
        no query has a relevant item.
    TypeError
        If ``estimator`` has no ``similarity`` method, or ``index`` no
        ``search``.
    """
    func = "evaluate_retrieval"
    if not isinstance(recall, (bool, np.bool_)):
        raise TypeError(f"{func}: recall must be a bool, got {recall!r}")
    if index is not None:
        return _evaluate_with_index(index, estimator, X_query, y_query, X_db, y_db, k=k,
                                    search_k=search_k, chunk_size=chunk_size,
                                    verbose=verbose, recall=bool(recall))
    if search_k is not None:
        raise ValueError(f"{func}: search_k is only used with an index")
    ap, hits, ks, q, d, loo = _retrieval_per_query(estimator, X_query, y_query, X_db,
                                                   y_db, k, chunk_size, verbose, func)
    out = {"map": _mean_ap(ap, func)}
    for j, kk in enumerate(ks):
        out[f"precision_at_{kk}"] = float(hits[:, j].mean() / kk)
    if recall:
        out.update(_recall(hits, ks, _n_relevant(q, d, loo)))
    return out


def _n_relevant(q_codes: np.ndarray, db_codes: np.ndarray, loo: bool) -> np.ndarray:
    """Relevant database items of each query (itself excluded when ``loo``)."""
    counts = np.bincount(db_codes, minlength=int(max(q_codes.max(), db_codes.max())) + 1)
    return counts[q_codes] - (1 if loo else 0)


def _recall(hits: np.ndarray, ks: Sequence[int], n_rel: np.ndarray) -> dict[str, float]:
    has = n_rel > 0
    if not has.any():
        return {f"recall_at_{kk}": float("nan") for kk in ks}
    return {f"recall_at_{kk}": float(np.mean(hits[has, j] / n_rel[has]))
            for j, kk in enumerate(ks)}


def _evaluate_with_index(index: Any, estimator: Any, X_query: Any, y_query: Any, X_db: Any,
                         y_db: Any, *, k: Any, search_k: Any, chunk_size: Any,
                         verbose: bool, recall: bool) -> dict[str, float]:
    """:func:`evaluate_retrieval` over the top ``search_k`` of an index."""
    func = "evaluate_retrieval"
    search = getattr(index, "search", None)
    n_db = getattr(index, "ntotal", None)
    if not callable(search) or not isinstance(n_db, numbers.Integral):
        raise TypeError(f"{func}: index must be a tripletml.search.index.SimilarityIndex, got "
                        f"{type(index).__name__}")
    if estimator is not None and not callable(getattr(estimator, "similarity", None)):
        raise TypeError(f"{func}: estimator must be None or have a callable `similarity` "
                        f"method, got {type(estimator).__name__}")
    if X_db is not None:
        raise ValueError(f"{func}: with an index, X_db must be None (the index holds the "
                         "database; give its labels as y_db)")
    X_query = _check_X(X_query, "X_query", func)
    n_q = X_query.shape[0]
    loo = y_db is None
    if loo:
        (q,) = _encode_labels(func, (y_query, "y_query"))
        d = q
        if n_q != n_db:
            raise ValueError(f"{func}: leave-one-out with an index (y_db=None) needs the "
                             f"queries to be the index's {n_db} rows, got {n_q} queries")
    else:
        q, d = _encode_labels(func, (y_query, "y_query"), (y_db, "y_db"))
        if d.shape[0] != n_db:
            raise ValueError(f"{func}: len(y_db)={d.shape[0]} does not match the index's "
                             f"{n_db} rows")
    if q.shape[0] != n_q:
        raise ValueError(f"{func}: len(y_query)={q.shape[0]} does not match "
                         f"X_query.shape[0]={n_q}")
    if n_q == 0:
        raise ValueError(f"{func}: X_query has no rows")
    n_avail = n_db - (1 if loo else 0)
    if n_avail < 1:
        raise ValueError(f"{func}: nothing to rank: the index has {n_db} row(s)")
    if isinstance(k, (list, tuple, np.ndarray)) and len(k) == 0:
        ks = []
    else:
        ks, _ = _check_ks(k, n_avail, func)
    if search_k is None:
        K = n_avail
    elif not isinstance(search_k, numbers.Integral) or isinstance(search_k, bool):
        raise TypeError(f"{func}: search_k must be an int or None, got {search_k!r}")
    else:
        (K,), _ = _check_ks(int(search_k), n_avail, func, name="search_k")
    if ks and K < max(ks):
        raise ValueError(f"{func}: search_k={K} is smaller than max(k)={max(ks)}")
    cs = _check_chunk_size(chunk_size, n_q, K + 1, func)
    n_rel = _n_relevant(q, d, loo)
    ap = np.full(n_q, np.nan)
    hits = np.zeros((n_q, len(ks)))
    bar = progress_bar(n_q, verbose=verbose, desc=func, unit="query")
    try:
        for start in range(0, n_q, cs):
            stop = min(start + cs, n_q)
            _, ids = search(X_query[start:stop], K + (1 if loo else 0))
            ids = np.asarray(ids)
            if loo:        # drop each query's own id (or the last item when absent)
                own = ids == np.arange(start, stop)[:, None]
                own[~own.any(axis=1), -1] = True
                ids = ids[~own].reshape(stop - start, K)
            rel = (ids >= 0) & (d[np.maximum(ids, 0)] == q[start:stop, None])
            cum = np.cumsum(rel, axis=1)
            ranks = np.arange(1, K + 1)
            nr = n_rel[start:stop]
            has = nr > 0
            ap_sum = (rel * cum / ranks).sum(axis=1)
            ap[start:stop][has] = ap_sum[has] / nr[has]
            for j, kk in enumerate(ks):
                hits[start:stop, j] = cum[:, kk - 1]
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    out = {("map" if K == n_avail else f"map_at_{K}"): _mean_ap(ap, func)}
    for j, kk in enumerate(ks):
        out[f"precision_at_{kk}"] = float(hits[:, j].mean() / kk)
    if recall:
        out.update(_recall(hits, ks, n_rel))
    return out


def _knn_wrong(estimator: Any, X_train: ArrayLike, y_train: ArrayLike,
               X_test: ArrayLike | None, y_test: ArrayLike | None,
               k: int | Sequence[int], chunk_size: int | None, verbose: bool,
               func: str) -> tuple[np.ndarray, bool]:
    """Per test point and k, whether the k-NN rule of :func:`knn_error`
    misclassifies it: ``(wrong of shape (n_test, len(ks)), k was a scalar)``."""
    similarity, X_test, te, X_train, tr, loo, ks, scalar, cs = _ranking_setup(
        estimator, X_train, y_train, X_test, y_test, k, chunk_size, func, queries=False)
    n_test, K = X_test.shape[0], max(ks)
    wrong = np.zeros((n_test, len(ks)), dtype=bool)
    bar = progress_bar(n_test, verbose=verbose, desc=func, unit="query")
    try:
        for start, neg in _estimator_blocks(similarity, X_test, X_train, cs,
                                            func):
            c = neg.shape[0]
            if loo:
                _exclude_self(neg, start)
            nbr = tr[topk(neg, K, largest=False)[1]]     # (c, K), nearest first
            rows = np.arange(c)
            truth = te[start:start + c]
            for j, kk in enumerate(ks):
                codes = nbr[:, :kk]
                # votes[i, p] = number of the kk neighbors sharing the class
                # of neighbor p; the first p with the most votes is the
                # nearest neighbor of a winning class.
                votes = np.empty((c, kk), dtype=np.intp)
                for p in range(kk):
                    votes[:, p] = (codes == codes[:, p:p + 1]).sum(axis=1)
                best = np.argmax(votes == votes.max(axis=1, keepdims=True),
                                 axis=1)
                wrong[start:start + c, j] = codes[rows, best] != truth
            if bar is not None:
                bar.update(c)
    finally:
        if bar is not None:
            bar.close()
    return wrong, scalar


def knn_error(estimator: Any, X_train: ArrayLike, y_train: ArrayLike,
              X_test: ArrayLike | None = None,
              y_test: ArrayLike | None = None,
              k: int | Sequence[int] = 1, *, chunk_size: int | None = None,
              verbose: bool = False) -> float | np.ndarray:
    """k-nearest-neighbor classification error under a learned similarity.

    Neighbors of a test point are the k training points of highest
    ``estimator.similarity`` (ties: lower training index first).  The
    predicted class is the majority among them; a tie between classes is
    broken in favor of the class of the nearest neighbor among the tied
    classes.

    Parameters
    ----------
    estimator : object
        Fitted, with ``similarity(X, Y) -> (n_X, n_Y)`` array (dense or
        sparse), higher = more similar.
    X_train : array-like or sparse matrix of shape (n_train, n_features)
    y_train : sequence of hashable, length n_train
    X_test, y_test : optional
        Test set.  Both None: leave-one-out on the training set (each point
        is classified by the others).
    k : int or sequence of int, default 1
        Number(s) of neighbors, ``1 <= k <= n_train`` (``n_train - 1`` for
        leave-one-out).  With a sequence the neighbors are computed once.
    chunk_size : int or None, keyword-only
        Test rows per ``similarity`` call (None: ~64 MB of scores).
    verbose : bool, default False
        Show a tqdm progress bar.

    Returns
    -------
    float or ndarray of float
        Error rate (fraction of misclassified test points), one per k when
        ``k`` is a sequence.
    """
    func = "knn_error"
    wrong, scalar = _knn_wrong(estimator, X_train, y_train, X_test, y_test, k, chunk_size,
                               verbose, func)
    err = np.count_nonzero(wrong, axis=0) / wrong.shape[0]
    return float(err[0]) if scalar else err


def knn_accuracy(estimator: Any, X_train: ArrayLike, y_train: ArrayLike,
                 X_test: ArrayLike | None = None, y_test: ArrayLike | None = None,
                 k: int | Sequence[int] = 1, *, chunk_size: int | None = None
                 ) -> float | np.ndarray:
    """k-NN classification accuracy, ``1 -`` :func:`knn_error` (same
    neighbors, votes and tie rule; both test arguments None: leave-one-out
    within the training rows)."""
    err = knn_error(estimator, X_train, y_train, X_test, y_test, k, chunk_size=chunk_size)
    return 1.0 - err


#: the criteria :func:`validation_score` (and ``AutoSimilarity(scoring=...)``)
#: accept; ``precision@k`` and ``knn_accuracy@k`` take any k >= 1
SCORINGS = ("map", "precision@k", "knn_accuracy", "knn_accuracy@k")


def check_scoring(scoring: Any, who: str = "validation_score") -> tuple[str, int]:
    """Parse a scoring name into ``(kind, k)``: ``"map"`` -> ``("map", 0)``,
    ``"precision@10"`` -> ``("precision", 10)``, ``"knn_accuracy"`` ->
    ``("knn_accuracy", 1)``, ``"knn_accuracy@5"`` -> ``("knn_accuracy", 5)``.

    Raises
    ------
    ValueError
        Anything else, naming ``who``.
    """
    bad = ValueError(f"{who}: parameter scoring={scoring!r} must be 'map', 'precision@<k>' "
                     "(e.g. 'precision@1', 'precision@10'), 'knn_accuracy' or "
                     "'knn_accuracy@<k>' with an integer k >= 1.")
    if not isinstance(scoring, str):
        raise bad
    if scoring == "map":
        return "map", 0
    if scoring == "knn_accuracy":
        return "knn_accuracy", 1
    name, at, k = scoring.partition("@")
    if not at or name not in ("precision", "knn_accuracy") or not k.isdigit() \
            or k != str(int(k)) or int(k) < 1:
        raise bad
    return name, int(k)


def validation_item_scores(estimator: Any, X: ArrayLike, y: ArrayLike, scoring: str = "map",
                           *, chunk_size: int | None = None) -> np.ndarray:
    """Each row's own term of :func:`validation_score` (each row a query
    against the others): its average precision (``"map"``; NaN for a row
    without another row of its class, which the mean leaves out), its
    precision at k (``"precision@k"``) or 1.0 / 0.0 for whether the k-NN
    rule classifies it correctly (``"knn_accuracy[@k]"``).  Their mean (over
    the finite terms) is :func:`validation_score` up to rounding.

    Two estimators scored on the same rows give paired terms, whose
    differences measure how far apart they are beyond the validation
    rows' noise (:class:`~tripletml.auto.AutoSimilarity`'s one-standard-error
    rule).

    Returns
    -------
    ndarray of shape (n_samples,)
    """
    return validation_score_and_items(estimator, X, y, scoring, chunk_size=chunk_size,
                                      who="validation_item_scores")[1]


def validation_score_and_items(estimator: Any, X: ArrayLike, y: ArrayLike,
                               scoring: str = "map", *, chunk_size: int | None = None,
                               who: str = "validation_score_and_items"
                               ) -> tuple[float, np.ndarray]:
    """``(validation_score(...), validation_item_scores(...))`` from one
    ranking (``who`` names the caller in a scoring error)."""
    kind, k = check_scoring(scoring, who)
    if y is None or isinstance(y, (str, bytes)) or not hasattr(y, "__len__"):
        raise TypeError(f"{who}: y must be a sequence of class labels, one per row of X, "
                        f"got {type(y).__name__}.")
    if kind == "map":
        ap = _retrieval_per_query(estimator, X, y, None, None, (), chunk_size, False, who)[0]
        return _mean_ap(ap, who), ap
    k = max(1, min(k, len(y) - 1))
    if kind == "precision":
        hits = _retrieval_per_query(estimator, X, y, None, None, (k,), chunk_size, False,
                                    who)[1][:, 0]
        return float(hits.mean() / k), hits / k
    wrong = _knn_wrong(estimator, X, y, None, None, k, chunk_size, False, who)[0][:, 0]
    return 1.0 - np.count_nonzero(wrong) / wrong.size, (~wrong).astype(float)


def validation_score(estimator: Any, X: ArrayLike, y: ArrayLike, scoring: str = "map",
                     *, chunk_size: int | None = None) -> float:
    """One leave-one-out retrieval score within ``(X, y)`` (each row is a
    query against the others), by name: ``"map"`` (:func:`evaluate_retrieval`'s
    mAP), ``"precision@k"`` (its precision at k), ``"knn_accuracy"`` /
    ``"knn_accuracy@k"`` (the accuracy of the k-NN classifier with the
    estimator's similarity, k=1 by default, :func:`knn_error`'s majority vote
    and tie rule).  k larger than the ``len(X) - 1`` other rows is clipped.
    Higher is better for all.  Each row's own term:
    :func:`validation_item_scores`."""
    return validation_score_and_items(estimator, X, y, scoring, chunk_size=chunk_size,
                                      who="validation_score")[0]


def triplet_accuracy(estimator: Any, X: ArrayLike, triplets: ArrayLike, *,
                     per_triplet: bool = False) -> float | np.ndarray:
    """Fraction of triplets ranked correctly by an estimator.

    Parameters
    ----------
    estimator : object
        Fitted, with ``triplet_score(X, triplets) -> (m,)`` array,
        positive when the query is more similar to the positive than to the
        negative.
    X : array-like or sparse matrix of shape (n_samples, n_features)
    triplets : int array-like of shape (m, 3)
        Rows ``(query, positive, negative)`` indexing ``X``.
    per_triplet : bool, default False, keyword-only
        Return whether each triplet is ranked correctly instead of the
        fraction (paired comparisons of two estimators on the same
        triplets, as :class:`~tripletml.auto.AutoSimilarity`'s
        one-standard-error rule makes).

    Returns
    -------
    float, or ndarray of bool of shape (m,) with ``per_triplet``
        Fraction of triplets with ``triplet_score > 0`` (ties count as
        wrong).
    """
    func = "triplet_accuracy"
    if not isinstance(per_triplet, (bool, np.bool_)):
        raise TypeError(f"{func}: per_triplet must be a bool, got {per_triplet!r}")
    if not hasattr(estimator, "triplet_score") and hasattr(estimator, "decision_function"):
        # an estimator written for 0.1 (decision_function(X, triplets)), for one release
        warnings.warn(f"{func}: the estimator has no triplet_score(X, triplets); its "
                      "decision_function(X, triplets) is used (the 0.1 name, deprecated, "
                      "removed in 0.3).", FutureWarning, stacklevel=2)
        decision = _check_estimator(estimator, "decision_function", func)
    else:
        decision = _check_estimator(estimator, "triplet_score", func)
    X = _check_X(X, "X", func)
    T = check_triplets(triplets, X.shape[0], func)
    scores = np.asarray(decision(X, T))
    if scores.shape not in ((T.shape[0],), (T.shape[0], 1)):
        raise ValueError(f"{func}: estimator.triplet_score returned shape "
                         f"{scores.shape}, expected ({T.shape[0]},)")
    right = scores.reshape(-1) > 0
    return right if per_triplet else float(np.mean(right))


def label_ranking_map(Y_true: Any, scores: ArrayLike) -> float:
    """Label-ranking mean average precision (multi-label ranking).

    Each sample ranks the L labels by ``scores`` (higher first; ties by lower
    label index, as everywhere in this module); its AP is the mean, over its
    true labels, of the precision at their ranks.  Samples without a true
    label are left out.

    Parameters
    ----------
    Y_true : array-like or sparse matrix of shape (n_samples, n_labels), 0/1
    scores : array-like of shape (n_samples, n_labels)

    Returns
    -------
    float
    """
    func = "label_ranking_map"
    Y = Y_true.toarray() if sp.issparse(Y_true) else np.asarray(Y_true)
    S = np.asarray(scores, dtype=float)
    if S.ndim != 2 or Y.shape != S.shape:
        raise ValueError(f"{func}: Y_true {Y.shape} and scores {S.shape} must be 2-D arrays "
                         "of the same shape.")
    if not np.isfinite(S).all():
        raise ValueError(f"{func}: scores contain NaN or infinity.")
    Y = Y != 0
    keep = Y.any(axis=1)
    if not keep.any():
        raise ValueError(f"{func}: no sample has a true label.")
    Y, S = Y[keep], S[keep]
    order = np.argsort(-S, axis=1, kind="stable")
    rel = np.take_along_axis(Y, order, axis=1)
    hits = np.cumsum(rel, axis=1)
    ranks = np.arange(1, S.shape[1] + 1)
    ap = (rel * hits / ranks).sum(axis=1) / rel.sum(axis=1)
    return float(ap.mean())
