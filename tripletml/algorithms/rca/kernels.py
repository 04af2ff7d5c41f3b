"""RCA's shrinkage towards the identity and its held-out choice on answers.

RCA whitens the within-chunklet covariance ``C`` (``M = C^{-1}`` on the
data's span, the paper's Steps 2-3).  With people's answers the chunklets are
the ``(head, close)`` pairs of noisy answers, and a whitening estimated from
them can rank new items worse than the features' own geometry (measured in
``BENCHMARKS.md``: Zappos shoes -.03 to -.13 below the cosine).  The remedy
is the covariance estimator's usual one, shrinkage towards a multiple of the
identity (Ledoit & Wolf, 2004; KISSME's ``shrinkage``):

    C_s = (1 - s) C + s (tr C / d) I,   M = C_s^{-1},

on the whole space: ``s = 0`` is the paper's RCA (no weight outside the
data's span), ``s = 1`` the Euclidean distance of the (preprocessed) rows,
and in between a whitening that keeps a share of the features' geometry,
also for directions no training row varies along (new items).  How much the
answers can be trusted is not in their statistics; it is measured on
*held-out items* (:func:`tripletml.engine.early_stopping.item_folds`): each
value of the grid is fitted on the answers among the other items and scored
on the answers about the held-out ones.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from tripletml.algorithms.kissme.kernels import heldout_score
from tripletml.engine.early_stopping import choose_toward_last, two_protocol_splits
from tripletml.engine.threads import factor_work, limit_threads

__all__ = ["span_basis_of", "shrunk_weights", "shrinkage_scores", "choose_shrinkage"]

#: folds of the held-out choice (each named item held out once)
RCA_FOLDS = 3
#: fewest held-out answers per fold (and answers left to fit) for a choice
MIN_FOLD_ANSWERS = 5


def span_basis_of(X=None, T: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ev, U)``: the eigenvalues above ``d eps`` times the largest and the
    orthonormal eigenvectors (d x s) of the total scatter of the rows ``X``
    (``T``, the same scatter, if already formed; one of them given): the SVD
    of the centered rows when they are fewer than the features (``O(n^2
    d)``; the eigenvectors outside their span have eigenvalue 0), else the
    eigenvectors of ``T``."""
    if X is not None and (T is None or X.shape[0] < X.shape[1]):
        Z = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        with limit_threads(factor_work(max(Z.shape), min(Z.shape))):   # its own panels
            _, sv, Vt = np.linalg.svd(Z - Z.mean(axis=0), full_matrices=False)
        ev, U = sv ** 2, Vt.T
    else:
        with limit_threads(factor_work(*T.shape)):
            ev, U = np.linalg.eigh(T)
    d = U.shape[0]
    top = float(ev.max()) if ev.size else 0.0
    keep = ev > max(d, 1) * np.finfo(float).eps * top if top > 0 else np.zeros(ev.shape, bool)
    return ev[keep], U[:, keep]


def shrunk_weights(lam: np.ndarray, shrinkage: float, d: int, regularization: float
                   ) -> tuple[np.ndarray, float] | None:
    """The model ``M = U E diag(w) E^T U^T + c I`` of the shrinkage ``s``
    from the eigenvalues ``lam`` of ``C`` on the span (eigenvectors ``E``):
    ``s > 0``: ``w = 1 / ((1 - s) lam + a) - 1 / a`` and ``c = 1 / a``,
    ``a = s tr C / d``; ``s = 0``: the paper's ``w = 1 / (lam + r tr C /
    k)`` (``r = regularization``, ``k = len(lam)``) and ``c = 0``.  None
    where that inverse does not exist (``r = 0`` and a zero eigenvalue)."""
    tr = float(lam.sum())
    if not tr > 0:
        return None
    if shrinkage > 0:
        a = shrinkage * tr / d
        return 1.0 / ((1.0 - shrinkage) * lam + a) - 1.0 / a, 1.0 / a
    den = lam + regularization * tr / lam.size
    if not den.min() > lam.size * np.finfo(float).eps * den.max():
        return None
    return 1.0 / den, 0.0


