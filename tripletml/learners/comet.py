"""Dense COMET: block-coordinate descent inside the PD cone (Atzmon, Shalit &
Chechik, "Learning sparse metrics, one feature at a time", Algorithm 1).

Minimises eq. (2),

    L(W) = sum_t l(lambda_t) - alpha log det W + (beta / 2) ||W||_F^2,
    lambda_t = 1 + q_t^T W (p_t^- - p_t^+),

with the hinge, squared hinge or log loss of eq. (1), over PD matrices W.
Each coordinate step picks a feature k (a random permutation per epoch) and
moves row and column k of W along ``u = -grad_k L`` (eq. 3 / 12):
``W <- W + eta (e_k u^T + u e_k^T)``.

* The coordinate gradient uses a cached array of every triplet's linear term
  ``lambda_t``: with ``c_t = l'(lambda_t)`` it is
  ``1/2 X^T (w + v) - alpha W^-1 e_k + beta W e_k`` where the sample weights
  ``w, v`` gather ``c_t`` times the k-th coordinates of the triplets' rows --
  O(n_triplets + nnz(X)) per step, never a pass with full d x d products.
  After the step the cache moves by ``eta (q_k (u . dp) + (q . u) dp_k)``
  (one product ``X u``).
* ``eta = min(step_fraction * eta_max, step_size)`` where ``eta_max`` is the
  largest step keeping W PD, from the Schur-complement condition eq. (10)-(11)
  (:func:`tripletml.linalg.schur_step_bound`); ``step_fraction < 1`` keeps
  the iterates strictly inside the cone.
* ``W^-1`` follows by the Woodbury identity (Appendix B) and an upper
  Cholesky root R (``W = R^T R``) by a rank-one update and downdate, so
  ``transform`` embeds samples at any time; both are refactored from scratch
  every ``refactor_every`` steps (default: once per epoch of d steps), and
  so is the cache of linear terms.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from .._progress import progress
from .._validation import check_choice_param, check_scalar_param
from ..base import BilinearMixin, History, TripletLearner
from ..linalg import (chol_update_downdate, inverse_row_column_update,
                      row_column_update, rowwise_dot, schur_coefficients, schur_step_bound)

__all__ = ["COMET", "SparseCOMET", "group_prox", "comet_loss", "comet_loss_derivative"]


def comet_loss(lam: np.ndarray, loss: str) -> np.ndarray:
    """Per-triplet loss of eq. (1) as a function of the linear term
    ``lambda = 1 - q^T W p+ + q^T W p-``."""
    if loss == "hinge":
        return np.maximum(lam, 0.0)
    if loss == "squared_hinge":
        return np.maximum(lam, 0.0) ** 2
    return np.logaddexp(0.0, lam - 1.0)  # log(1 + exp(-q'Wp+ + q'Wp-))


def comet_loss_derivative(lam: np.ndarray, loss: str) -> np.ndarray:
    """``l'(lambda)`` (Appendix A; the hinge's subgradient is 0 at 0)."""
    if loss == "hinge":
        return (lam > 0).astype(float)
    if loss == "squared_hinge":
        return 2.0 * np.maximum(lam, 0.0)
    return 0.5 * (1.0 + np.tanh(0.5 * (lam - 1.0)))  # sigmoid(lambda - 1), stable


class COMET(BilinearMixin, TripletLearner):
    """Dense COMET: a PD bilinear similarity by block-coordinate descent.

    Parameters
    ----------
    alpha : float, default=1.0
        Weight of the log-det barrier ``-alpha log det W`` (>= 0).
    beta : float, default=1e-3
        Weight of ``(beta / 2) ||W||_F^2`` (>= 0).
    loss : {"hinge", "squared_hinge", "log"}, default="hinge"
    n_epochs : int, default=5
        Epochs of d coordinate steps (one per feature, random order).
    n_triplets : int, default=10000
    step_fraction : float in (0, 1), default=0.5
        Fraction of the largest PD-preserving step.
    step_size : float, default=1.0
        Upper limit on the step eta.
    refactor_every : int or None, default=None
        Steps between exact refactorisations of W^-1, the Cholesky root and
        the cache of linear terms (None: d, once per epoch).
    random_state : None, int or numpy Generator
    verbose : int, default=0

    Attributes
    ----------
    W_ : ndarray (d, d)
        The learned PD matrix; ``S(x, y) = x^T W_ y``.
    W_inv_ : ndarray (d, d)
        Its inverse (Woodbury-maintained).
    components_ : ndarray (d, d)
        Upper Cholesky root R, ``W_ = R^T R``; ``transform(X) = X R^T``.
    n_steps_ : int
    history_ : dict of lists
        Per epoch: ``step``, ``seconds``, ``objective`` (eq. 2), ``loss``
        (the triplet-loss sum), ``min_step_bound`` (smallest eta_max met).
    """

    _square_attrs = ("W_", "W_inv_", "components_")

    def __init__(self, alpha=1.0, beta=1e-3, loss="hinge", n_epochs=5, n_triplets=10000,
                 step_fraction=0.5, step_size=1.0, refactor_every=None, random_state=None,
                 verbose=0):
        self.alpha = alpha
        self.beta = beta
        self.loss = loss
        self.n_epochs = n_epochs
        self.n_triplets = n_triplets
        self.step_fraction = step_fraction
        self.step_size = step_size
        self.refactor_every = refactor_every
        self.random_state = random_state
        self.verbose = verbose

    def _validate_params(self):
        check_scalar_param(self.alpha, "alpha", self, kind="real", low=0)
        check_scalar_param(self.beta, "beta", self, kind="real", low=0)
        check_choice_param(self.loss, "loss", self, ("hinge", "squared_hinge", "log"))
        check_scalar_param(self.n_epochs, "n_epochs", self, kind="int", low=1)
        check_scalar_param(self.n_triplets, "n_triplets", self, kind="int", low=1)
        check_scalar_param(self.step_fraction, "step_fraction", self, kind="real", low=0,
                           high=1, low_inclusive=False, high_inclusive=False)
        self._validate_step_params()
        check_scalar_param(self.refactor_every, "refactor_every", self, kind="int", low=1,
                           allow_none=True)
        check_scalar_param(self.verbose, "verbose", self, kind="int", low=0)

    def _validate_step_params(self):
        check_scalar_param(self.step_size, "step_size", self, kind="real", low=0,
                           low_inclusive=False)

    # ------------------------------------------------------------------
    @staticmethod
    def _linear_terms(XW, X, t):
        """lambda_t = 1 + q^T W (p- - p+) for every triplet, from X W, in
        chunks of triplets (never an (n_triplets, d) array)."""
        out = np.empty(t.shape[0])
        step = max(1, (8 * 2**20) // (8 * X.shape[1]))
        for a in range(0, t.shape[0], step):
            c = t[a:a + step]
            out[a:a + step] = 1.0 + rowwise_dot(XW[c[:, 0]], X[c[:, 2]] - X[c[:, 1]])
        return out

    def _refactor(self, X, t):
        self.W_ = 0.5 * (self.W_ + self.W_.T)
        try:
            L = np.linalg.cholesky(self.W_)
        except np.linalg.LinAlgError:  # rounding took W to the boundary: keep the root
            self.W_ = self.components_.T @ self.components_
            L = np.linalg.cholesky(self.W_)
        self.components_ = np.ascontiguousarray(L.T)
        eye = np.eye(self.W_.shape[0])
        Linv = np.linalg.solve(L, eye)
        self.W_inv_ = Linv.T @ Linv
        self._lam = self._linear_terms(np.asarray(X @ self.W_), X, t)

    def objective(self, X, triplets) -> float:
        """Eq. (2) at the current W for the given triplets."""
        check_is_fitted(self, "W_")
        lam = self._linear_terms(np.asarray(X @ self.W_), X, np.asarray(triplets))
        logdet = 2.0 * np.sum(np.log(np.diag(np.linalg.cholesky(self.W_))))
        return float(np.sum(comet_loss(lam, self.loss)) - self.alpha * logdet
                     + 0.5 * self.beta * np.sum(self.W_ * self.W_))

    def coordinate_gradient(self, X, triplets, k: int, lam=None) -> np.ndarray:
        """Row k of the gradient of eq. (2) (eq. 3 / 12), from the linear terms."""
        t = np.asarray(triplets)
        lam = self._lam if lam is None else lam
        c = comet_loss_derivative(lam, self.loss)
        xk = self._column(X, k)
        n = X.shape[0]
        a = c * xk[t[:, 0]]                       # c_t q_tk
        w = np.bincount(t[:, 2], a, n) - np.bincount(t[:, 1], a, n)   # -> sum c q_k dp
        b = c * (xk[t[:, 2]] - xk[t[:, 1]])       # c_t dp_tk
        v = np.bincount(t[:, 0], b, n)            # -> sum c dp_k q
        data = np.asarray(X.T @ (w + v)).ravel()
        return 0.5 * data - self.alpha * self.W_inv_[k] + self.beta * self.W_[k]

    def _column(self, X, k):
        """Column k of X as a dense n-vector (from a CSC copy made once per fit)."""
        if not sp.issparse(X):
            return np.ascontiguousarray(X[:, k], dtype=float)
        C = getattr(self, "_Xcsc", None)
        if C is None or C.shape != X.shape:
            C = self._Xcsc = X.tocsc()
        out = np.zeros(X.shape[0])
        a, b = C.indptr[k], C.indptr[k + 1]
        out[C.indices[a:b]] = C.data[a:b]
        return out

    def _step(self, X, t, k):
        u = -self.coordinate_gradient(X, t, k)
        if not np.isfinite(u).all():
            raise FloatingPointError(f"COMET: training diverged (non-finite gradient at step "
                                     f"{self.n_steps_ + 1}); scale the features down.")
        bound, Wu = schur_step_bound(self.W_, self.W_inv_, k, u, return_Wu=True)
        eta = min(self.step_fraction * bound, self.step_size)
        if not (eta > 0 and np.isfinite(eta)):
            return bound
        # The Cholesky root certifies PD-ness numerically: eta (e u^T + u e^T)
        # = 1/2 [(e + eta u)(e + eta u)^T - (e - eta u)(e - eta u)^T], and the
        # downdate fails iff the result is not PD in floating point (possible
        # when W is very ill-conditioned and W^-1 inexact): then the root is
        # refactored and eta halved.
        e = np.zeros_like(u)
        e[k] = 1.0
        wx, wy = np.empty_like(u), np.empty_like(u)
        for _ in range(60):
            if chol_update_downdate(self.components_, (e + eta * u) / np.sqrt(2.0),
                                    (e - eta * u) / np.sqrt(2.0), wx, wy):
                break
            self.components_ = np.ascontiguousarray(np.linalg.cholesky(self.W_).T)
            eta *= 0.5
        else:  # pragma: no cover - eta ~ 1e-18 * bound
            return bound
        # linear terms: lambda += eta (q_k (u . dp) + (q . u) dp_k)
        s = np.asarray(X @ u).ravel()
        xk = self._column(X, k)
        dp_u = s[t[:, 2]] - s[t[:, 1]]
        dp_k = xk[t[:, 2]] - xk[t[:, 1]]
        self._lam += eta * (xk[t[:, 0]] * dp_u + s[t[:, 0]] * dp_k)
        row_column_update(self.W_, k, u, eta)
        inverse_row_column_update(self.W_inv_, k, u, eta, Wu=Wu)
        return bound

    def _fit(self, X, triplets, rng):
        d = X.shape[1]
        self.W_ = np.eye(d)
        self.W_inv_ = np.eye(d)
        self.components_ = np.eye(d)
        self._lam = self._linear_terms(np.asarray(X @ self.W_), X, triplets)
        self._fit_loop(X, triplets, rng)

    def _penalty(self) -> float:
        """Regulariser beyond eq. (2) (the group lasso of SparseCOMET)."""
        return 0.0

    def _fit_loop(self, X, t, rng):
        """Epochs of d coordinate steps (a random permutation each)."""
        d = X.shape[1]
        every = self.refactor_every or d
        hist = History(keys=("objective", "loss", "min_step_bound"))
        self.n_steps_ = 0
        for _ in progress(range(self.n_epochs), total=self.n_epochs, verbose=self.verbose,
                          desc=type(self).__name__, unit="epoch"):
            min_bound = np.inf
            for k in rng.permutation(d):
                min_bound = min(min_bound, self._step(X, t, int(k)))
                self.n_steps_ += 1
                if self.n_steps_ % every == 0:
                    self._refactor(X, t)
            if not np.isfinite(self.W_).all():
                raise FloatingPointError(f"{type(self).__name__}: training diverged (W became "
                                         "NaN/inf); lower the step size.")
            loss = float(np.sum(comet_loss(self._lam, self.loss)))
            logdet = 2.0 * np.sum(np.log(np.abs(np.diag(self.components_))))
            hist.record(self.n_steps_, loss=loss, min_step_bound=min_bound,
                        objective=loss - self.alpha * logdet
                        + 0.5 * self.beta * float(np.sum(self.W_ * self.W_)) + self._penalty())
        self.history_ = hist.data
        del self._lam
        self._Xcsc = None

    # ---------------------------------------------------------- scoring
    def _apply(self, X):
        return np.asarray(X @ self.W_)

    def get_bilinear_matrix(self) -> np.ndarray:
        check_is_fitted(self, "W_")
        return self.W_.copy()

    def transform(self, X) -> np.ndarray:
        """Embed X as ``X R^T`` with ``W = R^T R`` (inner products there equal
        the learned similarity)."""
        X = self._check_fitted_X(X)
        return np.asarray(X @ self.components_.T)



def group_prox(v: np.ndarray, g: np.ndarray, theta: float, lam: float) -> np.ndarray:
    """Closed-form solution of eq. (8) for one group (eq. 16).

    A group ``V = e_k v^T + v e_k^T`` (v with a zero at k) has
    ``||V||_F = sqrt(2) ||v||``; with ``H = V_k - theta G_k`` the minimiser of
    ``<G_k, V> + ||V - V_k||_F^2 / (2 theta) + lam ||V||_F`` is
    ``H [1 - theta lam / ||H||_F]_+``.  (Eq. 16 prints the threshold as lam:
    that is the case theta = 1.)  ``g`` is the gradient row, so that
    ``G_k = e_k g^T + g e_k^T``."""
    h = v - theta * g
    nh = np.sqrt(2.0) * np.linalg.norm(h)
    if nh == 0.0:
        return h
    return h * max(0.0, 1.0 - theta * lam / nh)


class SparseCOMET(COMET):
    """Sparse COMET (Algorithm 2): a group-sparse PD metric, one feature at a time.

    ``W = V_0 + sum_k V_k``: ``V_0`` diagonal, ``V_k`` the off-diagonal row and
    column k (overlapping groups).  The diagonal is optimised first (one pass
    of coordinate steps on ``W_kk``); then each step on group k solves the
    proximal problem eq. (8) in closed form (:func:`group_prox`) with the
    group-lasso coefficient ``lam``.

    * A zero group whose gradient satisfies ``sqrt(2) ||g|| <= lam`` stays
      zero for every step size: it is skipped after one gradient row, with
      no O(d^2) work.
    * PD safeguard (Appendix E): ``theta <= step_fraction * eta_max`` of the
      plain step ``-G_k`` (Schur bound), and the update is skipped when the
      origin ``O = W - V_k`` is not PD, as the paper does (``n_skipped_``);
      then ``V_k^new`` lies between O and ``H`` and W stays PD by convexity.
    * The step starts at ``theta`` and is halved until the objective
      ``L(W) + lam sum_k ||V_k||_F`` does not increase (its change along the
      group is evaluated exactly from the cached linear terms, the Schur
      complement for log det, and the group norms), so the objective is
      monotone whatever the scale of the summed loss.

    Parameters
    ----------
    alpha, beta, loss, n_epochs, n_triplets, step_fraction, refactor_every,
    random_state, verbose
        As :class:`COMET`.
    lam : float, default=1.0
        Group-lasso coefficient (>= 0).
    theta : float, default=1.0
        Largest proximal step (theta-bar of Algorithm 2).

    Attributes
    ----------
    W_, W_inv_, components_, history_ (with ``objective`` including the
    group penalty)
        As :class:`COMET`.
    density_ : float
        Fraction rho of the d groups that are non-zero.
    active_features_ : ndarray of int
        Features whose group is non-zero.
    n_skipped_ : int
        Group updates skipped because O was not PD.
    """

    def __init__(self, alpha=1.0, beta=1e-3, loss="hinge", lam=1.0, n_epochs=5,
                 n_triplets=10000, theta=1.0, step_fraction=0.5, refactor_every=None,
                 random_state=None, verbose=0):
        self.alpha = alpha
        self.beta = beta
        self.loss = loss
        self.lam = lam
        self.n_epochs = n_epochs
        self.n_triplets = n_triplets
        self.theta = theta
        self.step_fraction = step_fraction
        self.refactor_every = refactor_every
        self.random_state = random_state
        self.verbose = verbose

    def _penalty(self) -> float:
        return float(np.sqrt(2.0) * self.lam * np.linalg.norm(self._V, axis=1).sum())

    def _validate_step_params(self):
        check_scalar_param(self.lam, "lam", self, kind="real", low=0)
        check_scalar_param(self.theta, "theta", self, kind="real", low=0, low_inclusive=False)

    # change of the objective for W <- W + e_k d^T + d e_k^T ---------------
    def _delta_objective(self, X, t, k, d, xk):
        a0, a1, a2, _ = schur_coefficients(self.W_inv_, k, d)
        q1 = a0 + 2.0 * a1 - a2
        if not (a0 > 0.0 and q1 > 0.0):
            return np.inf, None
        s = np.asarray(X @ d).ravel()
        dl = xk[t[:, 0]] * (s[t[:, 2]] - s[t[:, 1]]) + s[t[:, 0]] * (xk[t[:, 2]] - xk[t[:, 1]])
        lam_new = self._lam + dl
        change = float(np.sum(comet_loss(lam_new, self.loss))
                       - np.sum(comet_loss(self._lam, self.loss)))
        change -= self.alpha * np.log(q1 / a0)
        # ||W + D||^2 - ||W||^2 = 2 <W, D> + ||D||^2, D = e_k d^T + d e_k^T
        inner = 2.0 * float(self.W_[k] @ d)
        sq = 2.0 * float(d @ d) + 2.0 * float(d[k]) ** 2
        change += 0.5 * self.beta * (2.0 * inner + sq)
        return change, lam_new

    def _apply_group(self, X, t, k, d, lam_new):
        """W <- W + e_k d^T + d e_k^T with W^-1, the root and the cache."""
        e = np.zeros_like(d)
        e[k] = 1.0
        wx, wy = np.empty_like(d), np.empty_like(d)
        R = self.components_.copy()
        if not chol_update_downdate(R, (e + d) / np.sqrt(2.0), (e - d) / np.sqrt(2.0), wx, wy):
            return False
        self.components_ = R
        self._lam = lam_new
        row_column_update(self.W_, k, d, 1.0)
        inverse_row_column_update(self.W_inv_, k, d, 1.0)
        return True

    def _diagonal_step(self, X, t, k):
        """Algorithm 2, line 3, for feature k: a backtracked step on W_kk.

        During this pass W is diagonal (it starts at I and only its diagonal
        moves), so W^-1 and the root are diagonal too and the step costs
        O(n_triplets) instead of a dense O(d^2) update:
        ``g_kk = sum_t c_t q_tk dp_tk - alpha / W_kk + beta W_kk`` (eq. 3 at
        (k, k)); ``W_kk += 2 d_k`` moves the linear terms by
        ``2 d_k q_tk dp_tk`` and log det W by ``log(1 + 2 d_k / W_kk)``.
        """
        xk = self._column(X, k)
        qd = xk[t[:, 0]] * (xk[t[:, 2]] - xk[t[:, 1]])
        w = float(self.W_[k, k])
        g = float(comet_loss_derivative(self._lam, self.loss) @ qd) - self.alpha / w \
            + self.beta * w
        if not np.isfinite(g):
            raise FloatingPointError("SparseCOMET: training diverged (non-finite gradient).")
        # W_kk + 2 d_k > 0 keeps W PD; stay a step_fraction inside
        dk = max(-0.5 * self.theta * g, -0.5 * self.step_fraction * w)
        base = float(np.sum(comet_loss(self._lam, self.loss)))
        for _ in range(40):
            lam_new = self._lam + 2.0 * dk * qd
            w_new = w + 2.0 * dk
            change = (float(np.sum(comet_loss(lam_new, self.loss))) - base
                      - self.alpha * np.log(w_new / w) + 0.5 * self.beta * (w_new**2 - w**2))
            if change <= 0.0:
                self._lam = lam_new
                self.W_[k, k] = w_new
                self.W_inv_[k, k] = 1.0 / w_new
                self.components_[k, k] = np.sqrt(w_new)
                return
            dk *= 0.5

    def _step(self, X, t, k):
        g = self.coordinate_gradient(X, t, k)
        if not np.isfinite(g).all():
            raise FloatingPointError(f"SparseCOMET: training diverged (non-finite gradient "
                                     f"at step {self.n_steps_ + 1}); scale the features down.")
        g[k] = 0.0
        v = self._V[k]
        active = bool(v.any())
        if not active and np.sqrt(2.0) * np.linalg.norm(g) <= self.lam:
            return np.inf        # ||H(theta)||_F <= theta lam for every theta: stays zero
        if active and not schur_step_bound(self.W_, self.W_inv_, k, -v) > 1.0:
            self.n_skipped_ += 1  # the origin O = W - V_k is not PD (Appendix E)
            return 0.0
        bound = schur_step_bound(self.W_, self.W_inv_, k, -g)
        theta = min(self.theta, self.step_fraction * bound)
        xk = self._column(X, k)
        penalty = np.sqrt(2.0) * self.lam
        for _ in range(40):
            v_new = group_prox(v, g, theta, self.lam)
            d = v_new - v
            if not d.any():
                return bound
            change, lam_new = self._delta_objective(X, t, k, d, xk)
            change += penalty * (np.linalg.norm(v_new) - np.linalg.norm(v))
            if change <= 0.0 and self._apply_group(X, t, k, d, lam_new):
                self._V[k] = v_new
                return bound
            theta *= 0.5
        return bound

    def _fit(self, X, triplets, rng):
        d = X.shape[1]
        self._V = np.zeros((d, d))
        self.n_skipped_ = 0
        self.W_ = np.eye(d)
        self.W_inv_ = np.eye(d)
        self.components_ = np.eye(d)
        self._lam = self._linear_terms(np.asarray(X @ self.W_), X, triplets)
        for k in rng.permutation(d):               # Algorithm 2, line 3: the diagonal
            self._diagonal_step(X, triplets, int(k))
        self._fit_loop(X, triplets, rng)
        norms = np.linalg.norm(self._V, axis=1)
        self.active_features_ = np.flatnonzero(norms > 0)
        self.density_ = float(self.active_features_.size) / d
        del self._V
