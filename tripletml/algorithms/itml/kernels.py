"""ITML's solver: cyclic Bregman projections under the LogDet divergence
(Davis, Kulis, Jain, Sra & Dhillon, "Information-theoretic metric
learning", ICML 2007, Algorithm 1).

ITML finds the Mahalanobis matrix ``A`` closest to a prior ``A0`` in the
LogDet divergence ``D_ld(A, A0) = tr(A A0^{-1}) - log det(A A0^{-1}) - d``
(eq. 5 of the paper, with slack ``gamma D_ld(diag(xi), diag(xi_0))``)
subject to distance constraints::

    d_A(x_i, x_j) = (x_i - x_j)^T A (x_i - x_j) <= u    (similar pair)
    d_A(x_i, x_j) >= l                                   (dissimilar pair)

A triplet ``(q, p+, p-)`` holds one similar pair ``(q, p+)`` and one
dissimilar pair ``(q, p-)``.  The solver visits the constraints in turn and
projects ``A`` onto each one, at O(d^2) per constraint: with
``v = x_i - x_j``, ``p = v^T A v`` and the constraint's dual variable
``lambda >= 0`` and slack target ``xi``,

    alpha = min(lambda, delta * gamma / (gamma + 1) * (1 / p - 1 / xi))
    beta  = delta * alpha / (1 - delta * alpha * p)
    xi    <- gamma xi / (gamma + delta * alpha * xi)
    lambda <- lambda - alpha
    A     <- A + beta (A v)(A v)^T

(``delta`` = +1 for a similar pair, -1 for a dissimilar one).  This is
Algorithm 1 with the projection step of the authors' released code
(``ItmlAlg.m``), whose factor ``gamma / (gamma + 1)`` makes it the exact
projection onto the constraint with slack: after the step ``d_A(x_i, x_j)``
equals the updated ``xi`` unless the dual variable hit 0.  ``gamma = inf``
is the projection without slack (``xi`` stays at the bound).  In exact
arithmetic every step keeps ``A`` positive definite; pairs whose rows are
(nearly) identical would need an unbounded step and are left out (as the
released code drops pairs closer than 1e-9).  A sweep ends with a
convergence test on the dual variables, ``||lambda - lambda_old||_1 /
(||lambda||_1 + ||lambda_old||_1)``: the released code's test with the l1
norm in the denominator too (see :class:`ITMLSolver`, Notes).

The default bounds are the 5th and 95th percentiles of the squared
distances ``||x_i - x_j||^2`` over the pairs of distinct rows (by value)
among those the constraints use (the released code's ``ComputeDistanceExtremes`` takes
the same percentiles from 100 random pairs).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.spatial.distance import squareform

from tripletml.core.validation import as_generator, check_scalar_param, check_triplets, check_X
from tripletml.pairs import PairConstraints, check_pairs
from tripletml.linalg._flags import FAST
from tripletml.engine.driver import StepReport

__all__ = ["itml_bounds", "triplet_pairs", "ITMLSolver"]

#: at most this many rows enter the pairwise distances of the default bounds
BOUND_ROWS = 1000
#: the percentiles of the squared distances used as (u, l) by default
BOUND_PERCENTILES = (5.0, 95.0)
#: a pair whose squared distance is at most this fraction of its bound is
#: left out (its projection would need a step of order 1 / distance^2)
INACTIVE_RTOL = 1e-12

#: sweeps per :meth:`ITMLSolver.step` (a progress bar / history record each)
SWEEP_BLOCK = 50
BREAKDOWN = ("ITML: training diverged (M lost positive definiteness to rounding: a pair "
             "of nearly identical rows needed a huge step); lower gamma, remove "
             "near-duplicate rows, or pass larger bounds.")
OVERFLOW = ("ITML: training diverged (squared distances overflow float64); scale the "
            "features down (e.g. preprocessing='standardize').")


@njit(cache=True, nogil=True, fastmath=FAST)
def _itml_sweeps(X, pairs, similar, active, xi, dual, A, gamma, n_sweeps, tol, dual_old,
                 conv_out, skipped):  # pragma: no cover - compiled (tested through ITMLSolver)
    """Up to ``n_sweeps`` cyclic sweeps of Bregman projections, in place
    (unchecked: :class:`ITMLSolver` validates the arrays).

    Parameters
    ----------
    X : ndarray (n, d), float64, C-contiguous
    pairs : ndarray (m, 2), int64
        Row indices of each constraint's pair.
    similar : ndarray (m,), bool
        True for ``d <= u`` (similar), False for ``d >= l`` (dissimilar).
    active : ndarray (m,), bool
        False: the constraint is skipped (rows nearly identical).
    xi : ndarray (m,)
        Each constraint's current slack target (starts at its bound).
    dual : ndarray (m,)
        The dual variables lambda (start at 0), kept >= 0.
    A : ndarray (d, d)
        The current matrix, updated in place.
    gamma : float
        Slack trade-off (``inf``: no slack).
    n_sweeps : int
    tol : float
        Stop after the first sweep whose convergence value is at most
        ``tol`` (a negative ``tol`` never stops early).
    dual_old : ndarray (m,)
        The dual variables at the start of the sweep (updated).
    conv_out : ndarray (>= n_sweeps,)
        The convergence value of each sweep made.
    skipped : ndarray (2,), int64
        Incremented per projection skipped: ``[0]`` an active pair whose
        distance is not positive (A lost positive definiteness to rounding),
        ``[1]`` a distance that is not finite (overflow).

    Returns
    -------
    int
        Sweeps made (``< n_sweeps`` only when ``tol`` was met).
    """
    m = pairs.shape[0]
    d = X.shape[1]
    gp = 1.0 if math.isinf(gamma) else gamma / (gamma + 1.0)
    v = np.empty(d)
    Av = np.empty(d)
    done = 0
    for sweep in range(n_sweeps):
        for c in range(m):
            if not active[c]:
                continue
            i = pairs[c, 0]
            j = pairs[c, 1]
            for k in range(d):
                v[k] = X[i, k] - X[j, k]
            p = 0.0
            for k in range(d):
                s = 0.0
                for l in range(d):
                    s += A[k, l] * v[l]
                Av[k] = s
                p += v[k] * s
            if math.isinf(p) or math.isnan(p):
                skipped[1] += 1     # overflow: reported by the caller
                continue
            if not p > 0.0:
                skipped[0] += 1     # a breakdown: reported by the caller
                continue
            if similar[c]:
                alpha = min(dual[c], gp * (1.0 / p - 1.0 / xi[c]))
                beta = alpha / (1.0 - alpha * p)
                xi[c] = 1.0 / (1.0 / xi[c] + alpha / gamma)
            else:
                alpha = min(dual[c], gp * (1.0 / xi[c] - 1.0 / p))
                beta = -alpha / (1.0 + alpha * p)
                xi[c] = 1.0 / (1.0 / xi[c] - alpha / gamma)
            dual[c] -= alpha
            if beta != 0.0:
                for k in range(d):
                    bk = beta * Av[k]
                    for l in range(d):
                        A[k, l] += bk * Av[l]
        done = sweep + 1
        # ||lambda - lambda_old||_1 / (||lambda||_1 + ||lambda_old||_1): the
        # relative change of the duals in one norm (see ITMLSolver, Notes)
        norm_new = 0.0
        norm_old = 0.0
        diff = 0.0
        for c in range(m):
            norm_new += abs(dual[c])
            norm_old += abs(dual_old[c])
            diff += abs(dual[c] - dual_old[c])
        for c in range(m):
            dual_old[c] = dual[c]
        total = norm_new + norm_old
        conv = 0.0 if total == 0.0 else diff / total
        conv_out[sweep] = conv
        if conv <= tol:
            break
    return done


def triplet_pairs(triplets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The constraints of triplets, triplet by triplet.

    Visiting a triplet's two constraints one after the other converges in
    far fewer sweeps than all similar pairs followed by all dissimilar ones
    (metric-learn's order): on balance-scale the convergence value is 0.005
    after 300 sweeps against 0.076.

    Parameters
    ----------
    triplets : ndarray of shape (m, 3)
        ``(q, p+, p-)`` row indices.

    Returns
    -------
    pairs : ndarray of shape (2 m, 2), int64
        ``(q, p+)`` of triplet t in row 2 t, ``(q, p-)`` in row 2 t + 1.
    similar : ndarray of shape (2 m,), bool
        True on the even rows.
    """
    t = check_triplets(triplets, np.iinfo(np.int64).max, "triplet_pairs")
    pairs = np.empty((2 * len(t), 2), dtype=np.int64)
    pairs[0::2] = t[:, [0, 1]]
    pairs[1::2] = t[:, [0, 2]]
    similar = np.zeros(2 * len(t), dtype=bool)
    similar[0::2] = True
    return pairs, similar


