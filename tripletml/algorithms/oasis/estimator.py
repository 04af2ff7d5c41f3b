"""OASIS: Online Algorithm for Scalable Image Similarity (Chechik et al., JMLR 2010).

Passive-aggressive learning of a bilinear similarity ``S_W(x, y) = x^T W y``
from triplets.  For triplet ``(q, p+, p-)`` with hinge loss
``l = [1 - q^T W p+ + q^T W p-]_+`` and ``V = q (p+ - p-)^T``:

    tau = min(C, l / ||V||_F^2),    W <- W + tau V,

where ``||V||_F^2 = ||q||^2 ||p+ - p-||^2``.  W starts at the identity.
"""
from __future__ import annotations

from numbers import Real

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.preprocessing import document_preprocessing
from tripletml.triplets import document_sampling
from tripletml.core.params import Interval, StrOptions
from tripletml.core.base import BilinearMixin
from tripletml.core.step_cap import C_AUTO, STEP_CAP_ARRAYS, HeldoutStepCapMixin
from tripletml.linalg.sparse_rows import (add_from_gram, add_scaled, diff_buffers, gram_space,
                                          used_rows)
from tripletml.losses import triplet_hinge_array
from tripletml.algorithms.oasis.kernels import gram_route_pays, oasis_gram_steps, oasis_margins, oasis_steps
from tripletml.core.online import WATCH_HEAD, OnlineTripletLearner
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform
from tripletml.distributed import mixing

__all__ = ["OASIS"]


