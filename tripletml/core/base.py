"""Shared estimator API.

Every learner derives from :class:`LearnerBase` (fitted-ness, persistence,
input checks): the triplet learners through :class:`TripletLearner` and one of
two mixins, the multi-label rankers through ``_MultilabelRanker``.  The mixins:

* :class:`BilinearMixin` -- similarity ``S(x, y) = x^T W y`` (OASIS, SDCA,
  LORETA, COMET).  Larger means more similar.
* :class:`MahalanobisMixin` -- distance ``d(x, y) = (x - y)^T M (x - y)`` with
  ``M = L^T L`` (low-rank DML, SML, ...).  The similarity is ``-d``, so
  "higher = more similar" holds for every learner and the retrieval metrics
  work unchanged.

Every triplet learner also has a *query* and a *database* embedding
(:meth:`BilinearMixin.embed_queries` / ``embed_database``): dense vectors whose
inner product (``embedding_similarity == "inner_product"``) or minus squared
Euclidean distance (``"neg_squared_l2"``) is the learned similarity, so a
nearest-neighbor index (:mod:`tripletml.search.index`) can search with it.

Every triplet learner has a ``preprocessing`` parameter (see
:mod:`tripletml.core.preprocessing`): ``fit`` fits a
:class:`~tripletml.core.preprocessing.Preprocessor` (centering / standardization /
whitening / sphere statistics) on the training X, keeps it in
``scaler_`` and runs the solver on the preprocessed rows; every method
that takes X applies the same map first.
The learned matrices (``W_``, ``M_``, ``components_``,
``get_bilinear_matrix()``) therefore live in the preprocessed coordinates,
and ``similarity(X)`` on raw X equals the solver's similarity on the
preprocessed X.  ``preprocessing="sphere"`` adds a column (the rows are
lifted onto a sphere in d + 1 dimensions): ``n_features_in_`` stays
the raw d, the learned matrices have ``n_features_preprocessed_`` = d + 1
rows, and in a triplet learner's ``_fitted_arrays`` the shape symbol
``"d"`` means that width (the width the solver saw); the preprocessing
statistics are declared in ``n_features_in_``.

``fit(X, y=None, *, triplets=None)`` samples ``n_triplets`` triplets from
``y`` with the learner's ``sampling`` policy (random class triplets by
default; see :mod:`tripletml.triplets`) unless an explicit
``(m, 3)`` triplet index array is given, in which case ``y`` is ignored.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.validation import _check_feature_names, check_is_fitted

from tripletml.core.arrayspec import ArraySpec, check_fitted_arrays
from tripletml.core.metric_learn_names import check_fit_keywords, wrap_init
from tripletml.core.params import validate_constraints
from tripletml.engine.stopping import STOP_REASONS
from tripletml.engine.threads import (fit_work, limit_threads, rows_work, threads_for,
                                     work_fit_prelude, work_pairs, work_rows, work_similarity,
                                     work_triplets)
from tripletml.core.preprocessed import PreprocessedModel
from tripletml.core.preprocessing import check_preprocessing
from tripletml.core.supervision import Supervision, read_supervision
from tripletml.core.validation import as_generator, check_dense_memory, check_triplets, check_X
from tripletml.core.tuples import (TupleClassifierMixin, TupleInput, available_if_fitted, best_threshold,
                      resolve_rows, tuple_input)
from tripletml.pairs import PAIR_LEARNERS, PairConstraints, pair_classes, pairs_to_triplets
from tripletml.linalg import rowwise_dot
from tripletml.linalg.invariants import check_factor, check_positive_definite, check_psd
from tripletml.triplets import resolve_sampling

__all__ = ["LearnerBase", "TripletLearner", "BilinearMixin", "MahalanobisMixin",
           "EmbeddingMixin", "ArraySpec", "EMBEDDING_SIMILARITIES", "DECLARATIONS"]

_CHUNK_BYTES = 64 * 2**20


#: largest head x row similarity matrix :meth:`triplet_score` forms to score
#: triplets that reuse few rows (16M float64 = 128 MiB)
_MAX_ITEM_SIMILARITIES = 1 << 24


def _chunk_rows(n_rows: int, width: int) -> int:
    return max(1, min(n_rows, _CHUNK_BYTES // (8 * max(1, width))))


class LearnerBase(BaseEstimator):
    """Root of every tripletml learner (triplet learners and multi-label rankers).

    One rule for fitted-ness: a learner is fitted iff ``n_features_in_`` is
    set (:meth:`__sklearn_is_fitted__`); ``fit`` removes it first
    (:meth:`_reset_fitted`) and sets it last, so a failed (re)fit leaves the
    model unfitted and every public accessor raises ``NotFittedError``.

    Subclasses declare every ndarray fitted attribute in ``_fitted_arrays``
    (see :mod:`tripletml.core.arrayspec`); :func:`tripletml.load_model` checks a
    file against it, then :meth:`_check_loaded`.
    """

    # what a learner declares (the defaults; the meanings: DECLARATIONS)
    _fitted_arrays: ClassVar[dict[str, ArraySpec]] = {}
    _parameter_constraints: ClassVar[dict] = {}
    _accepts_sparse: ClassVar[bool] = True
    _renamed_params: ClassVar[dict[str, str]] = {}

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "n_features_in_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse
        tags.target_tags.required = True   # labels, triplets or an indicator Y
        return tags

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # metric-learn's keyword names (k=, prior=, n_constraints=, ...): a
        # TypeError naming tripletml's parameter (tripletml.core.metric_learn_names)
        wrap_init(cls)

    def _validate_params(self) -> None:
        """Check the hyper-parameters against ``_parameter_constraints``
        (:func:`tripletml.core.params.validate_constraints`: TypeError/ValueError
        naming the estimator), then the rules between parameters of
        :meth:`_check_params`.  Also run on every loaded model."""
        validate_constraints(self)
        self._check_params()

    def _check_params(self) -> None:
        """Rules between parameters (override)."""

    # ------------------------------------------------------------ fitted-ness
    def _reset_fitted(self) -> None:
        """Make the model unfitted (first thing ``fit`` does, and what a
        failed first ``partial_fit`` call undoes)."""
        if hasattr(self, "n_features_in_"):
            del self.n_features_in_

    def _set_fitted(self, n_features: int) -> None:
        """Mark the model fitted on ``n_features`` raw input features: the one
        place every learner sets ``n_features_in_``."""
        self.n_features_in_ = int(n_features)

    def _check_fitted(self) -> None:
        """Raise ``NotFittedError`` unless fitted (the one rule)."""
        check_is_fitted(self)

    # ----------------------------------------------------------------- input
    def _validate_X(self, X, *, reset: bool, name: str = "X", accept_sparse: bool | None = None):
        """``check_X`` plus scikit-learn's feature-name bookkeeping.

        ``reset=True`` (fit): record ``feature_names_in_`` of a DataFrame X
        (or remove a stale one).  ``reset=False``: the model must be fitted;
        the names (warning on a mismatch, as scikit-learn) and the number of
        features are checked against the fitted ones.
        """
        accept = self._accepts_sparse if accept_sparse is None else accept_sparse
        X = resolve_rows(self, X)        # 1-D row indices into a ``preprocessor``
        if reset:
            _check_feature_names(self, X, reset=True)
            return check_X(X, self, accept_sparse=accept, name=name)
        self._check_fitted()
        _check_feature_names(self, X, reset=False)
        X = check_X(X, self, accept_sparse=accept, name=name)
        if X.shape[1] != self.n_features_in_:
            who = type(self).__name__
            raise ValueError(f"{who}: {name} has {X.shape[1]} features, but {who} is expecting "
                             f"{self.n_features_in_} features as input (the model was fitted "
                             f"with {self.n_features_in_} features).")
        return X

    def _finite_output(self, out, what: str):
        """Return ``out``, or raise a clear ValueError when it is not finite
        (finite inputs whose result overflows, e.g. features near 1e154)."""
        values = out.data if sp.issparse(out) else np.asarray(out)
        if not np.isfinite(values).all():
            raise ValueError(f"{type(self).__name__}: {what} is not finite for these inputs "
                             "(the result overflows float64); scale the features down, e.g. "
                             "with sklearn.preprocessing.StandardScaler or MaxAbsScaler.")
        return out

    # ----------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Save to ``.npz`` (arrays) with JSON metadata; see
        :func:`tripletml.load_model`.  The file is written to a temporary
        file in the same directory, then renamed over ``path``."""
        from tripletml.core.model_writer import save_model

        save_model(self, path)

    def _saved_form(self) -> "LearnerBase":
        """The model as :func:`tripletml.persistence.save_model` writes it
        (its fitted attributes: arrays and JSON values); override to flatten
        a fitted helper object."""
        return self

    def _check_loaded(self) -> None:
        """Consistency of a model built by ``load_model`` (raise ValueError or
        TypeError on a mismatch).  The generic rules: ``n_features_in_`` a
        positive int, every declared array present with its shape, dtype and
        values (:func:`tripletml.core.arrayspec.check_fitted_arrays`), no
        undeclared array, and the parameters valid (``_validate_params``).
        Override to add cross-checks; call ``super()._check_loaded()``."""
        d = getattr(self, "n_features_in_", None)
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"n_features_in_={d!r} is not a positive integer")
        names = getattr(self, "feature_names_in_", None)
        if names is not None and (not isinstance(names, np.ndarray) or names.shape != (d,)
                                  or not all(isinstance(n, str) for n in names)):
            raise ValueError(f"feature_names_in_ must be {d} strings")
        self._validate_params()
        check_fitted_arrays(self)
        for name in _COUNTERS:
            if name in vars(self):
                v = vars(self)[name]
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{name}={v!r} must be a non-negative integer")
        reason = vars(self).get("stop_reason_")
        if reason is not None and reason not in STOP_REASONS:
            raise ValueError(f"stop_reason_={reason!r} must be one of {STOP_REASONS}")
        if "threshold_" in vars(self):
            t = vars(self)["threshold_"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t):
                raise ValueError(f"threshold_={t!r} must be a finite number")
        classes = vars(self).get("classes_")
        if classes is not None and np.asarray(classes).tolist() not in ([-1, 1], [0, 1]):
            raise ValueError(f"classes_={classes!r} must be [-1, 1] or [0, 1]")
        form = vars(self).get("tuple_form_")
        if form is not None and form not in ("pairs", "triplets"):
            raise ValueError(f"tuple_form_={form!r} must be 'pairs' or 'triplets'")


