"""RCA: Relevant Component Analysis, a Mahalanobis metric in closed form from
chunklets of equivalent points (Bar-Hillel, Hertz, Shental & Weinshall,
"Learning a Mahalanobis metric from equivalence constraints", JMLR 6, 2005).

No iterations and no step size: the within-chunklet covariance, one
reduction to the span of the data (the paper's Step 2, needed when the
covariance is singular) and one symmetric-definite eigenproblem whose
eigenvectors whiten the within-chunklet scatter (Step 3).
"""
from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.linalg.pairwise import pair_difference_scatter
from tripletml.linalg.span import complement_basis, lift_square
from tripletml.engine.threads import limit_threads, rows_work
from tripletml.algorithms.rca.kernels import choose_shrinkage, shrinkage_scores, span_basis_of
from tripletml.algorithms.kissme.kernels import covariance_rank, shrinkage_grid
from tripletml.core.params import Interval, StrOptions
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.core.preprocessing import document_preprocessing
from tripletml.pairs import PairConstraints
from tripletml.triplets import AllLabels, ClassCodes
from tripletml.core.docstrings import document_transform
from tripletml.distributed import statistics

__all__ = ["RCA"]

#: rows per block of the centered scatters: blocks of this many matrix
#: entries (32 MiB).  Each block's ``Z^T Z`` rewrites the whole ``d x d``
#: sum, so a block must be tall for the update to be a GEMM and not a pass
#: over memory per few rows (4 rows of 4,096 features: 9 s for 57 rows).
_BLOCK_ELEMENTS = 1 << 22


