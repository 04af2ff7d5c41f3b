"""SML (Ying, Huang & Campbell, "Sparse metric learning via smooth
optimization", NIPS 2009): the problem and its two solvers.

Eq. (4), equivalent by Lemma 1 to the mixed (2,1)-norm model (3), with alpha
the paper's gamma:

    min_{M PSD}  sum_tau (1 + x_ij^T M x_ij - x_kj^T M x_kj)_+ + alpha (tr M)^2,

over triplets tau = (i, j, k) with (x_i, x_j) similar and (x_j, x_k)
dissimilar (the library's ``(query, positive, negative)`` triplet is
``(j, i, k)``: ``x_ij = x_pos - x_query``, ``x_kj = x_neg - x_query``).

* :class:`SMLProblem` -- the data: ``X_tau = x_kj x_kj^T - x_ij x_ij^T``,
  the operator ``A u = sum_tau u_tau X_tau`` (formed as ``X^T C X`` with a
  sparse n x n ``C``: matrix products, no loop building d x d matrices), the
  margins ``<X_tau, M>``, the objective (4) and ``phi_mu`` of the saddle form
  (7) smoothed by ``- mu ||M||_F^2`` (eq. 12), whose maximizer is Lemma 3's
  (:func:`tripletml.linalg.eig_update.solve_lemma3`).
* :class:`SmoothSolver` -- SMLsm, Table 1: Nesterov's optimal scheme on
  ``phi_mu(u)`` over ``u in [0, 1]^T`` with ``Q2 = {M PSD, tr M <= sqrt(T /
  alpha)}``, the averaged primal iterate ``M^(t)``, the duality gap of the
  smoothed problem ``f(M^(t)) + mu ||M^(t)||_F^2 + phi_mu(z^(t)) >= 0`` (the
  stopping certificate, per triplet) and, for information, that of (7),
  ``f(M^(t)) + phi(z^(t)) >= 0``.
* :class:`SubgradientSolver` -- SMLgd, projected subgradient descent on (4),
  the paper's baseline.

Each solver has ``iterate(t)`` (one iteration; returns the objective of its
primal iterate and the duality gap or None), ``M`` (the primal iterate) and
``step()``, the training driver's protocol (:mod:`tripletml.engine`).
Every loop is bounded (the line search stops at the paper's Lipschitz
constant, which satisfies its descent condition) and a non-finite
intermediate value raises SML's FloatingPointError with advice.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tripletml.linalg.eig_update import project_psd, solve_lemma3
from tripletml.linalg.sparse_rows import rowwise_dot
from tripletml.losses import triplet_hinge_array
from tripletml.engine.driver import StepReport
from tripletml.linalg.triplet_dml import TripletDMLProblem

__all__ = ["SMLProblem", "SmoothSolver", "SubgradientSolver", "sml_rank", "sml_criterion", "LINE_SEARCH_START",
           "LINE_SEARCH_DECREASE", "MAX_BACKTRACKS", "MARGIN_ROWS_RATIO"]

#: the backtracking line search starts from this fraction of the paper's
#: Lipschitz constant ``L = sum ||X_tau||_F^2 / (2 mu)``
LINE_SEARCH_START = 1e-4
#: at the start of each iteration the line search's estimate of L is first
#: multiplied by this factor (never below its starting value), then doubled
#: until the descent condition holds: the estimate follows the local
#: curvature down as well as up (issue 27: with an estimate that could only
#: grow, the scheme needed 1,000-6,000 iterations where it now needs 30-500)
LINE_SEARCH_DECREASE = 0.5
#: cap on the doublings of one line search (the paper's L is reached after
#: log2(1 / LINE_SEARCH_START) < 14 of them and always satisfies the test)
MAX_BACKTRACKS = 64
#: :meth:`SMLProblem.margins` goes through the rows the triplets use when
#: they are fewer than this many times the number of triplets T (the direct
#: form multiplies the 2T difference rows)
MARGIN_ROWS_RATIO = 1.5
_SCALE_ADVICE = "scale the features down (e.g. StandardScaler)"


def _overflow(what: str) -> FloatingPointError:
    return FloatingPointError(f"SML: training diverged ({what} is not finite in float64); "
                              f"{_SCALE_ADVICE}.")


def _rowwise(A, B) -> np.ndarray:
    if hasattr(A, "multiply"):
        return np.asarray(A.multiply(B).sum(1)).ravel()
    return np.einsum("ij,ij->i", A, B)


class SMLProblem:
    """Eq. (4) and the saddle form (7) on ``(X, triplets)`` with weight alpha.

    Raises FloatingPointError when ``sum_tau ||X_tau||_F^2`` overflows:
    the features are too large for any of the solvers' quantities (they
    are fourth powers of the feature scale).
    """

    def __init__(self, X, triplets: np.ndarray, alpha: float):
        # rows a = x_query - x_pos = -x_ij, b = x_query - x_neg = -x_kj (signs cancel)
        self.dml = TripletDMLProblem(X, triplets)
        self.X, self.m, self.d = X, self.dml.m, self.dml.d
        self.alpha = float(alpha)
        #: the radius of Q2: tr M <= sqrt(T / alpha)
        self.radius = float(np.sqrt(self.m / self.alpha))
        self.Da, self.Db = self.dml.diffs(slice(None))
        with np.errstate(over="ignore", invalid="ignore"):
            na, nb, ab = (_rowwise(self.Da, self.Da), _rowwise(self.Db, self.Db),
                          _rowwise(self.Da, self.Db))
            #: ``||X_tau||_F^2`` per triplet
            self.tau_norms2 = na ** 2 + nb ** 2 - 2.0 * ab ** 2
            total = float(np.sum(self.tau_norms2))
        if not np.isfinite(total):
            raise _overflow("sum_tau ||X_tau||_F^2")
        self._C = self._S = None                # built at the first A(u)
        # margins through the rows the triplets use when they are fewer than
        # the 2T difference rows (see :meth:`margins`)
        used = np.unique(self.dml.t)
        self._XU = None
        if used.size < MARGIN_ROWS_RATIO * self.m:
            pos = np.searchsorted(used, self.dml.t)
            self._XU = X[used]
            self._tq, self._tp, self._tn = pos[:, 0], pos[:, 1], pos[:, 2]
            self._Dnp = self.Da - self.Db       # x_neg - x_pos

    def lipschitz(self, mu: float) -> float:
        """The paper's Lipschitz constant of grad phi_mu, ``sum ||X_tau||_F^2
        / (2 mu)``."""
        return float(np.sum(self.tau_norms2)) / (2.0 * mu)

    def _build_C(self) -> None:
        """The fixed sparsity pattern of the n x n ``C`` of :meth:`A` and the
        sparse map ``S`` (nnz(C) x T) with ``C.data = S u``: the triplets do
        not change during a fit, so ``C`` is assembled once and only its
        values are recomputed per call (assembling a scipy.sparse matrix
        from coordinates, with its sort and duplicate sum, cost more than
        the products themselves)."""
        t = self.dml.t
        i, j, k = t[:, 0], t[:, 1], t[:, 2]
        # C = sum_tau u_tau [(e_i - e_j)(e_i - e_j)^T - (e_i - e_k)(e_i - e_k)^T]
        #   = sum_tau u_tau [e_j e_j^T - e_k e_k^T - e_i e_j^T - e_j e_i^T
        #                    + e_i e_k^T + e_k e_i^T]   (the e_i e_i^T terms cancel)
        rows = np.concatenate([j, k, i, j, i, k])
        cols = np.concatenate([j, k, j, i, k, i])
        sign = np.repeat([1.0, -1.0, -1.0, -1.0, 1.0, 1.0], self.m)
        tau = np.tile(np.arange(self.m), 6)
        n = self.X.shape[0]
        keys, slot = np.unique(rows * n + cols, return_inverse=True)   # CSR order
        self._S = sp.csr_matrix((sign, (slot.ravel(), tau)), shape=(keys.size, self.m))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // n, minlength=n), out=indptr[1:])
        self._C = sp.csr_matrix((np.zeros(keys.size), (keys % n).astype(np.int64), indptr),
                                shape=(n, n))

    def A(self, u: np.ndarray) -> np.ndarray:
        """``A u = sum_tau u_tau X_tau = -(X^T C X)`` (dense d x d)."""
        G = self.A_sum(u)
        G = 0.5 * (G + G.T)
        if not np.isfinite(G).all():
            raise _overflow("A u = sum_tau u_tau X_tau")
        return G

    def A_sum(self, u: np.ndarray) -> np.ndarray:
        """``-(X^T C X)`` before symmetrization and the finiteness check of
        :meth:`A`: a sum over the triplets, so the parts of disjoint sets of
        triplets add up (:mod:`tripletml.distributed.gradient_sums`)."""
        if self._C is None:
            self._build_C()
        C = self._C
        C.data[:] = self._S @ u
        CX = C @ self.X
        CX = CX.toarray() if hasattr(CX, "toarray") else np.asarray(CX)
        return -np.asarray(self.X.T @ CX)

    def margins(self, M: np.ndarray) -> np.ndarray:
        """``<X_tau, M> = x_kj^T M x_kj - x_ij^T M x_ij`` for every triplet.

        With ``S = (M + M^T) / 2`` (the same quadratic form) this is
        ``x_n^T S x_n - x_p^T S x_p - 2 x_q^T S (x_n - x_p)`` for the triplet
        ``(q, p, n)``: one product ``X_U S`` over the rows U the triplets use
        instead of the two products with the 2T difference rows, when U has
        fewer than ``MARGIN_ROWS_RATIO * T`` rows (small training sets)."""
        if self._XU is None:
            return self.dml.sq_dists_dense(self.Db, M) - self.dml.sq_dists_dense(self.Da, M)
        S = 0.5 * (M + M.T)
        XS = np.asarray(self._XU @ S)
        quad = rowwise_dot(XS, self._XU)
        return quad[self._tn] - quad[self._tp] - 2.0 * rowwise_dot(XS[self._tq], self._Dnp)

    def objective(self, M: np.ndarray, margins: np.ndarray | None = None) -> float:
        """Eq. (4) at M (a sum over triplets, not a mean); ``margins``: the
        margins of M when known."""
        mg = self.margins(M) if margins is None else margins
        return float(np.sum(triplet_hinge_array(mg)) + self.alpha * np.trace(M) ** 2)

    def phi(self, u: np.ndarray, mu: float = 0.0, eig=None):
        """``phi_mu(u)`` (mu = 0: the exact phi of eq. 7) and its maximizer
        ``M_mu(u)`` over Q2 (Lemma 3; with mu = 0 all the mass goes on the
        top eigenvalue).  ``eig``: the ``eigh`` of ``A u`` when known."""
        lam, U = eig if eig is not None else np.linalg.eigh(self.A(u))
        R = self.radius
        if mu > 0:
            s = solve_lemma3(lam, self.alpha, mu, R)
        else:
            s = np.zeros_like(lam)
            top = int(np.argmax(lam))
            s[top] = min(max(lam[top] / (2 * self.alpha), 0.0), R)
        val = float(lam @ s - self.alpha * s.sum() ** 2 - mu * s @ s - np.sum(u))
        keep = s > 0
        return val, (U[:, keep] * s[keep]) @ U[:, keep].T


def sml_rank(M: np.ndarray, rank_tol: float) -> int:
    """Eigenvalues of the symmetric part of M above ``rank_tol`` times the
    largest (0 when no eigenvalue is positive): the history's ``rank``."""
    ev = np.linalg.eigvalsh(0.5 * (M + M.T))
    top = float(ev.max()) if ev.size else 0.0
    return int(np.sum(ev > rank_tol * top)) if top > 0 else 0


