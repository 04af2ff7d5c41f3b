"""LMNN: Large Margin Nearest Neighbor (Weinberger & Saul, "Distance metric
learning for large margin nearest neighbor classification", JMLR 10, 2009).

The loss of eqs. 11-13 in terms of the linear map ``L`` (the paper's
Section 5.1 formulation), its subgradient as one sparse weighted sum of
outer products, the active impostors recomputed from the current ``L`` at
every evaluation, and L-BFGS (scipy) as the optimizer.  The objective lives
in :mod:`tripletml.algorithms.lmnn.kernels`; the estimator validates and stores.
"""
from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np

from tripletml.core.params import Interval
from tripletml.core.preprocessing import document_preprocessing
from tripletml.core.docstrings import document_transform
from tripletml.algorithms.lmnn.kernels import LMNNObjective, LMNNTripletObjective, select_targets
from tripletml.core.neighborhood import LinearMapLearner

__all__ = ["LMNN"]


@document_transform
@document_preprocessing
class LMNN(LinearMapLearner):
    """Large Margin Nearest Neighbor: a linear map ``L`` that pulls each
    point's target neighbors close and pushes the points of other classes
    (impostors) a unit margin beyond them.

    Each row ``i`` has ``n_neighbors`` target neighbors ``j ~> i``: its
    nearest rows of the same class, in the Euclidean distance of the
    (preprocessed) rows, fixed before training.  With ``d_ab = ||L (x_a -
    x_b)||^2`` the loss (eqs. 11-13 of the paper) is

        E(L) = (1 - mu) sum_{i, j~>i} d_ij
               + mu sum_{i, j~>i} sum_{l: y_l != y_i} [1 + d_ij - d_il]_+ ,

    ``mu`` = ``regularization``.  The pull term (eq. 11) shrinks target
    distances, the push term (eq. 12) is a hinge on each triplet whose
    impostor ``l`` is within the margin of a target.  The metric is ``M =
    L^T L``; the paper's semidefinite program (eq. 14) is the same loss in
    ``M``, convex there; this learner optimizes ``L`` directly (Section 5.1),
    which allows ``n_components < d`` and costs no eigendecomposition.

    At every evaluation the impostors are found from the current ``L`` (only
    the rows of other classes within ``1 + max_j d_ij`` of row ``i``: a
    ball tree's radius query when the embedding has few dimensions and many
    rows, blocks of brute-force distances otherwise), and the subgradient

        dE/dL = 2 L [ (1 - mu) sum C_ij + mu sum_{(i,j,l) active} (C_ij - C_il) ],

    ``C_ab = (x_a - x_b)(x_a - x_b)^T``, is one sparse weighted sum of outer
    products (``O(nnz (r + d) + n r d)`` with BLAS; never an array of
    differences).  L-BFGS (scipy's L-BFGS-B) minimizes ``E``.

    From labels ``fit(X, y)`` (the paper's setting).  A class with ``m <=
    n_neighbors`` members gives its rows ``m - 1`` target neighbors (a
    UserWarning says so; a class of one member has rows with no target,
    which still act as impostors of the others).  From explicit triplets
    ``fit(X, triplets=T)`` the targets are the distinct ``(q, p+)`` pairs
    and the push term is the hinge of each given triplet (the triplets are
    the constraints: no impostor search).

    Parameters
    ----------
    n_components : int or None, default=None
        Rows of ``L`` (the width of ``transform``).  None: ``d`` (the
        preprocessed width).
    n_neighbors : int, default=3
        Target neighbors per row (metric-learn's ``n_neighbors``, formerly
        ``k``).
    regularization : float, default=0.5
        The weight ``mu`` of the push term, in [0, 1]; the pull term has
        ``1 - mu`` (eq. 13).  metric-learn 0.7's code weighs the *pull*
        term by its ``regularization``: its ``r`` is ``1 - r`` here (the
        same at the default 0.5).
    max_iter : int, default=1000
        Most L-BFGS iterations (and ``20 max_iter`` evaluations).
    tol : float or None, default=1e-4
        Stop when an iteration lowers the loss by at most ``tol`` times its
        value (scipy's relative ``ftol``), or when the line search can lower
        it no further.  None: run ``max_iter`` iterations.  The loss is
        piecewise smooth: L-BFGS ends in a long crawl along its kinks where
        k-NN accuracy no longer changes (on the UCI sets 1e-4 matches 1e-5's
        test accuracy in half the iterations), and a crawl of hundreds of
        iterations amplifies rounding (the learned metric of ``c * X``, or
        of permuted features, would drift from that of X).
    init : {"auto", "pca", "lda", "identity", "random"}, default="auto"
        The initial ``L``, as scikit-learn's NeighborhoodComponentsAnalysis:
        ``"auto"`` is ``"lda"`` when ``n_components <= min(d, n_classes -
        1)``, ``"pca"`` when ``n_components < min(d, n_samples)``, else
        ``"identity"``.  ``"lda"`` needs labels.
    {early_stopping}
    {preprocessing}
    {preprocessor}
    random_state : None, int or numpy Generator
        Used only by ``init="random"``.
    verbose : int, default=0
        Print the loss and the active constraints at every iteration.

    Attributes
    ----------
    {map_attributes}
    init_ : str
        The initialization used (``"auto"`` resolved).
    objective_, initial_objective_ : float
        The loss ``E`` at the end and at the initial ``L``.
    n_iter_ : int
        L-BFGS iterations.
    {early_stopping_attributes}
    history_ : dict of lists
        Per iteration (0: the initial ``L``): ``step``, ``seconds``,
        ``objective``, ``active`` (triplets inside the hinge) and
        ``impostors`` (pairs ``(i, l)`` in an active triplet).

    Notes
    -----
    Early stopping is on for answers by default: every crowd answer inside
    the unit margin is a hinge, and on noisy answers about few items LMNN
    follows them away from its start (Zappos, unseen shoes: above the
    cosine after one L-BFGS iteration, far below it at convergence;
    BENCHMARKS.md).

    Memory: O(n d) for the rows and O(n k) plus the active impostor pairs
    per evaluation (brute-force blocks of at most 2^21 distances); time per
    evaluation O(n^2 r) for the brute-force search (O(n log n r) with the
    tree) plus O((n k + impostors)(r + d) + n r d).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import LMNN
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LMNN(random_state=0).fit(X, y)
    >>> model.transform(X[:2]).shape
    (2, 4)
    """

    def __init__(self, n_components=None, *, n_neighbors=3, regularization=0.5, max_iter=1000,
                 tol=1e-4, init="auto", early_stopping="auto", validation_fraction=1 / 3,
                 n_iter_no_change=5, preprocessing="auto", random_state=None, verbose=0,
                 preprocessor=None):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.regularization = regularization
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **LinearMapLearner._parameter_constraints,
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "regularization": [Interval(Real, 0, 1, closed="both")],
        **LinearMapLearner._early_stopping_constraints,
    }

    def _fit(self, X, got, rng):
        X = self._dense_rows(X)
        L0, codes = self._initial(X, got, rng)
        mu = float(self.regularization)
        keys = ("active", "impostors")
        if codes is not None:
            self.early_stopping_ = "off"
            self._train(self._label_objective(X, codes, mu), L0, record_keys=keys)
        else:
            self._train_answers(lambda t: LMNNTripletObjective(X, t, mu), X, got, L0, rng,
                                record_keys=keys)

    def _label_objective(self, X, codes, mu) -> LMNNObjective:
        k = int(self.n_neighbors)
        counts = np.bincount(codes)
        small = counts <= k
        if small.any():
            warnings.warn(f"LMNN: {int(small.sum())} class(es) have n_neighbors={k} members or "
                          f"fewer (smallest: {int(counts.min())}); their rows get as many "
                          "target neighbors as their class has other members (none for a "
                          "class of one). Lower n_neighbors to give every row the same "
                          "number.", UserWarning, stacklevel=4)
        targets = select_targets(X, codes, k)
        return LMNNObjective(X, codes, targets, mu)
