"""The one-standard-error rule of :class:`~tripletml.auto.AutoSimilarity`'s
final comparison, shared by the label race (:mod:`tripletml.auto.race`) and
the race on triplets (:mod:`tripletml.auto.comparisons`).

The rule (Breiman, Friedman, Olshen and Stone, *Classification and
Regression Trees*, 1984, Sec. 3.4.3; Hastie, Tibshirani and Friedman, *The
Elements of Statistical Learning*, Sec. 7.10) keeps the simplest candidate
whose validation score is within one standard error of the best.  Here the
simplest is a candidate that learns nothing, and the standard error is that
of the *paired* difference between the best and that baseline, each
validation term (an item's AP or k-NN vote, an answer's correctness) scored
by both; terms that share a cluster (an item held out by several splits,
the answers about one query item) are not independent, so the variance is
the cluster-robust one (Liang and Zeger 1986).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["clustered_se", "within_one_se"]


def clustered_se(d: np.ndarray, cluster: np.ndarray) -> float:
    """Standard error of the mean of ``d`` with the terms of one
    ``cluster`` id correlated: ``sqrt(G/(G-1) sum_g (sum of g's
    residuals)^2) / m`` over the ``G`` clusters of the ``m`` terms (with one
    term per cluster, ``std(d, ddof=1) / sqrt(m)``).  Infinite for fewer
    than two clusters: nothing measures the noise."""
    d = np.asarray(d, dtype=float)
    if d.size == 0:
        return math.inf
    _, g = np.unique(np.asarray(cluster), return_inverse=True)
    G = int(g.max()) + 1
    if G < 2:
        return math.inf
    per = np.bincount(g, weights=d - d.mean(), minlength=G)
    return float(math.sqrt(G / (G - 1) * np.sum(per ** 2)) / d.size)


def within_one_se(d: np.ndarray, cluster: np.ndarray) -> tuple[bool, float, float]:
    """Whether the best's lead ``mean(d)`` over the baseline (``d``: the
    paired differences, best minus baseline; non-finite terms left out) is
    at most one :func:`clustered_se` (equal to 12 decimals counts as
    within).  Returns ``(within, lead, se)``."""
    d = np.asarray(d, dtype=float)
    keep = np.isfinite(d)
    d, cluster = d[keep], np.asarray(cluster)[keep]
    lead = float(d.mean()) if d.size else 0.0
    se = clustered_se(d, cluster)
    return not round(lead - se, 12) > 0, lead, se
