"""Feature preprocessing fitted as part of a triplet learner.

Every triplet learner has a ``preprocessing`` parameter; ``fit`` fits the
statistics below on the training X, transforms X, and runs the solver on the
result.  Every method that takes X afterwards (``similarity``,
``pair_score``, ``triplet_score``, ``transform``, ``embed_queries``,
``embed_database``, ``score``, ``objective``, ``partial_fit``) applies the
same map first, so the model works on raw features while its learned matrix
(``W_``, ``M_``, ``components_``, ``get_bilinear_matrix()``) lives in the
preprocessed coordinates.

The modes (``z`` is the preprocessed row of a raw row ``x``):

``None``
    ``z = x / unit`` (sparse input stays sparse), with ``unit`` the feature
    unit of the training rows (:func:`feature_unit`: the RMS of their
    non-zero entries).  Nothing per column: the rows keep their geometry,
    and the model is scale-equivariant (``c * X`` ranks as X; the step
    sizes, the margin of 1 and the regularization act on rows of unit RMS
    entries whatever the caller's unit).  ``get_bilinear_matrix()`` and
    ``get_mahalanobis_matrix()`` report the learned matrix in the caller's
    coordinates.  A model file of tripletml 0.1 or 0.2 (no unit) keeps its
    raw meaning.
``"raw"``
    ``z = x``: the rows exactly as given, nothing fitted (the fitted mode
    is None without a unit).  Step sizes, caps, margins and regularization
    then act in the caller's numbers, as a paper states them on its own
    rows: for reproducing a published experiment, or for a metric-learn
    user who expects no preprocessing at all.  Not scale-equivariant
    (``c * X`` trains a different model).
``"center"``
    ``z = (x - mean) / unit`` (the unit of the centered rows).
``"standardize"``
    ``z = (x - mean) / std`` per column; a column whose standard deviation is
    zero (to rounding: below ``10 eps |mean|``, or below the smallest normal
    float) keeps scale 1, so it
    becomes 0, never NaN.
``"whiten"``
    Standardize, then ZCA-whiten (ZCA on the correlation matrix):
    ``z = ((x - mean) / std) P`` with ``P = U diag(lambda^-1/2) U^T`` where
    ``U diag(lambda) U^T`` is the covariance of the standardized training
    rows (which then have identity covariance).  Constant columns keep
    std 1; eigenvalues below ``1e-10 lambda_max`` (directions without
    variance) get factor 0.  Stored as one d x d matrix
    ``diag(1/std) P``; refused above :data:`MAX_WHITEN_FEATURES` features.
``"sphere"``
    Standardize, then lift each row onto the sphere of radius ``s`` in
    d + 1 dimensions by the inverse stereographic projection.  With ``z``
    the standardized row and ``u = z / s``::

        phi(z) = s [2 u, ||u||^2 - 1] / (||u||^2 + 1)        (||phi(z)|| = s)

    ``s`` (``radius_``; ``preprocessing_radius_`` on the learner) is the
    median Euclidean norm of the standardized training rows (1 when that
    median is 0).  A row of that
    median norm keeps its coordinates (``phi(z) = [z, 0]``), so the lifted
    rows have the scale the learners' step sizes and margins were tuned on;
    the center goes to the pole ``[0, -s]``.  Since every lifted row has
    norm s, ``phi(q) . phi(x) = s^2 - ||phi(q) - phi(x)||^2 / 2`` and::

        ||phi(q) - phi(x)||^2 = 4 ||q - x||^2
                                / ((1 + ||q / s||^2) (1 + ||x / s||^2)),

    so a bilinear similarity ``phi(q)^T W phi(x)`` with ``W = I`` ranks the
    database for a query q by the Euclidean distance ``||q - x||`` divided
    by ``sqrt(1 + ||x / s||^2)`` (a mild reweighting that favors rows far
    from the center, neutral for rows with ``||x|| << s``).
    Why: for a fixed query a bilinear score ``q^T W x`` on the raw (or
    standardized) rows is *linear* in x, so it ranks the database along a
    single direction per query; it has no ``-||x||^2`` term and cannot
    express "close to q".  On iris, whose three classes lie along one
    direction, every bilinear learner stayed below the Euclidean distance
    with ``"standardize"``.  On the sphere the inner
    product is a decreasing function of a (reweighted) distance, and a
    learned ``W`` adds curvature a linear score lacks.  The measurements
    behind the radius (unit sphere, 0.5 / 1 / 2 times the median norm, and
    the map ``[z, s] / ||[z, s]||``) are in ``results/defaults/README.md``.
    The model's internal dimension is d + 1: ``W_`` and the factors have
    d + 1 rows (``n_features_preprocessed_``) while ``n_features_in_`` stays
    the raw d.  Stored as the standardization arrays plus the float ``s``.
``"normalize"``
    ``z = (x / ||x||) / unit``: each row divided by its Euclidean norm (a
    zero row stays zero), then by the feature unit of the normalized
    training rows.  Every model then starts from the *cosine* of the raw
    rows (``W = I`` and ``M = I`` rank by ``cos(x, y)``), the no-learning
    baseline for features taken from a network.  A row's scale carries no
    information under this map, so ``c * X`` ranks as X and so does any
    per-row rescaling.  Not linear: the learned matrix lives in the
    normalized coordinates (as with ``"sphere"``).
``"auto"``
    Decided from the training X, its columns and the learner by
    :func:`resolve_preprocessing` and :class:`Preprocessor`:

    * ``"normalize"`` for every learner when X looks like features from a
      network (:func:`looks_like_network_features`: dense, at least
      :data:`MIN_NETWORK_FEATURES` columns, continuous values -- more than
      :data:`QUANTISED_LEVELS` distinct non-zero values, so not pixels,
      counts, indicators or Likert answers --, and non-negative like ReLU
      activations or already l2-normalized like embeddings).  Such columns
      share one unit (activations of one layer) and are often rare: dividing
      each by its own deviation makes a rare activation the loudest
      coordinate (on the Zappos shoes' AlexNet features standardizing falls
      well below the cosine; BENCHMARKS.md), while the cosine is the
      geometry the network was trained for.
    * None when X is sparse with more than :data:`MAX_DENSIFY_FEATURES`
      columns (high-dimensional sparse input such as tf-idf or counts, left
      sparse; divided by its feature unit).
    * None for a bilinear learner when every row has the same norm
      (:func:`rows_on_a_sphere`: one-hot categorical rows, l2-normalized
      rows): the rows already lie on a sphere, where the inner product ranks
      like the Euclidean distance, and the lift would only distort them
      (one-hot categories: BENCHMARKS.md).
    * Otherwise the learner family's mode, the class attribute
      ``_auto_preprocessing`` (``"sphere"`` for the bilinear learners,
      ``"standardize"`` for the Mahalanobis ones), with the columns scaled
      by kind (:func:`tripletml.core.column_kinds.type_aware_scale`) instead of
      each by its own standard deviation: a two-valued indicator by its
      amplitude ``|b - a|`` (dividing a rare indicator by its small std makes
      it the loudest coordinate); columns that share one unit (pixels
      0..255, counts 0..16 on one lattice) by one pooled deviation
      (near-constant border pixels are not blown up); every other column,
      e.g. mixed physical units, by its own standard deviation.  KISSME keeps per-column standard
      deviations (``_auto_column_scale = False``): its closed form is
      equivariant to column scales, which only move its shrinkage.
      Measurements: BENCHMARKS.md, "Column kinds"
      (``python -m bench.bench_column_kinds``).

    The chosen mode is the fitted attribute ``preprocessing_``, and what was
    decided and why (per column kind: how many columns, which scale) is
    ``preprocessing_decision_`` (saved in model files).

Centering makes rows dense: a scipy.sparse X is densified only when it has at
most :data:`MAX_DENSIFY_FEATURES` columns; above that, an explicit
``"center"``, ``"standardize"`` or ``"whiten"`` raises ValueError.

A learner holds the fitted map as one :class:`Preprocessor` in
``scaler_`` (``fit``, ``transform``, ``second_moment``,
``n_features_out_``); its statistics are plain float64 arrays (``mean_`` of
shape (d,), ``scale_`` (d,), ``whitener_`` (d, d)) and the float
``radius_``.  The learner's ``preprocessing_`` (the fitted mode) and
``preprocessing_mean_`` / ``_scale_`` / ``_whitener_`` / ``_radius_`` read
them; a model file stores them under those names, without pickle.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from tripletml.core.arrayspec import ArraySpec, check_fitted_arrays

__all__ = ["Preprocessor", "PREPROCESSING_MODES", "CENTERING_MODES", "MAX_DENSIFY_FEATURES", "MAX_WHITEN_FEATURES",
           "MIN_NETWORK_FEATURES", "QUANTISED_LEVELS", "looks_like_network_features",
           "is_linear_mode", "normalize_rows",
           "check_preprocessing", "n_added_features", "feature_unit", "rows_on_a_sphere",
           "resolve_preprocessing", "fit_preprocessing", "apply_preprocessing",
           "sphere_radius", "sphere_lift", "PREPROCESSING_PARAM_DOC",
           "document_preprocessing"]

#: The numpydoc entry of the ``preprocessing`` parameter, written once for
#: every learner whose default is ``"auto"`` (see :func:`document_preprocessing`).
PREPROCESSING_PARAM_DOC = """    preprocessing : {"auto", "standardize", "center", "whiten", "sphere", "normalize", "raw"} or None, default="auto"
        Feature scaling fitted on the training X and applied to every X the
        model sees (see :mod:`tripletml.core.preprocessing`).  ``"auto"``:
        ``"normalize"`` (each row divided by its norm: the model starts at
        the cosine) for features that look like a network's (dense, at
        least 64 continuous columns, non-negative or l2-normalized rows);
        otherwise ``"sphere"`` for a bilinear learner (center and scale the columns,
        then lift the rows onto a sphere in d + 1 dimensions, so that
        ``W = I`` ranks like the Euclidean distance; no lift when the rows
        already have equal norms, e.g. one-hot rows) and ``"standardize"``
        for a Mahalanobis learner, the columns scaled by kind (indicators by
        their amplitude, columns sharing one unit such as pixels by one
        pooled deviation, others by their own); scipy.sparse X with more
        than 2000 features stays sparse (``None``).  The fitted mode is
        ``preprocessing_``, the reasons ``preprocessing_decision_``; the
        learned matrix lives in the preprocessed coordinates (d + 1 of them
        with ``"sphere"``).  ``None``: the raw rows divided by one fitted
        number (the RMS of the non-zero entries), so that the model is
        scale-equivariant; ``get_bilinear_matrix()`` then reports W in the
        caller's coordinates.  ``"raw"``: the rows exactly as given (steps,
        caps and margins in the caller's numbers, as in a paper; not
        scale-equivariant).