#: fitted counters a model file may hold (non-negative ints, checked on load)
_COUNTERS = ("t_", "n_iter_", "rank_", "n_labels_", "n_pinv_refresh_", "next_id_", "n_scale_",
             "average_start_step_", "n_reorthonormalizations_", "n_gram_only_updates_",
             "n_skipped_")


class TripletLearner(PreprocessedModel, TupleClassifierMixin, LearnerBase):
    """Base class of the triplet learners: validation, preprocessing, triplet
    handling and scoring.

    A learner is ``class NAME(<model kind>, TripletLearner)`` (or
    :class:`~tripletml.core.online.OnlineTripletLearner` for the online
    passes), where the model kind is :class:`BilinearMixin`,
    :class:`MahalanobisMixin` or the factored bilinear mixin, each an
    :class:`EmbeddingMixin` (embeddings for search and ``transform``).  The
    bases of this class, each with one job:

    * :class:`~tripletml.core.preprocessed.PreprocessedModel`: the fitted
      scaler ``scaler_`` (the ``preprocessing`` parameter), applied to
      every X, flattened into the model file;
    * :class:`~tripletml.core.tuples.TupleClassifierMixin`: metric-learn's
      pair / triplet classifier on tuples of points (``predict``,
      ``decision_function``, ``score``, thresholds);
    * :class:`LearnerBase`: fitted-ness, parameter validation, input checks
      and persistence, shared with the multi-label rankers.

    **What an algorithm declares.**  A learner's class body holds its
    hyper-parameters (``__init__`` and ``_parameter_constraints``), its
    fitted arrays (``_fitted_arrays``) and the switches of
    :data:`DECLARATIONS`, each with its default below (or on the class
    :data:`DECLARATIONS` names) and set only where the algorithm differs.
    Subclasses implement ``_fit(X, supervision, rng)`` and the similarity
    primitives of their mixin; they receive X already preprocessed (unless
    ``_fit_preprocessed`` is False) and never see the raw rows.

    **Preprocessing.**  ``fit`` fits one
    :class:`tripletml.core.preprocessing.Preprocessor` on the training X and
    keeps it in ``scaler_``, and every method that takes X applies
    ``scaler_.transform`` after validating it.  ``preprocessing_`` (the
    fitted mode) and ``preprocessing_mean_`` / ``_scale_`` / ``_whitener_``
    / ``_radius_`` read ``scaler_``.  A model file holds the scaler as those
    attributes (the format of tripletml 0.1): ``_fitted_arrays`` of every
    subclass is extended with :data:`PREPROCESSING_ARRAYS` (raw width
    ``n_features_in_``), ``save`` writes :meth:`Preprocessor.to_attributes`
    and loading rebuilds the Preprocessor
    (:meth:`Preprocessor.from_attributes`).  The subclass's own
    declarations' ``"d"`` is the width of the preprocessed rows,
    ``n_features_preprocessed_`` (see :mod:`tripletml.core.arrayspec`).

    ``n_features_in_`` is always the raw number of features (what every X
    passed to the model must have); ``n_features_preprocessed_`` is the
    width of the preprocessed rows (d + 1 with ``"sphere"``, else d).
    """

    # ---------------------------------------------- what an algorithm declares
    # (the defaults; the meanings are in DECLARATIONS at the end of this module)
    # supervision
    _needs_triplets: ClassVar[bool] = True
    _accepts_pairs: ClassVar[bool] = False
    _pairs_need_both: ClassVar[bool] = True
    # preprocessing
    _auto_preprocessing: ClassVar[str] = "standardize"
    _feature_unit: ClassVar[bool] = True
    _auto_column_scale: ClassVar[bool] = True
    _fit_preprocessed: ClassVar[bool] = True
    # resources and routes
    _square_arrays: ClassVar[int] = 0
    _span_route: ClassVar[bool | None] = None
    _partitioned_strategy: ClassVar[Any] = None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = self._needs_triplets
        return tags

    # ------------------------------------------------------------------ fit
    def _check_square_memory(self, d: int) -> None:
        """A clear MemoryError, before any allocation, when the
        ``_square_arrays`` d x d arrays of this learner do not fit."""
        k = int(self._square_arrays)
        if k:
            check_dense_memory(k * 8 * d * d, self,
                               f"{k} dense {d} x {d} arrays (the model and its solver state) "
                               "do not fit; reduce the dimension first (e.g. sklearn's "
                               "TruncatedSVD) or use a low-rank learner (LORETA, LowRankDML)")

    def _sampler(self):
        """The sampling policy: what ``fit(X, y)`` makes of class labels
        (:mod:`tripletml.triplets`): the learner's ``sampling`` parameter
        through :func:`~tripletml.triplets.resolve_sampling` with its
        ``n_triplets`` (default :class:`~tripletml.triplets.ClassTriplets`).
        Explicit ``triplets=`` bypass it."""
        return resolve_sampling(getattr(self, "sampling", "class"), self.n_triplets, owner=self)

    def _prepare_fit(self, sup: Supervision):
        """Validate the parsed input (:class:`~tripletml.core.supervision.Supervision`),
        fit the preprocessing and apply the sampling policy; returns ``(X,
        supervision, rng, sup)`` with ``sup`` checked
        (:meth:`Supervision.checked`) and the supervision ``_fit`` receives:
        the given triplets, the given pairs (:class:`~tripletml.pairs.PairConstraints`
        for a learner with ``_accepts_pairs``, else the triplets
        :func:`~tripletml.pairs.pairs_to_triplets` makes of them), what
        :meth:`_sampler` made of the class labels (triplets or
        :class:`~tripletml.triplets.ClassCodes`), or None for a learner that
        needs neither.  The policy sees the rows ``_fit`` will see."""
        self._validate_params()
        check_preprocessing(getattr(self, "preprocessing", None), self)
        X = self._validate_X(sup.rows, reset=True)
        rng = as_generator(getattr(self, "random_state", None), self)
        # the supervision first: bad triplets or labels leave no preprocessor
        sup = sup.checked(self, X)
        got, codes = sup.target, sup.codes
        n, d = X.shape
        with limit_threads(rows_work(n, d)):    # at most a covariance and its map
            Xp = self._fit_preprocessing(X)
            try:
                self._check_square_memory(self.scaler_.n_features_out_)
            except MemoryError:
                self._clear_preprocessing()
                raise
            if self._fit_preprocessed:
                X = self.scaler_.transform(Xp, copy=Xp is X)   # a densified copy is ours
            else:
                X = Xp
        if isinstance(got, PairConstraints):
            if not self._needs_triplets:
                got = None
            elif not self._accepts_pairs:
                got = self._pair_triplets(got, rng)
        elif got is None and self._needs_triplets:
            try:
                with limit_threads(float(X.shape[0]) ** 2 * X.shape[1]):   # at most k-NN's Gram
                    got = self._sampler().sample(X, codes, rng, owner=self)
            except BaseException:
                self._clear_preprocessing()
                raise
        return X, got, rng, sup

    def _pair_triplets(self, pc: PairConstraints, rng) -> np.ndarray:
        """The triplets of a learner that does not learn from pairs natively:
        :func:`~tripletml.pairs.pairs_to_triplets` (a similar and a dissimilar
        pair sharing a row), or a ValueError naming the pair learners."""
        t = pairs_to_triplets(pc, rng=rng, owner=self)
        if t.shape[0] == 0:
            self._clear_preprocessing()
            raise ValueError(
                f"{type(self).__name__} learns from triplets; it turns pairs into triplets "
                "(a similar pair {a, b} and a dissimilar pair {a, c} sharing the row a give "
                "the triplet (a, b, c)), but no similar and dissimilar pair share a row here. "
                f"Use a learner that takes pairs ({', '.join(PAIR_LEARNERS)}), or give "
                "pairs that share rows.")
        return t

    # one BLAS thread for small work (tripletml.engine.threads): the rule on
    # what surrounds the solve; _fit_span prices the solve by its own problem
    @threads_for(work_fit_prelude)
    def fit(self, X, y=None, *, triplets=None, pairs=None, **fit_params):
        """Fit the model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix of shape (n_samples, n_features), or ShardedCollection
            A :class:`~tripletml.distributed.sharded.ShardedCollection` (labels or
            triplets inside it) trains over its partitions, in-process or on
            the active Dask cluster (:mod:`tripletml.distributed.partitioned`;
            the learner's ``_partitioned_strategy``).
        y : array-like of shape (n_samples,), optional
            Class labels; ``n_triplets`` random class triplets are sampled
            from them when ``triplets`` is not given.  With ``pairs`` (or
            pairs of points as X): one label per pair, +1 similar and -1
            dissimilar (or 1 and 0).
        triplets : array-like of shape (n_triplets, 3), optional
            Explicit ``(query, positive, negative)`` row indices into X.
        pairs : array-like of shape (n_pairs, 2), optional
            Row indices into X of pairs labeled by y.  ITML, KISSME and MMC
            learn from pairs natively; the other learners learn from the
            triplets the pairs imply (:func:`tripletml.pairs.pairs_to_triplets`:
            a similar and a dissimilar pair sharing a row), and say so when
            there are none.  ``threshold_`` is then calibrated on these pairs
            (best accuracy), so that ``predict`` classifies new pairs.

        X may also be one of metric-learn's tuple forms (with neither
        ``triplets`` nor ``pairs``): point triplets ``(n_triplets, 3,
        n_features)`` (``X[T]``, no y) and point pairs ``(n_pairs, 2,
        n_features)`` with y their labels, each fitted as the distinct points
        of the tuples (equal points share a row: the preprocessing counts
        each point once) with index tuples into them; with the
        ``preprocessor`` parameter set, index tuples ``(n, 2)`` / ``(n, 3)``
        into its rows, or a 1-D array of row indices with class labels y.
        ``n_features_in_`` is always ``n_features``.  After a fit on tuples,
        ``predict``, ``decision_function`` and ``score`` take tuples
        (:class:`tripletml.core.tuples.TupleClassifierMixin`).

        Every form is parsed once into one
        :class:`~tripletml.core.supervision.Supervision` (the rows, what the
        supervision is and how it was given), which the rest of ``fit``
        consumes.  Any other keyword (metric-learn's ``bounds=``, ...) is a
        TypeError naming tripletml's parameter.

        Returns
        -------
        self
        """
        check_fit_keywords(self, fit_params, ["X", "y", "triplets", "pairs"])
        #: answers (triplets or pairs), not class labels: early stopping's
        #: "auto" (in-memory fits only; a partitioned fit keeps the plain fit)
        self._fit_from_answers = False
        if _is_collection(X):
            for name in ("early_stopping_", "validation_scores_", "C_", "C_grid_", "C_scores_",
                         "alpha_grid_", "alpha_scores_"):
                self.__dict__.pop(name, None)     # an in-memory fit's held-out record
            if y is not None or triplets is not None or pairs is not None:
                raise ValueError(f"{type(self).__name__}: fit(collection) takes the labels and "
                                 "triplets from the ShardedCollection (labels=, triplets=); "
                                 "do not pass y, triplets or pairs as well")
            return X._fit_learner(self)       # tripletml.distributed.partitioned
        sup = read_supervision(self, X, y, triplets, pairs)    # every form, parsed once
        self._reset_fitted()  # a failed refit must not look fitted
        for name in ("threshold_", "tuple_form_", "classes_"):
            self.__dict__.pop(name, None)
        for name in ("early_stopping_", "validation_scores_"):   # a fit's own record
            self.__dict__.pop(name, None)
        X, got, rng, sup = self._prepare_fit(sup)
        self._fit_from_answers = sup.tuple_form is not None
        try:
            self._fit_span(X, got, rng)
        except BaseException:
            self._clear_preprocessing()
            raise
        self._set_fitted(self.scaler_.n_features_in_)         # the raw d
        pc = sup.pair_constraints
        if pc is not None:              # metric-learn calibrates at fit: best accuracy
            scores = self._tuple_scores(TupleInput("pairs", sup.rows, pc.pairs))
            self.threshold_ = best_threshold(scores, pc.labels)
            self.classes_ = pair_classes(sup.y)     # predict answers in the labels given
        if sup.tuple_form is not None:
            self.tuple_form_ = sup.tuple_form
        return self

    def _label_codes(self, classes: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The class codes the sampling policy receives, from the sorted
        distinct labels ``classes`` and each row's code into them (a learner
        that reads a label as "no class", RCA's chunk -1, remaps here)."""
        return codes

    def _fit(self, X, triplets, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------- the span route
    def _span_lift_spec(self, X, supervision) -> dict[str, float | str] | None:
        """The span route's declaration: None (the default) when this
        learner, with these parameters, does not fit the same model on the
        coordinates ``X Q`` of the rows' span; else ``{name: kind}`` for
        each fitted array of width ``d``:

        * a float ``c``: a ``d x d`` attribute that is ``c I`` at the start,
          lifted back as ``c I + Q (A_r - c I_r) Q^T``
          (:func:`tripletml.linalg.span.lift_square`);
        * ``"rows"``: a ``d x k`` attribute whose columns lie in the span
          (0 at the start, e.g. LowRankDML's ``U_``), lifted as ``Q A_r``;
        * ``"cols"``: a ``k x d`` attribute whose rows lie in the span
          (``components_``), lifted as ``A_r Q^T``;
        * ``"factor"``: a ``d x k`` factor whose columns stay in the span of
          the rows and of its initial value; the learner is initialized at
          full width first (with the plain route's random draws), the basis
          ``Q`` spans the rows and these initial factors, the fit starts
          from ``Q^T A_0`` (:meth:`_span_set_init`) and the result is
          lifted back as ``Q A_r``.

        ``X`` and ``supervision`` are what ``_fit`` would receive."""
        return None

    def _span_set_init(self, init: dict[str, np.ndarray]) -> None:
        """Set the ``"factor"`` attributes of the span route's initial model
        (``Q^T A_0``, at the reduced width) with any state that depends on
        them (LORETA's pseudo-inverses)."""
        for name, value in init.items():
            setattr(self, name, value)

    def _span_lift_extra(self, Q: np.ndarray, spec: dict[str, float | str]) -> None:
        """Called after the fit on the span's coordinates, before the
        attributes of ``spec`` are lifted with the basis ``Q`` (``d x r``;
        they still hold the reduced fit): lift the other fitted arrays of
        width ``d`` (``components_``) and drop solver state of width ``r``."""

    def _solve_work(self, n_rows: int, n_features: int) -> float:
        """The thread rule's work of ``_fit`` on ``n_rows`` preprocessed rows
        of ``n_features`` (:mod:`tripletml.engine.threads`): by default
        :func:`~tripletml.engine.threads.fit_work`, ``d^2 (n + d)``; a
        learner whose solve makes smaller dense calls says so."""
        return fit_work(n_rows, n_features)

    def _fit_solve(self, X, supervision, rng) -> None:
        """``_fit`` on the preprocessed rows, inside the thread rule of its
        problem (``fit`` itself runs under the rule of what surrounds the
        solve, :func:`tripletml.engine.threads.prelude_work`)."""
        with limit_threads(self._solve_work(*X.shape)):
            self._fit(X, supervision, rng)

    def _fit_span(self, X, supervision, rng) -> None:
        """``_fit`` on the preprocessed rows, by the span route where it is
        declared and pays (fewer rows than features, and rows that store at
        least as many entries as the span has dimensions: not short sparse
        rows), else directly."""
        import copy

        from tripletml.linalg.span import lift_square, reduce_rows, span_basis, span_route_applies

        route = self._span_route
        spec = None if route is False or not self._fit_preprocessed \
            else self._span_lift_spec(X, supervision)
        d = X.shape[1]
        # a step on a reduced row costs O(r) per factor entry against O(nnz)
        # on a stored row: sparse rows shorter than the span's dimension (text)
        # stay on the plain route, whose steps follow the non-zeros
        stored = X.nnz / max(X.shape[0], 1) if sp.issparse(X) else d
        if spec is None or not (route or (span_route_applies(X.shape[0], d)
                                          and stored >= X.shape[0])):
            self._fit_solve(X, supervision, rng)
            return
        n_square = sum(not isinstance(kind, str) for kind in spec.values())
        if n_square:     # the lifted d x d arrays (and one for the lift's product)
            check_dense_memory(8 * (n_square + 1) * d * d, self,
                               f"{n_square + 1} dense {d} x {d} arrays (the model) do not "
                               "fit; reduce the dimension first (e.g. sklearn's "
                               "TruncatedSVD) or use a low-rank learner (LORETA, LowRankDML)")
        rows = [name for name, kind in spec.items() if kind == "factor"]
        fit_rng, basis_rows = rng, X
        if rows:       # the plain route's initial factors (and draws), then their span
            fit_rng = copy.deepcopy(rng)
            self._init_model(d, fit_rng, X)
            init = {name: np.array(getattr(self, name), dtype=np.float64) for name in rows}
            Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
            basis_rows = np.vstack([Xd] + [A.T for A in init.values()])
        Q = span_basis(basis_rows)
        if not 0 < Q.shape[1] < d or (not route and Q.shape[1] > stored):
            self._fit_solve(X, supervision, rng)
            return
        if rows:
            reduced = {name: Q.T @ A for name, A in init.items()}
            # copies: the kernels update the factors in place, and a learner
            # may fit more than once on the span (C="auto"'s probes)
            self._init_model = lambda n_features, rng_, X_=None: self._span_set_init(
                {name: A.copy() for name, A in reduced.items()})
        # the thread rule (tripletml.engine.threads) on the problem solved: the
        # reduced fit's work is that of n rows of r features, the lift's d^2 r
        n, r = X.shape[0], Q.shape[1]
        try:
            with limit_threads(self._solve_work(n, r)):
                self._fit(reduce_rows(X, Q), supervision, fit_rng)
        finally:
            self.__dict__.pop("_init_model", None)
        with limit_threads(float(d) * d * r):
            self._span_lift_extra(Q, spec)
            for name, kind in spec.items():
                value = getattr(self, name)
                if kind in ("rows", "factor"):
                    value = np.ascontiguousarray(Q @ value)
                elif kind == "cols":
                    value = np.ascontiguousarray(value @ Q.T)
                else:
                    value = lift_square(value, Q, float(kind))
                setattr(self, name, value)

    # ------------------------------------------------------------ scoring
    def _check_fitted_X(self, X, name="X"):
        """Validated and preprocessed X (what the fitted solver expects)."""
        X = self._validate_X(X, reset=False, name=name, accept_sparse=True)
        return self._preprocess(X)

    def pair_score(self, X1, X2=None) -> np.ndarray:
        """Row-wise similarity ``S(X1[i], X2[i])`` (higher = more similar;
        Mahalanobis learners: ``-pair_distance``, see
        :meth:`MahalanobisMixin.pair_score`).  ``pair_score(pairs)`` with one
        array of pairs of points ``(n, 2, n_features)`` (or index pairs with a
        ``preprocessor``) is metric-learn's form."""
        X1, X2 = self._pair_rows(X1, X2, "pair_score")
        return self._rowwise_similarity(X1, X2)

    def _pair_rows(self, X1, X2, what: str):
        """``(X1, X2)``, or the two sides of one array of pairs given as X1."""
        if X2 is not None:
            return X1, X2
        ti = tuple_input(self, X1)
        if ti is None or ti.kind != "pairs":
            raise TypeError(f"{type(self).__name__}: {what} takes two arrays of rows (X1, X2) "
                            "or one array of pairs of points (n_pairs, 2, n_features).")
        return ti.rows[ti.index[:, 0]], ti.rows[ti.index[:, 1]]

    @threads_for(work_pairs)
    def _rowwise_similarity(self, X1, X2) -> np.ndarray:
        """Validated, checked ``S(X1[i], X2[i])`` (the diagonal of
        :meth:`similarity`)."""
        X1 = self._check_fitted_X(X1, "X1")
        X2 = self._check_fitted_X(X2, "X2")
        if X1.shape[0] != X2.shape[0]:
            raise ValueError(f"{type(self).__name__}: X1 and X2 must have the same number of "
                             f"rows, got {X1.shape[0]} and {X2.shape[0]}.")
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._pair_score(X1, X2)
        return self._finite_output(out, "pair_score")

    @threads_for(work_similarity)
    def similarity(self, X, Y=None) -> np.ndarray:
        """Similarity matrix ``S[i, j] = S(X[i], Y[j])`` (Y defaults to X)."""
        X = self._check_fitted_X(X, "X")
        Y = X if Y is None else self._check_fitted_X(Y, "Y")
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._similarity(X, Y)
        return self._finite_output(out, "similarity")

    @threads_for(work_triplets)
    def triplet_score(self, X, triplets) -> np.ndarray:
        """Margin of each triplet: ``S(q, p+) - S(q, p-)`` (positive = satisfied).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            The rows the triplets index.
        triplets : array-like of int, shape (n_triplets, 3)
            ``(query, positive, negative)`` row indices into X.

        Returns
        -------
        margins : ndarray of shape (n_triplets,)
            ``S(X[q], X[p+]) - S(X[q], X[p-])`` for each triplet.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model is not fitted.
        ValueError
            Bad X or triplets, or margins that overflow float64.
        """
        X = self._check_fitted_X(X)
        t = check_triplets(triplets, X.shape[0], self)
        out = self._triplet_score_by_items(X, t)
        if out is not None:
            return self._finite_output(out, "triplet_score")
        out = np.empty(t.shape[0])
        step = _chunk_rows(t.shape[0], X.shape[1])
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(0, t.shape[0], step):
                c = t[s:s + step]
                Q = X[c[:, 0]]
                out[s:s + step] = (self._pair_score(Q, X[c[:, 1]])
                                   - self._pair_score(Q, X[c[:, 2]]))
        return self._finite_output(out, "triplet_score")

    def _triplet_score_by_items(self, X, t: np.ndarray) -> np.ndarray | None:
        """Margins from one similarity matrix between the distinct heads and
        the distinct other rows when the triplets reuse few rows (human
        comparisons: many triplets about a few items), where scoring each
        triplet's rows would repeat the same products; None otherwise."""
        m = t.shape[0]
        if m < 2:
            return None
        uq, iq = np.unique(t[:, 0], return_inverse=True)
        up, ip = np.unique(t[:, 1:], return_inverse=True)
        if uq.size * up.size > min(4 * m, _MAX_ITEM_SIMILARITIES):
            return None
        ip = ip.reshape(-1, 2)
        with np.errstate(over="ignore", invalid="ignore"):
            S = np.asarray(self._similarity(X[uq], X[up]))
            return S[iq, ip[:, 0]] - S[iq, ip[:, 1]]

    @threads_for(work_similarity)
    def score(self, X, y=None) -> float:
        """Leave-one-out mean average precision of retrieval within rows X
        with class labels y.

        On tuples (metric-learn's forms, see :meth:`fit`): the ROC AUC of
        ``decision_function`` on pairs of points ``(n, 2, n_features)``
        against their +1/-1 labels y, or the fraction of triplets of points
        ``(n, 3, n_features)`` whose query is more similar to the positive
        (y unused) — what ``cross_val_score`` and ``GridSearchCV`` maximize
        when tuples are X.
        """
        if tuple_input(self, X) is not None:
            return self._tuple_score(X, y)
        from tripletml.metrics import evaluate_retrieval

        if y is None:
            raise ValueError(f"{type(self).__name__}: score(X, y) on rows needs the class "
                             "labels y (leave-one-out mAP); pairs and triplets of points are "
                             "scored without rows.")
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] in (2, 3):
            what = "triplets" if y.shape[1] == 3 else "pairs"
            hint = ("tripletml.metrics.triplet_accuracy(model, X, triplets)" if what == "triplets"
                    else "model.pair_score(X[pairs[:, 0]], X[pairs[:, 1]]) with their labels")
            raise ValueError(f"{type(self).__name__}: score(X, y) takes one class label per row "
                             f"of X; y has shape {y.shape}, like index {what} into X. To score "
                             f"index {what}, use {hint}.")
        X = self._validate_X(X, reset=False, accept_sparse=True)   # preprocessed by similarity
        return float(evaluate_retrieval(self, X, y, k=())["map"])

    @available_if_fitted(TupleClassifierMixin._tuple_ready)
    @threads_for(work_rows)
    def decision_function(self, X) -> np.ndarray:
        """Scores of tuples: ``pair_score`` of each pair of points (higher =
        more similar; minus the distance for a Mahalanobis learner, as
        metric-learn), or each triplet's margin ``S(q, p+) - S(q, p-)``
        (:meth:`triplet_score`).

        Present after a fit on tuples or once a threshold is set
        (:meth:`calibrate_threshold`); a model fitted on labels scores rows
        with :meth:`pair_score`, :meth:`similarity` and :meth:`triplet_score`
        (``decision_function(X, triplets)``, the 0.1 name of
        ``triplet_score``, was removed in 0.3).

        Parameters
        ----------
        X : ndarray of shape (n, 2, n_features) or (n, 3, n_features)
            Pairs or triplets of points (with a ``preprocessor``: index tuples).

        Returns
        -------
        scores : ndarray of shape (n,)
        """
        return self._tuple_decision(X)

    @available_if_fitted(TupleClassifierMixin._tuple_ready)
    @threads_for(work_rows)
    def predict(self, X) -> np.ndarray:
        """+1 / -1 for each pair (similar when its score is at least
        ``threshold_``) or triplet (+1 when the query is more similar to the
        positive than to the negative; a tie is -1).

        Pairs are answered in the labels fitted on (``classes_``): 1 / 0
        when the pair labels given to ``fit`` (or ``calibrate_threshold``)
        were 1 / 0, as a scikit-learn classifier answers in its classes, so
        ``accuracy_score`` and ``scoring="accuracy"`` compare like with like.

        Present after a fit on tuples or once a threshold is set; before
        ``fit``, ``NotFittedError``.

        Parameters
        ----------
        X : ndarray of shape (n, 2, n_features) or (n, 3, n_features)

        Returns
        -------
        y : ndarray of shape (n,), int
        """
        return self._tuple_predict(X)


def _tuple_forms(est, X, y, triplets, pairs=None):
    """``(X, y, triplets, pairs, form)`` of :func:`~tripletml.core.supervision.read_supervision`
    (the form of the callers written before the supervision object)."""
    sup = read_supervision(est, X, y, triplets, pairs)
    return sup.rows, sup.y, sup.triplets, sup.pairs, sup.tuple_form


def _is_collection(X) -> bool:
    """Whether X is a :class:`~tripletml.distributed.sharded.ShardedCollection` (without
    importing the module for plain arrays)."""
    return bool(getattr(type(X), "_is_sharded_collection", False))


def _pad_columns(Z, k: int):
    """``Z`` with zero columns appended up to ``k`` columns (dense or CSR):
    ``transform`` has exactly ``n_components`` columns even when the learned
    matrix has a lower rank (the extra directions carry no distance)."""
    w = Z.shape[1]
    if w >= k:
        return Z
    if sp.issparse(Z):
        return sp.hstack([Z, sp.csr_matrix((Z.shape[0], k - w))], format="csr")
    out = np.zeros((Z.shape[0], k), dtype=np.result_type(Z.dtype, np.float64))
    out[:, :w] = Z
    return out


def _dense_float(X) -> np.ndarray:
    """``X`` as a dense C-contiguous float64 array (sparse input densified)."""
    if sp.issparse(X):
        X = X.toarray()
    return np.ascontiguousarray(X, dtype=np.float64)


#: the two ways an embedding pair gives back the learned similarity
EMBEDDING_SIMILARITIES = ("inner_product", "neg_squared_l2")


class EmbeddingMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """What every model kind embeds: the query and database embeddings for
    search (``embed_queries`` / ``embed_database``, related by
    ``embedding_similarity``) and the scikit-learn transformer
    (``transform``, ``fit_transform``, ``set_output``,
    ``get_feature_names_out``: ``"<classname><i>"``, lower case), each
    output checked for overflow, so that a learner drops into
    ``make_pipeline(StandardScaler(), learner, KNeighborsClassifier())``.

    ``transform(X)`` is ``Z = x L^T`` per (preprocessed) row for a factor L
    of the learned model (see :class:`MahalanobisMixin` and
    :class:`BilinearMixin` for what L is): Euclidean distances between rows
    of Z are the learned Mahalanobis distance and inner products the learned
    (PSD part of the) similarity.  ``n_components`` (where the learner has
    it) keeps the ``n_components`` leading directions (largest eigenvalues
    of ``L^T L``); ``transform_fidelity_`` says how much of the model the
    embedding keeps.

    Subclasses (the model-kind mixins) implement ``_embed_queries(X)`` and
    ``_embed_database(X)`` (unchecked, on validated preprocessed X),
    ``_transform_out(X)`` (the unchecked product on validated, preprocessed
    X), ``_transform_width()`` (its number of columns) and
    ``_transform_fidelity()``.
    """

    #: ``"inner_product"``: ``S(q, x) = <embed_queries(q), embed_database(x)>``;
    #: ``"neg_squared_l2"``: ``S(q, x) = -||embed_queries(q) - embed_database(x)||^2``
    #: (the two embeddings are then the same map).  As pytorch-metric-learning's
    #: ``is_inverted``: inner product means larger = closer.
    embedding_similarity: ClassVar[str] = "inner_product"

    @threads_for(work_rows)
    def embed_queries(self, X) -> np.ndarray:
        """Embed query rows so that the learned similarity is a plain inner
        product (or minus squared Euclidean distance) of embeddings.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Query rows (validated as by :meth:`similarity`: the fitted number
            of features, finite values).  Sparse input stays sparse until the
            product with the model.

        Returns
        -------
        E : ndarray of shape (n_samples, n_dims), float64
            ``S(X[i], Y[j])`` equals ``E[i] . embed_database(Y)[j]`` when
            ``embedding_similarity == "inner_product"`` and
            ``-||E[i] - embed_database(Y)[j]||^2`` when it is
            ``"neg_squared_l2"``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model is not fitted.
        ValueError
            On a wrong number of features, non-finite input, or an
            embedding that overflows.
        """
        X = self._check_fitted_X(X, "X")
        with np.errstate(over="ignore", invalid="ignore"):
            out = _dense_float(self._embed_queries(X))
        return self._finite_output(out, "embed_queries")

    @threads_for(work_rows)
    def embed_database(self, X) -> np.ndarray:
        """Embed database rows (the right-hand side of ``S(q, x)``).

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        E : ndarray of shape (n_samples, n_dims), float64
            See :meth:`embed_queries`.

        Raises
        ------
        sklearn.exceptions.NotFittedError, ValueError
            As :meth:`embed_queries`.
        """
        X = self._check_fitted_X(X, "X")
        with np.errstate(over="ignore", invalid="ignore"):
            out = _dense_float(self._embed_database(X))
        return self._finite_output(out, "embed_database")

    def _embed_queries(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _embed_database(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    @threads_for(work_rows)
    def transform(self, X) -> np.ndarray:
        """Embed X (rows) into the learned space.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            Raw rows, validated and preprocessed as by ``similarity``.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components_out)
            ``n_components_out = len(get_feature_names_out())``.  Euclidean
            distances between rows of Z are the learned Mahalanobis
            distance of ``L^T L`` and inner products ``Z Z^T`` are
            ``X L^T L X^T`` (see the class docstring for L).  Identity
            models (Euclidean, DotProduct) return a sparse X sparse.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model is not fitted.
        ValueError
            On a wrong number of features, non-finite input, or an
            embedding that overflows.
        """
        X = self._check_fitted_X(X)
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._transform_out(X)
        return self._finite_output(out, "transform")

    def _transform(self, X):
        """``X L^T`` with the full factor L = ``components_``."""
        L = self.components_
        return np.asarray(X @ L.T)

    def _transform_out(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def _transform_width(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _transform_fidelity(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def _n_features_out(self) -> int:
        if not self.__sklearn_is_fitted__():
            raise AttributeError("_n_features_out")  # check_is_fitted: NotFittedError
        return int(self._transform_width())

    @property
    def transform_fidelity_(self) -> float:
        """The share of the learned model that ``transform`` keeps: with
        ``G = L^T L`` the Gram matrix of the embedding (``Z Z^T = X G
        X^T``) and W the learned matrix (``M = L_full^T L_full`` for a
        Mahalanobis learner, the bilinear W otherwise),
        ``||G||_F^2 / ||W||_F^2 = 1 - ||W - G||_F^2 / ||W||_F^2``.

        1.0 when the embedding is exact (a Mahalanobis learner without
        truncation; a bilinear learner whose W is symmetric PSD, e.g.
        COMET, with every positive direction kept); below 1 for a
        non-symmetric or indefinite W (OASIS, SDCA, the factored models),
        whose skew part and negative directions no embedding of one map
        can express, or when ``n_components`` drops directions.  Computed
        from the fitted arrays on first use and cached outside the
        estimator (recomputed when they change); never stored in a model
        file."""
        check_is_fitted(self)
        return float(self._transform_fidelity())


class BilinearMixin(EmbeddingMixin):
    """Similarity ``S(x, y) = x^T W y``.

    Subclasses implement ``_apply(X)`` returning the dense product ``X W``
    (or ``(X A) B^T`` for a factored W) and ``_bilinear_matrix()`` returning
    W; the public :meth:`get_bilinear_matrix` checks fitted-ness first.

    A scikit-learn transformer (:class:`EmbeddingMixin`):
    ``transform(X) = X P`` on the preprocessed rows, where ``P P^T = W_+``
    is the projection of the symmetric part ``(W + W^T) / 2`` onto the PSD
    cone (eigenvalues below 0 set to 0; :func:`tripletml.linalg.psd_part.psd_part`),
    the symmetric PSD matrix nearest W in the Frobenius norm.  The columns
    of P are the eigenvectors of the positive eigenvalues, largest first,
    scaled by their square roots; ``n_components`` (where the learner has
    it) keeps the leading ones.

    * When W is symmetric PSD (COMET, SparseCOMET, DotProduct; any W with
      ``transform_fidelity_ == 1``) the embedding is exact: ``transform(X)
      @ transform(Y).T == similarity(X, Y)``, and squared Euclidean
      distances between transformed rows are the Mahalanobis distance
      ``(x - y)^T W (x - y)``.
    * Otherwise (OASIS and SDCA learn a non-symmetric W; the factored
      models an indefinite one) the embedding realizes the nearest such
      model: ``transform_fidelity_`` is the share of ``||W||_F^2`` it keeps.
      ``similarity``, ``embed_queries`` and ``embed_database`` are always
      the learned W itself.
    * A factored model ``W = A B^T`` (rank k) is embedded from a thin QR of
      ``[A B]`` and a 2k x 2k eigenproblem, never a d x d matrix
      (:func:`tripletml.linalg.psd_part.psd_part_factored`); its embedding
      has at most k columns: the width of ``transform`` is (at most)
      ``rank``.

    P is computed from the fitted arrays on first use and cached outside
    the estimator (keyed by a digest of the arrays, so a ``partial_fit``
    or an assignment to ``W_`` is seen); it is never stored in a model
    file.
    """

    embedding_similarity = "inner_product"
    #: ``preprocessing="auto"`` lifts dense rows onto the sphere (see
    #: :mod:`tripletml.core.preprocessing`): a bilinear score is linear in x for a
    #: fixed query, and on the sphere ``W = I`` ranks like Euclidean distance
    _auto_preprocessing: ClassVar[str] = "sphere"

    def _embed_queries(self, X):
        """``S(q, x) = q^T W x = (W^T q) . x``: a query row becomes ``q^T W``
        (rows of ``X W``); factored models override this (``X A``)."""
        return self._apply(X)

    def _embed_database(self, X):
        """A database row is itself (densified); factored models: ``X B``."""
        return X

    def _apply(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _bilinear_matrix(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ transform
    def _bilinear_factors(self):
        """``(A, B)`` with ``W = A B^T`` for a factored model (override),
        else None."""
        return None

    def _psd_map(self):
        """The :class:`~tripletml.linalg.psd_part.PSDPart` of the fitted W
        (with ``n_components``), cached beside the estimator
        (:mod:`tripletml.core.derived`)."""
        from tripletml.core.derived import derived, fingerprint
        from tripletml.linalg.psd_part import psd_part, psd_part_factored

        check_is_fitted(self)
        k = getattr(self, "n_components", None)
        factors = self._bilinear_factors()
        if factors is not None:
            A, B = factors
            return derived(self, "psd_map", fingerprint(A, B, extra=("AB", k)),
                           lambda: psd_part_factored(A, B, k))
        W = self._bilinear_matrix()
        return derived(self, "psd_map", fingerprint(W, extra=("W", k)),
                       lambda: psd_part(W, k))

    def _transform_out(self, X):
        return _pad_columns(np.asarray(X @ self._psd_map().factor), self._transform_width())

    def _transform_width(self) -> int:
        k = getattr(self, "n_components", None)     # zero-padded beyond the PSD rank
        return int(self._psd_map().factor.shape[1]) if k is None else int(k)

    def _transform_fidelity(self) -> float:
        return self._psd_map().fidelity

    def get_bilinear_matrix(self) -> np.ndarray:
        """The matrix W of ``S(x, y) = x^T W y`` (a new array).

        With ``preprocessing_`` None the score is bilinear in the caller's
        rows and W is given in the caller's coordinates: the learned matrix
        (``W_`` or the factors, which act on the rows divided by
        ``preprocessing_unit_``) divided by the unit squared, so that
        ``X @ W @ Y.T`` equals ``similarity(X, Y)`` and ``c * X`` gives
        ``W / c**2``.  With ``"center"`` likewise on the centered rows
        ``X - preprocessing_mean_``.  The other modes rescale or lift each
        column, and W is the learned matrix in the preprocessed coordinates
        (``n_features_preprocessed_`` square: d + 1 with ``"sphere"``)."""
        check_is_fitted(self)
        W = np.array(self._bilinear_matrix(), dtype=float, copy=True)
        pre = self.__dict__.get("scaler_")
        if pre is not None and pre.unit_ is not None and pre.linear_map() is not None:
            W *= pre.linear_map() ** 2
        return W

    def _pair_score(self, X1, X2):
        out = np.empty(X1.shape[0])
        step = _chunk_rows(X1.shape[0], X1.shape[1])
        for s in range(0, X1.shape[0], step):
            out[s:s + step] = rowwise_dot(self._apply(X1[s:s + step]), X2[s:s + step])
        return out

    def _similarity(self, X, Y):
        XW = self._apply(X)
        if sp.issparse(Y):
            return np.asarray((Y @ XW.T).T)
        return XW @ Y.T


class MahalanobisMixin(EmbeddingMixin):
    """Distance ``d(x, y) = sqrt((x - y)^T M (x - y))``, ``M = L^T L``.

    Subclasses set ``components_`` (L, shape (r, d)).  ``similarity`` and
    ``pair_score`` return the negated *squared* distance ``-d^2`` so larger
    means closer; ``pair_distance`` and ``get_metric`` give the true distance
    (``squared=True`` for ``d^2``), as metric-learn.

    A scikit-learn transformer (:class:`EmbeddingMixin`): ``transform(X) =
    X L^T``, ``fit_transform``, ``set_output``, ``get_feature_names_out``;
    Euclidean distances between transformed rows are the learned distance.
    With ``n_components`` (SML, ITML, KISSME, Euclidean) ``transform`` keeps
    the first ``n_components`` rows of ``components_``, the directions of
    the largest eigenvalues of ``M = L^T L`` (the rows of ``components_``
    are ``diag(sqrt(s)) U^T`` in decreasing order of eigenvalue); the
    learner's ``rank_tol`` first drops the eigenvalues below ``rank_tol``
    times the largest (``rank_``); when ``n_components`` exceeds ``rank_``
    the columns beyond it are zeros, so ``transform`` always has exactly
    ``n_components`` columns (a pipeline's width does not depend on the
    fit).  ``n_components`` changes only ``transform``:
    ``similarity``, the distances, the embeddings for search and
    ``get_mahalanobis_matrix`` keep the full learned metric, and
    ``transform_fidelity_`` is the share of ``||L^T L||_F^2`` kept.
    Learners with ``rank`` (LowRankDML) embed into ``rank_`` dimensions;
    RCA's own ``n_components`` is applied when it fits.
    """

    embedding_similarity = "neg_squared_l2"

    def _transform_width(self) -> int:
        r = int(self.components_.shape[0])
        k = getattr(self, "n_components", None)
        return r if k is None else int(k)       # zero-padded beyond rank_

    def _transform_out(self, X):
        k = self._transform_width()
        L = self.components_
        if k == L.shape[0]:
            return self._transform(X)
        if k > L.shape[0]:
            return _pad_columns(self._transform(X), k)
        return np.asarray(X @ L[:k].T)

    def _transform_fidelity(self) -> float:
        L = self.components_
        k = self._transform_width()
        if k == L.shape[0]:
            return 1.0
        G = L @ L.T                     # ||L^T L||_F = ||L L^T||_F
        total = float(np.sum(G * G))
        return float(np.sum(G[:k, :k] ** 2) / total) if total > 0 else 1.0

    def _embed_queries(self, X):
        """``L x`` (rows of ``X L^T``), the same map on both sides."""
        return self._transform(X)

    def _embed_database(self, X):
        return self._transform(X)

    def _check_loaded_metric(self, M: np.ndarray, *, definite: bool = False) -> None:
        """A loaded Mahalanobis matrix ``M`` is symmetric positive
        semi-definite (``definite``: positive definite) and ``components_``
        its factor as ``fit`` made it (``psd_factor`` with ``rank_tol``:
        ``L^T L = M`` up to the eigenvalues below ``rank_tol`` times the
        largest), with ``rank_`` rows."""
        (check_positive_definite if definite else check_psd)(M, "M_")
        d = M.shape[0]
        check_factor(self.components_, M, "components_",
                     rtol=float(np.sqrt(d)) * float(getattr(self, "rank_tol", 0.0)) + 1e-8)
        if self.components_.shape[0] != self.rank_:
            raise ValueError(f"components_ has {self.components_.shape[0]} rows, rank_ is "
                             f"{self.rank_}")

    def get_mahalanobis_matrix(self) -> np.ndarray:
        """The matrix M of ``d(x, y)^2 = (x - y)^T M (x - y)`` on the caller's
        rows (``n_features_in_`` square), metric-learn's meaning.

        ``components_`` (L) acts on the preprocessed rows; every mode but
        ``"sphere"`` is affine, so with A its linear part
        (:meth:`~tripletml.core.preprocessing.Preprocessor.linear_map`: the
        feature unit, the column scales or the whitener) ``M = A L^T L A^T``
        (with None: ``L^T L / unit**2``, and ``c * X`` gives ``M / c**2``).
        With ``"sphere"`` the distance is not a quadratic form of the raw
        difference and M is ``L^T L`` in the lifted coordinates (d + 1
        square)."""
        check_is_fitted(self)
        L = self.components_
        pre = self.__dict__.get("scaler_")
        A = None if pre is None else pre.linear_map()
        if A is not None:
            A = np.asarray(A, dtype=float)
            L = L * A if A.ndim < 2 else L @ A.T      # rows of L A^T
        return L.T @ L

    def pair_distance(self, X1, X2=None, *, squared: bool = False) -> np.ndarray:
        """Row-wise Mahalanobis distance ``d(X1[i], X2[i])`` (``squared=True``:
        ``d^2``); ``pair_distance(pairs)`` with one array of pairs of points
        ``(n, 2, n_features)`` is metric-learn's form."""
        X1, X2 = self._pair_rows(X1, X2, "pair_distance")
        d2 = np.maximum(-self._rowwise_similarity(X1, X2), 0.0)
        return d2 if squared else np.sqrt(d2)

    def pair_score(self, X1, X2=None) -> np.ndarray:
        """``-pair_distance(X1, X2)``: minus the (unsquared) learned distance,
        metric-learn's convention (higher = more similar).  It ranks pairs as
        :meth:`similarity` does, whose entries are ``-d^2`` (the form that
        embeddings and search use); before tripletml 0.2 ``pair_score`` was
        ``-d^2`` too."""
        return -self.pair_distance(X1, X2)

    def get_metric(self, *, squared: bool = False):
        """A callable ``metric(u, v)`` returning the learned distance between
        two 1-D points, usable with scikit-learn's ``metric=`` arguments.

        The default is the true distance ``sqrt((u - v)^T M (u - v))``: a
        metric (triangle inequality), as BallTree / KDTree pruning needs.
        ``squared=True`` gives ``d^2``, which is not a metric: use it only with
        brute-force search.
        """
        check_is_fitted(self)

        def metric(u, v, squared=squared):
            pre = getattr(self, "_preprocess", lambda x: x)
            u2, v2 = (pre(np.atleast_2d(np.asarray(w, float))) for w in (u, v))
            diff = self._transform(u2 - v2)
            d2 = float(np.sum(np.asarray(diff) ** 2))
            return d2 if squared else float(np.sqrt(d2))

        return metric

    def _pair_score(self, X1, X2):
        diff = X1 - X2
        out = np.empty(X1.shape[0])
        step = _chunk_rows(X1.shape[0], X1.shape[1])
        for s in range(0, X1.shape[0], step):
            E = self._transform(diff[s:s + step])
            out[s:s + step] = -rowwise_dot(E, E) if not sp.issparse(E) else \
                -np.asarray(E.multiply(E).sum(axis=1)).ravel()
        return out

    def _similarity(self, X, Y):
        EX = self._transform(X)
        EY = EX if Y is X else self._transform(Y)
        if EX.shape[1] == 0:            # M = 0 (rank 0): every distance is 0
            return np.zeros((EX.shape[0], EY.shape[0]))
        return -euclidean_distances(EX, EY, squared=True)


#: What an algorithm declares about itself: every private class-level switch
#: that the shared code (core, engine, distributed, persistence) reads, with
#: the class that holds its default and its meaning.  A learner sets, in its
#: own class body, the ones where it differs from the default.  (An
#: algorithm's own class attributes, e.g. OASIS's ``_gram_route``, are its
#: business and are not listed.)  ``tests/test_api.py`` checks that this
#: table and the core classes' attributes agree.
DECLARATIONS: dict[str, tuple[str, str]] = {
    # every learner (the triplet learners and the multi-label rankers)
    "_parameter_constraints": (
        "LearnerBase", "the hyper-parameters with scikit-learn's constraint objects "
        "(tripletml.core.params); checked by fit and on every loaded model"),
    "_fitted_arrays": (
        "LearnerBase", "every ndarray fitted attribute with its shape / dtype / value rules "
        "(tripletml.core.arrayspec.ArraySpec; 'd' is the preprocessed width); a model file "
        "is checked against it"),
    "_accepts_sparse": ("LearnerBase", "whether scipy.sparse X is accepted"),
    "_early_stopping_constraints": (
        "EarlyStoppingMixin", "the constraints of early_stopping, validation_fraction and "
        "n_iter_no_change, for the learners that stop early on answers (LMNN, NCA, SML, ITML)"),
    "_validation_array": (
        "EarlyStoppingMixin", "the ArraySpec of validation_scores_ (the probe run's held-out "
        "scores), merged into the _fitted_arrays of a learner that stops early"),
    "_renamed_params": (
        "LearnerBase", "{old: new} parameter names renamed since a model file was written: "
        "load_model reads the old name's value under the new one (LORETA's algorithm)"),
    # supervision
    "_needs_triplets": (
        "TripletLearner", "whether fit needs supervision (labels, triplets or pairs); False "
        "for the no-learning baselines"),
    "_accepts_pairs": (
        "TripletLearner", "whether _fit receives pairs (tripletml.pairs.PairConstraints) "
        "when fitted on pairs: a learner whose paper learns from pairs (ITML, KISSME, MMC, "
        "RCA); the others receive the triplets the pairs imply"),
    "_pairs_need_both": (
        "TripletLearner", "whether a fit on pairs needs both similar and dissimilar pairs "
        "(RCA learns from the similar ones alone)"),
    # preprocessing
    "_auto_preprocessing": (
        "TripletLearner", "what preprocessing='auto' resolves to on dense or "
        "low-dimensional X (tripletml.core.preprocessing.resolve_preprocessing); "
        "BilinearMixin declares 'sphere'"),
    "_feature_unit": (
        "TripletLearner", "whether the modes None and 'center' divide the rows by the "
        "feature unit (every learner whose step sizes, margins or regularization depend on "
        "the scale); the no-learning baselines keep their raw values"),
    "_auto_column_scale": (
        "TripletLearner", "whether 'auto' scales the columns by kind "
        "(tripletml.core.column_kinds.type_aware_scale); False for KISSME and RCA"),
    "_fit_preprocessed": (
        "TripletLearner", "whether _fit receives the preprocessed rows; False: the "
        "validated rows (densified when a mode applies to sparse X, possibly the caller's "
        "own array, read only), for a learner that maps its statistics instead (KISSME, "
        "Preprocessor.second_moment)"),
    # resources and routes
    "_square_arrays": (
        "TripletLearner", "dense d x d float64 arrays a fit holds at once (the model and "
        "its solver state, d the preprocessed width), checked against the memory "
        "available before training starts (_check_square_memory)"),
    "_span_route": (
        "TripletLearner", "None: the span route (tripletml.linalg.span) when the learner "
        "declares it (_span_lift_spec) and the rows are fewer than their features; tests "
        "set True / False on an instance to force either route"),
    "_partitioned_strategy": (
        "TripletLearner", "how fit(ShardedCollection) trains: a "
        "tripletml.distributed.strategy.PartitionedStrategy (exact statistics, CoCoA+, "
        "mixing, gradient sums); None: gather a sample of the triplets' rows"),
    "_model_kind": (
        "FactoredBilinearMixin", "what parameter mixing averages "
        "(tripletml.distributed.mixing.model_kind): 'factors' (A, B of W = A B^T), 'pinv' "
        "(factors with their pseudo-inverses: LORETA, PinvFactorsOwner) or 'dense' (W_: "
        "OASIS); a learner without one and with W_ counts as dense"),
    # the online learners
    "_history_keys": (
        "OnlineTripletLearner", "the columns of history_ besides the step and the time"),
    "_advice": (
        "OnlineTripletLearner", "what the divergence watch's error suggests "
        "(tripletml.engine.DivergenceWatch)"),
    "_criterion_name": (
        "OnlineTripletLearner", "what tol is relative to, as the stop message names it"),
    "_auto_eta_c": (
        "AutoStepMixin", "the constant c of eta0='auto' "
        "(tripletml.core.online.auto_step_size)"),
    "_default_C": (
        "HeldoutStepCapMixin", "the step cap of C='auto' on class labels, and the top of "
        "its held-out grid on answers (tripletml.core.step_cap)"),
}
