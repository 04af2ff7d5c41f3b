"""Feature preprocessing fitted as part of a triplet learner.

Every triplet learner has a ``preprocessing`` parameter; ``fit`` fits the
statistics below on the training X, transforms X, and runs the solver on the
result.  Every method that takes X afterwards (``similarity``,
``pair_score``, ``decision_function``, ``transform``, ``embed_queries``,
``embed_database``, ``score``, ``objective``, ``partial_fit``) applies the
same map first, so the model works on raw features while its learned matrix
(``W_``, ``M_``, ``components_``, ``get_bilinear_matrix()``) lives in the
preprocessed coordinates.

The modes (``z`` is the preprocessed row of a raw row ``x``):

``None``
    ``z = x`` (nothing fitted; sparse input stays sparse).
``"center"``
    ``z = x - mean``.
``"standardize"``
    ``z = (x - mean) / std`` per column; a column whose standard deviation is
    zero (to rounding: below ``10 eps max(|mean|, 1)``) keeps scale 1, so it
    becomes 0, never NaN.
``"whiten"``
    Standardise, then ZCA-whiten (ZCA on the correlation matrix):
    ``z = ((x - mean) / std) P`` with ``P = U diag(lambda^-1/2) U^T`` where
    ``U diag(lambda) U^T`` is the covariance of the standardised training
    rows (which then have identity covariance).  Constant columns keep
    std 1; eigenvalues below ``1e-10 lambda_max`` (directions without
    variance) get factor 0.  Stored as one d x d matrix
    ``diag(1/std) P``; refused above :data:`MAX_WHITEN_FEATURES` features.
``"auto"``
    Decided from the training X by :func:`resolve_preprocessing`:
    ``"standardize"`` unless X is sparse with more than
    :data:`MAX_DENSIFY_FEATURES` columns (high-dimensional sparse input such
    as tf-idf, left alone: ``None``).  The chosen mode is stored in the
    fitted attribute ``preprocessing_``.

Centring makes rows dense: a scipy.sparse X is densified only when it has at
most :data:`MAX_DENSIFY_FEATURES` columns; above that, an explicit
``"center"``, ``"standardize"`` or ``"whiten"`` raises ValueError.

The statistics are plain float64 arrays (``preprocessing_mean_`` of shape
(d,), ``preprocessing_scale_`` (d,), ``preprocessing_whitener_`` (d, d)),
saved and loaded with the model without pickle.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import scipy.sparse as sp

__all__ = ["PREPROCESSING_MODES", "MAX_DENSIFY_FEATURES", "MAX_WHITEN_FEATURES",
           "check_preprocessing", "resolve_preprocessing", "fit_preprocessing",
           "apply_preprocessing", "PREPROCESSING_PARAM_DOC", "document_preprocessing"]

#: The numpydoc entry of the ``preprocessing`` parameter, written once for
#: every learner whose default is ``"auto"`` (see :func:`document_preprocessing`).
PREPROCESSING_PARAM_DOC = """    preprocessing : {"auto", "standardize", "center", "whiten"} or None, default="auto"
        Feature scaling fitted on the training X and applied to every X the
        model sees (see :mod:`tripletml.preprocessing`).  ``"auto"``:
        ``"standardize"`` (centre, divide by the column standard deviation;
        constant columns become 0), except scipy.sparse X with more than
        2000 features, left as it is (``None``).  The fitted mode is
        ``preprocessing_``; the learned matrix lives in the preprocessed
        coordinates.  ``None`` reproduces the paper's setting on raw features.
