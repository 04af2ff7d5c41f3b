"""NCA: Neighborhood Components Analysis (Goldberger, Roweis, Hinton &
Salakhutdinov, "Neighborhood components analysis", NIPS 2004).

The expected number of correctly classified points under the stochastic
nearest-neighbor rule (eqs. 1-3) and its gradient (eq. 5), formed a block
of rows at a time (O(block x n) memory, where scikit-learn's
NeighborhoodComponentsAnalysis holds n x n arrays), maximized with L-BFGS
(scipy) from scikit-learn's initializations.  The objective lives in
:mod:`tripletml.algorithms.nca.kernels`; the estimator validates and stores.
"""
from __future__ import annotations

from numbers import Real

import numpy as np

from tripletml.core.params import Interval, StrOptions
from tripletml.triplets import ClassCodes
from tripletml.core.preprocessing import document_preprocessing
from tripletml.core.docstrings import document_transform
from tripletml.algorithms.nca.kernels import NCAObjective, NCATripletObjective
from tripletml.core.neighborhood import LinearMapLearner

__all__ = ["NCA", "neighbor_scale"]

#: rows whose nearest neighbour sets ``init_scale="auto"`` (a sample beyond)
SCALE_SAMPLE = 1000


def neighbor_scale(Z: np.ndarray, rng_seed: int = 0) -> float:
    """``s`` with ``median_i min_{j: z_j != z_i} ||s (z_i - z_j)||^2 = 1``
    over the rows of ``Z`` (at most :data:`SCALE_SAMPLE` of them against all,
    drawn with a fixed seed; duplicates of a row are not its neighbours); 1
    when every row is the same."""
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] == 0:
        raise ValueError(f"neighbor_scale: rows must be a non-empty 2-D array, got shape "
                         f"{Z.shape}.")
    if not np.isfinite(Z).all():
        raise ValueError("neighbor_scale: rows contain NaN or infinity.")
    Z = Z - Z.mean(axis=0)            # distances are translation-free; the Gram form is not
    n = Z.shape[0]
    rows = np.arange(n) if n <= SCALE_SAMPLE else \
        np.sort(np.random.default_rng(rng_seed).choice(n, SCALE_SAMPLE, replace=False))
    sq = np.einsum("ij,ij->i", Z, Z)
    nearest = np.empty(rows.size)
    for a in range(0, rows.size, 256):
        r = rows[a:a + 256]
        D = sq[r, None] + sq[None, :] - 2.0 * (Z[r] @ Z.T)
        tol = 1e-12 * (sq[r, None] + sq[None, :])
        D[D <= tol] = np.inf                           # itself and its duplicates
        nearest[a:a + r.size] = D.min(axis=1)
    med = float(np.median(nearest[np.isfinite(nearest)])) if np.isfinite(nearest).any() else 0.0
    return float(1.0 / np.sqrt(med)) if med > 0 and np.isfinite(med) else 1.0


