"""The triplet distance-metric-learning problem shared by low-rank DML
(:mod:`tripletml.algorithms.lowrank_dml.kernels`) and SML (:mod:`tripletml.algorithms.sml.kernels`):
the data, the triplets and the hinge (or LMNN-style) loss on squared
Mahalanobis distances, with objectives and minibatch gradients for a
factored ``W = L L^T`` or a dense W.

With ``identity_weight`` w > 0 the distances are those of ``w I + W``
(``||a||_{wI + W}^2 = w ||a||^2 + ||a||_W^2``): the loss is
``f(w I + W)`` while W (the solvers' iterate) is the learned correction.
The gradient of ``f(w I + W)`` in W has the same form as in W alone (the
weights of the triplets whose shifted margin is below 1), so every solver
runs unchanged; the regularizer (``alpha tr(W)``) and the ball act on the
correction.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.linalg.sparse_rows import as_csr, rowwise_dot, triplet_products
from tripletml.losses import triplet_hinge_array

__all__ = ["TripletDMLProblem"]


class TripletDMLProblem:
    """Data, triplets and loss of one low-rank DML fit."""

    def __init__(self, X, triplets: np.ndarray, loss: str = "triplet", alpha: float = 0.0,
                 push_weight: float = 1.0, identity_weight: float = 0.0):
        self.X = X
        self.t = np.asarray(triplets, dtype=np.int64)
        self.loss = loss
        self.alpha = float(alpha)
        self.c = float(push_weight)
        self.n, self.d = X.shape
        self.m = self.t.shape[0]
        #: the minibatch loss ``f_B(W)`` of the last gradient evaluated
        #: (:meth:`gradient_factor`, :meth:`dense_gradient`)
        self.batch_loss = float("nan")
        self.identity_weight = float(identity_weight)
        #: ``w ||a_t||^2`` and ``w ||b_t||^2`` per triplet (None when w = 0)
        self.base_a = self.base_b = None
        if self.identity_weight:
            self.base_a, self.base_b = self.identity_distances(X, self.t, self.identity_weight)

    @staticmethod
    def identity_distances(X, triplets: np.ndarray, weight: float = 1.0):
        """``(w ||x_i - x_j||^2, w ||x_i - x_k||^2)`` for every triplet
        ``(i, j, k)`` (the shared kernel
        :func:`tripletml.linalg.sparse_rows.triplet_products` on ``(i, i, j)``
        and ``(i, i, k)``: no m x d array)."""
        t = np.asarray(triplets, dtype=np.int64)
        if not sp.issparse(X):     # distances are translation-free: centred rows keep
            X = np.asarray(X, dtype=np.float64)      # the Gram route exact under an offset
            X = X - X.mean(axis=0)
        Xc = as_csr(X)
        da = triplet_products(Xc, t[:, [0, 0, 1]])[2]
        db = triplet_products(Xc, t[:, [0, 0, 2]])[2]
        return weight * da, weight * db

    def _shift(self, da2: np.ndarray, db2: np.ndarray, pos):
        """Add the identity part's squared distances of the triplets at
        positions ``pos`` (an index array or a slice of ``self.t``)."""
        if self.base_a is None:
            return da2, db2
        return da2 + self.base_a[pos], db2 + self.base_b[pos]

    # ------------------------------------------------------------ pieces
    def diffs(self, idx):
        """``a_t = x_i - x_j`` and ``b_t = x_i - x_k`` for triplets ``idx``
        (rows; CSR for sparse X)."""
        t = self.t[idx]
        Xi = self.X[t[:, 0]]
        return Xi - self.X[t[:, 1]], Xi - self.X[t[:, 2]]

    def weights(self, da2: np.ndarray, db2: np.ndarray):
        """Per-triplet gradient weights ``(w_a, w_b)`` from the squared
        distances ``||a_t||_W^2, ||b_t||_W^2`` (a non-finite distance stops
        training: NaN margins would silently count as inactive)."""
        if not (np.isfinite(da2).all() and np.isfinite(db2).all()):
            raise FloatingPointError("LowRankDML: training diverged (non-finite distances "
                                     "under W); scale the features down or lower eta0.")
        active = (triplet_hinge_array(db2 - da2) > 0.0).astype(float)
        if self.loss == "triplet":
            return active, active
        return self.c * active + 1.0, self.c * active

    def loss_terms(self, da2: np.ndarray, db2: np.ndarray) -> np.ndarray:
        """Per-triplet loss from the squared distances: the triplet hinge of
        the margin ``db2 - da2`` (times c, plus the pull term ``da2``, for
        lmnn)."""
        hinge = triplet_hinge_array(db2 - da2)
        return hinge if self.loss == "triplet" else self.c * hinge + da2

    # ------------------------------------------------- squared distances
    @staticmethod
    def sq_dists_factored(D, L: np.ndarray) -> np.ndarray:
        """``||d||_W^2`` for the rows d of D with ``W = L L^T`` (L: d x r)."""
        if L.shape[1] == 0:
            return np.zeros(D.shape[0])
        Z = np.asarray(D @ L)
        return np.einsum("ij,ij->i", Z, Z)

    @staticmethod
    def sq_dists_dense(D, W: np.ndarray) -> np.ndarray:
        """``d^T W d`` for the rows d of D (dense W)."""
        return rowwise_dot(np.asarray(D @ W), D)

    def objective_from(self, P, Q, trace: float) -> float:
        """F(W) over all triplets, given ``x_u^T W x_v = P_u . Q_v`` (P = Q =
        X L for a factored W; P = X W, Q = X for a dense one)."""
        return self.loss_sum_from(P, Q) / self.m + self.alpha * trace

    def loss_sum_from(self, P, Q) -> float:
        """``sum_t loss_t(W)`` over all triplets (not divided by m), given
        ``x_u^T W x_v = P_u . Q_v``: the part of F(W) that is a sum over
        triplets (summed over partitions by
        :mod:`tripletml.distributed.gradient_sums`)."""
        qq = rowwise_dot(P, Q)
        total = 0.0
        step = 65536
        for a in range(0, self.m, step):
            t = self.t[a:a + step]
            i, j, k = t[:, 0], t[:, 1], t[:, 2]
            da2 = qq[i] + qq[j] - 2.0 * rowwise_dot(P[i], Q[j])
            db2 = qq[i] + qq[k] - 2.0 * rowwise_dot(P[i], Q[k])
            da2, db2 = self._shift(da2, db2, slice(a, a + step))
            total += float(np.sum(self.loss_terms(da2, db2)))
        return total

    def objective_factored(self, L: np.ndarray) -> float:
        """F(W) at ``W = L L^T``."""
        return self.loss_sum_factored(L) / self.m + self.alpha * float(np.sum(L * L))

    def objective_dense(self, W: np.ndarray) -> float:
        """F(W) at the dense W."""
        return self.loss_sum_dense(W) / self.m + self.alpha * float(np.trace(W))

    def loss_sum_factored(self, L: np.ndarray) -> float:
        """``sum_t loss_t(L L^T)`` over all triplets."""
        Z = np.asarray(self.X @ L) if L.shape[1] else np.zeros((self.n, 1))
        return self.loss_sum_from(Z, Z)

    def loss_sum_dense(self, W: np.ndarray) -> float:
        """``sum_t loss_t(W)`` over all triplets (dense W)."""
        return self.loss_sum_from(np.asarray(self.X @ W), self.X)

    # ---------------------------------------------------------- gradients
    def gradient_factor(self, idx, L=None, W=None, scale: float = 1.0):
        """``(A, signs)`` with ``A diag(signs) A^T = -scale * g_B`` (the
        minibatch gradient over triplets ``idx`` at W = L L^T or the dense
        W), keeping only triplets with non-zero weight: c = the number of
        non-zero columns <= ``2 |idx|``.  A is CSC for sparse X."""
        ka, Ra, kb, Rb, loss_sum = self.gradient_rows(idx, L=L, W=W, scale=scale)
        self.batch_loss = loss_sum / len(idx)
        return self.factor_from_rows(Ra, Rb)

    def gradient_rows(self, idx, L=None, W=None, scale: float = 1.0,
                      n_batch: int | None = None):
        """The pieces of :meth:`gradient_factor` over the triplets ``idx``
        of a minibatch of ``n_batch`` triplets (default ``len(idx)``; the
        others may live on other partitions): ``(ka, Ra, kb, Rb, loss_sum)``
        with ``ka`` / ``kb`` the positions in ``idx`` of the triplets with
        non-zero weight ``w_a`` / ``w_b``, the rows ``Ra = sqrt(scale w_a /
        n_batch) a_t`` and ``Rb = sqrt(scale w_b / n_batch) b_t`` (CSR for
        sparse X) and ``loss_sum = sum_{t in idx} loss_t`` (not divided)."""
        n_batch = len(idx) if n_batch is None else int(n_batch)
        Da, Db = self.diffs(idx)
        da2, db2 = self._shift(*self._sq(Da, Db, L, W), idx)
        wa, wb = self.weights(da2, db2)
        loss_sum = float(np.sum(self.loss_terms(da2, db2)))
        ka, kb = np.flatnonzero(wa), np.flatnonzero(wb)
        ca = np.sqrt(scale * wa[ka] / n_batch)
        cb = np.sqrt(scale * wb[kb] / n_batch)
        if sp.issparse(Da):
            Ra, Rb = sp.diags(ca) @ Da[ka], sp.diags(cb) @ Db[kb]
        else:
            Ra, Rb = Da[ka] * ca[:, None], Db[kb] * cb[:, None]
        return ka, Ra, kb, Rb, loss_sum

    @staticmethod
    def factor_from_rows(Ra, Rb):
        """``(A, signs)`` from the rows of :meth:`gradient_rows`: ``A = [Ra;
        Rb]^T`` (CSC when sparse), signs -1 for the a-columns, +1 for the
        b-columns."""
        if sp.issparse(Ra) or sp.issparse(Rb):
            A = sp.vstack([sp.csr_matrix(Ra), sp.csr_matrix(Rb)]).T.tocsc()
        else:
            A = np.vstack([Ra, Rb]).T
        signs = np.concatenate([-np.ones(Ra.shape[0]), np.ones(Rb.shape[0])])
        return A, signs

    def _sq(self, Da, Db, L, W):
        if W is None:
            return self.sq_dists_factored(Da, L), self.sq_dists_factored(Db, L)
        return self.sq_dists_dense(Da, W), self.sq_dists_dense(Db, W)

    def sample_matrix(self, idx, wa, wb) -> sp.csr_matrix:
        """Sparse n x n ``C`` with ``X^T C X = sum_t w_a a a^T - w_b b b^T``
        over triplets ``idx`` (a_t = x_i - x_j: ``(e_i - e_j)(e_i - e_j)^T``)."""
        t = self.t[idx]
        rows, cols, vals = [], [], []
        for other, w in ((t[:, 1], wa), (t[:, 2], -wb)):
            i = t[:, 0]
            rows += [i, other, i, other]
            cols += [i, other, other, i]
            vals += [w, w, -w, -w]
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows),
                                                    np.concatenate(cols))),
                             shape=(self.n, self.n))

    def dense_gradient(self, idx, W: np.ndarray, include_alpha: bool = False) -> np.ndarray:
        """The (minibatch) gradient of f at the dense W as a dense d x d
        array, ``X^T C X / |idx|`` (plus ``alpha I`` when asked)."""
        G, loss_sum = self.dense_gradient_sum(idx, W)
        self.batch_loss = loss_sum / len(idx)
        G = 0.5 * (G + G.T)
        if include_alpha:
            G[np.diag_indices_from(G)] += self.alpha
        return G

    def dense_gradient_sum(self, idx, W: np.ndarray, n_batch: int | None = None):
        """``(X^T C X / n_batch, loss_sum)`` over the triplets ``idx`` of a
        minibatch of ``n_batch`` triplets (default ``len(idx)``): the
        unsymmetrized part of :meth:`dense_gradient` they contribute and the
        sum of their losses."""
        n_batch = len(idx) if n_batch is None else int(n_batch)
        Da, Db = self.diffs(idx)
        da2, db2 = self._shift(*self._sq(Da, Db, None, W), idx)
        wa, wb = self.weights(da2, db2)
        loss_sum = float(np.sum(self.loss_terms(da2, db2)))
        C = self.sample_matrix(idx, wa, wb) / n_batch
        CX = C @ self.X
        CX = CX.toarray() if sp.issparse(CX) else np.asarray(CX)
        return np.asarray(self.X.T @ CX), loss_sum
