"""LORETA: online learning on the manifold of rank-k matrices
(Shalit, Weinshall & Chechik, NIPS 2010).

The similarity ``S_W(q, p) = q^T W p`` uses ``W = A B^T`` with ``A, B`` of
full column rank k.  For a triplet ``(q, p+, p-)`` with hinge loss
``l = [1 - q^T W v]_+``, ``v = p+ - p-``, the ambient gradient is the rank-one
``-q v^T``; a step moves along its projection onto the tangent space and
retracts with the second-order retraction of Theorem 1,
``R_x(xi) = w1 x^+ w2`` (eq. 3), written on the factors:

* **LORETA-1** (Algorithm 3) for rank-one gradients ``G1 G2^T = eta q v^T``:

      A^ = A^+ G1,  B^ = B^+ G2,  Q = B^^T A^,
      A_delta = A A^ (-1/2 + 3Q/8) + G1 (1 - Q/2),   A <- A + A_delta B^^T,
      B_delta = B^+^T (B^T G2) (-1/2 + 3Q/8) + G2 (1 - Q/2),  B <- B + B_delta A^^T,

  and the pseudo-inverses follow by Meyer's rank-one update
  (:func:`tripletml.linalg.rank_one_update_with_pinv`): O((n + m) k) time and
  memory per step, never O(n k^2).
* **General LORETA** (Algorithm 2) for rank-r gradients (mini-batches of r
  triplets): the same formulas with n x r and r x r blocks and exact
  pseudo-inverses, O((n + m)(k + r)^2) per step.

Rank-one updates make the maintained pseudo-inverses drift, the faster the
worse the factors are conditioned.  Every ``pinv_check_every`` steps
``||A^+ A - I||_F`` (and the same for B) is measured (O(n k^2), amortised);
when it exceeds ``pinv_tol``, W is re-factored with balanced factors
(``cond(A) = cond(B) = sqrt(cond(W))``) and exact pseudo-inverses
(:func:`tripletml.linalg.balanced_factors`; W itself is unchanged).  The
largest drift measured is recorded in ``history_``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .._validation import check_choice_param, check_scalar_param
from ..linalg import (FAST, _pinv_apply, _pinv_prepare, balanced_factors, csr_row_diff,
                      diff_buffers, pinv_drift, pinv_full_column_rank)
from ._online import OnlineTripletLearner
from .factored import FactoredBilinearMixin, check_lowrank_params, factored_margin

__all__ = ["LORETA", "loreta_general_step", "loreta1_update"]


@njit(cache=True, nogil=True, fastmath=FAST)
def loreta1_update(A, PA, B, PB, i1, v1, s1, i2, v2, cA, cB, u, h, Ahat, Bhat, bv):
    """One LORETA-1 step (Algorithm 3) in place, for ``G1 G2^T = -eta grad``
    with sparse ``G1 = s1 * (i1, v1)`` (n-vector) and ``G2 = (i2, v2)``
    (m-vector).  Returns 0, or 1/2/3 when Meyer's update was not applicable
    to A/B/both (their pseudo-inverses must then be recomputed)."""
    n, k = A.shape
    m = B.shape[0]
    # A^ = A^+ G1, B^ = B^+ G2, B^T G2, Q = B^^T A^
    Ahat[:] = 0.0
    Bhat[:] = 0.0
    bv[:] = 0.0
    for s in range(i1.shape[0]):
        Ahat += PA[i1[s]] * (s1 * v1[s])
    for s in range(i2.shape[0]):
        Bhat += PB[i2[s]] * v2[s]
        bv += B[i2[s]] * v2[s]
    Q = 0.0
    for j in range(k):
        Q += Bhat[j] * Ahat[j]
    fa = -0.5 + 0.375 * Q
    fb = 1.0 - 0.5 * Q
    # A_delta = (A A^) fa + G1 fb and B_delta^T = (B^+^T (B^T G2)) fa + G2 fb:
    # the sparse parts are scattered first, the dense parts are added inside
    # pass 1 of Meyer's update (one pass over the rows less per factor)
    cA[:n] = 0.0
    for s in range(i1.shape[0]):
        cA[i1[s]] += fb * s1 * v1[s]
    cB[:m] = 0.0
    for s in range(i2.shape[0]):
        cB[i2[s]] += fb * v2[s]
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = _pinv_prepare(A, PA, cA, Bhat, h, kv, Ah, Ahat, fa)
    okA = _pinv_apply(A, PA, cA, Bhat, u, h, kv, Ah, hh)       # A + A_delta B^^T
    kv[:] = 0.0
    Ah[:] = 0.0
    hh = _pinv_prepare(PB, PB, cB, Ahat, h, kv, Ah, bv, fa)
    okB = _pinv_apply(B, PB, cB, Ahat, u, h, kv, Ah, hh)       # B + B_delta^T A^^T
    return (0 if okA else 1) + (0 if okB else 2)


@njit(cache=True, nogil=True, fastmath=FAST)
def _loreta1_steps(A, PA, B, PB, indptr, indices, data, triplets, start, eta, losses,
                   margins, vidx, vval, cA, cB, u, h):
    """LORETA-1 on triplets[start:], in order (hinge loss, ``G1 = eta q``,
    ``G2 = p+ - p-``).  Returns (t, flags): the index after the last step
    done and 0, or 1/2/3 from :func:`loreta1_update` at step t - 1 (the caller
    recomputes those pseudo-inverses and resumes at t), or -1 when the margin
    at step t was not finite."""
    k = A.shape[1]
    aq = np.zeros(k)
    Ahat = np.zeros(k)
    Bhat = np.zeros(k)
    bv = np.zeros(k)
    for t in range(start, triplets.shape[0]):
        q = triplets[t, 0]
        q_idx = indices[indptr[q]:indptr[q + 1]]
        q_val = data[indptr[q]:indptr[q + 1]]
        nv = csr_row_diff(indptr, indices, data, triplets[t, 1], triplets[t, 2], vidx, vval)
        mg = factored_margin(A, B, q_idx, q_val, vidx[:nv], vval[:nv], aq, bv)
        if not np.isfinite(mg):
            return t, -1
        margins[t] = mg
        loss = 1.0 - mg
        if loss <= 0.0:
            losses[t] = 0.0
            continue
        losses[t] = loss
        flags = loreta1_update(A, PA, B, PB, q_idx, q_val, eta, vidx[:nv], vval[:nv], cA, cB,
                               u, h, Ahat, Bhat, bv)
        if flags:
            return t + 1, flags
    return triplets.shape[0], 0


def loreta_general_step(A, B, G1, G2):
    """Algorithm 2 (general LORETA): factors of ``R_x(G1 G2^T)`` for
    ``x = A B^T`` and a rank-r step ``G1 G2^T = -eta grad`` (G1: n x r,
    G2: m x r, dense).  Pseudo-inverses are computed afresh (O((n+m)k^2)).
    Returns new ``(A, B)``."""
    PA = pinv_full_column_rank(A)          # (A^+)^T
    PB = pinv_full_column_rank(B)
    Ahat = PA.T @ G1                       # k x r
    Bhat = PB.T @ G2                       # k x r
    ProjAG = A @ Ahat                      # n x r
    Q = Bhat.T @ Ahat                      # r x r
    A_delta = -0.5 * ProjAG + 0.375 * ProjAG @ Q + G1 - 0.5 * G1 @ Q
    GBproj = (G2.T @ B) @ PB.T             # r x m
    B_delta = -0.5 * GBproj + 0.375 * Q @ GBproj + G2.T - 0.5 * Q @ G2.T
    return A + A_delta @ Bhat.T, B + (Ahat @ B_delta).T


class LORETA(FactoredBilinearMixin, OnlineTripletLearner):
    """Low-rank bilinear similarity by Riemannian SGD (LORETA).

    Parameters
    ----------
    rank : int, default=10
        k, the rank of ``W = A B^T`` (at most the number of features).
    step_size : float, default=0.1
        eta, the constant step size.
    n_epochs : int, default=1
        Passes over the triplets in ``fit`` (each in a new random order).
    n_triplets : int, default=100000
        Random class triplets sampled by ``fit`` from labels.
    batch_size : int, default=1
        Triplets per step.  1: LORETA-1 (Algorithm 3, rank-one gradients,
        O((n+m)k) per step).  r > 1: general LORETA (Algorithm 2) on the
        rank-r gradient of the mean hinge loss of r consecutive triplets.
    algorithm : {"auto", "general"}, default="auto"
        "general" forces Algorithm 2 even for ``batch_size=1`` (a reference
        and a benchmark baseline).
    init : {"identity", "random"}, default="identity"
        ``A = B = [I_k; 0]`` (k ones on the diagonal of W) or random normal
        factors (see :func:`tripletml.learners.factored.init_factors`).
    pinv_check_every : int, default=1000
        Steps between drift checks of the maintained pseudo-inverses.
    pinv_tol : float, default=1e-8
        Recompute the pseudo-inverses when ``||A^+ A - I||_F`` exceeds it.
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    A_, B_ : ndarray of shape (n_features, rank)
        Factors, ``W = A_ B_^T``; the similarity is ``(x^T A_) (B_^T y)``.
    pinv_A_, pinv_B_ : ndarray of shape (n_features, rank)
        ``(A_^+)^T`` and ``(B_^+)^T`` (LORETA-1 state).
    n_steps_ : int
        Triplets processed.
    n_pinv_refresh_ : int
        Times the pseudo-inverses were recomputed.
    history_ : dict of lists
        Per epoch / ``partial_fit`` call: ``step``, ``seconds``, ``loss``,
        ``avg_loss``, ``mistake_rate`` (as OASIS) and ``pinv_drift`` (the
        largest drift measured since the previous record).

    Notes
    -----
    ``partial_fit(X, triplets)`` with ``batch_size=1`` makes exactly one
    LORETA-1 step per triplet, in order; with ``batch_size=r`` it makes one
    general step per block of r consecutive triplets (the last block may be
    shorter).  X may be CSR with any number of features; the data are never
    densified and the memory is O(n k).
    """

    _history_keys = ("loss", "avg_loss", "mistake_rate", "pinv_drift")

    def __init__(self, rank=10, step_size=0.1, n_epochs=1, n_triplets=100000, batch_size=1,
                 algorithm="auto", init="identity", pinv_check_every=1000, pinv_tol=1e-8,
                 random_state=None, verbose=0):
        self.rank = rank
        self.step_size = step_size
        self.n_epochs = n_epochs
        self.n_triplets = n_triplets
        self.batch_size = batch_size
        self.algorithm = algorithm
        self.init = init
        self.pinv_check_every = pinv_check_every
        self.pinv_tol = pinv_tol
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_lowrank_params(self, pinv=True)
        check_scalar_param(self.step_size, "step_size", self, kind="real", low=0,
                           low_inclusive=False)
        check_scalar_param(self.batch_size, "batch_size", self, kind="int", low=1)
        check_choice_param(self.algorithm, "algorithm", self, ("auto", "general"))
        self._validate_common()

    # model -------------------------------------------------------------
    def _init_model(self, n_features, rng):
        self._init_factors(n_features, rng)
        self._refresh_pinv()
        self.n_pinv_refresh_ = 0
        self._since_check = 0
        self._drift = 0.0

    def _refresh_pinv(self) -> None:
        """Re-factor W = A B^T with balanced factors and exact pseudo-inverses
        (:func:`tripletml.linalg.balanced_factors`); W is unchanged."""
        try:
            self.A_, self.B_, self.pinv_A_, self.pinv_B_ = balanced_factors(self.A_, self.B_)
        except np.linalg.LinAlgError:
            raise FloatingPointError(
                f"LORETA: W = A B^T lost rank {self.rank} after step {self.n_steps_}; lower "
                "the step size or the rank.") from None

    def _check_pinv(self) -> None:
        drift = max(pinv_drift(self.A_, self.pinv_A_), pinv_drift(self.B_, self.pinv_B_))
        self._drift = max(self._drift, drift)
        if not drift <= self.pinv_tol:
            self._refresh_pinv()
            self.n_pinv_refresh_ += 1
        self._since_check = 0

    def _run_steps(self, Xc, triplets):
        m = triplets.shape[0]
        losses, margins = np.zeros(m), np.zeros(m)
        if self.batch_size == 1 and self.algorithm == "auto":
            self._loreta1(Xc, triplets, losses, margins)
        else:
            self._general(Xc, triplets, losses, margins)
        return losses, margins

    def _loreta1(self, Xc, triplets, losses, margins):
        n = self.A_.shape[0]
        work = [np.empty(n) for _ in range(4)]
        vidx, vval = diff_buffers(Xc)
        every = int(self.pinv_check_every)
        t, m = 0, triplets.shape[0]
        while t < m:
            stop = min(m, t + every - self._since_check)
            t_new, flags = _loreta1_steps(self.A_, self.pinv_A_, self.B_, self.pinv_B_,
                                          Xc.indptr, Xc.indices, Xc.data, triplets[:stop], t,
                                          float(self.step_size), losses, margins, vidx, vval,
                                          *work)
            if flags < 0:
                raise self._diverged(self.n_steps_ + t_new + 1)
            self._since_check += t_new - t
            t = t_new
            if flags > 0:  # Meyer's formula not applicable (beta ~ 0): recompute
                self._refresh_pinv()
                self.n_pinv_refresh_ += 1
            if self._since_check >= every:
                self._check_pinv()

    def _general(self, Xc, triplets, losses, margins):
        r = int(self.batch_size)
        eta = float(self.step_size)
        for s in range(0, triplets.shape[0], r):
            blk = triplets[s:s + r]
            Q = Xc[blk[:, 0]]
            V = Xc[blk[:, 1]] - Xc[blk[:, 2]]
            mg = np.asarray(((Q @ self.A_) * (V @ self.B_)).sum(axis=1)).ravel()
            if not np.isfinite(mg).all():
                raise self._diverged(self.n_steps_ + s + 1)
            margins[s:s + r] = mg
            losses[s:s + r] = np.maximum(0.0, 1.0 - mg)
            active = mg < 1.0
            if not active.any():
                continue
            # -eta * grad of the mean hinge loss = (eta / r) sum_active q v^T
            G1 = (Q[active].T * (eta / blk.shape[0])).toarray()
            G2 = V[active].T.toarray()
            self.A_, self.B_ = loreta_general_step(self.A_, self.B_, G1, G2)
        # Algorithm 2 keeps no pseudo-inverses; store exact ones for the state
        self.pinv_A_ = pinv_full_column_rank(self.A_)
        self.pinv_B_ = pinv_full_column_rank(self.B_)

    def _steps_and_record(self, Xc, triplets, hist):
        self._drift = 0.0
        losses, margins = self._run_steps(Xc, triplets)
        if not self._model_finite():
            raise self._diverged(self.n_steps_ + triplets.shape[0])
        self._record(hist, losses, margins, pinv_drift=self._drift)

    def _check_resumable(self):
        if not hasattr(self, "_since_check"):  # e.g. loaded from a file
            self._since_check = 0
            self._drift = 0.0

    _factor_attrs = ("A_", "B_", "pinv_A_", "pinv_B_")