@document_transform
@document_sampling
@document_preprocessing
class OASIS(HeldoutStepCapMixin, BilinearMixin, OnlineTripletLearner):
    """Online passive-aggressive bilinear similarity learning (OASIS).

    Parameters
    ----------
    C : float or "auto", default="auto"
        Aggressiveness cap on the step ``tau`` (C in the paper, PA-I, eq. 6).
        "auto": 0.01 for class labels (and for ``partial_fit`` and a
        partitioned fit); for answers (triplets given, or pairs) the best of
        ``0.01 * 10^-j``, ``j = 0..4``, on the answers headed by a held-out
        fifth of the items, fitted on the answers among the others
        (:mod:`tripletml.core.step_cap`; ``C_``, ``C_grid_``,
        ``C_scores_``).  Noisy answers followed at the cap chosen on labels
        lose to the start (the identity).  The label default (formerly 0.1)
        was chosen on standardized features
        (``preprocessing="auto"``), 3 seeds: C=0.01 against C=0.1 gave
        vowel .311 / .275, segment .706 / .632, vehicle .527 / .493,
        digits .720 / .720, letter .213 / .187 (Euclidean .283, .664, .382,
        .662, .223).  Confirmed with the lift of ``"sphere"`` (the default
        since) and 30,000 triplets, C = 0.01 / 0.03 / 0.1: vehicle .578 /
        .565 / .563, vowel .361 / .329 / .310, segment .725 / .685 / .680,
        letter .249 / .238 / .238, iris .929 / .921 / .905, digits .762
        for all three.
    max_iter : int, default=1
        Passes over the triplets in ``fit`` (each in a new random order).
    n_triplets : int, default=30000
        Random class triplets sampled by ``fit`` when labels are given.
        Chosen on the ten shipped sets (defaults otherwise, 3 seeds): 30,000
        against 10,000 gave vehicle .578 / .536, svmguide4 .512 / .492,
        segment .725 / .706, letter .249 / .240 (seed 0: .252 / .218,
        Euclidean .221), digits .762 / .725, vowel .361 / .367, the others
        within .005; a fit takes milliseconds either way.
    {sampling}
    init : {"identity", "zeros"}, default="identity"
        Initial W (the paper uses the identity).
    average : bool, default=True
        ``fit`` returns the average of the iterates of its last pass (tail
        averaging, the online-to-batch conversion of Cesa-Bianchi, Conconi &
        Gentile, IEEE Trans. Inf. Theory 2004), taken at the end of each
        block of steps (about 20 per pass, each weighted by its steps), not
        the last iterate.  Why: a PA step corrects the current triplet's
        loss in full (the cap C does not bind on rows of unit entries with
        more than a few features: ``l / (||q||^2 ||p+ - p-||^2)`` is about
        ``l / (2 d^2)``), so the last iterate follows the last answers,
        noise included; the average of the iterates is the estimate of
        low variance (iterative parameter mixing, the partitioned fit, is
        the same averaging over partitions, and it won where the last
        iterate lost).  Measured at the defaults (``bench_defaults_all``,
        seed 0), last iterate -> average: segment .727 -> .783, vehicle
        .613 -> .661, vowel .360 -> .392, ionosphere .835 -> .878,
        wine-quality .419 -> .474, optdigits .792 -> .801, digits .779 ->
        .778, semeion .635 -> .616 (Euclidean .664, .378, .277, .670, .388,
        .683, .648, .461).  False: the paper's last iterate.
        ``partial_fit`` always makes plain PA steps (one update per
        triplet) from the current ``W_``.
    tol : float or None, default=None
        None: make all ``max_iter`` passes (the paper's fixed budget).  A
        float: stop after the first pass whose mean hinge loss changed by
        less than ``tol`` relative to the previous pass (ConvergenceWarning
        if ``max_iter`` passes end first).
    {preprocessing}
    {n_components}
    {preprocessor}
    random_state : None, int or numpy Generator
        Seeds triplet sampling and the step order.
    verbose : int, default=0
        Progress bar over the steps on a terminal when > 0.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_preprocessed_, n_features_preprocessed_)
        The learned bilinear matrix.
    transform_fidelity_ : float
        Share of ``||W_||_F^2`` that ``transform`` keeps (the PSD part of
        the symmetric part of W, see :class:`~tripletml.core.base.BilinearMixin`;
        below 1 for a non-symmetric W).
    n_features_in_ : int
    C_ : float
        The cap used (``C``, or what "auto" resolved to).
    C_grid_, C_scores_ : ndarray of shape (5,)
        With "auto" on answers: the caps tried and the held-out triplet
        accuracy of each (absent otherwise).
    averaged_ : bool
        Whether ``fit`` returned the average of its last pass's iterates
        (``average=True`` and a third d x d array fits in memory) or the
        last iterate.
    t_ : int
        Number of PA steps taken (over all ``fit``/``partial_fit`` calls).
    n_iter_ : int
        Passes made by the last ``fit`` (1 after ``partial_fit``).
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        One record per pass (per ``partial_fit`` call): ``step``, ``seconds``,
        ``loss`` (mean hinge loss of the steps since the previous record), ``avg_loss`` (cumulative average loss, OASIS paper
        Fig. 1 / SDCA paper Fig. 1) and ``mistake_rate`` (cumulative fraction
        of steps whose triplet was violated before the update).

    Notes
    -----
    Dense and CSR X share one code path: each step costs
    ``O(nnz(q) (nnz(p+) + nnz(p-)))`` (``O(d^2)`` for dense rows).
    """

    #: d x d arrays held while fitting (W_ and the update temporaries); the
    #: average of ``average=True`` is a third one when it fits (see
    #: :meth:`_check_square_memory`)
    _square_arrays = 2
    _fitted_arrays = {"W_": ArraySpec(("d", "d")), **STEP_CAP_ARRAYS}
    _advice = "lower C or scale the features down"
    #: fit(ShardedCollection): iterative parameter mixing (:mod:`tripletml.distributed.mixing`)
    _partitioned_strategy = mixing.STRATEGY
    #: the model parameter mixing averages (:func:`tripletml.distributed.mixing.model_kind`)
    _model_kind = "dense"
    #: None: the Gram route where it is cheaper (``gram_route_pays``); tests
    #: force True / False to compare the two
    _gram_route = None

    def __init__(self, C="auto", *, max_iter=1, n_triplets=30000, sampling="class", init="identity",
                 average=True, tol=None, preprocessing="auto", random_state=None, verbose=0,
                 n_components=None, preprocessor=None):
        self.C = C
        self.average = average
        self.max_iter = max_iter
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.init = init
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.n_components = n_components
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **OnlineTripletLearner._parameter_constraints,
        "C": C_AUTO,
        "init": [StrOptions({"identity", "zeros"})],
        "average": ["boolean"],
        "n_components": N_COMPONENTS_PARAM,
    }

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`): W starts at ``c I``
        and every step ``tau q v^T`` lies in span x span with ``tau`` from
        inner products of rows, so the fit on the span's coordinates is the
        same model."""
        return {"W_": 1.0 if self.init == "identity" else 0.0}

    def _init_model(self, n_features, rng, X=None):
        self.W_ = np.eye(n_features) if self.init == "identity" else np.zeros((n_features,
                                                                                n_features))

    # tail averaging (``average=True``): fit's passes only --------------
    def _check_square_memory(self, d: int) -> None:
        """Two d x d arrays must fit (MemoryError otherwise); the average
        of ``average=True`` is a third, kept only when it fits too (else
        ``fit`` returns the last iterate: ``averaged_`` says which)."""
        super()._check_square_memory(d)
        self._can_average = True
        if self.average:
            from tripletml.core.validation import check_dense_memory
            try:
                check_dense_memory(3 * 8 * d * d, self, "")
            except MemoryError:
                self._can_average = False

    def _fit_plain(self, X, triplets, rng):
        self._avg, self._avg_n = None, 0
        try:
            super()._fit_plain(X, triplets, rng)
            self.averaged_ = bool(self._avg is not None and self._avg_n > 0)
            if self.averaged_:
                self.W_ = np.divide(self._avg, self._avg_n, out=self._avg)
        finally:
            self._avg, self._avg_n = None, 0

    def _begin_epoch(self, rng, m):
        """A pass of ``fit`` starts: the average restarts (the last pass's),
        in the previous pass's array when there is one (a d x d array is
        not allocated again: on 20,000 features each costs seconds)."""
        if self.average and getattr(self, "_can_average", True):
            avg = getattr(self, "_avg", None)
            if avg is None or avg.shape != self.W_.shape:
                self._avg = np.zeros_like(self.W_)
            else:
                avg.fill(0.0)
            self._avg_n = 0

    def _run_block(self, Xc, triplets, idx, pos):
        out = super()._run_block(Xc, triplets, idx, pos)
        if getattr(self, "_avg", None) is not None:
            k = int(idx.shape[0])
            add_scaled(self._avg, k, self.W_)          # avg += k W, no temporary
            self._avg_n += k
        return out

    def _run_steps(self, Xc, triplets):
        m = triplets.shape[0]
        losses = np.empty(m)
        margins = np.empty(m)
        if self._gram_route is not False:
            rows, local = used_rows(triplets, Xc.shape[0])
            R = Xc[rows]
            if self._gram_route or gram_route_pays(len(rows), R.nnz, m, Xc.shape[1]):
                bad = self._gram_steps(R, local, losses, margins)
                if bad >= 0:
                    raise self._diverged(self.t_ + bad + 1)
                return losses, margins
        bad = oasis_steps(self.W_, Xc.indptr, Xc.indices, Xc.data, triplets, self._step_cap(),
                           losses, margins, *diff_buffers(Xc))
        if bad >= 0:
            raise self._diverged(self.t_ + bad + 1)
        return losses, margins

    def _gram_steps(self, R, local, losses, margins) -> int:
        """The block's steps by :func:`~tripletml.algorithms.oasis.kernels.oasis_gram_steps`
        on its rows ``R`` (CSR, k x d): ``H = R W R^T``, the steps, then
        ``W += R^T A R`` (BLAS on dense rows)."""
        H, G, Rd = gram_space(R, self.W_)
        A = np.zeros_like(G)
        bad = oasis_gram_steps(H, G, R.indptr, R.indices, R.data, local,
                               self._step_cap(), losses, margins, A, *diff_buffers(R))
        add_from_gram(self.W_, R, Rd, A)
        return bad

    def _initial_loss(self, Xc, triplets):
        """Mean hinge loss of the initial W on the first ``WATCH_HEAD``
        triplets (the divergence watch's reference), by the step kernel's
        margin: a compiled loop instead of sparse row indexing (it was 0.4
        of svmguide4's 4.7 ms fit).  With many features on dense rows (where
        each margin costs d^2) one BLAS product ``(Q W) . V`` instead: 100
        margins at d = 4096 took 3.4 s in the loop."""
        t = triplets[:WATCH_HEAD]
        if t.shape[0] == 0:
            return None
        d = Xc.shape[1]
        with np.errstate(all="ignore"):
            if d >= 512 and Xc[t[:, 0]].nnz > 0.25 * t.shape[0] * d:
                Q = Xc[t[:, 0]].toarray()
                V = (Xc[t[:, 1]] - Xc[t[:, 2]]).toarray()
                mg = np.einsum("ij,ij->i", Q @ self.W_, V)
            else:
                mg = np.empty(t.shape[0])
                oasis_margins(self.W_, Xc.indptr, Xc.indices, Xc.data, t, mg,
                              *diff_buffers(Xc))
            return float(np.mean(triplet_hinge_array(mg)))

    def _model_finite(self):
        return bool(np.isfinite(self.W_).all())

    def _apply(self, X):
        return np.asarray(X @ self.W_)

    def _bilinear_matrix(self) -> np.ndarray:
        """The learned W (a copy)."""
        return self.W_.copy()
