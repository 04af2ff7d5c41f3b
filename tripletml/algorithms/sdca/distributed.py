"""CoCoA+ for SDCA over the partitions of a collection (strategy ``"cocoa"``).

The problem is SDCA's (Wu, Ding, Zhao, Miao & Hoi, AAAI 2015, eq. 3-5; see
:mod:`tripletml.algorithms.sdca.kernels`): the primal

    P(M) = (1/n) sum_i [1 - x_i^T M v_i]_+^2 + (lambda/2) ||M||_F^2

over the ``n`` triplets of *all* partitions, its dual with one
``alpha_i >= 0`` per triplet and ``M(alpha) = (lambda n)^-1 sum_i alpha_i X_i``
(``X_i = x_i v_i^T``).  CoCoA+ (Ma, Smith, Jaggi, Jordan, Richtarik & Takac,
"Adding vs. averaging in distributed primal-dual optimization", ICML 2015,
Algorithm 1) with the *adding* aggregation ``gamma = 1`` and the safe
subproblem parameter ``sigma' = gamma K`` (their eq. 11; ``K`` the partitions
that hold a triplet) runs, per round:

1. the driver broadcasts ``M = M(alpha)``;
2. partition ``k`` approximately maximizes its local subproblem (eq. 9)

       G_k(dA_k) = -(1/n) sum_{i in k} l_i^*(-(alpha_i + dalpha_i)) - (1/K)(lambda/2)||M||^2
                   - (1/n) <M, A_k dA_k> - (lambda/2) sigma' ||(lambda n)^-1 A_k dA_k||^2

   by one pass of SDCA coordinate steps over its own triplets, in the order
   ``sup.order(p, m, round)``.  For the squared hinge the exact coordinate
   maximizer is SDCA's step with the quadratic term scaled by ``sigma'``:

       dalpha = max((1 - x_i^T (M + sigma' D_k) v_i - alpha_i/2 - dalpha_i/2)
                    / (1/2 + sigma' ||X_i||^2 / (lambda n)), -(alpha_i + dalpha_i)),
       D_k += (lambda n)^-1 dalpha X_i,

   ``D_k = (lambda n)^-1 A_k dA_k`` being the partition's update;
3. every partition keeps ``alpha_k + dA_k`` (its state, passed back in the
   next round) and ships ``D_k``; the driver *adds* them (``gamma = 1``)
   through the backend's fixed reduction tree: ``M <- M + sum_k D_k``.

Since ``sigma' = gamma K`` makes the subproblems a lower bound of the dual
(Lemma 4 of the paper), ``D(alpha + dA) >= sum_k G_k(dA_k) >= sum_k G_k(0) =
D(alpha)``: the dual objective never decreases.  With ``K = 1``
(``sigma' = 1``) a round is one pass of single-process SDCA (the in-memory
solver's step, in a permutation order instead of draws with replacement).

Objectives.  The primal, dual and duality gap (eq. 8) of every round's
iterate ``(M^r, alpha^r)`` are sums over partitions, reduced: each round's
task first evaluates the broadcast ``M^{r-1}`` with its dual variables
``alpha^{r-1}`` (so no extra pass over the data), and one evaluation-only
pass after the last round evaluates ``M^R``.  ``history_`` holds one record
per round with the in-memory SDCA's keys: ``step`` (dual steps so far, ``r n``),
``loss`` (mean hinge before each local step, at the partition's local model),
``avg_loss``, ``mistake_rate`` and ``avg_sq_loss`` (running means over all
steps), ``primal``, ``dual``, ``gap`` and ``rel_gap`` of the round's *last
iterate* ``M^r = M(alpha^r)``.  ``tol`` stops after the first round whose
relative gap ``gap / max(|P|, 1e-12)`` is at most ``tol`` (the in-memory
criterion); as that gap is computed inside the next round's tasks, the next
round's updates are then discarded and ``n_iter_`` counts the rounds kept.
``max_iter`` is the number of rounds; a round is one pass over the data, as
an in-memory pass.

Output (``output``):

``"average"``  the mean of the round iterates ``M^r``, ``r = R0+1..R`` with
               ``R0 = floor(average_start * max_iter)`` (the in-memory window
               at round granularity), or the last iterate when the window is
               empty (stopped on ``tol`` before ``R0``).  Its duality gap is
               certified with the averaged dual variables ``abar`` (``M(abar)``
               is that mean, ``D`` is concave): ``P(Mbar) - D(abar)``, one
               extra evaluation pass, reported as ``output_gap`` (and
               ``output_primal``, ``output_dual``) in ``partitioned_``.
``"random"``   a round iterate ``M^r`` drawn uniformly from the window
               (reservoir sampling with the fit's random state); its gap is
               the history's record of that round.
``"last"``     ``M^R``.

``partitioned_`` also holds ``rounds``, ``sigma`` (``sigma'``), ``gap`` and
``rel_gap`` (of the last iterate) and ``output_gap``.

Fitted attributes are the in-memory SDCA's.  With ``keep_duals=True``
``alpha_`` gathers the ``n`` dual variables (``O(n)`` on the driver, once, at
the end), numbered partition by partition in the order of each partition's
triplets (``dual_ids_ = 0..n-1``); by default they stay on the workers and
are released with the fit (``alpha_`` empty, ``duals_kept_`` False);
``M_last_ = M^R``; ``t_ = R n`` steps, ``average_start_step_ = R0 n`` and
``avg_accum_ = t M^R - (t - T0) Mbar`` so that the solver's average formula
``(t M - B) / (t - T0)`` gives ``W_`` and a later ``partial_fit`` continues
the average.

Memory.  The model is dense: each partition ships a ``d x d`` update per
round; the local backend holds the ``K`` updates of a round at once, Dask
reduces them ``FAN_IN`` at a time on the workers.  :func:`check_update_memory`
refuses (MemoryError) when they do not fit, pointing to the low-rank
learners.
"""
from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

