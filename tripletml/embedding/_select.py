"""Choosing the dimension of an ordinal embedding by cross-validation over
triplets."""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import KFold

from tripletml.datasets.comparisons import check_item_triplets
from tripletml.embedding._base import UnusedItemsWarning

__all__ = ["choose_dimension", "DimensionChoice"]


@dataclass
class DimensionChoice:
    """What :func:`choose_dimension` found.

    Attributes
    ----------
    dims : ndarray of int, shape (k,)
        The dimensions tried, ascending.
    scores : ndarray of shape (k, n_folds)
        Held-out triplet accuracy per dimension and fold.
    mean_score, std_score, sem_score : ndarray of shape (k,)
        Mean over the folds, standard deviation (``ddof=1``) and standard
        error ``std_score / sqrt(n_folds)``.
    best_dim : int
        The dimension of the highest mean accuracy.
    dim : int
        The chosen dimension: with ``one_se=True`` the smallest dimension whose
        mean accuracy is at least ``mean(best_dim) - sem(best_dim)``; else
        ``best_dim``.
    estimator : estimator
        A clone of the estimator given, with the chosen dimension, fitted on
        all the triplets.
    n_unused : ndarray of int, shape (n_folds,)
        Items that appeared in no training triplet of each fold (triplets about
        them are answered at chance, for every dimension alike).
    """

    dims: np.ndarray
    scores: np.ndarray
    mean_score: np.ndarray
    std_score: np.ndarray
    sem_score: np.ndarray
    best_dim: int
    dim: int
    estimator: Any = field(repr=False)
    n_unused: np.ndarray = field(repr=False)

    def table(self) -> str:
        """The table as text: one line per dimension (mean, sd, se; ``*`` the
        chosen dimension, ``+`` the best mean when it differs)."""
        lines = ["  dim   mean acc      sd      se"]
        for d, m, s, e in zip(self.dims, self.mean_score, self.std_score, self.sem_score):
            mark = "*" if d == self.dim else ("+" if d == self.best_dim else " ")
            lines.append(f"{mark}{d:4d}   {m:.4f}   {s:.4f}  {e:.4f}")
        return "\n".join(lines)