def sml_criterion(prev: float | None, f: float, gap: float | None,
                  scale: float | None = None) -> float:
    """The stopping criterion.  With a duality gap (smooth solver: the gap
    ``gap_mu`` of the smoothed problem (12) it solves) the gap relative to
    ``scale``, the objective at ``M = 0`` (``T``: every hinge is 1 there),
    i.e. the certified suboptimality per triplet in units of the margin;
    without one (subgradient solver) the relative change ``|prev - f| /
    |f|`` of the objective over the last iteration (inf at the first)."""
    if gap is not None:
        return float(gap / max(abs(f if scale is None else scale), 1e-12))
    return np.inf if prev is None else float(abs(prev - f) / max(abs(f), 1e-12))


class _Iterations:
    """The :mod:`tripletml.engine` protocol of both solvers: ``step()`` is
    one :meth:`iterate`, reporting the objective (watched), the gap of
    problem (4), the smoothed objective and its gap (smooth solver), the
    rank of the iterate (eigenvalues above ``rank_tol`` times the largest)
    and :func:`sml_criterion`."""

    rank_tol = 1e-8
    _prev = None
    _t = 0
    f_mu = gap_mu = gap = None

    def step(self, budget: int = 1) -> StepReport:
        t = self._t = self._t + 1
        f, gap = self.iterate(t)
        if not np.isfinite(f):
            raise FloatingPointError("SML: training diverged (non-finite objective); "
                                     "lower eta0 (solver='subgradient') or scale the "
                                     "features down.")
        if self.gap_mu is None:
            crit = sml_criterion(self._prev, f, None)
        else:
            crit = sml_criterion(None, self.f_mu, self.gap_mu, scale=self.problem.m)
        self._prev = f
        return StepReport(t=t, record=dict(objective=f, gap=gap, smoothed_objective=self.f_mu,
                                           smoothed_gap=self.gap_mu,
                                           rank=sml_rank(self.M, self.rank_tol)),
                          criterion=crit, watch=[(f, f"iteration {t}")])


