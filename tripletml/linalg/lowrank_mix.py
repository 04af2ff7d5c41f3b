"""The weighted average of K rank-k factored matrices, re-truncated to rank k
without forming it (iterative parameter mixing of the factored learners).

Given ``W_j = A_j B_j^T`` (``A_j``: n x k, ``B_j``: m x k) and real
(signed) weights ``mu_j``, the mixture ``M = sum_j mu_j A_j B_j^T`` equals
``S T^T`` with the stacked factors ``S = [c_1 A_1, ..., c_K A_K]`` (n x Kk)
and ``T = [r_1 B_1, ..., r_K B_K]`` (m x Kk), ``r_j = sqrt(|mu_j|)`` and
``c_j = sign(mu_j) r_j`` (the sign rides on the left factor; for
non-negative weights ``c_j = r_j``).  Signed weights are the mixing line
search's candidates ``W0 + s sum_i mu_i (W_i - W0)``: ``W0`` gets
``1 - s < 0`` for ``s > 1``.  With the thin
QRs ``S = Q_S R_S`` and ``T = Q_T R_T`` and the SVD of the small core
``R_S R_T^T = U diag(s) V^T`` (at most Kk x Kk),

    M = (Q_S U) diag(s) (Q_T V)^T

is an SVD of M, and its first k triplets give the best rank-k approximation
in every unitarily invariant norm (Eckart-Young-Mirsky).  Cost
``O((n + m) (Kk)^2 + (Kk)^3)`` time and ``O((n + m) Kk)`` memory; the n x m
matrix M is never formed.

Several mixtures of the same factors with different weights
(:func:`mix_truncate_many`) share the QRs of the *unscaled* stacks: with
``S0 = [A_1, ..., A_K] = Q_S R_S`` and ``T0 = Q_T R_T``, the mixture with
weights ``w`` is ``Q_S (R_S diag(w) R_T^T) Q_T^T``, so each extra candidate
costs one ``Kk x Kk`` SVD and the products ``Q_S U``, ``Q_T V``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["mix_truncate", "mix_truncate_many", "split_balanced"]


def mix_truncate(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray],
                 weights: Sequence[float], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank-k truncated SVD of ``sum_j weights[j] A_j B_j^T``.

    Parameters
    ----------
    As, Bs : sequences of ndarray of shapes (n, k_j), (m, k_j)
        The factors of the K models (``k_j`` may differ).
    weights : sequence of float
        Finite mixing weights ``mu_j``, of any sign (zero weights are
        skipped).
    k : int
        The rank kept (``1 <= k <= min(n, m)``).

    Returns
    -------
    P : ndarray of shape (n, k)
        Orthonormal left singular vectors.
    s : ndarray of shape (k,)
        Singular values, non-increasing (zeros when the mixture has rank < k).
    Q : ndarray of shape (m, k)
        Orthonormal right singular vectors; ``P diag(s) Q^T`` is the best
        rank-k approximation of the mixture.
    """
    if len(As) != len(Bs) or len(As) != len(weights):
        raise ValueError(f"mix_truncate: {len(As)} left factors, {len(Bs)} right factors and "
                         f"{len(weights)} weights; give one of each per model")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)):
        raise ValueError("mix_truncate: weights must be a finite 1-d sequence")
    keep = [j for j in range(len(w)) if w[j] != 0]
    if not keep:
        raise ValueError("mix_truncate: every weight is zero")
    n, m = As[keep[0]].shape[0], Bs[keep[0]].shape[0]
    if not 1 <= int(k) <= min(n, m):
        raise ValueError(f"mix_truncate: rank k={k} must be in [1, {min(n, m)}]")
    k = int(k)
    r = np.sqrt(np.abs(w))
    c = np.where(w < 0, -r, r)
    S = np.hstack([np.asarray(As[j], dtype=np.float64) * c[j] for j in keep])
    T = np.hstack([np.asarray(Bs[j], dtype=np.float64) * r[j] for j in keep])
    if S.shape[0] != n or T.shape[0] != m or S.shape[1] != T.shape[1]:
        raise ValueError("mix_truncate: the factors' shapes disagree")
    QS, RS = np.linalg.qr(S, mode="reduced")
    QT, RT = np.linalg.qr(T, mode="reduced")
    return _truncate_core(QS, RS @ RT.T, QT, n, m, k)


