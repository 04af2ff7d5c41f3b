"""MMC (Xing, Ng, Jordan & Russell, NIPS 2002): the pure math.

Full matrix (the paper's eq. 3-5):

    max_A  g(A) = sum_{(i,j) in D} ||x_i - x_j||_A
    s.t.   f(A) = sum_{(i,j) in S} ||x_i - x_j||_A^2 <= 1,   A PSD.

``f`` is linear, ``f(A) = <A, C_S>`` with ``C_S`` the similar pairs'
scatter.  The paper alternates projections onto the half-space ``f <= 1``
and onto the PSD cone after every gradient step (Sec. 2.1), which only
approximates the projection onto their intersection.  Here the variable is
changed to ``B = C_S^{1/2} A C_S^{1/2}`` (on the span of the pairs'
differences, ``C_S`` ridged where singular): ``f(A) = tr B`` and ``A`` is PSD
iff ``B`` is, so the feasible set is the spectraplex ``{B PSD, tr B <= 1}``,
onto which the Frobenius projection is exact: an eigendecomposition and the
projection of the eigenvalues onto ``{lambda >= 0, sum lambda <= 1}``
(:func:`project_spectraplex`).  ``g`` is concave, so projected gradient
ascent in ``B`` with a backtracking step (:func:`mmc_full`) converges to the
paper's optimum, in tens of iterations on the UCI sets.

Diagonal (the paper's eq. 6): ``A = diag(a)``, minimize

    h(a) = sum_S ||x_i - x_j||_a^2 - log(sum_D ||x_i - x_j||_a),  a >= 0,

by Newton-Raphson (:func:`mmc_diagonal`; a projected Newton step on the
free coordinates with a backtracking line search).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tripletml.engine.history import History
__all__ = ["project_simplex_capped", "project_spectraplex", "full_objective",
           "full_gradient", "mmc_full", "diagonal_objective", "mmc_diagonal", "MMCResult"]

#: ridge on the similar pairs' scatter where it is singular, times its mean eigenvalue
SIMILAR_RIDGE = 1e-8


@dataclass
class MMCResult:
    """The learned matrix and the run's record."""
    A: np.ndarray
    factor: np.ndarray                  # L with L^T L = A (rows in decreasing weight)
    n_iter: int
    converged: bool
    criterion: float
    history: dict = field(default_factory=dict)


