"""What the neighborhood learners (LMNN, NCA) share: a linear map ``L``
(``components_``, n_components x d) learned with L-BFGS from an initial map,
the fitted attributes and their checks on load."""
from __future__ import annotations

from numbers import Integral
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.core.validation import check_dense_memory
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.linalg.linear_map import (INIT_OPTIONS, LBFGSResult, initial_components,
                                         minimize_lbfgs, resolve_init)
from tripletml.engine import TrainingResult, apply_result, run
from tripletml.core.early_stopping import EarlyStoppingMixin
from tripletml.engine.whole import WholeRun
from tripletml.triplets import AllLabels, ClassCodes

__all__ = ["LinearMapLearner"]


#: the fitted map's attributes, in every subclass docstring's ``{map_attributes}``
MAP_ATTRIBUTES_DOC = """\
    components_ : ndarray of shape (n_components, d)
        The learned map ``L``; ``transform(X) = X L^T``.
    M_ : ndarray of shape (d, d)
        ``L^T L``.
    rank_ : int
        Rows of ``components_``.
"""


class LinearMapLearner(EarlyStoppingMixin, MahalanobisMixin, TripletLearner):
    """Base of LMNN, NCA and LinearTSTE (not public)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__doc__ and "    {map_attributes}\n" in cls.__doc__:
            cls.__doc__ = cls.__doc__.replace("    {map_attributes}\n", MAP_ATTRIBUTES_DOC)

    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
    }
    #: d x d arrays a fit holds at once (L, its gradient, M_, the L-BFGS
    #: memory of 10 pairs of r x d vectors), checked before training
    _square_arrays = 24

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "init": [StrOptions(set(INIT_OPTIONS))],
        "max_iter": COMMON["max_iter"],
        "tol": COMMON["tol"],
        "random_state": COMMON["random_state"],
        "verbose": COMMON["verbose"],
        "preprocessing": COMMON["preprocessing"],
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    _fitted_arrays = {**_fitted_arrays, **EarlyStoppingMixin._validation_array}

    def _sampler(self):
        """Labels are used as they are (:class:`~tripletml.triplets.AllLabels`):
        the learner forms its own neighborhoods."""
        return AllLabels()

    def _check_loaded(self) -> None:
        """A loaded ``M_`` is PSD with ``components_`` (``rank_`` rows, the
        learned ``L``) its factor ``M_ = L^T L``, and ``rank_`` is
        ``n_components`` when that is set."""
        super()._check_loaded()
        self._check_loaded_metric(self.M_)
        if self.n_components is not None and self.rank_ != self.n_components:
            raise ValueError(f"rank_={self.rank_} differs from n_components="
                             f"{self.n_components}")

    # ------------------------------------------------------------------ fit
    def _dense_rows(self, X) -> np.ndarray:
        n, d = X.shape
        if sp.issparse(X):
            check_dense_memory(8 * n * d, self, f"the dense {n} x {d} rows")
            return np.ascontiguousarray(X.toarray(), dtype=np.float64)
        return np.ascontiguousarray(X, dtype=np.float64) if X.dtype != np.float64 or \
            not X.flags.c_contiguous else X

    def _n_out(self, d: int) -> int:
        r = d if self.n_components is None else int(self.n_components)
        if r > d:
            raise ValueError(f"{type(self).__name__}: n_components={r} exceeds the number of "
                             f"features the learner sees ({d}, after preprocessing).")
        return r

    # ------------------------------------------------------- the span route
    def _span_lift_spec(self, X, supervision):
        """With fewer rows than features the objective (LMNN's, NCA's) sees
        ``L`` only through ``L (x_i - x_j)``, so its gradient ``L S`` has
        rows in the span of the rows and L-BFGS never moves the part of
        ``L`` outside it: the fit runs on the span's coordinates when that
        part is known.  Two starts qualify: the principal axes (``"pca"``,
        rows in the span when there are at most as many as the centered
        rows' rank), lifted as ``L_r Q^T`` (up to the signs of its rows);
        and the identity at full width (``n_components=None``), lifted as
        ``I + Q (L_r - I) Q^T``.  The start resolved here is the one the
        reduced fit uses (the ``"auto"`` rule at the full width)."""
        self.__dict__.pop("_span_init", None)
        n, d = X.shape
        if n >= d:
            return None
        codes = supervision.codes if isinstance(supervision, ClassCodes) else None
        n_classes = int(codes.max()) + 1 if codes is not None and codes.size else 0
        r = d if self.n_components is None else int(self.n_components)
        used = resolve_init(self.init, r, d, n, n_classes) if r <= d else None
        if used == "identity" and self.n_components is None:
            self._span_init = used
            return {"components_": 1.0, "M_": 1.0}
        if used == "pca" and self._pca_in_span(X, r):
            self._span_init = used
            return {"components_": "cols", "M_": 0.0}
        return None

    @staticmethod
    def _pca_in_span(X, r: int) -> bool:
        """Whether the top ``r`` principal axes of the rows lie in their span
        (at most as many as the centered rows' rank; the others are
        arbitrary directions of the null space)."""
        Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        return r <= np.linalg.matrix_rank(Xd - Xd.mean(axis=0))

    def _span_lift_extra(self, Q: np.ndarray, spec) -> None:
        """The identity start's map is ``d x d`` once lifted."""
        if spec.get("components_") == 1.0:
            self.rank_ = int(Q.shape[0])

    def _initial(self, X, got, rng) -> tuple[np.ndarray, np.ndarray | None]:
        """``(L0, codes)``: the initial map and the class codes (None with
        triplets; checked for a class of two or more members first).  On
        the span route the start resolved at the full width
        (:meth:`_span_lift_spec`)."""
        codes = got.codes if isinstance(got, ClassCodes) else None
        if codes is not None and np.bincount(codes).max() < 2:
            raise ValueError(f"{type(self).__name__}: every class has a single member; no row "
                             "has a neighbor of its own class.")
        r = self._n_out(X.shape[1])
        init = self.__dict__.pop("_span_init", self.init)
        L0, used = initial_components(init, X, codes, r, rng, type(self).__name__)
        self.init_ = used
        return L0, codes

    # ------------------------------------------------------ early stopping
    def _train_answers(self, make_objective, X: np.ndarray, triplets: np.ndarray,
                       L0: np.ndarray, rng, record_keys: tuple[str, ...]) -> None:
        """Fit on answers, with early stopping when it is on
        (:meth:`~tripletml.core.early_stopping.EarlyStoppingMixin._choose_count`):
        L-BFGS probe runs on the answers outside each fold of the items,
        scored after every iteration on the answers among the fold's items,
        each stopped after ``n_iter_no_change`` iterations without a better
        score (or by its own rule); unless the pooled curve is best at its
        end, the model is then trained on all answers for the best iteration
        count (``stop_reason_`` ``"validation"``).  ``make_objective(t)``:
        the objective of the answers ``t``; ``X``: the rows they index;
        ``rng`` is not drawn from (the folds go by item id)."""
        t = np.asarray(triplets)

        def probe(fit: np.ndarray, watch) -> int:
            return minimize_lbfgs(make_objective(fit), L0, max_iter=int(self.max_iter),
                                  tol=self.tol, verbose=self.verbose, who=type(self).__name__,
                                  record_keys=record_keys,
                                  monitor=lambda it, L: watch(it, X @ L.T)).n_iter

        count = self._choose_count(t, probe)
        self._train(make_objective(t), L0, record_keys, budget=count)

    def _train(self, objective, L0: np.ndarray, record_keys: tuple[str, ...], *,
               budget: int | None = None) -> None:
        """Minimize ``objective`` from ``L0`` with L-BFGS
        (:func:`~tripletml.linalg.linear_map.minimize_lbfgs`) as one step of
        the driver (:class:`~tripletml.engine.whole.WholeRun`), which records
        ``n_iter_``, ``stop_reason_`` and ``history_``; set the model.
        ``budget``: iterations chosen by early stopping (instead of
        ``max_iter``; ``stop_reason_`` ``"validation"`` when it is spent,
        no ConvergenceWarning)."""
        who = type(self).__name__
        if budget == 0:
            return self._keep_start(objective, L0, record_keys)

        def go(n: int):
            res = minimize_lbfgs(objective, L0, max_iter=n, tol=self.tol,
                                 verbose=self.verbose, who=who, record_keys=record_keys)
            return SimpleNamespace(n_iter=res.n_iter, converged=res.reason == "tol",
                                   criterion=res.criterion, history=res.history, lbfgs=res)

        solver = WholeRun(go)
        result = run(solver, name=who, max_iter=int(self.max_iter if budget is None else budget),
                     tol=0.0 if self.tol is None else self.tol)
        res: LBFGSResult = solver.result.lbfgs
        self._set_map(res.L, res.objective, res.initial_objective)
        apply_result(self, result, tol=self.tol, early_stopped=budget is not None,
                     what="relative decrease of the objective", advice="increase max_iter or tol")

    def _keep_start(self, objective, L0: np.ndarray, record_keys: tuple[str, ...]) -> None:
        """Early stopping's best iterate is the start: ``L0``, no iteration."""
        value, _, info = objective(L0)
        self._set_map(np.array(L0, dtype=np.float64), value, value)
        history = {"step": [0], "seconds": [0.0], "objective": [float(value)],
                   **{k: [None if info.get(k) is None else float(info[k])] for k in record_keys}}
        apply_result(self, TrainingResult(n_iter=0, stop_reason="validation", criterion=None,
                                          history=history), tol=None, what="", advice="")

    def _set_map(self, L: np.ndarray, objective: float, initial: float) -> None:
        L = np.ascontiguousarray(L)
        self.components_ = L
        self.M_ = L.T @ L
        self.rank_ = int(L.shape[0])
        self.objective_ = float(objective)
        self.initial_objective_ = float(initial)