from tripletml.algorithms.sdca.kernels import SDCASolver, relative_gap
from tripletml.core.validation import check_dense_memory
from tripletml.distributed.reduction import FAN_IN, tree_sum
from tripletml.distributed.strategy import PartitionedStrategy
from tripletml.engine.driver import TrainingResult, apply_result
from tripletml.engine.progress import progress_bar
from tripletml.linalg.sparse_rows import (as_csr, diff_buffers, sparse_bilinear,
                                          sparse_rank_one_update, triplet_rows)
from tripletml.losses import triplet_hinge

__all__ = ["fit", "local_pass", "check_update_memory", "STRATEGY"]

#: per-round statistics returned by a task (summed over partitions)
_LOSS, _SQ, _MISTAKES, _COUNT, _BAD, _P_SQ, _D_CONJ = range(7)
_N_STATS = 7


@njit(cache=True, nogil=True)
def local_pass(M, D, sigma, alpha, order, indptr, indices, data, triplets, lam_n, stats,
               vidx, vval):
    """One pass of SDCA coordinate steps on CoCoA+'s local subproblem.

    ``M`` is the broadcast model (read only), ``D`` the partition's update
    ``(lambda n)^-1 sum dalpha_i X_i`` (in place), ``alpha`` its dual
    variables (in place, ``alpha_i + dalpha_i``), triplet ``order[j]`` at
    step ``j``.  The local model is ``M + sigma D``; the step is the exact
    maximizer of the subproblem along the coordinate.  ``stats`` gets the
    sums of the hinge and squared hinge before each step and the mistakes
    (margin <= 0).  Returns the position of the first step with a
    non-finite margin or norm, or -1.
    """
    for j in range(order.shape[0]):
        t = order[j]
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        mg = sparse_bilinear(M, q_idx, q_val, v_idx, v_val) \
            + sigma * sparse_bilinear(D, q_idx, q_val, v_idx, v_val)
        xnorm2 = np.dot(q_val, q_val) * np.dot(v_val, v_val)
        if not (np.isfinite(mg) and np.isfinite(xnorm2)):
            return j
        h = triplet_hinge(mg)
        stats[0] += h
        stats[1] += h * h
        if mg <= 0.0:
            stats[2] += 1.0
        a = alpha[t]
        da = (1.0 - mg - 0.5 * a) / (0.5 + sigma * xnorm2 / lam_n)
        if da < -a:
            da = -a
        alpha[t] = a + da
        if da != 0.0 and xnorm2 > 0.0:
            sparse_rank_one_update(D, da / lam_n, q_idx, q_val, v_idx, v_val)
    return -1