def itml_bounds(X: np.ndarray, rows: np.ndarray, rng: Any,
                percentiles: tuple[float, float] = BOUND_PERCENTILES,
                max_rows: int = BOUND_ROWS) -> tuple[float, float]:
    """The default ``(u, l)``: percentiles of the squared Euclidean
    distances between the distinct rows (by value: duplicates count once)
    among the rows ``rows`` of dense X.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    rows : ndarray of int
        Row indices; a random ``max_rows`` of their distinct rows when
        there are more.
    rng : None, int or numpy Generator
        Draws that subsample.
    percentiles : (float, float), default=(5, 95)
    max_rows : int, default=1000

    Returns
    -------
    (u, l) : (float, float)
        The lower percentile (the similar pairs' bound) and the upper one
        (the dissimilar pairs'); ``(0, 0)`` when no two rows differ.
    """
    who = "itml_bounds"
    X = check_X(X, who, accept_sparse=False)
    rows = np.asarray(rows)
    if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer) \
            or rows.dtype == bool:
        raise TypeError(f"{who}: rows must be a non-empty 1-D integer array, got dtype "
                        f"{rows.dtype} and shape {rows.shape}.")
    if rows.min() < 0 or rows.max() >= X.shape[0]:
        raise ValueError(f"{who}: rows must lie in [0, {X.shape[0]}).")
    lo_p = check_scalar_param(percentiles[0], "percentiles[0]", who, kind="real", low=0,
                              high=100)
    hi_p = check_scalar_param(percentiles[1], "percentiles[1]", who, kind="real", low=lo_p,
                              high=100)
    max_rows = check_scalar_param(max_rows, "max_rows", who, kind="int", low=2)
    rng = as_generator(rng, who)
    Z = np.unique(X[np.unique(rows)], axis=0)   # distinct rows (by value), sorted
    if len(Z) > max_rows:
        Z = Z[np.sort(rng.choice(len(Z), size=max_rows, replace=False))]
    if len(Z) < 2:
        return 0.0, 0.0
    Z = Z - Z.mean(axis=0)       # centered: no cancellation for rows far from the origin
    sq = np.einsum("ij,ij->i", Z, Z)
    D = Z @ Z.T
    D *= -2.0
    D += sq[:, None]
    D += sq[None, :]
    np.fill_diagonal(D, 0.0)
    dist = squareform(D, checks=False)          # the pairs i < j, as pdist orders them
    u, l = np.percentile(dist, (lo_p, hi_p))
    return float(u), float(l)


