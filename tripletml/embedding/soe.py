"""Soft ordinal embedding (SOE), Terada & von Luxburg, ICML 2014."""
from __future__ import annotations

import numbers

import numpy as np

from tripletml.core.params import Interval
from tripletml.embedding._base import OrdinalEmbeddingBase

__all__ = ["SOE"]


class SOE(OrdinalEmbeddingBase):
    r"""Soft ordinal embedding: an embedding of item ids from triplets alone.

    Minimizes the paper's stress (Terada & von Luxburg 2014, Eq. (1), with the
    quadruple ``(i, j, i, k)`` of a triplet)

    .. math::

        \mathrm{Stress}(X) = \sum_{(i, j, k)} \max\bigl(0,\;
            \lVert x_i - x_j\rVert + \delta - \lVert x_i - x_k\rVert\bigr)^2

    over the triplets ``(i, j, k) = (head, close, far)``, with the plain (not
    squared) Euclidean distances of the paper and the margin
    :math:`\delta` = ``margin`` (which fixes the scale of the embedding).  The
    full-batch objective and its gradient are minimized with L-BFGS (SciPy)
    from a standard normal start; a pair of items at distance 0 contributes
    the zero subgradient.

    Parameters
    ----------
    n_components : int, default=2
        Dimension of the embedding.
    margin : float, default=1.0
        :math:`\delta > 0`, the least difference of distances asked for.
    n_items : int, optional
        Number of items; default ``max id + 1``.  Items no triplet names are
        allowed up to ``10 x (items named) + 100,000`` items in all (above,
        a ValueError before anything is allocated).
    max_iter : int, default=1000
        Cap on L-BFGS iterations.
    n_init : int, default=4
        Number of random starts; the embedding of the lowest objective is kept
        (low dimensions have local minima: on held-out Zappos triplets, 2-D,
        4 starts gain about half a point of accuracy over one);
        ``n_iter_`` and ``stop_reason_`` are that start's.
    tol : float, default=1e-7
        L-BFGS stops when the relative decrease of the objective falls below
        ``tol`` (``ftol``; the projected-gradient threshold is ``tol * 1e-3``).
    random_state : int, Generator, RandomState or None
        Seeds the initial embedding.
    verbose : int, default=0
        Print progress every 50 iterations.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_items_, n_components)
        Row ``i`` is item ``i``.  An item in no triplet keeps its random start
        (a UserWarning says which).
    n_items_ : int
    loss_ : float
        Final stress.
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}

    Notes
    -----
    No ``transform``: there are no features; use ``embedding_``.  The
    embedding is determined up to rotations, reflections and translations.

    References
    ----------
    Y. Terada and U. von Luxburg, "Local ordinal embedding", ICML 2014,
    pp. 847-855, Eq. (1).
    """

    _parameter_constraints = {
        **OrdinalEmbeddingBase._common_constraints,
        "margin": [Interval(numbers.Real, 0, None, closed="neither")],
    }

    def __init__(self, n_components=2, *, margin=1.0, n_items=None, max_iter=1000, n_init=4,
                 tol=1e-7, random_state=None, verbose=0):
        self.n_components = n_components
        self.margin = margin
        self.n_items = n_items
        self.max_iter = max_iter
        self.n_init = n_init
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _loss_grad(self, X, pairs):
        if pairs.dense and self._fused:
            from tripletml.embedding._kernels import soe_pairs   # late: Numba's start-up
            return pairs.dense_fused(X, soe_pairs, self.margin)
        uc, uf, aux = pairs.sq_dists(X)
        dc, df = np.sqrt(uc), np.sqrt(uf)
        v = np.maximum(dc + self.margin - df, 0.0)
        loss = float(v @ v)
        # d/du of sqrt(u) = 1 / (2 sqrt(u)); a pair at distance 0: zero subgradient
        with np.errstate(divide="ignore", invalid="ignore"):
            wc = np.where(dc > 0, v / dc, 0.0)
            wf = np.where(df > 0, -v / df, 0.0)
        return loss, pairs.grad(X, wc, wf, aux)
