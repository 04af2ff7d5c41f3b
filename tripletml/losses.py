"""Loss functions shared by the learners.

Each loss returns its value and the data needed for a (sub)gradient step;
all are Numba functions so the solvers' per-sample loops can call them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["triplet_hinge", "triplet_hinge_array", "multilabel_hinge"]


@njit(cache=True, nogil=True)
def triplet_hinge(margin):
    """The triplet hinge ``[1 - (S(q, p+) - S(q, p-))]_+`` of one margin.

    Every triplet learner's loss (OASIS eq. 2, SDCA's primal, LORETA's
    ranking loss, the low-rank DML triplet loss) is this function of the
    margin ``S(q, p+) - S(q, p-)``; the (sub)gradient step is taken when the
    returned value is positive.  A Numba function so per-sample loops can
    call it; :func:`triplet_hinge_array` is its vectorized twin.
    """
    h = 1.0 - margin
    return h if h > 0.0 else 0.0


def triplet_hinge_array(margins: np.ndarray) -> np.ndarray:
    """:func:`triplet_hinge` of every margin (a new float array)."""
    return np.maximum(1.0 - np.asarray(margins, dtype=float), 0.0)


@njit(cache=True, nogil=True)
def multilabel_hinge(scores, positives, is_positive, g_idx, g_val):
    """Multi-label hinge loss of the LORETA paper (section 5.2).

    With ``ybar = argmax_{s not in y} scores[s]`` (lowest index on ties),
    the loss is ``sum_{i in y} [scores[ybar] - scores[i] + 1]_+``.  Its
    negative subgradient with respect to the score vector is ``g``: ``+1``
    at each violating true label, ``-d`` at ``ybar`` (d = number of
    violators); for ``W`` with ``scores = W p`` the descent direction is
    ``g p^T`` (rank one).

    Parameters
    ----------
    scores : float array (L,)
    positives : int array of the true labels
    is_positive : bool array (L,), True at the true labels
    g_idx, g_val : work arrays of length >= len(positives) + 1
        Receive the non-zeros of g.

    Returns
    -------
    loss : float
    nnz : int
        Number of entries written to ``g_idx``/``g_val`` (0 when no loss or
        when the sample has no true or no false label).
    """
    L = scores.shape[0]
    ybar = -1
    best = -np.inf
    for s in range(L):
        if not is_positive[s] and scores[s] > best:
            best = scores[s]
            ybar = s
    if ybar < 0 or positives.shape[0] == 0:
        return 0.0, 0
    loss = 0.0
    d = 0
    for j in range(positives.shape[0]):
        i = positives[j]
        h = best - scores[i] + 1.0
        if h > 0.0:
            loss += h
            g_idx[d] = i
            g_val[d] = 1.0
            d += 1
    if d == 0:
        return 0.0, 0
    g_idx[d] = ybar
    g_val[d] = -float(d)
    return loss, d + 1
