"""ITML: information-theoretic metric learning (Davis, Kulis, Jain, Sra &
Dhillon, ICML 2007) on the similar and dissimilar pairs of triplets.

The matrix closest to the prior (the identity in the preprocessed
coordinates) in the LogDet divergence that pushes similar pairs below a
distance ``u`` and dissimilar pairs above ``l``, with slack, by cyclic
Bregman projections (Algorithm 1).  The projections live in
:mod:`tripletml.algorithms.itml.kernels` (a Numba kernel, O(d^2) per constraint); the
estimator validates, samples the constraints and stores.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import COMMON, Interval, Options
from tripletml.core.validation import check_dense_memory, check_scalar_param
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.core.early_stopping import EarlyStoppingMixin
from tripletml.engine.early_stopping import MahalanobisScorer
from tripletml.linalg import psd_factor
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import document_sampling
from tripletml.pairs import PairConstraints
from tripletml.linalg.span import lift_psd_factor
from tripletml.algorithms.itml.kernels import BOUND_ROWS, BREAKDOWN, OVERFLOW, ITMLSolver, itml_bounds
from tripletml.engine import History, TrainingResult, apply_result, run
from tripletml.triplets import ClassTriplets, is_class_sampling
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform

__all__ = ["ITML"]

#: triplets per squared class count when sampling from labels (metric-learn's
#: 20 c^2 similar and 20 c^2 dissimilar pairs; the released code draws
#: 40 c (c - 1) random pairs in all)
TRIPLETS_PER_CLASS_PAIR = 20
#: the solver's arrays per constraint (pair, flags, dual variables, targets, ...)
_BYTES_PER_CONSTRAINT = 80


@document_transform
@document_sampling
@document_preprocessing
class ITML(EarlyStoppingMixin, MahalanobisMixin, TripletLearner):
    """Information-theoretic metric learning: the Mahalanobis matrix
    nearest the prior in LogDet divergence that keeps similar pairs close
    and dissimilar pairs apart.

    Each triplet ``(q, p+, p-)`` gives two constraints: ``d_M(q, p+) <= u``
    and ``d_M(q, p-) >= l`` (squared distances), each with slack weighted by
    ``gamma``.  Cyclic Bregman projections (Algorithm 1 of the paper; one
    O(d^2) rank-one update of M per constraint) solve

        min_M  D_ld(M, I) + gamma D_ld(diag(xi), diag(xi_0))
        s.t. the constraints with targets xi,

    and keep M positive definite.  Pairs of (nearly) identical rows are
    left out.  Fitted on labeled pairs (``fit(pairs_of_points, y)`` or
    ``fit(X, pairs=P, y=labels)``, the paper's setting), each similar pair
    is a constraint ``<= u`` and each dissimilar one ``>= l``, in the
    given order.  ``M`` starts at the
    identity of the preprocessed coordinates: with the default
    ``"standardize"`` that is the diagonal inverse-variance metric, and
    ``preprocessing="whiten"`` gives the inverse-covariance prior
    (metric-learn's ``prior="covariance"``).

    Parameters
    ----------
    gamma : float, default=1.0
        Slack trade-off: larger values enforce the constraints harder;
        ``np.inf`` allows no slack.
    bounds : (float, float) or None, default=None
        ``(u, l)`` with ``0 < u <= l``, the squared distances (in the
        preprocessed coordinates) below which similar pairs and above which
        dissimilar pairs should lie.  None: the 5th and 95th percentiles of
        the squared distances between the distinct rows the triplets use
        (fitted ``bounds_``).
    n_triplets : int or None, default=None
        Triplets sampled from the labels; None gives ``20 c^2`` for c
        classes (as metric-learn's ITML_Supervised: 20 c^2 similar and
        20 c^2 dissimilar pairs) with ``sampling="class"``, the policy's
        own count with another.  Ignored when ``triplets`` are passed to
        ``fit``.
    {sampling}
    max_iter : int, default=1000
        Sweeps over the constraints.
    tol : float or None, default=1e-3
        Stop when ``||lambda - lambda_old||_1 / (||lambda||_1 +
        ||lambda_old||_1)``, the relative change of the dual variables over a
        sweep, is at most ``tol``; else a ConvergenceWarning after
        ``max_iter`` sweeps.  None: run ``max_iter`` sweeps.  The released
        code divides by l2 norms, which made its threshold 1e-2 depend on
        the number of constraints (met on two-class sets, never within 1,000
        sweeps on digits, vowel or letter); the l1 / l1 ratio at 1e-3 stops
        where that test stopped on the small sets and converges on the large
        ones (:class:`tripletml.algorithms.itml.kernels.ITMLSolver`, Notes).
    {early_stopping}
    rank_tol : float, default=1e-6
        Eigenvalues of M below ``rank_tol`` times its largest do not count
        in ``rank_`` and ``components_``.
    {preprocessing}
    {n_components}
    {preprocessor}
    random_state : None, int or numpy Generator
        Samples the triplets and, with more than 1000 rows in the
        triplets, the rows of the default bounds.
    verbose : int, default=0
        A progress bar over the sweeps (on a terminal; 2 forces it).

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
        The learned positive definite matrix (d = ``n_features_preprocessed_``).
    components_ : ndarray of shape (``rank_``, d)
        ``diag(sqrt(s)) U^T``: ``transform`` maps into the learned space.
    rank_ : int
        Eigenvalues of ``M_`` kept in ``components_`` (``rank_tol``).
    transform_fidelity_ : float
        Share of ``||L^T L||_F^2`` (L = ``components_``) that ``transform``
        keeps: 1.0 unless ``n_components`` drops directions.
    bounds_ : ndarray of shape (2,)
        ``(u, l)`` used.
    dual_ : ndarray of shape (2 m,) or (n_pairs,)
        The dual variables, all >= 0: entry ``2 t`` belongs to the similar
        pair of triplet t, ``2 t + 1`` to its dissimilar pair (fitted on
        pairs: one per pair, in their order).
    n_iter_ : int
        Sweeps made.
    {early_stopping_attributes}
    history_ : dict of lists
        ``step`` (sweep), ``seconds`` and ``convergence`` (the value compared
        with ``tol``), one record per block of sweeps.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import ITML
    >>> X, y = load_iris(return_X_y=True)
    >>> model = ITML(random_state=0).fit(X, y)
    >>> model.M_.shape
    (4, 4)
    """

    #: the paper's setting: similar and dissimilar pairs
    _accepts_pairs = True
    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "bounds_": ArraySpec((2,)),
        "dual_": ArraySpec((None,)),
        **EarlyStoppingMixin._validation_array,
    }

    def __init__(self, gamma=1.0, *, bounds=None, n_triplets=None, sampling="class", max_iter=1000,
                 tol=1e-3, early_stopping="auto", validation_fraction=1 / 3, n_iter_no_change=5,
                 rank_tol=1e-6, preprocessing="auto", random_state=None, verbose=0,
                 n_components=None, preprocessor=None):
        self.gamma = gamma
        self.bounds = bounds
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.max_iter = max_iter
        self.tol = tol
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.rank_tol = rank_tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.n_components = n_components
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **COMMON,
        "gamma": [Interval(Real, 0, None, closed="neither"), Options(Real, {np.inf})],
        "bounds": ["no_validation"],                  # a pair: _check_bounds
        "n_triplets": [Interval(Integral, 1, None, closed="left"), None],
        "rank_tol": [Interval(Real, 0, 1, closed="both")],
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],   # resolved by the base class
        **EarlyStoppingMixin._early_stopping_constraints,
    }

    def _check_params(self):
        self._check_bounds()

    def _check_bounds(self):
        b = self.bounds
        if b is None:
            return None
        if not isinstance(b, (tuple, list, np.ndarray)) or np.ndim(b) != 1:
            raise TypeError(f"ITML: parameter bounds={b!r} must be None or a pair (u, l) of "
                            "squared distances.")
        if len(b) != 2:
            raise ValueError(f"ITML: parameter bounds={b!r} must be a pair (u, l); it has "
                             f"{len(b)} values.")
        u = check_scalar_param(b[0], "bounds[0] (u)", self, kind="real", low=0,
                               low_inclusive=False)
        l = check_scalar_param(b[1], "bounds[1] (l)", self, kind="real", low=0,
                               low_inclusive=False)
        if not u <= l:
            raise ValueError(f"ITML: parameter bounds={tuple(b)!r}: the similar pairs' bound "
                             f"u={u:g} must not exceed the dissimilar pairs' bound l={l:g}.")
        return u, l

    def _sampler(self):
        """``n_triplets`` triplets of the ``sampling`` policy; None with
        ``sampling="class"``: ``20 c^2`` random class triplets for c classes
        (metric-learn's ITML_Supervised); None with another policy: that
        policy's own default count."""
        if self.n_triplets is None and is_class_sampling(self.sampling):
            return ClassTriplets(per_class_pair=TRIPLETS_PER_CLASS_PAIR)
        return super()._sampler()

    def _check_loaded(self) -> None:
        """A loaded ``M_`` is positive definite (ITML keeps it so), with
        ``components_`` its factor; ``bounds_`` is ``0 < u <= l`` and the
        dual variables are non-negative."""
        super()._check_loaded()
        self._check_loaded_metric(self.M_, definite=True)
        u, l = self.bounds_
        if not 0.0 < u <= l:
            raise ValueError(f"bounds_={tuple(self.bounds_)!r} must satisfy 0 < u <= l")
        if np.any(self.dual_ < 0):
            raise ValueError("dual_ has negative entries")

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`): M starts at the
        identity and each Bregman projection ``M += beta (M v)(M v)^T``
        (``v`` a difference of rows) with ``beta`` from ``v^T M v`` lies in
        span x span, so the projections on the span's coordinates are the
        same (the kernel form of Davis et al., Section 4); the default
        bounds are percentiles of distances, the same on the coordinates,
        unless more than ``BOUND_ROWS`` distinct rows are subsampled (the
        sample then depends on the rows' sorted order): plain route there."""
        if self._check_bounds() is None:
            used = supervision.pairs if isinstance(supervision, PairConstraints) \
                else supervision
            if len(np.unique(used)) > BOUND_ROWS:
                return None
        return {"M_": 1.0}

    def _span_lift_extra(self, Q, spec):
        # components_ of the lifted M from the r x r eigendecomposition
        self.components_, self.rank_ = lift_psd_factor(self.M_, Q, 1.0, self.rank_tol)

    def _fit(self, X, triplets, rng):
        d = X.shape[1]
        check_dense_memory(3 * d * d * 8, self,
                           f"a {d} x {d} matrix (reduce the dimension first, e.g. with "
                           "sklearn's TruncatedSVD, or use a low-rank learner: LORETA, "
                           "LowRankDML)")
        is_pairs = isinstance(triplets, PairConstraints)
        n_cons = triplets.n_pairs if is_pairs else 2 * len(triplets)
        used = triplets.pairs if is_pairs else triplets
        n_used = min(X.shape[0], used.size)
        check_dense_memory(n_cons * _BYTES_PER_CONSTRAINT + 8 * n_used * d, self,
                           f"{n_cons} constraints and the dense rows they use "
                           "(fewer triplets: n_triplets)")
        bounds = self._check_bounds()
        if bounds is None:
            rows = np.unique(used)
            Xr = X[rows]
            Xr = Xr.toarray() if hasattr(Xr, "toarray") else np.asarray(Xr)
            with np.errstate(over="ignore", invalid="ignore"):
                bounds = itml_bounds(Xr, np.arange(len(rows)), rng)
            if not np.isfinite(bounds).all():
                raise FloatingPointError(OVERFLOW)
            if not bounds[0] > 0:
                raise ValueError(f"ITML: the rows the {'pairs' if is_pairs else 'triplets'} "
                                 "use are all identical (the default bounds are 0); nothing "
                                 "to learn.")
        budget = None
        if is_pairs:
            self.early_stopping_ = "off (pairs: the held-out score is a triplet accuracy)" \
                if self._early_stopping_on() else "off"
        else:
            budget = self._probe(X, np.asarray(triplets), bounds, rng)
        solver = self._solver(X, triplets, bounds)      # after the probe's: one d x d at a time
        if budget == 0:                       # the prior itself scored best
            solver.dual[:] = 0.0
            result = TrainingResult(n_iter=0, stop_reason="validation", criterion=None,
                                    history={"step": [0], "seconds": [0.0],
                                             "convergence": [None]}, seconds=0.0)
        else:
            result = self._run(solver, budget)
        M = 0.5 * (solver.A + solver.A.T)
        try:
            np.linalg.cholesky(M)                   # positive definite (d^3 / 3, not an eigh)
        except np.linalg.LinAlgError:
            raise FloatingPointError(BREAKDOWN) from None
        self.M_ = M
        self.components_, self.rank_ = psd_factor(M, self.rank_tol)
        self.bounds_ = np.asarray(bounds, dtype=np.float64)
        self.dual_ = solver.dual.copy()
        apply_result(self, result, tol=self.tol, early_stopped=budget is not None,
                     what="relative change of the dual variables",
                     advice="increase max_iter or tol")

    def _solver(self, X, triplets, bounds) -> ITMLSolver:
        solver = ITMLSolver(X, triplets, bounds, float(self.gamma))
        if not solver.active.any():
            raise ValueError("ITML: every constraint pairs identical points (each triplet's "
                             "query equals its positive and its negative as points, or every "
                             "pair's two points are equal); nothing to learn.")
        solver.tol = self.tol
        return solver

    def _run(self, solver: ITMLSolver, budget: int | None = None, monitor=None):
        return run(solver, name="ITML", max_iter=self.max_iter if budget is None else budget,
                   tol=self.tol, history=History(keys=("convergence",)), verbose=self.verbose,
                   unit="sweep", monitor=monitor)

    def _probe(self, X, t: np.ndarray, bounds, rng) -> int | None:
        """Early stopping (:class:`~tripletml.core.early_stopping.EarlyStoppingMixin`):
        on each fold of the items, the sweeps on the answers among the other
        items, one sweep per step, each ``M`` scored on the answers among
        the fold's items (the same bounds); returns the sweeps chosen (0:
        the prior ``M = I``), or None for the plain fit."""
        def probe(fit: np.ndarray, watch) -> int | None:
            score = MahalanobisScorer(X, watch.triplets)
            try:
                solver = self._solver(X, fit, bounds)
            except ValueError:                # the fold's answers pair identical points only
                return None
            solver.block = 1
            watch.record(0, score(solver.A))
            return self._run(solver, monitor=lambda it: watch.record(it, score(solver.A))).n_iter

        return self._choose_count(t, probe)
