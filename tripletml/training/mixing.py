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

**Rounds.**  One round is one pass over all the data (every triplet is seen
once), so ``max_iter`` keeps its meaning: ``max_iter`` rounds make as many
steps as ``max_iter`` in-memory passes.  ``tol`` is the in-memory learner's:
the relative change of the mean pass loss (the per-partition sums of the
steps' losses before their updates, tree-reduced, over ``M``) between
consecutive rounds.  ``history_`` has one record per round with the
in-memory keys (``loss``, the running means ``avg_loss`` and
``mistake_rate`` over all steps; LORETA's ``pinv_drift`` is the largest over
the partitions).

**The mix.**

* OASIS: the weighted average of the dense ``W_i`` (d x d), tree-reduced.
* The factored learners (``W = A B^T`` of rank k): ``sum_i mu_i A_i B_i^T``
  has rank up to ``Kk``; it is re-truncated to rank k without forming a
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
  B^T B``, zero at the identity initialisation ``A = B``, and their steps
  are equivariant under a common rotation ``(A R, B R)``, so the remaining
  freedom does not matter.
* With one partition holding triplets the mix is that partition's model,
  unchanged (no re-factoring): the fit is then the in-memory learner's
  passes over the partition's triplets in the rounds' orders, to rounding
  (``partial_fit`` over those orders gives the same model).

**Initialisation.**  The model is initialised on the driver by the
learner's ``_init_model_partitioned`` from the column energies of all
preprocessed rows (summed over the partitions; the factored learners'
identity initialisation on the live axes), and ``eta0="auto"`` is resolved
from the norms of the first ``AUTO_ETA_HEAD`` triplets taken from the
partitions in proportion to their triplets (the in-memory rule on the
partition's triplets when K = 1).

**Statistical efficiency** (test mAP, sklearn digits 70/30, one seed,
single process -> K = 2 / 4 / 8 / 16 partitions at equal passes):
OASIS (30,000 triplets, 5 passes) .798 -> .807 / .791 / .780 / .756, (the
defaults, 1 pass) .779 -> .778 / .761 / .737; IterativePA (20,000, 10
passes) .792 -> .810 / .797 / .772 / .720; LORETA (20,000, 10 passes) .794
-> .773 / .695 / .614 / .476; NaivePA .797 -> .770 / .716 / .657 / .553;
FactoredGD .728 -> .649 / .501 / .395 / .336.  Averaging K local models that
moved alike from the same start moves the mix about as far as *one*
partition's pass, so a round makes the progress of about M / K sequential
steps (LORETA in memory with 100,000 / 50,000 / 25,000 triplets: .776 /
.712 / .617, against K = 2 / 4 / 8 at 10 passes of 20,000: .773 / .695 /
.614): the re-truncation costs little, the averaging costs the rest.
Learners far from convergence at the pass budget (LORETA, FactoredGD and
NaivePA with constant steps) therefore need about K times the passes;
OASIS and IterativePA stay within .02 up to K = 8.

Each round ships the mixed model to every partition and one local model
back (a dense d x d W for OASIS: see the issue's cost model; ``2 d k`` for
the factored learners).  Tasks are pure: a task clones the learner's
parameters into a fresh estimator, copies the shared model into it and
returns new arrays.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import clone

from .._stopping import relative_change
from ..linalg.lowrank_mix import mix_truncate, split_balanced
from ..linalg.sparse_rows import as_csr
from .driver import StepReport, apply_result, run
from .history import History
from .partitioned import partition_shares

__all__ = ["fit", "model_kind"]


# ---------------------------------------------------------------------------
# the model of each learner
# ---------------------------------------------------------------------------
def model_kind(learner) -> str:
    """``"dense"`` (a d x d ``W_``: OASIS), ``"pinv"`` (factors with
    maintained pseudo-inverses: LORETA) or ``"factors"`` (``A_, B_``: the
    factored baselines)."""
    from ..learners._pinv_owner import PinvFactorsOwner
    from ..learners.factored import FactoredBilinearMixin
    if isinstance(learner, PinvFactorsOwner):
        return "pinv"
    if isinstance(learner, FactoredBilinearMixin):
        return "factors"
    if "W_" in getattr(type(learner), "_fitted_arrays", {}):
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
        from ..linalg.pinv import PinvFactors
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
    from ..learners._online import auto_step_norms
    from ..learners.factored import column_energy
    X = sup.rows(p)
    T = sup.triplets(p, X)
    qq, vv = auto_step_norms(as_csr(X), T, head)
    return {"m": int(T.shape[0]), "d": int(X.shape[1]), "energy": column_energy(X),
            "qq": qq, "vv": vv}


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
               best: float | None) -> dict:
    """One local pass of a fresh copy of the learner over the partition's
    triplets in the round's order, from the mixed ``model``; returns the
    local model scaled for the mix (``mu W`` for a dense model, ``sqrt(mu)
    A``, ``sqrt(mu) B`` for factors; unscaled when ``mu = 1``) and the pass's
    loss statistics."""
    from ..learners._online import WATCH_HEAD, block_size, new_watch
    from .history import History as _History
    mu = float(weights[p.index])
    if mu == 0.0:
        return {"m": 0, "mu": 0.0}
    est = clone(proto)
    _set_model(est, kind, shared.model, copy=True)
    X = sup.rows(p)
    T = sup.triplets(p, X)
    m = int(T.shape[0])
    T = np.ascontiguousarray(T[sup.order(p, m, round_)])
    Xc = as_csr(X)
    est._watch = new_watch(est, block_size(m))
    if best is not None:
        est._watch.update(float(best), "the previous rounds", "steps")
    init = est._initial_loss(Xc, T)
    if init is not None:
        est._watch.update(init, f"the mixed model of round {round_ + 1}", "steps")
    hist = _History(keys=est._history_keys)
    passes = est._passes(Xc, T, hist)
    result = run(passes, name=type(est).__name__, max_iter=1, history=hist, watch=est._watch,
                 flush_window=WATCH_HEAD)
    est._finalize()
    out = {"m": m, "mu": mu, "loss": float(np.sum(passes.losses)),
           "mistakes": float(np.sum((passes.margins <= 0).astype(float)))
           if passes.has_margins else None,
           "drift": float(result.history.get("pinv_drift", [0.0])[-1])}
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
           "n_models": sum(it.get("n_models", 1) for it in live)}
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


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------
class _MixingRounds:
    """The rounds as a :class:`~tripletml.training.driver.Solver`: one
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

    def step(self, budget: int = 1) -> StepReport:
        be, sup = self.plan.backend, self.plan.supervision
        name = type(self.learner).__name__
        shared = be.broadcast(_Shared(self.model))
        handles = be.map(_pass_task, sup, self.proto, self.kind, shared, self.round,
                         self.weights, self.best)
        red = be.reduce(_combine, handles)
        out = be.gather(red)
        be.release(list(handles) + [red, shared])
        t0 = int(self.model["t"])
        t = t0 + int(out["m"])
        new = {"t": t}
        for key in ("eta", "rank"):
            if key in self.model:
                new[key] = self.model[key]
        single = out.get("n_models", 1) == 1
        if self.kind == "dense":
            new["W"] = out["W"]
        elif single:              # one partition: its model as it is
            new["A"], new["B"] = out["A"][0], out["B"][0]
            if self.kind == "pinv":
                new["PA"], new["PB"] = out["PA"], out["PB"]
                new["since_check"] = out["since_check"]
        else:
            k = int(self.model["rank"])
            P, s, Q = mix_truncate(out["A"], out["B"], np.ones(len(out["A"])), k)
            if self.kind == "pinv":
                try:
                    new["A"], new["B"], new["PA"], new["PB"] = split_balanced(P, s, Q, pinv=True)
                except np.linalg.LinAlgError:
                    raise FloatingPointError(
                        f"{name}: the mix of round {self.round + 1} lost rank {k} (singular "
                        f"values {s[-2:] if k > 1 else s}); lower the step size (eta0) or "
                        "the rank") from None
                new["since_check"] = 0
            else:
                new["A"], new["B"] = split_balanced(P, s, Q)
        if self.kind == "pinv":
            self.n_refresh += int(out["n_refresh"])
        self.model = new
        finite = all(np.isfinite(new[k]).all() for k in ("W", "A", "B") if k in new)
        if not finite:
            raise FloatingPointError(f"{name}: training diverged (non-finite mixed model after "
                                     f"round {self.round + 1}); {self.learner._advice}")
        loss = out["loss"] / max(self.M, 1)
        criterion = None if self.prev_loss is None else relative_change(self.prev_loss, loss)
        self.prev_loss = loss
        self.best = loss if self.best is None else min(self.best, loss)
        self.round += 1
        record = self._record(loss, out, t0, t)
        return StepReport(iterations=1, units=int(out["m"]), t=t, criterion=criterion,
                          record=record, watch=[(loss, f"round {self.round}", "loss")])

    def _record(self, loss: float, out: dict, prev: int, T: int) -> dict:
        """As :meth:`tripletml.training.online.OnlinePasses._record`, from the
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
        return values