def project_simplex_capped(lam: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``lam`` onto ``{v >= 0, sum v <= 1}``."""
    v = np.maximum(lam, 0.0)
    if v.sum() <= 1.0:
        return v
    u = np.sort(lam)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, u.size + 1)
    rho = np.flatnonzero(u - css / idx > 0)[-1]
    theta = css[rho] / (rho + 1.0)
    return np.maximum(lam - theta, 0.0)


def project_spectraplex(B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frobenius projection of the symmetric ``B`` onto ``{B PSD, tr B <= 1}``:
    ``(P, lam, V)`` with ``P = V diag(lam) V^T``."""
    w, V = np.linalg.eigh(0.5 * (B + B.T))
    lam = project_simplex_capped(w)
    return (V * lam) @ V.T, lam, V


def full_objective(Z: np.ndarray, B: np.ndarray) -> float:
    """``sum_rows sqrt(z^T B z)`` (the dissimilar pairs' distances)."""
    q = np.einsum("ij,ij->i", Z @ B, Z)
    return float(np.sqrt(np.maximum(q, 0.0)).sum())


def full_gradient(Z: np.ndarray, B: np.ndarray) -> tuple[float, np.ndarray]:
    """``(g, grad)``: ``g = sum sqrt(z^T B z)``, ``grad = sum z z^T / (2 sqrt(z^T B z))``
    (a pair at distance 0 is given the gradient of distance ``1e-150``)."""
    q = np.sqrt(np.maximum(np.einsum("ij,ij->i", Z @ B, Z), 0.0))
    w = 0.5 / np.maximum(q, 1e-150)
    G = (Z * w[:, None]).T @ Z
    return float(q.sum()), 0.5 * (G + G.T)


def _whitener(Ds: np.ndarray, Dd: np.ndarray) -> np.ndarray:
    """``W`` (d x s) with ``W^T C_S W = I`` on the span of every pair's
    difference (``C_S`` ridged by ``SIMILAR_RIDGE`` times its mean
    eigenvalue there when singular): ``A = W B W^T``."""
    d = Ds.shape[1]
    Cs = Ds.T @ Ds
    Call = Cs + Dd.T @ Dd
    ev, U = np.linalg.eigh(0.5 * (Call + Call.T))
    top = float(ev.max()) if ev.size else 0.0
    keep = ev > max(d, 1) * np.finfo(float).eps * top if top > 0 else np.zeros(d, bool)
    U = U[:, keep]
    C = U.T @ Cs @ U
    C = 0.5 * (C + C.T)
    s = U.shape[1]
    cev, Q = np.linalg.eigh(C)
    mean = max(float(cev.sum()) / max(s, 1), 0.0)
    floor = SIMILAR_RIDGE * mean
    if mean == 0.0:
        floor = 1.0
    cev = np.maximum(cev, 0.0)
    if cev.min(initial=np.inf) <= floor:
        cev = cev + floor
    return (U @ Q) / np.sqrt(cev)


def mmc_full(Ds: np.ndarray, Dd: np.ndarray, *, max_iter: int, tol: float | None,
             verbose: int = 0, who: str = "MMC") -> MMCResult:
    """The full-matrix MMC on the similar pairs' differences ``Ds`` (m_S x
    d) and the dissimilar pairs' ``Dd`` (m_D x d).

    Projected gradient ascent on ``B`` (module docstring) from ``B = I / s``
    (``A`` the inverse similar-pair scatter, scaled to ``f(A) = 1``), the step
    ``t`` doubled after each accepted step and halved until the ascent
    condition ``g(B+) >= g(B) + <grad, B+ - B> - ||B+ - B||^2 / (2 t)`` holds.
    Stops when the relative increase of ``g`` over a step is at most ``tol``
    (criterion ``(g(B+) - g(B)) / g(B+)``) or after ``max_iter`` steps."""
    W = _whitener(Ds, Dd)
    s = W.shape[1]
    Z = Dd @ W
    B = np.eye(s) / s
    g, G = full_gradient(Z, B)
    t = 1.0 / max(np.linalg.norm(G), 1e-300)
    hist = History(keys=("objective", "convergence"))
    hist.record(0, objective=g, convergence=math.inf)
    lam, V = np.full(s, 1.0 / s), np.eye(s)
    crit, converged, it = math.inf, False, 0
    for it in range(1, max_iter + 1):
        while True:
            Bn, lam_n, V_n = project_spectraplex(B + t * G)
            delta = Bn - B
            gn, Gn = full_gradient(Z, Bn)
            if gn >= g + float(np.vdot(G, delta)) - float(np.vdot(delta, delta)) / (2 * t) \
                    - 1e-15 * abs(g) or t < 1e-300:
                break
            t *= 0.5
        if not math.isfinite(gn):
            raise FloatingPointError(f"{who}: training diverged (the objective is not finite); "
                                     "scale the features down.")
        crit = (gn - g) / max(abs(gn), 1e-300)
        B, g, G, lam, V = Bn, gn, Gn, lam_n, V_n
        t *= 2.0
        hist.record(it, objective=g, convergence=crit)
        if verbose:
            print(f"{who}: step {it} objective {g:.6g} change {crit:.3g}")
        if tol is not None and crit <= tol:
            converged = True
            break
    order = np.argsort(lam)[::-1]
    order = order[lam[order] > 0]
    L = (np.sqrt(lam[order])[:, None] * (W @ V[:, order]).T)
    A = L.T @ L
    return MMCResult(0.5 * (A + A.T), np.ascontiguousarray(L), it, converged, crit, hist.data)


def diagonal_objective(us: np.ndarray, Ud: np.ndarray, a: np.ndarray) -> float:
    """``h(a) = a . us - log(sum_D sqrt(a . u))`` (``us`` the similar pairs'
    summed squared differences, ``Ud`` the dissimilar pairs' squared
    differences, one row per pair)."""
    return float(a @ us - np.log(np.sqrt(np.maximum(Ud @ a, 0.0)).sum()))


def mmc_diagonal(Ds: np.ndarray, Dd: np.ndarray, *, max_iter: int, tol: float | None,
                 verbose: int = 0, who: str = "MMC") -> MMCResult:
    """The diagonal MMC (eq. 6) by projected Newton-Raphson on ``a >= 0``.

    Gradient ``us - grad_g / g`` and Hessian ``-hess_g / g + grad_g grad_g^T /
    g^2`` with ``g = sum sqrt(a . u)``, ``grad_g = sum u / (2 q)``, ``hess_g =
    -sum u u^T / (4 q^3)``.  Coordinates near 0 whose gradient is positive are
    sent to 0 (Bertsekas' projected Newton with an epsilon-active set); the
    Newton direction on the others is searched by backtracking with ``a`` projected on ``a >= 0``.
    From ``a = 1 / (2 sum us)`` (where ``h``'s scale is optimal).  Stops
    when the Newton decrement ``-grad . p`` is at most ``tol`` (scale free:
    scaling X shifts ``h`` by a constant), or when no step along the Newton
    direction decreases ``h``."""
    us = np.einsum("ij,ij->j", Ds, Ds)
    Ud = Dd * Dd
    d = us.size
    if not us.sum() > 0:
        raise ValueError(f"{who}: every similar pair joins identical rows; the constraint "
                         "bounds nothing.")
    a = np.full(d, 0.5 / us.sum())
    # a column with no similar variance but dissimilar variance: unbounded; ridge it
    us = us + SIMILAR_RIDGE * us.sum() / d

    def parts(a):
        q = np.sqrt(np.maximum(Ud @ a, 0.0))
        g = q.sum()
        qq = np.maximum(q, 1e-6 * g / q.size)     # pairs at distance ~0: a bounded curvature
        gg = (Ud / (2 * qq)[:, None]).sum(axis=0)
        Hg = -(Ud / (4 * qq ** 3)[:, None]).T @ Ud
        h = float(a @ us - np.log(g))
        grad = us - gg / g
        H = -Hg / g + np.outer(gg, gg) / g ** 2
        return h, grad, H

    h, grad, H = parts(a)
    hist = History(keys=("objective", "convergence"))
    hist.record(0, objective=h, convergence=math.inf)
    crit, converged, it = math.inf, False, 0
    for it in range(1, max_iter + 1):
        # Bertsekas' epsilon-active set: coordinates near 0 that the gradient
        # pushes down go to 0; Newton on the others
        eps = min(1e-3 * float(a.max()), float(np.linalg.norm(a - np.maximum(a - grad, 0.0))))
        free = ~((a <= eps) & (grad > 0))
        p = np.where(free, 0.0, -a)
        nf = int(free.sum())
        Hf = H[np.ix_(free, free)] + 1e-12 * max(float(np.trace(H)), 1e-300) / d * np.eye(nf)
        try:
            p[free] = -np.linalg.solve(Hf, grad[free])
        except np.linalg.LinAlgError:
            p[free] = -grad[free]
        if not np.isfinite(p).all():
            p = np.where(free, -grad, -a)
        # the Newton decrement (scale free: scaling X shifts h by a constant)
        crit = max(-float(grad @ p), 0.0)
        if tol is not None and crit <= tol:
            converged = True
            it -= 1
            break
        step = 1.0
        while True:
            an = np.maximum(a + step * p, 0.0)
            hn = diagonal_objective(us, Ud, an) if (Ud @ an > 0).any() else math.inf
            if hn <= h + 1e-4 * float(grad @ (an - a)) or step < 1e-12:
                break
            step *= 0.5
        if hn < h:
            a = an
            h, grad, H = parts(a)
        elif step < 1e-12:              # no decrease along the Newton direction: done
            converged = tol is not None
            break
        if not math.isfinite(h):
            raise FloatingPointError(f"{who}: training diverged (the objective is not finite); "
                                     "scale the features down.")
        hist.record(it, objective=h, convergence=crit)
        if verbose:
            print(f"{who}: Newton step {it} objective {h:.6g} decrement {crit:.3g}")
    order = np.argsort(a)[::-1]
    order = order[a[order] > 0]
    L = np.zeros((order.size, d))
    L[np.arange(order.size), order] = np.sqrt(a[order])
    return MMCResult(np.diag(a), L, it, converged, crit, hist.data)
