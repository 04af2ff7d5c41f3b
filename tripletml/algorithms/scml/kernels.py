"""SCML (Shi, Bellet & Sha, "Sparse compositional metric learning", AAAI
2014): the pure math.

``M = sum_b w_b u_b u_b^T`` over a fixed basis of unit vectors ``u_b`` (the
rows of ``U``, K x d), ``w >= 0``.  The squared distance is ``d_w(x, x') =
sum_b w_b (u_b . (x - x'))^2``, linear in ``w``, so a triplet ``(q, p+, p-)``
has the hinge ``[1 + w . delta]_+`` with ``delta_b = (u_b . (q - p+))^2 -
(u_b . (q - p-))^2``.  The global problem (the paper's eq. 4)

    min_{w >= 0}  F(w) = (1/m) sum_t [1 + w . delta_t]_+ + alpha ||w||_1

is solved as the paper does, by stochastic regularized dual averaging with
AdaGrad's per-coordinate steps (Duchi, Hazan & Singer 2011): at step t, with
``gbar`` the average of the mini-batch subgradients so far and ``s`` the root
of the sum of their squares, ``w`` is the closed-form minimizer of

    <gbar, w> + alpha ||w||_1 + (1 / (2 eta0 t)) sum_b (delta0 + s_b) w_b^2,  w >= 0,

namely ``w_b = eta0 t max(0, -(gbar_b + alpha)) / (delta0 + s_b)``
(:func:`rda_step`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from numba import njit

from tripletml.engine.history import History
from tripletml.engine.driver import deadline_passed
from tripletml.engine.threads import limit_threads
from tripletml.linalg.sparse_rows import used_rows
__all__ = ["rda_step", "scml_objective", "triplet_deltas", "TripletDeltas", "lda_basis", "triplet_diff_basis",
           "scml_rda", "SCMLResult"]

#: AdaGrad's offset in the step's denominator (Duchi et al.'s delta)
DELTA0 = 1e-3


@dataclass
class SCMLResult:
    w: np.ndarray
    n_iter: int
    converged: bool
    criterion: float
    history: dict = field(default_factory=dict)


def rda_step(gbar: np.ndarray, s: np.ndarray, t: int, alpha: float, eta0: float) -> np.ndarray:
    """The minimizer over ``w >= 0`` of ``<gbar, w> + alpha sum w + sum (DELTA0
    + s) w^2 / (2 eta0 t)`` (separable: one clipped 1-D quadratic per
    coordinate)."""
    return eta0 * t * np.maximum(-(gbar + alpha), 0.0) / (DELTA0 + s)


def _distinct_pairs(triplets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs among the triplets' (q, p+) and (q, p-), sorted,
    and the index of each of the 2m pairs among them (``np.unique(...,
    axis=0)``, on one int64 key per pair when the indices allow it: the
    same order, several times faster)."""
    pairs = np.concatenate([triplets[:, [0, 1]], triplets[:, [0, 2]]]).astype(np.int64)
    n = int(pairs.max(initial=0)) + 1
    if n > 3_000_000_000:
        uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
        return uniq, inv.ravel()
    keys, inv = np.unique(pairs[:, 0] * n + pairs[:, 1], return_inverse=True)
    return np.stack([keys // n, keys % n], axis=1), inv.ravel()


@njit(cache=True, nogil=True)
def _weighted_sqdist(XU, a, b, w, nz):  # pragma: no cover - compiled
    """``out_i = sum_{k in nz} w_k (XU[a_i, k] - XU[b_i, k])^2``."""
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        s = 0.0
        for k in nz:
            d = XU[a[i], k] - XU[b[i], k]
            s += w[k] * d * d
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def _rda_block(XU, triplets, batches, first, last, w, gsum, s2, alpha, eta0):  # pragma: no cover
    """Steps ``first..last`` (1-based) of :func:`scml_rda` on the rows' basis
    coordinates ``XU``, fused: each mini-batch row ``delta_t`` is formed once,
    its hinge tested (``1 + w . delta_t > 0``, over the non-zero weights only:
    the zero terms add nothing) and, when active, added to the subgradient;
    then ``gsum``, ``s2`` and ``w`` (:func:`rda_step`) are updated in place.
    The same arithmetic as the NumPy steps of :class:`_Dense` without their
    temporaries (tests/test_scml.py compares the two)."""
    K = XU.shape[1]
    B = batches.shape[1]
    g = np.empty(K)
    nz = np.empty(K, dtype=np.int64)
    n_nz = 0
    for k in range(K):
        if w[k] != 0.0:
            nz[n_nz] = k
            n_nz += 1
    for it in range(first, last + 1):
        g[:] = 0.0
        for j in range(B):
            t = batches[it - 1, j]
            q, p, n = triplets[t, 0], triplets[t, 1], triplets[t, 2]
            s = 0.0                 # w . delta_t over the non-zero weights (l1 keeps few)
            for i in range(n_nz):
                k = nz[i]
                a = XU[q, k] - XU[p, k]
                b = XU[q, k] - XU[n, k]
                s += (a * a - b * b) * w[k]
            if 1.0 + s > 0.0:       # an active hinge: its whole row joins the subgradient
                for k in range(K):
                    a = XU[q, k] - XU[p, k]
                    b = XU[q, k] - XU[n, k]
                    g[k] += a * a - b * b
        n_nz = 0
        for k in range(K):
            gk = g[k] / B
            gsum[k] += gk
            s2[k] += gk * gk
            w[k] = eta0 * it * max(-(gsum[k] / it + alpha), 0.0) / (DELTA0 + math.sqrt(s2[k]))
            if w[k] != 0.0:
                nz[n_nz] = k
                n_nz += 1


class TripletDeltas:
    """``delta`` (m x K, see :func:`triplet_deltas`) without forming it:
    the rows' coordinates on the basis ``XU`` (n x K) and the triplets.

    A mini-batch's rows are formed from ``XU`` as needed; ``delta @ w`` is
    the weighted squared distance of each distinct (q, p) pair (kNN triplets
    repeat them: each query's few genuine and impostor neighbours), over the
    non-zero weights only (the l1 term keeps ``w`` sparse), differenced per
    triplet.  Memory: ``XU`` and the pair indices, never an m x K or
    pairs x K array (on letter's kNN triplets ``delta`` is 1 GB)."""

    def __init__(self, XU: np.ndarray, triplets: np.ndarray):
        self.XU = np.ascontiguousarray(XU, dtype=np.float64)
        self.triplets = triplets
        self.shape = (triplets.shape[0], XU.shape[1])
        self._pairs = None

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """``delta[idx]``."""
        t, XU = self.triplets[idx], self.XU
        q = XU[t[:, 0]]
        return (q - XU[t[:, 1]]) ** 2 - (q - XU[t[:, 2]]) ** 2

    def dot(self, w: np.ndarray) -> np.ndarray:
        """``delta @ w``."""
        if self._pairs is None:
            self._pairs = _distinct_pairs(self.triplets)
        uniq, inv = self._pairs
        m = self.shape[0]
        nz = np.flatnonzero(w).astype(np.int64)
        v = _weighted_sqdist(self.XU, np.ascontiguousarray(uniq[:, 0]),
                             np.ascontiguousarray(uniq[:, 1]), np.asarray(w, np.float64), nz)
        return v[inv[:m]] - v[inv[m:]]

    def all_finite(self) -> bool:
        """Whether every entry of ``delta`` is finite: ``XU`` finite and twice
        its largest magnitude squared below overflow (a bound on every
        squared difference)."""
        if not np.isfinite(self.XU).all():
            return False
        top = 2.0 * float(np.abs(self.XU).max(initial=0.0))
        with np.errstate(over="ignore"):
            return bool(np.isfinite(top * top * 2.0))

    def dense(self) -> np.ndarray:
        """``delta`` itself (m x K)."""
        return self.rows(np.arange(self.shape[0]))


class _Dense(TripletDeltas):
    """A formed ``delta`` behind :class:`TripletDeltas`' methods."""

    def __init__(self, delta: np.ndarray):
        self.delta, self.shape = delta, delta.shape

    def rows(self, idx: np.ndarray) -> np.ndarray:
        return self.delta[idx]

    def dot(self, w: np.ndarray) -> np.ndarray:
        return self.delta @ w


def triplet_deltas(XU: np.ndarray, triplets: np.ndarray) -> np.ndarray:
    """``delta`` (m x K): ``(XU[q] - XU[p+])^2 - (XU[q] - XU[p-])^2`` with
    ``XU = X U^T`` the rows' coordinates on the basis."""
    return TripletDeltas(XU, triplets).dense()


def scml_objective(delta, w: np.ndarray, alpha: float) -> float:
    """``F(w) = mean_t [1 + w . delta_t]_+ + alpha ||w||_1`` (``delta``: an
    m x K array or a :class:`TripletDeltas`)."""
    dw = delta.dot(w) if isinstance(delta, TripletDeltas) else delta @ w
    return float(np.maximum(1.0 + dw, 0.0).mean() + alpha * np.abs(w).sum())


def _unit_rows(B: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(B, axis=1)
    keep = n > 1e-12 * max(float(n.max(initial=0.0)), 1e-300)
    return B[keep] / n[keep, None]


#: ridge of the local within-class scatter, times its mean eigenvalue
LDA_SHRINKAGE = 1e-2


def _lda_directions(X: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` leading directions of regularized LDA on the rows: the
    generalized eigenvectors of the between-class scatter and the
    within-class scatter plus ``LDA_SHRINKAGE`` times its mean eigenvalue
    (a smooth, scale-free ridge: local neighborhoods have fewer rows than
    features, and a rank cut would make the basis jump with rounding), as
    unit rows.

    With fewer rows than features both scatters live in the span ``Q`` of
    the centered rows, and so does every eigenvector of a positive
    eigenvalue: ``(S_b, S_w + a I)`` restricted to ``Q`` (``r x r``, the
    ridge ``a`` still that of the ``d`` dimensions) has the same ones, ``V =
    Q V_r``, in ``O(s d r)`` instead of the ``O(d^3)`` of a ``d x d``
    generalized eigenproblem per neighbourhood (SCML with labels on 120
    rows of 1,500 features spent minutes there).  Directions of a zero
    eigenvalue (fewer classes in the neighbourhood than ``k + 1``) are
    arbitrary either way; here they lie in the span."""
    d = X.shape[1]
    classes = np.unique(codes)
    if classes.size < 2:
        return np.zeros((0, d))
    Xc = X - X.mean(axis=0)
    Q = None
    if X.shape[0] < d:
        from tripletml.linalg.span import span_basis
        Q = span_basis(Xc)
        if not k <= Q.shape[1] < d:
            Q = None
    Y = Xc if Q is None else Xc @ Q
    lam, V = _lda_eigh(Y, codes, classes, d)
    V = V[:, np.argsort(lam)[::-1][:k]]
    return _unit_rows((V if Q is None else Q @ V).T)


def _lda_eigh(Y: np.ndarray, codes: np.ndarray, classes: np.ndarray, d: int):
    """Generalized eigenpairs of the between-class scatter and the ridged
    within-class scatter of the centered rows ``Y`` (coordinates in ``Y``'s
    own columns; the ridge that of ``d`` dimensions)."""
    r = Y.shape[1]
    Sw = np.zeros((r, r))
    Sb = np.zeros((r, r))
    for c in classes:
        Yc = Y[codes == c]
        mc = Yc.mean(axis=0)
        Z = Yc - mc
        Sw += Z.T @ Z
        Sb += Yc.shape[0] * np.outer(mc, mc)
    tr = float(np.trace(Sw))
    Sw += (LDA_SHRINKAGE * tr / d if tr > 0 else 1.0) * np.eye(r)
    return scipy.linalg.eigh(0.5 * (Sb + Sb.T), 0.5 * (Sw + Sw.T))


def lda_basis(X: np.ndarray, codes: np.ndarray, n_basis: int, rng) -> np.ndarray:
    """The paper's basis (Sec. 4.1): local discriminative directions.

    ``ceil(n_basis / (2 e))`` k-means centers (``e = min(c - 1, d)``; every
    distinct row when there are no more of them than that); around
    each, the ``k`` nearest rows of every class at two scales (k = 10 and
    20, or 20 and 50 when d > 50) and the ``e`` leading LDA directions of
    those rows; the first ``n_basis`` of them (unit rows)."""
    from sklearn.cluster import KMeans

    n, d = X.shape
    classes = np.unique(codes)
    e = min(classes.size - 1, d)
    distinct = np.unique(X, axis=0)
    n_clusters = min(distinct.shape[0], int(math.ceil(n_basis / (2 * e))))
    seed = int(rng.integers(2**31 - 1))
    if n_clusters == distinct.shape[0]:
        # a center per distinct row: k-means' optimum itself (it would warn
        # on duplicate rows that it found fewer clusters than asked)
        centers = distinct
    else:
        centers = KMeans(n_clusters=n_clusters, n_init=3,
                         random_state=seed).fit(X).cluster_centers_
    scales = (20, 50) if d > 50 else (10, 20)
    near = {}
    for c in classes:
        rows = np.flatnonzero(codes == c)
        kk = min(rows.size, scales[1])
        Xc = X[rows]
        D = ((Xc ** 2).sum(1)[None, :] - 2 * centers @ Xc.T) + (centers ** 2).sum(1)[:, None]
        # ties (integer features) broken by row, not by rounding: distances
        # rounded to 9 significant digits of the largest
        scale = max(float(np.abs(D).max()), 1e-300)
        Dr = np.round(D / scale, 9)
        order = np.lexsort((np.broadcast_to(np.arange(rows.size), D.shape), Dr), axis=1)
        near[c] = rows[order[:, :kk]]
    out, seen = [], {}
    for k in scales:
        for j in range(n_clusters):
            idx = np.sort(np.concatenate([near[c][j, :min(k, near[c].shape[1])]
                                          for c in classes]))
            key = idx.tobytes()        # the same rows (every class smaller than k): the same LDA
            if key not in seen:
                seen[key] = _lda_directions(X[idx], codes[idx], e)
            out.append(seen[key])
    B = np.concatenate(out)[:n_basis]
    return np.ascontiguousarray(B)


def _batch_counts(t: np.ndarray, k: int) -> np.ndarray:
    """The k x k matrix S with ``sum_t (z_q - z_n)(z_q - z_n)^T - (z_q -
    z_p)(z_q - z_p)^T = Z^T S Z`` for triplets ``t`` of local row ids:
    ``+1`` at (q, p), (p, q), (n, n) and ``-1`` at (q, n), (n, q), (p, p)."""
    q, p, n = t[:, 0], t[:, 1], t[:, 2]
    idx = np.concatenate([q * k + p, p * k + q, n * k + n, q * k + n, n * k + q, p * k + p])
    w = np.repeat([1.0, 1.0, 1.0, -1.0, -1.0, -1.0], t.shape[0])
    return np.bincount(idx, w, k * k).reshape(k, k)


def triplet_diff_basis(X: np.ndarray, triplets: np.ndarray, n_basis: int, rng,
                       span: bool = True, by_rows: bool | None = None) -> np.ndarray:
    """The basis of :func:`triplet_diff_basis_span`, lifted to the features
    (``n_basis x d``, unit rows)."""
    B, Q = triplet_diff_basis_span(X, triplets, n_basis, rng, span=span, by_rows=by_rows)
    return B if Q is None else np.ascontiguousarray(B @ Q.T)


def triplet_diff_basis_span(X: np.ndarray, triplets: np.ndarray, n_basis: int, rng,
                            span: bool = True, by_rows: bool | None = None
                            ) -> tuple[np.ndarray, np.ndarray | None]:
    """A basis from triplets (metric-learn's ``"triplet_diffs"`` idea): for
    random batches of ``d`` triplets, the eigenvectors with positive
    eigenvalue of ``sum (q - p-)(q - p-)^T - (q - p+)(q - p+)^T`` (directions
    along which the batch's negatives are farther than its positives),
    until ``n_basis`` are collected (at most ``20 n_basis / d + 20``
    batches); unit rows.

    With ``span`` and fewer distinct rows ``u`` than features, each batch's
    matrix (whose range is in the span ``Q`` of those rows) is decomposed
    on the span's coordinates, ``C = Q C_r Q^T``: ``O(b d u + u^3)`` per
    batch instead of ``O(b d^2 + d^3)``; the same directions (up to sign).
    With ``by_rows`` (None: when the ``u`` rows are no more than a batch's
    ``b`` triplets) each batch's matrix is ``Z^T S Z`` from its ``u x u``
    counts (:func:`_batch_counts`): ``O(u^2 w + b)`` for rows of width ``w``
    instead of gathering ``2 b`` differences, ``O(b w^2)``.

    Returns ``(B, Q)``: the basis on the span's coordinates and the span's
    orthonormal basis ``Q`` (``d x r``; the basis is ``B Q^T``), or ``(B,
    None)`` with B on the features.  A caller that only needs ``X B^T``
    computes ``(X Q) B_r^T`` (``O(n d r + n r K)`` instead of ``O(n d K)``
    for K directions)."""
    from tripletml.linalg.span import span_basis

    d = X.shape[1]
    m = triplets.shape[0]
    rows, local = used_rows(triplets, X.shape[0])
    Q = span_basis(X[rows]) if span and rows.size < d else None
    with limit_threads(float(rows.size) * d * (0 if Q is None else Q.shape[1])):
        Z = X[rows] if Q is None else X[rows] @ Q
    b = min(d, m)
    # few rows under a batch: C = Z^T S Z with S the batch's k x k counts
    by_rows = rows.size <= b if by_rows is None else bool(by_rows)
    out, total = [], 0
    w = float(Z.shape[1])
    # the thread rule (tripletml.engine.threads) on one batch's products and
    # eigendecomposition, not on the fit's d x d price
    work = (rows.size ** 2 * w if by_rows else 2.0 * b * w * w) + w ** 3
    with limit_threads(work):
        for _ in range(20 * n_basis // max(d, 1) + 20):
            t = local[rng.integers(0, m, size=b)]
            if by_rows:
                C = Z.T @ (_batch_counts(t, rows.size) @ Z)
            else:
                P = Z[t[:, 0]] - Z[t[:, 1]]
                N = Z[t[:, 0]] - Z[t[:, 2]]
                C = N.T @ N - P.T @ P
            lam, V = np.linalg.eigh(0.5 * (C + C.T))
            pos = lam > 1e-12 * max(float(np.abs(lam).max()), 1e-300)
            if pos.any():
                out.append(V[:, pos].T)
                total += int(pos.sum())
            if total >= n_basis:
                break
    if not out:
        return np.zeros((0, d)), None
    # unit rows on the span's coordinates (Q's columns are orthonormal: the
    # same norms, and the rows lifted by Q are unit rows too)
    return np.ascontiguousarray(_unit_rows(np.concatenate(out))[:n_basis]), Q


def scml_rda(delta, *, alpha: float, eta0: float, batch_size: int, max_iter: int,
             tol: float | None, check_every: int, rng, verbose: int = 0,
             who: str = "SCML") -> SCMLResult:
    """Mini-batch RDA with AdaGrad on ``F`` (module docstring), from ``w = 0``.

    Every ``check_every`` steps (and at the last) the full objective
    ``F(w)`` is evaluated and the best ``w`` so far kept (the result; the
    start ``w = 0`` is not a candidate).  Stops when the best objective
    improved by at most ``tol`` (relative) over the last ``check_every``
    steps (from the second check on), or after ``max_iter`` steps.
    ``delta``: an m x K array or a :class:`TripletDeltas`."""
    if not isinstance(delta, TripletDeltas):
        delta = _Dense(delta)
    m, K = delta.shape
    w = np.zeros(K)
    gsum = np.zeros(K)
    s2 = np.zeros(K)
    best_w, best = w.copy(), math.inf          # w = 0 is the start, not a candidate
    hist = History(keys=("objective", "convergence"))
    hist.record(0, objective=scml_objective(delta, w, alpha), convergence=math.inf)
    last_best, crit, converged, it = best, math.inf, False, 0
    batches = rng.integers(0, m, size=(max_iter, batch_size))
    fused = type(delta) is TripletDeltas      # the compiled steps on the basis coordinates
    if fused:
        trip = np.ascontiguousarray(delta.triplets, dtype=np.int64)
        batches = np.ascontiguousarray(batches, dtype=np.int64)
    while it < max_iter:
        last = min(max_iter, (it // check_every + 1) * check_every)   # the next check
        if fused:
            _rda_block(delta.XU, trip, batches, it + 1, last, w, gsum, s2, float(alpha),
                       float(eta0))
        else:
            for t in range(it + 1, last + 1):
                D = delta.rows(batches[t - 1])
                active = (1.0 + D @ w) > 0
                g = D[active].sum(axis=0) / batch_size
                gsum += g
                s2 += g * g
                w = rda_step(gsum / t, np.sqrt(s2), t, alpha, eta0)
        it = last
        obj = scml_objective(delta, w, alpha)
        if not math.isfinite(obj):
            raise FloatingPointError(f"{who}: training diverged (non-finite objective); "
                                     "lower eta0 or scale the features down.")
        if obj < best:
            best, best_w = obj, w.copy()
        crit = (last_best - best) / max(abs(last_best), 1e-12) \
            if math.isfinite(last_best) else math.inf
        last_best = best
        hist.record(it, objective=obj, convergence=crit)
        if verbose:
            print(f"{who}: step {it} objective {obj:.6g} best {best:.6g}")
        if tol is not None and crit <= tol:
            converged = True
            break
        if deadline_passed():            # AutoSimilarity's time budget (engine.training_deadline)
            break
    return SCMLResult(best_w, it, converged, crit, hist.data)