def choose_dimension(estimator, triplets, dims: Sequence[int] = (1, 2, 3, 5, 8, 13), *,
                     cv: Any = 5, random_state: Any = None, one_se: bool = True,
                     param: str = "n_components") -> DimensionChoice:
    """Choose the dimension of an ordinal embedding by K-fold cross-validation
    over the triplets, with the one-standard-error rule.

    For every dimension in ``dims``, a clone of ``estimator`` with
    ``n_components`` (``param``) set to it is fitted on the training triplets of
    each fold and scored on the held-out ones (triplet accuracy, its
    ``score``).  The chosen dimension follows the *one-standard-error rule*
    (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*,
    2nd ed., Sec. 7.10): the smallest dimension whose mean held-out accuracy is
    within one standard error (over the folds) of the best mean -- a larger
    embedding fits the training answers at least as well and costs little
    held-out accuracy, so the simplest one the data cannot tell apart from the
    best is kept.  The estimator is then refitted on all the triplets at that
    dimension.

    The same folds serve every dimension, so the comparison is paired.  The
    fold accuracies share training triplets; their standard error is the usual
    rough one (it understates the uncertainty a little).

    Parameters
    ----------
    estimator : estimator
        An ordinal embedding (:class:`SOE`, :class:`STE`, :class:`TSTE`,
        :class:`BilinearEmbedding`, ...) with an ``n_components`` parameter,
        ``fit(triplets)`` and ``score(triplets)``; not modified.  When it has an
        ``n_items`` parameter left at None, the clones get ``max id + 1`` of
        all the triplets, so that every fold embeds the same items (an id
        missing from a training fold is placed at random instead of making its
        held-out triplets invalid).
    triplets : array-like of int, shape (m, 3)
        ``(head, close, far)`` rows of item ids.
    dims : sequence of int, default=(1, 2, 3, 5, 8, 13)
        Dimensions to try (sorted, duplicates dropped).
    cv : int or cross-validation splitter, default=5
        An int: ``KFold(cv, shuffle=True, random_state=random_state)`` over the
        triplets.  A splitter (anything with ``split(X)``) is used as is.
    random_state : int, Generator, RandomState or None
        Seeds the shuffle of the folds (an int ``cv`` only).  The estimator's
        own ``random_state`` seeds its fits.
    one_se : bool, default=True
        Apply the one-standard-error rule; False: take the dimension of the best
        mean accuracy.
    param : str, default="n_components"
        The parameter that sets the dimension.

    Returns
    -------
    DimensionChoice
        ``dims``, ``scores`` (dims x folds), ``mean_score``, ``std_score``,
        ``sem_score``, ``best_dim``, the chosen ``dim``, the refitted
        ``estimator``, and ``table()`` to print.

    Warns
    -----
    UnusedItemsWarning
        Once (not per fit) when some training folds miss items; and from the
        final fit when some items appear in no triplet at all.

    Examples
    --------
    >>> from tripletml.embedding import SOE, choose_dimension
    >>> res = choose_dimension(SOE(random_state=0), triplets)   # doctest: +SKIP
    >>> print(res.table()); res.dim; res.estimator.embedding_    # doctest: +SKIP
    """
    params = estimator.get_params(deep=False)
    if param not in params:
        raise ValueError(f"choose_dimension: {type(estimator).__name__} has no parameter "
                         f"{param!r}.")
    t = check_item_triplets(triplets, params.get("n_items"), who="choose_dimension: triplets")
    dims_ = _check_dims(dims)
    base = clone(estimator)
    if "n_items" in params and params["n_items"] is None:
        base.set_params(n_items=int(t.max()) + 1)
    folds = list(_splitter(cv, random_state).split(t))
    n_items = getattr(base, "n_items", None) or int(t.max()) + 1
    scores, n_unused = _fold_scores(base, t, dims_, folds, param, n_items)
    if n_unused.any():
        warnings.warn(f"choose_dimension: in {int((n_unused > 0).sum())} of {len(folds)} "
                      f"folds, up to {int(n_unused.max())} items appear in no training "
                      "triplet; their held-out triplets are answered at chance (in every "
                      "dimension alike).", UnusedItemsWarning, stacklevel=2)
    mean = scores.mean(axis=1)
    std = scores.std(axis=1, ddof=1) if len(folds) > 1 else np.zeros(len(dims_))
    sem = std / np.sqrt(len(folds))
    ib = int(np.argmax(mean))
    ic = int(np.flatnonzero(mean >= mean[ib] - sem[ib])[0]) if one_se else ib
    final = clone(base).set_params(**{param: int(dims_[ic])}).fit(t)
    return DimensionChoice(dims=dims_, scores=scores, mean_score=mean, std_score=std,
                           sem_score=sem, best_dim=int(dims_[ib]), dim=int(dims_[ic]),
                           estimator=final, n_unused=n_unused)


def _check_dims(dims) -> np.ndarray:
    """The dimensions to try: positive ints, sorted, duplicates dropped."""
    dims = list(dims) if not isinstance(dims, (int, np.integer)) else [dims]
    if not dims or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                           and d >= 1 for d in dims):
        raise ValueError(f"choose_dimension: dims must be positive integers, got {dims!r}.")
    return np.unique(np.asarray(dims, dtype=np.int64))


def _splitter(cv, random_state):
    """``KFold(cv, shuffle=True)`` for an int ``cv``, else the splitter given."""
    if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"choose_dimension: cv must be at least 2, got {cv}.")
        seed = random_state
        if isinstance(seed, np.random.Generator):
            seed = int(seed.integers(2 ** 31))
        return KFold(int(cv), shuffle=True, random_state=seed)
    if hasattr(cv, "split"):
        return cv
    raise TypeError(f"choose_dimension: cv must be an int or a splitter with split(X), "
                    f"got {type(cv).__name__}.")


def _fold_scores(base, t: np.ndarray, dims_: np.ndarray, folds: list, param: str,
                 n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Held-out accuracy per dimension and fold (the same folds for every
    dimension), and the items in no training triplet per fold."""
    scores = np.empty((len(dims_), len(folds)))
    n_unused = np.zeros(len(folds), dtype=np.int64)
    for j, (tr, te) in enumerate(folds):
        used = np.zeros(n_items, dtype=bool)
        used[t[tr].ravel()] = True
        n_unused[j] = int((~used).sum())
        for i, d in enumerate(dims_):
            est = clone(base).set_params(**{param: int(d)})
            with warnings.catch_warnings():
                # counted in n_unused and reported once by the caller
                warnings.simplefilter("ignore", UnusedItemsWarning)
                est.fit(t[tr])
            scores[i, j] = est.score(t[te])
    return scores, n_unused
