"""SDCA's dual bookkeeping apart from the estimator (Wu, Ding, Zhao, Miao &
Hoi, AAAI 2015; the estimator is :class:`tripletml.SDCA`).

The problem (eq. 3-5): the primal

    P(M) = (1/n) sum_i [1 - x_i^T M (x_i+ - x_i-)]_+^2 + (lambda/2) ||M||_F^2

and its dual with one scalar ``alpha_i >= 0`` per triplet,
``Theta_i = alpha_i X_i`` (``X_i = x_i v_i^T``, ``v_i = x_i+ - x_i-``) and
``M(Theta) = (lambda n)^-1 sum_i alpha_i X_i`` (eq. 7).  One step of
Algorithm 1 on triplet i:

    d_alpha = max((1 - x_i^T M v_i - alpha_i / 2) / (1/2 + ||X_i||^2 / (lambda n)), -alpha_i)
    alpha_i += d_alpha,    M += (lambda n)^-1 d_alpha X_i.

:class:`SDCASolver` holds M, the dual variables (sorted triplet ids ->
``alpha``), the step counter and the state of the average / random outputs;
``step`` runs Algorithm 1 over given triplets, ``objective`` evaluates
``P``, ``D`` and the duality gap (eq. 8), ``output_matrix`` returns the
chosen output.  The *average* output ``(T - T0)^-1 sum_{t=T0+1}^T M^{t-1}`` is
kept without an ``O(d^2)`` cost per step: with ``dM_s`` the update of step
``s`` and ``B = T0 M^{T0} + sum_{s>T0} s dM_s``,
``sum_{t=T0+1}^{T} M^{t-1} = T M^T - B``.  The *random* output ``M^t``, ``t``
uniform in ``{T0+1, ..., T}``, is drawn by reservoir sampling.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tripletml.linalg.sparse_rows import (add_from_gram, csr_row_diff, diff_buffers,
                                          gram_rank_one_update, gram_space, sparse_bilinear,
                                          sparse_rank_one_update, triplet_products, triplet_rows,
                                          used_rows)
from tripletml.losses import triplet_hinge, triplet_hinge_array

__all__ = ["SDCASolver", "sdca_steps", "sdca_gram_steps", "sdca_gram_pays",
           "sdca_objectives", "identity_margins",
           "triplet_products", "relative_gap", "OUTPUTS"]

OUTPUTS = ("average", "random", "last")


@njit(cache=True, nogil=True)
def _dual_step(mg, xnorm2, alpha, i, lam_n, t, losses, sq_losses, margins):
    """Record step t's margin and (squared) hinge loss, move ``alpha_i`` by
    Algorithm 1's closed form (clipped at ``-alpha_i``) and return the
    move ``d_alpha``."""
    margins[t] = mg
    h = triplet_hinge(mg)
    losses[t] = h
    sq_losses[t] = h * h
    a = alpha[i]
    da = (1.0 - mg - 0.5 * a) / (0.5 + xnorm2 / lam_n)
    if da < -a:
        da = -a
    alpha[i] = a + da
    return da


@njit(cache=True, nogil=True)
def sdca_steps(M, B, Mrand, alpha, slots, indptr, indices, data, triplets, lam_n, step0, T0,
               u, losses, sq_losses, margins, track_avg, track_rand, vidx, vval):
    """Algorithm 1 over the given triplets in order (global steps step0+1...).

    ``B`` accumulates ``T0 M^{T0} + sum_{s > T0} s dM_s`` (average option),
    ``Mrand`` holds the reservoir sample (random option).  Returns the index
    of the first step with a non-finite margin or norm, or -1.
    """
    for t in range(triplets.shape[0]):
        s = step0 + t + 1
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        i = slots[t]
        mg = sparse_bilinear(M, q_idx, q_val, v_idx, v_val)
        xnorm2 = np.dot(q_val, q_val) * np.dot(v_val, v_val)  # ||X_i||_F^2
        if not (np.isfinite(mg) and np.isfinite(xnorm2)):
            return t
        da = _dual_step(mg, xnorm2, alpha, i, lam_n, t, losses, sq_losses, margins)
        if da != 0.0 and xnorm2 > 0.0:
            sparse_rank_one_update(M, da / lam_n, q_idx, q_val, v_idx, v_val)
            if track_avg and s > T0:
                sparse_rank_one_update(B, s * da / lam_n, q_idx, q_val, v_idx, v_val)
        if track_avg and s == T0:
            B[:, :] = T0 * M
        if track_rand and s > T0:
            # reservoir sampling: M^s kept with probability 1 / (s - T0)
            if u[t] * (s - T0) < 1.0:
                Mrand[:, :] = M
    return -1


@njit(cache=True, nogil=True)
def sdca_gram_steps(H, G, A, AB, alpha, slots, indptr, indices, data, triplets, lam_n, step0,
                    T0, losses, sq_losses, margins, track_avg, vidx, vval, track_rand, u,
                    A_kept, picked):
    """The steps of :func:`sdca_steps` in the Gram space of the ``k`` rows
    ``R`` a block uses (OASIS's :func:`~tripletml.algorithms.oasis.kernels.oasis_gram_steps`):
    every update ``(lambda n)^-1 d_alpha x_i v_i^T`` is ``R^T A R`` for a
    ``k x k`` coefficient matrix, so the margin is ``H[q, p+] - H[q, p-]``
    with ``H = R M R^T`` kept current by an ``O(k^2)`` contiguous update,
    ``M``'s own update is two entries of ``A`` and the average's
    accumulator's two entries of ``AB`` (``s d_alpha / (lambda n)``); the
    caller adds ``R^T A R`` to M and ``R^T AB R`` to B after the block.
    ``triplets`` are local ids into R (CSR arrays ``indptr, indices,
    data``, used for the exact ``||p+ - p-||^2``); ``||x_q||^2`` is
    ``G[q, q]``.  The block must not contain step ``T0`` except as its
    last (the caller then sets ``B = T0 M``).  The reservoir (random
    output, ``track_rand``, uniform numbers ``u``) keeps ``A`` at each step
    it picks in ``A_kept`` (``picked[0]`` set to 1): the caller's sample is
    then ``M_0 + R^T A_kept R``.  Returns -1, or the position of the first
    step with a non-finite margin or norm (the steps before it are in A, AB
    and A_kept)."""
    w = np.empty(H.shape[0])
    for t in range(triplets.shape[0]):
        s = step0 + t + 1
        q = triplets[t, 0]
        a = triplets[t, 1]
        b = triplets[t, 2]
        mg = H[q, a] - H[q, b]
        nv = csr_row_diff(indptr, indices, data, a, b, vidx, vval)
        xnorm2 = G[q, q] * np.dot(vval[:nv], vval[:nv])     # ||X_i||_F^2
        if not (np.isfinite(mg) and np.isfinite(xnorm2)):
            return t
        da = _dual_step(mg, xnorm2, alpha, slots[t], lam_n, t, losses, sq_losses, margins)
        if da != 0.0 and xnorm2 > 0.0:
            c = da / lam_n
            A[q, a] += c
            A[q, b] -= c
            if track_avg and s > T0:
                AB[q, a] += s * c
                AB[q, b] -= s * c
            gram_rank_one_update(H, G, c, q, a, b, w)
        if track_rand and s > T0 and u[t] * (s - T0) < 1.0:     # M^s kept: 1 / (s - T0)
            A_kept[:, :] = A
            picked[0] = 1
    return -1


def sdca_gram_pays(n_rows_used: int, nnz_used: int, n_steps: int, n_features: int,
                   track_avg: bool) -> bool:
    """Whether :func:`sdca_gram_steps` is cheaper for a block than
    :func:`sdca_steps`: the plain step reads ``nnz(q) nnz(v)`` entries of M
    for its margin and updates as many in M (and in the average's
    accumulator), the Gram step ``k^2`` of H; the Gram block adds
    ``2 nnz(R) d + 2 k^2 d`` per matrix to form H and to add ``R^T A R`` to
    M (and B), and is refused where its ``k x k`` arrays and the dense rows
    would take more than twice the solver's own ``d x d`` arrays.  Each entry counts alike, though the Gram step's are
    contiguous and the plain step's gathered through index arrays (dense
    rows of 57-70 columns: one Gram step costs a fifth of a plain step with
    the average, a third without): that is the margin for the set-up."""
    k = max(n_rows_used, 1)
    per_row = nnz_used / k
    n_mats = 3.0 if track_avg else 2.0
    plain = n_steps * n_mats * per_row * per_row
    gram = n_steps * float(k) * k + n_mats * (2.0 * nnz_used * n_features
                                              + 2.0 * float(k) * k * n_features)
    # memory: the k x k arrays (H, G, A, B's or the reservoir's) and the dense
    # rows (with a product's temporary) at most twice the solver's own four
    # d x d arrays, with a few floats per step to spare
    d2 = float(n_features) * n_features
    small = 4.0 * k * k + 2.0 * k * n_features <= 8.0 * d2 + 8.0 * n_steps
    return small and gram < plain


@njit(cache=True, nogil=True)
def _all_margins(M, indptr, indices, data, triplets, out, xnorm2, vidx, vval):
    """Margins ``x_i^T M v_i`` and ``||X_i||_F^2`` of every triplet."""
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        out[t] = sparse_bilinear(M, q_idx, q_val, v_idx, v_val)
        xnorm2[t] = np.dot(q_val, q_val) * np.dot(v_val, v_val)


def gram_margins_pay(n_rows_used: int, nnz_used: int, n_triplets: int, n_features: int) -> bool:
    """Whether :func:`_margins_gram` is cheaper than :func:`_all_margins`:
    ``H = R M R^T`` from the ``k`` dense rows costs ``2 k d^2 + 2 k^2 d``
    and each margin then two look-ups, against ``2 nnz_row^2`` per
    triplet (the mean row size), with a factor 4 to spare, and only while
    H and the dense rows take no more memory than a few arrays over the
    triplets and the rows' entries.  (OASIS's
    :func:`~tripletml.algorithms.oasis.kernels.gram_route_pays` prices its
    steps, which update H at ``k^2`` each; margins alone do not.)"""
    k, d = max(n_rows_used, 1), n_features
    per_row = nnz_used / k
    plain = n_triplets * 2.0 * per_row * per_row
    gram = 2.0 * k * d * d + 2.0 * k * k * d + 2.0 * n_triplets
    # memory: H (k x k) and the dense rows (k x d) no larger than a few
    # arrays over the triplets and the rows' own entries
    small = float(k) * k + float(k) * d <= 4.0 * n_triplets + 2.0 * nnz_used
    return small and 4.0 * gram < plain


def _margins_gram(M: np.ndarray, Xc, triplets: np.ndarray):
    """The margins of :func:`_all_margins` by a Gram route: with ``k``
    distinct rows ``R`` under many triplets (few rows, many features),
    ``H = R M R^T`` once and each margin ``H[q, p+] - H[q, p-]``;
    ``||X_i||_F^2`` is only tested for zero (the degenerate triplets), so
    it is returned as ``||q||^2`` times 1 or 0 for distinct or equal rows
    ``p+``, ``p-``.  ``(None, None)`` where the route does not pay
    (:func:`gram_margins_pay`)."""
    m = triplets.shape[0]
    if m == 0:
        return None, None
    rows, local = used_rows(triplets, Xc.shape[0])
    R = Xc[rows]
    if not gram_margins_pay(len(rows), R.nnz, m, Xc.shape[1]):
        return None, None
    Rd = R.toarray()
    H = (Rd @ M) @ Rd.T
    _, same = np.unique(Rd, axis=0, return_inverse=True)      # equal rows, exactly
    same = same.ravel()
    qq = np.einsum("ij,ij->i", Rd, Rd)
    q, a, b = local[:, 0], local[:, 1], local[:, 2]
    mg = H[q, a] - H[q, b]
    xn = qq[q] * (same[a] != same[b])
    return mg, xn


def identity_margins(Xc, triplets: np.ndarray) -> np.ndarray:
    """``x_i^T v_i`` of every triplet (the margins of ``M = I``,
    :func:`tripletml.linalg.sparse_rows.triplet_products`)."""
    return triplet_products(Xc, triplets)[0]


def sdca_objectives(M: np.ndarray, alpha: np.ndarray, Xc, triplets: np.ndarray, lam: float,
                    n: int | None = None, start_scale: float = 0.0,
                    start_margins: np.ndarray | None = None) -> tuple[float, float, float]:
    """Primal ``P(M)``, dual ``D(alpha)`` and gap for ``M = M(alpha)``.

    ``lam`` is lambda of eq. (4) (the estimator's ``alpha``); ``n`` (default
    ``len(triplets)``) is the ``n`` of eq. (4)-(5).  The dual is evaluated
    through ``||M(alpha)||^2`` with the maintained M, never from per-triplet
    d x d matrices.  Returns ``(P, D, P - D)``.

    With a start ``M_0 = c I`` (``start_scale`` c > 0; the regularizer
    ``(lambda/2) ||M - M_0||^2``), ``M = M_0 + (lambda n)^-1 sum_i alpha_i
    X_i``: the problem in ``M - M_0`` is eq. (4) with the margins' constant 1
    replaced by ``b_i = 1 - c x_i^T v_i``, so the conjugate term is
    ``alpha_i b_i - alpha_i^2 / 4`` and Algorithm 1's step is unchanged
    (its ``1 - x_i^T M v_i`` is ``b_i - x_i^T (M - M_0) v_i``).
    ``start_margins``: ``x_i^T v_i`` of the triplets, when the caller has
    them (:func:`identity_margins` otherwise).
    """
    n = triplets.shape[0] if n is None else n
    mg, xn = _margins_gram(M, Xc, triplets)
    if mg is None:
        mg = np.empty(triplets.shape[0])
        xn = np.empty(triplets.shape[0])
        _all_margins(M, Xc.indptr, Xc.indices, Xc.data, triplets, mg, xn, *diff_buffers(Xc))
    c = float(start_scale)
    sq = float(np.sum(M * M))
    if c:       # ||M - c I||^2 without forming c I
        sq += c * (c * M.shape[0] - 2.0 * float(np.trace(M)))
    reg = 0.5 * lam * max(sq, 0.0)
    P = float(np.sum(triplet_hinge_array(mg) ** 2)) / n + reg
    if c and start_margins is None:
        start_margins = identity_margins(Xc, triplets)
    b = 1.0 - c * start_margins if c else 1.0
    # -l_i^*(-Theta_i) = alpha_i b_i - alpha_i^2/4; when X_i = 0 the loss is the
    # constant 1 and Theta_i = 0 whatever alpha_i, so the term is its maximum, 1.
    conj = np.where(xn > 0.0, alpha * b - 0.25 * alpha * alpha, 1.0)
    D = float(np.sum(conj)) / n - reg
    return P, D, P - D


def relative_gap(P: float, gap: float) -> float:
    """The stopping criterion of SDCA: ``gap / max(|P|, 1e-12)``."""
    return gap / max(abs(P), 1e-12)


class SDCASolver:
    """Algorithm 1's state: ``M = M(alpha)``, the dual variables and the
    output accumulators.

    Parameters
    ----------
    n_features : int
    lam : float
        lambda of eq. (4) (> 0).
    n_scale : int
        The n of ``(lambda n)^-1`` (fixed for the life of the state).
    output : {"average", "random", "last"}
    T0 : int
        First step of the averaging / sampling window.
    owner : str
        Learner name for messages.

    Use :meth:`from_state` to resume from stored arrays (checked).
    """

    #: None: the Gram route (:func:`sdca_gram_steps`) where it pays
    #: (:func:`sdca_gram_pays`); tests set True or False to force a route.
    gram_route = None

    def __init__(self, n_features: int, lam: float, n_scale: int, output: str = "average",
                 T0: int = 0, owner: str = "SDCA", start_scale: float = 0.0):
        d = int(n_features)
        self.owner = owner
        self.start_scale = float(start_scale)
        self.M = self.start_scale * np.eye(d)
        self.alpha = np.zeros(0)
        self.dual_ids = np.zeros(0, dtype=np.int64)
        self.next_id = 0
        self.lam = float(lam)
        self.n_scale = int(n_scale)
        self.t = 0
        self.T0 = int(T0)
        self.output = output
        self.avg = np.zeros((d, d)) if output == "average" else None
        self.rand = np.zeros((d, d)) if output == "random" else None
        self._check()

    @classmethod
    def from_state(cls, *, M, alpha, dual_ids, next_id, lam, n_scale, t, T0, output,
                   avg=None, rand=None, owner="SDCA", start_scale=0.0) -> "SDCASolver":
        """A solver over stored arrays (used in place), after checking that
        they are consistent: the kernels index them without bounds checks."""
        self = cls.__new__(cls)
        self.owner = owner
        self.start_scale = float(start_scale)
        self.M, self.alpha, self.dual_ids = M, alpha, dual_ids
        self.next_id, self.lam, self.n_scale = int(next_id), float(lam), int(n_scale)
        self.t, self.T0, self.output = int(t), int(T0), output
        self.avg, self.rand = avg, rand
        self._check()
        return self

    def _check(self) -> None:
        who = self.owner
        d = self.M.shape[0]
        if self.output not in OUTPUTS:
            raise ValueError(f"{who}: output {self.output!r} is not one of {OUTPUTS}.")
        if self.M.shape != (d, d):
            raise ValueError(f"{who}: M has shape {self.M.shape}, expected a square matrix.")
        for name, arr, need in (("avg_accum_", self.avg, self.output == "average"),
                                ("random_iterate_", self.rand, self.output == "random")):
            if need and (arr is None or arr.shape != (d, d)):
                raise ValueError(f"{who}: output={self.output!r} needs {name} of shape "
                                 f"({d}, {d}), got {getattr(arr, 'shape', None)}.")
        ids = self.dual_ids
        if self.alpha.shape != ids.shape or ids.ndim != 1:
            raise ValueError(f"{who}: alpha_ and dual_ids_ must be 1-D of one length, got "
                             f"{self.alpha.shape} and {ids.shape}.")
        if ids.size and (ids[0] < 0 or np.any(ids[1:] <= ids[:-1])):
            raise ValueError(f"{who}: dual_ids_ must be strictly increasing non-negative ids.")
        if ids.size and self.next_id <= ids[-1]:
            raise ValueError(f"{who}: next id {self.next_id} must exceed every dual id.")
        if np.any(self.alpha < 0):
            raise ValueError(f"{who}: dual variables alpha_ must be >= 0.")
        if not (np.isfinite(self.start_scale) and self.start_scale >= 0):
            raise ValueError(f"{who}: the start's scale {self.start_scale} must be finite and "
                             ">= 0.")
        if not (self.lam > 0 and self.n_scale > 0 and self.t >= 0 and self.T0 >= 0):
            raise ValueError(f"{who}: inconsistent scalars (alpha={self.lam}, "
                             f"n_scale={self.n_scale}, t={self.t}, T0={self.T0}).")

    def slots_for(self, ids: np.ndarray) -> np.ndarray:
        """Positions of the triplet ``ids`` in ``alpha`` (new ids get
        ``alpha = 0``); ``next_id`` moves past them."""
        ids = np.asarray(ids, dtype=np.int64)
        # O(b log m + m) per call of b ids (a sorted merge), not a sort of all
        # m ids: a stream of small partial_fit calls stays linear in m
        u = np.unique(ids)
        pos = np.searchsorted(self.dual_ids, u)
        n_old = self.dual_ids.size
        known = (pos < n_old) & (self.dual_ids[np.minimum(pos, max(n_old - 1, 0))] == u) \
            if n_old else np.zeros(u.size, bool)
        new = u[~known]
        if new.size:
            at = pos[~known]
            self.dual_ids = np.insert(self.dual_ids, at, new)
            self.alpha = np.insert(self.alpha, at, 0.0)
        if ids.size:
            self.next_id = max(self.next_id, int(ids.max()) + 1)
        return np.searchsorted(self.dual_ids, ids).astype(np.int64)

    def step(self, Xc, triplets: np.ndarray, slots: np.ndarray, u: np.ndarray | None = None):
        """Algorithm 1 on ``triplets`` in order, triplet j on dual variable
        ``slots[j]``; ``u`` are the uniform numbers of the reservoir (random
        output).  Returns ``(losses, squared losses, margins)`` before each
        step, or raises FloatingPointError on a non-finite margin or norm."""
        m = triplets.shape[0]
        if slots.shape != (m,) or (m and (slots.min() < 0 or slots.max() >= self.alpha.size)):
            raise ValueError(f"{self.owner}: slots out of range of the dual variables.")
        losses, sq, margins = np.empty(m), np.empty(m), np.empty(m)
        avg, rnd = self.output == "average", self.output == "random"
        if rnd and (u is None or u.shape != (m,)):
            raise ValueError(f"{self.owner}: the random output needs {m} uniform numbers.")
        route = self._gram_rows(Xc, triplets) if m else None
        if route is not None:
            bad = self._gram_steps(*route, slots, losses, sq, margins, u if rnd else None)
        else:
            dummy = np.zeros((1, 1))
            bad = sdca_steps(self.M, self.avg if avg else dummy, self.rand if rnd else dummy,
                             self.alpha, slots, Xc.indptr, Xc.indices, Xc.data, triplets,
                             self.lam * self.n_scale, self.t, self.T0,
                             u if rnd else np.zeros(1), losses, sq, margins, avg, rnd,
                             *diff_buffers(Xc))
        if bad >= 0:
            self.t += bad
            raise FloatingPointError(
                f"{self.owner}: training diverged (non-finite margin or norm at step "
                f"{self.t + 1}); scale the features down or raise alpha.")
        self.t += m
        return losses, sq, margins

    def _gram_rows(self, Xc, triplets: np.ndarray):
        """``(R, local)`` (the block's rows, CSR, and the triplets' ids into
        them) where the Gram route is taken (:attr:`gram_route`, else
        :func:`sdca_gram_pays`), or None."""
        if self.gram_route is False:
            return None
        rows, local = used_rows(triplets, Xc.shape[0])
        R = Xc[rows]
        if not (self.gram_route or sdca_gram_pays(len(rows), R.nnz, triplets.shape[0],
                                                   Xc.shape[1], self.output == "average")):
            return None
        return R, local

    def _gram_steps(self, R, local, slots, losses, sq, margins, u=None) -> int:
        """The block's steps by :func:`sdca_gram_steps`, cut after step T0
        (where the average's accumulator becomes ``T0 M``); the reservoir's
        last pick (random output: ``u``) is ``M`` before the cut plus
        ``R^T A_kept R``.  Returns the block position of a non-finite step
        or -1, with ``M``, B and the reservoir holding every step before
        it.  ``self.t`` is left to the caller."""
        avg, rnd = self.output == "average", u is not None
        m, t0, T0 = local.shape[0], self.t, self.T0
        ends = [T0 - t0, m] if avg and 0 < T0 - t0 < m else [m]
        start = 0
        for end in ends:
            H, G, Rd = gram_space(R, self.M)
            A = np.zeros_like(G)
            AB = np.zeros_like(G) if avg and t0 + end > T0 else np.zeros((1, 1))
            A_kept = np.zeros_like(G) if rnd else np.zeros((1, 1))
            picked = np.zeros(1, dtype=np.int64)
            sl = slice(start, end)
            bad = sdca_gram_steps(H, G, A, AB, self.alpha, slots[sl], R.indptr, R.indices,
                                  R.data, local[sl], self.lam * self.n_scale, t0 + start, T0,
                                  losses[sl], sq[sl], margins[sl], AB.shape == G.shape,
                                  *diff_buffers(R), rnd, u[sl] if rnd else np.zeros(1),
                                  A_kept, picked)
            if picked[0]:
                self.rand[:, :] = self.M
                add_from_gram(self.rand, R, Rd, A_kept)
            add_from_gram(self.M, R, Rd, A)
            if AB.shape == G.shape:
                add_from_gram(self.avg, R, Rd, AB)
            if bad >= 0:
                return start + bad
            if avg and T0 > 0 and t0 + end == T0:
                self.avg[:, :] = T0 * self.M
            start = end
        return -1

    def objective(self, Xc, triplets: np.ndarray,
                  start_margins: np.ndarray | None = None) -> tuple[float, float, float]:
        """``(P, D, gap)`` of eq. (4), (5), (8) over ``triplets`` (ids 0..n-1);
        ``start_margins`` as in :func:`sdca_objectives`."""
        return sdca_objectives(self.M, self.alpha, Xc, triplets, self.lam, self.n_scale,
                               self.start_scale, start_margins)

    def output_matrix(self) -> np.ndarray:
        """The chosen output (a new array): last iterate, reservoir sample or
        the window average (the last iterate while the window is empty)."""
        T, T0 = self.t, self.T0
        if self.output == "last" or T <= T0:
            return self.M.copy()
        if self.output == "random":
            return self.rand.copy()
        return (T * self.M - self.avg) / (T - T0)
