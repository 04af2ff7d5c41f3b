"""Sparse metric learning by smooth optimisation (Ying, Huang & Campbell,
"Sparse metric learning via smooth optimization", NIPS 2009).

Solves eq. (4), equivalent by Lemma 1 to the mixed (2,1)-norm model (3),

    min_{M PSD}  sum_tau (1 + x_ij^T M x_ij - x_kj^T M x_kj)_+ + gamma (tr M)^2,

over triplets tau = (i, j, k) with (x_i, x_j) similar and (x_j, x_k)
dissimilar (the library's ``(query, positive, negative)`` triplet is
``(j, i, k)``: ``x_ij = x_pos - x_query``, ``x_kj = x_neg - x_query``).

``solver="smooth"`` (SMLsm, Table 1) works on the saddle form (7): with
``X_tau = x_kj x_kj^T - x_ij x_ij^T`` and ``A u = sum_tau u_tau X_tau``,
``phi(u) = -sum u + max_{M in Q2} <A u, M> - gamma (tr M)^2`` over
``u in [0, 1]^T``, ``Q2 = {M PSD, tr M <= sqrt(T / gamma)}``; it is smoothed
by ``- mu ||M||_F^2`` (eq. 12) and minimised by Nesterov's optimal scheme.
Step 2 (eq. 15) is solved by Lemma 3: the eigen-decomposition of ``A u``
(formed as ``X^T C X`` with a sparse n x n ``C``: matrix products, no loop
building d x d matrices) and the closed-form solution of the small problem
(16) (:func:`solve_lemma3`).  The primal iterate is the averaged
``M^(t)``; the duality gap ``f(M^(t)) + phi(z^(t)) >= 0`` is exact because
``phi`` itself has a closed form (mu = 0 puts all the mass on the top
eigenvalue).  ``solver="subgradient"`` (SMLgd) is projected subgradient
descent on (4), the paper's baseline.
"""
from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_choice_param, check_scalar_param
from ..base import History, MahalanobisMixin, TripletLearner
from ..linalg import project_psd
from ._dml_problem import TripletDMLProblem

__all__ = ["SML", "solve_lemma3"]


def solve_lemma3(lam: np.ndarray, gamma: float, mu: float, radius: float) -> np.ndarray:
    """Closed-form solution of Lemma 3's problem (16),

        max_s  lam . s - gamma (sum s)^2 - mu ||s||^2
        s.t.   s >= 0,  sum s <= radius,

    a strongly concave quadratic over a scaled simplex.  KKT: ``s_i =
    max(lam_i - theta, 0) / (2 mu)`` with ``theta = 2 gamma S + eta``, S =
    sum s and eta >= 0 the multiplier of the radius.  With the top-k
    eigenvalues active (sorted decreasingly, prefix sum c_k):
    ``theta = gamma c_k / (mu + gamma k)`` when the radius is slack, else
    ``theta = (c_k - 2 mu radius) / k``; the valid k is the one with
    ``lam_k > theta >= lam_{k+1}``.  O(d log d) for the sort.
    """
    lam = np.asarray(lam, dtype=float)
    if lam.ndim != 1 or not np.isfinite(lam).all():
        raise ValueError("solve_lemma3: lam must be a 1-d array of finite eigenvalues")
    for name, v in (("gamma", gamma), ("mu", mu), ("radius", radius)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"solve_lemma3: {name}={v!r} must be finite and > 0")
    if lam.size == 0 or lam.max() <= 0.0:
        return np.zeros_like(lam)
    order = np.argsort(-lam, kind="stable")
    ls = lam[order]
    csum = np.cumsum(ls)
    k = np.arange(1, ls.size + 1)
    nxt = np.append(ls[1:], -np.inf)
    theta_free = gamma * csum / (mu + gamma * k)
    ok = (ls > theta_free) & (theta_free >= nxt)
    theta = None
    if ok.any():
        kk = int(np.flatnonzero(ok)[0])
        th = theta_free[kk]
        if np.sum(np.maximum(ls - th, 0.0)) / (2.0 * mu) <= radius * (1 + 1e-12):
            theta = th
    if theta is None:                                   # the radius binds
        theta_r = (csum - 2.0 * mu * radius) / k
        ok = (ls > theta_r) & (theta_r >= nxt)
        theta = theta_r[int(np.flatnonzero(ok)[0])]
    s = np.zeros_like(lam)
    s[order] = np.maximum(ls - theta, 0.0) / (2.0 * mu)
    return s


