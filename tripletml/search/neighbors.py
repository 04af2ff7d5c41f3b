"""k-nearest-neighbor classification with any learned similarity.

scikit-learn's ``KNeighborsClassifier(metric="precomputed")`` cannot take a
bilinear similarity (it wants non-negative distances, and a non-symmetric
``W`` has no distance at all).  :class:`KNeighborsTripletClassifier` ranks
neighbors by the learner's own similarity ``S(query, train)`` through a
:class:`tripletml.search.index.SimilarityIndex` -- exact (NumPy backend) by default,
or faiss IVF / HNSW for large training sets.

Neighbors are the ``n_neighbors`` training rows of highest similarity (exact
index: ties by lower training index, the rule of :mod:`tripletml.metrics`).
The prediction is the majority class among them; a tie between classes goes
to the class of the nearest neighbor among the tied classes -- the rule of
:func:`tripletml.metrics.knn_error`, so ``1 - score`` equals ``knn_error``.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from tripletml.algorithms.baselines.estimator import Euclidean
from tripletml.search.index import BACKENDS, KINDS, SimilarityIndex
from tripletml.core.validation import check_choice_param, check_scalar_param

__all__ = ["KNeighborsTripletClassifier"]


class KNeighborsTripletClassifier(ClassifierMixin, BaseEstimator):
    """k-NN classifier under a learned (bilinear or Mahalanobis) similarity.

    Parameters
    ----------
    learner : tripletml triplet learner or None, default=None
        The similarity.  ``fit`` fits a clone of it on ``(X, y)`` (triplets
        sampled from the labels), unless ``prefit=True``.  None: the plain
        Euclidean distance (:class:`tripletml.Euclidean`).
    n_neighbors : int, default=5
        k, the number of neighbors that vote.
    prefit : bool, default=False
        True: ``learner`` is already fitted and is used as is (not cloned,
        not refitted); ``fit`` only indexes the training rows.
    index_kind : {"flat", "ivf", "hnsw"}, default="flat"
        Index over the training rows ("flat": exact).
    backend : {"numpy", "faiss", "auto"}, default="numpy"
        Index backend (see :class:`tripletml.search.index.SimilarityIndex`); the
        default exact NumPy scan reproduces brute force exactly.
    index_params : dict or None, default=None
        Further :class:`~tripletml.search.index.SimilarityIndex` parameters
        (``nlist``, ``nprobe``, ``hnsw_m``, ``ef_search``, ``dtype``, ...).

    Attributes
    ----------
    learner_ : the fitted learner
    index_ : tripletml.search.index.SimilarityIndex
        Over the training rows (ids = training row numbers).
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    """

    def __init__(self, learner: Any = None, n_neighbors: int = 5, *, prefit: bool = False,
                 index_kind: str = "flat", backend: str = "numpy",
                 index_params: dict | None = None):
        self.learner = learner
        self.n_neighbors = n_neighbors
        self.prefit = prefit
        self.index_kind = index_kind
        self.backend = backend
        self.index_params = index_params

    def _validate_params(self) -> None:
        who = type(self).__name__
        check_scalar_param(self.n_neighbors, "n_neighbors", who, kind="int", low=1)
        if not isinstance(self.prefit, (bool, np.bool_)):
            raise TypeError(f"{who}: parameter prefit={self.prefit!r} must be a bool.")
        check_choice_param(self.index_kind, "index_kind", who, KINDS)
        check_choice_param(self.backend, "backend", who, BACKENDS)
        if self.index_params is not None and not isinstance(self.index_params, dict):
            raise TypeError(f"{who}: parameter index_params must be a dict or None, got "
                            f"{type(self.index_params).__name__}.")
        if self.learner is not None and not callable(getattr(self.learner, "embed_queries",
                                                             None)):
            raise TypeError(f"{who}: learner must be a tripletml triplet learner (with "
                            f"embed_queries), got {type(self.learner).__name__}.")

    def fit(self, X, y) -> "KNeighborsTripletClassifier":
        """Fit the learner (unless ``prefit``) and index the training rows.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self
        """
        who = type(self).__name__
        self._validate_params()
        if y is None:
            raise ValueError(f"{who}: fit requires class labels y.")
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"{who}: y must be 1-D, got shape {y.shape}.")
        check_classification_targets(y)
        if self.learner is None:
            learner = Euclidean()
        else:
            learner = self.learner if self.prefit else clone(self.learner)
        if self.prefit:
            check_is_fitted(learner)
        else:
            learner.fit(X, y)
        index = SimilarityIndex(learner, kind=self.index_kind, backend=self.backend,
                                **(self.index_params or {}))
        index.add(X)
        if index.ntotal != y.shape[0]:
            raise ValueError(f"{who}: X has {index.ntotal} rows but y has {y.shape[0]}.")
        self.classes_, self._y_codes = np.unique(y, return_inverse=True)
        self._y_codes = self._y_codes.reshape(-1)
        self.learner_ = learner
        self.index_ = index
        self.n_features_in_ = int(learner.n_features_in_)
        if hasattr(learner, "feature_names_in_"):
            self.feature_names_in_ = learner.feature_names_in_
        return self

    # -------------------------------------------------------------- neighbors
    def kneighbors(self, X, n_neighbors: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Training neighbors of each row of X, most similar first.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_queries, n_features)
            Query rows (for leave-one-out on the training rows use
            :func:`tripletml.metrics.knn_error` or ``evaluate_retrieval``
            with the index).
        n_neighbors : int or None
            Default ``self.n_neighbors``.

        Returns
        -------
        similarities : ndarray of shape (n_queries, n_neighbors)
            ``S(query, neighbor)`` (higher = closer; not distances).
        indices : ndarray of shape (n_queries, n_neighbors)
            Training row numbers (-1 where an approximate index found fewer).
        """
        check_is_fitted(self)
        who = type(self).__name__
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
            raise TypeError(f"{who}: n_neighbors must be an int, got {k!r}.")
        n_train = self.index_.ntotal
        if not 1 <= k <= n_train:
            raise ValueError(f"{who}: n_neighbors={k} must satisfy 1 <= n_neighbors <= "
                             f"{n_train} (the number of training rows).")
        return self.index_.search(self._check_query(X), int(k))

    def _votes(self, X) -> tuple[np.ndarray, np.ndarray]:
        """(nearest-first class codes of the neighbors, vote matrix)."""
        _, ids = self.kneighbors(X)
        valid = ids >= 0
        codes = np.where(valid, self._y_codes[np.maximum(ids, 0)], -1)
        n_cls = self.classes_.shape[0]
        votes = np.zeros((codes.shape[0], n_cls))
        rows = np.repeat(np.arange(codes.shape[0]), codes.shape[1])
        flat = codes.reshape(-1)
        keep = flat >= 0
        np.add.at(votes, (rows[keep], flat[keep]), 1.0)
        return codes, votes

    def predict_proba(self, X) -> np.ndarray:
        """Fraction of the neighbors in each class (columns: ``classes_``).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_queries, n_features)

        Returns
        -------
        ndarray of shape (n_queries, n_classes)
        """
        _, votes = self._votes(self._check_query(X))
        total = votes.sum(axis=1, keepdims=True)
        return votes / np.maximum(total, 1.0)

    def predict(self, X) -> np.ndarray:
        """Majority class of the neighbors (class tie: the class of the
        nearest neighbor among the tied classes).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_queries, n_features)

        Returns
        -------
        ndarray of shape (n_queries,)
        """
        codes, votes = self._votes(self._check_query(X))
        top = votes.max(axis=1, keepdims=True)
        rows = np.arange(codes.shape[0])
        # the first neighbor (nearest) whose class has the most votes
        safe = np.maximum(codes, 0)
        win = (votes[rows[:, None], safe] == top) & (codes >= 0)
        first = np.argmax(win, axis=1)
        return self.classes_[codes[rows, first]]

    def _check_query(self, X):
        if X is None:
            raise ValueError(f"{type(self).__name__}: X must not be None.")
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