@document_transform
@document_preprocessing
class NCA(LinearMapLearner):
    """Neighborhood Components Analysis: the linear map ``L`` that maximizes
    the expected leave-one-out accuracy of a stochastic nearest-neighbor
    classifier.

    Row ``i`` picks a neighbor ``j != i`` with probability (eq. 1)

        p_ij = exp(-||L x_i - L x_j||^2) / sum_{k != i} exp(-||L x_i - L x_k||^2),

    is classified correctly with probability ``p_i = sum_{j in C_i} p_ij``
    (eq. 2, ``C_i`` the rows of its class), and NCA maximizes ``f(L) =
    sum_i p_i`` (eq. 3), the expected number of correct rows, with the
    gradient of eq. 5,

        df/dL = 2 L sum_i ( p_i sum_k p_ik x_ik x_ik^T - sum_{j in C_i} p_ij x_ij x_ij^T ),

    ``x_ab = x_a - x_b``.  The objective is the one of scikit-learn's
    ``NeighborhoodComponentsAnalysis`` (its ``init`` options and L-BFGS
    too); the n x n probabilities are formed a block of rows at a time, so
    memory is O(block x n) instead of several n x n arrays.  ``M = L^T L``.

    From labels ``fit(X, y)`` (the paper's setting; a class of one member
    is never classified correctly but its row still serves as a neighbor).
    From explicit triplets ``fit(X, triplets=T)``, each query's softmax runs
    over the rows its triplets name, and a candidate counts as "of its
    class" with the fraction of those triplets in which it is the positive;
    with every class triplet of a labeled set this is the objective above.

    Parameters
    ----------
    n_components : int or None, default=None
        Rows of ``L`` (the width of ``transform``).  None: ``d`` (the
        preprocessed width).
    init : {"auto", "pca", "lda", "identity", "random"}, default="auto"
        The initial ``L``, as scikit-learn's: ``"auto"`` is ``"lda"`` when
        ``n_components <= min(d, n_classes - 1)``, ``"pca"`` when
        ``n_components < min(d, n_samples)``, else ``"identity"``.
        ``"lda"`` needs labels.
    init_scale : "auto", float or None, default="auto"
        A factor on the initial ``L``.  NCA's neighbour probabilities are a
        softmax of ``-||L x_i - L x_j||^2``, so the scale of the start is its
        temperature: too large and every row picks its nearest neighbour
        with probability 1 (the gradient vanishes and L-BFGS stays at the
        start), too small and every row picks any row.  "auto": the scale
        at which the median squared distance from a row to its nearest
        neighbour (another row, among at most 1,000 rows) under the initial
        map is 1 (:func:`neighbor_scale`), the same start for rows at any
        scale (with class labels, the paper's setting; on answers "auto" is
        factor 1: the softmax runs over the rows a query's triplets name,
        not its nearest neighbours, and on Zappos's network features the
        neighbour scale made NCA follow noisy answers below the cosine);
        None: the start as scikit-learn's (factor 1); a float: that
        factor.  ``init_scale_`` records the factor.
    max_iter : int, default=100
        Most L-BFGS iterations (and ``20 max_iter`` evaluations).
    tol : float or None, default=1e-5
        Stop when an iteration raises ``f`` by at most ``tol`` times its
        value (scipy's relative ``ftol`` on ``-f``), or when the line search
        can raise it no further.  None: run ``max_iter`` iterations.
    {early_stopping}
    {preprocessing}
    {preprocessor}
    random_state : None, int or numpy Generator
        Used only by ``init="random"``.
    verbose : int, default=0
        Print ``-f`` at every iteration.

    Attributes
    ----------
    {map_attributes}
    init_ : str
        The initialization used (``"auto"`` resolved).
    init_scale_ : float
        The factor applied to it (``init_scale``).
    objective_, initial_objective_ : float
        ``-f`` at the end and at the initial ``L`` (the solver minimizes
        ``-f``; ``objective_ <= initial_objective_``).
    n_iter_ : int
        L-BFGS iterations.
    {early_stopping_attributes}
    history_ : dict of lists
        Per iteration (0: the initial ``L``): ``step``, ``seconds``,
        ``objective`` (``-f``) and ``expected_correct`` (``f``).

    Notes
    -----
    Time per evaluation O(n^2 (r + d)); memory O(n d) plus blocks of at
    most 2^21 probabilities.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import NCA
    >>> X, y = load_iris(return_X_y=True)
    >>> model = NCA(n_components=2, random_state=0).fit(X, y)
    >>> model.transform(X[:2]).shape
    (2, 2)
    """

    def __init__(self, n_components=None, *, init="auto", init_scale="auto", max_iter=100,
                 tol=1e-5,
                 early_stopping="auto", validation_fraction=1 / 3, n_iter_no_change=5,
                 preprocessing="auto", random_state=None, verbose=0, preprocessor=None):
        self.n_components = n_components
        self.init = init
        self.init_scale = init_scale
        self.max_iter = max_iter
        self.tol = tol
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    _parameter_constraints = {**LinearMapLearner._parameter_constraints,
                              **LinearMapLearner._early_stopping_constraints,
                              "init_scale": [StrOptions({"auto"}),
                                             Interval(Real, 0, None, closed="neither"), None]}

    def _init_factor(self, start_rows, labels: bool) -> float:
        """The factor ``init_scale`` puts on the initial map ``L0``
        (``start_rows()``: the rows under ``L0``; ``labels``: the fit has
        class labels)."""
        if self.init_scale is None or (self.init_scale == "auto" and not labels):
            return 1.0
        if not isinstance(self.init_scale, str):
            return float(self.init_scale)
        return neighbor_scale(start_rows())

    def _span_lift_spec(self, X, supervision):
        """As the base's, with the identity start's factor on the span's
        complement (the rows' nearest-neighbour distances are those of
        their coordinates, so the factor is the same)."""
        self.__dict__.pop("_span_factor", None)     # a failed fit's leftover
        spec = super()._span_lift_spec(X, supervision)
        if spec is not None and spec.get("components_") == 1.0:     # L0 = I: the rows
            c = self._init_factor(lambda: self._dense_rows(X),
                                  isinstance(supervision, ClassCodes))
            self._span_factor = c
            spec = {"components_": c, "M_": c * c}
        return spec

    def _span_lift_extra(self, Q: np.ndarray, spec) -> None:
        """The identity start's map is ``d x d`` once lifted."""
        if not isinstance(spec.get("components_"), str):
            self.rank_ = int(Q.shape[0])

    def _initial(self, X, got, rng):
        L0, codes = super()._initial(X, got, rng)
        c = self.__dict__.pop("_span_factor", None)
        self.init_scale_ = float(self._init_factor(lambda: X @ L0.T, codes is not None)
                                 if c is None else c)
        return L0 * self.init_scale_, codes

    def _fit(self, X, got, rng):
        try:
            self._fit_map(X, got, rng)
        finally:
            self.__dict__.pop("_span_factor", None)

    def _fit_map(self, X, got, rng):
        X = self._dense_rows(X)
        L0, codes = self._initial(X, got, rng)
        keys = ("expected_correct",)
        if codes is not None:
            self.early_stopping_ = "off"
            self._train(NCAObjective(X, codes), L0, record_keys=keys)
        else:
            self._train_answers(lambda t: NCATripletObjective(X, t), X, got, L0, rng,
                                record_keys=keys)
