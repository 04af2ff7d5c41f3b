"""COMET solvers (Atzmon, Shalit & Chechik, "Learning sparse metrics, one
feature at a time"): the state and math of dense COMET (Algorithm 1) and
sparse COMET (Algorithm 2), apart from the estimators in
:mod:`tripletml.algorithms.comet.estimator`.

Both minimize eq. (2),

    L(W) = sum_t l(lambda_t) - alpha log det W + (beta / 2) ||W||_F^2,
    lambda_t = 1 + q_t^T W (p_t^- - p_t^+)      (Appendix C, eq. 12),

with the hinge, squared hinge or log loss of eq. (1); sparse COMET adds the
group lasso ``lambda sum_k ||V_k||_F`` of eq. (7) (``group_alpha``).

A solver owns, for one data set and one triplet set:

* ``W`` (d x d, PD), ``W_inv`` (its inverse, Woodbury-maintained, Appendix
  B) and ``R`` (the upper Cholesky root, ``W = R^T R``, by rank-one update
  and downdate);
* ``linear_terms`` (every triplet's ``lambda_t``, the cache of Appendix C);
* a CSC copy of X for column access, made once when the solver is built (a
  solver never outlives its X, so the cache cannot go stale).

Public entry points: :meth:`COMETSolver.step`, :meth:`~COMETSolver.refactor`,
:meth:`~COMETSolver.objective`, :meth:`~COMETSolver.loss_sum`,
:meth:`~COMETSolver.coordinate_gradient`, and for sparse COMET
:meth:`SparseCOMETSolver.diagonal_step` and
:meth:`~SparseCOMETSolver.active_features`.

Positive definiteness in floating point.  The Schur bound keeps every
iterate PD in exact arithmetic; each step is further shortened (halved)
until ``||W||_F tr(W^-1) <= PD_COND_LIMIT`` (a bound on the condition
number, :class:`tripletml.linalg.pd_updates.RowColumnConditioning`), so the
smallest eigenvalue never falls to rounding level, whatever ``alpha``,
``eta0`` and ``step_fraction``; the Cholesky up/downdate certifies each
step once more.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg import lapack

from tripletml.linalg._flags import FAST
from tripletml.linalg.pd_updates import (PD_COND_LIMIT, RowColumnConditioning, chol_update_downdate,
                                 inverse_row_column_update, row_column_update,
                                 schur_coefficients, schur_step_bound)
from tripletml.linalg.sparse_rows import rowwise_dot
from tripletml.engine.stopping import relative_change
from tripletml.losses import triplet_hinge_array
from tripletml.engine.driver import StepReport, deadline_passed
from tripletml.engine.threads import factor_work, limit_threads

__all__ = ["COMETSolver", "SparseCOMETSolver", "comet_loss", "comet_loss_derivative",
           "group_prox", "linear_terms", "LOSSES"]

LOSSES = ("hinge", "squared_hinge", "log")

#: halvings of a step before it is skipped (the step is then ~1e-18 of its start)
MAX_HALVINGS = 60


def comet_loss(lam: np.ndarray, loss: str) -> np.ndarray:
    """Per-triplet loss of eq. (1) as a function of the linear term
    ``lambda = 1 - q^T W p+ + q^T W p-`` (Appendix A).

    With the margin ``S(q, p+) - S(q, p-) = 1 - lambda`` the hinge
    ``[lambda]_+`` is :func:`tripletml.losses.triplet_hinge_array` of the
    margin, the squared hinge its square; the log loss is
    ``log(1 + exp(lambda - 1))``.
    """
    if loss == "hinge":
        return triplet_hinge_array(1.0 - lam)
    if loss == "squared_hinge":
        return triplet_hinge_array(1.0 - lam) ** 2
    return np.logaddexp(0.0, lam - 1.0)  # log(1 + exp(-q'Wp+ + q'Wp-))


#: a zero group whose gradient norm is within this factor of lambda stays zero
#: (eq. 16's test to rounding: ``group_alpha="auto"`` sets lambda to a group's
#: own norm, summed by a blocked product, and the group's step sums it again)
ZERO_GROUP_RTOL = 1.0 + 1e-12

#: groups whose zero test one product screens (:meth:`SparseCOMETSolver._screened_norm`)
SCREEN_BLOCK = 64
#: coordinate steps between two looks at the training deadline
#: (:func:`tripletml.engine.training_deadline`): an epoch on wide rows takes
#: seconds, and a racer cut at the time budget stops within this many steps
DEADLINE_EVERY = 64

#: entries of a block of gradient rows in :meth:`SparseCOMETSolver.group_gradient_norms` (16 MiB)
_NORM_BLOCK_ENTRIES = 1 << 21

#: :func:`shifted_loss_sum`'s code of each loss
_LOSS_CODE = {"hinge": 0, "squared_hinge": 1, "log": 2}


@njit(cache=True, nogil=True, fastmath=FAST)
def _shifted_loss_sum(lam, step, a, code):
    # one branch-free loop per loss (vectorised; the sum reassociated);
    # codes 3-5: the same losses of lam itself (no step)
    total = 0.0
    if code >= 3:
        for t in range(lam.shape[0]):
            x = lam[t]
            if code == 3:
                total += max(x, 0.0)
            elif code == 4:
                y = max(x, 0.0)
                total += y * y
            else:
                z = x - 1.0
                total += max(z, 0.0) + np.log1p(np.exp(-abs(z)))
        return total
    if code == 0:
        for t in range(lam.shape[0]):
            total += max(lam[t] + a * step[t], 0.0)
    elif code == 1:
        for t in range(lam.shape[0]):
            x = max(lam[t] + a * step[t], 0.0)
            total += x * x
    else:                               # log(1 + exp(x - 1)), as np.logaddexp
        for t in range(lam.shape[0]):
            z = lam[t] + a * step[t] - 1.0
            total += max(z, 0.0) + np.log1p(np.exp(-abs(z)))
    return total


@njit(cache=True, nogil=True)
def _diagonal_terms(xk, tq, tp, tn, lam, code):
    """For feature k on a diagonal W, in one pass over the triplets:
    ``qd_t = x_qk (x_nk - x_pk)`` (how ``W_kk`` moves ``lambda_t``) and the
    loss part of ``g_kk``, ``sum_t l'(lambda_t) qd_t``
    (:func:`comet_loss_derivative`'s formulas; ``code`` of
    :data:`_LOSS_CODE`)."""
    qd = np.empty(tq.shape[0])
    g = 0.0
    for t in range(tq.shape[0]):
        v = xk[tq[t]] * (xk[tn[t]] - xk[tp[t]])
        qd[t] = v
        x = lam[t]
        if code == 0:
            c = 1.0 if x > 0.0 else 0.0
        elif code == 1:
            c = 2.0 * max(x, 0.0)
        else:
            c = 0.5 * (1.0 + np.tanh(0.5 * (x - 1.0)))
        g += c * v
    return qd, g


@njit(cache=True, nogil=True)
def _diagonal_search(lam, qd, dk, base, w, alpha, beta, fro_sq, tr_inv, cond_now, limit, code,
                     halvings):
    """The backtracking of :meth:`SparseCOMETSolver.diagonal_step`: ``dk``
    halved until ``W_kk + 2 dk`` does not raise the objective and keeps the
    bound ``||W||_F tr(W^-1)`` below ``limit`` (or not above ``cond_now``).
    Returns ``(dk, ||W||_F^2, tr(W^-1))`` after the step, or ``dk = 0``
    when no trial is accepted."""
    for _ in range(halvings):
        w_new = w + 2.0 * dk
        change = (_shifted_loss_sum(lam, qd, 2.0 * dk, code) - base
                  - alpha * np.log(w_new / w) + 0.5 * beta * (w_new * w_new - w * w))
        fro = fro_sq + w_new * w_new - w * w
        tr = tr_inv + 1.0 / w_new - 1.0 / w
        cond = np.sqrt(max(fro, 0.0)) * tr
        if change <= 0.0 and (cond <= limit or cond <= cond_now):
            return dk, fro, tr
        dk *= 0.5
    return 0.0, fro_sq, tr_inv


@njit(cache=True, nogil=True)
def _moved_terms(lam, step, a, code):
    """``lambda + a step`` (a new array) and its loss sum (as
    :func:`shifted_loss_sum` with no step)."""
    out = np.empty(lam.shape[0])
    for t in range(lam.shape[0]):
        out[t] = lam[t] + a * step[t]
    return out, _shifted_loss_sum(out, out, 0.0, code + 3)


def shifted_loss_sum(lam: np.ndarray, step: np.ndarray | None, a: float, loss: str) -> float:
    """``sum_t l(lambda_t + a step_t)``: eq. (1)'s loss along a step that
    moves the linear terms linearly (one pass, no (n_triplets,) temporary;
    equal to ``comet_loss(lam + a * step).sum()`` up to the summation's
    rounding).  ``a = 0`` (or ``step`` None) sums the terms themselves
    (an infinite term stays infinite, not ``0 x inf``)."""
    if step is None or a == 0.0:
        return float(_shifted_loss_sum(lam, lam, 0.0, _LOSS_CODE[loss] + 3))
    return float(_shifted_loss_sum(lam, step, float(a), _LOSS_CODE[loss]))


def comet_loss_derivative(lam: np.ndarray, loss: str) -> np.ndarray:
    """``l'(lambda)`` (Appendix A; the hinge's subgradient is 0 at 0)."""
    if loss == "hinge":
        return (lam > 0).astype(float)
    if loss == "squared_hinge":
        return 2.0 * np.maximum(lam, 0.0)
    return 0.5 * (1.0 + np.tanh(0.5 * (lam - 1.0)))  # sigmoid(lambda - 1), stable


def linear_terms(X, W: np.ndarray, triplets: np.ndarray) -> np.ndarray:
    """``lambda_t = 1 + q_t^T W (p_t^- - p_t^+)`` for every triplet (Appendix
    C), from ``X W`` in chunks of triplets (never an (n_triplets, d) array);
    its products inside the thread rule of their own work."""
    t = np.asarray(triplets)
    n, d = X.shape
    stored = X.nnz if sp.issparse(X) else n * d
    gram = n * n <= t.shape[0]      # answers about few items: the n x n Gram X W X^T
    with limit_threads(float(stored) * d + (float(n) * n * d if gram else 0.0)):
        XW = np.asarray(X @ W)
        if gram:
            G = np.asarray((X @ XW.T).T) if sp.issparse(X) else XW @ X.T
    if gram:
        return 1.0 + (G[t[:, 0], t[:, 2]] - G[t[:, 0], t[:, 1]])
    out = np.empty(t.shape[0])
    step = max(1, (8 * 2**20) // (8 * X.shape[1]))
    for a in range(0, t.shape[0], step):
        c = t[a:a + step]
        out[a:a + step] = 1.0 + rowwise_dot(XW[c[:, 0]], X[c[:, 2]] - X[c[:, 1]])
    return out


def _inverse_from_root(R: np.ndarray, name: str) -> np.ndarray:
    """``W^-1`` from the upper Cholesky root ``R`` (``W = R^T R``; LAPACK's
    potri, a third of the flops of solving against the identity)."""
    inv, info = lapack.dpotri(R, lower=0)
    if info != 0:
        raise FloatingPointError(f"{name}: W lost positive definiteness in floating point; "
                                 "raise alpha or lower eta0 / step_fraction.")
    _mirror_upper(inv)
    return inv.T        # potri's array is column-major; its (symmetric) transpose is row-major


@njit(cache=True, nogil=True)
def _mirror_upper(M):
    """In place: the strict lower triangle of M becomes that of its upper
    triangle's transpose (potri fills the upper triangle only)."""
    for i in range(M.shape[0]):
        for j in range(i):
            M[i, j] = M[j, i]