def _pair_terms(P: np.ndarray, X, a: np.ndarray, b: np.ndarray, gram: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``((P_a - P_b)^2, ||x_a - x_b||^2)``: what the distance of every
    shrinkage needs (:func:`shrunk_weights`: ``(P_a - P_b)^2 @ w + c ||x_a -
    x_b||^2``), ``P`` the rows in the eigenbasis ``U E``; ``gram`` the rows'
    Gram matrix when it is small."""
    D = P[a] - P[b]
    if gram is not None:
        e = gram[a, a] + gram[b, b] - 2.0 * gram[a, b]
    else:
        e = np.empty(len(a))
        for s0 in range(0, len(a), 1024):
            E = X[a[s0:s0 + 1024]] - X[b[s0:s0 + 1024]]
            e[s0:s0 + 1024] = np.asarray(E.multiply(E).sum(axis=1)).ravel() if sp.issparse(E) \
                else np.einsum("ij,ij->i", E, E)
    return D * D, np.maximum(e, 0.0)


def _grid_scores(grid, lam, d, regularization, terms, similar=None) -> list[float]:
    """The held-out score of each shrinkage from :func:`_pair_terms` of the
    pairs (``terms``: one pair, or the (head, close) and (head, far) pairs)."""
    out = []
    for s in grid:
        model = shrunk_weights(lam, float(s), d, regularization)
        if model is None:
            out.append(-np.inf)
            continue
        w, c = model
        dist = [Q @ w + c * e for Q, e in terms]
        out.append(heldout_score(dist[0], similar=similar) if similar is not None
                   else heldout_score(*dist))
    return out


#: rows up to which the held-out distances use the rows' Gram matrix
_GRAM_ROWS = 4096


def shrinkage_scores(X, answers: np.ndarray, grid: np.ndarray, regularization: float,
                     covariance: Callable[[np.ndarray, np.ndarray], np.ndarray],
                     similar: np.ndarray | None = None) -> np.ndarray | None:
    """Held-out scores of each shrinkage of ``grid``, on new items and on
    new answers about known items.

    Row 0: mean over :data:`RCA_FOLDS` folds of the *items*
    (:func:`~tripletml.engine.early_stopping.item_folds`): fitted on the
    answers among the other items (the span of their rows), scored on the
    answers whose items are all held out (a gallery of new items; answers
    mixing held-out and kept items would favour the span's projection, which
    shortens only the new items' differences).  Row 1: mean over
    :data:`RCA_FOLDS` folds of the *answers* (KISSME's
    :func:`~tripletml.algorithms.kissme.kernels.answer_folds`, every row
    known).

    Parameters
    ----------
    X : ndarray or CSR of shape (n, d)
        The rows as the model sees them (preprocessed).
    answers : ndarray of int, shape (m, 3) or (m, 2)
        Triplets ``(head, close, far)``, or pairs with ``similar``.
    grid : ndarray of float in [0, 1]
    regularization : float
        The paper's ridge of ``s = 0`` (:func:`shrunk_weights`).
    covariance : callable
        ``covariance(B, idx)``: the within-chunklet covariance of the answers
        ``idx`` on rows ``B`` (the rows in a span's coordinates).
    similar : ndarray of bool, optional
        Pair labels (scored by the ROC AUC of the distances).

    Returns
    -------
    ndarray of shape (2, len(grid)) or None
        None when a fold leaves fewer than :data:`MIN_FOLD_ANSWERS` answers
        to score (or of a kind, for pairs) or none to fit on.
    """
    n = X.shape[0]
    splits = two_protocol_splits(answers, RCA_FOLDS, similar, MIN_FOLD_ANSWERS)
    if splits is None:
        return None
    # the thread rule (tripletml.engine.threads) on the folds' own products
    # (the rows' Gram matrix, n^2 d, is the largest), not the fit's d x d price
    with limit_threads(float(n) * n * X.shape[1]):
        return _split_scores(X, answers, splits, grid, regularization, covariance, similar)


def _split_scores(X, answers, splits, grid, regularization, covariance, similar) -> np.ndarray:
    """:func:`shrinkage_scores` on its splits: the mean score of each
    protocol's folds."""
    n = X.shape[0]
    gram = None
    if n <= _GRAM_ROWS:
        gram = X @ X.T
        gram = gram.toarray() if sp.issparse(gram) else np.asarray(gram)
    return np.array([np.mean([_fold_scores(X, answers, h, grid, regularization, covariance,
                                           similar, gram) for h in folds], axis=0)
                     for folds in splits])


def _fold_scores(X, answers, h, grid, regularization, covariance, similar, gram) -> list[float]:
    """The grid's scores of one split ``h`` (an ItemHoldout)."""
    kept = np.ones(X.shape[0], bool)
    kept[h.items] = False
    _, U = span_basis_of(X[kept] if h.items.size else X)
    B = np.asarray(X @ U)
    C = covariance(B, h.fit)
    lam, E = np.linalg.eigh(0.5 * (C + C.T))
    P = B @ E
    t = answers[h.val]
    pairs_of = [(0, 1)] if similar is not None else [(0, 1), (0, 2)]
    terms = [_pair_terms(P, X, t[:, i], t[:, j], gram) for i, j in pairs_of]
    return _grid_scores(grid, np.maximum(lam, 0.0), X.shape[1], regularization, terms,
                        similar[h.val] if similar is not None else None)


def choose_shrinkage(grid: np.ndarray, scores: np.ndarray) -> float:
    """The value of ``grid`` (last: 1, the identity) whose smaller gain over
    the identity on the two held-out protocols (:func:`shrinkage_scores`)
    is largest: never below the identity on either; ties to the first
    (:func:`~tripletml.engine.early_stopping.choose_toward_last`)."""
    return choose_toward_last(grid, scores)
