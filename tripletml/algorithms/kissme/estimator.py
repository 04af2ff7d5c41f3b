"""KISSME: a Mahalanobis metric in closed form from the triplets' similar and
dissimilar pairs (Koestinger, Hirzer, Wohlhart, Roth & Bischof, "Large scale
metric learning from equivalence constraints", CVPR 2012).

No iterations and no step size: two d x d covariances of pair differences,
two (shrunk) inverses and one eigendecomposition (eq. 12 and the spectrum
clipping of Section 3).  The statistics and the closed form live in
:mod:`tripletml.algorithms.kissme.kernels`; the estimator validates and stores.
"""
from __future__ import annotations

from dataclasses import replace

import time
import warnings
from numbers import Integral, Real

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import COMMON, Interval
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.linalg import psd_factor
from tripletml.core.preprocessing import document_preprocessing, is_linear_mode
from tripletml.triplets import document_sampling
from tripletml.pairs import PairConstraints
from tripletml.triplets import AllLabels, ClassCodes, is_class_sampling
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform
from tripletml.linalg.span import (lift_psd_factor, lift_square, reduce_rows, span_basis,
                           span_route_applies)
from tripletml.algorithms.kissme.kernels import (_scatter_from_labels, _scatter_from_triplets, kissme_matrix,
                              kissme_matrix_span, scatter_from_pairs)
from tripletml.algorithms.kissme import distributed
from tripletml.distributed import class_stats, statistics

__all__ = ["KISSME"]

#: raw columns whose standardizing factor lies outside [1 / LIMIT, LIMIT]
#: are standardized before the statistics (their raw products could
#: overflow or lose digits in the subnormal range)
_RAW_SCALE_LIMIT = 1e50


def _moderate_scale(scale) -> bool:
    """Whether second moments of the raw columns are safe to form (no
    standardizing factor, or every non-zero one within the limit)."""
    if scale is None:
        return True
    s = scale[scale > 0]
    return s.size == 0 or (s.max() <= _RAW_SCALE_LIMIT and s.min() >= 1 / _RAW_SCALE_LIMIT)