class SML(MahalanobisMixin, TripletLearner):
    """Sparse (low-rank) Mahalanobis metric by smooth optimisation.

    Parameters
    ----------
    gamma : float, default=1e-2
        Weight of ``(tr M)^2`` (= ``||W||_(2,1)^2`` of model (3), Lemma 1).
    mu : float, default=1.0
        Smoothing parameter of eq. (12).  The smoothed objective is within
        ``mu T / gamma`` of the true one (the paper's bound, ``mu`` times the
        largest ``||M||_F^2`` on Q2), but the bias at the solution is ``mu
        ||M*||_F^2``, far smaller; the gradient's Lipschitz constant is
        ``O(1 / mu)``, so a larger mu converges much faster (on the UCI sets
        mu = 1-10 beats 1e-2 by several times at equal iterations).
    solver : {"smooth", "subgradient"}, default="smooth"
    max_iter : int, default=1000
    tol : float, default=1e-5
        Stop when the relative change of the objective of ``M^(t)`` over one
        iteration, or the relative duality gap (smooth solver), is below tol.
    n_triplets : int, default=1500
        Triplets sampled when ``fit`` gets labels (the paper's 1,500).
    sampling : {"random", "knn"}, default="random"
        Random class triplets or LMNN-style k-NN triplets (target neighbours
        and nearest impostors) from the labels.
    line_search : bool, default=True
        Smooth solver: start from ``1e-4`` times the paper's Lipschitz
        constant ``L = sum ||X_tau||_F^2 / (2 mu)`` and double the estimate
        whenever the descent condition ``phi_mu(z) <= phi_mu(u) + grad . (z -
        u) + L/2 ||z - u||^2`` fails (the backtracking the paper suggests);
        False uses the paper's L throughout (far slower in practice).
    eta0 : float, default=1e-2
        Subgradient solver: step ``eta0 / sqrt(t)``.
    rank_tol : float, default=1e-6
        Eigenvalues below ``rank_tol * max eigenvalue`` do not count in
        ``rank_`` and ``components_``.
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    M_ : ndarray (d, d)
        The learned PSD matrix.
    components_ : ndarray (rank_, d)
        ``diag(sqrt(s)) U^T`` over the surviving eigenvalues: ``transform``
        maps to the reduced dimension.
    rank_ : int
        The learned dimensionality.
    n_iter_ : int
    history_ : dict of lists
        Per iteration: ``step``, ``seconds``, ``objective`` (eq. 4 at the
        primal iterate), ``gap`` (smooth solver: ``f(M^(t)) + phi(z^(t))``),
        ``rank``.
    """

    def __init__(self, gamma=1e-2, mu=1.0, solver="smooth", max_iter=1000, tol=1e-5,
                 n_triplets=1500, sampling="random", line_search=True, eta0=1e-2,
                 rank_tol=1e-6, random_state=None, verbose=0):
        self.gamma = gamma
        self.mu = mu
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.n_triplets = n_triplets
        self.sampling = sampling
        self.line_search = line_search
        self.eta0 = eta0
        self.rank_tol = rank_tol
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_scalar_param(self.gamma, "gamma", self, kind="real", low=0, low_inclusive=False)
        check_scalar_param(self.mu, "mu", self, kind="real", low=0, low_inclusive=False)
        check_choice_param(self.solver, "solver", self, ("smooth", "subgradient"))
        check_scalar_param(self.max_iter, "max_iter", self, kind="int", low=1)
        check_scalar_param(self.tol, "tol", self, kind="real", low=0)
        check_scalar_param(self.n_triplets, "n_triplets", self, kind="int", low=1)
        check_choice_param(self.sampling, "sampling", self, ("random", "knn"))
        if not isinstance(self.line_search, (bool, np.bool_)):
            raise TypeError(f"SML: parameter line_search={self.line_search!r} must be a bool.")
        check_scalar_param(self.eta0, "eta0", self, kind="real", low=0, low_inclusive=False)
        check_scalar_param(self.rank_tol, "rank_tol", self, kind="real", low=0, high=1)

    def _prepare_fit(self, X, y=None, triplets=None):
        if triplets is None and y is not None and self.sampling == "knn":
            X2, _, rng = super()._prepare_fit(X, y, np.zeros((1, 3), dtype=int))
            from ..triplets import check_labels, knn_triplets
            check_labels(y, X2.shape[0], self)
            t = knn_triplets(X2, y, n_triplets=None, random_state=rng)
            if len(t) > self.n_triplets:
                t = t[rng.choice(len(t), self.n_triplets, replace=False)]
            return X2, t, rng
        return super()._prepare_fit(X, y, triplets)

    # ------------------------------------------------------------ pieces
    @staticmethod
    def _problem(X, t):
        # rows a = x_query - x_pos = -x_ij, b = x_query - x_neg = -x_kj (signs cancel)
        return TripletDMLProblem(X, t)

    def _A(self, prob, u):
        """``A u = sum_tau u_tau X_tau = -(X^T C X)`` (dense d x d)."""
        C = prob.sample_matrix(np.arange(prob.m), u, u)
        CX = C @ prob.X
        CX = CX.toarray() if hasattr(CX, "toarray") else np.asarray(CX)
        G = -np.asarray(prob.X.T @ CX)
        return 0.5 * (G + G.T)

    def _margins(self, prob, M):
        """``<X_tau, M> = x_kj^T M x_kj - x_ij^T M x_ij`` for every triplet."""
        Da, Db = prob.diffs(slice(None))
        return prob.sq_dists_dense(Db, M) - prob.sq_dists_dense(Da, M)

    def objective(self, X, triplets) -> float:
        """Eq. (4) at the fitted M (a sum over triplets, not a mean)."""
        check_is_fitted(self, "n_features_in_")
        X = self._check_fitted_X(X)
        from .._validation import check_triplets
        prob = self._problem(X, check_triplets(triplets, X.shape[0], self))
        return self._f(prob, self.M_)

    def _f(self, prob, M):
        return float(np.sum(np.maximum(1.0 - self._margins(prob, M), 0.0))
                     + self.gamma * np.trace(M) ** 2)

    def _phi(self, prob, u, mu=0.0, eig=None):
        """phi_mu(u) (mu = 0: the exact phi of eq. 7) and the maximiser."""
        lam, U = eig if eig is not None else np.linalg.eigh(self._A(prob, u))
        R = self._radius
        if mu > 0:
            s = solve_lemma3(lam, self.gamma, mu, R)
        else:                                   # all mass on the top eigenvalue
            s = np.zeros_like(lam)
            top = int(np.argmax(lam))
            s[top] = min(max(lam[top] / (2 * self.gamma), 0.0), R)
        val = float(lam @ s - self.gamma * s.sum() ** 2 - mu * s @ s - np.sum(u))
        keep = s > 0
        return val, (U[:, keep] * s[keep]) @ U[:, keep].T

    # ------------------------------------------------------------ solvers
    def _fit(self, X, triplets, rng):
        prob = self._problem(X, triplets)
        self._radius = float(np.sqrt(prob.m / self.gamma))           # Q2: tr M <= sqrt(T/gamma)
        hist = History(keys=("objective", "gap", "rank"))
        if self.solver == "smooth":
            M = self._fit_smooth(prob, hist)
        else:
            M = self._fit_subgradient(prob, hist)
        M = 0.5 * (M + M.T)
        ev, V = np.linalg.eigh(M)
        keep = ev > self.rank_tol * max(float(ev.max()), 0.0) if ev.max() > 0 else ev > np.inf
        self.M_ = M
        self.components_ = np.ascontiguousarray((V[:, keep] * np.sqrt(ev[keep])).T[::-1])
        self.rank_ = int(keep.sum())
        self.history_ = hist.data

    def _rank(self, M):
        ev = np.linalg.eigvalsh(M)
        return int(np.sum(ev > self.rank_tol * ev.max())) if ev.max() > 0 else 0

    def _converged(self, hist, f, gap):
        obj = hist.data["objective"]
        if gap is not None and gap <= self.tol * max(abs(f), 1e-12):
            return True
        return len(obj) >= 2 and abs(obj[-2] - f) <= self.tol * max(abs(f), 1e-12)

    def _fit_smooth(self, prob, hist):
        """Table 1 (Nesterov's optimal scheme on the smoothed saddle form)."""
        T = prob.m
        Da, Db = prob.diffs(slice(None))
        na = np.asarray(Da.multiply(Da).sum(1)).ravel() if hasattr(Da, "multiply") \
            else np.einsum("ij,ij->i", Da, Da)
        nb = np.asarray(Db.multiply(Db).sum(1)).ravel() if hasattr(Db, "multiply") \
            else np.einsum("ij,ij->i", Db, Db)
        ab = np.asarray(Da.multiply(Db).sum(1)).ravel() if hasattr(Da, "multiply") \
            else np.einsum("ij,ij->i", Da, Db)
        xnorm2 = na ** 2 + nb ** 2 - 2.0 * ab ** 2                    # ||X_tau||_F^2
        L = float(np.sum(xnorm2)) / (2.0 * self.mu)
        self.lipschitz_ = L
        if self.line_search:
            L = L * 1e-4
        u0 = np.zeros(T)
        u = u0.copy()
        M_avg = np.zeros((prob.d, prob.d))
        acc = np.zeros(T)                       # sum_i (i + 1)/2 grad_i
        it = 0
        for it in progress(range(self.max_iter), total=self.max_iter, verbose=self.verbose,
                           desc="SML", unit="it"):
            eig = np.linalg.eigh(self._A(prob, u))
            phi_u, Mmu = self._phi(prob, u, self.mu, eig)
            grad = -1.0 + self._margins(prob, Mmu)                    # eq. (13)
            M_avg = (it / (it + 2.0)) * M_avg + (2.0 / (it + 2.0)) * Mmu
            while True:
                z = np.clip(u - grad / L, 0.0, 1.0)                   # step 3
                if not self.line_search:
                    break
                phi_z, _ = self._phi(prob, z, self.mu)
                dz = z - u
                if phi_z <= phi_u + grad @ dz + 0.5 * L * dz @ dz + 1e-12 * abs(phi_u):
                    break
                L *= 2.0
            acc += 0.5 * (it + 1.0) * grad
            v = np.clip(u0 - acc / L, 0.0, 1.0)                       # step 4
            f = self._f(prob, M_avg)
            gap = f + self._phi(prob, z)[0]
            if not np.isfinite(f):
                raise FloatingPointError("SML: training diverged (non-finite objective).")
            hist.record(it + 1, objective=f, gap=gap, rank=None)
            if self._converged(hist, f, gap):
                break
            u = (2.0 / (it + 3.0)) * v + ((it + 1.0) / (it + 3.0)) * z  # step 5
        self.n_iter_ = it + 1
        self.lipschitz_final_ = L
        return M_avg

    def _fit_subgradient(self, prob, hist):
        """SMLgd: ``M <- Pi_PSD[M - eta_t g]``, g a subgradient of (4)."""
        M = np.zeros((prob.d, prob.d))
        it = 0
        for it in progress(range(1, self.max_iter + 1), total=self.max_iter,
                           verbose=self.verbose, desc="SMLgd", unit="it"):
            active = (1.0 - self._margins(prob, M)) > 0
            u = active.astype(float)
            G = -self._A(prob, u)                   # sum_active (x_ij x_ij^T - x_kj x_kj^T)
            G[np.diag_indices_from(G)] += 2.0 * self.gamma * np.trace(M)
            M = project_psd(M - (self.eta0 / np.sqrt(it)) * G)
            f = self._f(prob, M)
            if not np.isfinite(f):
                raise FloatingPointError("SML: training diverged (non-finite objective); "
                                         "lower eta0.")
            hist.record(it, objective=f, gap=None, rank=None)
            if self._converged(hist, f, None):
                break
        self.n_iter_ = it
        return M
