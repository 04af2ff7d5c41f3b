"""LORETA: online learning on the manifold of rank-k matrices
(Shalit, Weinshall & Chechik, NIPS 2010).

The similarity ``S_W(q, p) = q^T W p`` uses ``W = A B^T`` with ``A, B`` of
full column rank k.  For a triplet ``(q, p+, p-)`` with hinge loss
``l = [1 - q^T W v]_+``, ``v = p+ - p-``, the ambient gradient is the rank-one
``-q v^T``; a step moves along its projection onto the tangent space and
retracts with the second-order retraction of Theorem 1,
``R_x(xi) = w1 x^+ w2`` (eq. 3), written on the factors:

* **LORETA-1** (Algorithm 3) for rank-one gradients ``G1 G2^T = eta q v^T``:

      A^ = A^+ G1,  B^ = B^+ G2,  Q = B^^T A^,
      A_delta = A A^ (-1/2 + 3Q/8) + G1 (1 - Q/2),   A <- A + A_delta B^^T,
      B_delta = B^+^T (B^T G2) (-1/2 + 3Q/8) + G2 (1 - Q/2),  B <- B + B_delta A^^T,

  and the pseudo-inverses follow by Meyer's rank-one update
  (:func:`tripletml.linalg.rank_one_update_with_pinv`): O((n + m) k) time and
  memory per step, never O(n k^2).
* **General LORETA** (Algorithm 2) for rank-r gradients (mini-batches of r
  triplets): the same formulas with n x r and r x r blocks and exact
  pseudo-inverses, O((n + m)(k + r)^2) per step.

Rank-one updates make the maintained pseudo-inverses drift, the faster the
worse the factors are conditioned.  Every ``pinv_check_every`` steps
``||A^+ A - I||_F`` (and the same for B) is measured (O(n k^2), amortised);
when it exceeds ``pinv_tol``, W is re-factored with balanced factors
(``cond(A) = cond(B) = sqrt(cond(W))``) and exact pseudo-inverses
(:func:`tripletml.linalg.pinv.balanced_factors`; W itself is unchanged).  The
largest drift measured is recorded in ``history_``.  The kernels and the
drift control live in :mod:`tripletml.algorithms.loreta.kernels` (shared with
:class:`tripletml.LORETAMultilabel`).
"""
from __future__ import annotations

from numbers import Integral

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import document_sampling
from tripletml.core.params import Interval, StrOptions
from tripletml.linalg.sparse_rows import diff_buffers
from tripletml.losses import triplet_hinge_array
from tripletml.algorithms.loreta.kernels import loreta1_triplet_steps, loreta_general_step
from tripletml.core.pinv_owner import PinvFactorsOwner
from tripletml.core.online import ETA0_AUTO, AutoStepMixin, OnlineTripletLearner
from tripletml.core.factored import (DEFAULT_RANK, LOWRANK_PARAMS, PINV_PARAMS, RANK_CAP,
                                     FactoredBilinearMixin)
from tripletml.core.docstrings import document_transform
from tripletml.distributed import mixing
from tripletml.algorithms.factored.averaging import FactorTailAverage, document_average

__all__ = ["LORETA"]