@document_transform
@document_sampling
@document_preprocessing
class KISSME(MahalanobisMixin, TripletLearner):
    """Keep It Simple and Straightforward MEtric: ``M = Sigma_S^{-1} -
    Sigma_D^{-1}`` projected onto the PSD cone.

    ``Sigma_S`` and ``Sigma_D`` are the covariances of the pair differences
    ``q - p+`` (similar pairs) and ``q - p-`` (dissimilar pairs) of the
    triplets; ``M`` is the log-likelihood ratio of the two zero-mean
    Gaussians (eq. 12 of the paper), its negative eigenvalues clipped.  From
    pairs (``fit(pairs_of_points, y)`` or ``fit(X, pairs=P, y=labels)``,
    the paper's setting) they are the means over the similar and over the
    dissimilar pairs (eq. 10-11).  From
    labels (``n_triplets=None``, the default) the covariances are the exact
    expectation over random class triplets (the limit of infinitely many
    sampled triplets, computed from class means and scatters in O(n d^2),
    see :func:`tripletml.algorithms.kissme.kernels.pair_scatter_from_labels`); with
    explicit ``triplets`` or an integer ``n_triplets`` they are the
    triplets' empirical means.

    Fitting is a closed form: milliseconds on the UCI sets, which makes
    KISSME the quickest learner to try first.  It keeps d x d matrices, so
    it suits d up to a few thousand (use LORETA or LowRankDML beyond).

    Parameters
    ----------
    shrinkage : float, default=0.01
        Each covariance C is replaced by ``(1 - shrinkage) C + shrinkage
        (tr C / d) I`` before it is inverted (in [0, 1]; as the
        ``shrinkage`` of scikit-learn's LinearDiscriminantAnalysis).  0 is
        the paper's plain inverse (a pseudo-inverse where C is singular); 1
        gives a multiple of the identity (the Euclidean distance).
    n_triplets : int or None, default=None
        None: exact statistics from the labels (with ``sampling="class"``;
        another policy draws its own default count).  An int: that many random
        class triplets are sampled from the labels (as the other learners
        do).  Ignored when ``triplets`` are passed to ``fit``.
    {sampling}
    rank_tol : float, default=1e-6
        Eigenvalues of M below ``rank_tol`` times its largest do not count
        in ``rank_`` and ``components_``.
    {preprocessing}
    {n_components}
    {preprocessor}
    random_state : None, int or numpy Generator
        Used only to sample triplets (``n_triplets`` an int).

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
        The learned PSD matrix (d = ``n_features_preprocessed_``).
    components_ : ndarray of shape (``rank_``, d)
        ``diag(sqrt(s)) U^T`` over the eigenvalues kept: ``transform`` maps
        to the learned dimension.
    rank_ : int
    transform_fidelity_ : float
        Share of ``||L^T L||_F^2`` (L = ``components_``) that ``transform``
        keeps: 1.0 unless ``n_components`` drops directions.
    similar_covariance_, dissimilar_covariance_ : ndarray of shape (d, d)
        ``Sigma_S`` and ``Sigma_D`` (before shrinkage).
    history_ : dict of lists
        One record: ``step`` 0 and the ``seconds`` of the fit.

    Notes
    -----
    A rank-0 result (no direction in which similar pairs are tighter than
    dissimilar ones) gives every pair the distance 0 and warns.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import KISSME
    >>> X, y = load_iris(return_X_y=True)
    >>> model = KISSME().fit(X, y)
    >>> model.transform(X[:2]).shape[0]
    2
    """

    #: "auto" keeps per-column standard deviations: the closed form is
    #: equivariant to column scales, which only move the shrinkage (defined
    #: for unit variances); measured .009-.034 mAP lower with pooled scales
    #: on pixel and count sets (results/column_kinds/README.md)
    _auto_column_scale = False
    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "similar_covariance_": ArraySpec(("d", "d")),
        "dissimilar_covariance_": ArraySpec(("d", "d")),
    }

    def __init__(self, shrinkage=0.01, *, n_triplets=None, sampling="class", rank_tol=1e-6,
                 preprocessing="auto", random_state=None, n_components=None,
                 preprocessor=None):
        self.shrinkage = shrinkage
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.rank_tol = rank_tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.n_components = n_components
        self.preprocessor = preprocessor

    _parameter_constraints = {
        "shrinkage": [Interval(Real, 0, 1, closed="both")],
        "n_triplets": [Interval(Integral, 1, None, closed="left"), None],
        "rank_tol": [Interval(Real, 0, 1, closed="both")],
        "sampling": COMMON["sampling"],
        "random_state": ["no_validation"],
        "preprocessing": ["no_validation"],
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    #: the statistics of row differences are formed on the validated X, then
    #: mapped through the preprocessing (linear on differences): no
    #: preprocessed copy of X.  Raw columns of extreme scale (whose products
    #: could overflow or underflow) and "sphere" are preprocessed first.
    _fit_preprocessed = False
    #: the paper's setting: similar and dissimilar pairs (eq. 10-11) as given
    _accepts_pairs = True
    #: ``fit(ShardedCollection)``: exact, from per-partition class statistics
    #: (:meth:`_fit_statistics`)
    _partitioned_strategy = statistics.STRATEGY

    def _sampler(self):
        """Labels with ``n_triplets=None`` and ``sampling="class"``: the
        exact expectation over class triplets
        (:class:`~tripletml.triplets.AllLabels`); else the triplets of the
        ``sampling`` policy (its own default count when ``n_triplets`` is
        None)."""
        if self.n_triplets is None and is_class_sampling(self.sampling) and (
                isinstance(self.sampling, str) or self.sampling.n_triplets is None):
            return AllLabels()
        return super()._sampler()

    def _check_loaded(self) -> None:
        """A loaded ``M_`` is the KISSME matrix of the stored pair
        covariances and shrinkage (recomputed, eq. 12), PSD, with
        ``components_`` its factor."""
        super()._check_loaded()
        self._check_loaded_metric(self.M_)
        M = kissme_matrix(self.similar_covariance_, self.dissimilar_covariance_,
                          float(self.shrinkage))
        if np.linalg.norm(M - self.M_) > 1e-8 * np.linalg.norm(M) + 1e-300:
            raise ValueError("M_ is not the KISSME matrix of similar_covariance_ and "
                             "dissimilar_covariance_")

    def _on_raw(self) -> bool:
        """Whether the pair statistics are formed on the raw rows and mapped
        through the preprocessing afterwards (every mode but ``"sphere"`` and ``"normalize"``,
        columns of moderate scale)."""
        pre = self.scaler_
        return is_linear_mode(pre.mode_) and _moderate_scale(pre.scale_)

    #: d x d arrays a fit holds at once (covariances, their inverses, the
    #: model), checked before training (:meth:`_check_square_memory`)
    _square_arrays = 6

    def _fit(self, X, got, rng):
        t0 = time.perf_counter()
        exact = isinstance(got, ClassCodes)
        if exact:
            got = got.codes
        on_raw = self._on_raw()
        Q = None
        if not on_raw or self._span_route is not False:
            Xp = self._preprocess(X)
            if self._span_route is not False and (
                    self._span_route or span_route_applies(Xp.shape[0], Xp.shape[1])):
                Q = span_basis(Xp)
                Q = Q if 0 < Q.shape[1] < Xp.shape[1] else None
            if Q is not None:                    # the span route: see _set_model
                X, on_raw = reduce_rows(Xp, Q), False
            elif not on_raw:
                X = Xp
            del Xp
        self._check_square_memory(X.shape[1])
        if exact and np.bincount(got).max() < 2:
            raise ValueError("KISSME: every class has a single member; no (query, "
                             "positive) pair of the same class exists.")
        if isinstance(got, PairConstraints):
            S, D = scatter_from_pairs(X, got.pairs, got.similar)
        else:
            S, D = _scatter_from_labels(X, got) if exact else _scatter_from_triplets(X, got)
        self._set_model(S, D, on_raw, t0, Q)

    def _fit_statistics(self, plan) -> None:
        """Strategy ``"statistics"`` of ``fit(ShardedCollection)``: the same
        ``Sigma_S`` and ``Sigma_D`` as the in-memory fit on the concatenated
        rows, to rounding, from per-partition statistics reduced in the
        backend's tree (:mod:`tripletml.distributed.class_stats`,
        :mod:`tripletml.algorithms.kissme.distributed`).

        From labels: per global class, the size, mean and scatter about the
        mean of each partition's rows, merged pairwise (Chan, Golub &
        LeVeque 1983), then the closed form of
        :func:`~tripletml.algorithms.kissme.kernels.pair_scatter_from_labels` on the
        driver (two passes, class means then weighted scatters about them,
        when the per-class d x d scatters would be large).  From triplets
        (explicit, or ``n_triplets`` sampled within each partition with the
        seed ``(seed, partition)``): the partitions' sums of ``(q - p+)(q -
        p+)^T`` and ``(q - p-)(q - p-)^T`` over their triplets, divided by
        the total count.
        """
        t0 = time.perf_counter()
        on_raw = self._on_raw()
        sup = plan.supervision                           # raw rows (_fit_preprocessed)
        rows_sup = sup if on_raw else replace(sup, preprocessed=True)
        d = int(self.scaler_.n_features_in_ if on_raw
                else self.scaler_.n_features_out_)
        self._check_square_memory(d)
        if isinstance(sup.sampler, AllLabels):
            k = int(len(sup.codes["keys"]))
            S, D, passes = distributed.kissme_label_scatters(plan, rows_sup, k, d)
            plan.info["report"] = {"passes": passes, "classes": k}
        else:
            be = plan.backend
            handles = be.map(class_stats.pair_sums_task, sup, (1, 2), rows_sup)
            m, (S, D) = be.gather(be.reduce(class_stats.add_pair_sums, handles))
            be.release(handles)
            if m == 0:
                raise ValueError("KISSME: the collection's partitions gave no triplet")
            S, D = 0.5 * (S + S.T) / m, 0.5 * (D + D.T) / m
            plan.info["report"] = {"passes": 1, "triplets": int(m)}
        self._set_model(S, D, on_raw, t0)

    def _set_model(self, S, D, on_raw: bool, t0: float, Q=None) -> None:
        """Map the pair covariances through the preprocessing (``on_raw``),
        check them, and set the fitted attributes (eq. 12, spectrum
        clipping).

        With ``Q`` (the span route, fewer rows than features): ``S`` and
        ``D`` are the ``r x r`` covariances of the coordinates ``X Q`` of
        the preprocessed rows in their span's orthonormal basis ``Q``
        (``d x r``).  Every pair difference lies in the span, so
        ``Sigma = Q S Q^T``, and the shrunk inverses, their difference and
        its PSD projection split into the span and its complement, where
        the model is ``c I`` (:func:`~tripletml.algorithms.kissme.kernels.kissme_matrix_span`;
        ``c = max(d / (s tr Sigma_S) - d / (s tr Sigma_D), 0)`` with
        shrinkage ``s``, 0 without): the same model as the plain route's
        ``d x d`` closed form, at the cost of ``r x r`` eigendecompositions
        and an ``O(d^2 r)`` lift instead of three ``d x d`` ones."""
        if on_raw:
            S = self._preprocessed_second_moment(S)
            D = self._preprocessed_second_moment(D)
        if not (np.isfinite(S).all() and np.isfinite(D).all()):
            raise FloatingPointError("KISSME: training diverged (the pair covariances are "
                                     "not finite: the features overflow float64); scale the "
                                     "features down (e.g. preprocessing='standardize').")
        if not np.trace(S) > 0 or not np.trace(D) > 0:
            which = "similar" if not np.trace(S) > 0 else "dissimilar"
            raise ValueError(f"KISSME: the {which} pairs have zero scatter (every such pair "
                             "is identical); no metric can be estimated from them.")
        if Q is None:
            M = kissme_matrix(S, D, float(self.shrinkage))
            L, rank = psd_factor(M, self.rank_tol)
        else:
            M_r, c = kissme_matrix_span(S, D, float(self.shrinkage), Q.shape[0])
            L, rank = lift_psd_factor(M_r, Q, c, self.rank_tol)
            M = lift_square(M_r, Q, c)
            S, D = lift_square(S, Q, 0.0), lift_square(D, Q, 0.0)
        if rank == 0:
            warnings.warn("KISSME: no direction separates the similar pairs from the "
                          "dissimilar ones (M = 0): every distance is 0. Check the labels "
                          "or triplets.", UserWarning, stacklevel=3)
        self.similar_covariance_ = S
        self.dissimilar_covariance_ = D
        self.M_ = M
        self.components_, self.rank_ = L, rank
        self.history_ = {"step": [0], "seconds": [time.perf_counter() - t0]}