@njit(cache=True, nogil=True)
def _eval_sums(M, alpha, indptr, indices, data, triplets, vidx, vval):
    """``(sum_i [1 - x_i^T M v_i]_+^2, sum_i -l_i^*(-alpha_i))`` of a
    partition's triplets (a degenerate ``X_i = 0`` contributes 1 to the
    second sum, as in :func:`tripletml.algorithms.sdca.kernels.sdca_objectives`), and
    whether every margin was finite."""
    sq, conj = 0.0, 0.0
    ok = True
    for t in range(triplets.shape[0]):
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        mg = sparse_bilinear(M, q_idx, q_val, v_idx, v_val)
        if not np.isfinite(mg):
            ok = False
        h = triplet_hinge(mg)
        sq += h * h
        xn = np.dot(q_val, q_val) * np.dot(v_val, v_val)
        a = alpha[t]
        conj += (a - 0.25 * a * a) if xn > 0.0 else 1.0
    return sq, conj, ok


def _data(p, sup):
    """The partition's rows as the solver sees them (CSR) and its triplets."""
    X = sup.rows(p)
    T = np.ascontiguousarray(sup.triplets(p, X), dtype=np.int64)
    return sup.csr_rows(p, X), T


def _check_state(p, state, m, owner):
    if state is not None and state[0].shape[0] != m:
        raise ValueError(f"{owner} (partition {p.index}): {m} triplets now, "
                         f"{state[0].shape[0]} dual variables from the previous round; the "
                         "partition's data must be the same in every round")


def _round_task(p, state, M, sup, cfg):
    """One CoCoA+ round on a partition: evaluate the broadcast ``M`` with the
    dual variables of the state (not in round 1), then one local pass.
    Returns ``(new_state, D_k, stats)``; the state is ``(alpha, alpha_sum)``
    (``alpha_sum``: the dual variables summed over the averaging window, or
    None)."""
    Xc, T = _data(p, sup)
    m = T.shape[0]
    _check_state(p, state, m, cfg["owner"])
    stats = np.zeros(_N_STATS)
    stats[_COUNT] = m
    vidx, vval = diff_buffers(Xc)
    if state is None:
        alpha = np.zeros(m)
        alpha_sum = np.zeros(m) if cfg["average"] else None
    else:
        alpha = state[0].copy()              # the state is not mutated (pure task)
        alpha_sum = None if state[1] is None else state[1].copy()
        if cfg["evaluate"]:
            sq, conj, ok = _eval_sums(M, alpha, Xc.indptr, Xc.indices, Xc.data, T, vidx, vval)
            stats[_P_SQ], stats[_D_CONJ] = sq, conj
            if not ok:
                stats[_BAD] = 1.0
    D = np.zeros_like(M)
    if m:
        order = np.ascontiguousarray(sup.order(p, m, cfg["round"]), dtype=np.int64)
        bad = local_pass(M, D, cfg["sigma"], alpha, order, Xc.indptr, Xc.indices, Xc.data, T,
                         cfg["lam_n"], stats, vidx, vval)
        if bad >= 0:
            stats[_BAD] = 1.0
    if cfg["accumulate"] and alpha_sum is not None:
        alpha_sum += alpha
    return (alpha, alpha_sum), D, stats


