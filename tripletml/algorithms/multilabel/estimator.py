"""Multi-label ranking with a low-rank label-by-feature matrix (LORETA paper,
section 5.2).

A model ``W`` (L labels x d features) scores every label of a sample ``p``
with ``W p``.  Online steps use the multi-label hinge loss of
:func:`tripletml.losses.multilabel_hinge`, whose subgradient ``-g p^T`` is rank
one, so LORETA-1 applies to the factored ``W = A B^T`` (A: L x k, B: d x k).

* :class:`LORETAMultilabel` -- LORETA-1 on ``W = A B^T``.
* :class:`IterativePAMultilabel` -- passive-aggressive steps alternating over
  A and B (the paper's "PA" baseline; no step size, only the cap C):
  ``A += eta_A g (B^T p)^T`` with
  ``eta_A = min(l / (||g||^2 ||B^T p||^2), C)``, then, with the loss and g
  recomputed, ``B += eta_B p (A^T g)^T`` with
  ``eta_B = min(l / (||p||^2 ||A^T g||^2), C)``.
* :class:`MatrixPerceptron` -- the full-rank conservative gradient step
  ``W += eta g p^T`` (the paper's "matrix perceptron").

``fit(X, Y)`` takes a binary indicator matrix Y (n x L, dense or sparse);
``decision_function(X)`` returns the (n x L) label scores; ``score(X, Y)`` is
the label-ranking mAP (:func:`tripletml.metrics.label_ranking_map`).

Training follows the online learners' rules (:mod:`tripletml.core.online`)
and runs through the training driver (:func:`tripletml.engine.run` over
:class:`tripletml.engine.online.OnlinePasses`):
``max_iter`` passes over the samples (``tol=None``: all of them; a ``tol``:
stop when a pass's mean loss changed by less than ``tol`` relatively),
``t_``, ``n_iter_``, ``stop_reason_``, passes run in blocks whose mean loss
feeds the divergence watch, and ``history_`` holds one record per pass /
``partial_fit`` call.  LORETAMultilabel shares LORETA's kernels and drift
control (:mod:`tripletml.algorithms.loreta.kernels`).
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from tripletml.core.arrayspec import ArraySpec
from tripletml.engine.stopping import relative_change
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.core.validation import as_generator, check_X
from tripletml.core.online import fitted_step_size
from tripletml.core.base import LearnerBase
from tripletml.engine.threads import threads_for, work_fit, work_rows
from tripletml.linalg.sparse_rows import as_csr
from tripletml.algorithms.multilabel.kernels import LORETA, PA, PERCEPTRON, multilabel_steps
from tripletml.core.pinv_owner import PinvFactorsOwner
from tripletml.core.online import (ETA0_AUTO, AUTO_ETA_HEAD, BLOCK_MIN, WATCH_HEAD, block_size, new_watch,
                      upgrade_watch)
from tripletml.engine import History, apply_result, run
from tripletml.engine.online import OnlinePasses
from tripletml.core.factored import LOWRANK_PARAMS, PINV_PARAMS, init_factors

__all__ = ["LORETAMultilabel", "IterativePAMultilabel", "MatrixPerceptron",
           "auto_step_size_multilabel"]



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


def multilabel_hinge_rows(S: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """:func:`tripletml.losses.multilabel_hinge` of every row of the scores S
    (n x L) against the boolean labels Y (n x L), vectorized: 0 for a row
    without a true or without a false label."""
    best = np.where(Y, -np.inf, S).max(axis=1)
    h = np.where(Y, np.maximum(best[:, None] - S + 1.0, 0.0), 0.0)
    ok = Y.any(axis=1) & ~Y.all(axis=1)
    return np.where(ok, h.sum(axis=1), 0.0)


def _with_intercept(X, on: bool):
    """Append a constant-1 feature (the label biases live in W's last column)."""
    if not on:
        return X
    ones = np.ones((X.shape[0], 1))
    if sp.issparse(X):
        return sp.hstack([X, sp.csr_matrix(ones)], format="csr")
    return np.hstack([X, ones])


def auto_step_size_multilabel(Xc, c: float) -> float:
    """The scale-adaptive step ``c / (2 median ||p||^2)`` over the first
    :data:`~tripletml.core.online.AUTO_ETA_HEAD` rows of the CSR ``Xc``
    (as the kernel sees them: with the intercept column).

    ``||g||^2 ||p||^2`` is the squared norm of the rank-one subgradient
    ``g p^T`` of the multi-label hinge, and a unit loss from one violating
    label has ``g = e_i - e_ybar``, ``||g||^2 = 2``: ``c`` is a fraction of
    the passive-aggressive step that corrects it in one update of the
    unfactored W (the multi-label twin of
    :func:`tripletml.core.online.auto_step_size`; a median, so that a
    few outlying rows do not shrink the step for all).  Rows without any
    entry (all norms zero) give ``c``.
    """
    head = Xc[:AUTO_ETA_HEAD]
    if head.shape[0] == 0:
        return float(c)
    pp = float(np.median(np.asarray(head.multiply(head).sum(axis=1)).ravel()))
    den = 2.0 * pp
    if not (math.isfinite(den) and den > 0.0):
        return float(c)
    return float(c) / den


class _MultilabelRanker(LearnerBase):
    """Shared fit / partial_fit / scoring of the multi-label rankers.

    With ``fit_intercept=True`` a constant feature is appended internally, so
    ``W`` has ``n_features + 1`` columns and the model can learn each label's
    prior (the paper's ``W p`` has none; on yeast the label frequencies alone
    give a label-ranking mAP of 0.70).
    """

    _method = LORETA
    #: learners with ``eta0="auto"`` set the constant c of :func:`auto_step_size_multilabel`
    _auto_eta_c: float | None = None

    def _resolve_data_params(self, Xc) -> None:
        """At the start of ``fit`` (and the first ``partial_fit`` call), with
        the rows as the kernel sees them (intercept column included): the
        step ``eta_`` of learners with ``eta0="auto"``."""
        if self._auto_eta_c is None:
            return
        self.eta_ = (auto_step_size_multilabel(Xc, self._auto_eta_c)
                     if isinstance(self.eta0, str) else float(self.eta0))

    def _kernel_eta(self) -> float:
        """The step handed to the kernel: ``eta_`` for ``eta0="auto"``
        learners, else ``eta0`` (0 for learners without one)."""
        if self._auto_eta_c is None:
            return float(getattr(self, "eta0", 0.0))
        return fitted_step_size(self)

    def _check_loaded(self) -> None:
        super()._check_loaded()
        L = self.n_labels_
        if isinstance(L, bool) or not isinstance(L, int) or L < 2:
            raise ValueError(f"n_labels_={L!r} must be an integer >= 2")

    _parameter_constraints = {
        **{k: v for k, v in COMMON.items() if k not in ("n_triplets", "preprocessing")},
        "fit_intercept": ["boolean"],
        "eta0": [Interval(Real, 0, None, closed="neither")],     # MatrixPerceptron
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    @property
    def n_columns_(self) -> int:
        """Columns of W: ``n_features_in_`` plus one with ``fit_intercept``
        (derived, never stored; the shape of ``B_`` / ``W_`` is checked against it)."""
        return int(self.n_features_in_) + bool(self.fit_intercept)

    _advice = "lower the step size (eta0) or scale the features down"

    # state ----------------------------------------------------------------
    def _init_model(self, d, L, rng):
        raise NotImplementedError

    def __setstate__(self, state):
        super().__setstate__(state)
        upgrade_watch(self)                    # pickled by tripletml 0.1

    def _check_resumable(self):
        """Rebuild solver state that is not stored (override)."""

    def _arrays(self):
        z = np.zeros((1, 1))
        return (getattr(self, "A_", z), getattr(self, "pinv_A_", z), getattr(self, "B_", z),
                getattr(self, "pinv_B_", z), getattr(self, "W_", z))

    def _model_diverged(self, step):
        return FloatingPointError(f"{type(self).__name__}: training diverged (the model "
                                  f"became NaN/inf); {self._advice}.")

    def _diverged(self, step):
        return FloatingPointError(
            f"{type(self).__name__}: training diverged (non-finite label scores at step "
            f"{step}); {self._advice}.")

    def _kernel(self, arrays, Xc, Yc, order, losses):
        """Steps over samples ``order``; ``(count done, flags)`` as
        :func:`tripletml.algorithms.multilabel.kernels.multilabel_steps`."""
        L = Yc.shape[1]
        n_big = max(L, Xc.shape[1])
        work = (np.empty(L), np.empty(L), np.empty(Xc.shape[1]), np.empty(n_big),
                np.empty(n_big))
        return multilabel_steps(self._method, *arrays, Xc.indptr, Xc.indices, Xc.data,
                                 Yc.indptr, Yc.indices, order, self._kernel_eta(),
                                 float(getattr(self, "C", 0.0)), losses, *work)

    # the hooks of :class:`tripletml.engine.online.OnlinePasses` ----------
    def _run_block(self, Xc, Yc, order, pos=0):
        """Steps on the samples ``order``; returns ``(losses, None, {})``."""
        losses = np.zeros(order.shape[0])
        t, flags = self._kernel(self._arrays(), Xc, Yc, order, losses)
        if flags < 0:
            raise self._diverged(self.t_ + t + 1)
        return losses, None, {}

    def _model_finite(self) -> bool:
        return all(np.isfinite(a).all() for a in self._arrays())

    def _epoch_indices(self, rng, n):
        return rng.permutation(n)

    def _begin_epoch(self, rng, n):
        """Nothing to prepare per pass."""

    def _end_epoch(self, Xc, Yc, loss, prev_loss):
        return (None if prev_loss is None else relative_change(prev_loss, loss)), {}

    def _passes(self, Xc, Yc, hist, rng=None) -> OnlinePasses:
        return OnlinePasses(self, Xc, Yc, block=self._watch.window, rng=rng,
                            previous=hist.data)

    def _initial_loss(self, Xc, Yc, order):
        """Mean multi-label hinge of the initial model on (up to) the first
        ``WATCH_HEAD`` samples of ``order``: the divergence watch's reference."""
        rows = order[:WATCH_HEAD]
        if rows.shape[0] == 0:
            return None
        with np.errstate(all="ignore"):
            S = np.asarray(self._scores(Xc[rows]), dtype=float)
        return float(np.mean(multilabel_hinge_rows(S, Yc[rows].toarray().astype(bool))))

    def _record_extra(self):
        return {}

    @threads_for(work_fit)        # one BLAS thread for small work (tripletml.engine.threads)
    def fit(self, X, Y):
        """Fit on samples X (n x d, dense or CSR) and labels Y (n x L, 0/1):
        up to ``max_iter`` passes, each over the samples in a new random order.

        Returns
        -------
        self
        """
        from tripletml.core.base import _is_collection
        if _is_collection(X):
            raise TypeError(f"{type(self).__name__}: a multi-label learner trains on in-memory "
                            "X and Y; fit(ShardedCollection) is available for the triplet "
                            "learners (OASIS, SDCA, LORETA, ...)")
        self._validate_params()
        X = check_X(X, self)
        Yc = check_indicator(Y, X.shape[0], self)
        rng = as_generator(self.random_state, self)
        self._reset_fitted()
        d = X.shape[1]
        X = _with_intercept(X, self.fit_intercept)
        self._init_model(X.shape[1], Yc.shape[1], rng)
        self.n_labels_ = Yc.shape[1]
        self.t_ = 0
        n = X.shape[0]
        Xc = as_csr(X)
        self._resolve_data_params(Xc)
        self._watch = new_watch(self, block_size(n), self._initial_loss(Xc, Yc, np.arange(n)))
        hist = History(keys=self._history_keys)
        result = run(self._passes(Xc, Yc, hist, rng), name=type(self).__name__,
                     max_iter=int(self.max_iter), tol=self.tol, history=hist,
                     watch=self._watch, flush_window=WATCH_HEAD, verbose=self.verbose,
                     total=int(self.max_iter) * n, unit="sample")
        self._set_fitted(d)
        apply_result(self, result, tol=self.tol,
                     what="relative change of the mean loss between passes",
                     advice="increase max_iter or tol, or set tol=None for a fixed budget")
        return self

    _history_keys = ("loss", "avg_loss")

    def partial_fit(self, X, Y):
        """One online step per sample (row of X and Y), in order; the first
        call initializes the model.

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
            self._init_model(X.shape[1], Yc.shape[1], as_generator(self.random_state,
                                                                           self))
            self._set_fitted(d)
            self.n_labels_ = Yc.shape[1]
            self.t_ = 0
            self.history_ = {}
            self._watch = None
        else:
            if Yc.shape[1] != self.n_labels_:
                raise ValueError(f"{type(self).__name__}: Y has {Yc.shape[1]} labels, the "
                                 f"model {self.n_labels_}.")
            self._check_resumable()
            if getattr(self, "_watch", None) is None:      # e.g. loaded from a file
                self._watch = new_watch(self, BLOCK_MIN)
        hist = History(self.history_, keys=self._history_keys)
        try:
            if first:
                self._resolve_data_params(as_csr(X))
                self._watch = new_watch(self, BLOCK_MIN, self._initial_loss(
                    as_csr(X), Yc, np.arange(X.shape[0])))
            result = run(self._passes(as_csr(X), Yc, hist), name=type(self).__name__,
                         max_iter=1, history=hist, watch=self._watch)
        except Exception:
            if first:
                self._reset_fitted()
            raise
        # one pass over the given samples: one iteration, stopped by max_iter
        apply_result(self, result, tol=None, what="", advice="")
        return self

    @threads_for(work_rows)
    def decision_function(self, X) -> np.ndarray:
        """Label scores ``W x`` for every sample: array (n_samples, n_labels)."""
        check_is_fitted(self, "n_features_in_")
        X = check_X(X, self, n_features=self.n_features_in_)
        return self._scores(_with_intercept(X, self.fit_intercept))

    @threads_for(work_rows)
    def score(self, X, Y) -> float:
        """Label-ranking mean average precision of ``decision_function(X)``."""
        from tripletml.metrics import label_ranking_map

        check_is_fitted(self, "n_features_in_")
        X = check_X(X, self, n_features=self.n_features_in_)
        Yc = check_indicator(Y, X.shape[0], self)
        return label_ranking_map(Yc, self._scores(_with_intercept(X, self.fit_intercept)))


_ATTRIBUTES = """
    Attributes
    ----------
    n_labels_ : int
    n_features_in_ : int
    t_ : int
        Samples processed (over all calls).
    n_iter_ : int
        Passes made by the last ``fit`` (1 after ``partial_fit``).
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        One record per pass / ``partial_fit`` call: ``step``, ``seconds``,
        ``loss`` (mean multi-label hinge since the previous record),
        ``avg_loss`` (running mean)."""

_TOL = """
    tol : float or None, default=None
        None: all ``max_iter`` passes (the paper's fixed budget); a float:
        stop when the mean loss of a pass changed by less than ``tol``
        relative to the previous pass."""


class _LowRankMultilabel:
    """``rank_``, what ``rank`` resolves to for the labels and columns of a
    fit: ``min(5, n_labels, n_columns)`` for ``rank=None`` (the default; a
    problem with three labels has no rank-5 model), else ``rank``, which
    may not exceed ``min(n_labels, n_columns)``."""

    #: the rank of ``rank=None`` where the labels and columns allow it
    _default_rank = 5

    def _resolve_rank(self, n_columns: int, n_labels: int) -> int:
        cap = min(n_columns, n_labels)
        if self.rank is None:
            return min(self._default_rank, cap)
        if self.rank > cap:
            raise ValueError(f"{type(self).__name__}: rank={self.rank} exceeds "
                             f"min(n_labels={n_labels}, n_features={n_columns}).")
        return int(self.rank)

    def _check_loaded(self) -> None:
        super()._check_loaded()
        k = int(self.A_.shape[1])
        if getattr(self, "rank_", None) is None:          # written before rank_ was stored
            self.rank_ = k
        want = self._resolve_rank(self.n_columns_, self.n_labels_)
        if isinstance(self.rank_, bool) or self.rank_ != k or k != want:
            raise ValueError(f"rank_={self.rank_!r} with factors of rank {k}, but the "
                             f"parameters give rank {want} (rank={self.rank!r})")

    def __setstate__(self, state):
        if "A_" in state and "rank_" not in state:     # pickled before rank_ was stored
            state = {**state, "rank_": int(state["A_"].shape[1])}
        super().__setstate__(state)


class LORETAMultilabel(_LowRankMultilabel, PinvFactorsOwner, _MultilabelRanker):
    __doc__ = """Low-rank multi-label ranking by LORETA-1 (LORETA paper, section 5.2).

    Parameters
    ----------
    rank : int or None, default=None
        k <= min(n_labels, n_features) (intercept column included).  None:
        ``min(5, n_labels, n_features)``, the paper's rank 5 where the
        labels allow it.  The value used is ``rank_``.
    eta0 : "auto" or float, default="auto"
        The constant step size (eta in the paper).  "auto": resolved once at
        the start of ``fit`` (or the first ``partial_fit``) from the first
        1000 rows as ``c / (2 median ||p||^2)`` (intercept feature
        included), the passive-aggressive step of the unfactored model for a
        unit loss from one violating label, scaled by ``c =
        _auto_eta_c`` (see :func:`auto_step_size_multilabel`), so that the
        step follows the scale of the data as LORETA's and FactoredGD's
        ``eta0="auto"``; the update itself is the paper's.  The value used
        is ``eta_``.  The default (formerly 0.1) and c = 0.3 were chosen on
        the MULAN train/test splits at rank 5, 3 seeds: yeast (rows of unit
        norm) c = 0.03 / 0.1 / 0.3 / 1 gave .729 / .731 / .733 / .722
        (eta0=0.1: .731), scene (294 features in [0, 1]) .769 / .826 /
        .853 / .843 (eta0=0.1: .830).
    max_iter : int, default=10
        Passes over the samples (each in a new random order).
    init : {"identity", "random"}, default="identity"
        ``A = [I_k; 0]`` (L x k), ``B = [I_k; 0]`` (d x k), or random normal.
    fit_intercept : bool, default=True
        Append a constant feature (label priors; see the class notes).
    pinv_check_every, pinv_tol : int, float
        Drift control of the maintained pseudo-inverses, as :class:`LORETA`.""" + _TOL + """
    random_state : None, int or numpy Generator
    verbose : int, default=0
""" + _ATTRIBUTES + """
    rank_ : int
        The rank used (``rank``, or what None resolves to).
    A_ : ndarray (n_labels, rank_)
    B_ : ndarray (n_features [+ 1], rank_)
        ``W = A_ B_^T`` (the last row of ``B_`` belongs to the intercept feature).
    pinv_A_, pinv_B_ : transposed pseudo-inverses of ``A_``, ``B_``
    n_pinv_refresh_ : int
        Re-factorings by the drift control.
    eta_ : float
        The step size used (``eta0``, or its resolved value for "auto").
    """

    _method = LORETA
    _auto_eta_c = 0.3
    _fitted_arrays = {"A_": ArraySpec(("n_labels_", "=rank")),
                      "pinv_A_": ArraySpec(("n_labels_", "=rank")),
                      "B_": ArraySpec(("n_columns_", "=rank")),
                      "pinv_B_": ArraySpec(("n_columns_", "=rank"))}
    _history_keys = ("loss", "avg_loss", "pinv_drift")

    def __init__(self, rank=None, *, eta0="auto", max_iter=10, init="identity", fit_intercept=True,
                 pinv_check_every=1000, pinv_tol=1e-8, tol=None, random_state=None,
                 verbose=0):
        self.rank = rank
        self.fit_intercept = fit_intercept
        self.eta0 = eta0
        self.max_iter = max_iter
        self.init = init
        self.pinv_check_every = pinv_check_every
        self.pinv_tol = pinv_tol
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    _parameter_constraints = {
        **_MultilabelRanker._parameter_constraints,
        **LOWRANK_PARAMS,
        **PINV_PARAMS,
        "init": [StrOptions({"identity", "random"})],
        "eta0": ETA0_AUTO,
    }

    def _init_model(self, d, L, rng):
        self.rank_ = self._resolve_rank(d, L)
        A, B = init_factors(L, d, self.rank_, self.init, rng)
        self._new_factors(A, B)

    def _check_resumable(self):
        self._resume_factors()

    def _run_block(self, Xc, Yc, order, pos=0):
        losses = np.zeros(order.shape[0])
        z = np.zeros((1, 1))

        def kernel(f, start, stop):
            done, flags = self._kernel((f.A, f.PA, f.B, f.PB, z), Xc, Yc, order[start:stop],
                                       losses[start:stop])
            return start + done, flags

        try:
            self._factors.run(kernel, order.shape[0], self._diverged, step0=self.t_)
        finally:
            self._store()
        return losses, None, {}

    def _scores(self, X):
        return np.asarray(X @ self.B_) @ self.A_.T


class IterativePAMultilabel(_LowRankMultilabel, _MultilabelRanker):
    __doc__ = """Alternating passive-aggressive multi-label ranking on ``W = A B^T``.

    The steps are ``A += eta_A g (B^T p)^T``,
    ``eta_A = min(l / (||g||^2 ||B^T p||^2), C)``, then with the loss and g
    recomputed ``B += eta_B p (A^T g)^T``,
    ``eta_B = min(l / (||p||^2 ||A^T g||^2), C)``: no step size.

    Parameters
    ----------
    rank : int or None, default=None
        As :class:`LORETAMultilabel` (None: ``min(5, n_labels, n_features)``;
        the value used is ``rank_``).
    C : float, default=0.1
        Cap on the PA step sizes (C in the paper, PA-I).
    max_iter : int, default=10
        Passes over the samples.
    init : {"identity", "random"}, default="identity"
    fit_intercept : bool, default=True""" + _TOL + """
    random_state : None, int or numpy Generator, default=None
        Order of the samples in each pass.
    verbose : int, default=0
        Progress bar: on a terminal when >= 1, always when >= 2 (it advances
        within a pass).
""" + _ATTRIBUTES + """
    rank_ : int
        The rank used (``rank``, or what None resolves to).
    A_ : ndarray (n_labels, rank_)
    B_ : ndarray (n_features [+ 1], rank_)
    """

    _method = PA
    _fitted_arrays = {"A_": ArraySpec(("n_labels_", "=rank")),
                      "B_": ArraySpec(("n_columns_", "=rank"))}
    _advice = "lower C or scale the features down"

    def __init__(self, rank=None, *, C=0.1, max_iter=10, init="identity", fit_intercept=True,
                 tol=None, random_state=None, verbose=0):
        self.rank = rank
        self.fit_intercept = fit_intercept
        self.C = C
        self.max_iter = max_iter
        self.init = init
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    _parameter_constraints = {
        **_MultilabelRanker._parameter_constraints,
        **LOWRANK_PARAMS,
        "init": [StrOptions({"identity", "random"})],
        "C": [Interval(Real, 0, None, closed="neither")],
    }

    def _init_model(self, d, L, rng):
        self.rank_ = self._resolve_rank(d, L)
        self.A_, self.B_ = init_factors(L, d, self.rank_, self.init, rng)

    def _scores(self, X):
        return np.asarray(X @ self.B_) @ self.A_.T


class MatrixPerceptron(_MultilabelRanker):
    __doc__ = """Full-rank multi-label ranking by conservative subgradient steps
    ``W += eta0 g p^T`` on the multi-label hinge loss (W starts at 0).

    Parameters
    ----------
    eta0 : float, default=0.1
        The constant step size (eta).
    max_iter : int, default=10
        Passes over the samples.
    fit_intercept : bool, default=True""" + _TOL + """
    random_state : None, int or numpy Generator, default=None
        Order of the samples in each pass.
    verbose : int, default=0
        Progress bar: on a terminal when >= 1, always when >= 2 (it advances
        within a pass).
""" + _ATTRIBUTES + """
    W_ : ndarray (n_labels, n_features [+ 1])
    """

    _method = PERCEPTRON
    _fitted_arrays = {"W_": ArraySpec(("n_labels_", "n_columns_"))}
    #: no loss-ratio divergence watch (only non-finite values stop it): each
    #: step adds ``eta0 g p^T`` with ``g`` a difference of label indicators,
    #: so ``||W||`` grows at most linearly in the steps and cannot blow up,
    #: while the hinge of a mistake grows with ``||W||`` by design (on raw
    #: pixel counts, digits: from 1 to 34 within 600 steps, which the ratio
    #: watch of the other learners took for divergence at the defaults)
    _watch_factor = math.inf

    def __init__(self, eta0=0.1, *, max_iter=10, fit_intercept=True, tol=None, random_state=None,
                 verbose=0):
        self.fit_intercept = fit_intercept
        self.eta0 = eta0
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _init_model(self, d, L, rng):
        self.W_ = np.zeros((L, d))

    def _check_resumable(self):
        W = getattr(self, "W_", None)
        if not isinstance(W, np.ndarray) or W.shape != (self.n_labels_, self.n_columns_):
            raise ValueError(f"MatrixPerceptron: W_ has shape {getattr(W, 'shape', None)}, "
                             f"expected ({self.n_labels_}, {self.n_columns_}).")

    def _scores(self, X):
        return np.asarray(X @ self.W_.T)