@document_average
@document_transform
@document_sampling
@document_preprocessing
class LORETA(AutoStepMixin, PinvFactorsOwner, FactorTailAverage, FactoredBilinearMixin,
             OnlineTripletLearner):
    """Low-rank bilinear similarity by Riemannian SGD (LORETA).

    Parameters
    ----------
    rank : int or None, default=None
        k, the rank of ``W = A B^T`` (at most the number of features: a
        larger explicit rank raises ValueError).  None: chosen from the
        spectrum of the preprocessed training rows, the smallest k whose
        principal directions hold 80 % of the energy ``sum_i ||x_i||^2``
        (i.e. the rows keep on average 80 % of their squared norm in the
        starting subspace, the error of the starting similarity on them is
        the remaining 20 %), at most ``min(16, max(1, n_features // 2))``:
        16 bounds the memory (``4 d k`` floats) and the ``O(d k)`` cost of
        a step; below d on purpose, see ``_rank_cap`` (the number of classes
        is not used: triplets need not come from classes).  The rank used
        is ``rank_``.  Also the width of
        ``transform`` (at most ``rank_`` columns: the positive directions
        of the symmetric part of W, see
        :class:`~tripletml.core.base.BilinearMixin`).
    eta0 : "auto" or float, default="auto"
        The constant step size (eta in the paper, Algorithms 2-3).  "auto":
        resolved once at the start of ``fit`` (or the first ``partial_fit``)
        from the preprocessed rows of the first 1000 triplets as
        ``1 / (median ||q||^2 * median ||p+ - p-||^2)``, the
        passive-aggressive step of the unfactored model for a unit loss (see
        :func:`tripletml.core.online.auto_step_size`), so that the step
        follows the scale of the data; the update itself is the paper's.
        The value used is ``eta_``.
    max_iter : int, default=1
        Passes over the triplets in ``fit`` (each in a new random order).
    n_triplets : int, default=100000
        Random class triplets sampled by ``fit`` from labels.
    {sampling}
    batch_size : int, default=1
        Triplets per step.  1: LORETA-1 (Algorithm 3, rank-one gradients,
        O((n+m)k) per step).  r > 1: general LORETA (Algorithm 2) on the
        rank-r gradient of the mean hinge loss of r consecutive triplets.
    solver : {"auto", "general"}, default="auto"
        "general" forces Algorithm 2 even for ``batch_size=1`` (a reference
        and a benchmark baseline).
    init : {"pca", "identity", "random"}, default="pca"
        "pca": ``A = B = U_k``, the top-k principal directions of the
        preprocessed training rows (eigenvectors of ``X^T X``, one pass over
        the rows; see :func:`tripletml.core.factored.data_spectrum`), so
        that ``W = U_k U_k^T`` and ``X W X^T`` is the best rank-k
        approximation of the dot products ``X X^T`` (Eckart-Young): the
        starting similarity is the plain dot product as far as rank k
        allows.  The factors are orthonormal (``cond(A) = cond(B) = 1``,
        exact pseudo-inverses ``A^+ = A^T``), the singular values of W are
        1 as at the paper's identity start (the scale ``eta0="auto"`` is
        set for), and U_k does not change when X is multiplied by c.
        "identity": ``A = B = [I_k; 0]`` (the paper's start: k ones on the
        diagonal of W, on the first k live axes), which sees only k of the
        d features (on five Gaussian classes, 200 features, rank 8: mAP
        .40 against the dot product's .62; from "pca" .94).  "random":
        random normal factors (see
        :func:`tripletml.core.factored.init_factors`).
    {average}
        For LORETA the truncated average is re-factored with balanced
        factors and exact pseudo-inverses (as the partitioned fit's mix);
        an average that lost rank keeps the last iterate.
    pinv_check_every : int, default=1000
        Steps between drift checks of the maintained pseudo-inverses.
    pinv_tol : float, default=1e-8
        Recompute the pseudo-inverses when ``||A^+ A - I||_F`` exceeds it.
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
    eta_ : float
        The step size used (``eta0``, or its resolved value for "auto").
    A_, B_ : ndarray of shape (n_features_preprocessed_, rank_)
        Factors, ``W = A_ B_^T``; the similarity is ``(x^T A_) (B_^T y)``.
    pinv_A_, pinv_B_ : ndarray of shape (n_features_preprocessed_, rank_)
        ``(A_^+)^T`` and ``(B_^+)^T`` (LORETA-1 state).
    t_ : int
        Triplets processed (over all calls).
    n_iter_ : int
        Passes made by the last ``fit`` (1 after ``partial_fit``).
    stop_reason_ : {"tol", "max_iter"}
    n_pinv_refresh_ : int
        Times the pseudo-inverses were recomputed.
    transform_fidelity_ : float
        Share of ``||W||_F^2`` that ``transform`` keeps (the PSD part of
        the symmetric part of ``A_ B_^T``; see
        :class:`~tripletml.core.base.BilinearMixin`).
    history_ : dict of lists
        One record per pass / ``partial_fit`` call: ``step``, ``seconds``,
        ``loss``, ``avg_loss``, ``mistake_rate`` (as OASIS) and
        ``pinv_drift`` (the largest drift measured since the previous record).

    Notes
    -----
    ``partial_fit(X, triplets)`` with ``batch_size=1`` makes exactly one
    LORETA-1 step per triplet, in order; with ``batch_size=r`` it makes one
    general step per block of r consecutive triplets (the last block may be
    shorter).  X may be CSR with any number of features; the data are never
    densified and the memory is O(n k).

    A step size too large for the data makes LORETA diverge (e.g. the
    defaults on the unscaled ``vowel`` set, whose loss grows from 0.6 to
    thousands); the divergence watch of the online learners stops such a run
    with a FloatingPointError advising a smaller ``eta0``.
    """

    _history_keys = ("loss", "avg_loss", "mistake_rate", "pinv_drift")
    _advice = "lower the step size (eta0) or the rank, or scale the features down"
    #: fit(ShardedCollection): iterative parameter mixing with a rank-k
    #: re-truncation of the mix (:mod:`tripletml.distributed.mixing`)
    _partitioned_strategy = mixing.STRATEGY
    #: eta0="auto": eta_ = 1 / (median ||q||^2 median ||v||^2) over the first 1000
    #: triplets (the unfactored PA step for a unit loss); measured (3 seeds,
    #: standardized): at k = d, c=0.01 already diverged on vowel after 30,000 steps; at
    #: the default k = d/2: c = 0.01 / 0.1 / 1 gave digits .259 / .475 / .777,
    #: segment .545 / .736 / .765, vowel .338 / .350 / .331, svmguide4 .526 / .551 / .519,
    #: wine .967 (0.1) / .975 (1) (Euclidean: .662, .664, .283, .205, .617)
    _auto_eta_c = 1.0

    @staticmethod
    def _default_rank(n_features: int) -> int:
        """``rank=None`` for a model initialized without rows:
        ``min(10, max(1, n_features // 2))``."""
        return min(DEFAULT_RANK, max(1, n_features // 2))

    @staticmethod
    def _rank_cap(n_features: int) -> int:
        """The largest rank ``rank=None`` picks: ``min(RANK_CAP, max(1, d //
        2))``.  Below the number of features on purpose: with k = d the
        retraction's error grows as the smallest singular value of W
        shrinks, and a constant step that learns for 30,000 steps diverges
        later (measured with the identity start: svmguide4 and
        balance-scale at k = d diverged after 70,000-90,000 steps; at k =
        d/2 they learned, .526 and .87 mAP against Euclidean's .205 and
        .603)."""
        return min(RANK_CAP, max(1, n_features // 2))
    _fitted_arrays = {name: ArraySpec(("d", "rank_"))
                      for name in ("A_", "B_", "pinv_A_", "pinv_B_")}

    def __init__(self, rank=None, *, eta0="auto", max_iter=1, n_triplets=100000, sampling="class",
                 batch_size=1, solver="auto", init="pca", average=True, pinv_check_every=1000,
                 pinv_tol=1e-8, tol=None, preprocessing="auto", random_state=None, verbose=0,
                 preprocessor=None):
        self.rank = rank
        self.eta0 = eta0
        self.max_iter = max_iter
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.batch_size = batch_size
        self.solver = solver
        self.init = init
        self.average = average
        self.pinv_check_every = pinv_check_every
        self.pinv_tol = pinv_tol
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    #: parameters renamed since 0.1, read under their new names from old model files
    _renamed_params = {"algorithm": "solver"}
    _parameter_constraints = {
        **OnlineTripletLearner._parameter_constraints,
        **LOWRANK_PARAMS,
        **PINV_PARAMS,
        "eta0": ETA0_AUTO,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "solver": [StrOptions({"auto", "general"})],
        "average": ["boolean"],
    }

    #: the truncated average must stay a rank-k point (exact pseudo-inverses)
    _average_needs_full_rank = True

    def _set_factors(self, A, B):
        """The truncated average as balanced factors with exact
        pseudo-inverses; the refresh count of the fit is kept."""
        n_refresh = int(getattr(self, "n_pinv_refresh_", 0))
        self._new_factors(A, B)
        self._factors.n_refresh = n_refresh
        self._store()

    # the span route on short sparse rows ----------------------------------
    def _fit_span(self, X, supervision, rng):
        """The span route also on sparse rows shorter than the span (which
        the generic rule leaves on the plain route, whose steps follow the
        non-zeros) where it pays for LORETA (:meth:`_span_pays`)."""
        if self._span_route is None and self._span_pays(X, supervision):
            self._span_route = True
            try:
                return super()._fit_span(X, supervision, rng)
            finally:
                self.__dict__.pop("_span_route", None)
        return super()._fit_span(X, supervision, rng)

    def _span_pays(self, X, supervision) -> bool:
        """Whether the span route is cheaper for LORETA-1 on these rows.

        A LORETA-1 step costs ``O(d k)`` whatever the sparsity of the rows
        (the retraction and Meyer's update touch every row of the factors
        and pseudo-inverses), against ``O(r k)`` on the ``r <= n``
        coordinates of the span of n rows; the route costs once ``O(n^2
        d)`` (the thin QR of the dense rows) and a dense ``n x d`` copy.
        So for fewer rows than features it pays when ``n^2 <= T k`` for the
        ``T`` steps of the fit (``max_iter`` passes over the triplets) and
        the dense copy fits in memory (dexter, 420 x 20,000 sparse rows,
        100,000 steps: a default fit took 664 s on the plain route under
        load).  The model is the same (``tests/test_span_route.py``)."""
        import scipy.sparse as sp

        from tripletml.core.validation import check_dense_memory
        from tripletml.linalg.span import span_route_applies

        if not (sp.issparse(X) and span_route_applies(*X.shape)) \
                or self.batch_size != 1 or self.solver != "auto":
            return False
        n, d = X.shape
        steps = int(np.asarray(supervision).shape[0]) * int(self.max_iter) \
            if isinstance(supervision, np.ndarray) and supervision.ndim == 2 else 0
        k = int(self.rank) if self.rank is not None else int(type(self)._rank_cap(d))
        if n * n > steps * k:
            return False
        try:
            check_dense_memory(3 * 8 * n * d, self, "")
        except MemoryError:
            return False
        return True

    # model -------------------------------------------------------------
    def _init_model(self, n_features, rng, X=None):
        self._init_factors(n_features, rng, X)
        self._new_factors(self.A_, self.B_)

    def _init_model_partitioned(self, n_features, rng, energy, spectrum=None):
        self._init_factors(n_features, rng, energy=energy, spectrum=spectrum)
        self._new_factors(self.A_, self.B_)

    def _check_resumable(self):
        self._resume_factors()

    def _block_multiple(self):
        return 1 if self.batch_size == 1 and self.solver == "auto" \
            else int(self.batch_size)

    def _run_steps(self, Xc, triplets):
        self._check_resumable()
        m = triplets.shape[0]
        losses, margins = np.zeros(m), np.zeros(m)
        if self.batch_size == 1 and self.solver == "auto":
            self._loreta1(Xc, triplets, losses, margins)
        else:
            self._general(Xc, triplets, losses, margins)
        self._store()
        return losses, margins

    def _loreta1(self, Xc, triplets, losses, margins):
        n = self.A_.shape[0]
        work = [np.empty(n) for _ in range(4)]
        vidx, vval = diff_buffers(Xc)
        eta = self._step_size()

        def kernel(f, start, stop):
            return loreta1_triplet_steps(f.A, f.PA, f.B, f.PB, Xc.indptr, Xc.indices, Xc.data,
                                         triplets, start, stop, eta, losses, margins, vidx,
                                         vval, *work)

        self._factors.run(kernel, triplets.shape[0], self._diverged, step0=self.t_)

    def _general(self, Xc, triplets, losses, margins):
        r = int(self.batch_size)
        eta = self._step_size()
        f = self._factors
        for s in range(0, triplets.shape[0], r):
            blk = triplets[s:s + r]
            Q = Xc[blk[:, 0]]
            V = Xc[blk[:, 1]] - Xc[blk[:, 2]]
            mg = np.asarray(((Q @ f.A) * (V @ f.B)).sum(axis=1)).ravel()
            if not np.isfinite(mg).all():
                raise self._diverged(self.t_ + s + 1)
            margins[s:s + r] = mg
            losses[s:s + r] = triplet_hinge_array(mg)
            active = losses[s:s + r] > 0.0
            if not active.any():
                continue
            # -eta * grad of the mean hinge loss = (eta / r) sum_active q v^T
            G1 = (Q[active].T * (eta / blk.shape[0])).toarray()
            G2 = V[active].T.toarray()
            f.A, f.B = loreta_general_step(f.A, f.B, G1, G2)
        # Algorithm 2 keeps no pseudo-inverses; store exact ones for the state
        f.exact()
