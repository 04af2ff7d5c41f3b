"""SDCA for relative similarity (Wu, Ding, Zhao, Miao & Hoi, AAAI 2015).

Learns a bilinear similarity ``S_M(x, x') = x^T M x'`` by stochastic dual
coordinate ascent on

    P(M) = (1/n) sum_i [1 - x_i^T M (x_i+ - x_i-)]_+^2 + (lam/2) ||M||_F^2   (eq. 3-4)

whose dual (eq. 5) has one scalar ``alpha_i >= 0`` per triplet,
``Theta_i = alpha_i X_i`` with ``X_i = x_i (x_i+ - x_i-)^T``, and
``M(Theta) = (lam n)^-1 sum_i alpha_i X_i`` (eq. 7).  Algorithm 1: pick ``i``
uniformly, then

    d_alpha = max((1 - x_i^T M v_i - alpha_i / 2) / (1/2 + ||X_i||^2 / (lam n)), -alpha_i)
    alpha_i += d_alpha,    M += (lam n)^-1 d_alpha X_i,

with ``||X_i||_F^2 = ||x_i||^2 ||v_i||^2`` and ``v_i = x_i+ - x_i-``.  The
dual objective is ``D = (1/n) sum_i (alpha_i - alpha_i^2 / 4) - (lam/2)||M||^2``
(``-l_i^*(-Theta_i) = alpha_i - alpha_i^2/4``; a degenerate triplet with
``X_i = 0`` has the constant loss 1 and contributes 1), and the duality gap
``P(M(Theta)) - D(Theta)`` (eq. 8) bounds the primal sub-optimality.

Per step the cost is ``O(nnz(x_i) (nnz(x_i+) + nnz(x_i-)))`` on CSR data (the
rank-one update touches only those rows and columns; ``O(d^2)`` dense).
The *average* output ``(T - T0)^-1 sum_{t=T0+1}^T M^{t-1}`` is formed without
an ``O(d^2)`` cost per step: with ``dM_s`` the update of step ``s`` and
``B = T0 M^{T0} + sum_{s>T0} s dM_s`` (set at step T0, then updated with the
same sparse pattern as M),

    sum_{t=T0+1}^{T} M^{t-1} = (T - T0) M^{T0} + sum_{s=T0+1}^{T} (T - s) dM_s
                             = T M^T - B.

The *random* output ``M^t`` for ``t`` uniform in ``{T0+1, ..., T}`` is drawn by
reservoir sampling (an ``O(d^2)`` copy an expected ``ln(T - T0)`` times).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_choice_param, check_random_state, check_scalar_param
from ..base import BilinearMixin, History
from ..linalg import (as_csr, csr_row_diff, diff_buffers, sparse_bilinear,
                      sparse_rank_one_update)
from ._online import OnlineTripletLearner

__all__ = ["SDCA", "sdca_objectives"]


@njit(cache=True, nogil=True)
def _sdca_steps(M, B, Mrand, alpha, slots, indptr, indices, data, triplets, lam_n, step0, T0,
                u, losses, sq_losses, margins, track_avg, track_rand, vidx, vval):
    """Algorithm 1 over the given triplets in order (global steps step0+1...).

    ``B`` accumulates ``T0 M^{T0} + sum_{s > T0} s dM_s`` (average option),
    ``Mrand`` holds the reservoir sample (random option).  Returns the index
    of the first step with a non-finite margin or norm, or -1.
    """
    for t in range(triplets.shape[0]):
        s = step0 + t + 1
        q = triplets[t, 0]
        q_idx = indices[indptr[q]:indptr[q + 1]]
        q_val = data[indptr[q]:indptr[q + 1]]
        k = csr_row_diff(indptr, indices, data, triplets[t, 1], triplets[t, 2], vidx, vval)
        v_idx = vidx[:k]
        v_val = vval[:k]
        i = slots[t]
        mg = sparse_bilinear(M, q_idx, q_val, v_idx, v_val)
        xnorm2 = np.dot(q_val, q_val) * np.dot(v_val, v_val)  # ||X_i||_F^2
        if not (np.isfinite(mg) and np.isfinite(xnorm2)):
            return t
        margins[t] = mg
        h = 1.0 - mg
        if h < 0.0:
            h = 0.0
        losses[t] = h
        sq_losses[t] = h * h
        a = alpha[i]
        da = (1.0 - mg - 0.5 * a) / (0.5 + xnorm2 / lam_n)
        if da < -a:
            da = -a
        alpha[i] = a + da
        if da != 0.0 and xnorm2 > 0.0:
            sparse_rank_one_update(M, da / lam_n, q_idx, q_val, v_idx, v_val)
            if track_avg and s > T0:
                sparse_rank_one_update(B, s * da / lam_n, q_idx, q_val, v_idx, v_val)
        if track_avg and s == T0:
            B[:, :] = T0 * M
        if track_rand and s > T0:
            # reservoir sampling: M^s kept with probability 1 / (s - T0)
            if u[t] * (s - T0) < 1.0:
                Mrand[:, :] = M
    return -1


@njit(cache=True, nogil=True)
def _all_margins(M, indptr, indices, data, triplets, out, xnorm2, vidx, vval):
    """Margins ``x_i^T M v_i`` and ``||X_i||_F^2`` of every triplet."""
    for t in range(triplets.shape[0]):
        q = triplets[t, 0]
        q_val = data[indptr[q]:indptr[q + 1]]
        k = csr_row_diff(indptr, indices, data, triplets[t, 1], triplets[t, 2], vidx, vval)
        out[t] = sparse_bilinear(M, indices[indptr[q]:indptr[q + 1]], q_val, vidx[:k], vval[:k])
        xnorm2[t] = np.dot(q_val, q_val) * np.dot(vval[:k], vval[:k])


def sdca_objectives(M, alpha, Xc, triplets, lam, n=None):
    """Primal ``P(M)``, dual ``D(alpha)`` and gap for ``M = M(alpha)``.

    ``n`` (default ``len(triplets)``) is the ``n`` of eq. (4)-(5).  The dual
    is evaluated through ``||M(alpha)||^2`` with the maintained M, never from
    per-triplet d x d matrices.  Returns ``(P, D, P - D)``.
    """
    n = triplets.shape[0] if n is None else n
    mg = np.empty(triplets.shape[0])
    xn = np.empty(triplets.shape[0])
    _all_margins(M, Xc.indptr, Xc.indices, Xc.data, triplets, mg, xn, *diff_buffers(Xc))
    reg = 0.5 * lam * float(np.sum(M * M))
    P = float(np.sum(np.maximum(0.0, 1.0 - mg) ** 2)) / n + reg
    # -l_i^*(-Theta_i) = alpha_i - alpha_i^2/4; when X_i = 0 the loss is the
    # constant 1 and Theta_i = 0 whatever alpha_i, so the term is its maximum, 1.
    conj = np.where(xn > 0.0, alpha - 0.25 * alpha * alpha, 1.0)
    D = float(np.sum(conj)) / n - reg
    return P, D, P - D


class SDCA(BilinearMixin, OnlineTripletLearner):
    """Stochastic dual coordinate ascent for bilinear relative similarity.

    Parameters
    ----------
    lam : float, default=0.01
        Regularisation ``lambda`` of eq. (4).
    n_epochs : int, default=10
        Maximum passes; each epoch makes ``n`` steps, each drawing a triplet
        uniformly at random (Algorithm 1 samples with replacement).
    n_triplets : int, default=10000
        Random class triplets sampled by ``fit`` from labels.  In
        ``partial_fit`` on a fresh model it is also the expected total number
        of distinct triplets ``n`` of the ``(lam n)^-1`` scaling (see Notes).
    output : {"average", "random", "last"}, default="average"
        Algorithm 1's average option, random option, or the last iterate.
    average_start : float in [0, 1), default=0.5
        ``T0`` as a fraction of the planned ``T = n_epochs * n`` steps (the
        paper's remark uses ``T = 2 T0``).  If training stops (on ``tol``)
        before ``T0``, the window is empty and ``M_`` is the last iterate.
    tol : float or None, default=1e-3
        Stop when the duality gap (eq. 8), evaluated after each epoch, is at
        most ``tol``.  None: run all epochs (the gap is still recorded).
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    M_ : ndarray (d, d)
        The output matrix chosen by ``output``.
    M_last_ : ndarray (d, d)
        The last iterate ``M^T = M(alpha)``.
    alpha_ : ndarray (n,)
        Dual variables (``Theta_i = alpha_i X_i``).
    n_scale_ : int
        The ``n`` used in ``(lam n)^-1``.
    n_steps_ : int
    history_ : dict of lists
        Per epoch: ``step``, ``seconds``, ``loss`` (hinge, before each step),
        ``avg_loss`` and ``mistake_rate`` (cumulative, the paper's Fig. 1-2),
        ``avg_sq_loss`` (cumulative squared hinge), ``primal``, ``dual``,
        ``gap`` (None for ``partial_fit`` records, whose stream is not kept).

    Notes
    -----
    ``partial_fit(X, triplets, triplet_ids=None)`` makes one closed-form dual
    step per given triplet in order.  ``triplet_ids`` name the dual variables
    (a triplet whose id was not seen before gets a fresh ``alpha = 0``); by
    default every given triplet is new.  After ``fit``, ids ``0..n-1`` are
    the rows of the fit triplets.  The scaling ``n`` is fixed when the model
    is created (``len(triplets)`` in ``fit``, ``n_triplets`` for a stream) so
    that ``M = (lam n)^-1 sum_i alpha_i X_i`` holds exactly at every step.
    In ``partial_fit`` the averaging window starts where the model started
    (``T0 = 0`` for a stream).
    """

    _history_keys = ("loss", "avg_loss", "mistake_rate", "avg_sq_loss", "primal", "dual", "gap")

    _square_attrs = ("M_", "M_last_")

    def __init__(self, lam=0.01, n_epochs=10, n_triplets=10000, output="average",
                 average_start=0.5, tol=1e-3, random_state=None, verbose=0):
        self.lam = lam
        self.n_epochs = n_epochs
        self.n_triplets = n_triplets
        self.output = output
        self.average_start = average_start
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_scalar_param(self.lam, "lam", self, kind="real", low=0, low_inclusive=False)
        check_choice_param(self.output, "output", self, ("average", "random", "last"))
        check_scalar_param(self.average_start, "average_start", self, kind="real", low=0,
                           high=1, high_inclusive=False)
        check_scalar_param(self.tol, "tol", self, kind="real", low=0, allow_none=True)
        self._validate_common()

    # ----------------------------------------------------------- state
    def _init_state(self, d, n_scale, T0, rng):
        self.M_last_ = np.zeros((d, d))
        self.alpha_ = np.zeros(0)
        self.dual_ids_ = np.zeros(0, dtype=np.int64)
        self.next_id_ = 0
        self.n_scale_ = int(n_scale)
        self.n_steps_ = 0
        self.average_start_step_ = int(T0)
        self.output_ = self.output
        self.lam_ = float(self.lam)
        self.avg_accum_ = np.zeros((d, d) if self.output == "average" else (0, 0))
        self.random_iterate_ = np.zeros((d, d) if self.output == "random" else (0, 0))
        self._rng = rng

    def _init_model(self, n_features, rng):
        """A fresh stream: ``n`` is ``n_triplets``, the window starts at 0."""
        self._init_state(n_features, self.n_triplets, 0, rng)

    def _check_resumable(self):
        check_is_fitted(self, "M_last_")
        if self.output != self.output_ or float(self.lam) != self.lam_:
            raise ValueError(
                f"SDCA: output/lam were {self.output_!r}/{self.lam_:g} when the model was "
                f"initialised and are now {self.output!r}/{self.lam!r}; the dual state "
                "belongs to the former. Restore them, or start a new model with fit.")
        if not hasattr(self, "_rng"):  # e.g. loaded from a file
            self._rng = check_random_state(self.random_state, self)

    def _slots_for(self, ids):
        """Map triplet ids to positions in ``alpha_``, adding new ids."""
        new = np.setdiff1d(np.unique(ids), self.dual_ids_)
        if new.size:
            ids_all = np.concatenate([self.dual_ids_, new])
            alpha = np.concatenate([self.alpha_, np.zeros(new.size)])
            order = np.argsort(ids_all, kind="stable")
            self.dual_ids_, self.alpha_ = ids_all[order], alpha[order]
        return np.searchsorted(self.dual_ids_, ids).astype(np.int64)

    def _steps(self, Xc, triplets, slots, hist, objectives=None):
        m = triplets.shape[0]
        losses, sq, margins = np.empty(m), np.empty(m), np.empty(m)
        avg, rnd = self.output_ == "average", self.output_ == "random"
        u = self._rng.random(m) if rnd else np.zeros(1)
        bad = _sdca_steps(self.M_last_, self.avg_accum_, self.random_iterate_, self.alpha_,
                          slots, Xc.indptr, Xc.indices, Xc.data, triplets,
                          self.lam_ * self.n_scale_, self.n_steps_, self.average_start_step_,
                          u, losses, sq, margins, avg, rnd, *diff_buffers(Xc))
        if bad >= 0 or not np.isfinite(self.M_last_).all():
            raise self._diverged(self.n_steps_ + (bad + 1 if bad >= 0 else m))
        P, D, gap = objectives(self) if objectives is not None else (None, None, None)
        self._record(hist, losses, margins, {"avg_sq_loss": sq}, primal=P, dual=D, gap=gap)

    def _output_matrix(self):
        T, T0 = self.n_steps_, self.average_start_step_
        if self.output_ == "last" or T <= T0:
            return self.M_last_.copy()
        if self.output_ == "random":
            return self.random_iterate_.copy()
        return (T * self.M_last_ - self.avg_accum_) / (T - T0)

    # -------------------------------------------------------------- fit
    def _fit(self, X, triplets, rng):
        n = triplets.shape[0]
        T0 = int(np.floor(self.average_start * self.n_epochs * n))
        self._init_state(X.shape[1], n, T0, rng)
        self._slots_for(np.arange(n))
        self.next_id_ = n
        Xc = as_csr(X)
        hist = History(keys=self._history_keys)

        def objectives(model):
            return sdca_objectives(model.M_last_, model.alpha_, Xc, triplets, model.lam_)

        for _ in progress(range(self.n_epochs), total=self.n_epochs, verbose=self.verbose,
                          desc="SDCA", unit="epoch"):
            idx = rng.integers(0, n, size=n)  # uniform sampling with replacement
            self._steps(Xc, triplets[idx], idx, hist, objectives)
            if self.tol is not None and hist.data["gap"][-1] <= self.tol:
                break
        self.history_ = hist.data
        self.M_ = self._output_matrix()

    def partial_fit(self, X, triplets, triplet_ids=None):
        """One closed-form dual step per given triplet, in order.

        Parameters
        ----------
        X : array-like or CSR matrix of shape (n_samples, n_features)
        triplets : array-like of shape (m, 3)
        triplet_ids : array-like of shape (m,), optional
            Dual-variable identities (non-negative integers); unseen ids
            start at ``alpha = 0``.  An id must always name the same triplet
            (checked within a call; across calls X may change, so that is the
            caller's contract).  Default: every triplet is new.

        Returns
        -------
        self
        """
        return self._partial(X, triplets, triplet_ids=triplet_ids)

    def _partial_steps(self, Xc, triplets, hist, triplet_ids=None):
        m = triplets.shape[0]
        if triplet_ids is None:
            ids = np.arange(self.next_id_, self.next_id_ + m, dtype=np.int64)
        else:
            ids = np.asarray(triplet_ids)
            if ids.shape != (m,) or ids.dtype == bool or not np.issubdtype(ids.dtype,
                                                                           np.integer):
                raise ValueError(f"SDCA: triplet_ids must be {m} integers, one per triplet; "
                                 f"got shape {ids.shape} and dtype {ids.dtype}.")
            if ids.min() < 0 or ids.max() > np.iinfo(np.int64).max // 2:
                raise ValueError("SDCA: triplet_ids must be non-negative integers below 2^62.")
            ids = ids.astype(np.int64)
            order = np.argsort(ids, kind="stable")
            same = ids[order][1:] == ids[order][:-1]
            if np.any(same & np.any(triplets[order][1:] != triplets[order][:-1], axis=1)):
                raise ValueError("SDCA: one triplet_id names two different triplets in this "
                                 "call; an id is one dual variable, i.e. one triplet.")
        self.next_id_ = max(self.next_id_, int(ids.max()) + 1)
        self._steps(Xc, triplets, self._slots_for(ids), hist)
        self.M_ = self._output_matrix()

    # ---------------------------------------------------------- scoring
    def _apply(self, X):
        return np.asarray(X @ self.M_)

    def get_bilinear_matrix(self) -> np.ndarray:
        """The output matrix M (a copy)."""
        check_is_fitted(self, "M_")
        return self.M_.copy()
