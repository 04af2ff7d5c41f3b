"""Numba kernels of the ordinal embeddings: one pass over the triplets that
sums the objective and accumulates the per-pair weights ``W[a * n + b]`` (the
derivative of the objective with respect to the squared distance of the pair
``(a, b)``) -- the fused form of the NumPy code in ``soe.py`` / ``tste.py``,
which the tests check it against."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["soe_pairs", "ste_pairs", "tste_pairs", "pair_grad"]


@njit(cache=True, nogil=True)
def _logistic(z):  # pragma: no cover - compiled
    """``(log(1 + e^z), sigmoid(z))`` without overflow: the negative
    log-likelihood of a triplet whose log-odds against it are z, and its
    derivative."""
    if z > 0.0:
        e = math.exp(-z)
        return z + math.log1p(e), 1.0 / (1.0 + e)
    e = math.exp(z)
    return math.log1p(e), e / (1.0 + e)


@njit(cache=True, nogil=True)
def soe_pairs(D2, hc, hf, margin, W):  # pragma: no cover - compiled
    """SOE stress sum max(0, d_hc + margin - d_hf)^2 and, into W (zeroed),
    its derivative with respect to each pair's squared distance."""
    dist = np.sqrt(D2)            # once per pair of items
    inv = np.zeros_like(D2)
    for p in range(D2.shape[0]):
        if dist[p] > 0.0:
            inv[p] = 1.0 / dist[p]
    loss = 0.0
    for t in range(hc.shape[0]):
        a = hc[t]
        b = hf[t]
        v = dist[a] + margin - dist[b]
        if v > 0.0:
            loss += v * v
            # d(v^2)/du = 2 v dd/du = v / d   (zero subgradient at d = 0)
            W[a] += v * inv[a]
            W[b] -= v * inv[b]
    return loss


@njit(cache=True, nogil=True)
def tste_pairs(D2, hc, hf, alpha, W):  # pragma: no cover - compiled
    """t-STE negative log-likelihood and, into W (zeroed), its derivative with
    respect to each pair's squared distance."""
    half = 0.5 * (alpha + 1.0)
    logk = np.empty_like(D2)      # -log K(u) = half log(1 + u / alpha), once per pair
    dlog = np.empty_like(D2)      # d(-log K)/du = half / (alpha + u)
    for p in range(D2.shape[0]):
        logk[p] = half * math.log1p(D2[p] / alpha)
        dlog[p] = half / (alpha + D2[p])
    loss = 0.0
    for t in range(hc.shape[0]):
        a = hc[t]
        b = hf[t]
        l, q = _logistic(logk[a] - logk[b])
        loss += l
        W[a] += q * dlog[a]
        W[b] -= q * dlog[b]
    return loss


@njit(cache=True, nogil=True)
def pair_grad(W, X):  # pragma: no cover - compiled
    """``2 (diag(S 1) - S) X`` with ``S = W + W^T`` (W flat, n x n): the
    gradient from the pair weights, without BLAS (whose threads cost more
    than they save on the small matrices of a few hundred items)."""
    n, d = X.shape
    G = np.zeros((n, d))
    for a in range(n):
        for b in range(a + 1, n):
            s = W[a * n + b] + W[b * n + a]
            if s != 0.0:
                for k in range(d):
                    g = 2.0 * s * (X[a, k] - X[b, k])
                    G[a, k] += g
                    G[b, k] -= g
    return G


@njit(cache=True, nogil=True)
def ste_pairs(D2, hc, hf, unused, W):  # pragma: no cover - compiled
    """STE negative log-likelihood ``sum log(1 + exp(u_close - u_far))`` (the
    logistic loss of the difference of squared distances) and, into W
    (zeroed), its derivative with respect to each pair's squared distance."""
    loss = 0.0
    for t in range(hc.shape[0]):
        a = hc[t]
        b = hf[t]
        l, q = _logistic(D2[a] - D2[b])
        loss += l
        W[a] += q
        W[b] -= q
    return loss
