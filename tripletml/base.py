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
nearest-neighbour index (:mod:`tripletml.index`) can search with it.

Every triplet learner has a ``preprocessing`` parameter (see
:mod:`tripletml.preprocessing`): ``fit`` fits a
:class:`~tripletml.preprocessing.Preprocessor` (centring / standardisation /
whitening / sphere statistics) on the training X, keeps it in
``preprocessor_`` and runs the solver on the preprocessed rows; every method
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

import warnings
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.validation import _check_feature_names, check_is_fitted

from ._arrayspec import ArraySpec, check_fitted_arrays
from ._deprecated import (DeprecatedClassAttribute, LegacyDecisionFunction,  # noqa: F401
                          legacy_decision_function)
from ._params import validate_constraints
from ._stopping import STOP_REASONS
from ._preprocessed import PreprocessedModel
from .preprocessing import check_preprocessing
from ._validation import as_generator, check_dense_memory, check_triplets, check_X
from .linalg import rowwise_dot
from .linalg.invariants import check_factor, check_positive_definite, check_psd
from .triplets import check_labels, resolve_sampling

__all__ = ["LearnerBase", "TripletLearner", "BilinearMixin", "MahalanobisMixin",
           "EmbeddingMixin", "ArraySpec", "EMBEDDING_SIMILARITIES", "legacy_decision_function"]

_CHUNK_BYTES = 64 * 2**20


