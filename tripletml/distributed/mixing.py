"""Iterative parameter mixing over the partitions (strategy ``"mixing"``):
OASIS, LORETA, IterativePA, NaivePA and FactoredGD.

McDonald, Hall & Mann, "Distributed training strategies for the structured
perceptron", NAACL 2010, Algorithm 3 (Figure 3, iterative parameter mixing):

    w^(0) = the initial model
    for round n = 1, ..., N:
        on every partition i (in parallel):
            w_i = OneEpoch(T_i, w^(n-1))      # one local pass from the mix
        w^(n) = sum_i mu_i w_i                 # the mix

Here a local pass is the learner's own online pass, exactly its in-memory
step kernels (the OASIS PA step, the LORETA-1 / general LORETA retraction,
the factored GD / PA steps) over the partition's triplets
(:meth:`Supervision.triplets`, the same in every round) in the round's order
``sup.order(p, m_p, round)``, starting from the current mixed model.

**Weights.**  ``mu_i = m_i / M`` with ``m_i`` the partition's triplets and
``M`` their total (McDonald et al.'s "uniform" mixing is ``mu_i = 1/K``;
proportional weights give a partition the share of the pass it holds, and a
partition without triplets has ``mu_i = 0`` and is left out).

**Passes and rounds.**  ``max_iter`` counts passes over all the data (every
triplet is seen once per pass), so ``max_iter`` passes make as many steps as
``max_iter`` in-memory passes.  A pass is made of ``R`` *mixing rounds*
(:data:`ROUNDS_PER_PASS`, default ``"blocks"``): the blocks of the
in-memory pass (:func:`~tripletml.core.online.block_size`: about 20
blocks, at least ``BLOCK_MIN`` steps each); for the learners with a step
size (LORETA, FactoredGD: :func:`splits_blocks`) each block is split into
rounds of at most :data:`ROUND_STEPS` = 1,000 steps of all partitions
together, while the passive-aggressive learners mix once per block
(measured on letter, d = 16: OASIS with rounds of 750 steps lost .02 to .04
at K = 4 to 16, once per block of 1,500 it gained; LORETA once per block
of 5,000 lost .02 to .03, with rounds of 1,000 it kept its quality; at
the defaults OASIS's 30,000 triplets make 20 rounds per pass, LORETA's
100,000 make 100).  Round ``j`` runs every partition's share ``m_i / M`` of the round's steps of its
pass order (:func:`chunk_bounds`) from the mixed model, then mixes (issue
41: "more frequent mixing within a pass").  Why: one mix per pass lets every
partition run its whole share without seeing the others' steps, and the
mix then either averages (the progress of ``M / K`` sequential steps) or
adds ``K`` updates computed from one point; with a mix every round the
updates combined are at most one round stale (delayed-update SGD: Langford,
Smola & Zinkevich, NIPS 2009, "Slow learners are fast"; Dekel,
Gilad-Bachrach, Shamir & Xiao, JMLR 2012, distributed mini-batches: the
serial rate as long as the batch is small against the pass).  Cost: ``R``
round trips (model broadcast, tasks, tree reduction, gather) per pass
instead of 1; a cost model that counts one round trip per pass
(:mod:`tripletml.distributed.cost`) must multiply it by ``R``
(``partitioned_["rounds_per_pass"]``, ``["mixing_rounds"]``).  With one
partition and ``"blocks"`` the rounds are the in-memory pass's blocks.
``tol`` is the in-memory learner's: the relative change of the mean pass
loss (the per-partition sums of the steps' losses before their updates,
tree-reduced, over ``M``) between consecutive passes.  ``history_`` has one
record per pass with the in-memory keys (``loss``, the running means
``avg_loss`` and ``mistake_rate`` over all steps; LORETA's ``pinv_drift`` is
the largest over the partitions) and ``mix_step``, the mean over the pass's
rounds of the step on the averaging scale (``sum_i c_i g``: 1 = the
average, K = adding).

**Tail average.**  With ``average=True`` (the learners' default) the fit
returns, as the in-memory fit does, the step-weighted average of the
iterates at the block ends of the last pass: here the mixed models after
the pass's rounds (re-truncated to rank k for the factored learners,
:func:`~tripletml.linalg.lowrank_mix.mix_truncate`; a LORETA average that
lost rank, or a single snapshot, keeps the last iterate; ``averaged_`` says
which).  The rounds continue from the last iterate, as the in-memory passes
do.  (Before issue 41 the partitioned fit returned the last iterate: on
letter at K = 1 OASIS lost .085 test mAP against the in-memory fit.)

**The mix of a round** (:data:`MIX_RULE`, default ``"ratio"`` for every
learner).  With ``D_i = W_i - W0`` the local updates of the partitions that
stepped in the round:

* ``"add"`` -- ``W0 + sum_i D_i``, CoCoA+'s adding (Ma, Smith, Jaggi et
  al., ICML 2015, gamma = 1, sigma' = 1): the sequential pass's sum of
  steps up to one round's staleness.  (``"auto"``: adding for the learners
  with a step size, LORETA and FactoredGD, ``"ratio"`` for the others.
  Measured at one mix per in-memory block: adding kept LORETA's optdigits
  quality at K = 16 but lost .016 to .031 on letter, d = 16, where the
  partitions' updates overlap; the ratio rule on rounds of 1,000 steps
  kept both.)  A factored sum that is not a finite rank-k
  point (LORETA) falls back to the average (``partitioned_["mix_fallbacks"]``).
* ``"ratio"`` (the default) -- for the passive-aggressive learners
  (OASIS, IterativePA, NaivePA) each step solves its triplet's constraint
  exactly (a dual
  coordinate step of ``min 1/2 ||W - W0||^2 + C sum hinge``; with the cap
  ``C`` OASIS's pass *is* SDCA on that problem), so adding ``K`` of them
  computed from one point overshoots when the updates are correlated.
  CoCoA+ makes the local problems safe with ``sigma' >= sigma'_min`` where
  ``||sum_i D_i||^2 <= sigma' sum_i ||D_i||^2``; for the PA steps CoCoA+
  with ``sigma'`` is the mix ``W0 + (1 / sigma') sum_i D_i``.  Here
  ``sigma'`` is that bound's smallest value for the round's own updates,
  ``g = 1 / sigma' = sum_i ||D_i||^2 / ||sum_i D_i||^2`` clipped to
  ``[1 / n, 1]`` (n the partitions of the round): orthogonal updates are
  added, equal ones averaged.  Two scalars per partition and one norm on
  the driver (factors: k x k Gram matrices, no d x d product).  For the
  gradient learners (LORETA, FactoredGD) the same bound is CoCoA+'s safe
  aggregation of their first-order steps: over a short round a
  partition's update is mostly its own triplets' noise, orthogonal to the
  others' (g near 1, adding: the sequential pass), and the rule averages
  only what the partitions repeat.
* ``"search"`` -- the line search below, one mix per round on the grid
  between the average and adding (one more map per round).

With ``ROUNDS_PER_PASS = 1`` and ``MIX_RULE = "search"`` the fit is the one
before issue 41 (one mix per pass, the line search); its efficiency and the
new one's are in BENCHMARKS.md (``python -m bench.bench_mixing_quality``).

**The combination** (the weights ``c_i``, and ``1 - sum_i c_i g`` for
``W0``, are the round's mix rule's, below).

* OASIS: the weighted sum of the dense ``W_i`` (d x d), tree-reduced.
* The factored learners (``W = A B^T`` of rank k): ``sum_i c_i A_i B_i^T``
  (with ``W0``) has rank up to ``(K + 1) k``; it is re-truncated to rank k without forming a
  d x d matrix (:func:`tripletml.linalg.lowrank_mix.mix_truncate`: thin QRs
  of the stacked ``[sqrt(mu_i) A_i]`` and ``[sqrt(mu_i) B_i]``, the SVD of
  the ``Kk x Kk`` core, the top k triplets; ``O((n + m)(Kk)^2)``).  The
  singular values are split evenly, ``A = P S^(1/2)``, ``B = Q S^(1/2)``
  (:func:`~tripletml.linalg.lowrank_mix.split_balanced`): for LORETA the
  factorisation it uses itself when it re-factors (its model is the point
  ``W`` on the rank-k manifold; the pseudo-inverses ``pinv_A_, pinv_B_`` are
  recomputed exactly, ``P S^(-1/2)``, ``Q S^(-1/2)``); for the
  gradient / PA baselines on the factors the balanced split is the one
  their dynamics keep: gradient flow on ``(A, B)`` conserves ``A^T A -
  B^T B``, zero at the identity initialization ``A = B``, and their steps
  are equivariant under a common rotation ``(A R, B R)``, so the remaining
  freedom does not matter.
* With one partition holding triplets the mix is that partition's model,
  unchanged (no re-factoring): the fit is then the in-memory learner's
  passes over the partition's triplets in the rounds' orders, to rounding
  (``partial_fit`` over those orders gives the same model).

**Initialization.**  The model is initialized on the driver by the
learner's ``_init_model_partitioned`` from the column energies of all
preprocessed rows (summed over the partitions; the factored learners'
identity initialization on the live axes) and, for the factored learners'
default ``init="pca"`` and ``rank=None``, from the spectrum of the merged
second moments (:func:`partitioned_spectrum`: the in-memory start and rank,
to rounding), and ``eta0="auto"`` is resolved
from the norms of the first ``AUTO_ETA_HEAD`` triplets taken from the
partitions in proportion to their triplets (the in-memory rule on the
partition's triplets when K = 1).

**The mixing step of** ``"search"`` **(a line search).**  Averaging K local runs that moved
alike from the same start moves the mix about as far as *one* partition's
pass, so a round makes the progress of about M / K sequential steps
(BENCHMARKS.md).  *Adding* the updates (Ma, Smith, Jaggi et al., ICML
2015, "adding vs. averaging", for CoCoA+) restores it for some learners
and diverges for others.  So each round the step ``s`` of

    W(s) = W0 + s sum_i mu_i (W_i - W0)

is chosen from the geometric grid ``s_j = K^(j / (MIX_STEPS - 1))``
between 1 (McDonald's average) and ``K`` = the partitions holding triplets
(adding, for equal shares), by the lowest mean triplet hinge loss (the loss
the passes minimize) of every candidate on the partitions' triplets: one
more map over the partitions (each evaluates every candidate on its
triplets, or on ``EVAL_TRIPLETS`` evenly strided ones), the per-candidate
sums tree-reduced; the smallest step wins ties.  For OASIS the margins are
linear in W, so two margin passes (of ``W0`` and ``D = Wbar - W0``) give
every candidate's.  For the factored learners every candidate is the
rank-up-to-``(K + 1) k`` combination with signed weights (``1 - s`` for
``W0``, ``s mu_i`` for the ``W_i``), re-truncated to rank k
(:func:`~tripletml.linalg.lowrank_mix.mix_truncate_many`, the QRs of the
stacks shared by the candidates) *before* it is evaluated: the evaluated
model is the one kept.  The choice is recorded per round in ``history_``
(``mix_step``, ``mix_loss``) and in ``partitioned_`` (``mix_grid``,
``mix_steps``, ``mix_losses`` of every candidate, ``seconds_pass``,
``seconds_search``).  ``MIX_STEPS = 1`` is McDonald et al.'s plain
averaging (no evaluation pass).  The grid has no constant fitted to a data
set: its ends are the two classical mixes, its points are scale-free.

Its statistical efficiency (test mAP against the partitions K, per learner
and grid) and the cost of the search are in BENCHMARKS.md ("Parameter
mixing: the mixing step").

Each round ships the mixed model to every partition and one local model
back (a dense d x d W for OASIS: see the issue's cost model; ``2 d k`` for
the factored learners).  Tasks are pure: a task clones the learner's
parameters into a fresh estimator, copies the shared model into it and
returns new arrays.
"""
from __future__ import annotations

