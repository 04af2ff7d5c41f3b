"""Low-rank Mahalanobis DML by SGD with incremental SVD (Zhang & Zhang,
"Efficient stochastic optimization for low-rank distance metric learning",
AAAI 2017), with the five baselines of its Figure 2.

Minimises eq. (2) ``f(W) + lam tr(W)`` over PSD W, optionally inside a
Frobenius or spectral ball of radius tau (eq. 5 / 4).  ``solver="incsvd"``
(Algorithm 1) keeps ``W = U diag(s) U^T`` and never forms a d x d array: each
iteration samples a minibatch, writes its gradient as ``A diag(signs) A^T``
(the hinge gradient ``a a^T - b b^T`` has a negative term), updates the
eigen-decomposition of ``W - eta g`` by Brand's method
(:func:`tripletml.linalg.lowrank_eig_update`) and applies the shifted
projection of Theorem 1 / 2 / 3 (:func:`tripletml.linalg.project_spectrum`)
to the small spectrum: update (3) / (4) / (5) in O(d (r + c)^2).
"""
from __future__ import annotations

import time

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_choice_param, check_dense_memory, check_scalar_param
from ..base import History, MahalanobisMixin, TripletLearner
from ._dml_problem import TripletDMLProblem
from ._dml_solvers import AUTO_SCHEDULE, DEFAULT_BATCH, SOLVERS

__all__ = ["LowRankDML"]

CONSTRAINTS = (None, "frobenius", "spectral")
SCHEDULES = ("auto", "invsqrt", "constant", "inverse")


class _Minibatches:
    """Minibatches walking through random permutations of the m triplets (a
    batch may straddle two permutations); ``size=None`` or ``size >= m``
    gives every triplet in every batch."""

    def __init__(self, m: int, size, rng: np.random.Generator):
        self.m, self.rng = m, rng
        self.size = m if size is None else min(int(size), m)
        self.perm = np.arange(m)
        self.pos = m

    def next(self) -> np.ndarray:
        if self.size == self.m:
            return np.arange(self.m)
        parts, need = [], self.size
        while need:
            if self.pos == self.m:
                self.perm = self.rng.permutation(self.m)
                self.pos = 0
            take = min(need, self.m - self.pos)
            parts.append(self.perm[self.pos:self.pos + take])
            self.pos += take
            need -= take
        return np.concatenate(parts)