"""


def document_preprocessing(cls: type) -> type:
    """Class decorator: replace the line ``    {preprocessing}`` of the
    class docstring by :data:`PREPROCESSING_PARAM_DOC`."""
    if cls.__doc__ and "    {preprocessing}\n" in cls.__doc__:
        cls.__doc__ = cls.__doc__.replace("    {preprocessing}\n", PREPROCESSING_PARAM_DOC)
    return cls

#: the values of every triplet learner's ``preprocessing`` parameter
PREPROCESSING_MODES = (None, "center", "standardize", "whiten", "sphere", "normalize", "auto", "raw")
#: the modes that subtract a mean (a sparse X becomes dense); None and
#: "normalize" keep sparse rows sparse
CENTERING_MODES = ("center", "standardize", "whiten", "sphere")
#: the fitted modes that are not linear maps of the row differences
_NONLINEAR_MODES = ("sphere", "normalize")
#: a dense X needs at least this many columns to be taken for features from
#: a network (the narrowest layers used as features have 64 to 128 units)
MIN_NETWORK_FEATURES = 64
#: at most this many distinct non-zero values: the values are quantised
#: (8-bit pixels, counts, indicators, Likert answers), not activations
QUANTISED_LEVELS = 256
#: sparse X with more columns than this is never densified (centering refused)
MAX_DENSIFY_FEATURES = 2000
#: "whiten" stores a d x d matrix: refused above this many features
MAX_WHITEN_FEATURES = 2000
#: relative eigenvalue floor of the whitener
_WHITEN_RTOL = 1e-10
#: the mode "auto" picks for a dense or low-dimensional X when the learner
#: class declares no ``_auto_preprocessing``
_AUTO_DEFAULT = "standardize"


def _who(estimator: Any) -> str:
    return estimator if isinstance(estimator, str) else type(estimator).__name__


def check_preprocessing(mode: Any, estimator: Any) -> None:
    """Raise ValueError (naming ``estimator``) unless ``mode`` is one of
    :data:`PREPROCESSING_MODES`."""
    if mode is not None and (not isinstance(mode, str) or mode not in PREPROCESSING_MODES):
        raise ValueError(f"{_who(estimator)}: parameter preprocessing={mode!r} must be one of "
                         + ", ".join(map(repr, PREPROCESSING_MODES)) + ".")


def is_linear_mode(mode: Optional[str]) -> bool:
    """Whether a fitted mode maps row differences linearly (all but
    ``"sphere"`` and ``"normalize"``)."""
    return mode not in _NONLINEAR_MODES


def n_added_features(mode: Optional[str]) -> int:
    """Columns a fitted mode adds to the raw rows (1 for ``"sphere"``)."""
    return 1 if mode == "sphere" else 0


def resolve_preprocessing(mode: Optional[str], X, estimator: Any) -> Optional[str]:
    """The mode to fit on ``X``: ``mode`` itself, or for ``"auto"`` None when
    X is scipy.sparse with more than :data:`MAX_DENSIFY_FEATURES` columns
    and otherwise the estimator's ``_auto_preprocessing`` class attribute
    (``"sphere"`` for bilinear learners, ``"standardize"`` for the others).

    Raises
    ------
    ValueError
        An explicit centering mode on high-dimensional sparse X, or
        ``"whiten"`` with more than :data:`MAX_WHITEN_FEATURES` features.
    """
    check_preprocessing(mode, estimator)
    d = X.shape[1]
    if mode == "raw":
        return None
    if mode == "auto":
        return _resolve_auto(X, getattr(estimator, "_auto_preprocessing", _AUTO_DEFAULT))
    if mode in CENTERING_MODES and sp.issparse(X) and d > MAX_DENSIFY_FEATURES:
        raise ValueError(
            f"{_who(estimator)}: preprocessing={mode!r} centers the features, which would "
            f"make this sparse X ({d} features) dense; use preprocessing=None (or 'auto', "
            "which leaves sparse input with more than "
            f"{MAX_DENSIFY_FEATURES} features alone), e.g. after "
            "sklearn.preprocessing.MaxAbsScaler or l2-normalized tf-idf rows.")
    if mode == "whiten" and d > MAX_WHITEN_FEATURES:
        raise ValueError(
            f"{_who(estimator)}: preprocessing='whiten' needs a {d} x {d} whitening matrix; "
            f"it is limited to {MAX_WHITEN_FEATURES} features. Use 'standardize' (O(d) "
            "memory) or reduce the dimension first (e.g. sklearn.decomposition.PCA).")
    return mode


#: relative spread of the squared row norms below which the rows already lie
#: on a sphere (one-hot rows, l2-normalized rows)
_SPHERE_RTOL = 1e-6


def rows_on_a_sphere(X) -> bool:
    """Whether every row of X has the same Euclidean norm (to a relative
    1e-6 of the squared norms) and it is not 0: one-hot encoded categorical
    rows (k ones in every row), l2-normalized rows.  Such rows need no
    ``"sphere"`` lift: ``x . y = (||x||^2 + ||y||^2 - ||x - y||^2) / 2``
    already ranks like the Euclidean distance."""
    if X.shape[0] == 0:
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(X):
            sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
        else:
            Xd = np.asarray(X, dtype=np.float64)
            sq = np.einsum("ij,ij->i", Xd, Xd)
    hi, lo = float(np.max(sq)), float(np.min(sq))
    return bool(np.isfinite(hi) and hi > 0 and hi - lo <= _SPHERE_RTOL * hi)


def _resolve_auto(X, family: str) -> Optional[str]:
    """``"auto"`` on X for a learner family (its ``_auto_preprocessing``):
    None for scipy.sparse X with more than :data:`MAX_DENSIFY_FEATURES`
    columns; ``"normalize"`` for features from a network
    (:func:`looks_like_network_features`); None for a bilinear family
    (``"sphere"``) when the rows already lie on a sphere
    (:func:`rows_on_a_sphere`); else the family's mode."""
    if sp.issparse(X) and X.shape[1] > MAX_DENSIFY_FEATURES:
        return None
    if looks_like_network_features(X):
        return "normalize"
    if family == "sphere" and rows_on_a_sphere(X):
        return None
    return family