import copy
import math
import time
from typing import Any

import numpy as np
from sklearn.base import clone

from tripletml.core import factored
from tripletml.core.factored import column_energy, moment_product, second_moment, spectrum_from
from tripletml.core.online import (AUTO_ETA_HEAD, BLOCK_MIN, WATCH_HEAD, auto_step_norms,
                                   block_size, new_watch)
from tripletml.distributed.reduction import tree_sum
from tripletml.distributed.strategy import PartitionedStrategy, partition_shares
from tripletml.engine.driver import StepReport, TrainingResult, apply_result, run
from tripletml.engine.history import History
from tripletml.engine.stopping import relative_change
from tripletml.linalg.lowrank_mix import mix_truncate, mix_truncate_many, split_balanced
from tripletml.linalg.pinv import PinvFactors
from tripletml.linalg.sparse_rows import as_csr, bilinear_margins, diff_buffers

__all__ = ["fit", "model_kind", "mix_steps", "mix_rule", "rounds_per_pass", "chunk_bounds",
           "MIX_STEPS", "MIX_RULE", "ROUNDS_PER_PASS", "EVAL_TRIPLETS", "STRATEGY"]

#: Points of the mixing step's geometric grid ``s_j = K^(j / (MIX_STEPS - 1))``,
#: ``j = 0, ..., MIX_STEPS - 1``, between 1 (McDonald's average) and
#: ``K`` = the partitions holding triplets (adding the updates).  1: plain
#: averaging, no evaluation pass.
MIX_STEPS: int = 3

#: Mixing rounds per pass over the data.  ``"blocks"``: one round per block
#: of the in-memory pass (:func:`~tripletml.core.online.block_size` of all
#: ``M`` triplets: at least ``BLOCK_MIN`` steps, about ``BLOCKS_PER_EPOCH``
#: = 20 blocks per pass), so that a round mixes as many steps as the
#: in-memory fit makes between two snapshots of its tail average; an int:
#: that many rounds per pass (1: one mix per pass, McDonald et al.'s
#: epochs).  Every round ships the model to every partition and back.
ROUNDS_PER_PASS: "int | str" = "blocks"

#: The most steps (of all partitions together) in one mixing round of
#: ``"blocks"``: an in-memory block longer than this is split into
#: ``ceil(block / ROUND_STEPS)`` rounds (the tail average still takes its
#: snapshots at the block ends).  ``BLOCK_MIN``: the in-memory learner's
#: smallest block.
ROUND_STEPS: int = BLOCK_MIN

