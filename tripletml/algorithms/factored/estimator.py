"""Bilinear similarities on a factored model ``W = A B^T`` (rank k), and the
baselines the LORETA paper compares with (its section 5.1):

* :class:`FactoredGD` -- stochastic gradient descent on the factors,
  ``A <- A + eta q (B^T v)^T``, ``B <- B + eta v (A^T q)^T`` (the paper prints
  ``B_new = A + ...``, a typo), ``v = p+ - p-``.
* :class:`IterativePA` -- passive-aggressive steps alternating over the two
  factors: ``eta_A = min(l / (||q||^2 ||B^T v||^2), C)`` updates A, then the
  loss is recomputed and ``eta_B = min(l / (||v||^2 ||A^T q||^2), C)`` updates
  B.  (The paper writes ``max(., C)``; with C described as the cap on the
  step, ``min`` is meant, as in PA-I.)
* :class:`NaivePA` ("PA v2") -- one step size for both factors, computed as
  for the unfactored model: ``eta = min(l / (||q||^2 ||v||^2), C)``.

All three cost O(nnz(q) k + nnz(v) k) per step: only the rows of A and B at
the non-zeros of q and v change.
"""
from __future__ import annotations

from numbers import Real

import numpy as np

from tripletml.core.step_cap import C_AUTO, STEP_CAP_ARRAYS, HeldoutStepCapMixin
from tripletml.triplets import SAMPLING_PARAM_DOC
from tripletml.core.preprocessing import PREPROCESSING_PARAM_DOC
from tripletml.core.docstrings import PREPROCESSOR_DOC
from tripletml.core.params import Interval
from tripletml.core.factored import (DEFAULT_RANK, LOWRANK_PARAMS, PINV_PARAMS,  # noqa: F401
                                     FactoredBilinearMixin, Spectrum, column_energy,
                                     data_spectrum, init_factors, live_axes, resolve_rank,
                                     second_moment, spectral_rank, spectrum_from)
from tripletml.linalg.sparse_rows import diff_buffers
from tripletml.algorithms.factored.averaging import AVERAGE_DOC, FactorTailAverage
from tripletml.algorithms.factored.kernels import GD, ITER_PA, NAIVE_PA, factored_steps
from tripletml.core.online import ETA0_AUTO, AutoStepMixin, OnlineTripletLearner
from tripletml.distributed import mixing

__all__ = ["DEFAULT_RANK", "resolve_rank", "FactoredBilinearMixin", "FactoredGD", "IterativePA", "NaivePA", "init_factors",
           "LOWRANK_PARAMS", "PINV_PARAMS", "column_energy", "live_axes", "Spectrum",
           "spectrum_from", "data_spectrum", "second_moment", "spectral_rank"]


class _FactoredBaseline(FactorTailAverage, FactoredBilinearMixin, OnlineTripletLearner):
    """Shared driver of the three baselines; each subclass declares exactly
    the parameters its update rule uses."""

    _method = GD
    #: fit(ShardedCollection): iterative parameter mixing with a rank-k
    #: re-truncation of the mix (:mod:`tripletml.distributed.mixing`)
    _partitioned_strategy = mixing.STRATEGY

    _parameter_constraints = {
        **OnlineTripletLearner._parameter_constraints,
        **LOWRANK_PARAMS,
        "eta0": ETA0_AUTO,                                    # FactoredGD
        "C": C_AUTO,                                         # the PA baselines
        "average": ["boolean"],
    }

    def _init_model(self, n_features, rng, X=None):
        self._init_factors(n_features, rng, X)

    def _init_model_partitioned(self, n_features, rng, energy, spectrum=None):
        self._init_factors(n_features, rng, energy=energy, spectrum=spectrum)

    def _run_steps(self, Xc, triplets):
        m = triplets.shape[0]
        losses, margins = np.zeros(m), np.zeros(m)
        bad = factored_steps(self.A_, self.B_, Xc.indptr, Xc.indices, Xc.data, triplets,
                              self._method, self._step_size() if self._method == GD else 0.0,
                              self._step_cap() if hasattr(self, "C") else 0.0, losses, margins,
                              *diff_buffers(Xc))
        if bad >= 0:
            raise self._diverged(self.t_ + bad + 1)
        return losses, margins


_DOC_COMMON = """
    max_iter : int, default=1
        Passes over the triplets in ``fit`` (each in a new random order).
    n_triplets : int, default=100000
        Triplets sampled by ``fit`` from labels.
    {sampling}
    init : {{"pca", "identity", "random"}}, default="pca"
        As LORETA: "pca" starts at ``A = B = U_k``, the top-k principal
        directions of the preprocessed training rows (``W = U_k U_k^T``, the
        best rank-k approximation of the dot product on them); "identity"
        at the paper's ``[I_k; 0]`` (:func:`init_factors`).
    {average}
    tol : float or None, default=None
        None: all ``max_iter`` passes (the paper's fixed budget); a float:
        stop when the mean hinge loss of a pass changed by less than ``tol``
        relative to the previous pass.
    {preprocessing}
    {preprocessor}
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    rank_ : int
        The rank k used (``rank``, or the spectral rule for None).
    averaged_ : bool
        Whether ``fit`` returned the truncated average of its last pass's
        iterates (``average=True``) or the last iterate.
    A_, B_ : ndarray of shape (n_features_preprocessed_, rank_)
        ``W = A_ B_^T``.
    transform_fidelity_ : float
        Share of ``||W||_F^2`` that ``transform`` keeps; the width of
        ``transform`` is at most ``rank_`` (see
        :class:`~tripletml.core.base.BilinearMixin`).
    t_ : int
        Triplets processed (over all calls).
    n_iter_ : int
        Passes made by the last ``fit`` (1 after ``partial_fit``).
    stop_reason_ : {{"tol", "max_iter"}}
    history_ : dict of lists
        One record per pass / ``partial_fit`` call: ``step``, ``seconds``,
        ``loss``, ``avg_loss``, ``mistake_rate`` (as OASIS).
"""
#: the shared parameters' text, filled into _DOC_COMMON
_DOC_ARGS = dict(preprocessing=PREPROCESSING_PARAM_DOC[4:-1], sampling=SAMPLING_PARAM_DOC[4:-1],
                 preprocessor=PREPROCESSOR_DOC[4:-1], average=AVERAGE_DOC)


