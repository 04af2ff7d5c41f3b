"""SDCA for relative similarity (Wu, Ding, Zhao, Miao & Hoi, AAAI 2015).

Learns a bilinear similarity ``S_M(x, x') = x^T M x'`` by stochastic dual
coordinate ascent on

    P(M) = (1/n) sum_i [1 - x_i^T M (x_i+ - x_i-)]_+^2 + (lambda/2) ||M||_F^2   (eq. 3-4)

whose dual (eq. 5) has one scalar ``alpha_i >= 0`` per triplet,
``Theta_i = alpha_i X_i`` with ``X_i = x_i (x_i+ - x_i-)^T``, and
``M(Theta) = (lambda n)^-1 sum_i alpha_i X_i`` (eq. 7).  Algorithm 1: pick ``i``
uniformly, then

    d_alpha = max((1 - x_i^T M v_i - alpha_i / 2) / (1/2 + ||X_i||^2 / (lambda n)), -alpha_i)
    alpha_i += d_alpha,    M += (lambda n)^-1 d_alpha X_i,

with ``||X_i||_F^2 = ||x_i||^2 ||v_i||^2`` and ``v_i = x_i+ - x_i-``.  The
dual objective is ``D = (1/n) sum_i (alpha_i - alpha_i^2 / 4) - (lambda/2)||M||^2``
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

The dual bookkeeping lives in :class:`tripletml.algorithms.sdca.kernels.SDCASolver`;
this estimator validates, drives it pass by pass and stores its state.  The
regularization lambda of the paper is the parameter ``alpha`` (the
library's name for the main regularization strength); the paper's dual
variables alpha_i are the fitted ``alpha_``.
"""
from __future__ import annotations

import copy
from numbers import Real

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import document_sampling
from tripletml.core.params import Interval, StrOptions
from tripletml.core.validation import as_generator
from tripletml.core.base import BilinearMixin
from tripletml.algorithms.sdca.kernels import (SDCASolver, identity_margins, relative_gap,  # noqa: F401
                                              sdca_objectives, triplet_products)
from tripletml.core.online import OnlineTripletLearner
from tripletml.linalg.sparse_rows import as_csr, margin_scale
from tripletml.core.step_cap import (HELD_FRACTION, MIN_ANSWERS, bilinear_accuracy,
                                     one_standard_error)
from tripletml.engine.early_stopping import split_by_items
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform
from tripletml.algorithms.sdca import distributed

__all__ = ["SDCA", "sdca_objectives"]

#: ``alpha`` of "auto" with class labels (Wu et al.'s experiments)
_DEFAULT_ALPHA = 0.01
#: "auto" on answers: ``alpha = (s / m) 10^j`` for these ``j`` (``s`` the
#: answers' median ``||X_i||^2``, ``m`` their number): ``alpha m / ||X_i||^2``,
#: the ratio of the regularizer's curvature to an answer's in Algorithm 1's
#: step ``1/2 + ||X_i||^2 / (lambda n)``, is 1e-4, 1e-2 and 1
_ALPHA_STEPS = (-4, -2, 0)


