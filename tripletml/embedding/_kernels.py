"""Numba kernels of the ordinal embeddings: one pass over the triplets that
sums the objective and accumulates the per-pair weights ``W[a * n + b]`` (the
derivative of the objective with respect to the squared distance of the pair
``(a, b)``) -- the fused form of the NumPy code in ``soe.py`` / ``tste.py``,
which the tests check it against."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["soe_pairs", "tste_pairs"]


@njit(cache=True, nogil=True)
def soe_pairs(D2, hc, hf, margin, W):  # pragma: no cover - compiled
    """SOE stress sum max(0, d_hc + margin - d_hf)^2 and, into W (zeroed),
    its derivative with respect to each pair's squared distance."""
    loss = 0.0
    for t in range(hc.shape[0]):
        uc = D2[hc[t]]
        uf = D2[hf[t]]
        dc = math.sqrt(uc)
        df = math.sqrt(uf)
        v = dc + margin - df
        if v > 0.0:
            loss += v * v
            # d(v^2)/du = 2 v dd/du = v / d   (zero subgradient at d = 0)
            if dc > 0.0:
                W[hc[t]] += v / dc
            if df > 0.0:
                W[hf[t]] -= v / df
    return loss


@njit(cache=True, nogil=True)
def tste_pairs(D2, hc, hf, alpha, W):  # pragma: no cover - compiled
    """t-STE negative log-likelihood and, into W (zeroed), its derivative with
    respect to each pair's squared distance."""
    loss = 0.0
    half = 0.5 * (alpha + 1.0)
    for t in range(hc.shape[0]):
        uc = D2[hc[t]]
        uf = D2[hf[t]]
        z = half * (math.log1p(uc / alpha) - math.log1p(uf / alpha))
        if z > 0.0:
            e = math.exp(-z)
            loss += z + math.log1p(e)
            q = 1.0 / (1.0 + e)
        else:
            e = math.exp(z)
            loss += math.log1p(e)
            q = e / (1.0 + e)
        W[hc[t]] += q * half / (alpha + uc)
        W[hf[t]] -= q * half / (alpha + uf)
    return loss
