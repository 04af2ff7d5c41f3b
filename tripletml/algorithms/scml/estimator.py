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
from tripletml.engine.whole import WholeRun
from tripletml.core.validation import check_dense_memory
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.linalg import psd_factor_of_rows
from tripletml.core.preprocessing import document_preprocessing
from tripletml.algorithms.scml.kernels import TripletDeltas, lda_basis, scml_rda, triplet_diff_basis
from tripletml.triplets import AllLabels, ClassCodes, knn_triplets
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform

__all__ = ["SCML"]


def _dense(X) -> np.ndarray:
    return np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)


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
        the roots of their eigenvalues (above 1e-12 times the largest),
        largest first.
    rank_ : int
    basis_ : ndarray of shape (n_basis, d)
        The unit directions ``u_b``.
    weights_ : ndarray of shape (n_basis,)
        ``w >= 0`` (mostly zero).
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
    }
    _square_arrays = 4

    def __init__(self, alpha=1e-5, *, basis="auto", n_basis=None, k_genuine=3, k_impostor=10,
                 eta0=1.0, batch_size=10, max_iter=10000, tol=1e-3, check_every=500,
                 preprocessing="auto", random_state=None, verbose=0, n_components=None,
                 preprocessor=None):
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
        M = (self.basis_.T * self.weights_) @ self.basis_
        if np.linalg.norm(M - self.M_) > 1e-8 * np.linalg.norm(M) + 1e-300:
            raise ValueError("M_ is not basis_^T diag(weights_) basis_")
        self._check_loaded_metric(self.M_)

    def _fit(self, X, got, rng):
        n, d = X.shape
        if isinstance(got, ClassCodes):
            codes = got.codes
            sizes = np.bincount(codes)
            if sizes.max() < 2:
                raise ValueError("SCML: every class has a single member; no triplet exists.")
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
            B = triplet_diff_basis(Xd, triplets, int(n_basis), rng)
        with np.errstate(over="ignore", invalid="ignore"):
            XU = Xd @ B.T
            delta = TripletDeltas(XU, triplets)
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
        result = run(solver, name="SCML", max_iter=int(self.max_iter),
                     tol=0.0 if self.tol is None else self.tol)
        res = solver.result
        w = res.w
        on = np.flatnonzero(w)                   # the sparse weights' support
        M = (B[on].T * w[on]) @ B[on]
        M = 0.5 * (M + M.T)
        L, _ = psd_factor_of_rows(B, w, 1e-12)   # M = B^T diag(w) B: no d x d eigh
        self.basis_, self.weights_ = np.ascontiguousarray(B), w
        self.M_ = M
        self.components_, self.rank_ = L, int(L.shape[0])
        apply_result(self, result, tol=None, what="relative change of the objective",
                     advice="increase max_iter or tol")
