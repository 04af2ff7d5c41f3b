"""Shared estimator API.

Every learner derives from :class:`TripletLearner` and one of two mixins:

* :class:`BilinearMixin` -- similarity ``S(x, y) = x^T W y`` (OASIS, SDCA,
  LORETA, COMET).  Larger means more similar.
* :class:`MahalanobisMixin` -- distance ``d(x, y) = (x - y)^T M (x - y)`` with
  ``M = L^T L`` (low-rank DML, SML, ...).  The similarity is ``-d``, so
  "higher = more similar" holds for every learner and the retrieval metrics
  work unchanged.

``fit(X, y=None, *, triplets=None)`` samples ``n_triplets`` random class
triplets from ``y`` (see :mod:`tripletml.triplets`) unless an explicit
``(m, 3)`` triplet index array is given, in which case ``y`` is ignored.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.validation import check_is_fitted

from ._validation import check_random_state, check_triplets, check_X
from .linalg import rowwise_dot
from .triplets import random_class_triplets

__all__ = ["TripletLearner", "BilinearMixin", "MahalanobisMixin", "History",
           "MODEL_REGISTRY"]

#: name -> class, filled by subclassing; used by :func:`tripletml.load_model`
#: so that loading never imports or unpickles arbitrary objects.
MODEL_REGISTRY: dict[str, type] = {}

_CHUNK_BYTES = 64 * 2**20


def _chunk_rows(n_rows: int, width: int) -> int:
    return max(1, min(n_rows, _CHUNK_BYTES // (8 * max(1, width))))


class History:
    """Collects ``history_``: a dict of equal-length lists, one entry per
    record (``step`` and ``seconds`` always present)."""

    def __init__(self, previous: dict | None = None, keys: tuple[str, ...] = ()):
        self.data: dict[str, list] = {k: list(v) for k, v in (previous or {}).items()}
        for k in ("step", "seconds") + tuple(keys):
            self.data.setdefault(k, [])
        self._t0 = time.perf_counter()
        self._offset = self.data["seconds"][-1] if self.data["seconds"] else 0.0

    def record(self, step: int, **values: Any) -> None:
        n = len(self.data["step"])
        self.data["step"].append(int(step))
        self.data["seconds"].append(self._offset + time.perf_counter() - self._t0)
        for k, v in values.items():
            col = self.data.setdefault(k, [None] * n)
            col.append(float(v) if isinstance(v, (float, np.floating, int, np.integer)) else v)
        for k, col in self.data.items():
            if len(col) < n + 1:
                col.append(None)


class TripletLearner(BaseEstimator):
    """Base class: validation, triplet handling, scoring and persistence.

    Subclasses implement ``_fit(X, triplets, rng)`` and the similarity
    primitives of their mixin.
    """

    #: whether scipy.sparse X is accepted
    _accepts_sparse: bool = True
    #: whether fit needs supervision (labels or triplets)
    _needs_triplets: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            MODEL_REGISTRY[cls.__name__] = cls

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse
        return tags

    # ------------------------------------------------------------------ fit
    def _validate_params(self) -> None:
        """Check hyper-parameters (override; raise TypeError/ValueError)."""

    def _prepare_fit(self, X, y=None, triplets=None):
        """Validate inputs, sample triplets; returns (X, triplets, rng)."""
        self._validate_params()
        X = check_X(X, self, accept_sparse=self._accepts_sparse)
        rng = check_random_state(getattr(self, "random_state", None), self)
        if not self._needs_triplets:
            return X, None, rng
        if triplets is not None:
            triplets = check_triplets(triplets, X.shape[0], self)
        else:
            if y is None:
                raise ValueError(f"{type(self).__name__}: fit needs class labels y (to sample "
                                 "triplets) or an explicit triplets=(m, 3) index array.")
            if X.shape[0] < 3:
                raise ValueError(f"{type(self).__name__}: X has {X.shape[0]} samples; at "
                                 "least 3 are needed to form a triplet.")
            from .triplets import check_labels
            check_labels(y, X.shape[0], self)
            triplets = random_class_triplets(y, self.n_triplets, random_state=rng)
        return X, triplets, rng

    def fit(self, X, y=None, *, triplets=None):
        """Fit the model.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
            Class labels; ``n_triplets`` random class triplets are sampled
            from them when ``triplets`` is not given.
        triplets : array-like of shape (n_triplets, 3), optional
            Explicit ``(query, positive, negative)`` row indices into X.

        Returns
        -------
        self
        """
        X, triplets, rng = self._prepare_fit(X, y, triplets)
        if hasattr(self, "n_features_in_"):
            del self.n_features_in_  # a failed refit must not look fitted
        self._fit(X, triplets, rng)
        self.n_features_in_ = X.shape[1]
        return self

    def _fit(self, X, triplets, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ scoring
    def _check_fitted_X(self, X, name="X"):
        check_is_fitted(self, "n_features_in_")
        return check_X(X, self, accept_sparse=True, n_features=self.n_features_in_, name=name)

    def pair_score(self, X1, X2) -> np.ndarray:
        """Row-wise similarity ``S(X1[i], X2[i])`` (higher = more similar)."""
        X1 = self._check_fitted_X(X1, "X1")
        X2 = self._check_fitted_X(X2, "X2")
        if X1.shape[0] != X2.shape[0]:
            raise ValueError(f"{type(self).__name__}: X1 and X2 must have the same number of "
                             f"rows, got {X1.shape[0]} and {X2.shape[0]}.")
        return self._pair_score(X1, X2)

    def similarity(self, X, Y=None) -> np.ndarray:
        """Similarity matrix ``S[i, j] = S(X[i], Y[j])`` (Y defaults to X)."""
        X = self._check_fitted_X(X, "X")
        Y = X if Y is None else self._check_fitted_X(Y, "Y")
        return self._similarity(X, Y)

    def decision_function(self, X, triplets) -> np.ndarray:
        """``S(q, p+) - S(q, p-)`` for each triplet (positive = satisfied)."""
        X = self._check_fitted_X(X)
        t = check_triplets(triplets, X.shape[0], self)
        out = np.empty(t.shape[0])
        step = _chunk_rows(t.shape[0], X.shape[1])
        for s in range(0, t.shape[0], step):
            c = t[s:s + step]
            Q = X[c[:, 0]]
            out[s:s + step] = self._pair_score(Q, X[c[:, 1]]) - self._pair_score(Q, X[c[:, 2]])
        return out

    def score(self, X, y) -> float:
        """Leave-one-out mean average precision of retrieval within X."""
        from .metrics import evaluate_retrieval

        X = self._check_fitted_X(X)
        return float(evaluate_retrieval(self, X, np.asarray(y), k=())["map"])

    # -------------------------------------------------------- persistence
    #: fitted (d, d) arrays, checked when a model is loaded
    _square_attrs: tuple[str, ...] = ()

    def _check_loaded(self) -> None:
        """Consistency of a loaded model (raise on a mismatch)."""
        d = self.n_features_in_
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"n_features_in_={d!r} is not a positive integer")
        for name in self._square_attrs:
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.shape != (d, d):
                raise ValueError(f"{name} has shape {getattr(arr, 'shape', None)}, expected "
                                 f"({d}, {d})")

    def save(self, path) -> None:
        """Save to ``.npz`` (arrays) with JSON metadata; see
        :func:`tripletml.load_model`."""
        from .persistence import save_model

        save_model(self, path)


class BilinearMixin:
    """Similarity ``S(x, y) = x^T W y``.

    Subclasses implement ``_apply(X)`` returning the dense product ``X W``
    (or ``(X A) B^T`` for a factored W) and ``get_bilinear_matrix()``.
    """

    similarity_kind = "similarity"

    def _apply(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_bilinear_matrix(self) -> np.ndarray:
        """The d x d matrix W of ``S(x, y) = x^T W y``."""
        raise NotImplementedError

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


class MahalanobisMixin:
    """Distance ``d(x, y) = (x - y)^T M (x - y)``, ``M = L^T L``.

    Subclasses set ``components_`` (L, shape (r, d)).  ``similarity`` and
    ``pair_score`` return ``-d`` so larger means closer.
    """

    similarity_kind = "distance"

    def transform(self, X) -> np.ndarray:
        """Embed X as ``X L^T`` (Euclidean distances there = learned ones)."""
        X = self._check_fitted_X(X)
        return self._transform(X)

    def _transform(self, X):
        L = self.components_
        return np.asarray(X @ L.T)

    def get_mahalanobis_matrix(self) -> np.ndarray:
        """``M = L^T L`` (d x d)."""
        check_is_fitted(self, "n_features_in_")
        L = self.components_
        return L.T @ L

    def pair_distance(self, X1, X2) -> np.ndarray:
        """Row-wise squared Mahalanobis distance ``d(X1[i], X2[i])``."""
        return -self.pair_score(X1, X2)

    def get_metric(self):
        """A callable ``metric(u, v)`` returning the squared distance, usable
        with scikit-learn's ``metric=`` arguments."""
        check_is_fitted(self, "n_features_in_")

        def metric(u, v):
            diff = self._transform(np.atleast_2d(np.asarray(u, float) - np.asarray(v, float)))
            return float(np.sum(np.asarray(diff) ** 2))

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