def group_prox(v: np.ndarray, g: np.ndarray, theta: float, lam: float) -> np.ndarray:
    """Closed-form solution of eq. (8) for one group (eq. 16).

    A group ``V = e_k v^T + v e_k^T`` (v with a zero at k) has
    ``||V||_F = sqrt(2) ||v||``; with ``H = V_k - theta G_k`` the minimizer of
    ``<G_k, V> + ||V - V_k||_F^2 / (2 theta) + lam ||V||_F`` is
    ``H [1 - theta lam / ||H||_F]_+``.  (Eq. 16 prints the threshold as lam:
    that is the case theta = 1.)  ``g`` is the gradient row, so that
    ``G_k = e_k g^T + g e_k^T``."""
    return (v - theta * g) * group_prox_factor(v, g, theta, lam)


def group_prox_factor(v: np.ndarray, g: np.ndarray, theta: float, lam: float) -> float:
    """The factor ``s = [1 - theta lam / ||H||_F]_+`` of :func:`group_prox`
    (``V_k^new = s H``; 1 when ``H = 0``): the new group is ``s (v - theta
    g)``, linear in ``v`` and ``g`` for a given s."""
    nh = np.sqrt(2.0) * np.linalg.norm(v - theta * g)
    return 1.0 if nh == 0.0 else max(0.0, 1.0 - theta * lam / nh)


