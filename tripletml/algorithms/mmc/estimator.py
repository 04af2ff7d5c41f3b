"""MMC: Mahalanobis Metric for Clustering (Xing, Ng, Jordan & Russell,
"Distance metric learning, with application to clustering with
side-information", NIPS 2002), from similar and dissimilar pairs.

The estimator validates, builds the pairs (given, from class labels or from
triplets) and stores; the optimization is :mod:`tripletml.algorithms.mmc.kernels`.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import COMMON, Interval, StrOptions
from tripletml.engine import apply_result, run
from tripletml.engine.whole import WholeRun
from tripletml.engine.early_stopping import (BLEND_FOLDS, IDENTITY_BLEND_GRID, MIN_FOLD_ANSWERS,
                                             check_blend_record, choose_toward_last,
                                             two_protocol_splits)
from tripletml.core.validation import check_dense_memory
from tripletml.core.base import MahalanobisMixin, TripletLearner
from tripletml.linalg import psd_factor
from tripletml.linalg.span import lift_psd_factor
from tripletml.algorithms.kissme.kernels import heldout_score
from tripletml.pairs import PairConstraints, class_pairs
from tripletml.core.preprocessing import document_preprocessing
from tripletml.algorithms.mmc.kernels import mmc_diagonal, mmc_full
from tripletml.triplets import AllLabels, ClassCodes
from tripletml.core.docstrings import N_COMPONENTS_PARAM, document_transform

__all__ = ["MMC"]

#: similar and dissimilar pairs per squared class count when n_pairs is None
#: (metric-learn's MMC_Supervised: 20 c^2 of each): the floor of the default
PAIRS_PER_CLASS_PAIR = 40
#: pairs per free parameter of M (d (d + 1) / 2 of them) when n_pairs is None:
#: 10 similar and 10 dissimilar pairs per parameter
PAIRS_PER_PARAMETER = 20
#: most entries of the pair-difference arrays the default may hold (128 MiB)
MAX_DEFAULT_PAIR_ENTRIES = 1 << 24
#: shrinkage="auto": the blend weights of the identity (the paper's optimum
#: and the identity both on the similar pairs' budget), its folds and the
#: fewest answers a fold scores (shared with SCML)
SHRINKAGE_GRID, SHRINKAGE_FOLDS = IDENTITY_BLEND_GRID, BLEND_FOLDS


def default_n_pairs(n: int, d: int, c: int, diagonal: bool = False) -> int:
    """The pairs MMC draws from class labels when ``n_pairs`` is None.

    The paper (Xing et al. 2002) takes every pair of the labeled rows; a
    random sample stands for them.  Its size follows the number of free
    parameters of ``M``, ``d (d + 1) / 2`` (``d`` when diagonal):
    ``PAIRS_PER_PARAMETER`` (20)
    pairs per parameter, at least metric-learn's ``40 c^2``, at most the
    ``n (n - 1) / 2`` distinct pairs and ``MAX_DEFAULT_PAIR_ENTRIES / d``
    (the differences' memory).  ``40 c^2`` alone is 160 pairs for two
    classes whatever ``d``: far fewer than the parameters of ``M`` once d
    passes 10 or so, and the learned metric then fits the sampled pairs
    (measured: BENCHMARKS.md, "The classic learners head to head").
    """
    n_param = d if diagonal else d * (d + 1) // 2
    want = max(PAIRS_PER_CLASS_PAIR * c * c, PAIRS_PER_PARAMETER * n_param)
    cap = max(2, min(n * (n - 1) // 2, MAX_DEFAULT_PAIR_ENTRIES // max(d, 1)))
    return int(max(2, min(want, cap)))


def _differences(X, pairs: np.ndarray) -> np.ndarray:
    D = X[pairs[:, 0]] - X[pairs[:, 1]]
    return np.asarray(D.toarray() if sp.issparse(D) else D, dtype=np.float64)


#: aggregate repeated pairs when they shrink the pair set at least this much
_AGGREGATE_RATIO = 0.5


def _weighted_differences(X, pairs: np.ndarray, power: float) -> np.ndarray:
    """The differences of the pairs, one row per distinct (unordered) pair
    scaled by its count ``c`` to the ``power`` when repeats shrink the set
    by :data:`_AGGREGATE_RATIO` or more (few rows under many answers), else
    one row per pair as given.

    Exact: the similar pairs enter MMC only through their scatter ``sum d
    d^T`` (rows times ``sqrt(c)``, ``power=0.5``), the dissimilar ones
    through ``sum ||d||_A`` and its gradient ``sum d d^T / (2 ||d||_A)``, both
    homogeneous of degree one in the row (rows times ``c``, ``power=1``; the
    diagonal form's ``sqrt(a . d^2)`` likewise); a pair and its reverse have
    the same terms.  The whitener only uses the span of the rows, which the
    scaling keeps, so the iterates are the same to rounding."""
    pairs = np.asarray(pairs, dtype=np.int64)
    if len(pairs) < 2:
        return _differences(X, pairs)
    n = int(X.shape[0])
    lo, hi = pairs.min(axis=1), pairs.max(axis=1)
    keys, counts = np.unique(lo * n + hi, return_counts=True)
    if len(keys) > _AGGREGATE_RATIO * len(pairs):
        return _differences(X, pairs)
    upairs = np.column_stack([keys // n, keys % n])
    return _differences(X, upairs) * (counts.astype(np.float64) ** power)[:, None]


@document_transform
@document_preprocessing
class MMC(MahalanobisMixin, TripletLearner):
    """Mahalanobis Metric for Clustering: the metric that spreads the
    dissimilar pairs as far as possible while the similar pairs stay close.

    With similar pairs S and dissimilar pairs D (Xing et al. 2002, eqs. 3-5):

        max_M  sum_{(i,j) in D} ||x_i - x_j||_M
        s.t.   sum_{(i,j) in S} ||x_i - x_j||_M^2 <= 1,   M PSD,

    ``||v||_M = sqrt(v^T M v)``.  The objective is concave and the feasible
    set convex.  The full matrix is found by projected gradient ascent
    (Sec. 2.1) with the feasible set written, after the change of variable
    ``B = C_S^{1/2} M C_S^{1/2}`` (``C_S`` the similar pairs' scatter), as
    ``{B PSD, tr B <= 1}``, whose projection is exact (the paper alternates
    projections onto the two sets, which only approximates it); see
    :mod:`tripletml.algorithms.mmc.kernels`.  ``diagonal=True`` learns ``M = diag(a)``
    by the paper's Newton-Raphson on eq. 6, ``sum_S ||x_i - x_j||_a^2 -
    log(sum_D ||x_i - x_j||_a)`` over ``a >= 0``.

    Supervision: pairs (``fit(X, y)`` with X of shape (m, 2, n_features)
    and y of +1 / -1, metric-learn's form, or ``fit(X, pairs=P, y=labels)``;
    the solver receives them as :class:`~tripletml.pairs.PairConstraints`),
    class labels (``fit(X, y)``: ``n_pairs`` random pairs,
    :func:`~tripletml.pairs.class_pairs`) or index triplets
    (``fit(X, triplets=T)``: ``(q, p+)`` similar, ``(q, p-)`` dissimilar).

    Directions along which no pair differs get no weight.  A direction in
    which similar pairs never differ but dissimilar pairs do makes the
    problem unbounded; the similar scatter is ridged there by 1e-8 times its
    mean eigenvalue (the direction then dominates the metric).

    Few rows under many answers (crowd triplets about items): a pair asked
    many times enters once, weighted by its count (the same objective and
    gradient, see ``_weighted_differences``), and with fewer rows than
    features the solver runs on the coordinates of the rows' span
    (:mod:`tripletml.linalg.span`): a step costs ``O(p r^2)`` for ``p <=
    n (n - 1) / 2`` distinct pairs and a span of dimension ``r <= n``.

    Parameters
    ----------
    diagonal : bool, default=False
        Learn a diagonal ``M`` (feature weights, eq. 6) instead of a full one.
    {n_components}
    n_pairs : int or None, default=None
        Pairs drawn from class labels, half similar and half dissimilar.
        None: 20 per free parameter of ``M`` (``d (d + 1) / 2``; ``d`` when
        diagonal), at least ``40 c^2`` for c classes (metric-learn's
        MMC_Supervised: 20 c^2 of each), at most the ``n (n - 1) / 2``
        distinct pairs and 2^24 / d (128 MiB of differences); see
        :func:`default_n_pairs`.  Ignored with pairs or triplets.
    max_iter : int, default=1000
        Projected-gradient steps (full) or Newton steps (diagonal).
    tol : float or None, default=1e-6
        Stop when the relative improvement of the objective over a step is
        at most ``tol`` (full: ``(g_new - g) / g_new`` of the dissimilar
        distances' sum; diagonal: the relative decrease of eq. 6); else a
        ConvergenceWarning after ``max_iter``.  None: ``max_iter`` steps.
    shrinkage : float in [0, 1] or "auto", default="auto"
        Weight ``s`` of the identity in ``M_ = (1 - s) A / S_A + s I / S_I``,
        ``A`` the paper's optimum and ``S_A``, ``S_I`` the similar pairs'
        squared-distance sums under ``A`` and under the identity: both terms
        spend the constraint's budget, so the blend is a feasible point of
        eq. 3-5 on the segment from the optimum (``s = 0``, the paper's
        ``M``) to the scaled Euclidean distance of the preprocessed rows
        (``s = 1``), and keeps weight on the directions no pair varies along
        (new items).  "auto": 0 with class labels (the paper's setting);
        with triplets or pairs (people's answers, which the optimum can
        follow too far: its ``M`` is often of low rank) the value of
        ``0, 1/11, 1/2, 10/11, 100/101, 1`` measured on held-out answers in
        two ways, each a mean over 3 folds, as RCA's ``shrinkage``: answers
        among new items (fitted on the answers among two thirds of the
        items, each item's fold a hash of its id) and new answers about
        known items (folds of the answers); the value whose smaller gain
        over ``s = 1`` is largest, so neither falls below the features' own
        geometry; ties go to the paper's (triplet accuracy; for pairs the
        ROC AUC of the distances).  Too few answers per fold (5): 0.
    {preprocessing}
    random_state : None, int or numpy Generator
        Draws the pairs from labels.
    verbose : int, default=0
        Print the objective at every step.
    {preprocessor}

    Attributes
    ----------
    M_ : ndarray of shape (d, d)
        The learned PSD matrix (d = ``n_features_preprocessed_``); the
        similar pairs' constraint holds, ``sum_S ||x_i - x_j||_M^2 <= 1``.
    components_ : ndarray of shape (``rank_``, d)
        ``L`` with ``L^T L = M_``: the eigen-directions of ``M_`` scaled by
        the roots of their eigenvalues, largest first.
    rank_ : int
        Rank of ``M_``.
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}
    history_ : dict of lists
        ``step``, ``seconds``, ``objective`` (full: the dissimilar pairs'
        distance sum; diagonal: eq. 6) and ``convergence`` (the value
        compared with ``tol``).
    shrinkage_ : float
        The weight of the identity used (``shrinkage`` or the choice of
        "auto").  Above 0, ``M_`` has full rank and ``components_`` all
        ``d`` eigen-directions.
    shrinkage_grid_ : ndarray of shape (6,)
    shrinkage_scores_ : ndarray of shape (2, 6)
        With "auto" on answers: the grid and each value's mean held-out
        score on new items (row 0) and new answers (row 1); absent otherwise.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from tripletml import MMC
    >>> X, y = load_iris(return_X_y=True)
    >>> MMC(random_state=0).fit(X, y).M_.shape
    (4, 4)
    """

    _accepts_pairs = True
    _fitted_arrays = {
        "M_": ArraySpec(("d", "d")),
        "components_": ArraySpec(("rank_", "d")),
        "shrinkage_grid_": ArraySpec((None,), optional=True),
        "shrinkage_scores_": ArraySpec((2, None), optional=True),
    }
    _square_arrays = 8

    def __init__(self, diagonal=False, *, n_components=None, n_pairs=None, max_iter=1000,
                 tol=1e-6, shrinkage="auto", preprocessing="auto", random_state=None,
                 verbose=0, preprocessor=None):
        self.diagonal = diagonal
        self.n_components = n_components
        self.n_pairs = n_pairs
        self.max_iter = max_iter
        self.tol = tol
        self.shrinkage = shrinkage
        self.preprocessing = preprocessing
        self.random_state = random_state
        self.verbose = verbose
        self.preprocessor = preprocessor

    _parameter_constraints = {
        **COMMON,
        "diagonal": ["boolean"],
        "n_components": N_COMPONENTS_PARAM,
        "preprocessor": ["no_validation"],   # resolved by the base class
        "n_pairs": [Interval(Integral, 2, None, closed="left"), None],
        "shrinkage": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
    }

    def _sampler(self):
        """Labels are kept (:class:`~tripletml.triplets.AllLabels`); the
        pairs are drawn in ``_fit``."""
        return AllLabels()

    def _check_loaded(self) -> None:
        """``M_`` PSD with ``components_`` its factor; diagonal when
        ``diagonal``."""
        super()._check_loaded()
        check_blend_record(self)       # shrinkage_ (0 in a file written before it)
        self._check_loaded_metric(self.M_)
        if self.diagonal and np.count_nonzero(self.M_ - np.diag(np.diag(self.M_))):
            raise ValueError("M_ of a diagonal MMC has off-diagonal entries")

    def _pairs(self, got, rng, d: int) -> PairConstraints:
        if isinstance(got, PairConstraints):
            return got
        if isinstance(got, ClassCodes):
            c = int(got.codes.max()) + 1
            n_pairs = self.n_pairs if self.n_pairs is not None else \
                default_n_pairs(int(got.codes.size), d, c, bool(self.diagonal))
            return class_pairs(got.codes, n_pairs, rng, owner=self)
        t = np.asarray(got)
        pairs = np.concatenate([t[:, [0, 1]], t[:, [0, 2]]])
        labels = np.concatenate([np.ones(len(t), np.int8), -np.ones(len(t), np.int8)])
        return PairConstraints(np.ascontiguousarray(pairs, dtype=np.int64), labels)

    def _span_lift_spec(self, X, supervision):
        """The span route (:mod:`tripletml.linalg.span`) for the full
        matrix: the solver already works on the span of the pair
        differences (``A = W B W^T``, 0 on the complement) and every
        quantity it uses (the whitener's eigenvalues, ``g``, the steps) is
        the same on the span's coordinates, so ``M_ = Q M_r Q^T`` and
        ``components_ = L_r Q^T``.  (The whitener's rank cut, ``d eps``
        times its largest eigenvalue, becomes ``r eps``: both only drop
        directions at rounding level.)  The held-out choice of
        ``shrinkage`` sees the same distances on the span's coordinates;
        the identity's part ``s / S_I`` is also on the complement
        (:meth:`_span_lift_extra`).  The diagonal MMC weighs the coordinate
        axes: plain route."""
        return None if self.diagonal else {"M_": 0.0, "components_": "cols"}

    def _span_lift_extra(self, Q: np.ndarray, spec) -> None:
        """With the identity's part ``c = s / S_I > 0``: ``M_`` is ``c`` on
        the complement and ``components_`` its eigen-factor (the
        complement's eigenvalue ``c`` is the smallest)."""
        c = self.__dict__.pop("_identity_part", 0.0)
        if c > 0:
            spec["M_"] = c
            del spec["components_"]
            self.components_, self.rank_ = lift_psd_factor(self.M_, Q, c, 0.0)

    def _fit(self, X, got, rng):
        self.__dict__.pop("_identity_part", None)
        # the default pair count follows the preprocessed width, also on the
        # span route's reduced coordinates (the same draws as the plain route)
        scaler = getattr(self, "scaler_", None)
        d = int(getattr(scaler, "n_features_out_", X.shape[1]) or X.shape[1])
        pc = self._pairs(got, rng, d)
        Ds, Dd = self._pair_differences(X, pc)
        solve = mmc_diagonal if self.diagonal else mmc_full
        solver = WholeRun(lambda budget: solve(Ds, Dd, max_iter=budget, tol=self.tol,
                                               verbose=int(self.verbose), who="MMC"))
        result = run(solver, name="MMC", max_iter=int(self.max_iter),
                     tol=0.0 if self.tol is None else self.tol)
        res = solver.result
        A, L = res.A, res.factor
        if not self.diagonal:
            # eigen-directions of M (largest first), as transform's n_components expects
            L = np.ascontiguousarray(psd_factor(A, 1e-12)[0][:res.factor.shape[0]])
        self.shrinkage_ = self._choose_shrinkage(X, got, pc)
        if self.shrinkage_ > 0:
            A, c = _blend(A, Ds, self.shrinkage_)
            L = psd_factor(A, 0.0)[0]
            self._identity_part = c
        self.M_ = A
        self.components_ = L
        self.rank_ = int(L.shape[0])
        apply_result(self, result, tol=self.tol, what="relative improvement of the objective",
                     advice="increase max_iter or tol")

    def _pair_differences(self, X, pc: PairConstraints) -> tuple[np.ndarray, np.ndarray]:
        """``(Ds, Dd)``: the similar pairs' differences (rows times the
        root of their counts) and the dissimilar pairs' of distinct rows
        (times their counts), checked (``_weighted_differences``)."""
        d = X.shape[1]
        sim = pc.similar
        check_dense_memory(8 * (pc.n_pairs * d + 8 * d * d), self,
                           f"the differences of {pc.n_pairs} pairs ({d} features)")
        with np.errstate(over="ignore", invalid="ignore"):
            Ds = _weighted_differences(X, pc.pairs[sim], 0.5)
            Dd = _weighted_differences(X, pc.pairs[~sim], 1.0)
            ok = np.isfinite(Ds).all() and np.isfinite(Dd).all() and \
                np.isfinite(Ds.T @ Ds).all() and np.isfinite(Dd.T @ Dd).all()
        if not ok:
            raise FloatingPointError("MMC: training diverged (the pair differences overflow "
                                     "float64); scale the features down (e.g. "
                                     "preprocessing='standardize').")
        if Ds.shape[0] == 0:
            raise ValueError("MMC: no similar pair; the constraint needs at least one.")
        Dd = Dd[np.any(Dd != 0, axis=1)]
        if Dd.shape[0] == 0:
            raise ValueError("MMC: no dissimilar pair of distinct rows; the objective is 0 "
                             "for every metric.")
        if not np.any(Ds != 0):
            raise ValueError("MMC: every similar pair joins identical rows; the constraint "
                             "bounds nothing.")
        return Ds, Dd

    def _choose_shrinkage(self, X, got, pc: PairConstraints) -> float:
        """``shrinkage_`` (and, for "auto" on answers, ``shrinkage_grid_``
        and ``shrinkage_scores_``): see ``shrinkage``."""
        self.__dict__.pop("shrinkage_grid_", None)
        self.__dict__.pop("shrinkage_scores_", None)
        if not isinstance(self.shrinkage, str):
            return float(self.shrinkage)
        if isinstance(got, ClassCodes):
            return 0.0
        if isinstance(got, PairConstraints):
            answers, similar = pc.pairs, pc.similar
        else:
            answers, similar = np.asarray(got), None
        splits = two_protocol_splits(answers, SHRINKAGE_FOLDS, similar, MIN_FOLD_ANSWERS)
        if splits is None:
            return 0.0
        grid = np.asarray(SHRINKAGE_GRID)
        try:
            scores = np.array([np.mean([self._fold_scores(X, answers, similar, h, grid)
                                        for h in folds], axis=0) for folds in splits])
        except np.linalg.LinAlgError:
            raise
        except ValueError:          # a fold without a usable pair of a kind: the paper's
            return 0.0
        self.shrinkage_grid_, self.shrinkage_scores_ = grid, scores
        return choose_toward_last(grid, scores)

    def _fold_scores(self, X, answers, similar, h, grid) -> np.ndarray:
        """The grid's held-out scores of one split ``h``: the optimum of the
        fold's fit answers, blended, scored on its held-out answers."""
        fit = answers[h.fit]
        pc = PairConstraints(np.ascontiguousarray(fit, dtype=np.int64),
                             np.where(similar[h.fit], 1, -1).astype(np.int8)) \
            if similar is not None else self._pairs(fit, None, X.shape[1])
        Ds, Dd = self._pair_differences(X, pc)
        solve = mmc_diagonal if self.diagonal else mmc_full
        A = solve(Ds, Dd, max_iter=int(self.max_iter), tol=self.tol, verbose=0, who="MMC").A
        s_a, s_i = _budgets(A, Ds)
        val = answers[h.val]
        sides = [(0, 1)] if similar is not None else [(0, 1), (0, 2)]
        terms = []
        for i, j in sides:
            D = _differences(X, np.ascontiguousarray(val[:, [i, j]], dtype=np.int64))
            terms.append((np.einsum("ij,ij->i", D @ A, D) / s_a,
                          np.einsum("ij,ij->i", D, D) / s_i))
        out = []
        for w in grid:
            dist = [(1.0 - w) * da + w * di for da, di in terms]
            out.append(heldout_score(dist[0], similar=similar[h.val]) if similar is not None
                       else heldout_score(*dist))
        return np.asarray(out)


def _budgets(A: np.ndarray, Ds: np.ndarray) -> tuple[float, float]:
    """``(S_A, S_I)``: the similar pairs' squared-distance sums under ``A``
    and under the identity (``Ds`` rows already weighted by the root of
    their counts)."""
    s_a = float(np.einsum("ij,ij->", Ds @ A, Ds))
    s_i = float(np.einsum("ij,ij->", Ds, Ds))
    return (s_a if s_a > 0 else 1.0), s_i


def _blend(A: np.ndarray, Ds: np.ndarray, s: float) -> tuple[np.ndarray, float]:
    """``((1 - s) A / S_A + s I / S_I, s / S_I)`` (:func:`_budgets`)."""
    s_a, s_i = _budgets(A, Ds)
    c = s / s_i
    M = (1.0 - s) / s_a * A
    M[np.diag_indices_from(M)] += c
    return 0.5 * (M + M.T), c
