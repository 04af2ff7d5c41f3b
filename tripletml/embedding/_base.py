"""The shared machinery of the feature-free ordinal embeddings.

Every objective here is a sum over triplets of a function of two distances,
``d(head, close)`` and ``d(head, far)``.  Its gradient with respect to the
coordinates is gathered per *pair of items*: a weight ``W[a, b]`` per pair
(the derivative of the objective with respect to the pair's squared or plain
distance) is accumulated with one :func:`numpy.bincount`, and the gradient is
``(diag(S 1) - S) X`` with ``S = W + W^T`` -- O(m + n^2 d) time and no
``(m, d)`` temporaries.  When the items are many compared with the triplets
(``n_items^2 > 4 m + 10^6``) the per-triplet route is taken instead: the
``(m, d)`` differences ``X[head] - X[close]`` and ``X[head] - X[far]`` and a
bincount scatter, O(m d).
"""
from __future__ import annotations

import numbers
import time
import warnings

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.base import LearnerBase
from tripletml.core.params import Interval
from tripletml.engine.stopping import finish
from tripletml.core.validation import as_generator
from tripletml.datasets.comparisons import check_item_triplets, check_n_items_bound

__all__ = ["OrdinalEmbeddingBase", "UnusedItemsWarning", "warn_unused_items", "fit_items"]


class UnusedItemsWarning(UserWarning):
    """Some items in ``0..n_items - 1`` appear in no training triplet: their
    place (or similarity) is undetermined and triplets about them are answered
    at chance.  A ``UserWarning``; filter it with ``warnings.filterwarnings(
    "ignore", category=UnusedItemsWarning)`` (e.g. for the training folds of a
    cross-validation, where it is expected)."""


def warn_unused_items(who: str, used: np.ndarray, what: str, stacklevel: int = 2) -> None:
    """Warn (:class:`UnusedItemsWarning`) when ``used`` (bool per item) is not
    all True."""
    if used.all():
        return
    idle = np.flatnonzero(~used)
    n = len(used)
    warnings.warn(f"{who}: {len(idle)} of {n} items appear in no triplet (ids "
                  f"{', '.join(map(str, idle[:10]))}{', ...' if len(idle) > 10 else ''}"
                  f"); {what}", UnusedItemsWarning, stacklevel=stacklevel + 1)

#: the pair route is taken while ``n_items^2 <= 4 m + _DENSE_EXTRA`` (its n x n
#: weights then cost no more than the per-triplet route's (m, d) arrays)
_DENSE_EXTRA = 10 ** 6


def fit_items(est, triplets, y, unused_means: str, **bound) -> tuple[np.ndarray, int,
                                                                      np.ndarray]:
    """The checks every ``fit(triplets)`` of item ids makes: ``y`` is None,
    the triplets are valid ids (:func:`check_item_triplets`), the number of
    items (``n_items`` or the largest id + 1, refused when above 10 times the
    items the triplets name + 100,000:
    :func:`~tripletml.datasets.comparisons.check_n_items_bound`, whose
    ``factor`` / ``slack`` / ``why`` ``bound`` passes on), and a warning for the items in no triplet
    (``unused_means`` says what becomes of them).

    Returns ``(triplets as int64 (m, 3), n_items, used)`` with ``used`` the
    boolean mask of the items some triplet names.
    """
    who = type(est).__name__
    if y is not None:
        raise ValueError(f"{who}.fit(triplets, y=None): y must be None; the answer is "
                         "the order within each triplet (head, close, far).")
    t = check_item_triplets(triplets, est.n_items, who=f"{who}: triplets")
    n = int(est.n_items) if est.n_items is not None else int(t.max()) + 1
    # memory follows the items named: n_items (given or max id + 1) far above
    # them is refused before anything of size n_items is allocated
    check_n_items_bound(t, n, who, given=est.n_items is not None, **bound)
    used = np.zeros(n, dtype=bool)
    used[t.ravel()] = True
    warn_unused_items(who, used, unused_means, stacklevel=3)
    return t, n, used