class FactoredGD(AutoStepMixin, _FactoredBaseline):
    __doc__ = ("""Stochastic gradient descent on the factors of ``W = A B^T`` (LORETA paper,
    baseline GD): ``A += eta0 q (B^T v)^T``, ``B += eta0 v (A^T q)^T``.

    Parameters
    ----------
    rank : int or None, default=None
        k, the rank of ``W = A B^T`` (an explicit rank above the number of
        features raises ValueError).  None: the smallest k whose principal
        directions hold 80 % of the energy of the preprocessed training
        rows, at most ``min(16, n_features)`` (as LORETA).
    eta0 : "auto" or float, default="auto"
        The constant step size (eta in the paper).  "auto": resolved once at
        the start of ``fit`` (or the first ``partial_fit``) from the
        preprocessed rows of the first 1000 triplets as
        ``0.3 / (median ||q||^2 * median ||p+ - p-||^2)`` (see
        :func:`tripletml.core.online.auto_step_size`); the value used is
        the fitted attribute ``eta_``.""" + _DOC_COMMON.format(**_DOC_ARGS))
    #: measured (3 seeds, standardized, k = min(10, d)): c=0.03 was too small on segment
    #: and digits (.620 / .307; Euclidean .664 / .662); c=0.3 learned on digits, segment,
    #: vowel, svmguide4 (.662 / .779 / .348 / .475); c=0.5 and 1 diverged on svmguide4
    _auto_eta_c = 0.3
    _method = GD

    def __init__(self, rank=None, *, eta0="auto", max_iter=1, n_triplets=100000, sampling="class",
                 init="pca", average=True, tol=None, preprocessing="auto", random_state=None, verbose=0,
                 preprocessor=None):
        self.rank = rank
        self.eta0 = eta0
        self.max_iter = max_iter
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.init = init
        self.average = average
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor


class _PABaseline(HeldoutStepCapMixin, _FactoredBaseline):
    _advice = "lower C or scale the features down"
    _default_C = 0.001
    _fitted_arrays = {**_FactoredBaseline._fitted_arrays, **STEP_CAP_ARRAYS}

    def __init__(self, rank=None, *, C="auto", max_iter=1, n_triplets=100000, sampling="class",
                 init="pca", average=True, tol=None, preprocessing="auto", random_state=None, verbose=0,
                 preprocessor=None):
        self.rank = rank
        self.C = C
        self.max_iter = max_iter
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.init = init
        self.average = average
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor


_DOC_PA = """

    Parameters
    ----------
    rank : int or None, default=None
        k, the rank of ``W = A B^T`` (an explicit rank above the number of
        features raises ValueError).  None: the smallest k whose principal
        directions hold 80 % of the energy of the preprocessed training
        rows, at most ``min(16, n_features)`` (as LORETA).
    C : float or "auto", default="auto"
        Cap on the passive-aggressive step sizes (C in the paper, PA-I).
        "auto": 0.001 for class labels (and for ``partial_fit`` and a
        partitioned fit); for answers (triplets given, or pairs) the best of
        ``0.001 * 10^-j``, ``j = 0..4``, on the answers headed by a held-out
        fifth of the items, fitted on the answers among the others
        (:mod:`tripletml.core.step_cap`; ``C_``, ``C_grid_``,
        ``C_scores_``).  The label default was chosen on standardized features
        (``preprocessing="auto"``), 3 seeds: IterativePA with C = 0.1 / 0.01
        / 0.001 gave vowel .198 / .210 / .347, segment .484 / .557 / .775,
        digits .290 / .550 / .776 (Euclidean .283, .664, .662); NaivePA at
        C=0.001: letter .294, digits .757 (Euclidean .223, .662)."""


class IterativePA(_PABaseline):
    __doc__ = ("Passive-aggressive steps alternating over A and B (LORETA paper, "
               "baseline PA): ``eta_A = min(l / (||q||^2 ||B^T v||^2), C)``, then "
               "``eta_B = min(l' / (||v||^2 ||A^T q||^2), C)`` with the loss l' after the "
               "A step." + _DOC_PA + _DOC_COMMON.format(**_DOC_ARGS))
    _method = ITER_PA


class NaivePA(_PABaseline):
    __doc__ = ("Passive-aggressive step on both factors with the unfactored step size "
               "``eta = min(l / (||q||^2 ||v||^2), C)`` (LORETA paper, baseline PA v2)."
               + _DOC_PA + _DOC_COMMON.format(**_DOC_ARGS))
    _method = NAIVE_PA