class COMETSolver:
    """Dense COMET (Algorithm 1) on one data set: block-coordinate steps on
    row and column k of W inside the PD cone.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix (n, d)
    triplets : int ndarray (m, 3)
        ``(q, p+, p-)`` row indices into X.
    alpha : float
        Log-det barrier weight (alpha in eq. 2).
    beta : float
        Frobenius weight (beta in eq. 2).
    loss : {"hinge", "squared_hinge", "log"}
        ``l`` of eq. (1).
    step_fraction : float in (0, 1)
        Fraction of the largest PD-preserving step (the root of eq. 11).
    eta0 : float
        Upper limit on the step eta.
    W : ndarray (d, d), optional
        Starting point (PD; default ``scale`` times the identity,
        Algorithm 1 line 2).
    scale : float > 0, default=1.0
        The start ``scale I`` when ``W`` is None (set with its inverse and
        root directly: no factorisation).
    name : str
        The estimator's name, for error messages.

    Attributes
    ----------
    W, W_inv, R : ndarray (d, d)
        The iterate, its inverse and its upper Cholesky root.
    linear_terms : ndarray (m,)
        ``lambda_t`` of every triplet at W.
    n_steps : int
        Coordinate steps taken (skipped ones included).
    n_limited : int
        Steps shortened to keep ``cond(W)`` below the PD guard's limit.
    """

    def __init__(self, X, triplets, *, alpha: float = 1.0, beta: float = 1e-3,
                 loss: str = "hinge", step_fraction: float = 0.5, eta0: float = 1.0,
                 W: np.ndarray | None = None, scale: float = 1.0, name: str = "COMET"):
        self.X = X
        self.t = np.asarray(triplets)
        # the columns q, p+, p- as contiguous index arrays: np.bincount copies
        # a strided index array on every call (8x slower on digits' 10,000
        # triplets); the values and the order of every sum are unchanged
        self._tq, self._tp, self._tn = (np.ascontiguousarray(self.t[:, j]) for j in range(3))
        self._gathers = None
        self.alpha, self.beta, self.loss = float(alpha), float(beta), loss
        self.step_fraction, self.eta0 = float(step_fraction), float(eta0)
        self.name = name
        self.d = X.shape[1]
        self._csc = X.tocsc() if sp.issparse(X) else None
        self.n_steps = 0
        self.n_limited = 0
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"{name}: the start's scale must be finite and > 0, got {scale}.")
        if W is None:
            self.W = np.eye(self.d)
            self.W_inv = np.eye(self.d)
            self.R = np.eye(self.d)
            if scale != 1.0:
                self.W *= scale
                self.W_inv /= scale
                self.R *= np.sqrt(scale)
            self.linear_terms = linear_terms(X, self.W, self.t)
            self._track()
            self._applied = 0           # updates since W^-1 and R were exact
        else:
            self.W = np.array(W, dtype=float)
            self.R = None
            self.refactor()

    # ------------------------------------------------------------ state
    @property
    def linear_terms(self) -> np.ndarray:
        """``lambda_t`` of every triplet at W (Appendix C's cache)."""
        return self._lam

    @linear_terms.setter
    def linear_terms(self, lam: np.ndarray) -> None:
        # every quantity derived from the linear terms (the loss sum, its
        # derivative, the Gram form) is recomputed on demand after a change
        self._lam = lam
        self._derived = {}

    def _cached(self, key: str, make):
        d = self._derived
        if key not in d:
            d[key] = make()
        return d[key]

    def _loss_derivative(self) -> np.ndarray:
        """``c_t = l'(lambda_t)``, computed once per change of the linear terms."""
        return self._cached("c", lambda: comet_loss_derivative(self._lam, self.loss))

    def _gram_form(self) -> np.ndarray | None:
        """The symmetric n x n weights ``B = A + A^T``, ``A[q_t, p-_t] += c_t``,
        ``A[q_t, p+_t] -= c_t``: the loss part of the gradient's row k is
        ``1/2 X^T B x_k`` (eq. 12 summed over the triplets; ``x_k`` column
        k of X), O(n^2 + nnz(X)) a row instead of O(n_triplets).  Used when
        there are more triplets than entries of B (answers about few items);
        None otherwise (the per-triplet route)."""
        n = self.X.shape[0]
        if n * n > self.t.shape[0]:
            return None

        def make():
            c = self._loss_derivative()
            base = self._tq * n
            A = (np.bincount(base + self._tn, c, n * n)
                 - np.bincount(base + self._tp, c, n * n)).reshape(n, n)
            return A + A.T
        return self._cached("B", make)

    def _track(self) -> None:
        """Exact ``||W||_F^2`` and ``tr(W^-1)`` for the PD guard."""
        self.fro_sq = float(np.sum(self.W * self.W))
        self.tr_inv = float(np.trace(self.W_inv))

    @property
    def cond_bound(self) -> float:
        """``||W||_F tr(W^-1)``, an upper bound on ``cond_2(W)`` (kept below
        :data:`tripletml.linalg.pd_updates.PD_COND_LIMIT`)."""
        return RowColumnConditioning.bound(self.fro_sq, self.tr_inv)

    def _step_work(self) -> float:
        """The thread rule's work (:mod:`tripletml.engine.threads`) of one
        coordinate step: the level-2 updates of W, W^-1 and R (``d^2``) and
        a screen's block of group norms (``SCREEN_BLOCK n d``).  An epoch's
        steps run under it; the rare larger calls inside (:meth:`refactor`,
        the Gram form's ``B X``) declare their own."""
        n, d = float(self.X.shape[0]), float(self.d)
        return d * d + SCREEN_BLOCK * n * d

    def refactor(self) -> None:
        """Exact ``W^-1``, Cholesky root and linear terms from W (clears the
        drift of the Woodbury and root updates)."""
        self._refactor()

    def _refactor(self) -> None:
        """:meth:`refactor`, each call inside the thread rule of its own
        work: the Cholesky factorization and potri by their panels, the
        linear terms' ``X W`` (and Gram ``X W X^T``) by their products."""
        self.W = 0.5 * (self.W + self.W.T)
        with limit_threads(factor_work(self.d, self.d)):
            self._factor_W()
        self.linear_terms = linear_terms(self.X, self.W, self.t)
        self._track()
        self._applied = 0

    def _factor_W(self) -> None:
        """``R`` and ``W^-1`` from ``W`` (a W rounded to the boundary of the
        cone falls back on its last root)."""
        try:
            L = np.linalg.cholesky(self.W)
        except np.linalg.LinAlgError:  # rounding took W to the boundary: keep the root
            if self.R is None:
                raise ValueError(f"{self.name}: the starting W is not positive definite.")
            self.W = self.R.T @ self.R
            try:
                L = np.linalg.cholesky(self.W)
            except np.linalg.LinAlgError:
                raise FloatingPointError(
                    f"{self.name}: W lost positive definiteness in floating point; "
                    "raise alpha or lower eta0 / step_fraction.") from None
        self.R = np.ascontiguousarray(L.T)
        self.W_inv = _inverse_from_root(self.R, self.name)

    def column(self, k: int) -> np.ndarray:
        """Column k of X as a dense n-vector."""
        if self._csc is None:
            return np.ascontiguousarray(self.X[:, k], dtype=float)
        C = self._csc
        out = np.zeros(C.shape[0])
        a, b = C.indptr[k], C.indptr[k + 1]
        out[C.indices[a:b]] = C.data[a:b]
        return out

    def _column_gathers(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(q_tk, p-_tk - p+_tk)`` over the triplets: the k-th coordinates
        that the gradient row and the step's change of the linear terms
        share (kept for the last k: one coordinate step uses them 2-4 times)."""
        if self._gathers is None or self._gathers[0] != k:
            xk = self.column(k)
            self._gathers = (k, xk[self._tq], xk[self._tn] - xk[self._tp])
        return self._gathers[1], self._gathers[2]

    # ------------------------------------------------------- objective
    def loss_sum(self) -> float:
        """``sum_t l(lambda_t)`` at W (from the cached linear terms)."""
        return self._cached("loss", lambda: shifted_loss_sum(self._lam, None, 0.0, self.loss))

    def penalty(self) -> float:
        """Regularizer beyond eq. (2) (the group lasso of sparse COMET)."""
        return 0.0

    def objective(self) -> float:
        """Eq. (2) at W (plus :meth:`penalty`), log det from the root."""
        loss = self.loss_sum()
        logdet = 2.0 * np.sum(np.log(np.abs(np.diag(self.R))))
        return (loss - self.alpha * logdet + 0.5 * self.beta * float(np.sum(self.W * self.W))
                + self.penalty())

    def coordinate_gradient(self, k: int) -> np.ndarray:
        """Row k of the gradient of eq. (2) (eq. 3 / 12), from the linear terms.

        With ``c_t = l'(lambda_t)`` it is ``1/2 X^T (w + v) - alpha W^-1 e_k
        + beta W e_k`` where the sample weights ``w, v`` gather ``c_t`` times
        the k-th coordinates of the triplets' rows: O(n_triplets + nnz(X))."""
        B = self._gram_form()
        if B is not None:
            data = np.asarray(self.X.T @ (B @ self.column(k))).ravel()
            return 0.5 * data - self.alpha * self.W_inv[k] + self.beta * self.W[k]
        tq, tp, tn = self._tq, self._tp, self._tn
        c = self._loss_derivative()
        xq, dxp = self._column_gathers(k)
        n = self.X.shape[0]
        a = c * xq                                # c_t q_tk
        w = np.bincount(tn, a, n) - np.bincount(tp, a, n)   # -> sum c q_k dp
        b = c * dxp                               # c_t dp_tk
        v = np.bincount(tq, b, n)                 # -> sum c dp_k q
        data = np.asarray(self.X.T @ (w + v)).ravel()
        return 0.5 * data - self.alpha * self.W_inv[k] + self.beta * self.W[k]

    def _check_gradient(self, g: np.ndarray, where: str | None = None) -> None:
        """Raise the estimator's FloatingPointError when the gradient row is
        not finite or so large that its squared norm overflows (every step
        quantity -- Schur coefficients, Frobenius norm -- would be inf)."""
        with np.errstate(over="ignore", invalid="ignore"):
            ok = bool(np.isfinite(g).all()) and np.isfinite(float(g @ g))
        if not ok:
            raise FloatingPointError(
                f"{self.name}: training diverged (non-finite or overflowing gradient at "
                f"{where or f'step {self.n_steps}'}); scale the features down or lower eta0.")

    def _guard(self, k: int, u: np.ndarray, eta: float, Wu: np.ndarray | None) -> float:
        """``eta``, halved until the step keeps ``cond(W)`` below the guard's
        limit (0 when no step does)."""
        cond = RowColumnConditioning(self.W, self.W_inv, k, u, Wu)
        if cond.accepts(eta, self.fro_sq, self.tr_inv):
            return eta
        self.n_limited += 1
        for _ in range(MAX_HALVINGS):
            eta *= 0.5
            if cond.accepts(eta, self.fro_sq, self.tr_inv):
                return eta
        return 0.0

    def _root_from_W(self) -> None:
        try:
            with limit_threads(factor_work(self.d, self.d)):
                self.R = np.ascontiguousarray(np.linalg.cholesky(self.W).T)
        except np.linalg.LinAlgError:
            raise FloatingPointError(
                f"{self.name}: W lost positive definiteness in floating point at step "
                f"{self.n_steps}; raise alpha or lower eta0 / step_fraction.") from None

    def _linear_change(self, k: int, u: np.ndarray) -> np.ndarray:
        """``d lambda_t / d eta`` for the step ``eta (e_k u^T + u e_k^T)``:
        ``q_k (u . dp) + (q . u) dp_k`` (the linear terms are linear in eta)."""
        tq, tp, tn = self._tq, self._tp, self._tn
        s = np.asarray(self.X @ u).ravel()
        xq, dxp = self._column_gathers(k)
        return xq * (s[tn] - s[tp]) + s[tq] * dxp

    def _apply(self, k: int, u: np.ndarray, eta: float, Wu: np.ndarray | None,
               dlam: np.ndarray | None = None) -> bool:
        """``W <- W + eta (e_k u^T + u e_k^T)`` with the root, the inverse and
        the linear terms (``dlam``: :meth:`_linear_change` when known).  The
        root's downdate certifies positive definiteness in floating point:
        when it fails (R partly modified), R is refactored from W and False
        is returned (nothing else moved)."""
        e = np.zeros_like(u)
        e[k] = 1.0
        wx, wy = np.empty_like(u), np.empty_like(u)
        # eta (e u^T + u e^T) = 1/2 [(e + eta u)(e + eta u)^T - (e - eta u)(e - eta u)^T]
        if not chol_update_downdate(self.R, (e + eta * u) / np.sqrt(2.0),
                                    (e - eta * u) / np.sqrt(2.0), wx, wy):
            self._root_from_W()
            return False
        # linear terms: lambda += eta (q_k (u . dp) + (q . u) dp_k)
        self.linear_terms += eta * (self._linear_change(k, u) if dlam is None else dlam)
        self.fro_sq += 4.0 * eta * float(self.W[k] @ u) + 2.0 * eta * eta * (
            float(u @ u) + float(u[k]) ** 2)
        row_column_update(self.W, k, u, eta)
        inverse_row_column_update(self.W_inv, k, u, eta, Wu=Wu)
        self.tr_inv = float(np.trace(self.W_inv))
        self._applied += 1
        return True

    def coordinate_step(self, k: int) -> float:
        """One coordinate step on feature k (Algorithm 1, lines 5-7).

        Moves row and column k along ``u = -grad_k L`` (eq. 3 / 12) by
        ``eta = min(step_fraction * eta_max, eta0)``, ``eta_max`` the
        Schur-complement bound of eq. (10)-(11); the step is halved while it
        would push ``cond(W)`` past the PD guard's limit, while it would
        increase the objective eq. (2) (monotone descent, below), or while
        the Cholesky downdate says the result is not PD in floating point.
        Returns ``eta_max``.

        Monotone descent: Algorithm 1 takes the Schur-bounded step as it is.
        With the (sub)gradient of a hinge loss the step does not shrink near
        the minimum, so the objective oscillated from epoch to epoch (wine at
        the defaults: 14 increases in 39 epochs, relative changes 0.4-0.7
        after 40 epochs) and its relative change -- the stopping criterion
        -- never became small.  The change of eq. (2) along the step is exact
        and cheap: the linear terms move linearly in eta (``dlam``, one
        product ``X u``), ``det`` by the Schur factor ``(a0 + 2 a1 eta - a2
        eta^2) / a0`` of :func:`schur_coefficients` and ``||W||_F^2`` by
        ``4 eta W_k.u + 2 eta^2 (u.u + u_k^2)``; the step is halved (at
        most :data:`MAX_HALVINGS` times, O(n_triplets) each) until the
        objective does not increase, as sparse COMET's proximal step does
        (Algorithm 2).  A coordinate where no step decreases the objective
        (a kink of the hinge) is left unchanged."""
        self.n_steps += 1
        u = -self.coordinate_gradient(k)
        self._check_gradient(u)
        bound, Wu = schur_step_bound(self.W, self.W_inv, k, u, return_Wu=True)
        eta = min(self.step_fraction * bound, self.eta0)
        if not (eta > 0 and np.isfinite(eta)):
            return bound
        eta = self._guard(k, u, eta, Wu)
        if not eta > 0.0:
            return bound
        dlam = self._linear_change(k, u)
        a0, a1, a2, _ = schur_coefficients(self.W_inv, k, u)
        base = self.loss_sum()
        wku, uu = float(self.W[k] @ u), float(u @ u) + float(u[k]) ** 2
        for _ in range(MAX_HALVINGS):
            if not eta > 0.0:
                return bound
            det_ratio = (a0 + 2.0 * a1 * eta - a2 * eta * eta) / a0 if a0 > 0 else 0.0
            if det_ratio > 0.0:
                change = (shifted_loss_sum(self.linear_terms, dlam, eta, self.loss)
                          - base - self.alpha * np.log(det_ratio)
                          + 0.5 * self.beta * (4.0 * eta * wku + 2.0 * eta * eta * uu))
                if change <= 0.0 and self._apply(k, u, eta, Wu, dlam):
                    return bound
            eta *= 0.5
        return bound  # no decrease along this coordinate: W unchanged

    # ---------------------------------------------- the training protocol
    def _refactor_due(self) -> bool:
        """Every ``refactor_every`` coordinate steps (Algorithm 1 updates W
        on nearly every step), unless no update was applied since the last
        exact factorisation (nothing drifted)."""
        return self.n_steps % self._every == 0 and self._applied > 0

    def start(self, rng: np.random.Generator, refactor_every: int | None = None) -> None:
        """Prepare the epochs of :meth:`step`: coordinate orders drawn from
        ``rng``, the exact refactorisation every ``refactor_every`` (default
        d) steps, :meth:`_refactor_due`."""
        self._rng = rng
        self._every = int(refactor_every or self.d)
        self._prev = self.objective()
        self.epoch = 0

    def step(self, budget: int = 1) -> StepReport:
        """One epoch (:mod:`tripletml.engine` protocol): a coordinate step
        on every feature in a random order (Algorithm 1, lines 4-8).  Reports
        the loss sum (watched), the objective of eq. (2), its relative change
        (the criterion) and the smallest Schur bound of the epoch."""
        if getattr(self, "_rng", None) is None:
            raise RuntimeError(f"{self.name}: call start(rng) before step().")
        min_bound, cut = np.inf, False
        self._order = self._rng.permutation(self.d)
        self._place = np.argsort(self._order)          # k's position in the epoch's order
        with limit_threads(self._step_work()):
            for i, k in enumerate(self._order):
                min_bound = min(min_bound, self.coordinate_step(int(k)))
                if self._refactor_due():
                    self.refactor()
                if i % DEADLINE_EVERY == DEADLINE_EVERY - 1 and deadline_passed():
                    cut = True  # AutoSimilarity's time budget: the run stops after this epoch
                    break
        self.epoch += 1
        if not np.isfinite(self.W).all():
            raise FloatingPointError(f"{self.name}: training diverged (W became NaN/inf); "
                                     "lower eta0 or scale the features down.")
        loss = self.loss_sum()                 # >= 0: the divergence watch's quantity
        obj = self.objective()                 # may be < 0 (-alpha log det W): finite only
        watch = [(loss, f"epoch {self.epoch}")]
        if not np.isfinite(obj):
            watch.append((np.nan, f"epoch {self.epoch} (objective)"))
        change, self._prev = relative_change(self._prev, obj), obj
        if cut:                     # a part of an epoch: its change is no convergence test
            change = None
        return StepReport(t=self.n_steps, criterion=change, watch=watch,
                          record=dict(loss=loss, min_step_bound=min_bound, objective=obj))


class SparseCOMETSolver(COMETSolver):
    """Sparse COMET (Algorithm 2): ``W = V_0 + sum_k V_k`` with ``V_0``
    diagonal and ``V_k`` the off-diagonal row and column k; group-lasso
    coefficient ``group_alpha`` (lambda in eq. 7), largest proximal step
    ``eta0`` (theta-bar in Algorithm 2).

    * :meth:`diagonal_step` (Algorithm 2, line 3) optimizes ``W_kk`` while W
      is still diagonal, in O(n_triplets).
    * :meth:`step` solves the proximal problem eq. (8) in closed form
      (:func:`group_prox`); a zero group whose gradient satisfies
      ``sqrt(2) ||g|| <= lambda`` stays zero for every step size and is
      skipped after one gradient row.
    * PD safeguard (Appendix E): ``theta <= step_fraction * eta_max`` of the
      plain step ``-G_k`` (Schur bound), and the update is skipped when the
      origin ``O = W - V_k`` is not PD (``n_skipped``); then ``V_k^new``
      lies between O and ``H`` and W stays PD by convexity.  The conditioning
      guard of :class:`COMETSolver` applies to every accepted update.
    * The step starts at ``eta0`` and is halved until the objective
      ``L(W) + lambda sum_k ||V_k||_F`` does not increase (its change along
      the group is exact: cached linear terms, the Schur complement for
      log det, the group norms), so the objective is monotone.

    Attributes
    ----------
    V : ndarray (d, d)
        Row k holds the free entries of group ``V_k`` (zero at k).
    n_skipped : int
        Group updates skipped because O was not PD.
    """

    def __init__(self, X, triplets, *, alpha: float = 1.0, beta: float = 1e-3,
                 loss: str = "hinge", group_alpha: float | None = 1.0,
                 max_start_groups: int | None = None, step_fraction: float = 0.5,
                 eta0: float = 1.0, scale: float = 1.0, name: str = "SparseCOMET"):
        super().__init__(X, triplets, alpha=alpha, beta=beta, loss=loss,
                         step_fraction=step_fraction, eta0=eta0, scale=scale, name=name)
        if (group_alpha is None) == (max_start_groups is None):
            raise ValueError(f"{name}: give exactly one of group_alpha and max_start_groups.")
        self.group_alpha = None if group_alpha is None else float(group_alpha)
        self.max_start_groups = max_start_groups
        self.V = np.zeros((self.d, self.d))
        self.n_skipped = 0

    def penalty(self) -> float:
        """``lambda sum_k ||V_k||_F`` (eq. 7), ``||V_k||_F = sqrt(2) ||v_k||``."""
        return float(np.sqrt(2.0) * self.group_alpha * np.linalg.norm(self.V, axis=1).sum())

    def active_features(self) -> np.ndarray:
        """Features whose group ``V_k`` is non-zero."""
        return np.flatnonzero(np.linalg.norm(self.V, axis=1) > 0)

    # change of the objective for W <- W + e_k d^T + d e_k^T ---------------
    def _delta_objective(self, k, d, Wd=None):
        a0, a1, a2, Wd = schur_coefficients(self.W_inv, k, d, Wd)
        q1 = a0 + 2.0 * a1 - a2
        if not (a0 > 0.0 and q1 > 0.0):
            return np.inf, None, Wd
        s = np.asarray(self.X @ d).ravel()
        xq, dxp = self._column_gathers(k)
        dl = xq * (s[self._tn] - s[self._tp]) + s[self._tq] * dxp
        change = shifted_loss_sum(self.linear_terms, dl, 1.0, self.loss) - self.loss_sum()
        lam_new = self.linear_terms + dl
        change -= self.alpha * np.log(q1 / a0)
        # ||W + D||^2 - ||W||^2 = 2 <W, D> + ||D||^2, D = e_k d^T + d e_k^T
        inner = 2.0 * float(self.W[k] @ d)
        sq = 2.0 * float(d @ d) + 2.0 * float(d[k]) ** 2
        change += 0.5 * self.beta * (2.0 * inner + sq)
        return change, lam_new, Wd

    def _apply_group(self, k, d, lam_new, Wd=None):
        """W <- W + e_k d^T + d e_k^T with W^-1, the root and the cache.  A
        failed downdate (the result not PD in floating point; R partly
        modified) refactors R from the unchanged W and returns False, as
        :meth:`COMETSolver._apply` (no copy of R per step: a third of a
        step's time at d = 4,096)."""
        e = np.zeros_like(d)
        e[k] = 1.0
        wx, wy = np.empty_like(d), np.empty_like(d)
        if not chol_update_downdate(self.R, (e + d) / np.sqrt(2.0), (e - d) / np.sqrt(2.0),
                                    wx, wy):
            self._root_from_W()
            return False
        self.linear_terms = lam_new
        self.fro_sq += 4.0 * float(self.W[k] @ d) + 2.0 * (float(d @ d) + float(d[k]) ** 2)
        row_column_update(self.W, k, d, 1.0)
        inverse_row_column_update(self.W_inv, k, d, 1.0, Wu=Wd)
        self.tr_inv = float(np.trace(self.W_inv))
        self._applied += 1
        return True

    def start(self, rng: np.random.Generator, refactor_every: int | None = None) -> None:
        """Algorithm 2, line 3: a pass over the diagonal, then the epochs
        (with ``max_start_groups``, lambda is set between the two by
        :meth:`start_threshold`)."""
        with limit_threads(self._step_work()):
            for k in rng.permutation(self.d):
                self.diagonal_step(int(k))
        if self.group_alpha is None:
            self.group_alpha = self.start_threshold(self.max_start_groups)
        super().start(rng, refactor_every)

    def _refactor_due(self) -> bool:
        """Once ``refactor_every`` group updates have been applied since the
        last exact factorisation: most steps of a sparse fit leave W
        unchanged (a zero group staying zero) and add no rounding drift, and
        the diagonal pass keeps W^-1 and R exact, so neither is counted (an
        O(d^3) refactorisation per epoch would dominate a sparse fit on wide
        rows)."""
        return self._applied >= self._every

    def group_gradient_norms(self) -> np.ndarray:
        """``||G_k||_F = sqrt(2) ||g_k||`` of every group at the current W
        (``g_k`` the gradient row k without its diagonal entry): group k
        leaves zero on its next step iff this exceeds lambda (eq. 16)."""
        if self._gram_form() is None:
            out = np.empty(self.d)
            for k in range(self.d):
                g = self.coordinate_gradient(k)
                g[k] = 0.0
                out[k] = np.sqrt(2.0) * np.linalg.norm(g)
            return out
        step = max(1, min(self.d, _NORM_BLOCK_ENTRIES // max(self.d, 1)))
        return np.concatenate([self._norms_of(np.arange(k0, min(self.d, k0 + step)))
                               for k0 in range(0, self.d, step)])

    def _norms_of(self, ks: np.ndarray) -> np.ndarray:
        """The group norms of the features ``ks`` by one product through the
        Gram form (which must apply): the rows ``1/2 x_k^T B X - alpha
        W^-1[k] + beta W[k]`` (:meth:`coordinate_gradient`'s)."""
        X, B = self.X, self._gram_form()
        n, d = float(X.shape[0]), float(self.d)
        with limit_threads(n * n * d):
            BX = self._cached("BX", lambda: np.asarray((X.T @ B).T) if sp.issparse(X)
                              else B @ X)
        cols = self._csc[:, ks].T if sp.issparse(X) else X[:, ks].T
        with limit_threads(ks.size * n * d):
            G = 0.5 * np.asarray(cols @ BX) - self.alpha * self.W_inv[ks] + self.beta * self.W[ks]
        G[np.arange(ks.size), ks] = 0.0
        return np.sqrt(2.0) * np.linalg.norm(G, axis=1)

    def _screened_norm(self, k: int) -> float:
        """Group k's norm for the zero test of :meth:`coordinate_step`, from
        the norms of the next :data:`SCREEN_BLOCK` groups of the epoch's
        order computed together (kept until the linear terms, and with them
        W, next change); ``inf`` (no screen) without the Gram form."""
        if self._gram_form() is None:
            return np.inf
        screen = self._derived.get("screen")
        if screen is None or k not in screen:
            order = getattr(self, "_order", None)
            if order is None or order[self._place[k]] != k:
                ks = np.array([k])
            else:
                ks = order[self._place[k]:self._place[k] + SCREEN_BLOCK]
            screen = dict(zip(ks.tolist(), self._norms_of(ks).tolist()))
            self._derived["screen"] = screen
        return screen[k]

    def start_threshold(self, n_groups: int) -> float:
        """The lambda under which exactly ``n_groups`` groups (the largest
        gradients, ties aside) can leave zero at the current W: the
        ``(n_groups + 1)``-th largest of :meth:`group_gradient_norms` (0
        when there are no more groups)."""
        norms = self.group_gradient_norms()
        if n_groups >= self.d:
            return 0.0
        return float(np.partition(norms, self.d - n_groups - 1)[self.d - n_groups - 1])

    def diagonal_step(self, k: int) -> None:
        """Algorithm 2, line 3, for feature k: a backtracked step on ``W_kk``.

        While this pass runs W is diagonal (it starts at I and only its
        diagonal moves), so W^-1 and the root are diagonal too and the step
        costs O(n_triplets): ``g_kk = sum_t c_t q_tk dp_tk - alpha / W_kk +
        beta W_kk`` (eq. 3 at (k, k)); ``W_kk += 2 d_k`` moves the linear
        terms by ``2 d_k q_tk dp_tk`` and log det W by
        ``log(1 + 2 d_k / W_kk)``.  The step is halved until the objective
        does not increase and ``cond(W)`` stays below the PD guard's limit.
        """
        code = _LOSS_CODE[self.loss]
        qd, g_loss = _diagonal_terms(self.column(k), self._tq, self._tp, self._tn, self._lam, code)
        w = float(self.W[k, k])
        g = g_loss - self.alpha / w + self.beta * w
        self._check_gradient(np.array([g, w]), f"the diagonal pass, feature {k}")
        # W_kk + 2 d_k > 0 keeps W PD; stay a step_fraction inside
        dk = max(-0.5 * self.eta0 * g, -0.5 * self.step_fraction * w)
        cond_now = RowColumnConditioning.bound(self.fro_sq, self.tr_inv)
        dk, fro, tr = _diagonal_search(self._lam, qd, dk, self.loss_sum(), w, self.alpha,
                                       self.beta, self.fro_sq, self.tr_inv, cond_now,
                                       PD_COND_LIMIT, code, 40)
        if dk != 0.0:
            w_new = w + 2.0 * dk
            self.linear_terms, loss = _moved_terms(self._lam, qd, 2.0 * dk, code)
            self._derived["loss"] = loss
            self.W[k, k] = w_new
            self.W_inv[k, k] = 1.0 / w_new
            self.R[k, k] = np.sqrt(w_new)
            self.fro_sq, self.tr_inv = fro, tr

    def coordinate_step(self, k: int) -> float:
        """One proximal group step on feature k (Algorithm 2, lines 5-14).
        Returns the Schur bound of the plain step (``inf`` when the group
        stays zero, 0 when it was skipped)."""
        self.n_steps += 1
        v = self.V[k]
        active = bool(v.any())
        limit = self.group_alpha * ZERO_GROUP_RTOL
        if not active and self._screened_norm(k) <= limit:
            return np.inf
        g = self.coordinate_gradient(k)
        self._check_gradient(g)
        g[k] = 0.0
        # ||H(theta)||_F <= theta lambda for every theta: stays zero (to rounding:
        # the auto lambda is a group's norm from a product summed otherwise)
        if not active and np.sqrt(2.0) * np.linalg.norm(g) <= limit:
            return np.inf
        # every step d = s (v - theta g) - v is a combination of v and g (v_k =
        # g_k = 0), so one pass over W^-1 gives W^-1 d for all of them
        Wv, Wg = (self.W_inv @ np.stack([v, g], axis=1)).T if active else \
            (np.zeros_like(v), self.W_inv @ g)
        if active and not schur_step_bound(self.W, self.W_inv, k, -v, Wu=-Wv) > 1.0:
            self.n_skipped += 1  # the origin O = W - V_k is not PD (Appendix E)
            return 0.0
        bound = schur_step_bound(self.W, self.W_inv, k, -g, Wu=-Wg)
        theta = min(self.eta0, self.step_fraction * bound)
        penalty = np.sqrt(2.0) * self.group_alpha
        for _ in range(40):
            s = group_prox_factor(v, g, theta, self.group_alpha)
            v_new = (v - theta * g) * s
            d = v_new - v
            if not d.any():
                return bound
            change, lam_new, Wd = self._delta_objective(k, d, (s - 1.0) * Wv - (s * theta) * Wg)
            change += penalty * (np.linalg.norm(v_new) - np.linalg.norm(v))
            if change <= 0.0:
                ok = RowColumnConditioning(self.W, self.W_inv, k, d, Wd).accepts(
                    1.0, self.fro_sq, self.tr_inv)
                if not ok:
                    self.n_limited += 1
                elif self._apply_group(k, d, lam_new, Wd):
                    self.V[k] = v_new
                    return bound
            theta *= 0.5
        return bound
