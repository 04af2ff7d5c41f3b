"""Online-learner semantics shared by OASIS, SDCA, LORETA and the factored
baselines.

* ``fit(X, y | triplets)`` initializes the model and makes up to
  ``max_iter`` passes over the triplets, each in a fresh random order drawn
  from ``random_state``.  With ``tol=None`` (the papers' fixed budgets) all
  passes are made; with a ``tol`` the run stops after the first pass whose
  mean loss changed by less than ``tol`` relative to the previous pass
  (:func:`tripletml.engine.stopping.relative_change`; SDCA uses its duality gap
  instead).  ``n_iter_`` and ``stop_reason_`` record what happened, and a
  :class:`~sklearn.exceptions.ConvergenceWarning` says when a ``tol`` was not
  met (:func:`tripletml.engine.stopping.finish`).
* ``partial_fit(X, triplets)`` performs exactly one step per given triplet,
  in the given order; the first call initializes the model.  A one-triplet
  call is therefore one update of the paper's algorithm.  ``t_`` counts the
  single-triplet updates over all calls (as scikit-learn's SGD).

Each pass runs through the training driver (:func:`tripletml.engine.run`
over :class:`tripletml.engine.online.OnlinePasses`) in blocks of
``max(1000, ceil(m / 20))`` steps, one driver step each.  After each block the
mean hinge loss of the block (the loss of each step *before* its update) is
fed to the driver's divergence watch (:class:`tripletml.engine.DivergenceWatch`
with a window of steps), which
raises the learner's ``FloatingPointError`` with advice as soon as a block's
mean loss exceeds ``WATCH_FACTOR = 10`` times the smallest mean seen so far
plus ``WATCH_FLOOR = 0.5`` (the shared watch's 1000-fold default is far too
lenient for a hinge loss that starts near 1: LORETA's defaults on vowel,
at 10,000 triplets, ended at a mean loss of 10 from 0.9, worse than
Euclidean).  The
first value the watch sees is the mean loss of the *initial* model on (up to)
the first 100 triplets, evaluated before any step, so a run that blows up
within its first block, even within its first steps, is caught.  (Every margin is checked for NaN/inf by the kernels, the whole
model once per pass.)  The blocks also advance the progress bar (``verbose``).  The watch
persists across ``partial_fit`` calls (windows of 1000 steps, the initial
loss taken at the first call), so a stream of small calls is watched the same
way.

``history_`` holds one record per pass of ``fit`` and one per
``partial_fit`` call (not per block): the curves the papers plot are running
means over steps, which a per-pass record carries exactly, and the number of
records does not grow with the data.

Subclasses implement ``_init_model(d, rng)`` and
``_run_steps(Xc, triplets) -> (losses, margins)`` (per-step loss before the
update and margin ``S(q, p+) - S(q, p-)`` before the update), plus
``_model_finite()``.
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tripletml.engine.stopping import relative_change
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.core.validation import as_generator, check_triplets, check_X
from tripletml.core.base import TripletLearner
from tripletml.core.supervision import read_partial_supervision
from tripletml.linalg.sparse_rows import as_csr, triplet_products
from tripletml.losses import triplet_hinge_array
from tripletml.core.preprocessing import check_preprocessing
from tripletml.engine import DivergenceWatch, History, TrainingResult, apply_result, run
from tripletml.engine.online import OnlinePasses
from tripletml.engine.watch import STEPS

__all__ = ["OnlineTripletLearner", "WATCH_FACTOR", "WATCH_FLOOR", "BLOCK_MIN", "BLOCKS_PER_EPOCH",
           "AUTO_ETA_HEAD", "AutoStepMixin", "auto_step_size", "auto_step_norms",
           "auto_step_from_norms", "ETA0_AUTO"]

#: a block's mean loss above ``WATCH_FACTOR * (smallest mean so far + WATCH_FLOOR)``
#: stops training.  The triplet hinge of a centered model is about 1 and a
#: learning run's running loss stays below its initial value (on the demo,
#: registry and reproduction settings the largest ratio measured was 1.3);
#: ten times the best plus half the hinge at a zero margin is divergence
#: (LORETA's defaults on vowel reach 15 from 0.9 and end worse than Euclidean).
WATCH_FACTOR = 10.0
WATCH_FLOOR = 0.5
#: steps per block: at least BLOCK_MIN, about BLOCKS_PER_EPOCH blocks per pass
BLOCK_MIN = 1000
BLOCKS_PER_EPOCH = 20
#: triplets on which the initial model's loss (the watch's first value) is taken
WATCH_HEAD = 100


#: triplets (the first ones of the sample) from which ``eta0="auto"`` is resolved
AUTO_ETA_HEAD = 1000


def auto_step_size(Xc, triplets, c: float) -> float:
    """The scale-adaptive step ``c / (median ||q||^2 * median ||p+ - p-||^2)``
    over the first :data:`AUTO_ETA_HEAD` triplets (rows of the CSR ``Xc``, as
    the solver sees them, i.e. after preprocessing).

    ``||q||^2 ||v||^2`` is the squared norm of the rank-one gradient
    ``q v^T`` of the triplet hinge, the denominator of the unfactored
    passive-aggressive step: ``c`` is a fraction of the step that would
    correct a typical unit loss in one update (medians, so that a few
    outlying rows do not shrink the step for all).  Data without any
    variation (all norms zero) give ``c``.
    """
    qq, vv = auto_step_norms(Xc, triplets)
    return auto_step_from_norms(qq, vv, c)


def auto_step_norms(Xc, triplets, head: int = AUTO_ETA_HEAD) -> tuple[np.ndarray, np.ndarray]:
    """``(||q||^2, ||p+ - p-||^2)`` of the first ``head`` triplets (rows of
    the CSR ``Xc``): what :func:`auto_step_size` takes the medians of (a
    partitioned fit gathers them from every partition)."""
    t = np.asarray(triplets)[:int(head)]
    if t.shape[0] == 0:
        return np.zeros(0), np.zeros(0)
    _, qq, vv = triplet_products(Xc, t)
    return qq, vv


def auto_step_from_norms(qq: np.ndarray, vv: np.ndarray, c: float) -> float:
    """``c / (median qq * median vv)`` (``c`` for no norms or a zero or
    non-finite denominator): :func:`auto_step_size` from its norms."""
    if len(qq) == 0:
        return float(c)
    qq = float(np.median(qq))
    vv = float(np.median(vv))
    den = qq * vv
    if not (math.isfinite(den) and den > 0.0):
        return float(c)
    return float(c) / den


#: the declaration of ``eta0="auto"`` or a positive real
ETA0_AUTO = [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")]


class AutoStepMixin:
    """``eta0="auto"`` for a constant-step online learner: the step
    :func:`auto_step_size` with the class's ``_auto_eta_c`` is resolved at the
    start of ``fit`` (or the first ``partial_fit`` call) and stored in
    ``eta_``; a numeric ``eta0`` is used as it is (``eta_ = eta0``)."""

    _auto_eta_c = 0.01          # declared (tripletml.core.base.DECLARATIONS)

    def _resolve_data_params(self, Xc, triplets) -> None:
        if isinstance(self.eta0, str):          # "auto" (validated)
            self.eta_ = auto_step_size(Xc, triplets, self._auto_eta_c)
        else:
            self.eta_ = float(self.eta0)

    def _resolve_data_params_partitioned(self, qq, vv) -> None:
        """As :meth:`_resolve_data_params`, from the head norms
        (:func:`auto_step_norms`) gathered from the partitions."""
        if isinstance(self.eta0, str):          # "auto" (validated)
            self.eta_ = auto_step_from_norms(qq, vv, self._auto_eta_c)
        else:
            self.eta_ = float(self.eta0)

    def _step_size(self) -> float:
        """The step of the update: ``eta_`` (fitted), or a numeric ``eta0``."""
        return fitted_step_size(self)


def fitted_step_size(est) -> float:
    """``est.eta_`` (the step ``eta0="auto"`` resolved at the first
    fit/partial_fit), or a numeric ``est.eta0``; ValueError for an
    unresolved ``"auto"``."""
    eta = getattr(est, "eta_", None)
    if eta is None:
        if isinstance(est.eta0, str):
            raise ValueError(f"{type(est).__name__}: eta0='auto' is resolved at the "
                             "first fit/partial_fit; this model has no eta_.")
        eta = float(est.eta0)
    return float(eta)


def block_size(m: int) -> int:
    """Steps per block for a pass over ``m`` triplets."""
    return max(BLOCK_MIN, -(-int(m) // BLOCKS_PER_EPOCH))


class _BlockWatch:
    """The windowed watch of tripletml 0.1, kept only so that models pickled
    by 0.1 unpickle (:func:`upgrade_watch` turns it into a
    :class:`~tripletml.engine.DivergenceWatch`)."""


def upgrade_watch(est) -> None:
    """A ``_watch`` unpickled from 0.1 (a :class:`_BlockWatch`) becomes the
    :class:`~tripletml.engine.DivergenceWatch` with its window, smallest
    value and open window."""
    old = est.__dict__.get("_watch")
    if not isinstance(old, _BlockWatch):
        return
    state = vars(old)
    new = new_watch(est, int(state.get("block", BLOCK_MIN)))
    loss_watch = state.get("watch")
    if loss_watch is not None:
        new._channels[STEPS] = loss_watch
    new.total = float(state.get("total", 0.0))
    new.count = int(state.get("count", 0))
    new.start = int(state.get("start", 0))
    est._watch = new


def new_watch(est, window: int, initial: float | None = None) -> DivergenceWatch:
    """The online learners' divergence watch: windows of ``window`` steps,
    ``WATCH_FACTOR`` / ``WATCH_FLOOR`` (a learner's ``_watch_factor`` when it
    sets one), the initial model's loss first."""
    factor = getattr(est, "_watch_factor", WATCH_FACTOR)
    return DivergenceWatch(est, advice=est._advice, factor=factor, floor=WATCH_FLOOR,
                           window=window, initial=initial)