class ITMLSolver:
    """The state of ITML's cyclic projections on the constraints of given
    triplets (the problem: X, the constraints, their bounds and gamma; the
    state: A, the dual variables and the slack targets).

    Parameters
    ----------
    X : ndarray (n, d) or scipy.sparse matrix
        Finite values; only the rows the triplets use are kept (dense).
    triplets : ndarray (m, 3) or PairConstraints
        Integer row indices ``(q, p+, p-)`` (each gives a similar and a
        dissimilar constraint, :func:`triplet_pairs`), or labeled pairs
        (:class:`tripletml.pairs.PairConstraints`: the paper's constraint
        sets S and D as given).
    bounds : (float, float)
        ``(u, l)`` with ``0 < u <= l < inf``: similar pairs' squared
        distances are pushed below ``u``, dissimilar pairs' above ``l``.
    gamma : float
        Slack trade-off, > 0 (``np.inf``: hard constraints).
    A0 : ndarray (d, d), optional
        The prior, symmetric positive definite (default the identity); copied.

    Attributes
    ----------
    A : ndarray (d, d)
        The current matrix.
    dual, xi : ndarray (2 m,)
        Dual variables (>= 0) and slack targets, in the order of
        :func:`triplet_pairs`.
    bound : ndarray (2 m,)
        Each constraint's original bound (u or l).
    similar, active : ndarray (2 m,), bool
        Similar pair; taking part (False: its rows are closer than
        ``INACTIVE_RTOL`` times its bound, the pair is left out).
    sweeps : int
        Sweeps made.
    skipped : ndarray (2,), int64
        Projections skipped for a non-positive distance of an active pair
        (rounding broke positive definiteness) and for overflow.

    Notes
    -----
    The convergence value of a sweep is ``||lambda - lambda_old||_1 /
    (||lambda||_1 + ||lambda_old||_1)``, the relative change of the dual
    variables in one norm.  The authors' ``ItmlAlg.m`` divides the l1 norm
    of the change by l2 norms, a ratio that grows with the number of active
    constraints m (by up to ``sqrt(m)`` for the same relative change per
    dual): with the default ``n_triplets = 20 c^2`` it was met at
    ``tol = 1e-2`` after 35-250 sweeps on the two- and three-class sets
    (ionosphere: 138 active duals) and never within 1,000 sweeps on digits
    (2,300), vowel (3,500) or letter, whatever the fit had reached (issue
    27; digits' test mAP was the same after 230 sweeps as after 1,000).
    The l1 / l1 ratio is free of m; at ``tol = 1e-3`` (ITML's default
    since) it stops where the released code's test stopped on the small
    sets (ionosphere after 37 sweeps against 35, balance-scale 201 against
    207) and after 230-700 sweeps on the many-class ones.
    """

    def __init__(self, X, triplets, bounds: tuple[float, float], gamma: float,
                 A0: np.ndarray | None = None):
        who = "ITMLSolver"
        X = check_X(X, who)
        n, d = X.shape
        if isinstance(triplets, PairConstraints):         # the paper's pairs, as given
            pairs, similar = check_pairs(triplets.pairs, triplets.labels, n, who).pairs, \
                triplets.similar
        else:
            pairs, similar = triplet_pairs(check_triplets(triplets, n, who))
        if len(bounds) != 2:
            raise ValueError(f"{who}: bounds must be a pair (u, l), got {bounds!r}.")
        u, l = float(bounds[0]), float(bounds[1])
        if not (math.isfinite(l) and 0.0 < u <= l):
            raise ValueError(f"{who}: bounds=(u, l) need 0 < u <= l < inf, got {bounds!r}.")
        gamma = float(gamma)
        if not gamma > 0.0:
            raise ValueError(f"{who}: gamma={gamma!r} must be > 0 (np.inf: no slack).")
        if A0 is not None:
            A0 = np.array(A0, dtype=np.float64, order="C")
            if (A0.shape != (d, d) or not np.isfinite(A0).all()
                    or not np.allclose(A0, A0.T, rtol=1e-12, atol=0)
                    or np.linalg.eigvalsh(0.5 * (A0 + A0.T))[0] <= 0):
                raise ValueError(f"{who}: A0 must be a finite symmetric positive definite "
                                 f"({d}, {d}) matrix.")
        used, inverse = np.unique(pairs, return_inverse=True)
        Xu = X[used]
        Xu = Xu.toarray() if sp.issparse(Xu) else np.asarray(Xu)
        self.X = np.ascontiguousarray(Xu, dtype=np.float64)
        self.pairs = np.ascontiguousarray(inverse.reshape(pairs.shape).astype(np.int64))
        self.similar = similar
        self.bounds = (u, l)
        self.bound = np.where(similar, u, l).astype(np.float64)
        self.xi = self.bound.copy()
        self.dual = np.zeros(len(similar))
        self._dual_old = np.zeros(len(similar))
        self.A = np.eye(d) if A0 is None else A0
        with np.errstate(over="ignore"):
            V = self.X[self.pairs[:, 0]] - self.X[self.pairs[:, 1]]
            sq = np.einsum("ij,ij->i", V, V)
        self.active = ~(sq <= INACTIVE_RTOL * self.bound)       # NaN / inf stay active
        self.gamma = gamma
        self.sweeps = 0
        self.skipped = np.zeros(2, dtype=np.int64)
        #: :meth:`step` stops at the first sweep whose value is at most this
        self.tol: float | None = None

    def run_sweeps(self, n_sweeps: int, tol: float | None) -> np.ndarray:
        """Up to ``n_sweeps`` more sweeps.

        Parameters
        ----------
        n_sweeps : int
            >= 0.
        tol : float or None
            Stop after the first sweep whose convergence value is at most
            ``tol`` (>= 0); None runs every sweep.

        Returns
        -------
        ndarray
            The convergence value of each sweep made.
        """
        if isinstance(n_sweeps, (bool, np.bool_)) or not isinstance(n_sweeps, (int, np.integer)) \
                or n_sweeps < 0:
            raise ValueError(f"ITMLSolver.run_sweeps: n_sweeps={n_sweeps!r} must be an integer >= 0.")
        if tol is not None and not (math.isfinite(float(tol)) and float(tol) >= 0):
            raise ValueError(f"ITMLSolver.run_sweeps: tol={tol!r} must be None or a finite number >= 0.")
        conv = np.empty(int(n_sweeps))
        done = _itml_sweeps(self.X, self.pairs, self.similar, self.active, self.xi, self.dual,
                            self.A, self.gamma, int(n_sweeps),
                            -1.0 if tol is None else float(tol), self._dual_old, conv,
                            self.skipped)
        self.sweeps += int(done)
        return conv[:done]

    # ---------------------------------------------- the training protocol
    def step(self, budget: int = 1) -> StepReport:
        """Up to ``min(SWEEP_BLOCK, budget)`` sweeps in one compiled call
        (:mod:`tripletml.engine` protocol), stopping early at the first
        sweep whose convergence value is at most the attribute ``tol``
        (None: every sweep).  Raises ITML's FloatingPointError when a
        projection overflowed or met a non-positive distance.  The criterion
        is the last sweep's convergence value (the relative change of the
        dual variables in the l1 norm, Notes)."""
        vals = self.run_sweeps(min(getattr(self, "block", SWEEP_BLOCK), int(budget)), self.tol)
        if self.skipped[1] or not np.isfinite(self.A).all():
            raise FloatingPointError(OVERFLOW)
        if self.skipped[0]:
            raise FloatingPointError(BREAKDOWN)
        conv = float(vals[-1]) if vals.size else None
        return StepReport(iterations=int(vals.size), units=int(vals.size), t=self.sweeps,
                          record=dict(convergence=conv), criterion=conv)

    def distances(self) -> np.ndarray:
        """``d_A`` of every constraint's pair (in the order of :func:`triplet_pairs`)."""
        V = self.X[self.pairs[:, 0]] - self.X[self.pairs[:, 1]]
        return np.einsum("ij,jk,ik->i", V, self.A, V)

    def violation(self) -> float:
        """Largest amount by which an active constraint misses its original
        bound, relative to that bound (0 when every one holds)."""
        dist = self.distances()
        gap = np.where(self.similar, dist - self.bound, self.bound - dist) / self.bound
        return float(max(gap[self.active].max(initial=0.0), 0.0))
