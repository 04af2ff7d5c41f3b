"""No-learning baselines reported by every paper: Euclidean distance and the
plain dot product (cosine similarity for l2-normalized data)."""
from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from tripletml.linalg import rowwise_dot
from tripletml.core.base import BilinearMixin, MahalanobisMixin, TripletLearner
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform
from tripletml.distributed import statistics

__all__ = ["Euclidean", "DotProduct"]


def _identity_out(X, k):
    """The first ``k`` columns of the preprocessed X (all for None), as a new
    array (sparse stays sparse): ``transform`` of an identity model; a ``k``
    above the number of columns appends zero columns (exactly ``k``)."""
    from tripletml.core.base import _pad_columns

    if k is not None and k < X.shape[1]:
        X = X[:, :k]
    X = X.copy() if hasattr(X, "copy") else np.array(X)
    return X if k is None else _pad_columns(X, int(k))


@document_transform
class Euclidean(MahalanobisMixin, TripletLearner):
    """Squared Euclidean distance (M = I); similarity is ``-||x - y||^2``.

    ``fit(X, y=None)`` only records ``n_features_in_``; labels and triplets
    are accepted and ignored so the baseline drops into any pipeline.
    ``transform`` is the identity (sparse input stays sparse) after the
    preprocessing; with ``n_components`` it keeps the first
    ``n_components`` (preprocessed) columns: every direction of ``M = I``
    has eigenvalue 1, so the leading ones are the first.

    Parameters
    ----------
    preprocessing : {None, "auto", "standardize", "center", "whiten", "sphere"}, default=None
        Feature scaling fitted on the training X (see
        :mod:`tripletml.core.preprocessing`).  The default ``None`` is the
        baseline on raw features ("no learning"); ``"standardize"`` gives the
        Euclidean distance of standardized features.
    n_components : int or None, default=None
        Width of ``transform``: the first ``n_components`` columns of the
        preprocessed rows (None: all; a value above their number appends
        zero columns, so ``transform`` has exactly ``n_components``).  The
        distance is unchanged.
    {preprocessor}

    Attributes
    ----------
    transform_fidelity_ : float
        ``n_components_out / d``, the share of ``||I||_F^2`` that
        ``transform`` keeps (1.0 without ``n_components``).
    """

    _needs_triplets = False
    _partitioned_strategy = statistics.STRATEGY    # the preprocessing is the model
    #: no learning: AutoSimilarity scores it whatever its time budget says
    _learns = False
    _feature_unit = False       # no scale-dependent parameter: raw distances
    _fitted_arrays: dict = {}   # components_ is built on demand, never stored
    _parameter_constraints = {
        "preprocessing": ["no_validation"],    # checked by check_preprocessing in fit
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],     # resolved by the base class
    }

    def __init__(self, preprocessing=None, *, n_components=None, preprocessor=None):
        self.preprocessing = preprocessing
        self.n_components = n_components
        self.preprocessor = preprocessor

    def _fit(self, X, triplets, rng):
        self.history_ = {"step": [0], "seconds": [0.0]}

    @property
    def components_(self) -> np.ndarray:
        """Identity L (d x d), built on demand."""
        check_is_fitted(self)
        return np.eye(self.n_features_preprocessed_)

    def _transform(self, X):
        return X

    def _transform_out(self, X):
        return _identity_out(X, self.n_components)


@document_transform
class DotProduct(BilinearMixin, TripletLearner):
    """Plain inner product ``x^T y`` (W = I); cosine for normalized rows.

    ``transform`` is the identity (sparse input stays sparse) after the
    preprocessing, an exact embedding (``transform(X) @ transform(Y).T ==
    similarity(X, Y)``); with ``n_components`` it keeps the first
    ``n_components`` (preprocessed) columns: every eigenvalue of ``W = I``
    is 1, so the leading directions are the first.

    Parameters
    ----------
    preprocessing : {None, "auto", "standardize", "center", "whiten", "sphere"}, default=None
        Feature scaling fitted on the training X (see
        :mod:`tripletml.core.preprocessing`).  The default ``None`` is the
        baseline on raw features ("no learning"); ``"standardize"`` gives the
        inner product of standardized features.
    n_components : int or None, default=None
        Width of ``transform``: the first ``n_components`` columns of the
        preprocessed rows (None, or a value above their number: all).  The
        similarity is unchanged.
    {preprocessor}

    Attributes
    ----------
    transform_fidelity_ : float
        ``n_components_out / d``, the share of ``||I||_F^2`` that
        ``transform`` keeps (1.0 without ``n_components``).
    """

    _needs_triplets = False
    _partitioned_strategy = statistics.STRATEGY    # the preprocessing is the model
    #: no learning: AutoSimilarity scores it whatever its time budget says
    _learns = False
    _feature_unit = False       # no scale-dependent parameter: raw inner products
    _fitted_arrays: dict = {}   # W = I is built on demand, never stored
    _parameter_constraints = {
        "preprocessing": ["no_validation"],    # checked by check_preprocessing in fit
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],     # resolved by the base class
    }

    def __init__(self, preprocessing=None, *, n_components=None, preprocessor=None):
        self.preprocessing = preprocessing
        self.n_components = n_components
        self.preprocessor = preprocessor

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

    # transform: the identity (no eigendecomposition of I)
    def _transform_out(self, X):
        return _identity_out(X, self.n_components)

    def _transform_width(self) -> int:
        d = int(self.n_features_preprocessed_)
        return d if self.n_components is None else int(self.n_components)

    def _transform_fidelity(self) -> float:
        d = int(self.n_features_preprocessed_)
        return min(self._transform_width(), d) / d
