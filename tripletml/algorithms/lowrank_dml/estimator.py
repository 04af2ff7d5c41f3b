"""Low-rank Mahalanobis DML by SGD with incremental SVD (Zhang & Zhang,
"Efficient stochastic optimization for low-rank distance metric learning",
AAAI 2017), with the five baselines of its Figure 2.

Minimizes eq. (2) ``f(W) + alpha tr(W)`` (alpha is the paper's lambda) over
PSD W, optionally inside a Frobenius or spectral ball of radius tau (eq. 5 /
4).  ``solver="incsvd"`` (Algorithm 1) keeps ``W = U diag(s) U^T`` and never
forms a d x d array: each iteration samples a minibatch, writes its gradient
as ``A diag(signs) A^T`` (the hinge gradient ``a a^T - b b^T`` has a negative
term), updates the eigen-decomposition of ``W - eta g`` by Brand's method
(:func:`tripletml.linalg.eig_update.lowrank_eig_update`) and applies the
shifted projection of Theorem 1 / 2 / 3
(:func:`tripletml.linalg.eig_update.project_spectrum`) to the small spectrum:
update (3) / (4) / (5) in O(d (r + c)^2).

On people's answers (``start="auto"``) the metric is a correction of the
identity: ``W = c (I + W')`` with ``c`` the scale at which the identity's
margin on the typical answer is the hinge's 1 and ``W'`` Algorithm 1's
low-rank PSD iterate on the rows scaled by ``sqrt(c)`` (the same problem,
the same steps, the loss shifted by the identity's distances:
:class:`tripletml.linalg.triplet_dml.TripletDMLProblem`'s
``identity_weight``).  A new item then keeps the features' own geometry
outside the learned directions.

The estimator validates, builds the problem and solver of
:mod:`tripletml.algorithms.lowrank_dml.kernels`, loops, records ``history_`` and stores
the result.
"""
from __future__ import annotations

import dataclasses
from numbers import Integral, Real

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import document_sampling
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.linalg.sparse_rows import margin_scale
from tripletml.core.validation import check_dense_memory, check_triplets
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.algorithms.lowrank_dml.kernels import (AUTO_LEARNING_RATE, DEFAULT_BATCH, LEARNING_RATES, SOLVERS,
                                   Iterations, Minibatches, TripletDMLProblem, step_size)
from tripletml.engine import DivergenceWatch, History, apply_result
from tripletml.engine.resume import run_resumable
from tripletml.core.docstrings import document_transform
from tripletml.algorithms.lowrank_dml import distributed

__all__ = ["LowRankDML", "metric_factor", "AUTO_IDENTITY_MAX_FEATURES"]

CONSTRAINTS = (None, "frobenius", "spectral")
#: ``tol="auto"``: stop when the best objective of the last ``PATIENCE``
#: passes over the triplets (one evaluation per pass with
#: ``eval_every="auto"``) is not below the best before them by more than
#: ``AUTO_TOL`` of its size (scikit-learn's SGD rule:
#: ``tol=1e-3``; its ``n_iter_no_change=5`` counts passes of a whole data
#: set, here 5 passes are the whole default budget)
AUTO_TOL = 1e-3
PATIENCE = 2
_ADVICE = "lower eta0 or scale the features down"
#: ``start="auto"`` starts at the identity on answers only when the dense
#: ``d x d`` factor ``components_`` of ``c (I + W')`` takes at most 512 MiB
#: (above, the paper's ``W = 0`` start and its O(d r) memory)
AUTO_IDENTITY_MAX_FEATURES = 8192


