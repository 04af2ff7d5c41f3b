"""The positive semi-definite part of a bilinear model, as an embedding.

A bilinear similarity ``S(x, y) = x^T W y`` is an inner product of one
embedding ``z(x) = P^T x`` exactly when W is symmetric positive
semi-definite (``W = P P^T``).  For any other W the nearest such model in
the Frobenius norm is ``W_+``, the projection of the symmetric part
``(W + W^T) / 2`` onto the PSD cone (its negative eigenvalues set to 0;
Higham 1988): the skew part ``(W - W^T) / 2`` is orthogonal to every
symmetric matrix and the clipping is the nearest PSD matrix to the
symmetric part.  :func:`psd_part` returns ``P`` (d x r, columns in
decreasing order of eigenvalue, optionally only the top ``n_components``)
and the share of W's squared Frobenius norm that ``P P^T`` keeps:

    kept / total = sum_{i kept} lambda_i^2 / ||W||_F^2
                 = 1 - ||W - P P^T||_F^2 / ||W||_F^2,

1 for a symmetric PSD W with every positive direction kept.

:func:`psd_part_factored` does the same for ``W = A B^T`` (d x k factors)
without a d x d matrix: with the thin QR ``[A B] = Q R`` (Q: d x 2k),
``A = Q R_A`` and ``B = Q R_B``, so the symmetric part is ``Q C Q^T`` with
the 2k x 2k ``C = (R_A R_B^T + R_B R_A^T) / 2``, and ``||W||_F^2 =
||R_A R_B^T||_F^2``.  By Sylvester's law of inertia (``A B^T + B A^T`` is
congruent to ``[[0, I], [I, 0]]``) C has at most k positive eigenvalues,
so the embedding of a rank-k model has at most k columns.  Cost
``O(d k^2)``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["PSDPart", "psd_part", "psd_part_factored", "PSD_RTOL_FACTOR"]

#: eigenvalues at most ``PSD_RTOL_FACTOR * n * eps`` times the largest
#: magnitude (n the size of the eigenproblem) count as zero: rounding noise
PSD_RTOL_FACTOR = 10.0


class PSDPart(NamedTuple):
    """``factor``: P, shape (d, r), ``P P^T`` the kept PSD part;
    ``eigenvalues``: its r eigenvalues, decreasing; ``kept``: their sum of
    squares; ``total``: ``||W||_F^2``."""

    factor: np.ndarray
    eigenvalues: np.ndarray
    kept: float
    total: float

    @property
    def fidelity(self) -> float:
        """``kept / total`` (1.0 for W = 0: nothing is lost)."""
        return float(self.kept / self.total) if self.total > 0 else 1.0


def _top(ev: np.ndarray, V: np.ndarray, n_components: Optional[int], n: int):
    """Positive eigenpairs (above the rounding floor), decreasing, at most
    ``n_components`` of them."""
    order = np.argsort(ev, kind="stable")[::-1]
    ev, V = ev[order], V[:, order]
    scale = float(np.max(np.abs(ev))) if ev.size else 0.0
    floor = PSD_RTOL_FACTOR * max(n, 1) * np.finfo(float).eps * scale
    keep = int(np.count_nonzero(ev > floor)) if scale > 0 else 0
    if n_components is not None:
        keep = min(keep, int(n_components))
    return ev[:keep], V[:, :keep]


def psd_part(W, n_components: Optional[int] = None) -> PSDPart:
    """The embedding factor of the PSD part of the square ``W`` (dense).

    Parameters
    ----------
    W : array-like of shape (d, d)
    n_components : int or None
        Keep at most this many directions (the largest eigenvalues); None:
        every positive one.

    Returns
    -------
    PSDPart
        ``P = U_+ diag(sqrt(lambda_+))`` from ``eigh((W + W^T) / 2)``.
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"psd_part: W must be square, got shape {W.shape}")
    d = W.shape[0]
    total = float(np.sum(W * W))
    if d == 0 or total == 0.0:
        return PSDPart(np.zeros((d, 0)), np.zeros(0), 0.0, total)
    ev, V = np.linalg.eigh(0.5 * (W + W.T))
    ev, V = _top(ev, V, n_components, d)
    P = np.ascontiguousarray(V * np.sqrt(ev))
    return PSDPart(P, ev, float(np.sum(ev * ev)), total)


def psd_part_factored(A, B, n_components: Optional[int] = None) -> PSDPart:
    """:func:`psd_part` of ``W = A B^T`` from the factors (d x k each),
    by a thin QR of ``[A B]`` and a 2k x 2k eigenproblem: no d x d array."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or A.shape != B.shape:
        raise ValueError(f"psd_part_factored: A and B must have one 2-D shape, got {A.shape} "
                         f"and {B.shape}")
    d, k = A.shape
    if d == 0 or k == 0:
        return PSDPart(np.zeros((d, 0)), np.zeros(0), 0.0, 0.0)
    Q, R = np.linalg.qr(np.hstack([A, B]), mode="reduced")
    RA, RB = R[:, :k], R[:, k:]
    core = RA @ RB.T                               # W = Q core Q^T
    total = float(np.sum(core * core))
    if total == 0.0:
        return PSDPart(np.zeros((d, 0)), np.zeros(0), 0.0, total)
    ev, V = np.linalg.eigh(0.5 * (core + core.T))
    ev, V = _top(ev, V, n_components, d)
    P = np.ascontiguousarray(Q @ (V * np.sqrt(ev)))
    return PSDPart(P, ev, float(np.sum(ev * ev)), total)