"""


def document_preprocessing(cls: type) -> type:
    """Class decorator: replace the line ``    {preprocessing}`` of the
    class docstring by :data:`PREPROCESSING_PARAM_DOC`."""
    if cls.__doc__ and "    {preprocessing}\n" in cls.__doc__:
        cls.__doc__ = cls.__doc__.replace("    {preprocessing}\n", PREPROCESSING_PARAM_DOC)
    return cls

#: the values of every triplet learner's ``preprocessing`` parameter
PREPROCESSING_MODES = (None, "center", "standardize", "whiten", "auto")
#: sparse X with more columns than this is never densified (centring refused)
MAX_DENSIFY_FEATURES = 2000
#: "whiten" stores a d x d matrix: refused above this many features
MAX_WHITEN_FEATURES = 2000
#: relative eigenvalue floor of the whitener
_WHITEN_RTOL = 1e-10


def _who(estimator: Any) -> str:
    return estimator if isinstance(estimator, str) else type(estimator).__name__


def check_preprocessing(mode: Any, estimator: Any) -> None:
    """Raise ValueError (naming ``estimator``) unless ``mode`` is one of
    :data:`PREPROCESSING_MODES`."""
    if mode is not None and (not isinstance(mode, str) or mode not in PREPROCESSING_MODES):
        raise ValueError(f"{_who(estimator)}: parameter preprocessing={mode!r} must be one of "
                         "None, 'center', 'standardize', 'whiten', 'auto'.")


def resolve_preprocessing(mode: Optional[str], X, estimator: Any) -> Optional[str]:
    """The mode to fit on ``X``: ``mode`` itself, or for ``"auto"`` None when
    X is scipy.sparse with more than :data:`MAX_DENSIFY_FEATURES` columns
    and ``"standardize"`` otherwise.

    Raises
    ------
    ValueError
        An explicit centring mode on high-dimensional sparse X, or
        ``"whiten"`` with more than :data:`MAX_WHITEN_FEATURES` features.
    """
    check_preprocessing(mode, estimator)
    d = X.shape[1]
    if mode == "auto":
        return None if (sp.issparse(X) and d > MAX_DENSIFY_FEATURES) else "standardize"
    if mode is not None and sp.issparse(X) and d > MAX_DENSIFY_FEATURES:
        raise ValueError(
            f"{_who(estimator)}: preprocessing={mode!r} centres the features, which would "
            f"make this sparse X ({d} features) dense; use preprocessing=None (or 'auto', "
            "which leaves sparse input with more than "
            f"{MAX_DENSIFY_FEATURES} features alone), e.g. after "
            "sklearn.preprocessing.MaxAbsScaler or l2-normalised tf-idf rows.")
    if mode == "whiten" and d > MAX_WHITEN_FEATURES:
        raise ValueError(
            f"{_who(estimator)}: preprocessing='whiten' needs a {d} x {d} whitening matrix; "
            f"it is limited to {MAX_WHITEN_FEATURES} features. Use 'standardize' (O(d) "
            "memory) or reduce the dimension first (e.g. sklearn.decomposition.PCA).")
    return mode


def _dense(X) -> np.ndarray:
    if sp.issparse(X):
        X = X.toarray()
    return np.asarray(X, dtype=np.float64)


def _mean_std(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and standard deviation, computed on columns divided by
    their largest magnitude so that large finite features do not overflow."""
    mag = np.max(np.abs(X), axis=0) if X.shape[0] else np.zeros(X.shape[1])
    mag = np.where(mag > 0, mag, 1.0)
    Z = X / mag
    mean = Z.mean(axis=0)
    std = np.sqrt(np.maximum(np.mean((Z - mean) ** 2, axis=0), 0.0))
    return mean * mag, std * mag


def fit_preprocessing(mode: Optional[str], X, estimator: Any) -> dict[str, np.ndarray]:
    """Fit the statistics of ``mode`` (already resolved, see
    :func:`resolve_preprocessing`) on the training rows X.

    Parameters
    ----------
    mode : {None, "center", "standardize", "whiten"}
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
        Finite training rows (sparse only with at most
        :data:`MAX_DENSIFY_FEATURES` columns when ``mode`` is not None).
    estimator : estimator or str
        Named in error messages.

    Returns
    -------
    stats : dict
        ``{}`` for None; ``{"mean"}`` for "center"; ``{"mean", "scale"}``
        (``1 / std``, 1 for constant columns) for "standardize";
        ``{"mean", "whitener"}`` for "whiten".  Arrays are float64.
    """
    if mode is None:
        return {}
    if mode not in ("center", "standardize", "whiten"):
        raise ValueError(f"{_who(estimator)}: unresolved preprocessing mode {mode!r}.")
    Xd = _dense(X)
    mean, std = _mean_std(Xd)
    if mode == "center":
        return {"mean": mean}
    if mode == "standardize":
        const = std <= 10 * np.finfo(float).eps * np.maximum(np.abs(mean), 1.0)
        return {"mean": mean, "scale": np.where(const, 1.0, 1.0 / np.where(const, 1.0, std))}
    # whiten: covariance of columns scaled to unit std (conditioning), then ZCA
    s = np.where(std > 0, std, 1.0)
    Z = (Xd - mean) / s
    cov = (Z.T @ Z) / max(Z.shape[0], 1)
    lam, U = np.linalg.eigh(0.5 * (cov + cov.T))
    top = float(lam.max()) if lam.size else 0.0
    keep = lam > _WHITEN_RTOL * top if top > 0 else np.zeros(lam.shape, bool)
    f = np.zeros_like(lam)
    f[keep] = 1.0 / np.sqrt(lam[keep])
    P = (U * f) @ U.T
    whitener = P / s[:, None]                    # (x - mean) / s @ P
    return {"mean": mean, "whitener": np.ascontiguousarray(whitener)}


def apply_preprocessing(X, mean: Optional[np.ndarray] = None,
                        scale: Optional[np.ndarray] = None,
                        whitener: Optional[np.ndarray] = None):
    """The preprocessed rows ``(X - mean) * scale`` or ``(X - mean) @ whitener``.

    With no statistics X is returned unchanged (sparse stays sparse);
    otherwise the result is a dense float64 array (sparse X is densified:
    callers refuse high-dimensional sparse input at fit time).
    """
    if mean is None and scale is None and whitener is None:
        return X
    Z = _dense(X)
    if mean is not None:
        Z = Z - mean
    if scale is not None:
        Z = Z * scale
    if whitener is not None:
        Z = Z @ whitener
    return np.ascontiguousarray(Z, dtype=np.float64)
