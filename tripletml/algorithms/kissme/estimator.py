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
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.linalg import psd_factor
from tripletml.core.preprocessing import document_preprocessing, is_linear_mode
from tripletml.triplets import document_sampling
from tripletml.pairs import PairConstraints
from tripletml.triplets import AllLabels, ClassCodes, is_class_sampling
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform
from tripletml.linalg.span import (lift_psd_factor, lift_square, reduce_rows, span_basis,
                           span_route_applies)
from tripletml.algorithms.kissme.kernels import (
    FALLBACK_SHRINKAGE, SHRINKAGE_FOLDS, _scatter_from_labels, _scatter_from_triplets,
    answer_folds, covariance_rank, factor_distances, fold_scatter_sums, heldout_score,
    row_images,
    kissme_factor, kissme_matrix, kissme_matrix_span, pair_keys, scatter_from_pairs,
    shrinkage_grid, usable_counts, usable_folds)
from tripletml.core.validation import check_dense_memory
from tripletml.engine.threads import fit_work, limit_threads, prelude_work, rows_work
from tripletml.algorithms.kissme import distributed
from tripletml.distributed import class_stats, statistics
from tripletml.distributed.class_stats import gather_reduce

__all__ = ["KISSME"]

#: raw columns whose standardizing factor lies outside [1 / LIMIT, LIMIT]
#: are standardized before the statistics (their raw products could
#: overflow or lose digits in the subnormal range)
_RAW_SCALE_LIMIT = 1e50