def _eval_task(p, state, M, Mbar, sup, use_sum, owner):
    """Objective sums of ``M`` with the state's ``alpha`` and, when ``Mbar``
    is given, of ``Mbar`` with the averaged dual variables (``alpha_sum``;
    the driver divides the conjugates' argument by the window length
    ``use_sum``)."""
    Xc, T = _data(p, sup)
    _check_state(p, state, T.shape[0], owner)
    vidx, vval = diff_buffers(Xc)
    out = np.zeros(5)
    sq, conj, ok = _eval_sums(M, state[0], Xc.indptr, Xc.indices, Xc.data, T, vidx, vval)
    out[0], out[1], out[4] = sq, conj, 0.0 if ok else 1.0
    if Mbar is not None:
        abar = state[1] / use_sum
        sq, conj, ok = _eval_sums(Mbar, abar, Xc.indptr, Xc.indices, Xc.data, T, vidx, vval)
        out[2], out[3] = sq, conj
        if not ok:
            out[4] = 1.0
    return out


@njit(cache=True, nogil=True)
def _primal_sum(D, coef, indptr, indices, data, triplets, vidx, vval):
    """``D += sum_i coef_i X_i`` over a partition's triplets; returns
    ``sum_i |coef_i| ||X_i||_F`` (the scale of the sum's terms)."""
    scale = 0.0
    for t in range(triplets.shape[0]):
        c = coef[t]
        if c == 0.0:
            continue
        q_idx, q_val, v_idx, v_val = triplet_rows(indptr, indices, data, triplets, t, vidx, vval)
        xn = np.sqrt(np.dot(q_val, q_val) * np.dot(v_val, v_val))
        if xn > 0.0:
            scale += abs(c) * xn
            sparse_rank_one_update(D, c, q_idx, q_val, v_idx, v_val)
    return scale


def _primal_task(p, state, sup, lam_n, owner):
    """``(M(alpha), M(alpha_sum), scales)`` of a partition's share (the
    primal recomputed from the dual variables of a checkpoint)."""
    Xc, T = _data(p, sup)
    _check_state(p, state, T.shape[0], owner)
    vidx, vval = diff_buffers(Xc)
    d = Xc.shape[1]
    A = np.zeros((d, d))
    scale = np.zeros(2)
    scale[0] = _primal_sum(A, state[0] / lam_n, Xc.indptr, Xc.indices, Xc.data, T, vidx, vval)
    S = None
    if state[1] is not None:
        S = np.zeros((d, d))
        scale[1] = _primal_sum(S, state[1] / lam_n, Xc.indptr, Xc.indices, Xc.data, T,
                               vidx, vval)
    return A, S, scale


#: relative disagreement (to the scale of the sum's terms) between a
#: checkpoint's M and the M recomputed from its dual variables above which
#: the checkpoint is refused (rounding gives ~1e-15)
PRIMAL_RTOL = 1e-8


def _check_primal(plan, owner, states, M, Msum, lam_n) -> None:
    """Refuse a checkpoint whose ``M`` (or averaged ``Msum``) is not
    ``M(alpha) = (lambda n)^-1 sum_i alpha_i X_i`` of its dual variables
    (an edited model or edited duals): one pass over the data."""
    be, sup = plan.backend, plan.supervision
    A, S, scale = be.gather(be.reduce(tree_sum, be.map(_primal_task, sup, lam_n, owner,
                                                       states=states)))
    for name, have, want, sc in (("M", M, A, scale[0]), ("Msum", Msum, S, scale[1])):
        if have is None or want is None:
            continue
        err = float(np.linalg.norm(have - want))
        if not err <= PRIMAL_RTOL * max(float(sc), 1e-300) + 1e-300:
            raise ValueError(f"{owner}: the checkpoint's {name!r} is not the model of its "
                             f"dual variables (M(alpha) recomputed from the data differs by "
                             f"{err:.3g}, terms of size {float(sc):.3g}): the checkpoint was "
                             "edited or made from other data; use another checkpoint_dir or "
                             "resume=False")


