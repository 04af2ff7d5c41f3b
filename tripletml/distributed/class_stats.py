"""Per-class sufficient statistics over the partitions of a collection:
the map and reduce functions of the closed-form learners' strategy
``"statistics"`` (:mod:`tripletml.distributed.statistics`).

KISSME (Koestinger, Hirzer, Wohlhart, Roth & Bischof, "Large scale metric
learning from equivalence constraints", CVPR 2012) and RCA (Bar-Hillel,
Hertz, Shental & Weinshall, "Learning a Mahalanobis metric from equivalence
constraints", JMLR 6, 2005) are closed forms of class sizes ``n_c``, class
means ``mu_c`` and class scatters ``scatter_c = sum_{i in c} (x_i -
mu_c)(x_i - mu_c)^T``:

* each partition computes them for its rows, *about its own class means*
  (:func:`class_moments_task`): no raw sums of ``x x^T``, whose difference
  with ``n mu mu^T`` would cancel when a class's mean is large against its
  spread;
* the tree of the backend merges two partitions' ``(n_c, mu_c,
  scatter_c)`` by Chan, Golub & LeVeque's pairwise update ("Algorithms for
  computing the sample variance", The American Statistician 37, 1983),
  class by class (:func:`merge_class_moments`)::

      n = n_a + n_b,   delta = mu_b - mu_a,   mu = mu_a + delta n_b / n,
      scatter = scatter_a + scatter_b + delta delta^T n_a n_b / n;

* the driver finishes with the learner's closed form.

A statistic is either one ``d x d`` scatter per class (``per_class=True``:
KISSME's weights ``a_c`` depend non-linearly on the *global* class sizes, so
the class scatters must stay apart until the reduction is done; KISSME's
own passes are in :mod:`tripletml.algorithms.kissme.distributed`), the
pooled within-class scatter ``sum_c scatter_c`` (``per_class=False``: RCA,
whose within-chunklet covariance is that sum divided by the rows in classes
of two or more), or none (``per_class=None``: class sizes and means only).

Every task here is a module-level function of its arguments: it reads the
partition, builds new arrays and returns them.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["class_moments", "class_moments_task", "merge_class_moments", "pair_sums_task",
           "add_pair_sums", "add_arrays", "gather_reduce", "check_labels",
           "rca_label_scatters", "rca_triplet_scatters"]

#: matrix entries per dense block of rows (bounded temporaries, as the
#: in-memory kernels)
_BLOCK_ELEMENTS = 16384


def _blocks(X, rows: np.ndarray | None = None):
    """Dense float64 blocks of X's rows (``rows``: those rows, in order);
    CSR densified block by block (its implicit zeros are values)."""
    n = X.shape[0] if rows is None else rows.shape[0]
    step = max(1, _BLOCK_ELEMENTS // max(X.shape[1], 1))
    for s0 in range(0, n, step):
        B = X[s0:s0 + step] if rows is None else X[rows[s0:s0 + step]]
        yield s0, np.asarray(B.toarray() if sp.issparse(B) else B, dtype=np.float64)


def class_moments(X, codes: np.ndarray, k: int, per_class: bool | None) -> tuple:
    """``(counts, means, scatter)`` of X's rows by class code (0..k-1):
    counts (k,) int64, means (k, d) (0 for an absent class), and the scatter
    about each class's mean: (k, d, d) per class, (d, d) pooled over the
    classes (``per_class=False``) or None (``per_class=None``)."""
    n, d = X.shape
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.bincount(codes, minlength=k).astype(np.int64)
    if n:
        onehot = sp.csr_matrix((np.ones(n), (codes, np.arange(n))), shape=(k, n))
        sums = onehot @ X
        sums = np.asarray(sums.toarray() if sp.issparse(sums) else sums, dtype=np.float64)
    else:
        sums = np.zeros((k, d))
    means = sums / np.maximum(counts, 1)[:, None]
    if per_class is None:
        return counts, means, None
    if per_class:
        scatter = np.zeros((k, d, d))
        order = np.argsort(codes, kind="stable")
        ends = np.cumsum(counts)
        for c in np.flatnonzero(counts >= 2):
            rows = order[ends[c] - counts[c]:ends[c]]
            for _, B in _blocks(X, rows):
                Z = B - means[c]
                scatter[c] += Z.T @ Z
        return counts, means, scatter
    scatter = np.zeros((d, d))
    for s0, B in _blocks(X):
        Z = B - means[codes[s0:s0 + B.shape[0]]]
        scatter += Z.T @ Z
    return counts, means, scatter


def class_moments_task(p, sup, k: int, per_class: bool | None, codes: bool = True) -> tuple:
    """:func:`class_moments` of partition ``p``'s rows as the learner sees
    them (``sup.rows(p)``) by global class code (``codes=False``: one class,
    every row)."""
    X = sup.rows(p)
    c = sup.codes_of(p) if codes else np.zeros(X.shape[0], np.int64)
    return class_moments(X, c, k, per_class)


def merge_class_moments(*items) -> tuple:
    """Chan et al.'s pairwise merge of :func:`class_moments` triples, class
    by class (an absent class, count 0, takes the other side as it is)."""
    n, mean, sc = items[0]
    n, mean = n.copy(), mean.copy()
    sc = None if sc is None else sc.copy()
    for nb, mb, scb in items[1:]:
        tot = n + nb
        safe = np.maximum(tot, 1).astype(np.float64)
        delta = mb - mean
        mean += delta * (nb / safe)[:, None]
        g = n.astype(np.float64) * nb / safe               # n_a n_b / n (0 if one is empty)
        if sc is not None:
            if sc.ndim == 3:
                sc += scb
                used = np.flatnonzero(g > 0)
                for c in used:
                    sc[c] += g[c] * np.outer(delta[c], delta[c])
            else:
                sc += scb + (delta.T * g) @ delta
        n = tot
    return n, mean, sc


def pair_sums_task(p, sup, cols: tuple, rows_sup=None) -> tuple:
    """``(m, [sum_t (x_q - x_j)(x_q - x_j)^T for j in cols])`` over the
    partition's triplets ``t = (q, p+, p-)`` (column 1: the similar pairs,
    2: the dissimilar ones), unnormalized, 4096 triplets at a time.  The
    triplets are ``sup``'s (sampled on the rows the learner's sampling
    policy sees, as in memory); the differences are of ``rows_sup.rows(p)``
    (default ``sup``'s rows)."""
    X = sup.rows(p)
    T = sup.triplets(p, X)
    if rows_sup is not None:
        X = rows_sup.rows(p)
    d = X.shape[1]
    acc = [np.zeros((d, d)) for _ in cols]
    for s in range(0, T.shape[0], 4096):
        t = T[s:s + 4096]
        Q = X[t[:, 0]]
        for a, col in zip(acc, cols):
            E = Q - X[t[:, col]]
            G = E.T @ E
            a += G.toarray() if sp.issparse(G) else np.asarray(G)
    return int(T.shape[0]), acc


def add_pair_sums(*items) -> tuple:
    """Sum of :func:`pair_sums_task` results."""
    m = sum(i[0] for i in items)
    acc = [a.copy() for a in items[0][1]]
    for _, other in items[1:]:
        for a, b in zip(acc, other):
            a += b
    return m, acc


def add_arrays(*items):
    """Element-wise sum of equal-length tuples of arrays."""
    out = [a.copy() for a in items[0]]
    for it in items[1:]:
        for a, b in zip(out, it):
            a += b
    return tuple(out)


# ---------------------------------------------------------------------------
# the drivers' reductions
# ---------------------------------------------------------------------------
def gather_reduce(backend, func, handles):
    """``func``-reduce of ``handles`` in the backend's tree, gathered (the
    handles released)."""
    out = backend.gather(backend.reduce(func, handles))
    backend.release(handles)
    return out


def rca_label_scatters(plan, sup, k: int) -> tuple:
    """RCA's ``(C, T)`` from labels (each class one chunklet): the pooled
    within-class scatter over the rows of classes with two or more members,
    and the total scatter ``T = sum_c scatter_c + sum_c n_c (mu_c - mu)(mu_c
    - mu)^T`` (a singleton class's scatter is 0)."""
    be = plan.backend
    counts, means, W = gather_reduce(be, merge_class_moments,
                                     be.map(class_moments_task, sup, k, False))
    check_labels(counts, "RCA: every class has a single member; no chunklet of two or "
                 "more equivalent points exists.")
    return W / max(int(counts[counts >= 2].sum()), 1), _total(counts, means, W)


def _total(counts, means, W) -> np.ndarray:
    nc = counts.astype(np.float64)
    mean = (nc @ means) / max(float(nc.sum()), 1.0)
    Z = means - mean
    return W + (Z.T * nc) @ Z


def rca_triplet_scatters(plan, sup) -> tuple:
    """RCA's ``(C, T)`` from the partitions' triplets: every ``(q, p+)`` a
    chunklet of two (scatter ``(q - p+)(q - p+)^T / 2``), ``C`` their sum over
    the ``2 m`` chunklet points, and the total scatter of every row."""
    be = plan.backend
    m, (P,) = gather_reduce(be, add_pair_sums, be.map(pair_sums_task, sup, (1,)))
    counts, means, W = gather_reduce(be, merge_class_moments,
                                     be.map(class_moments_task, sup, 1, False, False))
    return P / (4.0 * max(m, 1)), _total(counts, means, W), m


def check_labels(counts: np.ndarray, msg: str) -> None:
    """ValueError ``msg`` when every class has a single member."""
    if counts.max() < 2:
        raise ValueError(msg)