def _chunk_rows(n_rows: int, width: int) -> int:
    return max(1, min(n_rows, _CHUNK_BYTES // (8 * max(1, width))))


class LearnerBase(BaseEstimator):
    """Root of every tripletml learner (triplet learners and multi-label rankers).

    One rule for fitted-ness: a learner is fitted iff ``n_features_in_`` is
    set (:meth:`__sklearn_is_fitted__`); ``fit`` removes it first
    (:meth:`_reset_fitted`) and sets it last, so a failed (re)fit leaves the
    model unfitted and every public accessor raises ``NotFittedError``.

    Subclasses declare every ndarray fitted attribute in ``_fitted_arrays``
    (see :mod:`tripletml._arrayspec`); :func:`tripletml.load_model` checks a
    file against it, then :meth:`_check_loaded`.
    """

    #: every ndarray fitted attribute, with its shape / dtype / value rules
    _fitted_arrays: ClassVar[dict[str, ArraySpec]] = {}
    #: whether scipy.sparse X is accepted
    _accepts_sparse: bool = True

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "n_features_in_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse
        tags.target_tags.required = True   # labels, triplets or an indicator Y
        return tags

    #: hyper-parameter declarations with scikit-learn's constraint objects
    #: (:mod:`tripletml._params`)
    _parameter_constraints: ClassVar[dict] = {}

    def _validate_params(self) -> None:
        """Check the hyper-parameters against ``_parameter_constraints``
        (:func:`tripletml._params.validate_constraints`: TypeError/ValueError
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
        from ._model_writer import save_model

        save_model(self._saved_form(), path)

    def _saved_form(self) -> "LearnerBase":
        """The model as :func:`tripletml.persistence.save_model` writes it
        (its fitted attributes: arrays and JSON values); override to flatten
        a fitted helper object."""
        return self

    def _check_loaded(self) -> None:
        """Consistency of a model built by ``load_model`` (raise ValueError or
        TypeError on a mismatch).  The generic rules: ``n_features_in_`` a
        positive int, every declared array present with its shape, dtype and
        values (:func:`tripletml._arrayspec.check_fitted_arrays`), no
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


#: fitted counters a model file may hold (non-negative ints, checked on load)
_COUNTERS = ("t_", "n_iter_", "rank_", "n_labels_", "n_pinv_refresh_", "next_id_", "n_scale_",
             "average_start_step_", "n_reorthonormalizations_", "n_gram_only_updates_",
             "n_skipped_")


class TripletLearner(PreprocessedModel, LegacyDecisionFunction, LearnerBase):
    """Base class of the triplet learners: validation, preprocessing, triplet
    handling and scoring.

    Subclasses implement ``_fit(X, triplets, rng)`` and the similarity
    primitives of their mixin; they receive X already preprocessed and never
    see the raw rows.  Subclasses store the ``preprocessing`` parameter;
    ``fit`` fits one :class:`tripletml.preprocessing.Preprocessor` on the
    training X and keeps it in ``preprocessor_``, and every method that takes
    X applies ``preprocessor_.transform`` after validating it.
    ``preprocessing_`` (the fitted mode) and ``preprocessing_mean_`` /
    ``_scale_`` / ``_whitener_`` / ``_radius_`` read ``preprocessor_``.

    A model file holds the preprocessor as those attributes (the format of
    tripletml 0.1): ``_fitted_arrays`` of every subclass is extended with
    :data:`PREPROCESSING_ARRAYS` (raw width ``n_features_in_``), ``save``
    writes :meth:`Preprocessor.to_attributes` and loading rebuilds the
    Preprocessor (:meth:`Preprocessor.from_attributes`).  The subclass's own
    declarations' ``"d"`` is the width of the preprocessed rows,
    ``n_features_preprocessed_`` (see :mod:`tripletml._arrayspec`).

    ``n_features_in_`` is always the raw number of features (what every X
    passed to the model must have); ``n_features_preprocessed_`` is the
    width of the preprocessed rows (d + 1 with ``"sphere"``, else d).
    """

    #: whether fit needs supervision (labels or triplets)
    _needs_triplets: bool = True
    #: what ``preprocessing="auto"`` resolves to on dense or low-dimensional
    #: X (see :func:`tripletml.preprocessing.resolve_preprocessing`);
    #: :class:`BilinearMixin` declares ``"sphere"``

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = self._needs_triplets
        return tags

    # ------------------------------------------------------------------ fit
    #: whether ``_fit`` receives the preprocessed rows.  False: X comes as
    #: validated (densified when a mode applies to sparse X), possibly the
    #: caller's own array (read only), for a learner that applies the fitted
    #: map to its statistics (KISSME, :meth:`Preprocessor.second_moment`)
    _fit_preprocessed: ClassVar[bool] = True
    #: dense d x d float64 arrays a fit holds at once (the model and its
    #: solver state, d the preprocessed width), checked against the memory
    #: available before training starts (:meth:`_check_square_memory`)
    _square_arrays: ClassVar[int] = 0
    #: how ``fit(ShardedCollection)`` trains (see
    #: :mod:`tripletml.training.partitioned`): "statistics", "cocoa",
    #: "mixing", "gradients" or "sample" (gather the triplets' rows)
    _partitioned_strategy: ClassVar[str] = "sample"

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

    def _prepare_fit(self, X, y=None, triplets=None):
        """Validate inputs, fit the preprocessing and apply the sampling
        policy; returns ``(X, supervision, rng)`` where the supervision is
        the given triplets, what :meth:`_sampler` made of ``y`` (triplets or
        :class:`~tripletml.triplets.ClassCodes`), or None for a learner that
        needs neither.  The policy sees the rows ``_fit`` will see."""
        self._validate_params()
        check_preprocessing(getattr(self, "preprocessing", None), self)
        X = self._validate_X(X, reset=True)
        rng = as_generator(getattr(self, "random_state", None), self)
        # the supervision first: bad triplets or labels leave no preprocessor
        got = None
        if self._needs_triplets and triplets is not None:
            got = check_triplets(triplets, X.shape[0], self, allow_degenerate=False)
        elif self._needs_triplets:
            if y is None:
                raise ValueError(f"{type(self).__name__}: fit requires y to be passed, but the "
                                 "target y is None; give class labels y (to sample triplets) "
                                 "or an explicit triplets=(m, 3) index array.")
            if X.shape[0] < 3:
                raise ValueError(f"{type(self).__name__}: X has {X.shape[0]} samples; at "
                                 "least 3 are needed to form a triplet.")
            _, codes = check_labels(y, X.shape[0], self)
        Xp = self._fit_preprocessing(X)
        try:
            self._check_square_memory(self.preprocessor_.n_features_out_)
        except MemoryError:
            self._clear_preprocessing()
            raise
        if self._fit_preprocessed:
            X = self.preprocessor_.transform(Xp, copy=Xp is X)   # a densified copy is ours
        else:
            X = Xp
        if got is None and self._needs_triplets:
            try:
                got = self._sampler().sample(X, codes, rng, owner=self)
            except BaseException:
                self._clear_preprocessing()
                raise
        return X, got, rng

    def fit(self, X, y=None, *, triplets=None):
        """Fit the model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix of shape (n_samples, n_features), or ShardedCollection
            A :class:`~tripletml.sharded.ShardedCollection` (labels or
            triplets inside it) trains over its partitions, in-process or on
            the active Dask cluster (:mod:`tripletml.training.partitioned`;
            the learner's ``_partitioned_strategy``).
        y : array-like of shape (n_samples,), optional
            Class labels; ``n_triplets`` random class triplets are sampled
            from them when ``triplets`` is not given.
        triplets : array-like of shape (n_triplets, 3), optional
            Explicit ``(query, positive, negative)`` row indices into X.

        X may also be metric-learn's point triplets, an array of shape
        ``(n_triplets, 3, n_features)`` (``X[T]``), with neither y nor
        ``triplets``: it is fitted as the ``3 n_triplets`` rows with the
        triplets ``(3i, 3i + 1, 3i + 2)``; ``n_features_in_`` is
        ``n_features``.

        Returns
        -------
        self
        """
        if _is_collection(X):
            if y is not None or triplets is not None:
                raise ValueError(f"{type(self).__name__}: fit(collection) takes the labels and "
                                 "triplets from the ShardedCollection (labels=, triplets=); "
                                 "do not pass y or triplets as well")
            return X._fit_learner(self)       # tripletml.training.partitioned
        X, y, triplets = _tuple_forms(self, X, y, triplets)
        self._reset_fitted()  # a failed refit must not look fitted
        X, triplets, rng = self._prepare_fit(X, y, triplets)
        try:
            self._fit(X, triplets, rng)
        except BaseException:
            self._clear_preprocessing()
            raise
        self._set_fitted(self.preprocessor_.n_features_in_)         # the raw d
        return self

    def _fit(self, X, triplets, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ scoring
    def _check_fitted_X(self, X, name="X"):
        """Validated and preprocessed X (what the fitted solver expects)."""
        X = self._validate_X(X, reset=False, name=name, accept_sparse=True)
        return self._preprocess(X)

    def pair_score(self, X1, X2) -> np.ndarray:
        """Row-wise similarity ``S(X1[i], X2[i])`` (higher = more similar;
        Mahalanobis learners: ``-pair_distance``, see
        :meth:`MahalanobisMixin.pair_score`)."""
        return self._rowwise_similarity(X1, X2)

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

    def similarity(self, X, Y=None) -> np.ndarray:
        """Similarity matrix ``S[i, j] = S(X[i], Y[j])`` (Y defaults to X)."""
        X = self._check_fitted_X(X, "X")
        Y = X if Y is None else self._check_fitted_X(Y, "Y")
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._similarity(X, Y)
        return self._finite_output(out, "similarity")

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
        out = np.empty(t.shape[0])
        step = _chunk_rows(t.shape[0], X.shape[1])
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(0, t.shape[0], step):
                c = t[s:s + step]
                Q = X[c[:, 0]]
                out[s:s + step] = (self._pair_score(Q, X[c[:, 1]])
                                   - self._pair_score(Q, X[c[:, 2]]))
        return self._finite_output(out, "triplet_score")

    def score(self, X, y) -> float:
        """Leave-one-out mean average precision of retrieval within X."""
        from .metrics import evaluate_retrieval

        X = self._validate_X(X, reset=False, accept_sparse=True)   # preprocessed by similarity
        return float(evaluate_retrieval(self, X, np.asarray(y), k=())["map"])


def _tuple_forms(est, X, y, triplets):
    """metric-learn's tuple inputs: ``(n, 3, d)`` point triplets become rows
    and index triplets; the other forms get an error naming the right one."""
    who = type(est).__name__
    arr = X
    if isinstance(X, (list, tuple)):
        try:
            arr = np.asarray(X)
        except ValueError:          # ragged: check_X says so
            arr = None
    if triplets is None and y is not None and not _is_collection(X):
        ya = y if isinstance(y, np.ndarray) else None
        if isinstance(y, (list, tuple)):
            try:
                ya = np.asarray(y)
            except ValueError:
                ya = None
        if ya is not None and ya.ndim == 2 and ya.shape[1] == 3 and ya.dtype != bool \
                and np.issubdtype(ya.dtype, np.integer):
            raise ValueError(f"{who}: y has shape {ya.shape} of integers: index triplets "
                             "(query, positive, negative) go in the keyword argument, "
                             "fit(X, triplets=T); y holds one class label per row of X.")
    if getattr(arr, "ndim", None) != 3 or sp.issparse(X):
        return X, y, triplets
    n, k, d = arr.shape
    if k == 3 and y is None and triplets is None:
        if n == 0:
            raise ValueError(f"{who}: X holds no triplet (shape {arr.shape}).")
        rows = np.ascontiguousarray(arr.reshape(3 * n, d))
        return rows, None, np.arange(3 * n, dtype=np.int64).reshape(n, 3)
    if k == 3:
        raise ValueError(f"{who}: X of shape {arr.shape} holds point triplets (query, "
                         "positive, negative), which carry their own supervision: fit(X) "
                         "without y or triplets.")
    if k == 2:
        raise ValueError(f"{who}: X of shape {arr.shape} looks like pairs of points (with "
                         "+1/-1 labels), metric-learn's pair form, which tripletml does not "
                         "learn from yet; give point triplets of shape (n, 3, n_features), "
                         "or rows X (n_samples, n_features) with class labels y or "
                         "triplets=(m, 3) row indices.")
    raise ValueError(f"{who}: X must be rows (n_samples, n_features), or point triplets "
                     f"(n_triplets, 3, n_features); got shape {arr.shape}.")


def _is_collection(X) -> bool:
    """Whether X is a :class:`~tripletml.sharded.ShardedCollection` (without
    importing the module for plain arrays)."""
    return bool(getattr(type(X), "_is_sharded_collection", False))


def _dense_float(X) -> np.ndarray:
    """``X`` as a dense C-contiguous float64 array (sparse input densified)."""
    if sp.issparse(X):
        X = X.toarray()
    return np.ascontiguousarray(X, dtype=np.float64)


#: the two ways an embedding pair gives back the learned similarity
EMBEDDING_SIMILARITIES = ("inner_product", "neg_squared_l2")


class _EmbedMixin:
    """Public ``embed_queries`` / ``embed_database`` over the unchecked
    ``_embed_queries`` / ``_embed_database`` of a mixin."""

    #: ``"inner_product"``: ``S(q, x) = <embed_queries(q), embed_database(x)>``;
    #: ``"neg_squared_l2"``: ``S(q, x) = -||embed_queries(q) - embed_database(x)||^2``
    #: (the two embeddings are then the same map).  As pytorch-metric-learning's
    #: ``is_inverted``: inner product means larger = closer.
    embedding_similarity: ClassVar[str] = "inner_product"

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


    #: deprecated (0.2): ``"distance"`` for Mahalanobis learners, ``"similarity"``
    #: for bilinear ones; read ``embedding_similarity``
    similarity_kind = DeprecatedClassAttribute(
        "similarity_kind", "embedding_similarity",
        lambda cls: "distance" if cls.embedding_similarity == "neg_squared_l2" else "similarity")


class BilinearMixin(_EmbedMixin):
    """Similarity ``S(x, y) = x^T W y``.

    Subclasses implement ``_apply(X)`` returning the dense product ``X W``
    (or ``(X A) B^T`` for a factored W) and ``_bilinear_matrix()`` returning
    W; the public :meth:`get_bilinear_matrix` checks fitted-ness first.
    """

    embedding_similarity = "inner_product"
    #: ``preprocessing="auto"`` lifts dense rows onto the sphere (see
    #: :mod:`tripletml.preprocessing`): a bilinear score is linear in x for a
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

    def get_bilinear_matrix(self) -> np.ndarray:
        """The matrix W of ``S(x, y) = x^T W y`` (a new array).

        With ``preprocessing_`` None the score is bilinear in the caller's
        rows and W is given in the caller's coordinates: the learned matrix
        (``W_`` or the factors, which act on the rows divided by
        ``preprocessing_unit_``) divided by the unit squared, so that
        ``X @ W @ Y.T`` equals ``similarity(X, Y)`` and ``c * X`` gives
        ``W / c**2``.  With ``"center"`` likewise on the centred rows
        ``X - preprocessing_mean_``.  The other modes rescale or lift each
        column, and W is the learned matrix in the preprocessed coordinates
        (``n_features_preprocessed_`` square: d + 1 with ``"sphere"``)."""
        check_is_fitted(self)
        W = np.array(self._bilinear_matrix(), dtype=float, copy=True)
        pre = self.__dict__.get("preprocessor_")
        if pre is not None and pre.unit_ is not None:
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


class EmbeddingMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """A scikit-learn transformer ``transform(X) = X L^T`` for a learner with a
    factor ``components_`` (L, shape (r, d)): ``fit_transform``,
    ``set_output``, ``get_feature_names_out`` (``"<classname><i>"``), and the
    overflow check of every output.  Subclasses may override
    ``_transform(X)`` (the unchecked product)."""

    def transform(self, X) -> np.ndarray:
        """Embed X as ``X L^T`` (Euclidean distances / inner products there
        equal the learned ones)."""
        X = self._check_fitted_X(X)
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._transform(X)
        return self._finite_output(out, "transform")

    def _transform(self, X):
        L = self.components_
        return np.asarray(X @ L.T)

    @property
    def _n_features_out(self) -> int:
        if not self.__sklearn_is_fitted__():
            raise AttributeError("_n_features_out")  # check_is_fitted: NotFittedError
        return int(self.components_.shape[0])


class MahalanobisMixin(_EmbedMixin, EmbeddingMixin):
    """Distance ``d(x, y) = sqrt((x - y)^T M (x - y))``, ``M = L^T L``.

    Subclasses set ``components_`` (L, shape (r, d)).  ``similarity`` and
    ``pair_score`` return the negated *squared* distance ``-d^2`` so larger
    means closer; ``pair_distance`` and ``get_metric`` give the true distance
    (``squared=True`` for ``d^2``), as metric-learn.

    A scikit-learn transformer (:class:`EmbeddingMixin`): ``transform(X) =
    X L^T``, ``fit_transform``, ``set_output``, ``get_feature_names_out``.
    """

    embedding_similarity = "neg_squared_l2"

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
        (:meth:`~tripletml.preprocessing.Preprocessor.linear_map`: the
        feature unit, the column scales or the whitener) ``M = A L^T L A^T``
        (with None: ``L^T L / unit**2``, and ``c * X`` gives ``M / c**2``).
        With ``"sphere"`` the distance is not a quadratic form of the raw
        difference and M is ``L^T L`` in the lifted coordinates (d + 1
        square)."""
        check_is_fitted(self)
        L = self.components_
        pre = self.__dict__.get("preprocessor_")
        A = None if pre is None else pre.linear_map()
        if A is not None:
            A = np.asarray(A, dtype=float)
            L = L * A if A.ndim < 2 else L @ A.T      # rows of L A^T
        return L.T @ L

    def pair_distance(self, X1, X2, *, squared: bool = False) -> np.ndarray:
        """Row-wise Mahalanobis distance ``d(X1[i], X2[i])`` (``squared=True``:
        ``d^2``)."""
        d2 = np.maximum(-self._rowwise_similarity(X1, X2), 0.0)
        return d2 if squared else np.sqrt(d2)

    def pair_score(self, X1, X2) -> np.ndarray:
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

        def metric(u, v):
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


def __getattr__(name: str):
    """Names that left this module in 0.2, for one release."""
    if name == "History":
        warnings.warn("tripletml.base.History moved to tripletml.training.History in 0.2; the "
                      "old name will be removed in 0.3.", FutureWarning, stacklevel=2)
        from .training.history import History
        return History
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
