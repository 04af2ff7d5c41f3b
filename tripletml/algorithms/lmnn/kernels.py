"""LMNN's objective and gradient in terms of the linear map ``L`` (Weinberger
& Saul, "Distance metric learning for large margin nearest neighbor
classification", JMLR 10, 2009).

With target neighbors ``j ~> i`` (fixed before training) and
``d_ab = ||L (x_a - x_b)||^2``, the loss (eqs. 11-13) is

    E(L) = (1 - mu) sum_{i, j~>i} d_ij
           + mu sum_{i, j~>i} sum_l (1 - y_il) [1 + d_ij - d_il]_+ ,

``y_il = 1`` when ``l`` has the class of ``i``.  Its (sub)gradient (Section
5.1) is a weighted sum of outer products of differences,

    dE/dL = 2 L [ (1 - mu) sum C_ij + mu sum_{(i,j,l) active} (C_ij - C_il) ],
    C_ab = (x_a - x_b)(x_a - x_b)^T,

i.e. the pair ``(i, j)`` weighs ``(1 - mu) + mu #{l : (i, j, l) active}`` and
the pair ``(i, l)`` weighs ``-mu #{j : (i, j, l) active}``: one sparse n x n
weight matrix, summed with :class:`tripletml.linalg.pairwise.PairOuterSum`.
The active triplets are found at every evaluation from the current ``L``:
the impostors ``l`` of ``i`` are the rows of other classes within
``1 + max_j d_ij`` of ``i`` in the embedded space (a ball tree's radius
query in few dimensions, blocks of brute-force distances otherwise).

From explicit triplets ``(q, p+, p-)`` the targets are the distinct
``(q, p+)`` pairs and the push term is the hinge of each given triplet
(the triplets are the constraints; no impostor search).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from tripletml.linalg.pairwise import PairOuterSum, block_size, squared_distances_block

__all__ = ["select_targets", "LMNNObjective", "LMNNTripletObjective"]

#: embedded widths up to which impostors are found with a ball tree (when
#: there are at least TREE_MIN_ROWS rows); brute-force blocks otherwise
TREE_MAX_DIM = 8
TREE_MIN_ROWS = 4000


@njit(cache=True, nogil=True)
def _threshold_pairs(G, bn, sq, thr_row, thr_col):
    """The pairs of a block of rows ``a`` and columns ``b`` with
    ``D_ab = bn[a] + sq[b] - 2 G[a, b]`` below ``thr_row[a]`` (returned as
    ``(a, b')``, ``b' = b + n_rows``) or below ``thr_col[b]`` (returned as
    ``(b', a)``): one pass over ``G``, no distance matrix."""
    nr, nc = G.shape
    cap = 1024
    out_i = np.empty(cap, np.int64)
    out_l = np.empty(cap, np.int64)
    m = 0
    for a in range(nr):
        ta = thr_row[a] - bn[a]
        ba = bn[a]
        for b in range(nc):
            base = sq[b] - 2.0 * G[a, b]
            hit_row = base < ta
            hit_col = base + ba < thr_col[b]
            if hit_row or hit_col:
                if m + 2 > cap:
                    cap *= 2
                    ni = np.empty(cap, np.int64)
                    nl = np.empty(cap, np.int64)
                    ni[:m] = out_i[:m]
                    nl[:m] = out_l[:m]
                    out_i, out_l = ni, nl
                if hit_row:
                    out_i[m] = a
                    out_l[m] = b + nr
                    m += 1
                if hit_col:
                    out_i[m] = b + nr
                    out_l[m] = a
                    m += 1
    return out_i[:m].copy(), out_l[:m].copy()


def _unsort(order, i, l, s, end, nr):
    """Kernel indices (``< nr``: row ``s + .`` of the sorted rows, else
    column ``end + . - nr``) back to the original row numbers."""
    def orig(k):
        return order[np.where(k < nr, s + k, end + k - nr)]
    return orig(i), orig(l)


#: relative grid of the distances compared when choosing target neighbors:
#: rows at the same distance to this precision (exact ties of the raw data,
#: e.g. integer pixels, which rounding in the preprocessing would otherwise
#: break at random) are ordered by row number
TARGET_TIE_RTOL = 1e-10


def select_targets(X: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` nearest same-class rows of every row (Euclidean on X): an
    ``(n, k)`` int64 array, nearest first, padded with -1 where a class has
    ``m <= k`` members (its rows get ``m - 1`` targets).

    Distances equal to a relative :data:`TARGET_TIE_RTOL` of the mean
    squared norm of the centered rows count as ties, broken by the lower row
    number, so that a rescaled or permuted copy of X picks the same targets.
    Each class's distances are formed in blocks of rows (O(m^2 d) time for
    a class of m rows, O(block x m) memory)."""
    n = X.shape[0]
    Xc = X - X.mean(axis=0)
    scale = float(np.einsum("ij,ij->", Xc, Xc)) / max(n, 1)
    step_d = TARGET_TIE_RTOL * scale if scale > 0 else 1.0
    targets = np.full((n, k), -1, dtype=np.int64)
    for c in range(int(codes.max()) + 1):
        idx = np.flatnonzero(codes == c)
        m = idx.size
        kk = min(k, m - 1)
        if kk <= 0:
            continue
        Y = Xc[idx]
        sq = np.einsum("ij,ij->i", Y, Y)
        cap = (2 ** 62) // m                       # key = quantised distance * m + rank
        rows = block_size(m, m)
        for s in range(0, m, rows):
            e = min(m, s + rows)
            D = squared_distances_block(Y, slice(s, e), sq)
            q = np.minimum(np.rint(D / step_d), cap - 1).astype(np.int64)
            key = q * m + np.arange(m)
            key[np.arange(e - s), np.arange(s, e)] = np.iinfo(np.int64).max   # not itself
            part = np.argpartition(key, kk - 1, axis=1)[:, :kk]      # kk <= m - 1
            order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1)
            targets[idx[s:e], :kk] = idx[np.take_along_axis(part, order, axis=1)]
    return targets


def _rowwise_sq(Z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``||Z[a] - Z[b]||^2`` row by row (exact differences)."""
    D = Z[a] - Z[b]
    return np.einsum("ij,ij->i", D, D)


class LMNNObjective:
    """``E(L)`` and ``dE/dL`` from class labels (module docstring).

    Parameters
    ----------
    X : ndarray (n, d), the (preprocessed) rows
    codes : ndarray (n,), class codes 0..C-1
    targets : ndarray (n, k), target neighbors (-1: none)
    mu : float, the push weight (``regularization``)
    """

    def __init__(self, X: np.ndarray, codes: np.ndarray, targets: np.ndarray, mu: float):
        self.X, self.codes, self.targets, self.mu = X, codes, targets, float(mu)
        self.valid = targets >= 0
        self.has_target = self.valid.any(axis=1)
        rows = np.repeat(np.arange(X.shape[0]), targets.shape[1])
        keep = self.valid.ravel()
        self.pull_i = rows[keep]
        self.pull_j = targets.ravel()[keep]
        # rows sorted by class: the pairs of two classes are one rectangle
        self.order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes[self.order])
        self.class_ends = np.cumsum(counts)

    # --------------------------------------------------------------- impostors
    def _candidates(self, Z: np.ndarray, radius: np.ndarray):
        """Pairs ``(i, l)`` with ``codes[i] != codes[l]`` and ``d_il`` (computed
        with a slack of rounding) below ``radius[i]``, blocks at a time:
        yields ``(i, l)`` index arrays."""
        n, r = Z.shape
        codes = self.codes
        slack = 1e-9 * (radius + 1.0)
        if r <= TREE_MAX_DIM and n >= TREE_MIN_ROWS:
            from sklearn.neighbors import BallTree
            tree = BallTree(Z)
            rows = np.flatnonzero(self.has_target)
            step = block_size(rows.size, 64)
            for s in range(0, rows.size, step):
                q = rows[s:s + step]
                found = tree.query_radius(Z[q], r=np.sqrt(radius[q] + slack[q]))
                lens = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
                if not lens.sum():
                    continue
                i = np.repeat(q, lens)
                l = np.concatenate(found).astype(np.int64)
                other = codes[i] != codes[l]
                yield i[other], l[other]
            return
        # brute force, each pair of rows of different classes once: the rows
        # of class c against those of the classes after it (rows sorted by
        # class), an impostor of either end when within that end's radius
        o = self.order
        Zs = Z[o] - Z.mean(axis=0)                  # distances unchanged, smaller norms
        sq = np.einsum("ij,ij->i", Zs, Zs)
        # a margin over the rounding of |z|^2 + |y|^2 - 2 z.y (the pairs kept
        # are recomputed from differences and tested exactly)
        slack = slack[o] + 1e-14 * (sq + sq.max())
        thr = np.where(self.has_target[o], radius[o] + slack, -np.inf)
        start = 0
        for end in self.class_ends[:-1]:
            if end == start:
                continue
            cols = slice(end, n)
            Y = Zs[cols]
            step = block_size(end - start, n - end)
            for s in range(start, end, step):
                e = min(end, s + step)
                G = Zs[s:e] @ Y.T
                i, l = _threshold_pairs(G, sq[s:e], sq[cols], thr[s:e], thr[cols])
                # kernel indices: rows of the block are 0..e-s-1, columns
                # e-s + (0..n-end-1)
                yield _unsort(o, i, l, s, end, e - s)
            start = end

    def __call__(self, L: np.ndarray):
        """``(E, dE/dL, info)``; info: ``active`` (triplets in the hinge),
        ``impostors`` (pairs (i, l) in at least one active triplet)."""
        X, mu = self.X, self.mu
        n, k = self.targets.shape
        Z = X @ L.T
        dT = np.full((n, k), -np.inf)
        dT[self.valid] = _rowwise_sq(Z, self.pull_i, self.pull_j)
        radius = 1.0 + dT.max(axis=1)                          # -inf: no target
        blocks = self._candidates(Z, radius)
        pull_count = np.zeros((n, k))
        push_i, push_l, push_w = [], [], []
        hinge = 0.0
        active = 0
        for ci, cl in blocks:
            if ci.size == 0:
                continue
            dil = _rowwise_sq(Z, ci, cl)                       # exact
            slackm = 1.0 + dT[ci] - dil[:, None]                # (m, k), -inf: no target
            act = slackm > 0
            cnt = act.sum(axis=1)
            keep = cnt > 0
            if not keep.any():
                continue
            hinge += float(slackm[act].sum())
            active += int(cnt.sum())
            # pull weight of (i, j): + mu per active l
            flat = (ci[:, None] * k + np.arange(k))[act]
            pull_count += np.bincount(flat, minlength=n * k).reshape(n, k)
            push_i.append(ci[keep])
            push_l.append(cl[keep])
            push_w.append(-mu * cnt[keep])
        pull = float(dT[self.valid].sum())
        value = (1.0 - mu) * pull + mu * hinge
        w_pull = ((1.0 - mu) + mu * pull_count)[self.valid]
        if push_i:
            ri = np.concatenate([self.pull_i] + push_i)
            cj = np.concatenate([self.pull_j] + push_l)
            w = np.concatenate([w_pull] + push_w)
        else:
            ri, cj, w = self.pull_i, self.pull_j, w_pull
        W = sp.csr_matrix((w, (ri, cj)), shape=(n, n))       # duplicates summed
        acc = PairOuterSum(Z, X)
        acc.add(slice(0, n), W)
        grad = 2.0 * acc.result()
        n_imp = int(sum(a.size for a in push_i))
        return value, grad, {"active": active, "impostors": n_imp}


class LMNNTripletObjective:
    """``E(L)`` from explicit triplets: ``(1 - mu)`` times the sum of
    ``d_qp`` over the distinct ``(q, p+)`` pairs plus ``mu`` times the sum
    of ``[1 + d_qp - d_qn]_+`` over the triplets."""

    def __init__(self, X: np.ndarray, triplets: np.ndarray, mu: float):
        self.X, self.mu = X, float(mu)
        t = np.asarray(triplets, dtype=np.int64)
        self.q, self.p, self.m = t[:, 0], t[:, 1], t[:, 2]
        pairs = np.unique(t[:, :2], axis=0)
        self.pull_i, self.pull_j = pairs[:, 0], pairs[:, 1]

    def __call__(self, L: np.ndarray):
        X, mu = self.X, self.mu
        n = X.shape[0]
        Z = X @ L.T
        dpull = _rowwise_sq(Z, self.pull_i, self.pull_j)
        dqp = _rowwise_sq(Z, self.q, self.p)
        dqn = _rowwise_sq(Z, self.q, self.m)
        s = 1.0 + dqp - dqn
        act = s > 0
        value = (1.0 - mu) * float(dpull.sum()) + mu * float(s[act].sum())
        ri = np.concatenate([self.pull_i, self.q[act], self.q[act]])
        cj = np.concatenate([self.pull_j, self.p[act], self.m[act]])
        na = int(act.sum())
        w = np.concatenate([np.full(self.pull_i.size, 1.0 - mu), np.full(na, mu),
                            np.full(na, -mu)])
        W = sp.csr_matrix((w, (ri, cj)), shape=(n, n))
        acc = PairOuterSum(Z, X)
        acc.add(slice(0, n), W)
        return value, 2.0 * acc.result(), {"active": na, "impostors": na}