def network_summary(X) -> dict[str, Any]:
    """What :func:`looks_like_network_features` needs of a dense X, in one
    block pass: ``nonneg`` (every entry >= 0), ``sq_lo`` / ``sq_hi`` (the
    range of the squared row norms), ``values`` (up to
    ``QUANTISED_LEVELS + 1`` distinct non-zero values); mergeable across
    partitions by :func:`merge_network_summaries`."""
    Xd = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", Xd, Xd) if Xd.size else np.zeros(Xd.shape[0])
    seen = np.empty(0)
    for s0 in range(0, Xd.shape[0], _STAT_BLOCK_ROWS):
        if seen.size > QUANTISED_LEVELS:
            break
        b = Xd[s0:s0 + _STAT_BLOCK_ROWS]
        seen = np.unique(np.concatenate([seen, b[b != 0].ravel()]))
    return {"nonneg": bool(Xd.size == 0 or float(Xd.min()) >= 0.0),
            "sq_lo": float(sq.min()) if sq.size else np.inf,
            "sq_hi": float(sq.max()) if sq.size else -np.inf,
            "values": seen[:QUANTISED_LEVELS + 1]}


def merge_network_summaries(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two partitions' :func:`network_summary` as one."""
    vals = np.unique(np.concatenate([a["values"], b["values"]]))
    return {"nonneg": a["nonneg"] and b["nonneg"], "sq_lo": min(a["sq_lo"], b["sq_lo"]),
            "sq_hi": max(a["sq_hi"], b["sq_hi"]), "values": vals[:QUANTISED_LEVELS + 1]}


def network_decision(summary: dict[str, Any], n_features: int) -> bool:
    """The rule of :func:`looks_like_network_features` on a (merged)
    :func:`network_summary`."""
    if n_features < MIN_NETWORK_FEATURES or summary["values"].size <= QUANTISED_LEVELS:
        return False
    hi, lo = summary["sq_hi"], summary["sq_lo"]
    on_sphere = bool(np.isfinite(hi) and hi > 0 and hi - lo <= _SPHERE_RTOL * hi)
    return bool(summary["nonneg"] or on_sphere)


def looks_like_network_features(X) -> bool:
    """Whether X looks like features taken from a neural network, whose
    no-learning baseline is the cosine: a dense X with at least
    :data:`MIN_NETWORK_FEATURES` columns, continuous values (more than
    :data:`QUANTISED_LEVELS` distinct non-zero values: not 8-bit pixels,
    counts, indicators or Likert answers), and either non-negative (ReLU
    activations) or with rows of equal norm (l2-normalized embeddings).

    The rule reads the form of X, not its numbers: it is invariant to a
    positive rescaling of X, to permuted rows or columns and to duplicated
    rows.  Tabular data with mixed units rarely has 64 non-negative
    continuous columns; where it does (spectra, histograms) the cosine is a
    standard baseline too.
    """
    if sp.issparse(X) or X.ndim != 2 or X.shape[1] < MIN_NETWORK_FEATURES or not X.shape[0]:
        return False
    return network_decision(network_summary(X), X.shape[1])


def _dense(X) -> np.ndarray:
    if sp.issparse(X):
        X = X.toarray()
    return np.asarray(X, dtype=np.float64)


#: rows per block of the variance pass of :func:`_mean_std`
_STAT_BLOCK_ROWS = 2048


def _mean_std(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and standard deviation.

    The fast path sums through BLAS (``ones @ Z``: several times faster than
    a NumPy reduction over the rows of a narrow array), in blocks of rows,
    about the first row (the shifted-data algorithm: a constant column has
    the exact mean and a zero deviation).  Columns whose sums overflow, or
    whose deviation is so small that its squares may underflow (std below
    1e-150), are recomputed by :func:`_mean_std_scaled`.
    """
    n, d = X.shape
    if not n:
        return _mean_std_scaled(X)
    step = min(n, _STAT_BLOCK_ROWS)
    ones = np.ones(step)
    x0 = X[0].copy()
    total = np.zeros(d)
    var = np.zeros(d)
    with np.errstate(over="ignore", invalid="ignore"):
        for s0 in range(0, n, step):            # blocks of rows: small temporaries
            Z = X[s0:s0 + step] - x0
            total += ones[:Z.shape[0]] @ Z
        mean = x0 + total / n
        for s0 in range(0, n, step):
            Z = X[s0:s0 + step] - mean
            Z *= Z
            var += ones[:Z.shape[0]] @ Z
        var /= n
        std = np.sqrt(np.maximum(var, 0.0))
    redo = ~(np.isfinite(mean) & np.isfinite(std)) | (std < _STD_UNDERFLOW)
    if redo.any():
        mean[redo], std[redo] = _mean_std_scaled(X[:, redo])
    return mean, std


#: a standard deviation below this may hide squares that underflowed
_STD_UNDERFLOW = 1e-150


def _mean_std_scaled(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and standard deviation computed on columns divided by their
    largest magnitude, so that large finite features do not overflow and tiny
    ones do not underflow (exact for a constant column)."""
    mag = np.maximum(X.max(axis=0), -X.min(axis=0)) if X.shape[0] else np.zeros(X.shape[1])
    mag = np.where(mag > 0, mag, 1.0)
    Z = X / mag
    mean = Z.mean(axis=0)
    Z -= mean                       # in place: one (n, d) temporary in all
    Z *= Z
    std = np.sqrt(np.maximum(Z.mean(axis=0), 0.0))
    return mean * mag, std * mag


def feature_unit(X, mean: Optional[np.ndarray] = None) -> float:
    """The feature unit sigma of the modes None and ``"center"``: the root
    mean square of the non-zero entries of the training rows (of ``X - mean``
    when ``mean`` is given); 1.0 when every entry is zero.

    Dividing the rows by sigma makes the model scale-equivariant: ``c * X``
    has unit ``|c| sigma`` and the same preprocessed rows, so the step
    sizes, the hinge margin of 1 and the regularization of every learner act
    on the same rows whatever the caller's unit (mm or km, 0..1 or 0..255
    pixels).  The entries then have unit RMS, the scale of standardized
    features that the defaults assume; counting the non-zero entries only
    makes the rule the same for dense and sparse rows (a tf-idf or count row
    is scaled by the size of its stored values, not diluted by the zeros of
    its vocabulary), and it is invariant to permuted features and duplicated
    rows.  Computed in blocks of rows, each divided by the largest magnitude
    so that no square overflows or underflows.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
        Finite training rows.
    mean : ndarray of shape (n_features,), optional
        Subtracted first (dense X only).

    Returns
    -------
    float
        A positive finite float.
    """
    if sp.issparse(X) and mean is None:
        data = np.asarray(X.data, dtype=np.float64)

        def blocks():
            yield data
    else:
        Xd = _dense(X)

        def blocks():
            for s0 in range(0, Xd.shape[0], _STAT_BLOCK_ROWS):
                b = Xd[s0:s0 + _STAT_BLOCK_ROWS]
                yield b if mean is None else b - mean
    # two passes: the largest magnitude, then the sum of squares below it
    big = max((float(np.max(np.abs(b), initial=0.0)) for b in blocks()), default=0.0)
    if not np.isfinite(big):
        raise ValueError("feature_unit: X contains NaN or infinity.")
    if not big > 0:
        return 1.0
    total, count = 0.0, 0
    for b in blocks():
        z = (b / big).ravel()
        total += float(z @ z)
        count += int(np.count_nonzero(b))
    unit = big * float(np.sqrt(total / count))
    return unit if np.isfinite(unit) and unit >= np.finfo(float).tiny else 1.0


def fit_preprocessing(mode: Optional[str], X, estimator: Any,
                      divisor: Optional[np.ndarray] = None) -> dict[str, np.ndarray]:
    """Fit the statistics of ``mode`` (already resolved, see
    :func:`resolve_preprocessing`) on the training rows X.

    Parameters
    ----------
    mode : {None, "center", "standardize", "whiten", "sphere"}
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
        Finite training rows (sparse only with at most
        :data:`MAX_DENSIFY_FEATURES` columns when ``mode`` is not None).
    estimator : estimator or str
        Named in error messages.
    divisor : ndarray of shape (n_features,), optional
        The column divisors of ``"standardize"`` and ``"sphere"`` in place of
        the standard deviations (the type-aware scale of ``"auto"``,
        :func:`tripletml.core.column_kinds.type_aware_scale`); a column with a
        zero divisor keeps scale 1.

    Returns
    -------
    stats : dict
        ``{}`` for None; ``{"mean"}`` for "center"; ``{"mean", "scale"}``
        (``1 / std``, 1 for constant columns) for "standardize";
        ``{"mean", "whitener"}`` for "whiten"; ``{"mean", "scale",
        "radius"}`` for "sphere" (``radius``: the float s).  Arrays are
        float64.
    """
    if mode is None:
        return {"unit": feature_unit(X)}
    if mode == "normalize":
        return {"unit": feature_unit(normalize_rows(X))}
    if mode not in ("center", "standardize", "whiten", "sphere"):
        raise ValueError(f"{_who(estimator)}: unresolved preprocessing mode {mode!r}.")
    Xd = _dense(X)
    mean, std = _mean_std(Xd)
    if mode == "center":
        return {"mean": mean, "unit": feature_unit(Xd, mean)}
    if mode in ("standardize", "sphere"):
        scale = column_scales(mean, std, divisor)
        if mode == "standardize":
            return {"mean": mean, "scale": scale}
        return {"mean": mean, "scale": scale,
                "radius": sphere_radius(apply_preprocessing(Xd, mean, scale))}
    # whiten: covariance of columns scaled to unit std (conditioning), then ZCA
    s = np.where(std > 0, std, 1.0)
    Z = (Xd - mean) / s
    cov = (Z.T @ Z) / max(Z.shape[0], 1)
    return {"mean": mean, "whitener": whitener_from_cov(cov, std)}


def column_scales(mean: np.ndarray, std: np.ndarray,
                  divisor: Optional[np.ndarray] = None) -> np.ndarray:
    """``scale`` of ``"standardize"`` / ``"sphere"``: ``1 / std`` (or ``1 /
    divisor``), 1 for a column constant to rounding (relative to its own
    magnitude, so a column of tiny values is still standardized) or with a
    divisor that is not positive and finite."""
    fi = np.finfo(float)
    const = (std <= 10 * fi.eps * np.abs(mean)) | (std < fi.tiny)
    if divisor is not None:
        div = np.asarray(divisor, dtype=np.float64)
        const |= ~(np.isfinite(div) & (div >= fi.tiny))
        std = np.where(const, 1.0, div)
    return np.where(const, 1.0, 1.0 / np.where(const, 1.0, std))


def whitener_from_cov(cov: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The ZCA whitener of ``"whiten"`` from ``cov``, the covariance of the
    columns divided by their standard deviations ``std`` (0 -> 1):
    ``diag(1 / s) P`` with ``P = U diag(lam^-1/2) U^T`` over the eigenvalues
    above :data:`_WHITEN_RTOL` times the largest."""
    s = np.where(std > 0, std, 1.0)
    lam, U = np.linalg.eigh(0.5 * (cov + cov.T))
    top = float(lam.max()) if lam.size else 0.0
    keep = lam > _WHITEN_RTOL * top if top > 0 else np.zeros(lam.shape, bool)
    f = np.zeros_like(lam)
    f[keep] = 1.0 / np.sqrt(lam[keep])
    P = (U * f) @ U.T
    return np.ascontiguousarray(P / s[:, None])  # (x - mean) / s @ P


def _check_sphere_args(func: str, Z, radius) -> tuple[np.ndarray, float]:
    """Z as a finite 2-D float64 array and radius as a positive finite float
    (ValueError / TypeError naming ``func`` otherwise)."""
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise ValueError(f"{func}: Z must be a 2-D array of rows, got shape {Z.shape}.")
    if not np.isfinite(Z).all():
        raise ValueError(f"{func}: Z contains NaN or infinity.")
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.integer, np.floating)):
        raise TypeError(f"{func}: radius must be a real number, got {radius!r}.")
    s = float(radius)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"{func}: radius must be positive and finite, got {radius!r}.")
    return Z, s


def sphere_radius(Z: np.ndarray) -> float:
    """The radius s of ``"sphere"``: the median Euclidean norm of the
    standardized training rows Z (1.0 when that is 0 or Z has no rows)."""
    Z, _ = _check_sphere_args("sphere_radius", Z, 1.0)
    if Z.shape[0] == 0:
        return 1.0
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    med = float(np.median(norms))
    return med if np.isfinite(med) and med > 0 else 1.0


def sphere_lift(Z: np.ndarray, radius: float) -> np.ndarray:
    """Inverse stereographic projection of the rows of Z onto the sphere of
    radius ``s = radius`` in one more dimension: with ``u = z / s``,
    ``phi(z) = s [2 u, ||u||^2 - 1] / (||u||^2 + 1)``.

    Computed without overflow for any finite row and any ``s > 0``: with
    ``k = max(s, max_i |z_i|)`` (finite), ``w = z / k`` (entries in
    [-1, 1]), ``t = ||w||^2`` and ``c = (s / k)^2`` (in (0, 1]),
    ``phi = s [2 (s / k) w, t - c] / (t + c)`` (numerator and denominator
    of the formula divided by ``(k / s)^2``).

    Parameters
    ----------
    Z : ndarray of shape (n, d)
        Finite rows (the standardized features).
    radius : float
        The scale s > 0.

    Returns
    -------
    ndarray of shape (n, d + 1), float64, rows of norm ``radius``.
    """
    Z, s = _check_sphere_args("sphere_lift", Z, radius)
    k = np.maximum(np.max(np.abs(Z), axis=1, initial=0.0), s)[:, None]
    Wn = Z / k
    r = s / k                                # in (0, 1]
    t = np.einsum("ij,ij->i", Wn, Wn)[:, None]
    c = r * r                                # may underflow to 0; t + c > 0
    out = np.empty((Z.shape[0], Z.shape[1] + 1))
    out[:, :-1] = (2.0 * s) * (r * Wn) / (t + c)
    out[:, -1:] = s * ((t - c) / (t + c))
    return out


def normalize_rows(X):
    """X with each row divided by its Euclidean norm (a zero row stays zero);
    a scipy.sparse X stays sparse (CSR), a dense one comes back as a new
    float64 array.  The norms are computed without overflow (rows divided by
    their largest magnitude first)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        big = np.zeros(X.shape[0])
        if X.nnz:
            big = np.asarray(abs(X).max(axis=1).toarray(), dtype=np.float64).ravel()
        safe = np.where(big > 0, big, 1.0)
        Y = sp.diags(1.0 / safe) @ X
        nrm = np.sqrt(np.asarray(Y.multiply(Y).sum(axis=1), dtype=np.float64).ravel())
        f = np.where(nrm > 0, 1.0 / (safe * np.where(nrm > 0, nrm, 1.0)), 0.0)
        return sp.csr_matrix(sp.diags(f) @ X)
    Xd = np.asarray(X, dtype=np.float64)
    big = np.max(np.abs(Xd), axis=1, initial=0.0)
    safe = np.where(big > 0, big, 1.0)
    Y = Xd / safe[:, None]
    nrm = np.sqrt(np.einsum("ij,ij->i", Y, Y))
    Y /= np.where(nrm > 0, nrm, 1.0)[:, None]
    return Y


def apply_preprocessing(X, mean: Optional[np.ndarray] = None,
                        scale: Optional[np.ndarray] = None,
                        whitener: Optional[np.ndarray] = None,
                        radius: Optional[float] = None, *, copy: bool = True,
                        unit: Optional[float] = None, normalize: bool = False):
    """The preprocessed rows ``(X - mean) * scale`` or ``(X - mean) @ whitener``,
    lifted by :func:`sphere_lift` when ``radius`` is given, divided by
    ``unit`` when it is given (the modes None and ``"center"``).

    With no statistics X is returned unchanged (sparse stays sparse); with
    ``unit`` alone, X divided by it (sparse stays sparse, a new matrix);
    otherwise the result is a dense float64 array (sparse X is densified:
    callers refuse high-dimensional sparse input at fit time).  ``copy=False``
    lets the centering and scaling overwrite a float64 C-contiguous X that the
    caller owns (a copy it made); X is never modified otherwise.
    ``normalize``: the rows are first divided by their norms
    (:func:`normalize_rows`; the mode ``"normalize"``).
    """
    if normalize:
        X, copy = normalize_rows(X), False
    if unit is not None and float(unit) == 1.0:
        unit = None
    if mean is None and scale is None and whitener is None and radius is None:
        if unit is None:
            return X
        if sp.issparse(X):
            return (X * (1.0 / float(unit))).astype(np.float64, copy=False)
    Z = _dense(X)
    # in place only on an array that is not the caller's (copy=False: the
    # caller hands over a float64 C-contiguous X it owns)
    own = Z is not X or (not copy and Z.flags.c_contiguous and Z.flags.writeable)
    if mean is not None:
        Z = np.subtract(Z, mean, out=Z) if own else Z - mean
        own = True
    if scale is not None:
        Z = np.multiply(Z, scale, out=Z) if own else Z * scale
        own = True
    if unit is not None:
        Z = np.divide(Z, float(unit), out=Z) if own else Z / float(unit)
    if whitener is not None:
        Z = Z @ whitener
    if radius is not None:
        Z = sphere_lift(Z, radius)
    return np.ascontiguousarray(Z, dtype=np.float64)


#: the statistics (fitted attributes of :class:`Preprocessor`) each resolved
#: mode holds; the others are None
_STATS = {None: ("unit_",), "normalize": ("unit_",), "center": ("mean_", "unit_"), "standardize": ("mean_", "scale_"),
          "whiten": ("mean_", "whitener_"), "sphere": ("mean_", "scale_", "radius_")}
_STAT_NAMES = ("mean_", "scale_", "whitener_", "radius_", "unit_")
#: the learner attribute that held the fitted Preprocessor in tripletml 0.2
#: (renamed ``scaler_`` in 0.3: ``preprocessor_`` is metric-learn's row lookup)
_LEGACY_NAMES = ("preprocessor_",)
#: statistics a model file may lack (files written before they existed):
#: an absent ``unit_`` means 1 (tripletml 0.1 and 0.2 trained on raw rows)
_OPTIONAL_STATS = ("unit_",)


class Preprocessor(BaseEstimator):
    """The ``preprocessing`` of a triplet learner as one fitted object.

    A triplet learner holds one in ``scaler_``: ``fit`` resolves the
    mode on the training X and fits its statistics (see the module
    docstring), ``transform`` maps every X the learner sees, and
    :meth:`second_moment` maps the second moment of raw row differences for
    a learner that works on statistics of X (KISSME).

    Parameters
    ----------
    mode : {"auto", "center", "standardize", "whiten", "sphere", "normalize", "raw"} or None, default="auto"
        The learner's ``preprocessing`` parameter (``"raw"`` fits as None
        without a unit).
    auto : {"center", "standardize", "whiten", "sphere"}, default="standardize"
        What ``"auto"`` means on dense or low-dimensional X (the learner
        class's ``_auto_preprocessing``; see :func:`resolve_preprocessing`).
    owner : str, default="tripletml"
        Named in error messages (the learner's class name).
    unit : bool, default=True
        Fit the feature unit (:func:`feature_unit`) of the modes None and
        ``"center"``; False for a model without scale-dependent parameters
        (the Euclidean and DotProduct baselines keep their raw values).
    column_scale : bool, default=True
        ``"auto"`` scales the columns by kind
        (:func:`tripletml.core.column_kinds.type_aware_scale`: indicators by
        their amplitude, columns sharing one unit by one pooled deviation,
        the others by their own); False: by their own standard deviations
        (KISSME, whose closed form is equivariant to column scales: they
        only move its shrinkage, defined for unit variances).

    Attributes
    ----------
    mode_ : {None, "center", "standardize", "whiten", "sphere"}
        The resolved mode.
    n_features_in_ : int
        Width of the raw rows.
    mean_ : ndarray of shape (n_features_in_,) or None
        Column means (every mode but None).
    scale_ : ndarray of shape (n_features_in_,) or None
        ``1 / std`` per column, 1 for constant columns ("standardize",
        "sphere").
    whitener_ : ndarray of shape (n_features_in_, n_features_in_) or None
        ``diag(1 / std) P`` ("whiten").
    radius_ : float or None
        The sphere radius s ("sphere").
    unit_ : float or None
        The feature unit sigma (None and "center"; see :func:`feature_unit`):
        the rows are divided by it.
    decision_ : dict or None
        With ``mode="auto"``: what was decided and why (``"mode"``,
        ``"reason"``, and per column kind the count and the scale rule under
        ``"columns"``); None for an explicit mode.

    Notes
    -----
    A model file stores the statistics as the learner's attributes
    ``preprocessing_`` (the mode) and ``preprocessing_<stat>_``, the file
    format of tripletml 0.1 (:meth:`to_attributes`, :meth:`from_attributes`);
    the arrays are declared in :attr:`_fitted_arrays`.
    """

    #: the fitted arrays with their shapes, for :mod:`tripletml.core.arrayspec`
    #: (a learner declares them as ``preprocessing_<name>``)
    _fitted_arrays: dict[str, ArraySpec] = {
        "mean_": ArraySpec(("n_features_in_",), optional=True),
        "scale_": ArraySpec(("n_features_in_",), optional=True),
        "whitener_": ArraySpec(("n_features_in_", "n_features_in_"), optional=True),
    }
    #: the fitted float scalars (saved as metadata)
    _fitted_scalars: tuple[str, ...] = ("radius_", "unit_")

    def __init__(self, mode: Optional[str] = "auto", *, auto: str = _AUTO_DEFAULT,
                 owner: str = "tripletml", unit: bool = True, column_scale: bool = True):
        self.mode = mode
        self.auto = auto
        self.owner = owner
        self.unit = unit
        self.column_scale = column_scale

    # ------------------------------------------------------------------ fit
    def resolve(self, X) -> Optional[str]:
        """The mode :meth:`fit` uses on X (``"auto"`` decided from X; see
        :func:`resolve_preprocessing`), without fitting anything.

        A mode other than None maps rows to dense ones: a caller that also
        transforms a scipy.sparse X densifies it once and passes the dense
        copy to both ``fit`` and ``transform``.
        """
        check_preprocessing(self.mode, self.owner)
        if self.mode == "auto":
            return _resolve_auto(X, self.auto)
        return resolve_preprocessing(self.mode, X, self.owner)

    def fit(self, X, y=None) -> "Preprocessor":
        """Resolve the mode on the training rows X and fit its statistics.

        Parameters
        ----------
        X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
            Validated, finite training rows (see
            :func:`tripletml.core.validation.check_X`).
        y : ignored

        Returns
        -------
        self
        """
        mode = self.resolve(X)
        divisor, self.decision_ = None, None
        if self.mode == "auto":
            divisor, self.decision_ = self._decide(X, mode)
        # "raw": the rows as given, so no unit to fit
        stats = {} if self.mode == "raw" else fit_preprocessing(mode, X, self.owner,
                                                                 divisor=divisor)
        if not self.unit:
            stats.pop("unit", None)
        self.mode_ = mode
        for name in _STAT_NAMES:
            setattr(self, name, stats.get(name[:-1]))
        self.n_features_in_ = int(X.shape[1])
        return self

    def _decide(self, X, mode: Optional[str]) -> tuple[Optional[np.ndarray], dict]:
        """What ``"auto"`` decided on X, and why: the column divisors of a
        type-aware ``"standardize"`` / ``"sphere"`` (None: the standard
        deviations) and the record kept as ``decision_``."""
        why = {"mode": mode}
        if mode == "normalize":
            why["reason"] = (f"features from a network (dense, >= {MIN_NETWORK_FEATURES} "
                             "continuous columns, non-negative or l2-normalized rows): "
                             "each row divided by its norm, the cosine kept")
            why["unit"] = "rows divided by the feature unit (RMS of the non-zero entries)"
            return None, why
        if mode is None:
            why["reason"] = ("scipy.sparse with more than "
                             f"{MAX_DENSIFY_FEATURES} features: left sparse"
                             if sp.issparse(X) and X.shape[1] > MAX_DENSIFY_FEATURES else
                             "the rows already lie on a sphere (equal norms): no lift")
            why["unit"] = "rows divided by the feature unit (RMS of the non-zero entries)"
            return None, why
        if not self.column_scale:
            why["reason"] = f"{self.owner}'s family choice; per-column standard deviations"
            return None, why
        from tripletml.core.column_kinds import type_aware_scale
        divisor, summary = type_aware_scale(X)
        why["reason"] = f"{self.owner}'s family choice; type-aware column scales"
        why["columns"] = summary
        return divisor, why

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "n_features_in_")

    @property
    def n_features_out_(self) -> int:
        """Width of the preprocessed rows (``n_features_in_ + 1`` with
        ``"sphere"``, else ``n_features_in_``)."""
        check_is_fitted(self)
        return self.n_features_in_ + n_added_features(self.mode_)

    # ------------------------------------------------------------ transform
    def transform(self, X, *, copy: bool = True):
        """The preprocessed rows of X (validated, ``n_features_in_`` columns).

        X comes back unchanged when the mode is None (sparse stays sparse);
        otherwise as a dense float64 array.  ``copy=False``: X is a private
        float64 C-contiguous array that may be overwritten.
        """
        check_is_fitted(self)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"{self.owner}: X has {X.shape[1]} features, but the "
                             f"preprocessing was fitted with {self.n_features_in_}.")
        return apply_preprocessing(X, self.mean_, self.scale_, self.whitener_, self.radius_,
                                   copy=copy, unit=self.unit_,
                                   normalize=self.mode_ == "normalize")

    def linear_map(self):
        """The linear part A of the map on row differences,
        ``z - z' = (x - x') A``: a float (the factor of a multiple of the
        identity: ``1 / unit_`` for None and ``"center"``), an array of
        shape (n_features_in_,) (a diagonal: ``"standardize"``) or
        (n_features_in_, n_features_in_) (``"whiten"``), or None for
        ``"sphere"`` (not linear).  A model's matrix in the preprocessed
        coordinates maps to the caller's through it (``A M A^T``)."""
        check_is_fitted(self)
        if not is_linear_mode(self.mode_):
            return None
        if self.mode_ == "standardize":
            return self.scale_
        if self.mode_ == "whiten":
            return self.whitener_
        return 1.0 / float(self.unit_) if self.unit_ is not None else 1.0

    def second_moment(self, C: np.ndarray) -> np.ndarray:
        """``E[(z - z')(z - z')^T]`` of preprocessed rows from the raw
        ``C = E[(x - x')(x - x')^T]``.

        Every mode but ``"sphere"`` is affine, so on row differences it is the
        linear map ``(x - x') * scale @ whitener`` (the mean cancels) and
        ``C' = W^T (s s^T * C) W``.

        Raises
        ------
        ValueError
            For ``"sphere"`` (not linear on differences).
        """
        check_is_fitted(self)
        if not is_linear_mode(self.mode_):
            raise ValueError(f"{self.owner}: the {self.mode_!r} preprocessing is not linear "
                             "on differences")
        if self.scale_ is not None:
            C = C * self.scale_[:, None] * self.scale_[None, :]
        if self.whitener_ is not None:
            C = self.whitener_.T @ C @ self.whitener_
        if self.unit_ is not None:
            C = C / (float(self.unit_) ** 2)
        return C

    # ---------------------------------------------------------- model files
    def to_attributes(self, prefix: str = "preprocessing_") -> dict[str, Any]:
        """The fitted state as a learner's attributes (the model-file form):
        ``{prefix: mode_}`` plus ``prefix + stat`` for each statistic the
        mode holds (arrays and the float ``radius_``)."""
        check_is_fitted(self)
        out: dict[str, Any] = {prefix: self.mode_}
        if getattr(self, "decision_", None) is not None:
            out[prefix + "decision_"] = self.decision_
        for name in _STATS[self.mode_]:
            if getattr(self, name) is not None or name not in _OPTIONAL_STATS:
                out[prefix + name] = getattr(self, name)
        return out

    @classmethod
    def from_attributes(cls, attributes: dict[str, Any], n_features_in: int, *,
                        mode: Optional[str] = None, auto: str = _AUTO_DEFAULT,
                        owner: str = "tripletml", unit: bool = True,
                        column_scale: bool = True,
                        prefix: str = "preprocessing_") -> "Preprocessor":
        """A fitted Preprocessor from the attributes :meth:`to_attributes`
        wrote (read from an untrusted model file: everything is checked).

        Parameters
        ----------
        attributes : dict
            ``prefix`` (the resolved mode) and the statistics; a dict without
            ``prefix`` (a file written before preprocessing existed) means
            mode None and must hold no statistic.
        n_features_in : int
            The learner's raw width.
        mode, auto, owner, unit, column_scale : as the constructor.
        prefix : str

        Raises
        ------
        ValueError
            An unknown mode, statistics missing or extra for the mode, an
            array of the wrong shape, dtype or values, or a radius that is
            not a positive finite float.
        """
        attributes = dict(attributes)
        decision = attributes.pop(prefix + "decision_", None)
        if decision is not None and not isinstance(decision, dict):
            raise ValueError(f"{prefix}decision_ must be a dict (what 'auto' decided), got "
                             f"{type(decision).__name__}")
        names = {prefix + s: s for s in _STAT_NAMES}
        unknown = set(attributes) - set(names) - {prefix}
        if unknown:
            raise ValueError(f"{sorted(unknown)} are not preprocessing attributes")
        present = [n for n in names if n in attributes]
        if prefix not in attributes:
            if present:
                raise ValueError(f"{present} are stored without {prefix}")
            fitted_mode = None
        else:
            fitted_mode = attributes[prefix]
        if not (fitted_mode is None or isinstance(fitted_mode, str)) \
                or fitted_mode not in _STATS:
            raise ValueError(f"{prefix}={fitted_mode!r} is not a fitted preprocessing mode")
        want = {prefix + s for s in _STATS[fitted_mode]}
        optional = {prefix + s for s in _OPTIONAL_STATS}
        if want - optional - set(present) or set(present) - want:
            raise ValueError(f"{prefix}={fitted_mode!r} needs the arrays {sorted(want)}, "
                             f"the model holds {sorted(present)}")
        pre = cls(mode, auto=auto, owner=owner, unit=unit, column_scale=column_scale)
        pre.mode_ = fitted_mode
        pre.decision_ = decision
        pre.n_features_in_ = int(n_features_in)
        for s in _STAT_NAMES:
            setattr(pre, s, attributes.get(prefix + s))
        for name in cls._fitted_scalars:
            r = getattr(pre, name)
            if r is None:
                continue
            ok = isinstance(r, (float, int)) and not isinstance(r, bool)
            if ok:
                try:
                    r = float(r)              # an int too large for a float raises
                except OverflowError:
                    ok = False
            # a positive normal float whose square is finite (the lift squares s,
            # second_moment squares the unit)
            if not ok or not (np.finfo(float).tiny <= r <= np.sqrt(np.finfo(float).max)):
                raise ValueError(f"{prefix}{name}={getattr(pre, name)!r} must be a positive "
                                 "finite float (at most sqrt of the largest float)")
            setattr(pre, name, r)
        try:
            check_fitted_arrays(pre, {n: spec for n, spec in cls._fitted_arrays.items()
                                      if getattr(pre, n) is not None})
        except ValueError as exc:
            raise ValueError(f"{prefix}{exc}") from None
        return pre

    @classmethod
    def saved_names(cls, prefix: str = "preprocessing_") -> tuple[str, ...]:
        """The learner attributes of a model file: ``prefix`` (the mode) and
        ``prefix + stat`` for every statistic."""
        return (prefix, *(prefix + s for s in _STAT_NAMES), prefix + "decision_")

    @classmethod
    def adopt_saved(cls, state: dict[str, Any], *, prefix: str = "preprocessing_",
                    **params: Any) -> None:
        """Replace the model-file attributes in a learner's ``state`` (its
        ``__dict__``, loaded from a file or a pickle of tripletml 0.1) by one
        checked Preprocessor under ``"scaler_"`` (tripletml 0.2 held it in
        ``preprocessor_``, the name of metric-learn's row lookup: a pickle
        of 0.2 is adopted under the new name).

        Nothing changes when ``state`` already holds a Preprocessor and no
        such attribute.  ``params`` (``mode``, ``auto``, ``owner``) go to
        :meth:`from_attributes`, with ``state["n_features_in_"]``.

        Raises
        ------
        ValueError
            ``scaler_`` (or 0.2's ``preprocessor_``) is not a Preprocessor,
            ``n_features_in_`` is not a positive int, or
            :meth:`from_attributes` refuses the attributes.
        """
        for name in ("scaler_", *_LEGACY_NAMES):
            held = state.get(name)
            if held is not None and not isinstance(held, cls):
                raise ValueError(f"{name} is a {type(held).__name__}, not a {cls.__name__}")
        for name in _LEGACY_NAMES:          # a pickle of tripletml 0.2
            legacy = state.pop(name, None)
            if legacy is not None and state.get("scaler_") is None:
                state["scaler_"] = legacy
        held = state.get("scaler_")
        flat = {n: state.pop(n) for n in cls.saved_names(prefix) if n in state}
        if held is not None and not flat:
            return
        d = state.get("n_features_in_")
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"n_features_in_={d!r} is not a positive integer")
        state["scaler_"] = cls.from_attributes(flat, d, prefix=prefix, **params)

    # ------------------------------------------------------------ equality
    def __eq__(self, other: object) -> bool:
        """Equal when the parameters and the fitted state (bit for bit) agree:
        two equal Preprocessors map every X the same way."""
        if type(other) is not type(self):
            return NotImplemented
        if self.get_params() != other.get_params():
            return False
        fitted = ("mode_", "n_features_in_", "decision_", *_STAT_NAMES)
        for name in fitted:
            a, b = getattr(self, name, _MISSING), getattr(other, name, _MISSING)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                        and a.dtype == b.dtype and a.shape == b.shape
                        and a.tobytes() == b.tobytes()):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value


_MISSING = object()
