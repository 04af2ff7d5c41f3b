"""t-distributed stochastic triplet embedding (t-STE), van der Maaten &
Weinberger, MLSP 2012."""
from __future__ import annotations

import numbers

import numpy as np

from tripletml.core.params import Interval
from tripletml.embedding._base import OrdinalEmbeddingBase

__all__ = ["TSTE", "tste_nll"]


def tste_nll(Y: np.ndarray, pairs, alpha: float, *, fused: bool = True) -> tuple[float, np.ndarray]:
    """t-STE's negative log-likelihood ``-sum_t log p_t`` (Sec. 3.2) of the
    triplets ``pairs`` (:class:`tripletml.embedding._base._Pairs`) at the
    points ``Y`` (one row per item) and its gradient with respect to ``Y``;
    ``fused``: the compiled pass where the dense route applies.  Shared by
    :class:`TSTE` (free points) and
    :class:`tripletml.algorithms.linear_tste.LinearTSTE` (``Y = X L^T``)."""
    a = float(alpha)
    if pairs.dense and fused:
        from tripletml.embedding._kernels import tste_pairs   # late: Numba's start-up
        return pairs.dense_fused(Y, tste_pairs, a)
    uc, uf, aux = pairs.sq_dists(Y)
    # log K(u) = -(a+1)/2 log(1 + u/a);  z = log K_far - log K_close
    z = 0.5 * (a + 1.0) * (np.log1p(uc / a) - np.log1p(uf / a))
    loss = float(np.logaddexp(0.0, z).sum())          # -log p = log(1 + e^z)
    q = 0.5 * (1.0 + np.tanh(0.5 * z))                 # 1 - p = sigmoid(z)
    wc = q * (a + 1.0) / (2.0 * (a + uc))              # d(-log p)/d u_close
    wf = -q * (a + 1.0) / (2.0 * (a + uf))             # d(-log p)/d u_far
    return loss, pairs.grad(Y, wc, wf, aux)


class TSTE(OrdinalEmbeddingBase):
    r"""t-distributed stochastic triplet embedding of item ids.

    Each triplet ``(i, j, l) = (head, close, far)`` is satisfied with the
    probability (van der Maaten & Weinberger 2012, Sec. 3.2)

    .. math::

        p_{ijl} = \frac{\bigl(1 + \lVert x_i - x_j\rVert^2/\alpha\bigr)^{-\frac{\alpha+1}{2}}}
            {\bigl(1 + \lVert x_i - x_j\rVert^2/\alpha\bigr)^{-\frac{\alpha+1}{2}}
             + \bigl(1 + \lVert x_i - x_l\rVert^2/\alpha\bigr)^{-\frac{\alpha+1}{2}}}

    and the embedding minimizes the negative log-likelihood plus an L2 penalty

    .. math::

        -\sum_{(i,j,l)} \log p_{ijl} + \lambda \lVert X\rVert_F^2 ,

    :math:`\lambda` = ``regularization`` (the penalty is applied to the items
    that appear in the triplets).  Minimized with L-BFGS (SciPy) from a small
    random start.

    Parameters
    ----------
    n_components : int, default=2
    alpha : float or None, default=None
        Degrees of freedom of the Student-t kernel; None: ``n_components - 1``
        as the paper advises (1 when ``n_components`` is 1).
    regularization : float, default=0.1
        :math:`\lambda \ge 0`.  With 0 the objective has no minimizer when the
        triplets can all be satisfied (it keeps decreasing as the points spread
        out), and L-BFGS runs to ``max_iter``; the default keeps the minimizer
        finite and barely moves the answers on thousands of triplets.
    n_items : int, optional
        Number of items; default ``max id + 1``.  Items no triplet names are
        allowed up to ``10 x (items named) + 100,000`` items in all (above,
        a ValueError before anything is allocated).
    max_iter : int, default=1000
    n_init : int, default=4
        Number of random starts; the embedding of the lowest objective is kept
        (low dimensions have local minima: on held-out Zappos triplets, 2-D,
        4 starts gain about half a point of accuracy over one);
        ``n_iter_`` and ``stop_reason_`` are that start's.
    tol : float, default=1e-7
        Relative decrease of the objective at which L-BFGS stops.
    random_state : int, Generator, RandomState or None
    verbose : int, default=0

    Attributes
    ----------
    embedding_ : ndarray of shape (n_items_, n_components)
    n_items_ : int
    alpha_ : float
        The degrees of freedom used.
    loss_ : float
    n_iter_ : int
    stop_reason_ : {"tol", "max_iter"}

    Notes
    -----
    No ``transform``: there are no features; use ``embedding_``.

    References
    ----------
    L. van der Maaten and K. Weinberger, "Stochastic triplet embedding",
    IEEE MLSP 2012, Sec. 3.2.
    """

    _parameter_constraints = {
        **OrdinalEmbeddingBase._common_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "regularization": [Interval(numbers.Real, 0, None, closed="left")],
    }
    _init_scale = 1e-2

    def __init__(self, n_components=2, *, alpha=None, regularization=0.1, n_items=None,
                 max_iter=1000, n_init=4, tol=1e-7, random_state=None, verbose=0):
        self.n_components = n_components
        self.alpha = alpha
        self.regularization = regularization
        self.n_items = n_items
        self.max_iter = max_iter
        self.n_init = n_init
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _check_params(self):
        self.alpha_ = float(self.alpha) if self.alpha is not None else float(
            max(self.n_components - 1, 1))

    def _loss_grad(self, X, pairs):
        loss, g = tste_nll(X, pairs, self.alpha_, fused=self._fused)
        lam = self.regularization
        if lam:
            loss += lam * float((X * X).sum())
            g += 2.0 * lam * X
        return loss, g