#: How a round's local models are mixed: ``"add"`` (the local displacements
#: added, ``W0 + sum_i (W_i - W0)``: CoCoA+'s adding, gamma = 1) or
#: ``"search"`` (the step ``s`` of ``W0 + s sum_i mu_i (W_i - W0)`` chosen on
#: the grid :func:`mix_steps` by the training loss: one more map per round).
MIX_RULE: str = "ratio"

#: Triplets per partition on which the candidates are evaluated: None = all
#: of them, an int = an evenly strided, fixed subsample of that many.  The
#: search only ranks a few candidates by their mean loss, whose standard
#: error on 16,384 triplets is under 1 % of the loss's spread (the cost of
#: evaluating all of a large partition's triplets: BENCHMARKS.md).
EVAL_TRIPLETS: int | None = 16384

#: evaluated in chunks of this many triplets (memory ``O(chunk * steps * k)``)
_EVAL_CHUNK = 4096


def _split_blocks(m_total: int, split: bool = True) -> tuple[int, int]:
    """``(B, S)``: the in-memory block of a pass over ``M`` triplets and the
    rounds each block is split into (at most :data:`ROUND_STEPS` steps of
    all partitions together in a round when ``split``, else 1)."""
    M = max(int(m_total), 1)
    B = block_size(M)
    if not split:
        return B, 1
    return B, max(1, -(-min(B, M) // int(ROUND_STEPS)))


def splits_blocks(learner) -> bool:
    """Whether the learner's rounds split the in-memory blocks into rounds
    of :data:`ROUND_STEPS`: the learners with a step size (LORETA,
    FactoredGD); the passive-aggressive ones (OASIS, IterativePA, NaivePA)
    mix once per in-memory block."""
    return hasattr(learner, "eta0")


def rounds_per_pass(m_total: int, setting=None, split: bool = True) -> int:
    """The mixing rounds of one pass over ``m_total`` triplets
    (:data:`ROUNDS_PER_PASS`; ``split``: :func:`splits_blocks`)."""
    v = ROUNDS_PER_PASS if setting is None else setting
    m = max(int(m_total), 1)
    if v == "blocks":
        B, S = _split_blocks(m, split)
        return -(-m // B) * S
    if isinstance(v, str) or int(v) < 1:
        raise ValueError(f"mixing: ROUNDS_PER_PASS must be 'blocks' or an int >= 1, got {v!r}")
    return min(int(v), m)


def _global_bound(j: int, R: int, M: int) -> int:
    """The pass's step (of all ``M``) at which round ``j`` of ``R`` starts."""
    if j >= R:
        return M
    B = block_size(M)
    nb = -(-M // B)
    S = R // nb if R % nb == 0 else 0
    if S >= 1 and S == _split_blocks(M)[1] or S == 1:   # "blocks": S rounds per block
        b, s = divmod(j, S)
        L = min(B, M - b * B)
        return b * B + (s * L) // S
    return (j * M) // R


def snapshot_after(j: int, R: int, M: int) -> bool:
    """Whether the mixed model after round ``j`` is a snapshot of the tail
    average: at the in-memory block ends (every round when the rounds are
    not the blocks' subdivision)."""
    M = max(int(M), 1)
    nb = -(-M // block_size(M))
    S = R // nb if R % nb == 0 else 0
    if S >= 1 and S == _split_blocks(M)[1] or S == 1:
        return (j + 1) % S == 0 or j == R - 1
    return True


def chunk_bounds(m: int, j: int, n_rounds: int, m_total: int) -> tuple[int, int]:
    """The steps ``[lo, hi)`` of a pass over a partition's ``m`` triplets
    made in round ``j`` of ``n_rounds``: the partition's share ``m / M`` of
    the pass's steps ``[G_j, G_(j+1))`` of round j (``lo = floor(G_j m /
    M)``); with one partition (``m = M``) exactly those steps: the
    in-memory blocks, each split into rounds of at most
    :data:`ROUND_STEPS`."""
    M = max(int(m_total), 1)
    R = int(n_rounds)
    if R <= 1:
        return 0, int(m)
    lo = (_global_bound(j, R, M) * int(m)) // M
    hi = int(m) if j >= R - 1 else (_global_bound(j + 1, R, M) * int(m)) // M
    return min(lo, int(m)), min(hi, int(m))


def mix_rule(model: dict) -> str:
    """The mix of a round (:data:`MIX_RULE`, default ``"ratio"``; ``"auto"``: ``"add"`` for a
    learner with a step size -- LORETA, FactoredGD: first-order steps, whose
    summed updates are the sequential pass's up to one round's staleness --
    and ``"ratio"`` for the passive-aggressive learners -- OASIS,
    IterativePA, NaivePA: each step solves its triplet's constraint exactly,
    a dual coordinate step, so CoCoA+'s separability bound applies)."""
    rule = MIX_RULE
    if rule == "auto":
        return "add" if "eta" in model else "ratio"
    if rule not in ("add", "ratio", "search"):
        raise ValueError(f"mixing: MIX_RULE must be 'auto', 'add', 'ratio' or 'search', "
                         f"got {rule!r}")
    return rule


def mix_steps(k_active: int, n_steps: int | None = None) -> np.ndarray:
    """The candidate mixing steps: the geometric grid of ``n_steps`` points
    from 1 to ``k_active`` (``[1.0]`` when either is 1)."""
    n = MIX_STEPS if n_steps is None else int(n_steps)
    if n < 1:
        raise ValueError(f"mixing: MIX_STEPS must be >= 1, got {n}")
    if n == 1 or k_active <= 1:
        return np.ones(1)
    return float(k_active) ** (np.arange(n) / (n - 1))


# ---------------------------------------------------------------------------
# the model of each learner
# ---------------------------------------------------------------------------
#: the model kinds parameter mixing knows
MODEL_KINDS = ("dense", "pinv", "factors")


def model_kind(learner) -> str:
    """What the learner declares its model to be (its class attribute
    ``_model_kind``): ``"dense"`` (a d x d ``W_``: OASIS), ``"pinv"``
    (factors with maintained pseudo-inverses:
    :class:`~tripletml.core.pinv_owner.PinvFactorsOwner`, LORETA) or
    ``"factors"`` (``A_, B_``:
    :class:`~tripletml.core.factored.FactoredBilinearMixin`, the factored
    baselines); a learner that declares nothing and has a ``W_`` is dense."""
    kind = getattr(type(learner), "_model_kind", None)
    if kind in MODEL_KINDS:
        return kind
    if kind is None and "W_" in getattr(type(learner), "_fitted_arrays", {}):
        return "dense"
    raise TypeError(f"{type(learner).__name__}: no parameter-mixing model (needs W_ or A_, B_)")


def _get_model(est, kind: str) -> dict:
    """The model state of a learner (shared with the tasks)."""
    out: dict[str, Any] = {"t": int(getattr(est, "t_", 0))}
    if getattr(est, "eta_", None) is not None:
        out["eta"] = float(est.eta_)
    if kind == "dense":
        out["W"] = est.W_
    else:
        out["rank"] = int(est.rank_)
        out["A"], out["B"] = est.A_, est.B_
    if kind == "pinv":
        out["PA"], out["PB"] = est.pinv_A_, est.pinv_B_
        out["since_check"] = int(est._factors.since_check)
    return out


def _set_model(est, kind: str, model: dict, *, copy: bool, n_refresh: int = 0) -> None:
    """Put ``model`` into ``est`` (copies of the arrays with ``copy``: the
    kernels update in place)."""
    c = (lambda a: np.array(a, dtype=np.float64, order="C", copy=True)) if copy else \
        (lambda a: a)
    est.t_ = int(model["t"])
    if "eta" in model:
        est.eta_ = float(model["eta"])
    if kind == "dense":
        est.W_ = c(model["W"])
        return
    est.rank_ = int(model["rank"])
    est.A_, est.B_ = c(model["A"]), c(model["B"])
    if kind == "pinv":
        f = PinvFactors(est.A_, est.B_, c(model["PA"]), c(model["PB"]),
                        check_every=est.pinv_check_every, tol=est.pinv_tol,
                        owner=type(est).__name__, n_refresh=n_refresh)
        f.since_check = int(model.get("since_check", 0))
        est._factors = f
        est._store()


# ---------------------------------------------------------------------------
# tasks (module-level, pure)
# ---------------------------------------------------------------------------
def _setup_task(p, sup, head: int) -> dict:
    """Per partition: its triplet count, the solver's width, the column
    energies of its preprocessed rows and the head norms for ``eta0="auto"``."""
    X = sup.rows(p)
    T = sup.triplets(p, X)
    qq, vv = auto_step_norms(sup.csr_rows(p, X), T, head)
    return {"m": int(T.shape[0]), "d": int(X.shape[1]), "energy": column_energy(X),
            "qq": qq, "vv": vv}


def _moment_task(p, sup) -> np.ndarray:
    """The partition's second moment ``X_p^T X_p`` of its preprocessed rows
    (d x d; summed over the partitions it is the in-memory ``X^T X``)."""
    return second_moment(sup.rows(p))


def _matmat_task(p, sup, Q: "_Shared") -> np.ndarray:
    """``X_p^T (X_p Q)`` of the partition's preprocessed rows (d x b)."""
    return moment_product(sup.rows(p), Q.model)


def partitioned_spectrum(learner, backend, sup, d: int, energy: np.ndarray):
    """The :class:`~tripletml.core.factored.Spectrum` of all the
    preprocessed training rows from the partitions, by the in-memory rule
    (:func:`~tripletml.core.factored.spectrum_from`): the second
    moments ``X_p^T X_p`` summed in a tree up to
    :data:`~tripletml.core.factored.MOMENT_MAX_FEATURES` features, above
    it the products ``X_p^T (X_p Q)`` summed once per sweep of the subspace
    iteration.  The trace is the summed column energy."""
    p = learner._spectrum_size(d)
    trace = float(np.sum(energy))
    if d <= factored.MOMENT_MAX_FEATURES:
        handles = backend.map(_moment_task, sup)
        red = backend.reduce(tree_sum, handles)
        M = backend.gather(red)
        backend.release(list(handles) + [red])
        return spectrum_from(d, p, trace, moment=M)

    def matmat(Q):
        h = backend.broadcast(_Shared(np.ascontiguousarray(Q)))
        handles = backend.map(_matmat_task, sup, h)
        red = backend.reduce(tree_sum, handles)
        out = backend.gather(red)
        backend.release(list(handles) + [red, h])
        return out

    return spectrum_from(d, p, trace, matmat=matmat)


def _sum_energy(*items: dict) -> dict:
    out = dict(items[0])
    e = np.array(items[0]["energy"], dtype=np.float64, copy=True)
    for it in items[1:]:
        e = e + it["energy"]
    out["energy"] = e
    return out


class _Shared:
    """The mixed model as one broadcast value (``client.scatter`` would
    scatter a bare dict item by item)."""

    __slots__ = ("model",)

    def __init__(self, model: dict):
        self.model = model

    def __getstate__(self):
        return self.model

    def __setstate__(self, state):
        self.model = state


def _pass_task(p, sup, proto, kind: str, shared: _Shared, round_: int, weights: tuple,
               best: float | None, chunk: tuple | None = None) -> dict:
    """One local pass of a fresh copy of the learner over the partition's
    triplets in the round's order, from the mixed ``model``; returns the
    local model scaled for the mix (``mu W`` for a dense model, ``sqrt(mu)
    A``, ``sqrt(mu) B`` for factors; unscaled when ``mu = 1``) and the pass's
    loss statistics."""
    mu = float(weights[p.index])
    if mu == 0.0:
        return {"m": 0, "mu": 0.0}
    est = copy.copy(proto)        # a fresh, unfitted estimator (proto is a clone)
    _set_model(est, kind, shared.model, copy=True)
    X = sup.rows(p)
    T = sup.triplets(p, X)
    m = int(T.shape[0])
    order = sup.order(p, m, round_)
    if chunk is not None:                 # the mixing round's share of the pass
        lo, hi = chunk_bounds(m, *chunk)
        order = order[lo:hi]
        if hi <= lo:
            return {"m": 0, "mu": 0.0}
    T = np.ascontiguousarray(T[order])
    m = int(T.shape[0])
    Xc = sup.csr_rows(p, X)
    est._watch = new_watch(est, block_size(m))
    if best is not None:
        est._watch.update(float(best), "the previous rounds", "steps")
    init = est._initial_loss(Xc, T)
    if init is not None:
        est._watch.update(init, f"the mixed model of round {round_ + 1}", "steps")
    hist = History(keys=est._history_keys)
    passes = est._passes(Xc, T, hist)
    result = run(passes, name=type(est).__name__, max_iter=1, history=hist, watch=est._watch,
                 flush_window=WATCH_HEAD)
    est._finalize()
    out = {"m": m, "mu": mu, "loss": float(np.sum(passes.losses)),
           "mistakes": float(np.sum((passes.margins <= 0).astype(float)))
           if passes.has_margins else None,
           "drift": float(result.history.get("pinv_drift", [0.0])[-1])}
    out["dd"] = mu * mu * _sq_displacement(kind, est, shared.model)
    if kind == "dense":
        out["W"] = est.W_ if mu == 1.0 else est.W_ * mu
        return out
    r = math.sqrt(mu)
    out["A"] = [est.A_ if mu == 1.0 else est.A_ * r]
    out["B"] = [est.B_ if mu == 1.0 else est.B_ * r]
    if kind == "pinv":
        out["PA"], out["PB"] = est.pinv_A_, est.pinv_B_
        out["since_check"] = int(est._factors.since_check)
        out["n_refresh"] = int(est._factors.n_refresh)
    return out


def _canonical_signs(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The singular vectors with the sign that makes each column of ``P``'s
    entry of largest magnitude positive (``P diag(s) Q^T`` unchanged): the
    SVD's sign is otherwise free, and backends that reduce in different
    orders could return opposite factors of the same model."""
    if P.size == 0:
        return P, Q
    idx = np.argmax(np.abs(P), axis=0)
    sg = np.sign(P[idx, np.arange(P.shape[1])])
    sg[sg == 0] = 1.0
    return P * sg, Q * sg


def _with_signs(P, sv, Q):
    P, Q = _canonical_signs(P, Q)
    return P, sv, Q


def _sq_displacement(kind: str, est, model: dict) -> float:
    """``||W_i - W0||_F^2`` of a local model from the mixed one (factors:
    from k x k Gram matrices, no d x d product)."""
    if kind == "dense":
        return float(np.sum((est.W_ - model["W"]) ** 2))
    A, B, A0, B0 = est.A_, est.B_, model["A"], model["B"]
    return float(max(np.sum((A.T @ A) * (B.T @ B)) + np.sum((A0.T @ A0) * (B0.T @ B0))
                     - 2.0 * np.sum((A0.T @ A) * (B0.T @ B)), 0.0))


def _combine(*items: dict) -> dict:
    """Reduce: sums of the statistics and of the scaled dense models, the
    lists of scaled factors concatenated (no input is modified)."""
    live = [it for it in items if it["m"] > 0]
    if not live:
        return {"m": 0, "mu": 0.0}
    if len(live) == 1:
        return live[0]
    out = {"m": sum(it["m"] for it in live), "mu": sum(it["mu"] for it in live),
           "loss": sum(it["loss"] for it in live),
           "mistakes": None if live[0]["mistakes"] is None
           else sum(it["mistakes"] for it in live),
           "drift": max(it["drift"] for it in live),
           "n_models": sum(it.get("n_models", 1) for it in live),
           "dd": sum(it.get("dd", 0.0) for it in live)}
    if "W" in live[0]:
        W = live[0]["W"] + live[1]["W"]
        for it in live[2:]:
            W = W + it["W"]
        out["W"] = W
    else:
        out["A"] = [a for it in live for a in it["A"]]
        out["B"] = [b for it in live for b in it["B"]]
        if "n_refresh" in live[0]:
            out["n_refresh"] = sum(it["n_refresh"] for it in live)
    return out


def _eval_triplets(p, sup, cap: int | None, at: tuple | None = None):
    """The partition's rows (CSR) and the triplets the candidates are
    evaluated on: all of them, or those of the round ``at = (round, j, R,
    M)`` of the pass (:func:`chunk_bounds` in the pass's order); at most
    ``cap``, evenly strided (fixed)."""
    X = sup.rows(p)
    T = sup.triplets(p, X)
    m = int(T.shape[0])
    if at is not None:
        r, j, R, M = at
        lo, hi = chunk_bounds(m, j, R, M)
        T = T[sup.order(p, m, r)[lo:hi]]
        m = int(T.shape[0])
    if cap is not None and m > int(cap):
        T = T[(np.arange(int(cap)) * m) // int(cap)]
    return sup.csr_rows(p, X), np.ascontiguousarray(T)


def _eval_task(p, sup, kind: str, shared: _Shared, cands: _Shared, weights: tuple,
               cap: int | None, at: tuple | None = None) -> dict:
    """The summed triplet hinge loss of every candidate mix on the
    partition's (evaluated) triplets.

    Dense (OASIS): the candidates are ``W0 + s_j D`` with ``D = Wbar - W0``;
    margins are linear in W, so ``margin_j = margin(W0) + s_j margin(D)``
    (two margin passes for all candidates).  Factored: every candidate's
    re-truncated factors ``(A_j, B_j)``; ``margin_j = (q^T A_j) . (v^T B_j)``.
    """
    c = cands.model
    steps = np.asarray(c["steps"], dtype=np.float64)
    J = steps.shape[0]
    if float(weights[p.index]) == 0.0:
        return {"n": 0, "loss": np.zeros(J)}
    Xc, T = _eval_triplets(p, sup, cap, at)
    n = int(T.shape[0])
    if n == 0:
        return {"n": 0, "loss": np.zeros(J)}
    tot = np.zeros(J)
    if kind == "dense":
        buf = diff_buffers(Xc)
        mg0, mgd = np.empty(n), np.empty(n)
        bilinear_margins(shared.model["W"], Xc.indptr, Xc.indices, Xc.data, T, mg0, *buf)
        bilinear_margins(c["D"], Xc.indptr, Xc.indices, Xc.data, T, mgd, *buf)
        for j, st in enumerate(steps):
            tot[j] = np.maximum(1.0 - (mg0 + st * mgd), 0.0).sum()
        return {"n": n, "loss": tot}
    A, B = np.hstack(c["A"]), np.hstack(c["B"])
    k = c["A"][0].shape[1]
    for a in range(0, n, _EVAL_CHUNK):
        t = T[a:a + _EVAL_CHUNK]
        Q = Xc[t[:, 0]]
        V = Xc[t[:, 1]] - Xc[t[:, 2]]
        mg = (np.asarray(Q @ A) * np.asarray(V @ B)).reshape(t.shape[0], J, k).sum(axis=2)
        tot += np.maximum(1.0 - mg, 0.0).sum(axis=0)
    return {"n": n, "loss": tot}


def _sum_eval(*items: dict) -> dict:
    """Reduce: the candidates' loss sums (a fixed order, no input modified)."""
    loss = np.array(items[0]["loss"], dtype=np.float64, copy=True)
    for it in items[1:]:
        loss = loss + it["loss"]
    return {"n": sum(it["n"] for it in items), "loss": loss}


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------
class _MixingRounds:
    """The rounds as a :class:`~tripletml.engine.driver.Solver`: one
    ``step`` = one round (local passes on every partition, then the mix)."""

    def __init__(self, learner, plan, kind: str, model: dict, m_total: int, weights: tuple):
        self.learner, self.plan, self.kind = learner, plan, kind
        self.model = model
        self.proto = clone(learner)
        self.M = int(m_total)
        self.weights = weights
        self.round = 0
        self.prev_loss: float | None = None
        self.best: float | None = None
        self.means: dict[str, float] = {}
        self.n_refresh = 0
        self.keys = learner._history_keys
        self.k_active = sum(1 for w in weights if w > 0)
        self.chosen: list[float] = []
        self.candidate_losses: list[list[float]] = []
        self.mix_loss: float | None = None
        self.seconds_pass = self.seconds_search = 0.0
        self.n_searched = 0
        self.hist: History | None = None
        self.criterion: float | None = None
        self.n_rounds = rounds_per_pass(self.M, split=splits_blocks(learner))
        # the tasks scale their models by c_i: mu_i for the search (the
        # average's weights), 1 for adding
        self.rule = mix_rule(model)
        self.coef = weights if self.rule == "search" else tuple(
            1.0 if w > 0 else 0.0 for w in weights)
        self.averaging = bool(getattr(learner, "average", False))
        self.n_mixes = self.n_fallback = 0
        if self.averaging:            # the pass's tail average (not shipped)
            if kind == "dense":
                self.model = {**model, "avg_W": model["W"], "avg_ok": 0}
            else:
                self.model = {**model, "avg_A": model["A"], "avg_B": model["B"],
                              "avg_ok": 0}

    # ------------------------------------------------------- checkpoints
    _COUNTERS = ("round", "prev_loss", "best", "means", "n_refresh", "chosen",
                 "candidate_losses", "mix_loss", "seconds_pass", "seconds_search",
                 "n_searched", "criterion", "n_mixes", "n_fallback")

    def checkpoint(self, last: bool) -> None:
        """Save the state after ``self.round`` rounds (with their history
        records) when a checkpoint directory was given and the round is due."""
        ck = self.plan.checkpoint
        if ck is None or self.round == 0 or not ck.due(self.round, last):
            return
        arrays = {k: v for k, v in self.model.items() if isinstance(v, np.ndarray)}
        scalars = {k: (v.item() if isinstance(v, np.generic) else v)
                   for k, v in self.model.items() if not isinstance(v, np.ndarray)}
        meta = {"model": scalars, "counters": {k: getattr(self, k) for k in self._COUNTERS},
                "hist": None if self.hist is None else self.hist.data}
        self.plan.save_round(self.round, arrays, last=last, meta=meta)

    def restore(self, resumed) -> None:
        """The state of a checkpoint (arrays checked against this run's)."""
        r, arrays, meta = resumed
        name = type(self.learner).__name__
        want = {k: v for k, v in self.model.items() if isinstance(v, np.ndarray)}
        if set(arrays) != set(want) or any(
                arrays[k].shape != want[k].shape or arrays[k].dtype != want[k].dtype
                for k in want):
            raise ValueError(f"{name}: the checkpoint's model arrays do not match this run's")
        if not all(np.isfinite(a).all() for a in arrays.values()):
            raise ValueError(f"{name}: the checkpoint's model arrays hold NaN or infinity")
        scalars = meta.get("model") if isinstance(meta, dict) else None
        mine = {k: v for k, v in self.model.items() if not isinstance(v, np.ndarray)}
        if not isinstance(scalars, dict) or set(scalars) != set(mine) or any(
                isinstance(scalars[k], bool) or not isinstance(scalars[k], (int, float))
                or not np.isfinite(scalars[k]) for k in scalars) or any(
                scalars[k] != mine[k] for k in ("rank", "eta") if k in mine):
            raise ValueError(f"{name}: the checkpoint's model scalars are malformed or do not "
                             "match this run's (rank, step size)")
        try:
            model = {**scalars, **{k: np.array(v) for k, v in arrays.items()}}
            counters = meta["counters"]
            for k in self._COUNTERS:
                setattr(self, k, counters[k])
            hist = meta["hist"]
        except (KeyError, TypeError) as e:
            raise ValueError(f"{name}: the checkpoint's state is malformed ({e!r})") from None
        if self.round != r or not isinstance(hist, dict):
            raise ValueError(f"{name}: the checkpoint's state is malformed")
        if model["t"] != r * self.M:         # every round passes over all M triplets
            raise ValueError(f"{name}: the checkpoint's step count t={model['t']} is not "
                             f"{r} rounds of {self.M} triplets; it was edited or made from "
                             "other data (use another checkpoint_dir or resume=False)")
        self.model = model
        self.resumed_history = hist

    def _core(self, model: dict) -> dict:
        """The model the tasks need (without the driver's tail average)."""
        return {k: v for k, v in model.items() if not k.startswith("avg_")}

    def step(self, budget: int = 1) -> StepReport:
        """One pass over the data: ``n_rounds`` mixing rounds, each a share
        of every partition's pass (:func:`chunk_bounds`) from the mixed
        model, then the mix; the tail average of the pass's mixed models
        (``average=True``) is kept for the end of the fit."""
        self.checkpoint(last=False)          # the previous pass, with its record
        be, sup = self.plan.backend, self.plan.supervision
        name = type(self.learner).__name__
        t0 = int(self.model["t"])
        model = self.model
        scalars = {k: v for k, v in model.items() if not isinstance(v, np.ndarray)}
        tot = {"m": 0, "loss": 0.0, "mistakes": None, "drift": 0.0}
        snaps: list[tuple[dict, int]] = []
        since = 0
        chosen = []
        for j in range(self.n_rounds):
            self.j = j
            tic = time.perf_counter()
            shared = be.broadcast(_Shared(self._core(model)))
            handles = be.map(_pass_task, sup, self.proto, self.kind, shared, self.round,
                             self.coef, self.best, (j, self.n_rounds, self.M))
            red = be.reduce(_combine, handles)
            out = be.gather(red)
            be.release(list(handles) + [red])
            tac = time.perf_counter()
            self.seconds_pass += tac - tic
            self.n_mixes += 1
            if out["m"] == 0:
                be.release([shared])
                continue
            fields, st = self._mix(out, model, shared, tac)
            be.release([shared])
            chosen.append(st)
            if self.kind == "pinv":
                self.n_refresh += int(out["n_refresh"]) if "n_refresh" in out else 0
            tot["m"] += int(out["m"])
            tot["loss"] += out["loss"]
            if out["mistakes"] is not None:
                tot["mistakes"] = (tot["mistakes"] or 0.0) + out["mistakes"]
            tot["drift"] = max(tot["drift"], out["drift"])
            finite = all(np.isfinite(fields[k]).all() for k in ("W", "A", "B") if k in fields)
            if not finite:
                raise FloatingPointError(
                    f"{name}: training diverged (non-finite mixed model after pass "
                    f"{self.round + 1}); {self.learner._advice}")
            model = {**{k: v for k, v in scalars.items() if k != "since_check"}, **fields,
                     "t": int(model["t"]) + int(out["m"])}
            since += int(out["m"])
            if snapshot_after(j, self.n_rounds, self.M) and since > 0:
                snaps.append((fields, since))
                since = 0
        if since > 0:
            snaps.append((model, since))
        out = tot
        t = t0 + int(out["m"])
        new = {**model, "t": t}
        if self.averaging:
            new.update(self._tail_average(snaps, model))
        self.chosen.append(float(np.mean(chosen)) if chosen else 1.0)
        self.model = new
        loss = out["loss"] / max(self.M, 1)
        criterion = None if self.prev_loss is None else relative_change(self.prev_loss, loss)
        self.criterion = criterion
        self.prev_loss = loss
        self.best = loss if self.best is None else min(self.best, loss)
        self.round += 1
        record = self._record(loss, out, t0, t)
        return StepReport(iterations=1, units=int(out["m"]), t=t, criterion=criterion,
                          record=record, watch=[(loss, f"round {self.round}", "loss")])

    def _mix(self, out: dict, model: dict, shared, tac: float) -> tuple[dict, float]:
        """The mixed model of one round and its step on the averaging
        scale (``sum_i c_i`` for adding)."""
        single = out.get("n_models", 1) == 1 and out["mu"] == 1.0
        if single:                # one partition at full weight: its model as it is
            if self.kind == "dense":
                return {"W": out["W"]}, 1.0
            f = {"A": out["A"][0], "B": out["B"][0]}
            if self.kind == "pinv":
                f.update({"PA": out["PA"], "PB": out["PB"], "since_check": out["since_check"]})
            return f, 1.0
        mu = float(out["mu"])           # the sum of the coefficients c_i
        if self.rule == "add":
            return self._add(out, model, mu), mu
        if self.rule == "ratio":
            return self._ratio(out, model, mu)
        steps = mix_steps(int(out.get("n_models", 1)))
        if steps.shape[0] == 1:         # McDonald et al.'s average
            if self.kind == "dense":
                return {"W": out["W"] + (1.0 - mu) * model["W"]}, 1.0
            k = int(model["rank"])
            n = len(out["A"])
            rows = np.array([[1.0 - mu] + [1.0] * n])
            (svd,) = mix_truncate_many([model["A"]] + list(out["A"]),
                                       [model["B"]] + list(out["B"]), rows, k)
            return self._split(*svd), 1.0
        st, mix_loss, losses, fields = self._search(out, steps, shared, model, mu)
        self.mix_loss = mix_loss
        self.candidate_losses.append([float(v) for v in losses])
        self.seconds_search += time.perf_counter() - tac
        self.n_searched += 1
        return fields, st

    def _add(self, out: dict, model: dict, mu: float) -> dict:
        """Adding (CoCoA+, gamma = 1): ``W0 + sum_i c_i (W_i - W0)`` with the
        coefficients ``c_i = 1`` of the partitions that stepped in the round
        (the tasks scaled their models by ``c_i``).  Factors: the signed
        combination re-truncated to rank k; where the sum is not a finite
        rank-k point (LORETA) the average of the round is kept."""
        if self.kind == "dense":
            return {"W": out["W"] + (1.0 - mu) * model["W"]}
        n = len(out["A"])
        rows = np.array([[1.0 - mu] + [1.0] * n, [0.0] + [1.0 / mu] * n])
        return self._truncated(out, model, rows)[0]

    def _truncated(self, out: dict, model: dict, rows: np.ndarray) -> tuple[dict, bool]:
        """The factors of the combination ``rows[0]`` of the round's models
        re-truncated to rank k, or of ``rows[1]`` (the round's average) where
        the first is not a finite rank-k point (counted in ``n_fallback``);
        and whether it fell back."""
        with np.errstate(all="ignore"):
            svds = mix_truncate_many([model["A"]] + list(out["A"]),
                                     [model["B"]] + list(out["B"]), rows, int(model["rank"]))
        P, sv, Q = svds[0]
        ok = np.isfinite(sv).all() and np.isfinite(P).all() and np.isfinite(Q).all()
        if not ok or (self.kind == "pinv" and not sv[-1] > 0):
            self.n_fallback += 1
            return self._split(*svds[1]), True
        return self._split(P, sv, Q), False

    def _ratio(self, out: dict, model: dict, mu: float) -> tuple[dict, float]:
        """``W0 + g sum_i c_i (W_i - W0)`` with ``g = sum_i ||c_i (W_i - W0)||^2
        / ||sum_i c_i (W_i - W0)||^2`` clipped to ``[1 / n, 1]`` (n the
        partitions of the round): the smallest CoCoA+ ``sigma' = 1 / g``
        for which the separable bound ``||sum_i D_i||^2 <= sigma' sum_i
        ||D_i||^2`` holds for this round's updates (Ma et al. 2015, the
        definition of sigma'_min, evaluated at the realised update): 1 =
        adding for orthogonal updates, 1/n = averaging for equal ones."""
        n = int(out.get("n_models", 1))
        dd = float(out["dd"])
        if self.kind == "dense":
            D = out["W"] - mu * model["W"]
            ss = float(np.sum(D * D))
        else:
            w = np.concatenate([[-mu], np.ones(len(out["A"]))])
            A = np.hstack([model["A"]] + list(out["A"]))
            B = np.hstack([model["B"]] + list(out["B"]))
            ww = np.repeat(w, [model["A"].shape[1]] + [a.shape[1] for a in out["A"]])
            ss = float(max(np.sum(((A.T @ A) * np.outer(ww, ww)) * (B.T @ B)), 0.0))
        g = 1.0 if ss <= 0.0 else min(1.0, max(1.0 / n, dd / ss))
        if self.kind == "dense":
            return {"W": model["W"] + g * D}, g * mu
        rows = np.array([[1.0 - g * mu] + [g] * len(out["A"]),
                         [0.0] + [1.0 / mu] * len(out["A"])])
        mixed, fell_back = self._truncated(out, model, rows)
        return mixed, 1.0 if fell_back else g * mu

    def _tail_average(self, snaps: list, model: dict) -> dict:
        """The in-memory ``average=True`` over the pass: the step-weighted
        average of the mixed models at the ends of its rounds (the in-memory
        pass's snapshots at its block ends), re-truncated to rank k for the
        factored models (kept only when finite and, for LORETA, of rank k;
        a single snapshot is the last iterate)."""
        if self.kind == "dense":
            if not snaps:
                return {"avg_W": model["W"], "avg_ok": 0}
            w = np.array([n for _, n in snaps], dtype=np.float64)
            acc = snaps[0][0]["W"] * w[0]
            for (f, _), wj in zip(snaps[1:], w[1:]):
                acc = acc + wj * f["W"]
            return {"avg_W": acc / w.sum(), "avg_ok": 1}
        last = {"avg_A": model["A"], "avg_B": model["B"], "avg_ok": 0}
        if len(snaps) < 2:
            return last
        w = np.array([n for _, n in snaps], dtype=np.float64)
        k = int(model["rank"])
        with np.errstate(all="ignore"):
            P, sv, Q = mix_truncate([f["A"] for f, _ in snaps], [f["B"] for f, _ in snaps],
                                    w / w.sum(), k)
        if not (np.isfinite(sv).all() and np.isfinite(P).all() and np.isfinite(Q).all()):
            return last
        if self.kind == "pinv" and not sv[-1] > 0:
            return last
        A, B = split_balanced(*_with_signs(P, sv, Q))
        return {"avg_A": A, "avg_B": B, "avg_ok": 1}

    def _split(self, P, sv, Q) -> dict:
        """The mixed model's factors from its truncated SVD (with exact
        pseudo-inverses for LORETA)."""
        name = type(self.learner).__name__
        P, Q = _canonical_signs(P, Q)
        if self.kind != "pinv":
            A, B = split_balanced(P, sv, Q)
            return {"A": A, "B": B}
        try:
            A, B, PA, PB = split_balanced(P, sv, Q, pinv=True)
        except np.linalg.LinAlgError:
            k = sv.shape[0]
            raise FloatingPointError(
                f"{name}: the mix of round {self.round + 1} lost rank {k} (singular "
                f"values {sv[-2:] if k > 1 else sv}); lower the step size (eta0) or "
                "the rank") from None
        return {"A": A, "B": B, "PA": PA, "PB": PB, "since_check": 0}

    def _search(self, out: dict, steps: np.ndarray, shared, model: dict, mu: float) -> tuple:
        """The line search on the mixing step: every candidate
        ``W(s) = W0 + s sum_i mu_i (W_i - W0)`` (re-truncated to rank k for
        the factored models: the model that would be kept) is evaluated by
        the mean triplet hinge loss on the partitions' triplets (one map,
        the sums tree-reduced); the lowest wins, the smallest step on ties.
        Returns ``(s, its loss, all losses, the model's fields)``."""
        be, sup = self.plan.backend, self.plan.supervision
        name = type(self.learner).__name__
        valid = np.ones(steps.shape[0], dtype=bool)
        if self.kind == "dense":
            W0 = model["W"]
            D = out["W"] - mu * W0 if mu != 1.0 else out["W"] - W0
            cands = {"steps": steps, "D": D}
        else:
            k = int(model["rank"])
            As = [model["A"]] + list(out["A"])
            Bs = [model["B"]] + list(out["B"])
            rows = np.array([[1.0 - st * mu] + [st] * len(out["A"]) for st in steps])
            svds = mix_truncate_many(As, Bs, rows, k)
            facs = [split_balanced(P, sv, Q) for P, sv, Q in svds]
            if self.kind == "pinv":       # LORETA needs a rank-k point
                valid = np.array([bool(sv[-1] > 0) for _, sv, _ in svds])
            cands = {"steps": steps, "A": [f[0] for f in facs], "B": [f[1] for f in facs]}
        h = be.broadcast(_Shared(cands))
        at = None
        if self.n_rounds > 1:     # progressive validation: the pass's next round's triplets
            j = (self.j + 1) % self.n_rounds
            at = (self.round, j, self.n_rounds, self.M)
        handles = be.map(_eval_task, sup, self.kind, shared, h, self.coef, EVAL_TRIPLETS, at)
        red = be.reduce(_sum_eval, handles)
        ev = be.gather(red)
        be.release(list(handles) + [red, h])
        losses = ev["loss"] / max(int(ev["n"]), 1)
        score = np.where(np.isfinite(losses) & valid, losses, np.inf)
        if not np.isfinite(score).any():
            raise FloatingPointError(f"{name}: training diverged (no finite candidate mix in "
                                     f"round {self.round + 1}); {self.learner._advice}")
        j = int(np.argmin(score))               # the first (smallest step) on ties
        st = float(steps[j])
        if self.kind == "dense":
            fields = {"W": W0 + st * D}
        else:
            fields = self._split(*svds[j])
        return st, float(losses[j]), losses, fields

    def _record(self, loss: float, out: dict, prev: int, T: int) -> dict:
        """As :meth:`tripletml.engine.online.OnlinePasses._record`, from the
        reduced sums."""
        series = {"avg_loss": out["loss"]}
        if out["mistakes"] is not None:
            series["mistake_rate"] = out["mistakes"]
        values: dict = {"loss": loss}
        for name, total in series.items():
            last = self.means.get(name)
            before = last * prev if (prev and last is not None) else 0.0
            values[name] = self.means[name] = (before + float(total)) / max(T, 1)
        if "pinv_drift" in self.keys:
            values["pinv_drift"] = out["drift"]
        values["mix_step"] = self.chosen[-1]
        values["mix_loss"] = self.mix_loss
        return values




def fit(learner, plan) -> None:
    """Iterative parameter mixing (McDonald, Hall & Mann 2010, Algorithm 3)
    of an online learner over ``plan``'s partitions; sets the learner's
    fitted attributes as its in-memory ``_fit`` does."""
    name = type(learner).__name__
    kind = model_kind(learner)
    be, sup = plan.backend, plan.supervision
    handles = be.map(_setup_task, sup, AUTO_ETA_HEAD)
    infos = be.gather(handles)
    red = be.reduce(_sum_energy, handles)
    energy = be.gather(red)["energy"]
    be.release(list(handles) + [red])
    ms = [inf["m"] for inf in infos]
    M = int(sum(ms))
    if M == 0:
        raise ValueError(f"{name}: the collection's partitions hold no triplet")
    d = infos[0]["d"]
    # mu_i = m_i / M; exactly 1.0 for a single partition with triplets
    live = [i for i, m in enumerate(ms) if m > 0]
    weights = tuple(0.0 if m == 0 else (1.0 if len(live) == 1 else m / M) for m in ms)
    heads = partition_shares(min(AUTO_ETA_HEAD, M), ms)
    qq = np.concatenate([inf["qq"][:h] for inf, h in zip(infos, heads)])
    vv = np.concatenate([inf["vv"][:h] for inf, h in zip(infos, heads)])
    needs = getattr(learner, "_needs_spectrum", None)
    if needs is not None and needs():     # the factored learners' "pca" start / rank rule
        learner._init_model_partitioned(d, plan.rng, energy,
                                        spectrum=partitioned_spectrum(learner, be, sup, d,
                                                                      energy))
    else:
        learner._init_model_partitioned(d, plan.rng, energy)
    learner._resolve_data_params_partitioned(qq, vv)
    learner.t_ = 0
    rounds = _MixingRounds(learner, plan, kind, _get_model(learner, kind), M, weights)
    watch = new_watch(learner, 1)
    r0, previous = 0, None
    if plan.resumed is not None:             # a checkpoint of a crashed driver
        rounds.restore(plan.resumed)
        r0, previous = rounds.round, rounds.resumed_history
    hist = History(previous=previous, keys=learner._history_keys)
    rounds.hist = hist
    max_iter, tol = int(learner.max_iter), learner.tol
    done = r0 >= max_iter or (tol is not None and rounds.criterion is not None
                              and rounds.criterion <= tol)
    if done:
        result = TrainingResult(n_iter=r0, stop_reason="max_iter" if r0 >= max_iter and not (
            tol is not None and rounds.criterion is not None and rounds.criterion <= tol)
            else "tol", criterion=rounds.criterion, history=hist.data)
    else:
        result = run(rounds, name=name, max_iter=max_iter - r0, tol=tol,
                     history=hist, watch=watch, verbose=learner.verbose,
                     total=(max_iter - r0) * M, unit="triplet")
        result.n_iter += r0
        rounds.checkpoint(last=True)
    final = rounds.model
    _set_model(learner, kind, final, copy=False, n_refresh=rounds.n_refresh)
    if rounds.averaging:          # as the in-memory fit: the last pass's tail average
        ok = bool(final.get("avg_ok", 0))
        if ok and kind == "dense":
            learner.W_ = np.array(final["avg_W"], dtype=np.float64, order="C")
        elif ok:
            learner._set_factors(np.array(final["avg_A"], dtype=np.float64, order="C"),
                                 np.array(final["avg_B"], dtype=np.float64, order="C"))
            if kind == "pinv":    # LORETA re-factors: the SVD's free signs made canonical
                A = learner.A_
                idx = np.argmax(np.abs(A), axis=0)
                sg = np.sign(A[idx, np.arange(A.shape[1])])
                sg[sg == 0] = 1.0
                if np.any(sg < 0):
                    _set_model(learner, kind, {
                        "t": learner.t_, "rank": learner.rank_, **(
                            {"eta": learner.eta_} if "eta" in final else {}),
                        "A": learner.A_ * sg, "B": learner.B_ * sg,
                        "PA": learner.pinv_A_ * sg, "PB": learner.pinv_B_ * sg,
                        "since_check": 0}, copy=True, n_refresh=rounds.n_refresh)
        learner.averaged_ = ok
    elif hasattr(learner, "average"):       # average=False: the last iterate, as in memory
        learner.averaged_ = False
    learner._watch = None
    learner._finalize()
    apply_result(learner, result, tol=learner.tol, what=learner._criterion_name,
                 advice="increase max_iter or tol, or set tol=None for a fixed budget")
    plan.info["report"] = {"rounds": int(result.n_iter), "mixing": kind,
                           "weights": [float(w) for w in weights],
                           "final_loss": rounds.prev_loss,
                           "mix_rule": rounds.rule,
                           "rounds_per_pass": rounds.n_rounds,
                           "mixing_rounds": rounds.n_mixes,
                           "mix_fallbacks": rounds.n_fallback,
                           "mix_grid": [float(v) for v in mix_steps(rounds.k_active)],
                           "mix_steps": rounds.chosen,
                           "mix_losses": rounds.candidate_losses,
                           "seconds_pass": rounds.seconds_pass,
                           "seconds_search": rounds.seconds_search}


#: iterative parameter mixing: rounds with checkpoints, the model shipped
#: every round (OASIS, LORETA, the factored learners)
STRATEGY = PartitionedStrategy("mixing", fit, checkpoints=True, ships_model=True,
                               syncs_per_pass=lambda m_total, learner=None: rounds_per_pass(
                                   m_total, split=learner is None or splits_blocks(learner)))