class _Pairs:
    """Triplets compacted to the items they use, with the routes' helpers."""

    def __init__(self, t: np.ndarray, n: int, dense: bool | None = None):
        self.h, self.c, self.f = (np.ascontiguousarray(t[:, j]) for j in range(3))
        self.n, self.m = n, len(t)
        self.dense = (n * n <= 4 * self.m + _DENSE_EXTRA) if dense is None else dense
        if self.dense:
            self.hc = self.h * n + self.c
            self.hf = self.h * n + self.f

    def sq_dists(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, object]:
        """Squared distances ``|x_h - x_c|^2`` and ``|x_h - x_f|^2`` per triplet
        (and what ``grad`` needs)."""
        if self.dense:
            from scipy.spatial.distance import cdist
            D2 = cdist(X, X, "sqeuclidean").ravel()
            return D2[self.hc], D2[self.hf], None
        A = X[self.h] - X[self.c]
        B = X[self.h] - X[self.f]
        return np.einsum("ij,ij->i", A, A), np.einsum("ij,ij->i", B, B), (A, B)

    def dense_fused(self, X: np.ndarray, kernel, param: float) -> tuple[float, np.ndarray]:
        """The dense route in one compiled pass: ``kernel`` (from ``_kernels``)
        sums the objective and fills the pair weights ``W``; returns the
        objective and its gradient."""
        from scipy.spatial.distance import cdist
        n = X.shape[0]
        D2 = cdist(X, X, "sqeuclidean").ravel()
        W = np.zeros(n * n)
        loss = kernel(D2, self.hc, self.hf, float(param), W)
        from tripletml.embedding._kernels import pair_grad   # late: Numba's start-up
        return loss, pair_grad(W, np.ascontiguousarray(X))

    def _pair_grad(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        n = X.shape[0]
        W = W.reshape(n, n)
        S = W + W.T
        return 2.0 * (S.sum(axis=1)[:, None] * X - S @ X)

    def grad(self, X: np.ndarray, wc: np.ndarray, wf: np.ndarray, aux) -> np.ndarray:
        """Gradient of ``sum_t wc_t |x_h - x_c|^2 + wf_t |x_h - x_f|^2`` with the
        weights held fixed: ``2 sum_t wc_t (x_h - x_c)`` into ``h``, minus into
        ``c`` (likewise for ``f``)."""
        n, d = X.shape
        if self.dense:
            W = np.bincount(self.hc, weights=wc, minlength=n * n)
            W += np.bincount(self.hf, weights=wf, minlength=n * n)
            return self._pair_grad(X, W)
        A, B = aux
        GA = A * wc[:, None]
        GB = B * wf[:, None]
        cols = np.arange(d)
        out = np.bincount((self.h[:, None] * d + cols).ravel(), weights=(GA + GB).ravel(),
                          minlength=n * d)
        out -= np.bincount((self.c[:, None] * d + cols).ravel(), weights=GA.ravel(),
                           minlength=n * d)
        out -= np.bincount((self.f[:, None] * d + cols).ravel(), weights=GB.ravel(),
                           minlength=n * d)
        return 2.0 * out.reshape(n, d)


class OrdinalEmbeddingBase(LearnerBase):
    """Common ``fit`` / ``predict`` / ``score`` of the ordinal embeddings.

    Subclasses define ``_loss_grad(X, pairs)`` returning the objective and its
    gradient for the compacted problem, and ``_init_scale``.
    """

    _common_constraints = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_items": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="neither")],
        "random_state": ["no_validation"],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
    }
    _init_scale = 1.0
    #: the fitted arrays a model file may hold (checked by ``load_model``)
    _fitted_arrays = {"embedding_": ArraySpec(("n_items_", "n_components"))}
    #: triplets are integer ids, never a sparse matrix
    _accepts_sparse = False
    #: route forced by tests (None: chosen by size)
    _dense = None
    #: use the compiled kernel on the dense route (tests compare both)
    _fused = True

    # ------------------------------------------------------------------ fit
    def fit(self, triplets, y=None):
        """Learn ``embedding_`` from triplets.

        Parameters
        ----------
        triplets : array-like of int, shape (m, 3)
            Rows ``(head, close, far)`` of item ids: ``close`` was judged more
            like ``head`` than ``far`` is.  Ids in ``0..n_items - 1``, three
            distinct ids per row.  Repeated and conflicting triplets are allowed
            (each counts once per occurrence).
        y : None
            Ignored (there are no labels: the order within a row is the answer).

        Returns
        -------
        self

        Warns
        -----
        UnusedItemsWarning
            (a ``UserWarning``) When some items in ``0..n_items - 1`` appear in no triplet: their
            position is undetermined and stays at its random initial value
            (of the first start).
        """
        who = type(self).__name__
        self._reset_fitted()
        self._validate_params()
        t, n, used = fit_items(self, triplets, y, "their embedding is undetermined and "
                               "stays at its random initial position.")
        rng = as_generator(self.random_state, self)
        ids = np.flatnonzero(used)
        code = np.full(n, -1, dtype=np.int64)
        code[ids] = np.arange(len(ids))
        pairs = _Pairs(code[t], len(ids), self._dense)
        shape = (len(ids), self.n_components)
        start = time.perf_counter()
        it = [0]

        def fun(x):
            loss, g = self._loss_grad(x.reshape(shape), pairs)
            if not np.isfinite(loss):
                raise FloatingPointError(f"{who}: the objective became non-finite; check "
                                         "the parameters (margin, alpha, regularization).")
            return loss, g.ravel()

        def callback(xk):
            it[0] += 1
            if self.verbose and (it[0] % 50 == 0 or it[0] == 1):
                print(f"{who}: iteration {it[0]}, {time.perf_counter() - start:.2f} s")

        best, X = None, None
        for run in range(self.n_init):
            init = rng.standard_normal((n, self.n_components)) * self._init_scale
            if X is None:
                X = init        # the items in no triplet keep the first start's place
            # L-BFGS-B's small dense updates (maxcor x maxcor) lose to BLAS threads:
            # one thread is several times faster, and much faster on a busy machine
            with threadpool_limits(limits=1, user_api="blas"):
                res = minimize(fun, init[ids].ravel(), jac=True, method="L-BFGS-B",
                               callback=callback,
                               options=dict(maxiter=self.max_iter, ftol=self.tol,
                                            gtol=self.tol * 1e-3, maxcor=20))
            if self.verbose:
                print(f"{who}: start {run + 1} of {self.n_init}: objective {res.fun:.6g} "
                      f"after {res.nit} iterations")
            if best is None or res.fun < best.fun:
                best = res
        res = best
        X[ids] = res.x.reshape(shape)
        if not np.isfinite(X).all():  # pragma: no cover - guarded by fun
            raise FloatingPointError(f"{who}: the embedding became non-finite.")
        self.embedding_ = X
        self.n_items_ = n
        self.loss_ = float(res.fun)
        self._set_fitted(3)
        reason = "max_iter" if res.nit >= self.max_iter and not res.success else "tol"
        finish(self, res.nit, reason, tol=self.tol, what="relative decrease of the objective",
               advice="increase max_iter", stacklevel=3)
        return self

    # ------------------------------------------------------------ persistence
    def _check_loaded(self) -> None:
        """Consistency of a model built by ``load_model``: ``n_features_in_ ==
        3``, ``n_items_`` a positive int agreeing with ``n_items``, finite
        ``loss_``, the parameters valid and ``embedding_`` of shape
        ``(n_items_, n_components)``, finite."""
        check_item_counts(self)
        loss = getattr(self, "loss_", None)
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not np.isfinite(loss):
            raise ValueError(f"loss_={loss!r} is not a finite number")
        super()._check_loaded()

    # ------------------------------------------------------------------ use
    def _check_fitted_triplets(self, triplets) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted
        check_is_fitted(self, "embedding_")
        try:
            return check_item_triplets(triplets, self.n_items_,
                                       who=f"{type(self).__name__}: triplets")
        except ValueError as exc:
            if "out of range" in str(exc) and self.n_items is None:
                # e.g. a held-out fold of a cross-validation naming an item
                # that no training triplet named
                raise ValueError(f"{exc} The model was fitted on n_items_={self.n_items_} "
                                 "items (max id + 1 of the training triplets); pass n_items "
                                 "to fit every item, e.g. in GridSearchCV or "
                                 "cross_val_score.") from None
            raise

    def predict(self, triplets) -> np.ndarray:
        """+1 where ``head`` is strictly nearer to ``close`` than to ``far`` in
        ``embedding_`` (Euclidean), else -1.

        Parameters
        ----------
        triplets : array-like of int, shape (m, 3)
            Ids below ``n_items_``.  An item that was in no training triplet
            sits at its random start, so answers about it are chance.

        Returns
        -------
        ndarray of int8, shape (m,)
        """
        t = self._check_fitted_triplets(triplets)
        X = self.embedding_
        dc = ((X[t[:, 0]] - X[t[:, 1]]) ** 2).sum(axis=1)
        df = ((X[t[:, 0]] - X[t[:, 2]]) ** 2).sum(axis=1)
        return np.where(dc < df, 1, -1).astype(np.int8)

    def score(self, triplets, y=None) -> float:
        """Triplet accuracy: the fraction of ``triplets`` predicted +1 (the
        embedding agrees with the answer).  ``y`` is ignored."""
        return float(np.mean(self.predict(triplets) == 1))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = False
        tags.requires_fit = True
        return tags


def check_item_counts(model) -> None:
    """The item counts of a loaded embedding model: ``n_features_in_ == 3``
    (triplets) and ``n_items_`` a positive int agreeing with ``n_items``
    (ValueError otherwise)."""
    if getattr(model, "n_features_in_", None) != 3 or isinstance(model.n_features_in_, bool):
        raise ValueError(f"n_features_in_={getattr(model, 'n_features_in_', None)!r} "
                         "must be 3 (triplets)")
    n = getattr(model, "n_items_", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_items_={n!r} is not a positive integer")
    if model.n_items is not None and model.n_items != n:
        raise ValueError(f"n_items_={n} disagrees with n_items={model.n_items}")
