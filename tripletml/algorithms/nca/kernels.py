"""NCA's objective and gradient in terms of the linear map ``L`` (Goldberger,
Roweis, Hinton & Salakhutdinov, "Neighborhood components analysis", NIPS
2004).

Each row ``i`` picks a neighbor ``j != i`` with the softmax probability

    p_ij = exp(-||L x_i - L x_j||^2) / sum_{k != i} exp(-||L x_i - L x_k||^2)

(eq. 1), and is classified correctly with probability ``p_i = sum_{j in
C_i} p_ij`` (eq. 2, ``C_i`` the rows of its class).  NCA maximizes the
expected number of correct points ``f(L) = sum_i p_i`` (eq. 3), whose
gradient (eq. 5) is

    df/dL = -2 sum_i sum_k p_ik (s_ik - p_i) (z_i - z_k)(x_i - x_k)^T,

``s_ik = 1`` when ``k`` is in ``C_i``, ``z = L x``.  The solver minimizes
``-f``; the (n x n) probabilities are formed a block of rows at a time
(:func:`tripletml.linalg.pairwise.squared_distances_block`) and the weighted
outer products summed with :class:`~tripletml.linalg.pairwise.PairOuterSum`,
so memory stays O(block x n).

From explicit triplets ``(q, p+, p-)`` the softmax of ``q`` runs over the
rows its triplets name (its candidates), and ``s_qj`` is the fraction of
the triplets naming ``(q, j)`` in which ``j`` is the positive (1 for a row
only ever positive, 0 for one only ever negative): with every class triplet
of a labeled set it is the objective above.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.linalg.pairwise import PairOuterSum, block_size, squared_distances_block

__all__ = ["NCAObjective", "NCATripletObjective"]


class NCAObjective:
    """``-f(L)`` and its gradient from class labels (module docstring).

    The rows are kept sorted by class (``f`` and its gradient are sums over
    pairs, unchanged by the order), so that the same-class neighbors of a
    block's rows are contiguous column ranges."""

    def __init__(self, X: np.ndarray, codes: np.ndarray):
        codes = np.asarray(codes, dtype=np.int64)
        order = np.argsort(codes, kind="stable")
        self.X, self.codes = np.ascontiguousarray(X[order]), codes[order]
        counts = np.bincount(self.codes)
        self.ends = np.cumsum(counts)
        self.starts = self.ends - counts

    def __call__(self, L: np.ndarray):
        X, codes = self.X, self.codes
        n = X.shape[0]
        Z = X @ L.T
        sq = np.einsum("ij,ij->i", Z, Z)
        if not np.isfinite(sq).all():             # distances overflow: diverged
            return np.inf, np.zeros_like(L), {"expected_correct": np.nan}
        acc = PairOuterSum(Z, X)
        step = block_size(n, n)
        total = 0.0
        for s in range(0, n, step):
            e = min(n, s + step)
            b = e - s
            D = squared_distances_block(Z, slice(s, e), sq)
            D[np.arange(b), np.arange(s, e)] = np.inf               # j != i
            np.subtract(D.min(axis=1, keepdims=True), D, out=D)      # stable softmax
            P = np.exp(D, out=D)
            P /= P.sum(axis=1, keepdims=True)
            p = np.empty(b)
            same = []
            for c in range(int(codes[s]), int(codes[e - 1]) + 1):   # classes of the block
                rs, re = max(s, self.starts[c]) - s, min(e, self.ends[c]) - s
                sub = P[rs:re, self.starts[c]:self.ends[c]]
                p[rs:re] = sub.sum(axis=1)                           # p_i (eq. 2)
                same.append((rs, re, c, sub.copy()))
            total += float(p.sum())
            P *= -p[:, None]                                          # p_ik (s_ik - p_i)
            for rs, re, c, sub in same:
                P[rs:re, self.starts[c]:self.ends[c]] += sub
            acc.add(slice(s, e), P)
        return -total, 2.0 * acc.result(), {"expected_correct": total}


class NCATripletObjective:
    """``-f(L)`` from explicit triplets: each query's softmax over its
    candidates (module docstring)."""

    def __init__(self, X: np.ndarray, triplets: np.ndarray):
        self.X = X
        t = np.asarray(triplets, dtype=np.int64)
        n = X.shape[0]
        q = np.concatenate([t[:, 0], t[:, 0]])
        j = np.concatenate([t[:, 1], t[:, 2]])
        pos = np.concatenate([np.ones(len(t)), np.zeros(len(t))])
        key = q * n + j
        uk, inv = np.unique(key, return_inverse=True)            # sorted by q, then j
        cnt = np.bincount(inv)
        self.s = np.bincount(inv, weights=pos) / cnt
        self.q, self.j = uk // n, uk % n
        # segments of equal q
        self.starts = np.flatnonzero(np.r_[True, self.q[1:] != self.q[:-1]])
        self.seg = np.repeat(np.arange(self.starts.size), np.diff(np.r_[self.starts, uk.size]))

    def __call__(self, L: np.ndarray):
        X = self.X
        n = X.shape[0]
        Z = X @ L.T
        Dq = Z[self.q] - Z[self.j]
        d = np.einsum("ij,ij->i", Dq, Dq)
        if not np.isfinite(d).all():              # distances overflow: diverged
            return np.inf, np.zeros_like(L), {"expected_correct": np.nan}
        dmin = np.minimum.reduceat(d, self.starts)
        e = np.exp(-(d - dmin[self.seg]))
        p = e / np.add.reduceat(e, self.starts)[self.seg]
        fq = np.add.reduceat(self.s * p, self.starts)
        total = float(fq.sum())
        w = p * (self.s - fq[self.seg])
        W = sp.csr_matrix((w, (self.q, self.j)), shape=(n, n))
        acc = PairOuterSum(Z, X)
        acc.add(slice(0, n), W)
        return -total, 2.0 * acc.result(), {"expected_correct": total}