class LowRankDML(MahalanobisMixin, TripletLearner):
    """Low-rank Mahalanobis metric ``d_W(x, y) = (x - y)^T W (x - y)``.

    Parameters
    ----------
    lam : float, default=0.1
        Weight of the trace (nuclear-norm) regulariser ``lam tr(W)``.
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
    constraint : {None, "frobenius", "spectral"}, default="frobenius"
        Ball intersected with the PSD cone (the paper's experiment:
        ``||W||_F <= 1``).
    tau : float, default=1.0
        Radius of the ball.
    n_triplets : int, default=10000
        Random class triplets sampled when ``fit`` gets labels.
    schedule : {"auto", "invsqrt", "constant", "inverse"}, default="auto"
        ``eta_t = c / sqrt(t)``, ``c``, or ``c / t`` (the ``1 / (mu t)`` of
        the strongly convex case, Theorem 5); "auto" is the paper's choice
        per solver (invsqrt for incsvd and sgd, constant for gd, sgd_batch
        and sgd_one, ``c / (t + 2)`` for fw).
    push_weight : float, default=1.0
        The balance c of the LMNN loss (ignored for "triplet").
    max_time : float or None, default=None
        Stop after this many seconds of training (evaluation excluded).
    eval_every : int, default=10
        Iterations between records of the objective in ``history_`` (0: only
        at the end; the rank is recorded every iteration).
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    U_ : ndarray (d, r)
        Orthonormal eigenvectors of W (decreasing eigenvalues).
    s_ : ndarray (r,)
        Positive eigenvalues.
    components_ : ndarray (r, d)
        ``diag(sqrt(s_)) U_^T``: ``transform(X) = X U diag(sqrt(s))``.
    rank_ : int
    n_iter_ : int
    n_reorthonormalizations_ : int
        Times U was re-orthonormalised because it drifted (``incsvd``).
    n_gram_only_updates_ : int
        ``incsvd`` updates whose new directions all came from the Gram
        matrix (the fast path of :func:`tripletml.linalg.lowrank_eig_update`);
        the others needed a QR for directions close to span(U).
    history_ : dict of lists
        ``step`` (iteration), ``seconds``, ``train_seconds`` (without the
        evaluations), ``rank`` (None where a baseline does not know it),
        ``eta`` and ``objective`` (every ``eval_every`` iterations).
    """

    def __init__(self, lam=0.1, solver="incsvd", loss="triplet", eta0=1.0, batch_size=None,
                 max_iter=500, constraint="frobenius", tau=1.0, n_triplets=10000,
                 schedule="auto", push_weight=1.0, max_time=None, eval_every=10,
                 random_state=None, verbose=0):
        self.lam = lam
        self.solver = solver
        self.loss = loss
        self.eta0 = eta0
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.constraint = constraint
        self.tau = tau
        self.n_triplets = n_triplets
        self.schedule = schedule
        self.push_weight = push_weight
        self.max_time = max_time
        self.eval_every = eval_every
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_scalar_param(self.lam, "lam", self, kind="real", low=0)
        check_choice_param(self.solver, "solver", self, tuple(SOLVERS))
        check_choice_param(self.loss, "loss", self, ("triplet", "lmnn"))
        check_scalar_param(self.eta0, "eta0", self, kind="real", low=0, low_inclusive=False)
        check_scalar_param(self.batch_size, "batch_size", self, kind="int", low=1,
                           allow_none=True)
        check_scalar_param(self.max_iter, "max_iter", self, kind="int", low=1)
        if self.constraint is not None:
            check_choice_param(self.constraint, "constraint", self, CONSTRAINTS[1:])
        check_scalar_param(self.tau, "tau", self, kind="real", low=0, low_inclusive=False)
        check_scalar_param(self.n_triplets, "n_triplets", self, kind="int", low=1)
        check_choice_param(self.schedule, "schedule", self, SCHEDULES)
        check_scalar_param(self.push_weight, "push_weight", self, kind="real", low=0)
        check_scalar_param(self.max_time, "max_time", self, kind="real", low=0,
                           low_inclusive=False, allow_none=True)
        check_scalar_param(self.eval_every, "eval_every", self, kind="int", low=0)
        if self.solver == "fw" and self.constraint is None:
            raise ValueError("LowRankDML: solver='fw' needs a bounded feasible set; set "
                             "constraint='frobenius' or 'spectral'.")

    def _eta(self, t: int) -> float:
        kind = AUTO_SCHEDULE[self.solver] if self.schedule == "auto" else self.schedule
        if kind == "invsqrt":
            return self.eta0 / np.sqrt(t)
        if kind == "inverse":
            return self.eta0 / t
        if kind == "fw":
            return self.eta0 / (t + 2.0)
        return float(self.eta0)

    def _fit(self, X, triplets, rng):
        d = X.shape[1]
        solver_cls = SOLVERS[self.solver]
        if solver_cls.dense:
            # W, the gradient / W - eta g, and eigh's eigenvectors (+ slack)
            check_dense_memory(4 * 8 * d * d, self,
                               f"solver={self.solver!r} keeps dense {d} x {d} matrices; "
                               "solver='incsvd' needs O(d r) memory")
        prob = TripletDMLProblem(X, triplets, self.loss, self.lam, self.push_weight)
        state = solver_cls(prob, self.constraint, self.tau)
        size = DEFAULT_BATCH[self.solver] if self.batch_size is None else self.batch_size
        if self.solver in ("gd", "fw") and self.batch_size is None:
            size = None
        batches = _Minibatches(prob.m, size, rng)
        hist = History(keys=("train_seconds", "rank", "eta", "objective"))
        train = 0.0
        t = 0
        for t in progress(range(1, self.max_iter + 1), total=self.max_iter,
                          verbose=self.verbose, desc="LowRankDML", unit="it"):
            eta = self._eta(t)
            t0 = time.perf_counter()
            state.step(t, batches.next(), eta)
            train += time.perf_counter() - t0
            last = t == self.max_iter or (self.max_time is not None and train >= self.max_time)
            evaluate = last or (self.eval_every and t % self.eval_every == 0)
            obj = state.objective() if evaluate else None
            if obj is not None and not np.isfinite(obj):
                raise FloatingPointError(f"LowRankDML: training diverged at iteration {t} "
                                         f"(objective {obj}); lower eta0.")
            hist.record(t, train_seconds=train, rank=state.rank, eta=eta, objective=obj)
            if last:
                break
        U, s = state.finish()
        if self.solver == "sgd_one":   # the one projection: record the feasible W
            hist.data["objective"][-1] = prob.objective_dense(state.W)
            hist.data["rank"][-1] = int(s.size)
        if not (np.isfinite(U).all() and np.isfinite(s).all()):
            raise FloatingPointError("LowRankDML: training diverged (non-finite W); lower eta0.")
        self.U_ = np.ascontiguousarray(U)
        self.s_ = np.asarray(s, dtype=float)
        self.components_ = np.ascontiguousarray((self.U_ * np.sqrt(self.s_)).T)
        self.rank_ = int(self.s_.size)
        self.n_iter_ = t
        self.n_reorthonormalizations_ = int(getattr(state, "n_reorth", 0))
        self.n_gram_only_updates_ = int(getattr(state, "n_gram_only", 0))
        self.history_ = hist.data

    def objective(self, X, triplets) -> float:
        """F(W) = f(W) + lam tr(W) of the fitted W on ``(X, triplets)``."""
        check_is_fitted(self, "n_features_in_")
        X = self._check_fitted_X(X)
        from .._validation import check_triplets
        t = check_triplets(triplets, X.shape[0], self)
        prob = TripletDMLProblem(X, t, self.loss, self.lam, self.push_weight)
        return prob.objective_factored(self.components_.T)

    def _check_loaded(self) -> None:
        super()._check_loaded()
        d, r = self.n_features_in_, self.rank_
        for name, shape in (("U_", (d, r)), ("s_", (r,)), ("components_", (r, d))):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.shape != shape:
                raise ValueError(f"{name} has shape {getattr(arr, 'shape', None)}, "
                                 f"expected {shape}")