def _count_task(p, sup):
    return int(sup.triplets(p, sup.rows(p)).shape[0])


def _update_of(result):
    return result[1], result[2]


def _state_of(result):
    return result[0]


def _alpha_of(state):
    return state[0]


def _add_updates(*items):
    """Sum of ``(D_k, stats_k)`` pairs (the reduction tree's node)."""
    D = items[0][0].copy()
    s = items[0][1].copy()
    for d_, s_ in items[1:]:
        D += d_
        s += s_
    return D, s


def check_update_memory(learner, d: int, K: int, backend_name: str) -> None:
    """MemoryError before training when a round's dense ``d x d`` updates do
    not fit: ``K`` of them at once on the local backend (plus the model, the
    average, a partition's update and the sum), ``min(K, FAN_IN)`` on a
    reduction task on Dask."""
    held = (K if backend_name == "local" else min(K, FAN_IN)) + 4
    check_dense_memory(held * 8 * int(d) * int(d), learner,
                       f"CoCoA+ ships one dense {d} x {d} update per partition and round "
                       f"({K} partitions; {held} such arrays held at once), which does not "
                       "fit; use a low-rank learner (LORETA, LowRankDML), reduce the "
                       "dimension first (e.g. sklearn's TruncatedSVD) or use fewer partitions")


def _objectives(sq: float, conj: float, M: np.ndarray, lam: float, n: int):
    reg = 0.5 * lam * float(np.sum(M * M))
    P = sq / n + reg
    D = conj / n - reg
    return P, D, P - D


def _restore(plan, owner, K, d, average, hist):
    """The state of a checkpointed round: ``(round, states, M, Msum,
    n_window, cum, Mrand, hist)``, checked against this run."""
    r, arrays, meta = plan.resumed
    be = plan.backend

    def arr(name, shape=None):
        a = arrays.get(name)
        if a is None or a.dtype != np.float64 or (shape is not None and a.shape != shape) \
                or not np.isfinite(a).all() or (name.startswith("alpha") and (a < 0).any()):
            raise ValueError(f"{owner}: the checkpoint's {name!r} is missing or malformed")
        return np.array(a)

    sizes = arrays.get("sizes")
    if sizes is None or sizes.dtype != np.int64 or sizes.shape != (K,) or (sizes < 0).any():
        raise ValueError(f"{owner}: the checkpoint's partition sizes are malformed")
    m = int(sizes.sum())
    alpha = arr("alpha", (m,))
    cuts = np.cumsum(sizes)[:-1]
    a_parts = np.split(alpha, cuts)
    s_parts = np.split(arr("alpha_sum", (m,)), cuts) if average else [None] * K
    states = be.scatter_each([(a, b) for a, b in zip(a_parts, s_parts)])
    h = meta.get("hist")
    if not isinstance(h, dict) or set(h) != set(hist) or any(
            not isinstance(v, list) or len(v) != r for v in h.values()):
        raise ValueError(f"{owner}: the checkpoint's history is malformed")
    nw = meta.get("n_window")
    if isinstance(nw, bool) or not isinstance(nw, int) or not 0 <= nw <= r:
        raise ValueError(f"{owner}: the checkpoint's averaging window is malformed")
    Mrand = None
    if "Mrand" in arrays:
        Mrand = (arr("Mrand", (d, d)), int(meta.get("rand_round")))
    return (r, states, arr("M", (d, d)), arr("Msum", (d, d)) if average else None, nw,
            arr("cum", (3,)), Mrand, h)