def fit(learner, plan) -> None:
    """Iterative parameter mixing (McDonald, Hall & Mann 2010, Algorithm 3)
    of an online learner over ``plan``'s partitions; sets the learner's
    fitted attributes as its in-memory ``_fit`` does."""
    from ..learners._online import AUTO_ETA_HEAD
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
    learner._init_model_partitioned(d, plan.rng, energy)
    learner._resolve_data_params_partitioned(qq, vv)
    learner.t_ = 0
    rounds = _MixingRounds(learner, plan, kind, _get_model(learner, kind), M, weights)
    from ..learners._online import new_watch
    watch = new_watch(learner, 1)
    hist = History(keys=learner._history_keys)
    result = run(rounds, name=name, max_iter=int(learner.max_iter), tol=learner.tol,
                 history=hist, watch=watch, verbose=learner.verbose,
                 total=int(learner.max_iter) * M, unit="triplet")
    _set_model(learner, kind, rounds.model, copy=False, n_refresh=rounds.n_refresh)
    learner._watch = None
    learner._finalize()
    apply_result(learner, result, tol=learner.tol, what=learner._criterion_name,
                 advice="increase max_iter or tol, or set tol=None for a fixed budget")
    plan.info["report"] = {"rounds": int(result.n_iter), "mixing": kind,
                           "weights": [float(w) for w in weights],
                           "final_loss": rounds.prev_loss}