@document_transform
@document_sampling
@document_preprocessing
class SDCA(BilinearMixin, OnlineTripletLearner):
    """Stochastic dual coordinate ascent for bilinear relative similarity.

    Parameters
    ----------
    alpha : float or "auto", default="auto"
        Regularization strength (lambda in the paper, eq. 4).  "auto": 0.01
        (the paper's experiments) with class labels, in a stream and in a
        partitioned fit; on answers (triplets or pairs given to ``fit``) a
        held-out choice: ``(s / m) 10^j``, ``j = -4, -2, 0`` (``s`` the
        answers' median ``||X_i||^2 = ||x_q||^2 ||x_p - x_n||^2``, ``m``
        their number: ``alpha m / ||X_i||^2``, the regularizer's weight
        against an answer's in Algorithm 1's step, is 1e-4, 1e-2 and 1, at
        any scale of the rows), each fitted on the answers among
        four fifths of the named items and scored on the answers headed by
        the others; the largest within one standard error of the best.  With
        the identity start the largest ``alpha`` is the start itself (the
        cosine of l2 rows), so following the answers must earn it, as the
        step cap ``C="auto"`` of OASIS.  ``lambda_`` records the value used,
        ``alpha_grid_`` and ``alpha_scores_`` the choice.
    max_iter : int, default=10
        Maximum passes; each pass makes ``n`` steps, each drawing a triplet
        uniformly at random (Algorithm 1 samples with replacement).
    n_triplets : int, default=10000
        Random class triplets sampled by ``fit`` from labels.  In
        ``partial_fit`` on a fresh model it is also the expected total number
        of distinct triplets ``n`` of the ``(lambda n)^-1`` scaling (see Notes).
    {sampling}
    output : {"average", "random", "last"}, default="average"
        Algorithm 1's average option, random option, or the last iterate.
    average_start : float in [0, 1), default=0.5
        ``T0`` as a fraction of the planned ``T = max_iter * n`` steps (the
        paper's remark uses ``T = 2 T0``).  If training stops (on ``tol``)
        before ``T0``, the window is empty and ``W_`` is the last iterate.
    tol : float or None, default=None
        Stop after the first pass whose *relative* duality gap
        ``(P - D) / max(|P|, 1e-12)`` (eq. 8 over the primal, evaluated
        after each pass) is at most ``tol``; a ConvergenceWarning when
        ``max_iter`` passes end first.  None (default): the fixed budget of
        ``max_iter`` passes, as the paper's experiments (a fixed number of
        steps); the gap is still recorded in ``history_``.  Why no default
        tolerance: with standardized features and ``alpha=0.01`` the
        relative gap after 10 passes ranges from 2e-4 (iris) to 0.67
        (digits) over the ten shipped data sets (it shrinks by a factor
        ``~exp(-1 / (1 + ||X_i||^2 / (lambda n)))`` per pass, slow when
        ``||x||^2 ~ d``), while the retrieval mAP moves by less than 0.01
        between 5 and 30 passes; the former default ``tol=1e-3`` warned on
        nine of the ten sets (24 of 28 fits, 3 seeds) with nothing wrong.
        Set it to ask for an accurate solution of eq. (4) (e.g.
        ``tol=1e-3, max_iter=30`` on features scaled to [-1, 1], as the
        reproduction of Table 2).
    start : {"auto", "zero", "identity"}, default="auto"
        Where M starts and what the regularizer pulls it towards:
        ``(lambda/2) ||M - M_0||_F^2`` with ``M_0 = c I``.  "zero": Wu et
        al.'s problem (``c = 0``, eq. 4).  "identity": ``c = 1 / median_i
        |x_i^T v_i|`` over the fit's triplets, so that the identity's
        margin on the typical triplet is the hinge's 1 at any scale of the
        rows; M is then ``c I`` plus the dual's correction, and a new item
        keeps ``c x^T y`` outside the training rows' span (the cosine on
        l2-normalised rows) instead of 0.  Algorithm 1's step is unchanged
        (its ``1 - x_i^T M v_i`` includes ``M_0``); the dual's terms become
        ``alpha_i b_i - alpha_i^2 / 4`` with ``b_i = 1 - c x_i^T v_i``.
        "auto" (default): "identity" on answers (triplets or pairs given
        to ``fit``), "zero" with class labels (the paper's setting; those
        models are unchanged).  A stream (``partial_fit`` on a fresh model)
        and a partitioned fit start at 0 ("identity" is refused there).
    keep_duals : {"auto", True, False}, default="auto"
        Whether the fitted model keeps its dual variables (``alpha_``, one
        per triplet), which only ``partial_fit`` needs to continue it.
        "auto": an in-memory fit keeps them (they are there); a partitioned
        fit leaves them on the workers, so the driver holds ``O(d^2)``, not
        ``O(n_triplets)``.  True: a partitioned fit gathers them (``O(n)``
        at the driver, once, at the end).  False: never kept (smaller model
        files).  Without them ``alpha_`` and ``dual_ids_`` are empty,
        ``duals_kept_`` is False and ``partial_fit`` refuses to continue.
    {preprocessing}
    {n_components}
    {preprocessor}
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    W_ : ndarray (n_features_preprocessed_, n_features_preprocessed_)
        The output matrix chosen by ``output`` (the bilinear matrix of
        ``S(x, y) = x^T W y``; the paper's M).
    transform_fidelity_ : float
        Share of ``||W_||_F^2`` that ``transform`` keeps (the PSD part of
        the symmetric part of W, see :class:`~tripletml.core.base.BilinearMixin`;
        below 1 for a non-symmetric W).
    M_last_ : ndarray (d, d)
        The last iterate ``M^T = M(alpha)``.
    alpha_ : ndarray (n,)
        Dual variables (alpha_i of the paper, ``Theta_i = alpha_i X_i``), one
        per id of ``dual_ids_``.
    dual_ids_ : ndarray of int (n,)
        Sorted triplet ids of the dual variables.
    duals_kept_ : bool
        Whether ``alpha_`` holds the dual variables (see ``keep_duals``).
    avg_accum_ : ndarray (d, d)
        Only with ``output="average"``: ``T0 M^{T0} + sum_{s>T0} s dM_s``.
    random_iterate_ : ndarray (d, d)
        Only with ``output="random"``: the reservoir sample.
    n_scale_ : int
        The ``n`` used in ``(lambda n)^-1``.
    lambda_ : float
        The ``alpha`` the dual state was built with (lambda of the paper).
    start_scale_ : float
        ``c`` of the start ``M_0 = c I`` (0: Wu et al.'s start).
    alpha_grid_, alpha_scores_ : ndarray
        Only after a held-out choice of ``alpha="auto"``: the values tried
        and their held-out triplet accuracy.
    t_ : int
        Dual steps made (over all calls).
    n_iter_ : int
        Passes made by the last ``fit`` (1 after ``partial_fit``).
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        Per pass: ``step``, ``seconds``, ``loss`` (hinge, before each step),
        ``avg_loss`` and ``mistake_rate`` (cumulative, the paper's Fig. 1-2),
        ``avg_sq_loss`` (cumulative squared hinge), ``primal``, ``dual``,
        ``gap`` (absolute) and ``rel_gap`` (the ``tol`` criterion); the
        objectives are None for ``partial_fit`` records, whose stream is not
        kept.

    Notes
    -----
    ``partial_fit(X, triplets, triplet_ids=None)`` makes one closed-form dual
    step per given triplet in order.  ``triplet_ids`` name the dual variables
    (a triplet whose id was not seen before gets a fresh ``alpha = 0``); by
    default every given triplet is new.  After ``fit``, ids ``0..n-1`` are
    the rows of the fit triplets.  The scaling ``n`` is fixed when the model
    is created (``len(triplets)`` in ``fit``, ``n_triplets`` for a stream) so
    that ``M = (lambda n)^-1 sum_i alpha_i X_i`` holds exactly at every step.
    In ``partial_fit`` the averaging window starts where the model started
    (``T0 = 0`` for a stream).

    ``fit(collection)`` with a :class:`~tripletml.distributed.sharded.ShardedCollection`
    runs CoCoA+ (Ma, Smith, Jaggi et al., ICML 2015; "adding", ``sigma' = K``):
    each round every partition makes one pass of local SDCA steps on its own
    triplets and dual variables, and the driver adds the ``d x d`` updates.
    ``max_iter`` counts rounds (one pass over the data each), ``tol`` is the
    same relative duality gap, ``history_`` has one record per round, and
    ``output="average"`` averages the round iterates of the window; see
    :mod:`tripletml.algorithms.sdca.distributed` (gaps, certificate of the output in
    ``partitioned_``).
    """

    #: d x d arrays held while fitting (W_, M_last_, the averaged or random iterate, a temporary)
    _square_arrays = 4
    _history_keys = ("loss", "avg_loss", "mistake_rate", "avg_sq_loss", "primal", "dual", "gap",
                     "rel_gap")
    _fitted_arrays = {
        "W_": ArraySpec(("d", "d"), optional=True),     # required: _check_loaded
        "M_": ArraySpec(("d", "d"), optional=True),     # the name of files saved by 0.1
        "M_last_": ArraySpec(("d", "d")),
        "alpha_": ArraySpec(("=m",)),
        "dual_ids_": ArraySpec(("=m",), dtype="i", low=0, high="next_id_"),
        "avg_accum_": ArraySpec(("d", "d"), optional=True),
        "random_iterate_": ArraySpec(("d", "d"), optional=True),
        "alpha_grid_": ArraySpec((None,), optional=True),
        "alpha_scores_": ArraySpec((None,), optional=True),
    }
    _advice = "raise alpha or scale the features down"
    #: fit(ShardedCollection): CoCoA+ (tripletml.algorithms.sdca.distributed)
    _partitioned_strategy = distributed.STRATEGY
    _criterion_name = "relative duality gap"

    def __init__(self, alpha="auto", *, max_iter=10, n_triplets=10000, sampling="class",
                 output="average", average_start=0.5, tol=None, start="auto",
                 keep_duals="auto", preprocessing="auto", random_state=None, verbose=0,
                 n_components=None, preprocessor=None):
        self.alpha = alpha
        self.start = start
        self.keep_duals = keep_duals
        self.max_iter = max_iter
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.output = output
        self.average_start = average_start
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.n_components = n_components
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **OnlineTripletLearner._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "output": [StrOptions({"average", "random", "last"})],
        "average_start": [Interval(Real, 0, 1, closed="left")],
        "start": [StrOptions({"auto", "zero", "identity"})],
        "keep_duals": ["boolean", StrOptions({"auto"})],
        "n_components": N_COMPONENTS_PARAM,
    }

    def _drop_duals(self) -> None:
        """Forget the dual variables (``keep_duals``): the model's matrices
        stay, ``partial_fit`` refuses to continue."""
        s = self._solver
        s.alpha, s.dual_ids = np.zeros(0), np.zeros(0, dtype=np.int64)
        s.duals_dropped = True
        self._store()

    # ----------------------------------------------------------- state
    def _init_model(self, n_features, rng, X=None):
        """A fresh state: in ``fit`` ``n`` is the number of triplets and the
        window starts at ``average_start`` of the plan; for a stream ``n`` is
        ``n_triplets`` and the window starts at 0."""
        n, T0 = getattr(self, "_plan", (self.n_triplets, 0))
        if self.start == "identity" and not hasattr(self, "_start_c"):
            raise ValueError("SDCA: start='identity' takes the identity's scale from the "
                             "fit's triplets; a stream (partial_fit on a fresh model) and a "
                             "partitioned fit start at 0: use start='zero' or 'auto' there, or "
                             "fit first.")
        self._solver = SDCASolver(n_features, getattr(self, "_lam", self._alpha_value()), n,
                                  self.output, T0,
                                  start_scale=getattr(self, "_start_c", 0.0))
        if hasattr(self, "_plan"):
            self._solver.slots_for(np.arange(n))
        self._rng = rng
        self._store()

    def _store(self):
        """Write the solver's state to the fitted attributes."""
        s = self._solver
        self.M_last_, self.alpha_, self.dual_ids_ = s.M, s.alpha, s.dual_ids
        self.duals_kept_ = not getattr(s, "duals_dropped", False)
        self.next_id_, self.n_scale_, self.t_ = s.next_id, s.n_scale, s.t
        self.average_start_step_, self.output_, self.lambda_ = s.T0, s.output, s.lam
        self.start_scale_ = s.start_scale
        for name, arr in (("avg_accum_", s.avg), ("random_iterate_", s.rand)):
            if arr is not None:
                setattr(self, name, arr)
            elif hasattr(self, name):
                delattr(self, name)

    def _check_resumable(self):
        if getattr(self, "duals_kept_", True) is False:
            raise ValueError(
                "SDCA: this model's dual variables were not kept (keep_duals="
                f"{self.keep_duals!r}; a partitioned fit leaves them on the workers), so "
                "partial_fit cannot continue it. Fit with keep_duals=True to continue a "
                "model, or start a new one with fit.")
        if self.output != self.output_ or (self.alpha != "auto"
                                           and float(self.alpha) != self.lambda_):
            raise ValueError(
                f"SDCA: output/alpha were {self.output_!r}/{self.lambda_:g} when the model was "
                f"initialized and are now {self.output!r}/{self.alpha!r}; the dual state "
                "belongs to the former. Restore them, or start a new model with fit.")
        s = getattr(self, "_solver", None)
        if s is None or s.M is not self.M_last_ or s.alpha is not self.alpha_:
            # e.g. loaded from a file: a solver over the stored arrays (checked)
            self._solver = SDCASolver.from_state(
                M=self.M_last_, alpha=self.alpha_, dual_ids=self.dual_ids_,
                next_id=self.next_id_, lam=self.lambda_, n_scale=self.n_scale_, t=self.t_,
                T0=self.average_start_step_, output=self.output_,
                avg=getattr(self, "avg_accum_", None),
                rand=getattr(self, "random_iterate_", None),
                start_scale=getattr(self, "start_scale_", 0.0))
        if not hasattr(self, "_rng"):
            self._rng = as_generator(self.random_state, self)

    def _initial_loss(self, Xc, triplets):
        if not triplets.shape[0]:
            return None
        c = self._solver.start_scale
        if not c:
            return 1.0                              # M = 0: every hinge is 1
        return float(np.mean(np.maximum(1.0 - c * self._start_margins(Xc, triplets), 0.0)))

    def _start_margins(self, Xc, triplets) -> np.ndarray:
        """``x_i^T v_i`` of the fit's triplets (the start's margins, for the
        initial loss and every pass's objective), computed once per fit
        (kept only while :meth:`_fit_at` runs)."""
        kept = getattr(self, "_kept_margins", None)
        if kept is None or kept[0] is not Xc or kept[1] is not triplets:
            kept = (Xc, triplets, identity_margins(Xc, triplets))
            if hasattr(self, "_plan"):              # inside _fit_at: dropped at its end
                self._kept_margins = kept
        return kept[2]

    def _model_finite(self):
        return bool(np.isfinite(self._solver.M).all())

    # ----------------------------------------------------- pass hooks
    def _epoch_indices(self, rng, m):
        return rng.integers(0, m, size=m)       # uniform sampling with replacement

    def _begin_epoch(self, rng, m):
        self._u = rng.random(m) if self._solver.output == "random" else None
        self._pass_slots = None                  # fit: triplet i is dual variable i

    def _run_block(self, Xc, triplets, idx, pos):
        slots = idx if self._pass_slots is None else self._pass_slots[idx]
        u = None if self._u is None else self._u[pos:pos + idx.shape[0]]
        try:
            losses, sq, margins = self._solver.step(Xc, triplets[idx], slots, u)
        finally:
            self._store()
        return losses, margins, {"avg_sq_loss": sq}

    def _end_epoch(self, Xc, triplets, loss, prev_loss):
        start = self._start_margins(Xc, triplets) if self._solver.start_scale else None
        P, D, gap = self._solver.objective(Xc, triplets, start)
        rel = relative_gap(P, gap)
        return rel, {"primal": P, "dual": D, "gap": gap, "rel_gap": rel}

    def _finalize(self):
        self._store()
        self.W_ = self._solver.output_matrix()

    # -------------------------------------------------------- span route
    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`): ``M(Theta) =
        (lambda n)^-1 sum_i alpha_i x_i v_i^T`` lies in span x span, and the
        dual steps use only ``x_i^T M v_i`` and ``||x_i||^2 ||v_i||^2``
        (and the objective ``||M - c I||_F^2``), so the dual run on the
        span's coordinates is the same; M starts at ``c I`` (``c`` of
        :meth:`_start_scale`: 0 for Wu et al.'s start), which the complement
        of the span keeps, as does the reservoir's iterate, and the average's
        accumulator holds ``T0 c I`` there."""
        c = self._start_scale(X, supervision)
        spec = {"M_last_": c, "W_": c}
        if self.output == "average":        # B = T0 M^{T0} + sum_s s dM_s: T0 c outside
            T0 = int(np.floor(self.average_start * self.max_iter * len(supervision)))
            spec["avg_accum_"] = T0 * c
        elif self.output == "random":
            spec["random_iterate_"] = c
        return spec

    def _start_scale(self, X, triplets) -> float:
        """``c`` of the start ``M_0 = c I``: 0 for ``start="zero"`` (Wu et
        al.'s problem) and for ``"auto"`` with class labels; for the
        identity, ``1 / median |x_q^T (x_p - x_n)|`` over the fit's triplets
        (the identity's margin is then 1, the hinge's, on the typical
        answer it does not tie: the same start for rows at any scale;
        :func:`tripletml.linalg.sparse_rows.margin_scale`)."""
        if self.start == "zero" or (self.start == "auto"
                                    and not getattr(self, "_fit_from_answers", False)):
            return 0.0
        t = np.asarray(triplets)
        if t.ndim != 2 or t.shape[0] == 0:
            return 0.0
        qv, qq, vv = triplet_products(as_csr(X), t)
        return margin_scale(qv, np.sqrt(qq) * np.sqrt(vv))

    def _span_lift_extra(self, Q, spec):
        # the solver holds the r x r state: rebuilt from the lifted arrays
        # by _check_resumable at the next partial_fit
        self.__dict__.pop("_solver", None)

    # -------------------------------------------------------------- fit
    def _alpha_value(self) -> float:
        """A number ``alpha`` as given; "auto": the paper's 0.01 (class
        labels, streams, partitioned fits; answers choose on held-out items
        in ``fit``)."""
        return _DEFAULT_ALPHA if isinstance(self.alpha, str) else float(self.alpha)

    def _fit(self, X, triplets, rng):
        for name in ("alpha_grid_", "alpha_scores_"):
            self.__dict__.pop(name, None)
        auto = isinstance(self.alpha, str) and bool(getattr(self, "_fit_from_answers", False))
        lam = self._heldout_alpha(X, np.asarray(triplets), rng) if auto else None
        self._lam = self._alpha_value() if lam is None else lam
        try:
            self._fit_at(X, triplets, rng)
        finally:
            del self._lam
        if self.keep_duals is False:
            self._drop_duals()

    def _heldout_alpha(self, X, triplets: np.ndarray, rng) -> float | None:
        """``alpha="auto"`` on answers: the grid ``(s / m) 10^j``, ``j`` in
        ``_ALPHA_STEPS`` (``s`` the median ``||x_q||^2 ||x_p - x_n||^2`` of
        the ``m`` answers, so the grid means the same at any scale of the
        rows and number of answers),
        each fitted on the answers among four fifths of the named items and
        scored on the answers headed by the others; the largest ``alpha``
        (the most regularized: the start) within one standard error of the
        best (:func:`tripletml.core.step_cap.one_standard_error`).  None:
        too few answers on a side to choose."""
        split_rng = np.random.default_rng(as_generator(self.random_state, self).integers(2 ** 62))
        hold = split_by_items(triplets, HELD_FRACTION, split_rng, min_answers=MIN_ANSWERS)
        if hold.fit.size == 0:
            return None
        _, qq, vv = triplet_products(as_csr(X), triplets)
        s = float(np.median(qq * vv))
        s = s if np.isfinite(s) and s > 0 else 1.0
        unit = s / triplets.shape[0]
        grid = np.array([float(f"{unit * 10.0 ** j:.12g}") for j in _ALPHA_STEPS])
        scores = np.zeros(grid.size)
        for i, lam in enumerate(grid):
            self._lam = float(lam)
            self._fit_at(X, triplets[hold.fit], copy.deepcopy(rng))
            scores[i] = bilinear_accuracy(X, (self.W_, None), triplets[hold.val])
        pick = one_standard_error(scores, hold.val.size)    # the last: the largest alpha
        self.alpha_grid_, self.alpha_scores_ = grid, scores
        return float(grid[pick])

    def _fit_at(self, X, triplets, rng):
        n = triplets.shape[0]
        try:
            self._plan = (n, int(np.floor(self.average_start * self.max_iter * n)))
            self._start_c = self._start_scale(X, triplets)
            super()._fit(X, triplets, rng)
        finally:
            for name in ("_plan", "_start_c", "_kept_margins"):
                self.__dict__.pop(name, None)

    def partial_fit(self, X, y=None, *, triplets=None, triplet_ids=None):
        """One closed-form dual step per given triplet, in order.

        Parameters
        ----------
        X : array-like or CSR matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (m, 3), optional
            Class labels (one random class triplet per row, as
            :meth:`OnlineTripletLearner.partial_fit`), or index triplets.
        triplets : array-like of shape (m, 3), optional
        triplet_ids : array-like of shape (m,), optional
            Dual-variable identities (non-negative integers); unseen ids
            start at ``alpha = 0``.  An id must always name the same triplet
            (checked within a call; across calls X may change, so that is the
            caller's contract).  Default: every triplet is new.

        Returns
        -------
        self
        """
        return self._partial(X, self._partial_triplets(X, y, triplets),
                             triplet_ids=triplet_ids)

    def _partial_steps(self, Xc, triplets, hist, triplet_ids=None):
        m = triplets.shape[0]
        s = self._solver
        if triplet_ids is None:
            ids = np.arange(s.next_id, s.next_id + m, dtype=np.int64)
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
        self._pass_slots = s.slots_for(ids)
        self._store()
        self._u = self._rng.random(m) if s.output == "random" else None
        return super()._partial_steps(Xc, triplets, hist)

    def __setstate__(self, state):
        if "M_" in state:                      # pickled by tripletml 0.1
            state = {**state, "W_": state["M_"]}
            del state["M_"]
        super().__setstate__(state)

    def _check_loaded(self) -> None:
        if "M_" in vars(self) and "W_" not in vars(self):     # a model file saved by 0.1
            self.W_ = self.__dict__.pop("M_")
        if "W_" not in vars(self):
            raise ValueError("the fitted array W_ (M_ in files of 0.1) is missing")
        kept = vars(self).get("duals_kept_", True)     # files written before keep_duals: True
        if not isinstance(kept, (bool, np.bool_)):
            raise ValueError(f"duals_kept_={kept!r} must be true or false")
        super()._check_loaded()
        if not kept and self.alpha_.size:
            raise ValueError("duals_kept_ is false but alpha_ holds dual variables")

    # ---------------------------------------------------------- scoring
    def _apply(self, X):
        return np.asarray(X @ self.W_)

    def _bilinear_matrix(self) -> np.ndarray:
        """The output matrix M (a copy)."""
        return self.W_.copy()