@document_sampling
@document_transform
@document_preprocessing
class LowRankDML(MahalanobisMixin, TripletLearner):
    """Low-rank Mahalanobis metric ``d_W(x, y) = (x - y)^T W (x - y)``.

    Parameters
    ----------
    alpha : float, default=0.1
        Weight of the trace (nuclear-norm) regularizer ``alpha tr(W)``
        (lambda in the paper, eq. 2).
    solver : {"incsvd", "sgd", "sgd_batch", "gd", "fw", "sgd_one"}, default="incsvd"
        ``incsvd``: Algorithm 1 (O(d r) memory).  Baselines (dense d x d W):
        ``sgd`` projected SGD (same minibatches and steps as incsvd for the
        same random_state, so the same iterates), ``sgd_batch`` minibatch
        projected SGD (batch 10, constant step), ``gd`` projected full
        gradient descent, ``fw`` Frank-Wolfe, ``sgd_one`` SGD with one
        projection (Mahdavi et al. 2012).
    loss : {"triplet", "lmnn"}, default="triplet"
        The paper's experiment (averaged triplet hinge) or its LMNN example
        (hinge times ``push_weight`` plus the pull term).
    eta0 : float, default=1.0
        The constant c of the step sizes ``eta_t = c / sqrt(t)``.
    batch_size : int or None, default=None
        Triplets per iteration (None: 100 for incsvd / sgd / sgd_one, 10 for
        sgd_batch, all of them for gd / fw).
    max_iter : int, default=500
        Iterations (the paper runs 500).
    tol : "auto", float or None, default="auto"
        A float: stop when the relative change of the objective F(W_t)
        between two successive evaluations (every ``eval_every``
        iterations), ``|F_new - F_old| / max(|F_old|, |F_new|)``, falls
        below tol (needs ``eval_every >= 1``).  None: the paper's fixed
        budget of ``max_iter`` iterations (SGD has no convergence test
        there; the objective of a stochastic iterate moves by 1e-4 to 1e-2
        between evaluations long after it has levelled off).  "auto"
        (default): the paper's budget, stopped early when the iterate no
        longer improves -- scikit-learn's rule for SGD (``SGDClassifier``'s
        ``tol`` and ``n_iter_no_change``), on the full objective F of eq.
        (2) evaluated once per pass over the triplets (``eval_every="auto"``):
        stop when the best F of the last ``PATIENCE = 2`` passes is not
        below the best before them by more than ``AUTO_TOL = 1e-3`` of its
        size.  The noise of a stochastic iterate (percents between passes on
        small sets) does not stop a run that still descends.  With "auto"
        (and with None) reaching ``max_iter`` or ``max_time`` is the paper's
        budget, no failure; with ``eval_every=0`` "auto" is the fixed budget.
    constraint : {None, "frobenius", "spectral"}, default="frobenius"
        Ball intersected with the PSD cone (the paper's experiment:
        ``||W||_F <= 1``).
    tau : float, default=1.0
        Radius of the ball.
    start : {"auto", "zero", "identity"}, default="auto"
        What the metric is a correction of.  "zero": the paper's problem,
        ``W = U diag(s) U^T`` from ``W = 0``.  "identity": ``W = c I + U
        diag(s) U^T``, with ``c = 1 / median |d_I(q, n) - d_I(q, p)|`` over
        the fit's triplets (squared Euclidean distances of the preprocessed
        rows: the identity's margin on the typical answer is then 1, the
        hinge's, at any scale of the rows) and ``U diag(s) U^T`` Algorithm
        1's iterate on the rows scaled by ``sqrt(c)`` (so ``alpha``,
        ``tau`` and ``eta0`` act on ``W / c - I`` in the paper's units):
        directions the answers never touch keep the features' geometry,
        which a new item needs.  With the default ball (``tau=1``,
        Frobenius) ``||W / c - I||_F <= 1``: W's eigenvalues lie in ``[c,
        2c]``, a correction of the identity that can stress directions but
        not remove any; ``constraint=None`` or a larger ``tau`` lets it move
        further (the paper's ball is in the paper's units, here the
        identity's).  Triplets the identity ties are left out of the median
        (binary or count features); "identity" refuses rows on which it
        ties every triplet.  ``transform`` then has d columns (the square
        root of W), not ``rank_``.  "auto" (default): "identity" when ``fit``
        gets answers (triplets or pairs) and at most
        ``AUTO_IDENTITY_MAX_FEATURES = 8192`` features (``components_`` is
        then a dense ``d x d`` factor), "zero" with class labels (the
        paper's experiments) and in a partitioned fit ("identity" is
        refused there: ``c`` is a median over all the triplets).
    n_triplets : int, default=10000
        Random class triplets sampled when ``fit`` gets labels.
    {sampling}
    learning_rate : {"auto", "invsqrt", "constant", "inverse"}, default="auto"
        ``eta_t = c / sqrt(t)``, ``c``, or ``c / t`` (the ``1 / (mu t)`` of
        the strongly convex case, Theorem 5); "auto" is the paper's choice
        per solver (invsqrt for incsvd and sgd, constant for gd, sgd_batch
        and sgd_one, ``c / (t + 2)`` for fw).
    push_weight : float, default=1.0
        The balance c of the LMNN loss (ignored for "triplet").
    max_time : float or None, default=None
        Stop after this many seconds of training (evaluation excluded).
    eval_every : "auto" or int, default="auto"
        Iterations between records of the objective in ``history_`` (0: only
        at the end; the rank is recorded every iteration).  "auto": one pass
        over the triplets, ``ceil(n_triplets / batch)`` iterations (100 at
        the defaults): an evaluation of F (all triplets) costs about as much
        as ten iterations at the defaults, so evaluating every 10 iterations
        (the default before tripletml 0.2) took about a quarter of the fit,
        once a pass a few per cent.
    {preprocessing}
    {preprocessor}
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    U_ : ndarray of shape (d, ``rank_``)
        Orthonormal eigenvectors of the learned part ``U diag(s) U^T`` of W
        (decreasing eigenvalues).
    s_ : ndarray of shape (``rank_``,)
        Its positive eigenvalues.
    start_scale_ : float
        ``c`` of ``W = c I + U_ diag(s_) U_^T`` (0: the paper's ``W = U
        diag(s) U^T``).
    components_ : ndarray of shape (``rank_``, d), or (d, d) when ``start_scale_ > 0``
        A factor L with ``L^T L = W``: ``diag(sqrt(s_)) U_^T``, or with the
        identity part the symmetric square root ``sqrt(c) I + U_ diag(sqrt(c
        + s_) - sqrt(c)) U_^T``; ``transform(X) = X L^T``.
    rank_ : int
        Rank of the learned part ``U_ diag(s_) U_^T`` (of W itself when
        ``start_scale_`` is 0).
    n_iter_ : int
        Iterations made.
    stop_reason_ : {"tol", "max_iter", "max_time"}
    n_reorthonormalizations_ : int
        Times U was re-orthonormalized because it drifted (``incsvd``).
    n_gram_only_updates_ : int
        ``incsvd`` updates whose new directions all came from the Gram
        matrix (the fast path of
        :func:`tripletml.linalg.eig_update.lowrank_eig_update`); the others
        needed a QR for directions close to span(U).
    history_ : dict of lists
        ``step`` (iteration), ``seconds``, ``train_seconds`` (without the
        evaluations), ``rank`` (None where a baseline does not know it),
        ``eta``, ``batch_loss`` (the minibatch loss ``f_B(W_t)`` before the
        step) and ``objective`` (every ``eval_every`` iterations).

    Notes
    -----
    Divergence: the objective (when evaluated), the minibatch loss of
    iteration 1 (at W = 0) and the mean minibatch loss of every later block
    of 10 iterations are watched
    (:class:`tripletml.engine.stopping.LossWatch`); a non-finite value or a growth
    by 1000 times over the smallest one stops training with a
    FloatingPointError advising a smaller eta0.
    """

    _fitted_arrays = {
        "U_": ArraySpec(("d", "rank_")),
        "s_": ArraySpec(("rank_",)),
        "components_": ArraySpec((None, "d")),     # rank_ rows, or d with start_scale_
    }
    #: ``fit(ShardedCollection)``: minibatch gradients summed over the
    #: partitions, the solver step on the driver
    #: (:mod:`tripletml.distributed.gradient_sums`)
    _partitioned_strategy = distributed.STRATEGY

    def __init__(self, alpha=0.1, *, solver="incsvd", loss="triplet", eta0=1.0, batch_size=None,
                 max_iter=500, tol="auto", constraint="frobenius", tau=1.0, start="auto",
                 n_triplets=10000,
                 sampling="class", learning_rate="auto", push_weight=1.0, max_time=None,
                 eval_every="auto", preprocessing="auto", random_state=None, verbose=0,
                 preprocessor=None):
        self.alpha = alpha
        self.solver = solver
        self.loss = loss
        self.eta0 = eta0
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.constraint = constraint
        self.tau = tau
        self.start = start
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.learning_rate = learning_rate
        self.push_weight = push_weight
        self.max_time = max_time
        self.eval_every = eval_every
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **COMMON,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "solver": [StrOptions(set(SOLVERS))],
        "loss": [StrOptions({"triplet", "lmnn"})],
        "eta0": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "constraint": [StrOptions(set(CONSTRAINTS[1:])), None],
        "tau": [Interval(Real, 0, None, closed="neither")],
        "start": [StrOptions({"auto", "zero", "identity"})],
        "learning_rate": [StrOptions(set(LEARNING_RATES))],
        "push_weight": [Interval(Real, 0, None, closed="left")],
        "max_time": [Interval(Real, 0, None, closed="neither"), None],
        "eval_every": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"}), None],
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    def _check_params(self):
        if self.solver == "fw" and self.constraint is None:
            raise ValueError("LowRankDML: solver='fw' needs a bounded feasible set; set "
                             "constraint='frobenius' or 'spectral'.")
        if self.tol not in (None, "auto") and self.eval_every == 0:
            raise ValueError("LowRankDML: tol needs the objective during training; set "
                             "eval_every >= 1 (iterations between evaluations) or tol=None.")

    def _eta(self, t: int) -> float:
        kind = AUTO_LEARNING_RATE[self.solver] if self.learning_rate == "auto" \
            else self.learning_rate
        return step_size(kind, self.eta0, t)

    def _check_loaded(self) -> None:
        """A loaded ``W = U diag(s) U^T``: ``s_ >= 0``, ``U_`` with orthonormal
        columns, ``components_ = (U_ sqrt(s_))^T``."""
        super()._check_loaded()
        if np.any(self.s_ < 0):
            raise ValueError("s_ has negative entries (W must be PSD)")
        r = self.U_.shape[1]
        if np.linalg.norm(self.U_.T @ self.U_ - np.eye(r)) > 1e-6:
            raise ValueError("U_ does not have orthonormal columns")
        c = getattr(self, "start_scale_", 0.0)
        if not (isinstance(c, Real) and np.isfinite(c) and c >= 0):
            raise ValueError(f"start_scale_ must be a finite number >= 0, got {c!r}")
        L = metric_factor(self.U_, self.s_, float(c))
        if L.shape != self.components_.shape or \
                np.linalg.norm(L - self.components_) > 1e-10 * np.linalg.norm(L) + 1e-300:
            raise ValueError("components_ is not the factor of start_scale_ I + U_ diag(s_) U_^T")

    def _check_solver_memory(self, d: int) -> None:
        """A clear MemoryError before a dense solver allocates its d x d arrays."""
        if SOLVERS[self.solver].dense:
            # W, the gradient / W - eta g, and eigh's eigenvectors (+ slack)
            check_dense_memory(4 * 8 * d * d, self,
                               f"solver={self.solver!r} keeps dense {d} x {d} matrices; "
                               "solver='incsvd' needs O(d r) memory")

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`): W starts at 0 and
        each step adds ``-eta g = A diag(signs) A^T`` with ``A``'s columns
        differences of rows (or their images under W), then a spectral
        projection (shift ``eta alpha``, the ball of radius ``tau``), so W
        stays ``Q W_r Q^T`` and every quantity the solvers use (losses,
        ``tr W``, eigenvalues, angles to ``span(U)``) is the same on the
        span's coordinates: ``U_ = Q U_r``, ``components_ = L_r Q^T``.
        With the identity part ``c I`` (the same ``c``: distances between
        the rows are those of their coordinates) the symmetric square root
        ``components_`` is ``sqrt(c)`` on the span's complement."""
        c = self._start_scale(X, triplets=supervision)
        self._span_c = c
        return {"U_": "rows", "components_": float(np.sqrt(c)) if c else "cols"}

    def _start_scale(self, X, triplets) -> float:
        """``c`` of ``W = c I + U diag(s) U^T``: 0 for ``start="zero"``, and
        for "auto" with class labels or more than
        :data:`AUTO_IDENTITY_MAX_FEATURES` features; otherwise ``1 / median
        |d_I(q, n) - d_I(q, p)|`` over the fit's triplets the identity does
        not tie (:func:`tripletml.linalg.sparse_rows.margin_scale`; "auto"
        falls back to 0 when it ties them all, "identity" refuses)."""
        auto_zero = self.start == "auto" and (
            not getattr(self, "_fit_from_answers", False)
            or X.shape[1] > AUTO_IDENTITY_MAX_FEATURES)
        t = np.asarray(triplets)
        if self.start == "zero" or auto_zero or t.ndim != 2 or t.shape[0] == 0:
            return 0.0
        da, db = TripletDMLProblem.identity_distances(X, t)
        c = margin_scale(db - da, da + db)
        if not c and self.start == "identity":
            raise ValueError("LowRankDML: start='identity' needs a scale from the identity's "
                             "margins, but it ties every triplet (equal distances); use "
                             "start='zero'.")
        return c

    def _fit(self, X, triplets, rng):
        c = self.__dict__.pop("_span_c", None)
        c = self._start_scale(X, triplets) if c is None else c
        self._check_solver_memory(X.shape[1])
        if c:           # components_ is a dense d x d factor
            check_dense_memory(3 * 8 * X.shape[1] ** 2, self,
                               f"start='identity' keeps a dense {X.shape[1]} x "
                               f"{X.shape[1]} factor; use start='zero' (O(d r) memory)")
        Xs = X * np.sqrt(c) if c else X
        prob = TripletDMLProblem(Xs, triplets, self.loss, self.alpha, self.push_weight,
                                 identity_weight=1.0 if c else 0.0)
        self._fit_problem(prob, rng, start_scale=c)

    def _fit_problem(self, prob, rng, start_scale: float = 0.0, checkpoints=None) -> None:
        """Train on ``prob`` (a :class:`TripletDMLProblem`, or the
        partition-summing stand-in of
        :mod:`tripletml.distributed.gradient_sums`: the same minibatches, steps
        and solver code) and store the result; ``checkpoints``
        (:class:`tripletml.engine.resume.Checkpoints`, a partitioned fit's)
        saves and restores the run's state."""
        solver_cls = SOLVERS[self.solver]
        state = solver_cls(prob, self.constraint, self.tau)
        size = DEFAULT_BATCH[self.solver] if self.batch_size is None else self.batch_size
        if self.solver in ("gd", "fw") and self.batch_size is None:
            size = None
        batches = Minibatches(prob.m, size, rng)
        watch = DivergenceWatch(self, advice=_ADVICE)
        eval_every = self.eval_every
        auto = isinstance(self.tol, str)            # "auto": no improvement for PATIENCE passes
        tol = (AUTO_TOL if eval_every else None) if auto else self.tol
        per_pass = max(1, -(-int(prob.m) // int(size or prob.m)))
        if isinstance(eval_every, str):             # "auto": once per pass over the triplets
            eval_every = per_pass
        its = Iterations(state, batches, self._eta, eval_every=eval_every, watch=watch,
                         patience=PATIENCE * per_pass if auto else None)
        parts = {"solver": state, "batches": batches, "iterations": its}
        if hasattr(prob, "checkpoint_fields"):           # the partitions' round counts
            parts["problem"] = prob
        if checkpoints is not None:      # a round: a pass over the triplets
            checkpoints = dataclasses.replace(checkpoints, unit=per_pass)
        result = run_resumable(its, parts, checkpoints=checkpoints, rng=rng,
                               name="LowRankDML", max_iter=self.max_iter, tol=tol,
                               max_time=self.max_time,
                               history=History(keys=("train_seconds", "rank", "eta",
                                                     "objective", "batch_loss")),
                               watch=watch, verbose=self.verbose)
        hist = result.history
        U, s = state.finish()
        if self.solver == "sgd_one":   # the one projection: record the feasible W
            hist["objective"][-1] = prob.objective_dense(state.W)
            hist["rank"][-1] = int(s.size)
        if not (np.isfinite(U).all() and np.isfinite(s).all()):
            raise FloatingPointError("LowRankDML: training diverged (non-finite W); lower eta0.")
        c = float(start_scale)
        self.U_ = np.ascontiguousarray(U)
        self.s_ = np.asarray(s, dtype=float) * (c if c else 1.0)    # W = c (I + W')
        self.start_scale_ = c
        self.components_ = metric_factor(self.U_, self.s_, c)
        self.rank_ = int(self.s_.size)
        self.n_reorthonormalizations_ = int(getattr(state, "n_reorth", 0))
        self.n_gram_only_updates_ = int(getattr(state, "n_gram_only", 0))
        apply_result(self, result, tol=None if auto else tol,   # "auto": the budget is no failure
                     what="relative change of the objective",
                     advice="increase max_iter (or max_time) or tol")

    def objective(self, X, triplets) -> float:
        """F(W) = f(W) + alpha tr(W) of the fitted W on ``(X, triplets)``
        (with ``start_scale_`` c > 0: ``f(c (I + W')) + alpha tr(W')`` on
        the rows scaled by ``sqrt(c)``, the problem the fit solved)."""
        check_is_fitted(self, "n_features_in_")
        X = self._check_fitted_X(X)
        t = check_triplets(triplets, X.shape[0], self)
        c = float(getattr(self, "start_scale_", 0.0))
        if not c:
            prob = TripletDMLProblem(X, t, self.loss, self.alpha, self.push_weight)
            return prob.objective_factored(self.components_.T)
        prob = TripletDMLProblem(X * np.sqrt(c), t, self.loss, self.alpha, self.push_weight,
                                 identity_weight=1.0)
        return prob.objective_factored(self.U_ * np.sqrt(self.s_ / c))


def metric_factor(U: np.ndarray, s: np.ndarray, c: float = 0.0) -> np.ndarray:
    """A factor L (``L^T L = c I + U diag(s) U^T``, U with orthonormal
    columns, s >= 0): ``diag(sqrt(s)) U^T`` (rank x d) when ``c = 0``, else
    the symmetric square root ``sqrt(c) I + U diag(sqrt(c + s) - sqrt(c))
    U^T`` (d x d)."""
    U, s = np.asarray(U, dtype=np.float64), np.asarray(s, dtype=np.float64)
    if U.ndim != 2 or s.shape != (U.shape[1],) or not (np.isfinite(U).all()
                                                      and np.isfinite(s).all()):
        raise ValueError(f"metric_factor: U must be a finite d x r array and s r finite "
                         f"values, got shapes {U.shape} and {s.shape}.")
    if (s < 0).any() or not (np.isfinite(c) and c >= 0):
        raise ValueError("metric_factor: s and c must be >= 0 (W must be PSD).")
    if not c:
        return np.ascontiguousarray((U * np.sqrt(s)).T)
    r = np.sqrt(c)
    L = (U * (np.sqrt(c + s) - r)) @ U.T
    L[np.diag_indices_from(L)] += r
    return np.ascontiguousarray(0.5 * (L + L.T))
