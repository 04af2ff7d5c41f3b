"""SCML: Sparse Compositional Metric Learning (Shi, Bellet & Sha, AAAI
2014), a sparse non-negative combination of rank-one metrics learned from
triplets.  The optimization is :mod:`tripletml.algorithms.scml.kernels`."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.engine import apply_result, run
from tripletml.engine.threads import fit_work, limit_threads, prelude_work
from tripletml.engine.whole import WholeRun
from tripletml.core.validation import check_dense_memory
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.engine.early_stopping import (BLEND_FOLDS, IDENTITY_BLEND_GRID, MIN_FOLD_ANSWERS,
                                             check_blend_record, choose_toward_last,
                                             two_protocol_splits)
from tripletml.linalg import psd_factor_of_rows
from tripletml.linalg.span import reduce_rows, span_basis
from tripletml.algorithms.kissme.kernels import heldout_score
from tripletml.core.preprocessing import document_preprocessing
from tripletml.algorithms.scml.kernels import (TripletDeltas, lda_basis, scml_rda,
                                               triplet_diff_basis_span)
from tripletml.triplets import AllLabels, ClassCodes, knn_triplets
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform

__all__ = ["SCML"]


def _dense(X) -> np.ndarray:
    return np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)


def _identity_coordinates(X) -> np.ndarray:
    """Rows whose Euclidean distances are X's: X on the span of its rows
    when they are fewer than the features (``n x r``), else X."""
    n, d = X.shape
    return reduce_rows(X, span_basis(X)) if n < d else _dense(X)


def _metric_coordinates(X, B, w: np.ndarray) -> np.ndarray:
    """Rows whose Euclidean distances are those of ``M = B^T diag(w) B``:
    ``X B_a^T diag(sqrt(w_a))`` over the weights' support ``a``; ``B`` may
    be a :class:`_SpanBasis` (``X Q`` then ``B_r``'s rows)."""
    on = np.flatnonzero(w)
    if isinstance(B, _SpanBasis):
        return np.asarray(X @ B.Q, dtype=np.float64) @ B.B[on].T * np.sqrt(w[on])
    return np.asarray(X @ B[on].T, dtype=np.float64) * np.sqrt(w[on])


class _SpanBasis:
    """A basis ``B Q^T`` kept on the span's coordinates (a held-out fold's
    fit, which never needs the lifted ``n_basis x d`` rows)."""

    def __init__(self, B: np.ndarray, Q: np.ndarray):
        self.B, self.Q = B, Q

    @property
    def shape(self) -> tuple[int, int]:
        return (self.B.shape[0], self.Q.shape[0])


#: entries of one block of differences in :func:`_sqdist` (32 MiB)
_BLOCK_ENTRIES = 1 << 22


def _coordinates_work(n: int, B) -> float:
    """Multiply-adds of the rows' basis coordinates ``X B^T`` (``n d K``;
    ``n d r + n r K`` through a basis kept on the rows' span), the thread
    rule's work (:mod:`tripletml.engine.threads`)."""
    if isinstance(B, _SpanBasis):
        d, r = B.Q.shape
        return float(n) * r * (d + B.B.shape[0])
    return float(n) * B.shape[0] * B.shape[1]


def _sqdist(Z: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances of the rows ``Z[i]`` and ``Z[j]``, in
    blocks of at most :data:`_BLOCK_ENTRIES` differences (many answers on
    wide rows never form an answers x features array)."""
    out = np.empty(len(i))
    step = max(1, _BLOCK_ENTRIES // max(Z.shape[1], 1))
    for a in range(0, len(i), step):
        D = Z[i[a:a + step]] - Z[j[a:a + step]]
        out[a:a + step] = np.einsum("ij,ij->i", D, D)
    return out


def _answer_scales(ZM: np.ndarray, Z: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """``(S_w, S_I)``: the answers' pairs ``(q, p+)`` and ``(q, p-)``
    squared distances summed under the learned metric (coordinates ``ZM``)
    and under the identity (``Z``); 1 where a sum is 0."""
    s_m = sum(float(_sqdist(ZM, t[:, 0], t[:, j]).sum()) for j in (1, 2))
    s_i = sum(float(_sqdist(Z, t[:, 0], t[:, j]).sum()) for j in (1, 2))
    return (s_m if s_m > 0 else 1.0), (s_i if s_i > 0 else 1.0)


def _blend_weights(ZM: np.ndarray, Z: np.ndarray, t: np.ndarray, s: float
                   ) -> tuple[float, float]:
    """``((1 - s) / S_w, s / S_I)`` of the blend on the answers ``t``."""
    s_m, s_i = _answer_scales(ZM, Z, t)
    return (1.0 - s) / s_m, s / s_i


@document_transform
@document_preprocessing
class SCML(MahalanobisMixin, TripletLearner):
    """Sparse Compositional Metric Learning: ``M = sum_b w_b u_b u_b^T``, a
    sparse non-negative combination of rank-one metrics on a basis of
    directions.

    The weights solve the paper's global problem (eq. 4)

        min_{w >= 0}  (1/m) sum_{(q, p+, p-)} [1 + d_w(q, p+) - d_w(q, p-)]_+ + alpha ||w||_1,

    ``d_w(x, x') = sum_b w_b (u_b . (x - x'))^2``, by mini-batch regularized
    dual averaging with AdaGrad steps (as the paper; closed-form proximal
    step, :func:`tripletml.algorithms.scml.kernels.rda_step`).  ``M`` is PSD by
    construction; the l1 term zeroes most weights.

    From labels ``fit(X, y)`` the basis is the paper's (Sec. 4.1): the
    leading LDA directions of the neighborhoods of k-means centers at two
    scales, and the triplets are every point's ``k_genuine`` nearest
    same-class points with its ``k_impostor`` nearest other-class points
    (:func:`tripletml.triplets.knn_triplets`), as metric-learn's
    SCML_Supervised.  From index triplets ``fit(X, triplets=T)`` the basis
    comes from the triplets (positive eigen-directions of batches' negative
    minus positive difference scatters,
    :func:`tripletml.algorithms.scml.kernels.triplet_diff_basis`).

    Parameters
    ----------
    alpha : float, default=1e-5
        Weight of the l1 penalty (the paper's beta).
    basis : {"auto", "lda", "triplet_diffs"}, default="auto"
        "auto": "lda" with labels, "triplet_diffs" with triplets ("lda"
        needs labels).
    n_basis : int or None, default=None
        Basis size; None: ``min(20 d, 2 n e - 1)`` for "lda" (e = min(c - 1,
        d)), ``80 min(d, u - 1)`` for "triplet_diffs" (``u`` the distinct
        rows the triplets name: the dimension their differences span;
        metric-learn's ``80 d`` when the rows outnumber the features).
    k_genuine, k_impostor : int, default=3 and 10
        Target neighbors and impostors per point (labels only).
    eta0 : float, default=1.0
        Step scale of the dual averaging (1 / gamma in metric-learn's
        parametrisation: its default gamma=5e-3 is eta0=200, which
        oscillated and ended at 2-30 times the objective of eta0=1 on
        standardized iris and wine).
    batch_size : int, default=10
        Triplets per stochastic step.
    max_iter : int, default=10000
        Stochastic steps.
    tol : float or None, default=1e-3
        Every ``check_every`` steps the full objective is evaluated and the
        best weights kept; stop when the best objective improved by at most
        ``tol`` (relative) over the last ``check_every`` steps.  None: run
        ``max_iter`` steps.  Reaching ``max_iter`` is the paper's fixed
        budget and gives no warning.
    check_every : int, default=500
        Steps between full-objective evaluations.
    shrinkage : float in [0, 1] or "auto", default="auto"
        Weight ``s`` of the features' own geometry in ``M_ = (1 - s) M_w /
        S_w + s I / S_I``, ``M_w`` the paper's ``sum_b w_b u_b u_b^T`` and
        ``S_w``, ``S_I`` the squared distances of the fit answers' pairs
        ``(q, p+)`` and ``(q, p-)`` summed under ``M_w`` and under the
        identity (both terms on the same scale: the blend is scale-free).
        ``M_w`` starts at 0 and learns only the directions its basis holds,
        so on noisy answers it can rank below the features' own distance;
        "auto": with class labels 0 (the paper's ``M``); on triplets the
        value of ``0, 1/11, 1/2, 10/11, 100/101, 1`` chosen as MMC's
        ``shrinkage`` (held-out triplet accuracy over 3 folds of the items
        and 3 folds of the answers, refitting the weights on each fold's
        answers; the value whose smaller gain over ``s = 1`` is largest), 0
        when a fold would score fewer than 5 answers.
    {preprocessing}
    random_state : None, int or numpy Generator
        k-means, the basis batches and the stochastic steps.
    verbose : int, default=0
    {n_components}
    {preprocessor}

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
    components_ : ndarray of shape (``rank_``, d)
        ``L`` with ``L^T L = M_``: the eigen-directions of ``M_`` scaled by
        the roots of their eigenvalues (above 1e-12 times the largest; all
        ``d`` with ``shrinkage_ > 0``), largest first.
    rank_ : int
    basis_ : ndarray of shape (n_basis, d)
        The unit directions ``u_b``.
    weights_ : ndarray of shape (n_basis,)
        ``w >= 0`` (mostly zero).
    shrinkage_ : float
        The weight ``s`` used (``shrinkage`` or the choice of "auto").
    metric_weight_, identity_weight_ : float
        ``M_ = metric_weight_ basis_^T diag(weights_) basis_ +
        identity_weight_ I`` (``(1 - s) / S_w`` and ``s / S_I``; 1 and 0
        when ``s = 0``).
    shrinkage_grid_ : ndarray of shape (6,)
    shrinkage_scores_ : ndarray of shape (2, 6)
        With "auto" on triplets: the grid and its mean held-out accuracies
        (row 0: answers among held-out items, row 1: held-out answers).
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        ``step``, ``seconds``, ``objective`` (the full objective at the check)
        and ``convergence`` (the relative improvement of the best objective).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import SCML
    >>> X, y = load_iris(return_X_y=True)
    >>> SCML(random_state=0).fit(X, y).M_.shape
    (4, 4)
    """

    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "basis_": ArraySpec((None, "d")),
        "weights_": ArraySpec((None,)),
        "shrinkage_grid_": ArraySpec((None,), optional=True),
        "shrinkage_scores_": ArraySpec((2, None), optional=True),
    }
    _square_arrays = 4

    def __init__(self, alpha=1e-5, *, basis="auto", n_basis=None, k_genuine=3, k_impostor=10,
                 eta0=1.0, batch_size=10, max_iter=10000, tol=1e-3, check_every=500,
                 shrinkage="auto", preprocessing="auto", random_state=None, verbose=0,
                 n_components=None, preprocessor=None):
        self.alpha = alpha
        self.basis = basis
        self.n_basis = n_basis
        self.k_genuine = k_genuine
        self.k_impostor = k_impostor
        self.eta0 = eta0
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.check_every = check_every
        self.shrinkage = shrinkage
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.n_components = n_components
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **COMMON,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "basis": [StrOptions({"auto", "lda", "triplet_diffs"})],
        "n_basis": [Interval(Integral, 1, None, closed="left"), None],
        "k_genuine": [Interval(Integral, 1, None, closed="left")],
        "k_impostor": [Interval(Integral, 1, None, closed="left")],
        "eta0": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "check_every": [Interval(Integral, 1, None, closed="left")],
        "shrinkage": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    def _sampler(self):
        """Labels are kept (:class:`~tripletml.triplets.AllLabels`): the LDA
        basis needs them; the kNN triplets are made in ``_fit``."""
        return AllLabels()

    def _check_loaded(self) -> None:
        """``weights_ >= 0``, ``M_ = basis_^T diag(weights_) basis_`` and
        PSD, ``components_`` its factor."""
        super()._check_loaded()
        if self.basis_.shape[0] != self.weights_.shape[0]:
            raise ValueError("basis_ and weights_ have different lengths")
        if np.any(self.weights_ < 0):
            raise ValueError("weights_ has negative entries")
        if getattr(self, "shrinkage_", None) is None:   # a file written before the blend
            self.shrinkage_, self.metric_weight_, self.identity_weight_ = 0.0, 1.0, 0.0
        check_blend_record(self)
        a = getattr(self, "metric_weight_", None)
        c = getattr(self, "identity_weight_", None)
        for name, v in (("metric_weight_", a), ("identity_weight_", c)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, Real) or \
                    not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name}={v!r} must be a finite number >= 0")
        M = a * ((self.basis_.T * self.weights_) @ self.basis_)
        M[np.diag_indices_from(M)] += c
        if np.linalg.norm(M - self.M_) > 1e-8 * np.linalg.norm(M) + 1e-300:
            raise ValueError("M_ is not metric_weight_ basis_^T diag(weights_) basis_ + "
                             "identity_weight_ I")
        self._check_loaded_metric(self.M_)

    def _solve_work(self, n_rows: int, n_features: int) -> float:
        """The thread rule's work of the solve around its priced calls (the
        basis, its coordinates, the steps, ``M``): that of the rows' span
        (:func:`~tripletml.engine.threads.prelude_work`)."""
        return prelude_work(n_rows, n_features)

    def _fit(self, X, got, rng):
        B, w, _, t, result = self._learn(X, got, rng)
        self.__dict__.pop("shrinkage_grid_", None)
        self.__dict__.pop("shrinkage_scores_", None)
        s = self.shrinkage_ = self._choose_shrinkage(X, got, rng)
        on = np.flatnonzero(w)                   # the sparse weights' support
        if s != 0:
            with limit_threads(float(X.shape[0]) * B.shape[1] * on.size):
                ZM = _metric_coordinates(X, B, w)
            a, c = _blend_weights(ZM, _identity_coordinates(X), t, s)
        else:
            a, c = 1.0, 0.0
        with limit_threads(float(B.shape[1]) ** 2 * on.size):
            M = a * ((B[on].T * w[on]) @ B[on])
        M = 0.5 * (M + M.T)
        M[np.diag_indices_from(M)] += c
        # M = a B^T diag(w) B + c I: no d x d eigh
        L, _ = psd_factor_of_rows(B, a * w, 1e-12 if c == 0 else 0.0, c)
        self.basis_, self.weights_ = np.ascontiguousarray(B), w
        self.metric_weight_, self.identity_weight_ = float(a), float(c)
        self.M_ = M
        self.components_, self.rank_ = L, int(L.shape[0])
        apply_result(self, result, tol=None, what="relative change of the objective",
                     advice="increase max_iter or tol")

    def _learn(self, X, got, rng, lift: bool = True):
        """``(B, w, XU, triplets, result)``: the basis, the paper's weights
        on it (eq. 4), the rows' basis coordinates ``X B^T``, the triplets
        fitted (drawn from labels, or ``got``) and the driver's result.
        ``lift=False``: a triplet-difference basis found on the rows' span
        stays there (a :class:`_SpanBasis`)."""
        n, d = X.shape
        if isinstance(got, ClassCodes):
            codes = got.codes
            sizes = np.bincount(codes)
            if sizes.max() < 2:
                raise ValueError("SCML: every class has a single member; no triplet exists.")
            with limit_threads(fit_work(n, d)):      # neighbours of every row: as before
                triplets = knn_triplets(X, codes, int(self.k_genuine), int(self.k_impostor),
                                        random_state=rng)
            kind = "triplet_diffs" if self.basis == "triplet_diffs" else "lda"
        else:
            codes = None
            triplets = np.asarray(got)
            if self.basis == "lda":
                raise ValueError("SCML: basis='lda' needs class labels (fit(X, y)); with "
                                 "triplets use basis='auto' or 'triplet_diffs'.")
            kind = "triplet_diffs"
        rows = np.unique(triplets)
        Xd = _dense(X) if codes is not None else None
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("ij,ij->i", *(2 * (_dense(X[rows]),)))
        if not np.isfinite(sq).all():
            raise FloatingPointError("SCML: training diverged (the rows' squared norms overflow "
                                     "float64); scale the features down (e.g. "
                                     "preprocessing='standardize').")
        if kind == "lda":
            e = min(int(codes.max()), d)
            n_basis = self.n_basis if self.n_basis is not None else min(20 * d, 2 * n * e - 1)
            check_dense_memory(8 * (n_basis * (d + len(triplets)) + n * d), self,
                               f"a basis of {n_basis} directions and its triplet features")
            with limit_threads(fit_work(n, d)):      # k-means and LDA of the rows: as before
                B = lda_basis(Xd, codes, int(n_basis), rng)
        else:
            # 80 directions per dimension the answers' rows span (at most d)
            span_dim = min(d, max(rows.size - 1, 1))
            n_basis = self.n_basis if self.n_basis is not None else 80 * span_dim
            check_dense_memory(8 * (n_basis * (d + len(triplets)) + rows.size * d), self,
                               f"a basis of {n_basis} directions and its triplet features")
            if Xd is None:
                Xd = np.zeros((n, d))
                Xd[rows] = _dense(X[rows])
            Br, Q = triplet_diff_basis_span(Xd, triplets, int(n_basis), rng)
            B = Br if Q is None else _SpanBasis(Br, Q)
        with np.errstate(over="ignore", invalid="ignore"), limit_threads(_coordinates_work(n, B)):
            # X B^T = (X Q) B_r^T on the span: O(n d r + n r K), not O(n d K)
            XU = Xd @ B.T if not isinstance(B, _SpanBasis) else (Xd @ B.Q) @ B.B.T
            delta = TripletDeltas(XU, triplets)
        if lift and isinstance(B, _SpanBasis):
            with limit_threads(float(B.B.shape[0]) * B.Q.shape[0] * B.Q.shape[1]):
                B = np.ascontiguousarray(B.B @ B.Q.T)
        if not delta.all_finite():
            raise FloatingPointError("SCML: training diverged (the triplets' distances overflow "
                                     "float64); scale the features down (e.g. "
                                     "preprocessing='standardize').")
        if B.shape[0] == 0:
            raise ValueError("SCML: no basis direction separates the triplets' negatives from "
                             "their positives; nothing to learn.")
        solver = WholeRun(lambda budget: scml_rda(
            delta, alpha=float(self.alpha), eta0=float(self.eta0),
            batch_size=int(self.batch_size), max_iter=budget, tol=self.tol,
            check_every=int(self.check_every), rng=rng, verbose=int(self.verbose)))
        # the thread rule on the steps' own work: compiled blocks of
        # mini-batch steps, and every check_every steps the objective over
        # every answer (m x K), not the fit's d x d price
        with limit_threads(float(len(triplets)) * B.shape[0]):
            result = run(solver, name="SCML", max_iter=int(self.max_iter),
                         tol=0.0 if self.tol is None else self.tol)
        return B, solver.result.w, XU, triplets, result

    def _choose_shrinkage(self, X, got, rng) -> float:
        """``shrinkage_`` (and, for "auto" on triplets, ``shrinkage_grid_``
        and ``shrinkage_scores_``): see ``shrinkage``."""
        if not isinstance(self.shrinkage, str):
            return float(self.shrinkage)
        if isinstance(got, ClassCodes):
            return 0.0
        answers = np.asarray(got)
        splits = two_protocol_splits(answers, BLEND_FOLDS, None, MIN_FOLD_ANSWERS)
        if splits is None:
            return 0.0
        grid = np.asarray(IDENTITY_BLEND_GRID)
        Z = _identity_coordinates(X)
        seeds = rng.integers(0, 2**63, size=(2, BLEND_FOLDS))
        try:
            scores = np.array([np.mean([self._fold_scores(X, Z, answers, h, grid, seeds[k, f])
                                        for f, h in enumerate(folds)], axis=0)
                               for k, folds in enumerate(splits)])
        except ValueError:          # a fold whose answers give no basis: the paper's M
            return 0.0
        self.shrinkage_grid_, self.shrinkage_scores_ = grid, scores
        return choose_toward_last(grid, scores)

    def _fold_scores(self, X, Z, answers, h, grid, seed) -> np.ndarray:
        """The grid's held-out accuracies on split ``h``: the weights of
        the fold's fit answers, blended with the identity on the fold's
        scale, scored on its held-out answers."""
        fit = np.ascontiguousarray(answers[h.fit])
        B, w, _, _, _ = self._learn(X, fit, np.random.default_rng(seed), lift=False)
        with limit_threads(_coordinates_work(X.shape[0], B)):
            ZM = _metric_coordinates(X, B, w)       # every row: the held-out items too
        s_m, s_i = _answer_scales(ZM, Z, fit)
        val = answers[h.val]
        dm = [_sqdist(ZM, val[:, 0], val[:, j]) / s_m for j in (1, 2)]
        di = [_sqdist(Z, val[:, 0], val[:, j]) / s_i for j in (1, 2)]
        return np.array([heldout_score((1.0 - v) * dm[0] + v * di[0],
                                       (1.0 - v) * dm[1] + v * di[1]) for v in grid])
