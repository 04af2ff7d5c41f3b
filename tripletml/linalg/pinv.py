"""Full-column-rank factors, their pseudo-inverses and Meyer's rank-one
pseudo-inverse update (LORETA, Theorem 1; the multi-label rankers).

The drift control built on these kernels (when to re-factor) is one class,
:class:`tripletml.algorithms.loreta.kernels.PinvFactors`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

from tripletml.linalg._flags import FAST

__all__ = ["PinvFactors", "pinv_full_column_rank", "balanced_factors", "pinv_drift",
           "rank_one_update_with_pinv", "pinv_update_prepare", "pinv_update_apply"]


def pinv_full_column_rank(A: np.ndarray) -> np.ndarray:
    """``(A^+)^T`` of a full-column-rank ``A`` (n x k) by a thin QR:
    ``A = QR``, ``A^+ = R^-1 Q^T``, returned transposed as ``Q R^-T`` (n x k)
    so that rows stay contiguous.  O(n k^2)."""
    Q, R = np.linalg.qr(A, mode="reduced")
    return np.ascontiguousarray(np.linalg.solve(R, Q.T).T)


def balanced_factors(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, ...]:
    """Re-factor ``W = A B^T`` (rank k) as ``W = A' B'^T`` with balanced,
    orthogonal-column factors ``A' = Q_A U S^(1/2)``, ``B' = Q_B V S^(1/2)``
    (thin QRs ``A = Q_A R_A``, ``B = Q_B R_B`` and the SVD
    ``R_A R_B^T = U S V^T``), and return ``(A', B', (A'^+)^T, (B'^+)^T)`` with
    the exact pseudo-inverses ``Q_A U S^(-1/2)``, ``Q_B V S^(-1/2)``.
    W is unchanged; ``cond(A') = cond(B') = sqrt(cond(W))``, the smallest
    possible.  O((n + m) k^2)."""
    QA, RA = np.linalg.qr(A, mode="reduced")
    QB, RB = np.linalg.qr(B, mode="reduced")
    U, s, Vt = np.linalg.svd(RA @ RB.T)
    if s[-1] <= 0.0:
        raise np.linalg.LinAlgError("W = A B^T has lost rank")
    r = np.sqrt(s)
    QAU, QBV = QA @ U, QB @ Vt.T
    return (np.ascontiguousarray(QAU * r), np.ascontiguousarray(QBV * r),
            np.ascontiguousarray(QAU / r), np.ascontiguousarray(QBV / r))


def pinv_drift(A: np.ndarray, PT: np.ndarray) -> float:
    """``||A^+ A - I_k||_F`` for ``PT = (A^+)^T``: how far a maintained
    pseudo-inverse has drifted (0 for the exact one).  O(n k^2)."""
    k = A.shape[1]
    return float(np.linalg.norm(PT.T @ A - np.eye(k)))


@njit(cache=True, nogil=True, fastmath=FAST)
def rank_one_update_with_pinv(A, PT, c, d, u, h):
    """In place ``A <- A + c d^T`` and ``PT <- ((A + c d^T)^+)^T``.

    Meyer (1973), Theorem 5, for a full-column-rank ``A`` (n x k; then
    ``v = d^T (I - A^+ A) = 0``) and ``beta = 1 + d^T A^+ c != 0``:

        kv = A^+ c,  h = d^T A^+,  u = c - A kv,  s = ||h||^2 ||u||^2 + beta^2,
        (A + c d^T)^+ = A^+ + (1/beta) A^+ h^T u^T - (beta/s) p q^T,
        p = -(||u||^2/beta) A^+ h^T - kv,   q = -(||h||^2/beta) u - h^T.

    Cost O(n k) in three passes (PT read; A read+write; PT read+write).
    ``u`` and ``h`` are length-n work vectors.  Returns False (and leaves
    ``PT`` stale, A updated) when ``|beta|`` is too small for the formula;
    the caller then recomputes the pseudo-inverse.
    """
    n, k = A.shape
    kv = np.zeros(k)
    Ah = np.zeros(k)
    hh = pinv_update_prepare(PT, PT, c, d, h, kv, Ah, np.zeros(k), 0.0)
    return pinv_update_apply(A, PT, c, d, u, h, kv, Ah, hh)


@njit(cache=True, nogil=True, fastmath=FAST)
def pinv_update_prepare(S, PT, c, d, h, kv, Ah, w, fa):
    """Pass 1 of Meyer's update over the rows of ``PT = (A^+)^T``:
    ``h = PT d``, ``kv = PT^T c``, ``Ah = PT^T h``; returns ``||h||^2``.
    With ``fa != 0`` the vector c is completed on the fly,
    ``c_i += fa * (S_i . w)``, so a caller whose c depends on a row-wise
    product (LORETA-1's A_delta, B_delta) needs no extra pass."""
    n, k = PT.shape
    hh = 0.0
    for i in range(n):
        if fa != 0.0:
            acc = 0.0
            for j in range(k):
                acc += S[i, j] * w[j]
            c[i] += fa * acc
        hi = 0.0
        for j in range(k):
            hi += PT[i, j] * d[j]
        h[i] = hi
        hh += hi * hi
        ci = c[i]
        for j in range(k):
            kv[j] += PT[i, j] * ci
            Ah[j] += PT[i, j] * hi
    return hh


@njit(cache=True, nogil=True, fastmath=FAST)
def pinv_update_apply(A, PT, c, d, u, h, kv, Ah, hh):
    """Passes 2-3 of Meyer's update: ``A += c d^T`` (with ``u = c - A kv``),
    then ``PT`` by Theorem 5.  False when ``|beta|`` is too small."""
    n, k = A.shape
    beta = 1.0
    for j in range(k):
        beta += d[j] * kv[j]
    uu = 0.0
    for i in range(n):
        s = 0.0
        for j in range(k):
            s += A[i, j] * kv[j]
        ui = c[i] - s
        u[i] = ui
        uu += ui * ui
        ci = c[i]
        for j in range(k):
            A[i, j] += ci * d[j]
    if abs(beta) < 1e-10:
        return False
    sigma = hh * uu + beta * beta
    p = -(uu / beta) * Ah - kv
    a1 = 1.0 / beta
    a2 = beta / sigma
    for i in range(n):
        qi = -(hh / beta) * u[i] - h[i]
        f1 = u[i] * a1
        f2 = a2 * qi
        for j in range(k):
            PT[i, j] += f1 * Ah[j] - f2 * p[j]
    return True


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

        ``flags`` as :func:`tripletml.algorithms.loreta.kernels.loreta1_triplet_steps`: 0 done up to ``t``;
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
