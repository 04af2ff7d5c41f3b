"""Stochastic triplet embedding (STE), van der Maaten & Weinberger, MLSP 2012."""
from __future__ import annotations

import numbers

import numpy as np

from tripletml.core.params import Interval
from tripletml.embedding._base import OrdinalEmbeddingBase

__all__ = ["STE"]


class STE(OrdinalEmbeddingBase):
    r"""Stochastic triplet embedding of item ids: a logistic loss on the
    difference of squared distances.

    Each triplet ``(i, j, l) = (head, close, far)`` is satisfied with the
    probability (van der Maaten & Weinberger 2012, Sec. 3.1, Gaussian kernel)

    .. math::

        p_{ijl} = \frac{\exp(-\lVert x_i - x_j\rVert^2)}
            {\exp(-\lVert x_i - x_j\rVert^2) + \exp(-\lVert x_i - x_l\rVert^2)}
          = \sigma\bigl(\lVert x_i - x_l\rVert^2 - \lVert x_i - x_j\rVert^2\bigr)

    and the embedding minimizes the negative log-likelihood plus an L2 penalty

    .. math::

        -\sum_{(i,j,l)} \log p_{ijl} + \lambda \lVert X\rVert_F^2 ,

    :math:`\lambda` = ``regularization`` (applied to the items in the
    triplets).  The loss of a triplet is the logistic loss of the margin
    :math:`\lVert x_i - x_l\rVert^2 - \lVert x_i - x_j\rVert^2`; a triplet
    answered against the embedding costs about its (squared-distance) margin,
    where SOE's squared hinge costs its square and t-STE's loss is bounded.
    Minimized with L-BFGS (SciPy) from a small random start.

    Parameters
    ----------
    n_components : int, default=2
    regularization : float, default=0.1
        :math:`\lambda \ge 0` (with 0 and separable triplets the objective has
        no minimizer: the points spread out without end).
    n_items : int, optional
        Number of items; default ``max id + 1``.  Items no triplet names are
        allowed up to ``10 x (items named) + 100,000`` items in all (above,
        a ValueError before anything is allocated).
    max_iter : int, default=1000
    n_init : int, default=4
        Number of random starts; the embedding of the lowest objective is kept.
    tol : float, default=1e-7
        Relative decrease of the objective at which L-BFGS stops.
    random_state : int, Generator, RandomState or None
    verbose : int, default=0

    Attributes
    ----------
    embedding_ : ndarray of shape (n_items_, n_components)
    n_items_ : int
    loss_ : float
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}

    Notes
    -----
    No ``transform``: there are no features; use ``embedding_``.

    References
    ----------
    L. van der Maaten and K. Weinberger, "Stochastic triplet embedding",
    IEEE MLSP 2012, Sec. 3.1.
    """

    _parameter_constraints = {
        **OrdinalEmbeddingBase._common_constraints,
        "regularization": [Interval(numbers.Real, 0, None, closed="left")],
    }
    _init_scale = 1e-2

    def __init__(self, n_components=2, *, regularization=0.1, n_items=None, max_iter=1000,
                 n_init=4, tol=1e-7, random_state=None, verbose=0):
        self.n_components = n_components
        self.regularization = regularization
        self.n_items = n_items
        self.max_iter = max_iter
        self.n_init = n_init
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _loss_grad(self, X, pairs):
        lam = self.regularization
        if pairs.dense and self._fused:
            from tripletml.embedding._kernels import ste_pairs   # late: Numba's start-up
            loss, g = pairs.dense_fused(X, ste_pairs, 0.0)
        else:
            uc, uf, aux = pairs.sq_dists(X)
            z = uc - uf
            loss = float(np.logaddexp(0.0, z).sum())       # -log p = log(1 + e^z)
            q = 0.5 * (1.0 + np.tanh(0.5 * z))              # 1 - p = sigmoid(z)
            g = pairs.grad(X, q, -q, aux)
        if lam:
            loss += lam * float((X * X).sum())
            g += 2.0 * lam * X
        return loss, g