class _CoCoARounds:
    """The driver's state of a CoCoA+ run: the model ``M``, the averaging
    window (``Msum``, ``n_window``; ``Mrand`` for ``output="random"``), the
    partitions' dual variables (``states``), the history and the running
    sums; :meth:`round` runs one round, :meth:`final_objectives` the
    evaluation after the last, :meth:`store` sets the learner's fitted
    attributes."""

    KEYS = ("step", "seconds", "loss", "avg_loss", "mistake_rate", "avg_sq_loss", "primal",
            "dual", "gap", "rel_gap")

    def __init__(self, learner, plan):
        self.learner, self.plan = learner, plan
        self.owner = owner = type(learner).__name__
        self.be, self.sup = be, sup = plan.backend, plan.supervision
        self.lam = learner._alpha_value()
        self.max_iter = int(learner.max_iter)
        self.tol = learner.tol
        self.output = learner.output
        self.d = d = int(learner.scaler_.n_features_out_)
        self.K = K = plan.n_partitions
        n = int(plan.n_triplets_total)
        if n <= 0:
            n = be.gather(be.reduce(tree_sum, be.map(_count_task, sup)))
            if n <= 0:
                raise ValueError(f"{owner}: the collection's partitions hold no triplet")
        self.n = n
        shares = sup.n_triplets
        # sigma' = gamma K over the partitions that can hold a triplet (an empty
        # partition's update is zero; eq. 11's bound holds with the others)
        K_active = K if shares is None else max(1, sum(1 for s in shares if s > 0))
        self.sigma = float(K_active)
        check_update_memory(learner, d, K, be.name)
        self.R0 = int(math.floor(float(learner.average_start) * self.max_iter))
        self.average = self.output == "average"
        self.lam_n = self.lam * n
        self.M = np.zeros((d, d))
        self.Msum = np.zeros((d, d)) if self.average else None
        self.n_window = 0
        self.rng = plan.rng
        self.Mrand = None
        self.hist: dict[str, list] = {k: [] for k in self.KEYS}
        self.cum = np.zeros(3)               # running sums: hinge, mistakes, squared hinge
        self.states: list = [None] * K
        self.reason, self.n_iter, self.criterion = "max_iter", 0, None
        self.first = 1
        self.t_start = time.perf_counter()

    def restore(self) -> None:
        """Continue from the checkpoint of a crashed driver (checked: the
        model against its dual variables, the generator's state)."""
        plan = self.plan
        (self.first, self.states, self.M, self.Msum, self.n_window, self.cum, self.Mrand,
         self.hist) = _restore(plan, self.owner, self.K, self.d, self.average, self.hist)
        _check_primal(plan, self.owner, self.states, self.M, self.Msum, self.lam_n)
        self.first += 1
        self.n_iter = self.first - 1
        try:
            self.rng.bit_generator.state = plan.resumed[2]["rng"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{self.owner}: the checkpoint's generator state is malformed") \
                from None

    def diverged(self, r: int) -> FloatingPointError:
        return FloatingPointError(f"{self.owner}: training diverged (non-finite margin or "
                                  f"norm in CoCoA+ round {r}); scale the features down or "
                                  "raise alpha.")

    def complete(self, P, D, gap) -> float:
        """Fill the last history record's objectives; its relative gap."""
        hist = self.hist
        rel = relative_gap(P, gap)
        hist["primal"][-1], hist["dual"][-1] = float(P), float(D)
        hist["gap"][-1], hist["rel_gap"][-1] = float(gap), float(rel)
        return rel

    def checkpoint(self, r: int, last: bool) -> None:
        plan = self.plan
        if plan.checkpoint is None or not plan.checkpoint.due(r, last):
            return
        pairs = self.be.gather(list(self.states))
        arrays = {"M": self.M, "cum": self.cum,
                  "alpha": np.concatenate([a for a, _ in pairs]),
                  "sizes": np.array([a.shape[0] for a, _ in pairs], dtype=np.int64)}
        if self.average:
            arrays["Msum"] = self.Msum
            arrays["alpha_sum"] = np.concatenate([b for _, b in pairs])
        if self.Mrand is not None:
            arrays["Mrand"] = self.Mrand[0]
        plan.save_round(r, arrays, last=last, meta={
            "n_window": self.n_window, "hist": self.hist, "rng": self.rng.bit_generator.state,
            "rand_round": None if self.Mrand is None else self.Mrand[1]})

    def round(self, r: int) -> bool:
        """CoCoA+ round ``r`` (1-based): the local passes, the added updates,
        the objectives of ``M^{r-1}``; True when ``M^{r-1}`` met ``tol``
        (this round's updates are then discarded)."""
        be, n = self.be, self.n
        cfg = {"owner": self.owner, "round": r - 1, "sigma": self.sigma, "lam_n": self.lam_n,
               "average": self.average, "accumulate": r > self.R0, "evaluate": r > 1}
        Mb = be.broadcast(self.M)
        res = be.map(_round_task, Mb, self.sup, cfg, states=self.states)
        total = be.reduce(_add_updates, be.apply(_update_of, res))
        dM, st = be.gather(total)
        if r > 1:                            # the objectives of M^{r-1}
            if st[_BAD]:
                raise self.diverged(r)
            rel = self.complete(*_objectives(st[_P_SQ], st[_D_CONJ], self.M, self.lam, n))
            self.criterion = rel
            if self.tol is not None and rel <= self.tol:
                self.reason = "tol"
                be.release([res, total])
                return True
        if st[_BAD]:
            raise self.diverged(r)
        if int(st[_COUNT]) != n:
            raise ValueError(f"{self.owner}: the partitions hold {int(st[_COUNT])} triplets, "
                             f"{n} were planned")
        new_states = be.apply(_state_of, res)
        be.release([res, total])
        be.release(self.states if r > 1 else [])
        self.states = new_states
        self.M = self.M + dM
        if not np.isfinite(self.M).all():
            raise self.diverged(r)
        self.n_iter = r
        if r > self.R0:
            self.n_window += 1
            if self.average:
                self.Msum += self.M
            elif self.output == "random" and self.rng.random() * self.n_window < 1.0:
                self.Mrand = (self.M.copy(), r)
        self._record(r, st)
        self.checkpoint(r, r == self.max_iter)
        return False

    def _record(self, r: int, st: np.ndarray) -> None:
        """Round ``r``'s history record (its objectives filled by the next
        round's tasks or :meth:`final_objectives`)."""
        hist, cum, n = self.hist, self.cum, self.n
        cum += (st[_LOSS], st[_MISTAKES], st[_SQ])
        T = r * n
        hist["step"].append(T)
        hist["seconds"].append(time.perf_counter() - self.t_start)
        hist["loss"].append(float(st[_LOSS] / n))
        hist["avg_loss"].append(float(cum[0] / T))
        hist["mistake_rate"].append(float(cum[1] / T))
        hist["avg_sq_loss"].append(float(cum[2] / T))
        for k in ("primal", "dual", "gap", "rel_gap"):
            hist[k].append(None)

    def final_objectives(self):
        """The last kept iterate's objectives (unless known) and the
        average's (one evaluation pass); ``(Mbar, its objectives)``, None
        each without averaging."""
        be, lam, n = self.be, self.lam, self.n
        last_known = self.reason == "tol"
        Mbar = self.Msum / self.n_window if (self.average and self.n_window > 0) else None
        out_obj = None
        if not last_known or Mbar is not None:
            ev = be.gather(be.reduce(tree_sum, be.map(
                _eval_task, be.broadcast(self.M),
                None if Mbar is None else be.broadcast(Mbar),
                self.sup, max(self.n_window, 1), self.owner, states=self.states)))
            if ev[4]:
                raise self.diverged(self.n_iter)
            if not last_known:
                self.criterion = self.complete(*_objectives(ev[0], ev[1], self.M, lam, n))
                if self.tol is not None and self.criterion <= self.tol:
                    self.reason = "tol"
            if Mbar is not None:
                out_obj = _objectives(ev[2], ev[3], Mbar, lam, n)
        return Mbar, out_obj

    def _output(self, Mbar, out_obj) -> tuple:
        """``(W, the solver's average accumulator, the output's objectives)``
        for the ``output`` rule."""
        M, hist, d = self.M, self.hist, self.d
        t, T0 = self.n_iter * self.n, self.R0 * self.n
        last = (hist["primal"][-1], hist["dual"][-1], hist["gap"][-1])
        if self.output == "average":
            if Mbar is None:
                return M.copy(), np.zeros((d, d)), last
            return Mbar, t * M - (t - T0) * Mbar, out_obj
        if self.output == "random":
            if self.Mrand is None:
                return M.copy(), M.copy(), last
            i = self.Mrand[1] - 1
            return (self.Mrand[0], self.Mrand[0].copy(),
                    (hist["primal"][i], hist["dual"][i], hist["gap"][i]))
        return M, None, last

    def store(self, alphas: list | None, Mbar, out_obj) -> None:
        """The in-memory SDCA's fitted attributes (its solver's state) and
        ``plan.info["report"]``; ``alphas`` None: the duals were left on the
        workers (``keep_duals``), the model keeps none."""
        learner, n, output, hist = self.learner, self.n, self.output, self.hist
        alpha = np.ascontiguousarray(np.concatenate(alphas)) if alphas else np.zeros(0)
        ids = np.arange(n if alphas is not None else 0, dtype=np.int64)
        self.be.release(self.states)
        W, avg, out_obj = self._output(Mbar, out_obj)
        solver = SDCASolver.from_state(
            M=self.M, alpha=alpha, dual_ids=ids, next_id=n,
            lam=self.lam, n_scale=n, t=self.n_iter * n, T0=self.R0 * n, output=output,
            avg=avg if output == "average" else None,
            rand=avg if output == "random" else None, owner=self.owner)
        solver.duals_dropped = alphas is None
        learner._solver = solver
        learner._rng = self.rng
        learner._store()
        learner.W_ = W.copy() if W is self.M else W
        self.plan.info["report"] = {
            "rounds": self.n_iter, "sigma": self.sigma,
            "gap": hist["gap"][-1] if hist["gap"] else None,
            "rel_gap": hist["rel_gap"][-1] if hist["rel_gap"] else None,
            "output_primal": float(out_obj[0]), "output_dual": float(out_obj[1]),
            "output_gap": float(out_obj[2])}


def fit(learner, plan) -> None:
    """Strategy ``"cocoa"``: CoCoA+ rounds of local SDCA (see module
    docstring) and the in-memory SDCA's fitted attributes.

    Parameters
    ----------
    learner : tripletml.SDCA
    plan : tripletml.distributed.partitioned.PartitionedFit
    """
    if learner.start == "identity":
        raise ValueError("SDCA: start='identity' takes the identity's scale from all the "
                         "triplets, which a partitioned fit does not gather; CoCoA+ starts at 0 "
                         "(start='zero', or 'auto').")
    run = _CoCoARounds(learner, plan)
    bar = progress_bar(run.max_iter, verbose=learner.verbose, desc=run.owner, unit="round")
    if plan.resumed is not None:             # a checkpoint of a crashed driver
        run.restore()
    try:
        for r in range(run.first, run.max_iter + 1):
            if run.round(r):
                break
            if bar is not None:
                bar.update(1)
        Mbar, out_obj = run.final_objectives()
        # O(n) at the driver only when asked for (keep_duals=True: a continuation)
        alphas = run.be.gather(run.be.apply(_alpha_of, run.states)) \
            if learner.keep_duals is True else None
    finally:
        if bar is not None:
            bar.close()
    run.store(alphas, Mbar, out_obj)
    result = TrainingResult(n_iter=run.n_iter, stop_reason=run.reason,
                            criterion=run.criterion, history=run.hist,
                            seconds=time.perf_counter() - run.t_start)
    apply_result(learner, result, tol=run.tol, what=learner._criterion_name,
                 advice="increase max_iter or tol, or set tol=None for a fixed budget",
                 stacklevel=6)


#: CoCoA+ (SDCA's own strategy): rounds with checkpoints, a dense model
#: shipped every round
STRATEGY = PartitionedStrategy("cocoa", fit, checkpoints=True, ships_model=True)
