"""Multi-label ranking with a low-rank label-by-feature matrix (LORETA paper,
section 5.2).

A model ``W`` (L labels x d features) scores every label of a sample ``p``
with ``W p``.  Online steps use the multi-label hinge loss of
:func:`tripletml.losses.multilabel_hinge`, whose subgradient ``-g p^T`` is rank
one, so LORETA-1 applies to the factored ``W = A B^T`` (A: L x k, B: d x k).

* :class:`LORETAMultilabel` -- LORETA-1 on ``W = A B^T``.
* :class:`IterativePAMultilabel` -- passive-aggressive steps alternating over
  A and B (the paper's "PA" baseline): ``A += eta_A g (B^T p)^T`` with
  ``eta_A = min(l / (||g||^2 ||B^T p||^2), C)``, then, with the loss and g
  recomputed, ``B += eta_B p (A^T g)^T`` with
  ``eta_B = min(l / (||p||^2 ||A^T g||^2), C)``.
* :class:`MatrixPerceptron` -- the full-rank conservative gradient step
  ``W += eta g p^T`` (the paper's "matrix perceptron").

``fit(X, Y)`` takes a binary indicator matrix Y (n x L, dense or sparse);
``decision_function(X)`` returns the (n x L) label scores; ``score(X, Y)`` is
the label-ranking mAP (:func:`tripletml.metrics.label_ranking_map`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_random_state, check_scalar_param, check_X
from .._arrayspec import ArraySpec
from ..base import History, LearnerBase
from ..linalg import (FAST, as_csr, balanced_factors, pinv_drift)
from ..losses import multilabel_hinge
from .factored import check_lowrank_params, init_factors
from .loreta import loreta1_update

__all__ = ["LORETAMultilabel", "IterativePAMultilabel", "MatrixPerceptron"]

_LORETA, _PA, _PERCEPTRON = 0, 1, 2


@njit(cache=True, nogil=True, fastmath=FAST)
def _multilabel_steps(method, A, PA, B, PB, W, indptr, indices, data, yptr, yidx, order,
                      eta, C, losses, work_L, cA, cB, u, h):
    """Online steps over samples ``order`` (in order).  ``method`` 0: LORETA-1
    on W = A B^T; 1: iterative PA on A, B; 2: perceptron on the full W.
    Returns (t, flags): 0 when done; 1/2/3 when Meyer's update failed at
    sample t - 1 (recompute pseudo-inverses, resume at t); -1 when the
    scores of sample t were not finite."""
    L = work_L.shape[0]
    k = A.shape[1]
    is_pos = np.zeros(L, dtype=np.bool_)
    g_idx = np.zeros(L + 1, dtype=np.int64)
    g_val = np.zeros(L + 1)
    bp = np.zeros(k)
    ag = np.zeros(k)
    Ahat = np.zeros(k)
    Bhat = np.zeros(k)
    bv = np.zeros(k)
    for t in range(order.shape[0]):
        r = order[t]
        p_idx = indices[indptr[r]:indptr[r + 1]]
        p_val = data[indptr[r]:indptr[r + 1]]
        pos = yidx[yptr[r]:yptr[r + 1]]
        # scores
        if method == 2:
            for i in range(L):
                s = 0.0
                for j in range(p_idx.shape[0]):
                    s += W[i, p_idx[j]] * p_val[j]
                work_L[i] = s
        else:
            bp[:] = 0.0
            for j in range(p_idx.shape[0]):
                bp += B[p_idx[j]] * p_val[j]
            for i in range(L):
                s = 0.0
                for j in range(k):
                    s += A[i, j] * bp[j]
                work_L[i] = s
        for i in range(L):
            if not np.isfinite(work_L[i]):
                return t, -1
        for j in range(pos.shape[0]):
            is_pos[pos[j]] = True
        loss, nnz = multilabel_hinge(work_L, pos, is_pos, g_idx, g_val)
        losses[t] = loss
        if nnz > 0:
            gi, gv = g_idx[:nnz], g_val[:nnz]
            if method == 0:
                flags = loreta1_update(A, PA, B, PB, gi, gv, eta, p_idx, p_val, cA, cB, u, h,
                                       Ahat, Bhat, bv)
                if flags:
                    for j in range(pos.shape[0]):
                        is_pos[pos[j]] = False
                    return t + 1, flags
            elif method == 2:
                for s in range(nnz):
                    c = eta * gv[s]
                    for j in range(p_idx.shape[0]):
                        W[gi[s], p_idx[j]] += c * p_val[j]
            else:
                gg = np.dot(gv, gv)
                den = gg * np.dot(bp, bp)
                ea = min(loss / den, C) if den > 0.0 else 0.0
                for s in range(nnz):
                    A[gi[s]] += (ea * gv[s]) * bp
                # loss and g again, with the new A
                for i in range(L):
                    s_ = 0.0
                    for j in range(k):
                        s_ += A[i, j] * bp[j]
                    work_L[i] = s_
                loss2, nnz2 = multilabel_hinge(work_L, pos, is_pos, g_idx, g_val)
                if nnz2 > 0:
                    gi, gv = g_idx[:nnz2], g_val[:nnz2]
                    ag[:] = 0.0
                    for s in range(nnz2):
                        ag += A[gi[s]] * gv[s]
                    den = np.dot(p_val, p_val) * np.dot(ag, ag)
                    eb = min(loss2 / den, C) if den > 0.0 else 0.0
                    for j in range(p_idx.shape[0]):
                        B[p_idx[j]] += (eb * p_val[j]) * ag
        for j in range(pos.shape[0]):
            is_pos[pos[j]] = False
    return order.shape[0], 0


def check_indicator(Y, n_samples: int, owner) -> sp.csr_matrix:
    """Validate a binary label-indicator matrix (n x L, L >= 2); CSR int8."""
    who = type(owner).__name__
    if Y is None:
        raise ValueError(f"{who}: Y (an n x L binary label-indicator matrix) is required.")
    Ys = sp.csr_matrix(Y) if sp.issparse(Y) else None
    if Ys is None:
        arr = np.asarray(Y)
        if arr.ndim != 2:
            raise ValueError(f"{who}: Y must be a 2-D (n_samples, n_labels) indicator matrix, "
                             f"got shape {arr.shape}.")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise TypeError(f"{who}: Y must be numeric 0/1, got dtype {arr.dtype}.")
        Ys = sp.csr_matrix(arr)
    if Ys.shape[0] != n_samples:
        raise ValueError(f"{who}: Y has {Ys.shape[0]} rows but X has {n_samples}.")
    if Ys.shape[1] < 2:
        raise ValueError(f"{who}: Y has {Ys.shape[1]} label column(s); at least 2 needed.")
    Ys.eliminate_zeros()
    if Ys.nnz and not np.all(Ys.data == 1):
        raise ValueError(f"{who}: Y must hold only 0 and 1.")
    Ys = Ys.astype(np.int8)
    Ys.sort_indices()
    return Ys


def _with_intercept(X, on: bool):
    """Append a constant-1 feature (the label biases live in W's last column)."""
    if not on:
        return X
    ones = np.ones((X.shape[0], 1))
    if sp.issparse(X):
        return sp.hstack([X, sp.csr_matrix(ones)], format="csr")
    return np.hstack([X, ones])


class _MultilabelRanker(LearnerBase):
    """Shared fit / partial_fit / scoring of the multi-label rankers.

    With ``fit_intercept=True`` a constant feature is appended internally, so
    ``W`` has ``n_features + 1`` columns and the model can learn each label's
    prior (the paper's ``W p`` has none; on yeast the label frequencies alone
    give a label-ranking mAP of 0.70).
    """

    _method = _LORETA
    #: the arrays of every ranker (``_check_loaded`` requires those of the
    #: subclass's ``_method``: A_, B_ (+ pinv_A_, pinv_B_ for LORETA), or W_)
    _fitted_arrays = {
        "A_": ArraySpec(("n_labels_", "rank"), optional=True),
        "B_": ArraySpec(("d+fit_intercept", "rank"), optional=True),
        "pinv_A_": ArraySpec(("n_labels_", "rank"), optional=True),
        "pinv_B_": ArraySpec(("d+fit_intercept", "rank"), optional=True),
        "W_": ArraySpec(("n_labels_", "d+fit_intercept"), optional=True),
    }
    _arrays_of_method = {_LORETA: ("A_", "B_", "pinv_A_", "pinv_B_"), _PA: ("A_", "B_"),
                         _PERCEPTRON: ("W_",)}

    def _check_loaded(self) -> None:
        super()._check_loaded()
        L = self.n_labels_
        if isinstance(L, bool) or not isinstance(L, int) or L < 2:
            raise ValueError(f"n_labels_={L!r} must be an integer >= 2")
        need = self._arrays_of_method[self._method]
        for name in ("A_", "B_", "pinv_A_", "pinv_B_", "W_"):
            if name in need and not hasattr(self, name):
                raise ValueError(f"the fitted array {name} is missing")
            if name not in need and name in vars(self):
                raise ValueError(f"{name} is not a fitted array of {type(self).__name__}")

    def _validate_common(self):
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise TypeError(f"{type(self).__name__}: parameter fit_intercept="
                            f"{self.fit_intercept!r} must be True or False.")
        check_scalar_param(self.step_size, "step_size", self, kind="real", low=0,
                           low_inclusive=False)
        check_scalar_param(self.n_epochs, "n_epochs", self, kind="int", low=1)
        check_scalar_param(self.verbose, "verbose", self, kind="int", low=0)

    def _validate_params(self):
        self._validate_common()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    # state ----------------------------------------------------------------
    def _init_model(self, d, L, rng):
        raise NotImplementedError

    def _arrays(self):
        z = np.zeros((1, 1))
        return (getattr(self, "A_", z), getattr(self, "pinv_A_", z), getattr(self, "B_", z),
                getattr(self, "pinv_B_", z), getattr(self, "W_", z))

    def _after_chunk(self):
        """Hook after a run of steps (LORETA: drift check)."""

    def _on_flags(self, flags):  # pragma: no cover - LORETA only
        pass

    def _run(self, Xc, Yc, order, hist):
        L = Yc.shape[1]
        m = order.shape[0]
        losses = np.zeros(m)
        d = Xc.shape[1]
        n_big = max(L, d)
        work = (np.empty(L), np.empty(L), np.empty(d), np.empty(n_big), np.empty(n_big))
        t = 0
        while t < m:
            stop = self._chunk_end(t, m)
            t_new, flags = _multilabel_steps(
                self._method, *self._arrays(), Xc.indptr, Xc.indices, Xc.data, Yc.indptr,
                Yc.indices, order[t:stop],
                float(self.step_size), float(getattr(self, "C", 0.0)), losses[t:stop], *work)
            if flags < 0:
                raise FloatingPointError(
                    f"{type(self).__name__}: training diverged (non-finite label scores at "
                    f"step {self.n_steps_ + t + t_new + 1}); lower the step size.")
            self._steps_done = t_new
            t += t_new
            if flags > 0:
                self._on_flags(flags)
            self._after_chunk()
        if not all(np.isfinite(a).all() for a in self._arrays()):
            raise FloatingPointError(f"{type(self).__name__}: training diverged (the model "
                                     "became NaN/inf); lower the step size.")
        prev = self.n_steps_
        self.n_steps_ = prev + m
        before = hist.data["avg_loss"][-1] * prev if prev else 0.0
        hist.record(self.n_steps_, loss=float(losses.mean()),
                    avg_loss=(before + float(losses.sum())) / self.n_steps_)

    def _chunk_end(self, t, m):
        return m

    def fit(self, X, Y):
        """Fit on samples X (n x d, dense or CSR) and labels Y (n x L, 0/1).

        Returns
        -------
        self
        """
        self._validate_params()
        X = check_X(X, self)
        Yc = check_indicator(Y, X.shape[0], self)
        rng = check_random_state(self.random_state, self)
        if hasattr(self, "n_features_in_"):
            del self.n_features_in_
        d = X.shape[1]
        X = _with_intercept(X, self.fit_intercept)
        self._init_model(X.shape[1], Yc.shape[1], rng)
        self.n_features_in_ = d
        self.n_labels_ = Yc.shape[1]
        self.n_steps_ = 0
        Xc = as_csr(X)
        hist = History(keys=("loss", "avg_loss"))
        try:
            for _ in progress(range(self.n_epochs), total=self.n_epochs, verbose=self.verbose,
                              desc=type(self).__name__, unit="epoch"):
                self._run(Xc, Yc, rng.permutation(X.shape[0]), hist)
        except Exception:
            del self.n_features_in_
            raise
        self.history_ = hist.data
        return self

    def partial_fit(self, X, Y):
        """One online step per sample (row of X and Y), in order; the first
        call initialises the model.

        Returns
        -------
        self
        """
        self._validate_params()
        first = not hasattr(self, "n_features_in_")
        X = check_X(X, self, n_features=None if first else self.n_features_in_)
        Yc = check_indicator(Y, X.shape[0], self)
        d = X.shape[1]
        X = _with_intercept(X, self.fit_intercept)
        if first:
            self._init_model(X.shape[1], Yc.shape[1], check_random_state(self.random_state,
                                                                           self))
            self.n_features_in_ = d
            self.n_labels_ = Yc.shape[1]
            self.n_steps_ = 0
            self.history_ = {}
        elif Yc.shape[1] != self.n_labels_:
            raise ValueError(f"{type(self).__name__}: Y has {Yc.shape[1]} labels, the model "
                             f"{self.n_labels_}.")
        hist = History(self.history_, keys=("loss", "avg_loss"))
        try:
            self._run(as_csr(X), Yc, np.arange(X.shape[0]), hist)
        except Exception:
            if first:
                del self.n_features_in_
            raise
        self.history_ = hist.data
        return self

    def decision_function(self, X) -> np.ndarray:
        """Label scores ``W x`` for every sample: array (n_samples, n_labels)."""
        check_is_fitted(self, "n_features_in_")
        X = check_X(X, self, n_features=self.n_features_in_)
        return self._scores(_with_intercept(X, self.fit_intercept))

    def score(self, X, Y) -> float:
        """Label-ranking mean average precision of ``decision_function(X)``."""
        from ..metrics import label_ranking_map

        check_is_fitted(self, "n_features_in_")
        X = check_X(X, self, n_features=self.n_features_in_)
        Yc = check_indicator(Y, X.shape[0], self)
        return label_ranking_map(Yc, self._scores(_with_intercept(X, self.fit_intercept)))


class LORETAMultilabel(_MultilabelRanker):
    """Low-rank multi-label ranking by LORETA-1 (LORETA paper, section 5.2).

    Parameters
    ----------
    rank : int, default=5
        k <= min(n_labels, n_features).
    step_size : float, default=0.1
    n_epochs : int, default=10
        Passes over the samples (each in a new random order).
    init : {"identity", "random"}, default="identity"
        ``A = [I_k; 0]`` (L x k), ``B = [I_k; 0]`` (d x k), or random normal.
    fit_intercept : bool, default=True
        Append a constant feature (label priors; see the class notes).
    pinv_check_every, pinv_tol : int, float
        Drift control of the maintained pseudo-inverses, as :class:`LORETA`.
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    A_ : ndarray (n_labels, rank)
    B_ : ndarray (n_features [+ 1], rank)
        ``W = A_ B_^T`` (the last row of B_ belongs to the intercept feature).
    pinv_A_, pinv_B_ : transposed pseudo-inverses of A_, B_
    n_labels_, n_features_in_, n_steps_, n_pinv_refresh_, history_
    """

    _method = _LORETA

    def __init__(self, rank=5, step_size=0.1, n_epochs=10, init="identity",
                 fit_intercept=True, pinv_check_every=1000, pinv_tol=1e-8, random_state=None,
                 verbose=0):
        self.rank = rank
        self.fit_intercept = fit_intercept
        self.step_size = step_size
        self.n_epochs = n_epochs
        self.init = init
        self.pinv_check_every = pinv_check_every
        self.pinv_tol = pinv_tol
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_lowrank_params(self, pinv=True)
        self._validate_common()

    def _init_model(self, d, L, rng):
        if self.rank > min(d, L):
            raise ValueError(f"LORETAMultilabel: rank={self.rank} exceeds min(n_labels={L}, "
                             f"n_features={d}).")
        self.A_, self.B_ = init_factors(L, d, int(self.rank), self.init, rng)
        self._refresh()
        self.n_pinv_refresh_ = 0
        self._since_check = 0

    def _refresh(self):
        self.A_, self.B_, self.pinv_A_, self.pinv_B_ = balanced_factors(self.A_, self.B_)

    def _chunk_end(self, t, m):
        if not hasattr(self, "_since_check"):
            self._since_check = 0
        return min(m, t + int(self.pinv_check_every) - self._since_check)

    def _on_flags(self, flags):
        self._refresh()
        self.n_pinv_refresh_ += 1

    def _after_chunk(self):
        self._since_check += self._steps_done
        if self._since_check >= self.pinv_check_every:
            drift = max(pinv_drift(self.A_, self.pinv_A_), pinv_drift(self.B_, self.pinv_B_))
            if not drift <= self.pinv_tol:
                self._refresh()
                self.n_pinv_refresh_ += 1
            self._since_check = 0

    def _scores(self, X):
        return np.asarray(X @ self.B_) @ self.A_.T


class IterativePAMultilabel(_MultilabelRanker):
    """Alternating passive-aggressive multi-label ranking on ``W = A B^T``.

    Parameters
    ----------
    rank : int, default=5
    C : float, default=0.1
        Cap on the PA step sizes.
    step_size : float, default=1.0
        Unused by the PA steps (kept for a uniform interface).
    n_epochs : int, default=10
    init : {"identity", "random"}, default="identity"
    random_state, verbose
    """

    _method = _PA

    def __init__(self, rank=5, C=0.1, step_size=1.0, n_epochs=10, init="identity",
                 fit_intercept=True, random_state=None, verbose=0):
        self.rank = rank
        self.fit_intercept = fit_intercept
        self.C = C
        self.step_size = step_size
        self.n_epochs = n_epochs
        self.init = init
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_lowrank_params(self)
        check_scalar_param(self.C, "C", self, kind="real", low=0, low_inclusive=False)
        self._validate_common()

    def _init_model(self, d, L, rng):
        if self.rank > min(d, L):
            raise ValueError(f"IterativePAMultilabel: rank={self.rank} exceeds "
                             f"min(n_labels={L}, n_features={d}).")
        self.A_, self.B_ = init_factors(L, d, int(self.rank), self.init, rng)

    def _scores(self, X):
        return np.asarray(X @ self.B_) @ self.A_.T


class MatrixPerceptron(_MultilabelRanker):
    """Full-rank multi-label ranking by conservative subgradient steps
    ``W += eta g p^T`` on the multi-label hinge loss (W starts at 0).

    Parameters
    ----------
    step_size : float, default=0.1
    n_epochs : int, default=10
    random_state, verbose
    """

    _method = _PERCEPTRON

    def __init__(self, step_size=0.1, n_epochs=10, fit_intercept=True, random_state=None,
                 verbose=0):
        self.fit_intercept = fit_intercept
        self.step_size = step_size
        self.n_epochs = n_epochs
        self.random_state = random_state
        self.verbose = verbose

    def _init_model(self, d, L, rng):
        self.W_ = np.zeros((L, d))

    def _scores(self, X):
        return np.asarray(X @ self.W_.T)