def _truncate_core(QS, core, QT, n, m, k):
    """The top k singular triplets of ``QS core QT^T``."""
    U, s, Vt = np.linalg.svd(core)
    kk = min(k, s.shape[0])
    P = np.zeros((n, k))
    Q = np.zeros((m, k))
    sv = np.zeros(k)
    P[:, :kk] = QS @ U[:, :kk]
    Q[:, :kk] = QT @ Vt[:kk].T
    sv[:kk] = s[:kk]
    return np.ascontiguousarray(P), sv, np.ascontiguousarray(Q)


def mix_truncate_many(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray],
                      weights: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]]:
    """:func:`mix_truncate` of several weightings of the same factors,
    sharing the thin QRs of the unscaled stacks ``[A_1, ..., A_K]`` and
    ``[B_1, ..., B_K]`` (see the module docstring).

    Parameters
    ----------
    As, Bs : sequences of ndarray of shapes (n, k_j), (m, k_j)
    weights : array-like of shape (n_mixtures, K)
        One row of finite (signed) weights per mixture; a row must not be
        all zero.
    k : int
        The rank kept.

    Returns
    -------
    list of (P, s, Q)
        One rank-k truncated SVD per row of ``weights`` (as
        :func:`mix_truncate`; equal to it to rounding).
    """
    if len(As) != len(Bs):
        raise ValueError(f"mix_truncate_many: {len(As)} left factors and {len(Bs)} right "
                         "factors; give one of each per model")
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if W.ndim != 2 or W.shape[1] != len(As) or not np.all(np.isfinite(W)):
        raise ValueError(f"mix_truncate_many: weights must be a finite (n_mixtures, {len(As)}) "
                         "array")
    if np.any(np.all(W == 0, axis=1)):
        raise ValueError("mix_truncate_many: every weight of a mixture is zero")
    n, m = As[0].shape[0], Bs[0].shape[0]
    if not 1 <= int(k) <= min(n, m):
        raise ValueError(f"mix_truncate_many: rank k={k} must be in [1, {min(n, m)}]")
    k = int(k)
    S = np.hstack([np.asarray(A, dtype=np.float64) for A in As])
    T = np.hstack([np.asarray(B, dtype=np.float64) for B in Bs])
    if S.shape[0] != n or T.shape[0] != m or S.shape[1] != T.shape[1]:
        raise ValueError("mix_truncate_many: the factors' shapes disagree")
    widths = [np.asarray(A).shape[1] for A in As]
    QS, RS = np.linalg.qr(S, mode="reduced")
    QT, RT = np.linalg.qr(T, mode="reduced")
    out = []
    for row in W:
        cols = np.repeat(row, widths)
        out.append(_truncate_core(QS, (RS * cols) @ RT.T, QT, n, m, k))
    return out


def split_balanced(P: np.ndarray, s: np.ndarray, Q: np.ndarray,
                   pinv: bool = False) -> tuple[np.ndarray, ...]:
    """Balanced factors ``A = P diag(s)^(1/2)``, ``B = Q diag(s)^(1/2)`` of
    ``P diag(s) Q^T`` (``A^T A = B^T B = diag(s)``, ``cond(A) = cond(B) =
    sqrt(cond(W))``, as :func:`tripletml.linalg.pinv.balanced_factors`);
    with ``pinv=True`` also the exact transposed pseudo-inverses
    ``(A^+)^T = P diag(s)^(-1/2)`` and ``(B^+)^T = Q diag(s)^(-1/2)``
    (LinAlgError when a singular value is zero: the product lost rank)."""
    r = np.sqrt(np.asarray(s, dtype=np.float64))
    A = np.ascontiguousarray(P * r)
    B = np.ascontiguousarray(Q * r)
    if not pinv:
        return A, B
    if not np.all(r > 0):
        raise np.linalg.LinAlgError("the mixed W = A B^T has lost rank")
    return A, B, np.ascontiguousarray(P / r), np.ascontiguousarray(Q / r)
