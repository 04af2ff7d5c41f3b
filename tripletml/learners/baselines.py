"""No-learning baselines reported by every paper: Euclidean distance and the
plain dot product (cosine similarity for l2-normalised data)."""
from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..linalg import rowwise_dot
from ..base import BilinearMixin, MahalanobisMixin, TripletLearner

__all__ = ["Euclidean", "DotProduct"]


class Euclidean(MahalanobisMixin, TripletLearner):
    """Squared Euclidean distance (M = I); similarity is ``-||x - y||^2``.

    ``fit(X, y=None)`` only records ``n_features_in_``; labels and triplets
    are accepted and ignored so the baseline drops into any pipeline.
    ``transform`` is the identity (sparse input stays sparse) after the
    preprocessing.

    Parameters
    ----------
    preprocessing : {None, "auto", "standardize", "center", "whiten", "sphere"}, default=None
        Feature scaling fitted on the training X (see
        :mod:`tripletml.preprocessing`).  The default ``None`` is the
        baseline on raw features ("no learning"); ``"standardize"`` gives the
        Euclidean distance of standardised features.
    """

    _needs_triplets = False
    _partitioned_strategy = "statistics"    # the preprocessing is the model
    _feature_unit = False       # no scale-dependent parameter: raw distances
    _fitted_arrays: dict = {}   # components_ is built on demand, never stored
    # checked by check_preprocessing in fit
    _parameter_constraints = {"preprocessing": ["no_validation"]}

    def __init__(self, preprocessing=None):
        self.preprocessing = preprocessing

    def _fit(self, X, triplets, rng):
        self.history_ = {"step": [0], "seconds": [0.0]}

    @property
    def components_(self) -> np.ndarray:
        """Identity L (d x d), built on demand."""
        check_is_fitted(self)
        return np.eye(self.n_features_preprocessed_)

    def _transform(self, X):
        return X


class DotProduct(BilinearMixin, TripletLearner):
    """Plain inner product ``x^T y`` (W = I); cosine for normalised rows.

    Parameters
    ----------
    preprocessing : {None, "auto", "standardize", "center", "whiten", "sphere"}, default=None
        Feature scaling fitted on the training X (see
        :mod:`tripletml.preprocessing`).  The default ``None`` is the
        baseline on raw features ("no learning"); ``"standardize"`` gives the
        inner product of standardised features.
    """

    _needs_triplets = False
    _partitioned_strategy = "statistics"    # the preprocessing is the model
    _feature_unit = False       # no scale-dependent parameter: raw inner products
    _fitted_arrays: dict = {}   # W = I is built on demand, never stored
    # checked by check_preprocessing in fit
    _parameter_constraints = {"preprocessing": ["no_validation"]}

    def __init__(self, preprocessing=None):
        self.preprocessing = preprocessing

    def _fit(self, X, triplets, rng):
        self.history_ = {"step": [0], "seconds": [0.0]}

    def _apply(self, X):
        return X.toarray() if hasattr(X, "toarray") else np.asarray(X)

    def _similarity(self, X, Y):
        S = X @ Y.T
        return S.toarray() if hasattr(S, "toarray") else np.asarray(S)

    def _pair_score(self, X1, X2):
        return rowwise_dot(X1, X2)

    def _bilinear_matrix(self) -> np.ndarray:
        return np.eye(self.n_features_preprocessed_)
