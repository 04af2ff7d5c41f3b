"""LORETA's solver state apart from the estimators (Shalit, Weinshall &
Chechik, NIPS 2010): the retraction kernels of Algorithms 2 and 3 and the
drift control of the maintained pseudo-inverses, used by
:class:`tripletml.LORETA` and :class:`tripletml.LORETAMultilabel`.

* :func:`loreta1_update` -- one LORETA-1 step (Algorithm 3) on factors
  ``W = A B^T`` with maintained transposed pseudo-inverses ``PA = (A^+)^T``,
  ``PB = (B^+)^T`` (Meyer's rank-one update, O((n + m) k)).
* :func:`loreta1_triplet_steps` -- LORETA-1 over triplets with the hinge loss.
* :func:`loreta_general_step` -- Algorithm 2 for rank-r steps.
* :class:`PinvFactors` -- the factors, their pseudo-inverses and the drift
  control: every ``check_every`` steps ``||A^+ A - I||_F`` (and the same for
  B) is measured; when it exceeds ``tol``, or when Meyer's formula is not
  applicable, W is re-factored with balanced factors and exact
  pseudo-inverses (:func:`tripletml.linalg.pinv.balanced_factors`; W itself
  is unchanged).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

from ..linalg._flags import FAST
from ..linalg.pinv import (balanced_factors, pinv_drift, pinv_full_column_rank,
                           pinv_update_apply, pinv_update_prepare)
from ..linalg.sparse_rows import csr_row_diff
from ..losses import triplet_hinge

__all__ = ["loreta1_update", "loreta1_triplet_steps", "loreta_general_step", "factored_margin",
           "PinvFactors"]


@njit(cache=True, nogil=True, fastmath=FAST)
def factored_margin(A, B, q_idx, q_val, v_idx, v_val, aq, bv):
    """``q^T A B^T v`` for sparse q, v (indices, values); leaves ``A^T q`` in
    ``aq`` and ``B^T v`` in ``bv``.  O((nnz(q) + nnz(v)) k)."""
    aq[:] = 0.0
    bv[:] = 0.0
    for s in range(q_idx.shape[0]):
        aq += A[q_idx[s]] * q_val[s]
    for s in range(v_idx.shape[0]):
        bv += B[v_idx[s]] * v_val[s]
    return np.dot(aq, bv)


@njit(cache=True, nogil=True, fastmath=FAST)
def loreta1_update(A, PA, B, PB, i1, v1, s1, i2, v2, cA, cB, u, h, Ahat, Bhat, bv):
    """One LORETA-1 step (Algorithm 3) in place, for ``G1 G2^T = -eta grad``
    with sparse ``G1 = s1 * (i1, v1)`` (n-vector) and ``G2 = (i2, v2)``
    (m-vector):

        A^ = A^+ G1,  B^ = B^+ G2,  Q = B^^T A^,
        A_delta = A A^ (-1/2 + 3Q/8) + G1 (1 - Q/2),   A <- A + A_delta B^^T,
        B_delta = B^+^T (B^T G2) (-1/2 + 3Q/8) + G2 (1 - Q/2),  B <- B + B_delta A^^T,

    with the pseudo-inverses following by Meyer's rank-one update.  Returns
    0, or 1/2/3 when Meyer's update was not applicable to A/B/both (their
    pseudo-inverses must then be recomputed)."""
    n, k = A.shape
    m = B.shape[0]
    # A^ = A^+ G1, B^ = B^+ G2, B^T G2, Q = B^^T A^
    Ahat[:] = 0.0
    Bhat[:] = 0.0
    bv[:] = 0.0
    for s in range(i1.shape[0]):
        Ahat += PA[i1[s]] * (s1 * v1[s])
    for s in range(i2.shape[0]):
        Bhat += PB[i2[s]] * v2[s]
        bv += B[i2[s]] * v2[s]
    Q = 0.0
    for j in range(k):
        Q += Bhat[j] * Ahat[j]
    fa = -0.5 + 0.375 * Q
    fb = 1.0 - 0.5 * Q
    # A_delta = (A A^) fa + G1 fb and B_delta^T = (B^+^T (B^T G2)) fa + G2 fb:
    # the sparse parts are scattered first, the dense parts are added inside
    # pass 1 of Meyer's update (one pass over the rows less per factor)
    cA[:n] = 0.0
    for s in range(i1.shape[0]):
        cA[i1[s]] += fb * s1 * v1[s]
    cB[:m] = 0.0
    for s in range(i2.shape[0]):
        cB[i2[s]] += fb * v2[s]
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = pinv_update_prepare(A, PA, cA, Bhat, h, kv, Ah, Ahat, fa)
    okA = pinv_update_apply(A, PA, cA, Bhat, u, h, kv, Ah, hh)       # A + A_delta B^^T
    kv[:] = 0.0
    Ah[:] = 0.0
    hh = pinv_update_prepare(PB, PB, cB, Ahat, h, kv, Ah, bv, fa)
    okB = pinv_update_apply(B, PB, cB, Ahat, u, h, kv, Ah, hh)       # B + B_delta^T A^^T
    return (0 if okA else 1) + (0 if okB else 2)


@njit(cache=True, nogil=True, fastmath=FAST)
def loreta1_triplet_steps(A, PA, B, PB, indptr, indices, data, triplets, start, stop, eta,
                          losses, margins, vidx, vval, cA, cB, u, h):
    """LORETA-1 on ``triplets[start:stop]``, in order (hinge loss,
    ``G1 = eta q``, ``G2 = p+ - p-``); ``losses``/``margins`` are indexed like
    ``triplets``.  Returns (t, flags): the index after the last step done and
    0, or 1/2/3 from :func:`loreta1_update` at step t - 1 (the caller
    recomputes those pseudo-inverses and resumes at t), or -1 when the margin
    at step t was not finite."""
    k = A.shape[1]
    aq = np.zeros(k)
    Ahat = np.zeros(k)
    Bhat = np.zeros(k)
    bv = np.zeros(k)
    for t in range(start, stop):
        q = triplets[t, 0]
        q_idx = indices[indptr[q]:indptr[q + 1]]
        q_val = data[indptr[q]:indptr[q + 1]]
        nv = csr_row_diff(indptr, indices, data, triplets[t, 1], triplets[t, 2], vidx, vval)
        mg = factored_margin(A, B, q_idx, q_val, vidx[:nv], vval[:nv], aq, bv)
        if not np.isfinite(mg):
            return t, -1
        margins[t] = mg
        loss = triplet_hinge(mg)
        losses[t] = loss
        if loss <= 0.0:
            continue
        flags = loreta1_update(A, PA, B, PB, q_idx, q_val, eta, vidx[:nv], vval[:nv], cA, cB,
                               u, h, Ahat, Bhat, bv)
        if flags:
            return t + 1, flags
    return stop, 0


def loreta_general_step(A: np.ndarray, B: np.ndarray, G1: np.ndarray,
                        G2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 (general LORETA): factors of ``R_x(G1 G2^T)`` for
    ``x = A B^T`` and a rank-r step ``G1 G2^T = -eta grad`` (G1: n x r,
    G2: m x r, dense).  Pseudo-inverses are computed afresh (O((n+m)k^2)).
    Returns new ``(A, B)``."""
    PA = pinv_full_column_rank(A)          # (A^+)^T
    PB = pinv_full_column_rank(B)
    Ahat = PA.T @ G1                       # k x r
    Bhat = PB.T @ G2                       # k x r
    ProjAG = A @ Ahat                      # n x r
    Q = Bhat.T @ Ahat                      # r x r
    A_delta = -0.5 * ProjAG + 0.375 * ProjAG @ Q + G1 - 0.5 * G1 @ Q
    GBproj = (G2.T @ B) @ PB.T             # r x m
    B_delta = -0.5 * GBproj + 0.375 * Q @ GBproj + G2.T - 0.5 * Q @ G2.T
    return A + A_delta @ Bhat.T, B + (Ahat @ B_delta).T