def _centered_scatters(X, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(C, T, p)``: the within-chunklet scatter ``sum_j sum_{i in j} (x_ji -
    m_j)(x_ji - m_j)^T / p`` over the rows with ``groups >= 0`` (``p`` of
    them, chunklet j = the rows with ``groups == j``) and the total scatter
    ``sum_i (x_i - mean)(x_i - mean)^T`` of every row of X, on centered rows
    formed a block at a time (X dense or CSR)."""
    n, d = X.shape
    member = groups >= 0
    g = np.where(member, groups, n_groups)              # row group, or a dummy one
    counts = np.bincount(g, minlength=n_groups + 1).astype(float)
    sums = np.zeros((n_groups + 1, d))
    step = max(1, _BLOCK_ELEMENTS // max(d, 1))
    for s0 in range(0, n, step):
        B = X[s0:s0 + step]
        np.add.at(sums, g[s0:s0 + step], B.toarray() if sp.issparse(B) else B)
    mean = sums.sum(axis=0) / n
    means = sums / np.maximum(counts, 1.0)[:, None]
    C = np.zeros((d, d))
    T = np.zeros((d, d))
    # the thread rule (tripletml.engine.threads) on one block's product
    with limit_threads(rows_work(min(step, n), d)):
        for s0 in range(0, n, step):
            B = X[s0:s0 + step]
            B = B.toarray() if sp.issparse(B) else np.asarray(B)
            Z = B - mean
            T += Z.T @ Z
            if member[s0:s0 + step].any():
                W = (B - means[g[s0:s0 + step]]) * member[s0:s0 + step, None]
                C += W.T @ W
    p = int(member.sum())
    return 0.5 * (C + C.T) / max(p, 1), 0.5 * (T + T.T), p


def _has_unchunked_label(y) -> bool:
    """Whether y looks like metric-learn's chunk labels with -1 = "in no
    chunklet": integers, -1 among them, and the others chunk ids 0, 1, ...
    (0 present)."""
    if y is None or sp.issparse(y):
        return False
    try:
        a = np.asarray(y)
    except (TypeError, ValueError):
        return False
    if a.ndim != 1 or a.dtype.kind not in "iu" or a.size == 0:
        return False
    vals = np.unique(a)
    return bool(vals[0] == -1 and vals.size > 1 and vals[1] == 0)


def _similar_chunklets(pairs: np.ndarray, similar: np.ndarray, n: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Chunklets of labeled pairs (the paper's Section 2): the connected
    components of the similar pairs' graph (the transitive closure of the
    equivalence constraints); dissimilar pairs are not used by RCA.
    Returns ``(rows, groups)``: the rows in a chunklet and its number."""
    from scipy.sparse.csgraph import connected_components

    P = pairs[similar]
    if P.shape[0] == 0:
        raise ValueError("RCA: the pairs hold no similar (+1) pair; RCA learns from "
                         "equivalence (similar) constraints only.")
    G = sp.coo_matrix((np.ones(P.shape[0]), (P[:, 0], P[:, 1])), shape=(n, n))
    _, comp = connected_components(G, directed=False)
    rows = np.unique(P)
    _, groups = np.unique(comp[rows], return_inverse=True)
    return rows, groups.astype(np.int64)


def rca_components(C: np.ndarray, T: np.ndarray, regularization: float,
                   n_components: int | None, rows=None, shrinkage: float = 0.0) -> np.ndarray:
    """The RCA factor ``L`` (r x d, ``M = L^T L``): see :func:`rca_model`."""
    return rca_model(C, T, regularization, n_components, rows, shrinkage)[0]


def rca_model(C: np.ndarray, T: np.ndarray, regularization: float, n_components: int | None,
              rows=None, shrinkage: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(L, M)``: the RCA factor (r x d) and ``M = L^T L`` of the
    within-chunklet covariance ``C`` and the total scatter ``T`` (both d x d,
    symmetric PSD).

    Step 2: ``U`` (d x s) spans the eigenvectors of ``T`` with eigenvalues
    above ``d eps`` times the largest (the directions the data occupy);
    ``C_s = U^T C U + regularization (tr(U^T C U) / s) I``.  Step 3: the
    generalized eigenvectors ``V`` of ``(U^T T U, C_s)`` normalized to
    ``V^T C_s V = I``, in decreasing order of the ratio of total to
    within-chunklet variance; ``L = (U V[:, :k])^T``, each row's sign set so
    that its largest entry is positive.  With all ``k = s``
    directions, ``L^T L = U C_s^{-1} U^T``: the paper's ``M = C^{-1}`` on the
    data's span; fewer keep the constrained Fisher criterion's top ``k``.
    ``rows``: the rows ``T`` is the total scatter of, if at hand (the
    span then comes from their SVD when they are fewer than the features).

    ``shrinkage`` ``s > 0`` replaces the ridge: ``C`` becomes ``(1 - s) C +
    a I`` on the whole space, ``a = s tr C / d`` (:mod:`.kernels`), so the
    directions outside the span get the weight ``1 / a``; all ``k``:
    ``M = U A^{-1} U^T + (I - U U^T) / a`` (``A`` the span's block) and
    ``L`` its symmetric square root (d x d); fewer: the top ``k`` generalized
    eigenvectors of ``(U^T T U, A)``, then directions of the complement.
    """
    d = C.shape[0]
    ev, U = span_basis_of(rows, T)
    s = U.shape[1]
    if s == 0:
        raise ValueError("RCA: every row is identical (the data span no direction).")
    Cs = U.T @ C @ U
    Cs = 0.5 * (Cs + Cs.T)
    tr = float(np.trace(Cs))
    if not tr > 0:
        raise ValueError("RCA: the chunklets have zero scatter (every chunklet's points are "
                         "identical); no metric can be estimated from them.")
    if shrinkage > 0:
        a = shrinkage * tr / d
        return _shrunk_model((1.0 - shrinkage) * Cs + a * np.eye(s), ev, U, a, n_components)
    if regularization:
        Cs[np.diag_indices(s)] += regularization * tr / s
    cw = np.linalg.eigvalsh(Cs)
    try:
        # singular to rounding: a Cholesky factor may still exist (LAPACK
        # builds differ), the generalized problem is then meaningless
        if not cw.min() > max(s, 1) * np.finfo(float).eps * cw.max():
            raise np.linalg.LinAlgError("singular within-chunklet covariance")
        lam, V = scipy.linalg.eigh(np.diag(ev), Cs)
    except np.linalg.LinAlgError:
        raise ValueError("RCA: the within-chunklet covariance is singular on the span of the "
                         "data; set regularization > 0.") from None
    order = np.argsort(lam)[::-1]
    if n_components is not None:
        order = order[:n_components]
    L = _flip_signs((U @ V[:, order]).T)
    return L, L.T @ L


def _flip_signs(L: np.ndarray) -> np.ndarray:
    """Deterministic signs (as sklearn's svd_flip): each row's largest entry > 0."""
    big = np.abs(L).argmax(axis=1)
    L = L * np.where(L[np.arange(L.shape[0]), big] < 0, -1.0, 1.0)[:, None]
    return np.ascontiguousarray(L)


def _shrunk_model(A: np.ndarray, ev: np.ndarray, U: np.ndarray, a: float,
                  n_components: int | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rca_model` for a shrinkage ``> 0`` (``A`` the span's block of the
    shrunk covariance, ``a`` its value on the complement)."""
    d, s = U.shape
    if n_components is None:                  # M's symmetric square root, O(d^2 s)
        w, V = np.linalg.eigh(A)
        root = (V / np.sqrt(w)) @ V.T
        return lift_square(root, U, 1.0 / np.sqrt(a)), lift_square((V / w) @ V.T, U, 1.0 / a)
    lam, V = scipy.linalg.eigh(np.diag(ev), A)
    L = (U @ V[:, np.argsort(lam)[::-1][:n_components]]).T
    if n_components > s:
        L = np.vstack([L, complement_basis(U)[:, :n_components - s].T / np.sqrt(a)])
    L = _flip_signs(L)
    return L, L.T @ L


def _triplet_chunklet_covariance(X, t: np.ndarray) -> np.ndarray:
    """The ``(query, positive)`` pairs as chunklets of two: each pair's rows
    about their mean give ``(x_a - x_b)(x_a - x_b)^T / 2``, over the ``2 m``
    chunklet rows."""
    return pair_difference_scatter(X, t[:, 0], t[:, 1]) / (4.0 * t.shape[0])


def _pair_chunklet_covariance(X, pairs: np.ndarray, similar: np.ndarray) -> np.ndarray:
    """The chunklets of the similar pairs (:func:`_similar_chunklets`)."""
    rows, groups = _similar_chunklets(pairs, similar, X.shape[0])
    return _centered_scatters(X[rows], groups, int(groups.max()) + 1)[0]


@document_transform
@document_preprocessing
class RCA(MahalanobisMixin, TripletLearner):
    """Relevant Component Analysis: ``M = C^{-1}``, the inverse of the
    within-chunklet covariance.

    A chunklet is a set of points known to share a class.  With ``p``
    points in chunklets ``j = 1..k`` of means ``m_j``, the paper's
    within-chunklet covariance (Step 2 of Algorithm 1) is

        C = (1 / p) sum_j sum_{i in chunklet j} (x_ji - m_j)(x_ji - m_j)^T,

    and RCA whitens it (Step 3): ``L = C^{-1/2}``, ``M = L^T L = C^{-1}``,
    the Mahalanobis distance ``d(x, y)^2 = (x - y)^T C^{-1} (x - y)``.  It is
    the maximum-likelihood estimate of a Gaussian's within-class covariance
    and the optimal metric of the paper's information-theoretic criterion.

    From labels ``fit(X, y)`` each class is one chunklet (every labeled
    point; a class with a single member contributes nothing), so ``C`` is
    the pooled within-class covariance; metric-learn's chunk labels, -1
    beside the chunk ids 0, 1, ..., mark the rows with -1 as in no chunklet
    (see :meth:`fit`).  From explicit ``triplets``, every
    ``(query, positive)`` pair is a chunklet of size 2 (the negatives are
    not used): ``C = (1 / 4m) sum (q - p+)(q - p+)^T`` over the m triplets.
    From labeled pairs (``fit(pairs_of_points, y)``), the paper's own
    setting, the chunklets are the connected components of the similar
    pairs (the transitive closure of the equivalence constraints); the
    dissimilar pairs are not used.

    Where ``C`` is singular (fewer points than features, duplicated or
    constant columns) the paper first reduces the dimension (its Step 2):
    RCA works on the span of the centered data (the eigenvectors of the total
    scatter above ``d eps`` times its largest eigenvalue) and adds
    ``regularization * (tr C / s) I`` there (``s`` the span's dimension), a
    ridge in units of the average within-chunklet variance, so the rule does
    not depend on the scale of X.  Directions outside the span (no training
    point varies along them) get no weight.

    Fitting is a closed form (milliseconds on the UCI sets).  RCA keeps
    d x d matrices, so it suits d up to a few thousand.

    Parameters
    ----------
    n_components : int or None, default=None
        None: every direction of the data's span (``M = C^{-1}`` there).  An
        int ``k``: the ``k`` directions of the whitened space with the
        largest ratio of total to within-chunklet variance (the generalized
        eigenvectors of the total scatter ``T`` and ``C``: the paper's
        constrained Fisher criterion ``max |A^T T A| / |A^T C A|``), or all
        of them if the span has fewer.
    regularization : float, default=1e-3
        Weight of the ridge ``(tr C / s) I`` added to ``C`` on the data's
        span before it is inverted (>= 0).  Positive values keep ``C``
        invertible when a direction of the data has no within-chunklet
        variance (a column constant within every class) and bound the weight
        of any direction to ``s / (regularization tr C)``; 1e-3 changes no
        eigenvalue above a thousandth of the mean by more than 0.1% and
        matches 0 on the benchmark sets (see the changelog).  0 is the
        paper's plain inverse (a ValueError where ``C`` is singular on the
        span).  Used where ``shrinkage_`` is 0.
    shrinkage : float in [0, 1] or "auto", default="auto"
        ``s``: ``C`` is replaced by ``(1 - s) C + s (tr C / d) I`` on the
        whole space before it is inverted (Ledoit & Wolf's shrinkage towards
        the identity, as KISSME's): 0 is the paper's RCA (no weight outside
        the data's span), 1 the Euclidean distance of the preprocessed rows,
        values between keep a share of the features' own geometry, also for
        new items (directions outside the training rows' span get weight
        ``1 / (s tr C / d)``).  "auto": 0 for class labels (the paper's
        setting); for triplets or pairs (people's answers, noisy chunklets)
        the value of ``{{0}}`` and KISSME's grid (ridges of 1/99 to 100 times
        the mean eigenvalue, and 1) measured on held-out answers in two ways,
        each a mean over 3 folds: answers among new items (fitted on the
        answers among two thirds of the items, scored on those among the
        other third; each item's fold a hash of its id) and new answers about
        known items (folds of the answers); the value whose smaller gain over
        ``s = 1`` (the features' own geometry) is largest, so that neither
        falls below it; ties go to the paper's, then to the lighter ridge
        (triplet accuracy; for pairs the ROC AUC of the distances).  Too few
        answers per fold: 0.
        A partitioned ``fit(collection)`` with "auto" uses 0 (the choice
        needs the rows in memory).
    {preprocessing}
    {preprocessor}

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
        The learned PSD matrix ``L^T L`` (d = ``n_features_preprocessed_``).
    components_ : ndarray of shape (``rank_``, d)
        The whitening ``L``: rows in decreasing order of total to
        within-chunklet variance; ``transform`` maps to the learned
        dimension.
    rank_ : int
        The dimension kept (the span's, or ``n_components``).
    chunklet_covariance_ : ndarray of shape (d, d)
        ``C`` (before regularization).
    shrinkage_ : float
        The shrinkage used (``shrinkage``, or the choice of "auto").
    shrinkage_grid_ : ndarray of shape (7,)
    shrinkage_scores_ : ndarray of shape (2, 7)
        With "auto" on answers: the grid and each value's mean held-out
        score on new items (row 0) and new answers (row 1); absent otherwise.
    total_scatter_ : ndarray of shape (d, d)
        ``T = sum_i (x_i - mean)(x_i - mean)^T`` of the training rows (its
        span is the reduction of Step 2).
    history_ : dict of lists
        One record: ``step`` 0 and the ``seconds`` of the fit.

    Notes
    -----
    RCA is equivariant to invertible linear maps of X: ``d(Ax, Ay)`` learned
    on ``AX`` equals ``d(x, y)`` learned on ``X`` (exactly with
    ``regularization=0``; the ridge is defined on the scale of ``C`` but
    not its shape).  Column scaling therefore changes only the ridge.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import RCA
    >>> X, y = load_iris(return_X_y=True)
    >>> model = RCA().fit(X, y)
    >>> model.transform(X[:2]).shape
    (2, 4)
    """

    #: "auto" keeps per-column standard deviations: the closed form is
    #: equivariant to invertible linear maps (column scales only move the
    #: ridge, defined for unit variances), as KISSME
    _auto_column_scale = False
    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "chunklet_covariance_": ArraySpec(("d", "d")),
        "total_scatter_": ArraySpec(("d", "d")),
        "shrinkage_grid_": ArraySpec((None,), optional=True),
        "shrinkage_scores_": ArraySpec((2, None), optional=True),
    }

    def __init__(self, n_components=None, *, regularization=1e-3, shrinkage="auto",
                 preprocessing="auto", preprocessor=None):
        self.n_components = n_components
        self.regularization = regularization
        self.shrinkage = shrinkage
        self.preprocessing = preprocessing
        self.preprocessor = preprocessor

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "regularization": [Interval(Real, 0, None, closed="left")],
        "shrinkage": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
        "preprocessing": ["no_validation"],
        "preprocessor": ["no_validation"],   # resolved by the base class
    }

    #: the paper's setting: equivalence (similar) constraints
    _accepts_pairs = True
    #: dissimilar pairs play no part: similar pairs alone are a full supervision
    _pairs_need_both = False

    def _label_codes(self, classes, codes):
        """metric-learn's chunk labels: an integer y holding -1 beside the
        chunk ids 0, 1, ... marks the rows with -1 as in no chunklet
        (metric-learn's ``RCA.fit(X, chunks)``): each becomes a class of its
        own, so it counts in the data's span (the total scatter) but not in
        the within-chunklet covariance.  Binary labels {-1, 1} (no 0) are two
        classes, as everywhere in tripletml."""
        if not _has_unchunked_label(classes):
            return codes
        loose = np.flatnonzero(codes == int(np.searchsorted(classes, -1)))
        out = codes.copy()
        out[loose] = classes.size + np.arange(loose.size)
        return out

    def _sampler(self):
        """Labels are used as they are (each class one chunklet):
        :class:`~tripletml.triplets.AllLabels`."""
        return AllLabels()

    def _check_loaded(self) -> None:
        """A loaded ``M_`` is PSD with ``components_`` its factor, and the
        factor is the RCA whitening of the stored ``chunklet_covariance_``
        and ``total_scatter_`` (recomputed)."""
        super()._check_loaded()
        self._check_loaded_metric(self.M_)
        s = getattr(self, "shrinkage_", None)
        if s is None:                 # a file written before shrinkage_ existed
            s = self.shrinkage_ = 0.0
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= s <= 1.0:
            raise ValueError(f"shrinkage_={s!r} must be a number in [0, 1]")
        L, M = rca_model(self.chunklet_covariance_, self.total_scatter_,
                         float(self.regularization), self.n_components, shrinkage=float(s))
        if L.shape != self.components_.shape or \
                np.linalg.norm(M - self.M_) > 1e-8 * np.linalg.norm(M) + 1e-300:
            raise ValueError("M_ is not the RCA matrix of chunklet_covariance_ and "
                             "total_scatter_")

    #: ``fit(ShardedCollection)``: exact, from per-partition class statistics
    #: (:meth:`_fit_statistics`)
    _partitioned_strategy = statistics.STRATEGY

    #: d x d arrays a fit holds at once (covariances, their inverses, the
    #: model), checked before training (:meth:`_check_square_memory`)
    _square_arrays = 5

    def _solve_work(self, n_rows: int, n_features: int) -> float:
        """The thread rule's work of the solve: products of the ``d x d``
        scatters with the span's ``s <= min(n, d)`` directions (``U^T C U``,
        ``L^T L``, the lift); the scatters and the factorizations price
        their own calls."""
        return float(n_features) * n_features * min(n_rows, n_features)

    def _fit(self, X, got, rng):
        t0 = time.perf_counter()
        n, d = X.shape
        self._check_square_memory(d)
        if isinstance(got, ClassCodes):
            codes = got.codes
            counts = np.bincount(codes)
            if counts.max() < 2:
                raise ValueError("RCA: every class has a single member; no chunklet of two "
                                 "or more equivalent points exists.")
            groups = np.where(counts[codes] >= 2, codes, -1)
            C, T, _ = _centered_scatters(X, groups, counts.size)
        else:
            if isinstance(got, PairConstraints):
                C = _pair_chunklet_covariance(X, got.pairs, got.similar)
            else:
                # the (query, positive) pairs as chunklets of two: each
                # pair's rows about their mean give (x_a - x_b)(x_a - x_b)^T / 2,
                # over the 2 m chunklet rows
                C = _triplet_chunklet_covariance(X, np.asarray(got))
            _, T, _ = _centered_scatters(X, np.full(n, -1), 0)
        self._choose_shrinkage(X, got, C)
        self._set_model(C, T, t0, rows=X)

    def _fit_statistics(self, plan) -> None:
        """Strategy ``"statistics"`` of ``fit(ShardedCollection)``: the same
        ``C`` and ``T`` as the in-memory fit on the concatenated rows, to
        rounding (:mod:`tripletml.distributed.class_stats`).

        From labels every class is one chunklet (as in memory: whole classes,
        nothing sampled): each partition's class sizes, class means and
        pooled scatter about its class means, merged pairwise in the tree
        (Chan, Golub & LeVeque 1983); ``C`` is the merged within-class scatter
        over the rows of classes with two or more members (Step 2 of the
        paper's Algorithm 1), ``T`` that scatter plus the between-class one.
        From explicit triplets, every ``(q, p+)`` is a chunklet of two: the
        partitions' sums of ``(q - p+)(q - p+)^T``, over ``4 m``.
        """
        from tripletml.distributed import class_stats
        t0 = time.perf_counter()
        sup = plan.supervision
        self._check_square_memory(int(self.scaler_.n_features_out_))
        if isinstance(sup.sampler, AllLabels):
            k = int(len(sup.codes["keys"]))
            C, T = class_stats.rca_label_scatters(plan, sup, k)
            plan.info["report"] = {"passes": 1, "classes": k}
        else:
            C, T, m = class_stats.rca_triplet_scatters(plan, sup)
            if m == 0:
                raise ValueError("RCA: the collection's partitions gave no triplet")
            plan.info["report"] = {"passes": 2, "triplets": int(m)}
        self._choose_shrinkage(None, None, C)
        self._set_model(0.5 * (C + C.T), 0.5 * (T + T.T), t0)

    def _choose_shrinkage(self, X, got, C: np.ndarray) -> None:
        """``shrinkage_`` (and, for "auto" on answers in memory,
        ``shrinkage_grid_`` / ``shrinkage_scores_``): see ``shrinkage``."""
        self.__dict__.pop("shrinkage_grid_", None)
        self.__dict__.pop("shrinkage_scores_", None)
        if not isinstance(self.shrinkage, str):
            self.shrinkage_ = float(self.shrinkage)
            return
        self.shrinkage_ = 0.0
        if got is None or isinstance(got, ClassCodes):
            return
        _, U = span_basis_of(X)                       # rank(C) on the span: O(n^2 d)
        rank = max(covariance_rank(U.T @ C @ U), 1)
        grid = np.concatenate([[0.0], shrinkage_grid(rank, C.shape[0])])
        if isinstance(got, PairConstraints):
            scores = shrinkage_scores(
                X, got.pairs, grid, float(self.regularization),
                lambda B, idx: _pair_chunklet_covariance(B, got.pairs[idx], got.similar[idx]),
                similar=got.similar)
        else:
            t = np.asarray(got)
            scores = shrinkage_scores(X, t, grid, float(self.regularization),
                                      lambda B, idx: _triplet_chunklet_covariance(B, t[idx]))
        if scores is None:
            return
        self.shrinkage_grid_, self.shrinkage_scores_ = grid, scores
        self.shrinkage_ = choose_shrinkage(grid, scores)

    def _set_model(self, C, T, t0: float, rows=None) -> None:
        """Check the covariances and set the fitted attributes (Step 3);
        ``rows``: the rows of the total scatter ``T``, in memory."""
        if not (np.isfinite(C).all() and np.isfinite(T).all()):
            raise FloatingPointError("RCA: training diverged (the covariances are not finite: the "
                                     "features overflow float64); scale them down (e.g. "
                                     "preprocessing='standardize').")
        L, M = rca_model(C, T, float(self.regularization), self.n_components, rows=rows,
                         shrinkage=float(self.shrinkage_))
        self.chunklet_covariance_ = C
        self.total_scatter_ = T
        self.M_ = M
        self.components_, self.rank_ = L, int(L.shape[0])
        self.history_ = {"step": [0], "seconds": [time.perf_counter() - t0]}