class SmoothSolver(_Iterations):
    """SMLsm (Table 1): Nesterov's optimal scheme on the smoothed saddle
    form.  ``line_search=True``: start from :data:`LINE_SEARCH_START` times
    the paper's L; at each iteration first multiply the estimate by
    :data:`LINE_SEARCH_DECREASE` (not below the start), then double it
    whenever the descent condition ``phi_mu(z) <= phi_mu(u) + grad . (z - u)
    + L/2 ||z - u||^2`` fails, up to the paper's L (the backtracking the
    paper suggests, made adaptive both ways).  The Lemma 3 maximizer and
    the gaps do not depend on L: the stopping certificate
    (``gap_mu``, :attr:`gap_mu`) holds whatever the estimate."""

    #: what a checkpoint saves (:mod:`tripletml.engine.resume`)
    checkpoint_fields = ("L", "u", "M", "margins_M", "acc", "it", "gap", "f_mu", "gap_mu",
                         "_t", "_prev")

    def check_restored(self, n_iter: int) -> bool:
        """The iteration counters are the checkpoint's, ``L`` a positive
        estimate no larger than the paper's, ``u`` in the box [0, 1]."""
        return (self.it == self._t == n_iter and 0 < self.L <= self.lipschitz
                and bool(((self.u >= 0) & (self.u <= 1)).all()))

    def __init__(self, problem: SMLProblem, mu: float, line_search: bool = True):
        self.problem, self.mu, self.line_search = problem, float(mu), bool(line_search)
        #: the paper's Lipschitz constant
        self.lipschitz = problem.lipschitz(self.mu)
        #: the current estimate (the paper's without line search)
        self.L = self.lipschitz * LINE_SEARCH_START if line_search else self.lipschitz
        T = problem.m
        self.u0 = np.zeros(T)
        self.u = self.u0.copy()
        self.M = np.zeros((problem.d, problem.d))
        #: ``<X_tau, M>`` of the primal iterate (kept by linearity, no product)
        self.margins_M = np.zeros(T)
        self.acc = np.zeros(T)                  # sum_i (i + 1)/2 grad_i
        self.it = 0

    def _search(self, u, grad, phi_u):
        """Step 3 with the backtracking estimate of L; returns ``(z, eig)``
        with ``eig`` the ``eigh`` of ``A z`` when the search computed it
        (reused for the duality gap), else None."""
        if self.line_search:
            self.L = max(self.L * LINE_SEARCH_DECREASE, self.lipschitz * LINE_SEARCH_START)
        for _ in range(MAX_BACKTRACKS):
            z = np.clip(u - grad / self.L, 0.0, 1.0)
            if not self.line_search:
                return z, None
            eig = np.linalg.eigh(self.problem.A(z))
            phi_z, _ = self.problem.phi(z, self.mu, eig)
            if not np.isfinite(phi_z):
                raise _overflow("phi_mu in the line search")
            dz = z - u
            if phi_z <= phi_u + grad @ dz + 0.5 * self.L * dz @ dz + 1e-12 * abs(phi_u):
                return z, eig
            if self.L >= self.lipschitz:        # the paper's L: the test holds (round-off)
                return z, eig
            self.L = min(2.0 * self.L, self.lipschitz)
        return z, eig                           # pragma: no cover - L reaches the paper's

    def iterate(self, t: int | None = None):
        """One iteration of Table 1 (steps 2-5; ``t`` is ignored, the solver
        counts its own iterations); returns ``(f(M^(t)), gap)``."""
        p, it, u = self.problem, self.it, self.u
        eig = np.linalg.eigh(p.A(u))
        phi_u, Mmu = p.phi(u, self.mu, eig)
        if not np.isfinite(phi_u):
            raise _overflow("phi_mu")
        mg = p.margins(Mmu)
        grad = -1.0 + mg                                              # eq. (13)
        a, b = it / (it + 2.0), 2.0 / (it + 2.0)
        self.M = a * self.M + b * Mmu
        # the margins are linear in M: those of the averaged iterate follow
        # the same recursion (exact at it = 0, where a = 0)
        self.margins_M = a * self.margins_M + b * mg
        z, eig_z = self._search(u, grad, phi_u)
        self.acc += 0.5 * (it + 1.0) * grad
        v = np.clip(self.u0 - self.acc / self.L, 0.0, 1.0)             # step 4
        f = p.objective(self.M, self.margins_M)
        if eig_z is None:
            eig_z = np.linalg.eigh(p.A(z))
        #: the duality gap of the unsmoothed problem (4) / (7) (kept for
        #: information: it keeps the smoothing bias and need not reach tol)
        self.gap = f + p.phi(z, 0.0, eig_z)[0]
        #: the smoothed objective f_mu(M^(t)) = f + mu ||M||_F^2 (the primal of
        #: eq. 12) and its duality gap f_mu(M^(t)) + phi_mu(z^(t)) >= f_mu(M^(t))
        #: - min f_mu >= 0: the certificate of the problem the scheme solves
        self.f_mu = f + self.mu * float(np.sum(self.M * self.M))
        self.gap_mu = self.f_mu + p.phi(z, self.mu, eig_z)[0]
        self.u = (2.0 / (it + 3.0)) * v + ((it + 1.0) / (it + 3.0)) * z  # step 5
        self.it += 1
        return f, self.gap


class SubgradientSolver(_Iterations):
    """SMLgd: ``M <- Pi_PSD[M - eta_t g]``, g a subgradient of (4),
    ``eta_t = eta0 / sqrt(t)``."""

    checkpoint_fields = ("M", "_t", "_prev")

    def check_restored(self, n_iter: int) -> bool:
        return self._t == n_iter

    def __init__(self, problem: SMLProblem, eta0: float):
        self.problem, self.eta0 = problem, float(eta0)
        self.M = np.zeros((problem.d, problem.d))
        self.it = 0

    def iterate(self, t: int):
        """Iteration t (from 1); returns ``(f(M_t), None)``."""
        p, M = self.problem, self.M
        active = triplet_hinge_array(p.margins(M)) > 0
        G = -p.A(active.astype(float))          # sum_active (x_ij x_ij^T - x_kj x_kj^T)
        G[np.diag_indices_from(G)] += 2.0 * p.alpha * np.trace(M)
        Y = M - (self.eta0 / np.sqrt(t)) * G
        if not np.isfinite(Y).all():
            raise FloatingPointError("SML: training diverged (non-finite subgradient step); "
                                     "lower eta0 or scale the features down.")
        self.M = project_psd(Y)
        return p.objective(self.M), None