class PinvFactors:
    """``W = A B^T`` with maintained pseudo-inverses and their drift control.

    Parameters
    ----------
    A, B : ndarray (n x k), (m x k)
        Factors of full column rank (used in place by the kernels).
    PA, PB : ndarray or None
        ``(A^+)^T`` and ``(B^+)^T``; None: re-factor now (balanced factors,
        exact pseudo-inverses).
    check_every : int
        Steps between drift measurements.
    tol : float
        Re-factor when ``||A^+ A - I||_F`` or ``||B^+ B - I||_F`` exceeds it.
    owner : str
        Learner name for error messages.

    Attributes
    ----------
    A, B, PA, PB : ndarray
        Current factors and transposed pseudo-inverses (replaced, not
        modified, by a re-factoring: read them after :meth:`run`).
    n_refresh : int
        Re-factorings made (by drift or by an inapplicable Meyer update).
    drift : float
        Largest drift measured since :meth:`reset_drift`.
    """

    def __init__(self, A: np.ndarray, B: np.ndarray, PA: np.ndarray | None = None,
                 PB: np.ndarray | None = None, *, check_every: int = 1000,
                 tol: float = 1e-8, owner: str = "LORETA", n_refresh: int = 0):
        self.A, self.B = A, B
        self.check_every, self.tol, self.owner = int(check_every), float(tol), owner
        self.n_refresh = int(n_refresh)
        self.since_check = 0
        self.drift = 0.0
        if PA is None or PB is None:
            self.refactor(0)
        else:
            self.PA, self.PB = PA, PB

    def refactor(self, step: int) -> None:
        """Balanced factors and exact pseudo-inverses (W unchanged); a W that
        lost rank stops training with FloatingPointError."""
        try:
            self.A, self.B, self.PA, self.PB = balanced_factors(self.A, self.B)
        except np.linalg.LinAlgError:
            raise FloatingPointError(
                f"{self.owner}: W = A B^T lost rank {self.A.shape[1]} after step {step}; "
                "lower the step size (eta0) or the rank.") from None

    def measure(self) -> float:
        """``max(||A^+ A - I||_F, ||B^+ B - I||_F)`` now (O((n + m) k^2))."""
        return max(pinv_drift(self.A, self.PA), pinv_drift(self.B, self.PB))

    def check(self, step: int) -> None:
        """Measure the drift (recorded in ``drift``) and re-factor above ``tol``."""
        drift = self.measure()
        self.drift = max(self.drift, drift)
        if not drift <= self.tol:
            self.refactor(step)
            self.n_refresh += 1
        self.since_check = 0

    def reset_drift(self) -> None:
        self.drift = 0.0

    def exact(self) -> None:
        """Recompute exact pseudo-inverses of the current factors (after
        steps that do not maintain them, e.g. Algorithm 2)."""
        self.PA = pinv_full_column_rank(self.A)
        self.PB = pinv_full_column_rank(self.B)

    def run(self, kernel: Callable[["PinvFactors", int, int], tuple[int, int]], m: int,
            diverged: Callable[[int], Exception], step0: int = 0) -> None:
        """Drive ``kernel(self, start, stop) -> (t, flags)`` over steps
        ``0..m-1`` in chunks that end at the next drift check.

        ``flags`` as :func:`loreta1_triplet_steps`: 0 done up to ``t``;
        1/2/3 Meyer's update was inapplicable at step ``t - 1`` (re-factor,
        resume at ``t``); -1 non-finite scores at step ``t`` (raise
        ``diverged(step0 + t + 1)``).  At most ``m`` re-factorings plus
        ``m / check_every`` checks: every round makes progress or stops.
        """
        t = 0
        for _ in range(2 * m + 2):         # each round advances t or ends the run
            if t >= m:
                break
            stop = min(m, t + max(1, self.check_every - self.since_check))
            t_new, flags = kernel(self, t, stop)
            if flags < 0:
                raise diverged(step0 + t_new + 1)
            self.since_check += t_new - t
            t = t_new
            if flags > 0:
                self.refactor(step0 + t)
                self.n_refresh += 1
            if self.since_check >= self.check_every:
                self.check(step0 + t)
