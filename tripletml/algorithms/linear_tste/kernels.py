"""LinearTSTE's objective in terms of the linear map ``L`` (r x d).

The points are ``Y = X L^T``; t-STE's likelihood (van der Maaten &
Weinberger, MLSP 2012, Sec. 3.2) of a triplet ``(q, p, n)`` is

    p_t = K(|y_q - y_p|^2) / (K(|y_q - y_p|^2) + K(|y_q - y_n|^2)),
    K(u) = (1 + u / alpha)^(-(alpha + 1) / 2),

and the objective is the negative log-likelihood plus a Gaussian prior
that keeps ``L`` near the start ``L0``,

    F(L) = -sum_t log p_t + lam * s * |L - L0|_F^2,

``s`` the mean squared distance between the training rows, so that ``lam``
has no unit (``X -> c X`` with ``L -> L / c`` leaves ``F`` unchanged).  Its
gradient is ``G^T X + 2 lam s (L - L0)`` with ``G`` the gradient with
respect to ``Y`` (:func:`tripletml.embedding.tste.tste_nll`, shared with
:class:`~tripletml.embedding.TSTE`).
"""
from __future__ import annotations

import numpy as np

from tripletml.embedding._base import _Pairs
from tripletml.embedding.tste import tste_nll

__all__ = ["LinearTSTEObjective", "mean_squared_distance"]


def mean_squared_distance(X: np.ndarray) -> float:
    """``mean_{i, j} |x_i - x_j|^2 = 2 mean_i |x_i - mean(x)|^2`` of dense
    rows (self pairs included)."""
    Xc = X - X.mean(axis=0)
    return 2.0 * float(np.einsum("ij,ij->", Xc, Xc)) / max(X.shape[0], 1)


class LinearTSTEObjective:
    """``F(L)`` and its gradient (module docstring)."""

    def __init__(self, X: np.ndarray, triplets: np.ndarray, alpha: float, lam: float,
                 L0: np.ndarray, scale: float):
        self.X = X
        t = np.asarray(triplets, dtype=np.int64)
        self.pairs = _Pairs(t, X.shape[0])
        self.alpha = float(alpha)
        self.ridge = float(lam) * float(scale)
        self.L0 = L0

    def __call__(self, L: np.ndarray):
        Y = self.X @ L.T
        if not np.isfinite(Y).all():                 # distances overflow: diverged
            return np.inf, np.zeros_like(L), {}
        loss, gY = tste_nll(Y, self.pairs, self.alpha)
        D = L - self.L0
        value = loss + self.ridge * float(np.einsum("ij,ij->", D, D))
        grad = gY.T @ self.X + 2.0 * self.ridge * D
        return value, grad, {}
