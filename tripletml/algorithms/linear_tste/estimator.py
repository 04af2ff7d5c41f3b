"""LinearTSTE: t-STE's triplet likelihood (van der Maaten & Weinberger,
"Stochastic triplet embedding", MLSP 2012, Sec. 3.2) on a linear map of the
features, ``y = L x``, maximized with L-BFGS (scipy) from the principal
subspace of the rows.  The objective lives in
:mod:`tripletml.algorithms.linear_tste.kernels`; the estimator validates and
stores."""
from __future__ import annotations

import numbers

import numpy as np

from tripletml.algorithms.linear_tste.kernels import LinearTSTEObjective, mean_squared_distance
from tripletml.core.base import TripletLearner
from tripletml.core.docstrings import document_transform
from tripletml.core.neighborhood import LinearMapLearner
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.core.preprocessing import document_preprocessing
from tripletml.core.validation import check_dense_memory
from tripletml.linalg.linear_map import initial_components
from tripletml.triplets import ClassCodes

__all__ = ["LinearTSTE"]

#: the default width: t-STE's experiments embed in 2 to 10 dimensions
DEFAULT_COMPONENTS = 10


@document_transform
@document_preprocessing
class LinearTSTE(LinearMapLearner):
    """t-STE on features: the linear map ``L`` whose points ``y = L x``
    make the answers "q is closer to p than to n" most likely under t-STE's
    Student-t kernel.

    Each triplet ``(q, p, n)`` holds with the probability (van der Maaten &
    Weinberger 2012, Sec. 3.2)

        p_t = K(|L x_q - L x_p|^2) / (K(|L x_q - L x_p|^2) + K(|L x_q - L x_n|^2)),
        K(u) = (1 + u / alpha)^(-(alpha + 1) / 2),

    and the learner minimizes

        -sum_t log p_t + regularization * s * |L - L0|_F^2

    with L-BFGS, ``s`` the mean squared distance between the training rows
    (so that ``regularization`` has no unit: the same model for ``X`` and
    ``c X``) and ``L0`` the start.  :class:`~tripletml.embedding.TSTE` places
    one free point per item; here the points are a map of the features, so
    new items (rows never seen in ``fit``) are placed too, and with fewer
    rows than features (the usual case for images rated by people) the map
    can still place every training item freely: the likelihood then fits the
    answers as well as the free embedding does.  The penalty is a Gaussian
    prior centred on the start, not on zero: with little data the model
    stays at the features' own geometry instead of shrinking to a point;
    people's answers are noisy, and the prior's weight is what stops the map
    from following each one fully (:class:`tripletml.AutoSimilarity`
    validates it on held-out items or answers).

    The start ``L0`` (``init="pca"``) is the top ``n_components`` principal
    axes of the (preprocessed) rows, scaled so that the mean squared
    distance between the starting points is 1, the unit of the kernel ``K``:
    the best ``n_components``-dimensional approximation of the rows'
    Euclidean geometry.  From class labels, ``n_triplets`` class triplets are
    sampled (``sampling``).

    Parameters
    ----------
    n_components : int or None, default=None
        Rows of ``L`` (the width of ``transform``).  None: ``min(10, d, n)``
        (``d`` the preprocessed width, ``n`` the training rows).
    alpha : float or None, default=None
        Degrees of freedom of the Student-t kernel (the paper's, cblearn's
        and :class:`~tripletml.embedding.TSTE`'s name; not a regularization
        weight as elsewhere in tripletml: that is ``regularization``); None:
        ``n_components - 1`` as the paper advises (1 when ``n_components``
        is 1).
    regularization : float, default=1.0
        Weight of the prior, in units of the rows' mean squared distance
        (module docstring); 0 keeps no prior (the likelihood alone).
    init : {"pca", "identity", "random"}, default="pca"
        The directions of the start
        (:func:`tripletml.linalg.linear_map.initial_components`), always
        rescaled to unit mean squared distance.
    n_triplets : int, default=10000
        Class triplets sampled from labels (ignored with ``triplets=``).
    sampling : {"class", "knn", "semihard"}, default="class"
        How labels become triplets (:mod:`tripletml.triplets`).
    max_iter : int, default=500
        Most L-BFGS iterations.
    tol : float or None, default=1e-6
        Stop when an iteration lowers the objective by at most ``tol`` times
        its value.  None: run ``max_iter`` iterations.
    {preprocessing}
    {preprocessor}
    random_state : None, int or numpy Generator
        Samples the triplets from labels; used by ``init="random"``.
    verbose : int, default=0
        Print the objective at every iteration.

    Attributes
    ----------
    {map_attributes}
    alpha_ : float
        The degrees of freedom used.
    init_ : str
    objective_, initial_objective_ : float
        The objective at the end and at the start.
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        Per iteration (0: the start): ``step``, ``seconds``, ``objective``.

    Notes
    -----
    Time per evaluation O(m r + n r d) for m triplets on n rows; memory
    O(n d + r d) (with ``n^2 <= 4 m`` items the triplets' pair weights are
    an n x n array).

    References
    ----------
    L. van der Maaten and K. Weinberger, "Stochastic triplet embedding",
    IEEE MLSP 2012.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import LinearTSTE
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LinearTSTE(n_components=2, random_state=0).fit(X, y)
    >>> model.transform(X[:2]).shape
    (2, 2)
    """

    def __init__(self, n_components=None, *, alpha=None, regularization=1.0, init="pca",
                 n_triplets=10000, sampling="class", max_iter=500, tol=1e-6,
                 preprocessing="auto", random_state=None, verbose=0, preprocessor=None):
        self.n_components = n_components
        self.alpha = alpha
        self.regularization = regularization
        self.init = init
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.max_iter = max_iter
        self.tol = tol
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **LinearMapLearner._parameter_constraints,
        "init": [StrOptions({"pca", "identity", "random"})],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "regularization": [Interval(numbers.Real, 0, None, closed="left")],
        "n_triplets": COMMON["n_triplets"],
        "sampling": COMMON["sampling"],
    }

    def _check_square_memory(self, d: int) -> None:
        """The model ``M_`` and the lift's product (``d x d``) and the
        L-BFGS state of ``r x d`` maps (``L``, its gradient, 10 pairs of
        updates): a rank-10 map on 20,000 features needs two ``d x d``
        arrays, not the 24 of a full-width LMNN / NCA map."""
        r = min(DEFAULT_COMPONENTS, d) if self.n_components is None else int(self.n_components)
        check_dense_memory(8 * (2 * d * d + 24 * r * d), self,
                           f"the {d} x {d} model and the L-BFGS state of a {r} x {d} map "
                           "do not fit; reduce the dimension first (e.g. sklearn's "
                           "TruncatedSVD)")

    def _sampler(self):
        """Class labels become ``n_triplets`` triplets (``sampling``), as for
        the other triplet learners."""
        return TripletLearner._sampler(self)

    def _span_lift_spec(self, X, supervision):
        """With fewer rows than features the fit runs in the span of the rows
        (``tripletml.linalg.span``): the likelihood sees ``L`` only through
        ``X L^T``, and the prior pulls the part of ``L`` outside the span
        to that of the start, which is 0 for the principal axes; so the
        model is the plain route's (up to the signs of its rows).  The
        other starts, and more principal axes than the centered rows' rank,
        are not in the span: plain route (whose messages name the real
        width)."""
        n, d = X.shape
        r = self._n_out(d, n) if self.n_components is None else int(self.n_components)
        if self.init != "pca" or n >= d or r > d or not self._pca_in_span(X, r):
            return None
        return {"components_": "cols", "M_": 0.0}

    def _n_out(self, d: int, n: int | None = None) -> int:
        if self.n_components is None:
            return max(1, min(DEFAULT_COMPONENTS, d, d if n is None else n))
        return super()._n_out(d)

    def _start(self, X: np.ndarray, codes, rng) -> np.ndarray:
        """``L0``: the ``init`` directions, scaled to unit mean squared
        distance between the starting points."""
        r = self._n_out(X.shape[1], X.shape[0])
        L0, self.init_ = initial_components(self.init, X, codes, r, rng, type(self).__name__)
        spread = mean_squared_distance(X @ L0.T)
        return L0 / np.sqrt(spread) if spread > 0 else L0

    def _fit(self, X, got, rng):
        X = self._dense_rows(X)
        if isinstance(got, ClassCodes):       # pragma: no cover - the sampler gives triplets
            raise TypeError(f"{type(self).__name__}: expected triplets, got class codes.")
        scale = mean_squared_distance(X)
        energy = 2.0 * float(np.einsum("ij,ij->", X, X)) / max(X.shape[0], 1)
        if not (np.isfinite(scale) and np.isfinite(energy)):
            raise FloatingPointError(f"{type(self).__name__}: training diverged: the rows' "
                                     "squared distances overflow float64; scale them down "
                                     "(e.g. preprocessing='standardize').")
        if not scale > 1e-12 * energy or not scale > 0:      # equal to rounding
            raise ValueError(f"{type(self).__name__}: every row of X is the same (after "
                             "preprocessing): no map of the rows can order the answers.")
        L0 = self._start(X, None, rng)
        r = L0.shape[0]
        self.alpha_ = float(self.alpha) if self.alpha is not None else float(max(r - 1, 1))
        objective = LinearTSTEObjective(X, got, self.alpha_, self.regularization, L0, scale)
        self._train(objective, L0, record_keys=())