class OnlineTripletLearner(TripletLearner):
    """Base class of the online learners (see module docstring)."""

    # what an online algorithm declares (the defaults; the meanings:
    # tripletml.core.base.DECLARATIONS)
    _history_keys = ("loss", "avg_loss", "mistake_rate")
    _advice = "lower the step size (eta0) or scale the features down"
    _criterion_name = "relative change of the mean loss between passes"

    _parameter_constraints = {
        **COMMON,
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    # model hooks -------------------------------------------------------
    def _init_model(self, n_features: int, rng: np.random.Generator, X=None) -> None:
        """Create the model for rows of width ``n_features``; ``X`` (the
        preprocessed training rows, dense or CSR) for an initialization that
        depends on the data."""
        raise NotImplementedError

    def _run_steps(self, Xc, triplets):
        raise NotImplementedError

    def _model_finite(self) -> bool:
        raise NotImplementedError

    def _initial_loss(self, Xc, triplets) -> float | None:
        """Mean hinge loss of the model as initialized on the first
        ``WATCH_HEAD`` triplets (the watch's reference), before any step."""
        t = triplets[:WATCH_HEAD]
        k = int(t.shape[0])
        if k == 0:
            return None
        # one gather of (q, q, p, n): the scores are row-wise, so these are
        # the margins of the rows gathered one by one (a mixing round calls
        # this once per partition and round)
        R = Xc[np.concatenate([t[:, 0], t[:, 0], t[:, 1], t[:, 2]])]
        with np.errstate(all="ignore"):
            s = self._pair_score(R[:2 * k], R[2 * k:])
            mg = s[:k] - s[k:]
        return float(np.mean(triplet_hinge_array(mg)))

    def _resolve_data_params(self, Xc, triplets) -> None:
        """Called once per ``fit`` (and at the first ``partial_fit`` call)
        after ``_init_model``, with the preprocessed rows and the triplets:
        learners with data-dependent defaults (``eta0="auto"``) resolve them
        here into fitted attributes."""

    # partitioned fits (:mod:`tripletml.distributed.mixing`) ----------------
    def _init_model_partitioned(self, n_features: int, rng: np.random.Generator,
                                energy: np.ndarray) -> None:
        """``_init_model`` for a fit over partitions, which never holds all
        rows: ``energy`` is the column energy ``sum_i x_ij^2`` of all the
        preprocessed training rows (summed over the partitions).  Default:
        an initialization that does not depend on the data."""
        self._init_model(n_features, rng, None)

    def _resolve_data_params_partitioned(self, qq: np.ndarray, vv: np.ndarray) -> None:
        """:meth:`_resolve_data_params` for a fit over partitions, from the
        norms :func:`auto_step_norms` of the head triplets of every
        partition (their first ``AUTO_ETA_HEAD`` in proportion to their
        triplets)."""

    def _block_multiple(self) -> int:
        """Blocks are a multiple of this many steps (LORETA's mini-batches)."""
        return 1

    def _record_extra(self) -> dict:
        """Solver-specific values added to each history record."""
        return {}

    # epoch hooks (SDCA overrides them) ----------------------------------
    def _epoch_indices(self, rng: np.random.Generator, m: int) -> np.ndarray:
        """The triplets of one pass, in order: a random permutation."""
        return rng.permutation(m)

    def _begin_epoch(self, rng: np.random.Generator, m: int) -> None:
        """Called after ``_epoch_indices`` (SDCA draws its reservoir numbers)."""

    def _run_block(self, Xc, triplets, idx, pos):
        """Steps on ``triplets[idx]``, the block starting at ``pos`` of the pass;
        returns ``(losses, margins, cumulative)``."""
        losses, margins = self._run_steps(Xc, triplets[idx])
        return losses, margins, {}

    def _end_epoch(self, Xc, triplets, loss: float, prev_loss: float | None):
        """``(criterion, extra_record)`` after a pass: the relative change of
        the pass's mean loss (None after the first pass)."""
        return (None if prev_loss is None else relative_change(prev_loss, loss)), {}

    def _finalize(self) -> None:
        """Called at the end of ``fit`` and of each ``partial_fit`` call."""

    # driving loop ------------------------------------------------------
    def _diverged(self, step: int) -> FloatingPointError:
        return FloatingPointError(
            f"{type(self).__name__}: training diverged (non-finite margin, norm or model at "
            f"step {step}); scale the features down or lower the step size / "
            "aggressiveness.")

    def _passes(self, Xc, triplets, hist: History, rng=None) -> OnlinePasses:
        r = self._block_multiple()
        block = -(-self._watch.window // r) * r
        return OnlinePasses(self, Xc, triplets, block=block, rng=rng, previous=hist.data)

    def _fit(self, X, triplets, rng):
        self._init_model(X.shape[1], rng, X)
        self.t_ = 0
        Xc = as_csr(X)
        self._resolve_data_params(Xc, triplets)
        m = triplets.shape[0]
        self._watch = new_watch(self, block_size(m), self._initial_loss(Xc, triplets))
        hist = History(keys=self._history_keys)
        result = run(self._passes(Xc, triplets, hist, rng), name=type(self).__name__,
                     max_iter=int(self.max_iter), tol=self.tol, history=hist,
                     watch=self._watch, flush_window=WATCH_HEAD, verbose=self.verbose,
                     total=int(self.max_iter) * m, unit="triplet")
        self._finalize()
        apply_result(self, result, tol=self.tol, what=self._criterion_name,
                     advice="increase max_iter or tol, or set tol=None for a fixed budget")

    def __setstate__(self, state):
        super().__setstate__(state)
        upgrade_watch(self)                    # pickled by tripletml 0.1

    def _check_resumable(self) -> None:
        """Raise if the fitted state cannot take more steps (override)."""

    def _partial_steps(self, Xc, triplets, hist: History, **kwargs) -> TrainingResult:
        """One pass over the given triplets, in order, through the driver."""
        return run(self._passes(Xc, triplets, hist), name=type(self).__name__, max_iter=1,
                   history=hist, watch=self._watch)

    def partial_fit(self, X, y=None, *, triplets=None):
        """One step per triplet, in order (the first call initializes).

        The first call also fits the ``preprocessing`` statistics (mean,
        scale, the ``"sphere"`` radius) on its X, and later calls reuse them:
        give the first call a representative sample of rows (with very few
        rows the statistics are poor; with one row every scale is 1), or
        fit the model on such a sample first.

        Parameters
        ----------
        X : array-like or CSR matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (m, 3), optional
            Class labels of the rows: one random class triplet per row whose
            class has another member in X (the row is its query; the
            positive from its class, the negative from another), drawn with
            the seed ``(random_state, t_)`` when ``random_state`` is an int.
            An ``(m, 3)`` integer array here is index triplets, as
            ``triplets=`` (the form of tripletml 0.2).
        triplets : array-like of shape (m, 3), optional
            ``(query, positive, negative)`` row indices into X.

        Returns
        -------
        self
        """
        return self._partial(X, self._partial_triplets(X, y, triplets))

    def _partial_triplets(self, X, y, triplets):
        """The triplets of one ``partial_fit`` call: ``triplets``, or the
        ``(m, 3)`` integer array passed as y, or one class triplet per row
        drawn from the labels y (see :meth:`partial_fit`); the input is read
        by :func:`~tripletml.core.supervision.read_partial_supervision`."""
        from tripletml.triplets import check_labels, random_class_triplets

        who = type(self).__name__
        sup = read_partial_supervision(self, X, y, triplets)
        if sup.kind == "triplets":
            return sup.triplets
        n = getattr(X, "shape", (len(X),))[0]
        _, codes = check_labels(sup.y, n, self)
        rs = self.random_state
        t = int(getattr(self, "t_", 0)) if hasattr(self, "n_features_in_") else 0
        rng = (np.random.default_rng([int(rs), t]) if isinstance(rs, (int, np.integer))
               and not isinstance(rs, bool) else as_generator(rs, self))
        try:
            return random_class_triplets(codes, per_query=1, random_state=rng)
        except ValueError as exc:
            raise ValueError(f"{who}: partial_fit(X, y): {exc}") from None

    def _partial(self, X, triplets, **kwargs):
        self._validate_params()
        first = not hasattr(self, "n_features_in_")
        X = check_X(X, self, accept_sparse=self._accepts_sparse,
                    n_features=None if first else self.n_features_in_)
        triplets = check_triplets(triplets, X.shape[0], self, allow_degenerate=False)
        n_raw = X.shape[1]
        if first:    # the first call fits the preprocessing on its X
            check_preprocessing(self.preprocessing, self)
            self._fit_preprocessing(X)
        X = self._preprocess(X)
        if first:
            try:
                self._check_square_memory(X.shape[1])
            except MemoryError:
                self._clear_preprocessing()
                raise
            self._init_model(X.shape[1], as_generator(self.random_state, self), X)
            self._set_fitted(n_raw)
            self.t_ = 0
            self.history_ = {}
            self._watch = None
        else:
            check_is_fitted(self, "n_features_in_")
            self._check_resumable()
            if getattr(self, "_watch", None) is None:      # e.g. loaded from a file
                self._watch = new_watch(self, BLOCK_MIN)
        hist = History(self.history_, keys=self._history_keys)
        try:
            if first:
                self._resolve_data_params(as_csr(X), triplets)
                self._watch = new_watch(self, BLOCK_MIN, self._initial_loss(as_csr(X), triplets))
            result = self._partial_steps(as_csr(X), triplets, hist, **kwargs)
        except Exception:
            if first:  # a failed first call leaves the model unfitted
                self._reset_fitted()
                self._clear_preprocessing()
            raise
        self._finalize()
        # one pass over the given triplets: one iteration, stopped by max_iter
        apply_result(self, result, tol=None, what="", advice="")
        return self
