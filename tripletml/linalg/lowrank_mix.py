"""The weighted average of K rank-k factored matrices, re-truncated to rank k
without forming it (iterative parameter mixing of the factored learners).

Given ``W_j = A_j B_j^T`` (``A_j``: n x k, ``B_j``: m x k) and weights
``mu_j >= 0``, the mixture ``M = sum_j mu_j A_j B_j^T`` equals ``S T^T`` with
the stacked factors ``S = [sqrt(mu_1) A_1, ..., sqrt(mu_K) A_K]`` (n x Kk)
and ``T = [sqrt(mu_1) B_1, ..., sqrt(mu_K) B_K]`` (m x Kk).  With the thin
QRs ``S = Q_S R_S`` and ``T = Q_T R_T`` and the SVD of the small core
``R_S R_T^T = U diag(s) V^T`` (at most Kk x Kk),

    M = (Q_S U) diag(s) (Q_T V)^T

is an SVD of M, and its first k triplets give the best rank-k approximation
in every unitarily invariant norm (Eckart-Young-Mirsky).  Cost
``O((n + m) (Kk)^2 + (Kk)^3)`` time and ``O((n + m) Kk)`` memory; the n x m
matrix M is never formed.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["mix_truncate", "split_balanced"]


def mix_truncate(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray],
                 weights: Sequence[float], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank-k truncated SVD of ``sum_j weights[j] A_j B_j^T``.

    Parameters
    ----------
    As, Bs : sequences of ndarray of shapes (n, k_j), (m, k_j)
        The factors of the K models (``k_j`` may differ).
    weights : sequence of float
        Non-negative mixing weights ``mu_j`` (zero weights are skipped).
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
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("mix_truncate: weights must be finite and non-negative")
    keep = [j for j in range(len(w)) if w[j] > 0]
    if not keep:
        raise ValueError("mix_truncate: every weight is zero")
    n, m = As[keep[0]].shape[0], Bs[keep[0]].shape[0]
    if not 1 <= int(k) <= min(n, m):
        raise ValueError(f"mix_truncate: rank k={k} must be in [1, {min(n, m)}]")
    k = int(k)
    r = np.sqrt(w)
    S = np.hstack([np.asarray(As[j], dtype=np.float64) * r[j] for j in keep])
    T = np.hstack([np.asarray(Bs[j], dtype=np.float64) * r[j] for j in keep])
    if S.shape[0] != n or T.shape[0] != m or S.shape[1] != T.shape[1]:
        raise ValueError("mix_truncate: the factors' shapes disagree")
    QS, RS = np.linalg.qr(S, mode="reduced")
    QT, RT = np.linalg.qr(T, mode="reduced")
    U, s, Vt = np.linalg.svd(RS @ RT.T)
    kk = min(k, s.shape[0])
    P = np.zeros((n, k))
    Q = np.zeros((m, k))
    sv = np.zeros(k)
    P[:, :kk] = QS @ U[:, :kk]
    Q[:, :kk] = QT @ Vt[:kk].T
    sv[:kk] = s[:kk]
    return np.ascontiguousarray(P), sv, np.ascontiguousarray(Q)


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