class _Preprocessed:
    """Rows of raw X read through a learner's preprocessing, a block at a
    time (``Z[idx]``): the held-out distances of a fit whose statistics are
    formed on the raw rows, without a preprocessed copy of X."""

    def __init__(self, learner, X):
        self.learner, self.X = learner, X
        self.shape = (X.shape[0], int(learner.scaler_.n_features_out_))

    def __getitem__(self, idx):
        return self.learner._preprocess(self.X[idx])


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
    shrinkage : float in [0, 1] or "auto", default="auto"
        Each covariance C is replaced by ``(1 - shrinkage) C + shrinkage
        (tr C / d) I`` before it is inverted (as the ``shrinkage`` of
        scikit-learn's LinearDiscriminantAnalysis).  0 is the paper's plain
        inverse (a pseudo-inverse where C is singular); 1 gives a multiple
        of the identity (the Euclidean distance).  ``"auto"``: from
        triplets or pairs (answers), the value chosen inside ``fit`` by
        held-out answers (fitted ``shrinkage_``): 3 folds of the answers
        (each answer's fold a hash of its row ids, so repeated answers stay
        together and the choice does not depend on their order or on
        ``random_state``), for each the model of the other two folds at
        each shrinkage of a grid, scored by the held-out triplets' accuracy
        (pairs: the ROC AUC of their distances); the best mean score wins,
        ties to the lighter ridge.  The grid puts the ridge ``shrinkage tr C
        / d`` at 1/99, 0.1, 1, 10 and 100 times the mean eigenvalue of
        ``(1 - shrinkage) C`` over the directions where the pair
        differences vary (``r = rank(Sigma_S + Sigma_D)``: ``shrinkage =
        k (d / r) / (1 + k d / r)``; 1/99 is 0.01 when ``r = d``), and 1.
        Scale-free, and the same on few rows with many features (where
        ``r`` is at most the rows' count and ``tr C / d`` alone would be a
        negligible ridge) as on many rows.
        Why: eq. 12 inverts two covariances whose difference is the signal;
        where the answers are noisy or the Gaussian model of the two kinds
        of pair differences does not hold (crowd answers about items), the
        smallest eigenvalues dominate ``Sigma_S^{-1} - Sigma_D^{-1}`` and
        the light ridge follows the noise, while a heavy one gives the
        identity plus a first-order correction ``(1 - s) (Sigma_D / l_D^2 -
        Sigma_S / l_S^2)``; only held-out answers tell which the data
        support.  With class labels (``n_triplets=None``: the exact
        statistics of all class triplets, the paper's setting), or fewer
        than 5 answers of a kind per fold, ``"auto"`` is 0.01.
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
    shrinkage_ : float
        The shrinkage used (``shrinkage``, or the held-out choice of
        ``"auto"``).
    shrinkage_grid_, shrinkage_scores_ : ndarray of shape (6,)
        With ``"auto"`` on answers: the grid and each value's mean held-out
        score (absent otherwise).
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
        "shrinkage_grid_": ArraySpec((None,), optional=True),
        "shrinkage_scores_": ArraySpec((None,), optional=True),
    }

    def __init__(self, shrinkage="auto", *, n_triplets=None, sampling="class", rank_tol=1e-6,
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
        "shrinkage": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
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
        s = getattr(self, "shrinkage_", None)
        if s is None:                 # a file written before shrinkage_ existed
            s = self._fixed_shrinkage()
        if not isinstance(s, (int, float)) or isinstance(s, bool) or not 0.0 <= s <= 1.0:
            raise ValueError(f"shrinkage_={s!r} must be a number in [0, 1]")
        M = kissme_matrix(self.similar_covariance_, self.dissimilar_covariance_, float(s))
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
            with limit_threads(rows_work(*X.shape)):      # at most X W
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
        # the thread rule (tripletml.engine.threads) on the problem solved:
        # the rows' d x d problem, or on the span n rows of r coordinates
        # (the lifts declare their own)
        with limit_threads(fit_work(X.shape[0], X.shape[1])):
            self._fit_rows(X, got, exact, on_raw, Q, t0)

    def _solve_work(self, n_rows: int, n_features: int) -> float:
        """The thread rule's work of ``_fit`` before its rows are chosen (the
        preprocessing and the span's basis price their own calls): that
        of the rows' span (:func:`~tripletml.engine.threads.prelude_work`);
        the problem solved is priced in ``_fit``."""
        return prelude_work(n_rows, n_features)

    def _fit_rows(self, X, got, exact: bool, on_raw: bool, Q, t0: float) -> None:
        """:meth:`_fit` on the rows it fits (raw, preprocessed, or the span's
        coordinates with its basis ``Q``)."""
        self._check_square_memory(X.shape[1])
        if exact and np.bincount(got).max() < 2:
            raise ValueError("KISSME: every class has a single member; no (query, "
                             "positive) pair of the same class exists.")
        if isinstance(got, PairConstraints):
            S, D = scatter_from_pairs(X, got.pairs, got.similar)
        else:
            S, D = _scatter_from_labels(X, got) if exact else _scatter_from_triplets(X, got)
        shrinkage = self._fixed_shrinkage()
        self.__dict__.pop("shrinkage_grid_", None)
        self.__dict__.pop("shrinkage_scores_", None)
        if shrinkage is None:
            d = Q.shape[0] if Q is not None else \
                (X.shape[1] if not on_raw else int(self.scaler_.n_features_out_))
            shrinkage = FALLBACK_SHRINKAGE if exact else \
                self._heldout_shrinkage(X, got, S, D, on_raw, d, Q is not None)
        self.shrinkage_ = float(shrinkage)
        self._set_model(S, D, on_raw, t0, Q)

    def _fixed_shrinkage(self) -> float | None:
        """The ``shrinkage`` parameter as a float; None for ``"auto"``."""
        return None if isinstance(self.shrinkage, str) else float(self.shrinkage)

    def _heldout_shrinkage(self, X, got, S, D, on_raw: bool, d: int, span: bool) -> float:
        """``shrinkage="auto"`` on triplets or pairs: the value of the grid
        :func:`~tripletml.algorithms.kissme.kernels.shrinkage_grid` whose
        model, fitted on the other folds' answers, best agrees with the
        held-out answers (triplet accuracy; for pairs, the ROC AUC of the
        distances), mean over :data:`SHRINKAGE_FOLDS` folds (each answer's
        fold a hash of its row ids,
        :func:`~tripletml.algorithms.kissme.kernels.answer_folds`); ties go
        to the lighter ridge.  ``X`` are the rows ``S, D`` (means over all
        answers) were formed on: raw rows (``on_raw``: statistics mapped
        through the preprocessing, held-out rows preprocessed), preprocessed
        rows, or the span's coordinates (``span``; ``d`` the preprocessed
        dimension).  Too few answers (fewer than ``MIN_HELDOUT`` of a kind
        in a fold): the fixed ``FALLBACK_SHRINKAGE``."""
        is_pairs = isinstance(got, PairConstraints)
        if is_pairs:
            sim = got.similar
            folds = answer_folds(pair_keys(got.pairs, sim))
            kinds = (sim, ~sim)
        else:
            got = np.asarray(got)
            folds = answer_folds(got)
            kinds = (np.ones(len(got), bool),)
        if not usable_folds(folds, kinds):
            return FALLBACK_SHRINKAGE
        self._check_heldout_memory(S.shape[0], 0)
        Z = X if not on_raw else _Preprocessed(self, X)
        if is_pairs:
            n_k = [int(sim.sum()), int((~sim).sum())]
            sums = []
            for f in range(SHRINKAGE_FOLDS):
                out = folds == f
                Sf, Df = scatter_from_pairs(X, got.pairs[out], sim[out])
                sums.append((int((sim & out).sum()) * Sf, int((~sim & out).sum()) * Df,
                             int((sim & out).sum()), int((~sim & out).sum())))
        else:
            counts, Sf, Df = fold_scatter_sums(X, got, folds)
            n_k = [len(got), len(got)]
            sums = [(Sf[f], Df[f], counts[f], counts[f]) for f in range(SHRINKAGE_FOLDS)]
        grid = self._shrinkage_grid(S, D, on_raw, d)
        scores = np.zeros((SHRINKAGE_FOLDS, grid.size))
        for f in range(SHRINKAGE_FOLDS):
            out = folds == f
            for g, L in enumerate(self._fold_factors(S, D, n_k, sums[f], grid, on_raw,
                                                     d if span else None)):
                if is_pairs:
                    P = got.pairs[out]
                    Y = row_images(Z, L, len(P))
                    scores[f, g] = heldout_score(factor_distances(Z, P[:, 0], P[:, 1], L, Y),
                                                 similar=sim[out])
                else:
                    t = got[out]
                    Y = row_images(Z, L, 2 * len(t))
                    scores[f, g] = heldout_score(factor_distances(Z, t[:, 0], t[:, 1], L, Y),
                                                 factor_distances(Z, t[:, 0], t[:, 2], L, Y))
        return self._chosen(grid, scores)

    def _check_heldout_memory(self, d: int, extra: int) -> None:
        """The held-out choice's d x d arrays beside the fit's: the folds'
        sums (2 per fold), the fold's statistics, inverses and factor (4),
        and ``extra`` (the partitioned fit's factors of one fold)."""
        k = 2 * SHRINKAGE_FOLDS + 4 + int(extra) + int(self._square_arrays)
        check_dense_memory(k * 8 * d * d, self,
                           f"{k} dense {d} x {d} arrays (the model and the held-out choice of "
                           "shrinkage='auto') do not fit; pass a number as shrinkage, or "
                           "reduce the dimension first (e.g. sklearn's TruncatedSVD)")

    def _shrinkage_grid(self, S, D, on_raw: bool, d: int) -> np.ndarray:
        """The grid of the held-out choice for the rank of the (preprocessed)
        pair differences' covariance ``S + D`` in ``d`` dimensions."""
        C = S + D
        if on_raw:
            C = self._preprocessed_second_moment(C)
        return shrinkage_grid(max(covariance_rank(C), 1), d)

    def _fold_factors(self, S, D, n_k, fold, grid, on_raw: bool, d_span):
        """The factors (preprocessed coordinates) of the models fitted
        without one fold, one per grid value, in turn: ``S, D`` are means
        over ``n_k = (similar, dissimilar)`` answers, ``fold = (S_f, D_f,
        h_s, h_d)`` the fold's unnormalised sums and counts."""
        Sf, Df, hs, hd = fold
        S_tr = (n_k[0] * S - Sf) / (n_k[0] - hs)
        D_tr = (n_k[1] * D - Df) / (n_k[1] - hd)
        S_tr, D_tr = 0.5 * (S_tr + S_tr.T), 0.5 * (D_tr + D_tr.T)
        if on_raw:
            S_tr = self._preprocessed_second_moment(S_tr)
            D_tr = self._preprocessed_second_moment(D_tr)
        for s in grid:
            yield kissme_factor(S_tr, D_tr, float(s), d_span)

    def _chosen(self, grid: np.ndarray, scores: np.ndarray) -> float:
        """Store ``shrinkage_grid_`` and ``shrinkage_scores_`` (the folds'
        mean score per grid value) and return the best value (the first, the
        lightest ridge, on ties)."""
        mean = scores.mean(axis=0)
        self.shrinkage_grid_ = np.asarray(grid, dtype=np.float64)
        self.shrinkage_scores_ = mean
        return float(grid[int(np.argmax(mean))])

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
        self.__dict__.pop("shrinkage_grid_", None)
        self.__dict__.pop("shrinkage_scores_", None)
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
            fixed = self._fixed_shrinkage()
            self.shrinkage_ = FALLBACK_SHRINKAGE if fixed is None else fixed
        elif self._fixed_shrinkage() is not None:
            be = plan.backend
            handles = be.map(class_stats.pair_sums_task, sup, (1, 2), rows_sup)
            m, (S, D) = be.gather(be.reduce(class_stats.add_pair_sums, handles))
            be.release(handles)
            if m == 0:
                raise ValueError("KISSME: the collection's partitions gave no triplet")
            S, D = 0.5 * (S + S.T) / m, 0.5 * (D + D.T) / m
            plan.info["report"] = {"passes": 1, "triplets": int(m)}
            self.shrinkage_ = self._fixed_shrinkage()
        else:
            S, D = self._partitioned_heldout(plan, sup, rows_sup, on_raw, d)
        self._set_model(S, D, on_raw, t0)

    def _partitioned_heldout(self, plan, sup, rows_sup, on_raw: bool, d: int):
        """``shrinkage="auto"`` from the partitions' triplets: the in-memory
        held-out choice (:meth:`_heldout_shrinkage`; the same folds, hashed on
        the row ids of the concatenated rows) in passes over the partitions:
        per fold, the answers and pair scatter sums (whose totals are
        ``Sigma_S`` and ``Sigma_D``); then, for each fold, the held-out
        triplets each model of the grid orders as answered.  Returns
        ``(Sigma_S, Sigma_D)`` and sets ``shrinkage_``."""
        be = plan.backend
        offsets = np.r_[0, np.cumsum(plan.n_rows)][:-1].astype(np.int64)
        counts, Sf, Df = gather_reduce(be, class_stats.add_arrays, be.map(
            distributed.fold_pair_sums_task, sup, rows_sup, offsets, SHRINKAGE_FOLDS))
        m = int(counts.sum())
        if m == 0:
            raise ValueError("KISSME: the collection's partitions gave no triplet")
        S, D = Sf.sum(axis=0), Df.sum(axis=0)
        S, D = 0.5 * (S + S.T) / m, 0.5 * (D + D.T) / m
        plan.info["report"] = {"passes": 1, "triplets": m}
        if not usable_counts(counts):
            self.shrinkage_ = FALLBACK_SHRINKAGE
            return S, D
        d_pre = int(self.scaler_.n_features_out_)
        grid = self._shrinkage_grid(S, D, on_raw, d_pre)
        self._check_heldout_memory(max(d, d_pre), grid.size)
        pre_sup = replace(sup, preprocessed=True)
        scores = np.zeros((SHRINKAGE_FOLDS, grid.size))
        for f in range(SHRINKAGE_FOLDS):
            factors = list(self._fold_factors(S, D, (m, m), (Sf[f], Df[f], counts[f],
                                                             counts[f]), grid, on_raw, None))
            (C,) = gather_reduce(be, class_stats.add_arrays, be.map(
                distributed.heldout_counts_task, sup, pre_sup, offsets, f,
                be.broadcast(factors)))
            scores[f] = C / counts[f]
        plan.info["report"]["passes"] = 1 + SHRINKAGE_FOLDS
        self.shrinkage_ = self._chosen(grid, scores)
        return S, D


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
            M = kissme_matrix(S, D, self.shrinkage_)
            L, rank = psd_factor(M, self.rank_tol)
        else:
            M_r, c = kissme_matrix_span(S, D, self.shrinkage_, Q.shape[0])
            L, rank = lift_psd_factor(M_r, Q, c, self.rank_tol)
            M = lift_square(M_r, Q, c)
            S, D = lift_square(S, Q, 0.0), lift_square(D, Q, 0.0)
        if rank == 0:
            warnings.warn("KISSME: no direction separates the similar pairs from the "
                          "dissimilar ones (M = 0): every distance is 0. Check the labels "
                          "or triplets.", UserWarning, stacklevel=4)
        self.similar_covariance_ = S
        self.dissimilar_covariance_ = D
        self.M_ = M
        self.components_, self.rank_ = L, rank
        self.history_ = {"step": [0], "seconds": [time.perf_counter() - t0]}
