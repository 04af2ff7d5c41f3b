"""The label race of :class:`~tripletml.auto.AutoSimilarity`: successive
halving, stage by stage (the steps are described in :mod:`tripletml.auto`).

:func:`new_context` splits the items and gathers the race's state (one dict,
``ctx``, shared by every stage), :func:`race_stages` races the stages
cheapest first, each by :class:`_StageRace` (rounds of :func:`_run_job`,
one fit and score per candidate and split), and :func:`choose_winner` makes
the final comparison of the stages' survivors; :func:`results_table` turns
the rows into ``cv_results_``.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings
from typing import Any, Optional

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedShuffleSplit, train_test_split
from threadpoolctl import ThreadpoolController

from tripletml.auto.candidates import _WHO, _Candidate
from tripletml.auto.resources import check_resources
from tripletml.auto.selection import within_one_se
from tripletml.metrics import validation_score_and_items
from tripletml.triplets import random_class_triplets
from tripletml.engine.driver import training_deadline

__all__ = ["new_context", "race_stages", "choose_winner", "results_table"]

#: one threadpoolctl controller per process (finding the BLAS / OpenMP
#: libraries reads /proc/self/maps: ~3 ms, once per job before)
_CONTROLLERS: dict[int, Any] = {}


def _blas_limit(n_threads: Optional[int]):
    """A context limiting BLAS / OpenMP threads to ``n_threads`` (None: no
    limit, nothing to do), through this process's cached controller."""
    if n_threads is None:
        return contextlib.nullcontext()
    ctl = _CONTROLLERS.get(os.getpid())
    if ctl is None:
        ctl = _CONTROLLERS[os.getpid()] = ThreadpoolController()
    return ctl.limit(limits=n_threads)


def _run_job(cand: _Candidate, X, y, fit_idx, val_idx, budget_value, seed: int,
             previous, deadline: Optional[float], blas_threads: Optional[int],
             min_secs: float = 0.0, scoring: str = "map", seen: Optional[dict] = None,
             key: Any = None):
    """Returns (score, seconds, model-state for warm start, error, the
    validation items' own scores (:func:`~tripletml.metrics.validation_item_scores`,
    None after an error)) or None
    when, at its start, less than ``min_secs`` (the shortest this fit can
    take) was left before the deadline; ``min_secs < 0``: a free candidate
    without a budget (a baseline), always fitted.  ``seen`` (shared by the
    jobs of a round run one after the other in this process) holds the
    seconds of ``key``'s fits so far: a split whose earlier split took
    longer than the time left is not started (the lower bound of
    :func:`~tripletml.auto.resources.check_resources` can be far below a
    fit's time on large arrays).  A fit runs under the deadline
    (:func:`tripletml.engine.training_deadline`: the engine's steps stop
    past it); one that ends past it is not scored (None, as a fit not
    started: a model cut short would be ranked on a fit it did not do)."""
    if (deadline is not None and (cand.budget is not None or min_secs >= 0)
            and time.time() + max(0.0, min_secs, (seen or {}).get(key, 0.0)) > deadline):
        return None
    bounded = deadline is not None and cand.learns
    with _blas_limit(blas_threads), warnings.catch_warnings(), \
            training_deadline(deadline if bounded else None):
        warnings.simplefilter("ignore", ConvergenceWarning)   # a short round is not a bug
        t0 = time.perf_counter()
        X_fit, y_fit, X_val, y_val = X[fit_idx], y[fit_idx], X[val_idx], y[val_idx]
        try:
            # the learner fits its own preprocessing (if any) on the fit items
            Z_fit, Z_val = X_fit, X_val
            if cand.warm and previous is not None:
                # warm start: continue last round's model on the extra triplets,
                # sampled among the fit items only
                model, done = previous
                extra = budget_value - done
                if extra > 0:
                    t = random_class_triplets(y_fit, extra,
                                              random_state=np.random.default_rng(seed))
                    model.partial_fit(Z_fit, t)
            else:
                # the learner sees the fit items only: its triplets cannot
                # name a validation item
                model = cand.make(budget_value, seed)
                model.fit(Z_fit, y_fit)
            secs = time.perf_counter() - t0
            if seen is not None:
                seen[key] = min(seen.get(key, np.inf), secs)
            if bounded and time.time() > deadline:
                return None                  # cut (or ended) past the deadline: not scored
            score, items = validation_score_and_items(model, Z_val, y_val, scoring)
            error = ""
        except (FloatingPointError, ArithmeticError, ValueError, MemoryError,
                np.linalg.LinAlgError) as exc:   # a diverged, failed or too large racer drops out
            secs, score, model, items = time.perf_counter() - t0, float("nan"), None, None
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    state = (model, budget_value) if cand.warm and model is not None else None
    return score, secs, state, error, items


# --------------------------------------------------------------------------
# the race's state: the splits, the rows, the scores, the clock
# --------------------------------------------------------------------------
def _cap_validation(vi: np.ndarray, y: np.ndarray, seed: int,
                    cap: Optional[int]) -> np.ndarray:
    """At most ``cap`` (``max_validation_items``) validation items (a
    stratified subset): scoring is quadratic in their number."""
    if cap is None or len(vi) <= cap:
        return vi
    try:
        keep, _ = train_test_split(vi, train_size=int(cap), stratify=y[vi],
                                   random_state=seed % (2**32))
    except ValueError:                   # a class too small to stratify
        keep = np.random.default_rng(seed).choice(vi, size=int(cap), replace=False)
    return np.sort(keep)


def new_context(est: Any, cands: list[_Candidate], X, y: np.ndarray,
                t_start: float) -> dict:
    """The state of one label race, shared by its stages.

    Parameters
    ----------
    est : AutoSimilarity
        Its parameters (``time_budget``, ``n_splits``, ``validation_size``,
        ``max_validation_items``, ``factor``, ``n_jobs``, ``scoring``,
        ``verbose``) and its seed (``est._seed()``, drawn once here).
    cands : list of _Candidate
    X : ndarray or CSR matrix of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    t_start : float
        ``time.time()`` when ``fit`` started; the deadline is ``t_start +
        time_budget``.

    Returns
    -------
    ctx : dict
        The candidates, the data, the stratified item splits, the base seed,
        the deadline, the workers and BLAS threads, and the race's record:
        ``rows`` (one per fit), ``hist``, ``last_scores``, ``reached``,
        ``skipped``, ``states`` (warm starts), ``shortest`` (the shortest
        fit seen), ``speed`` and ``memory`` (measured when first needed).
    """
    deadline = t_start + float(est.time_budget)
    seed0 = est._seed()
    ss = np.random.SeedSequence(seed0)
    split_seed = int(ss.generate_state(1)[0])
    splits = list(StratifiedShuffleSplit(n_splits=est._resolved_splits(),
                                         test_size=est.validation_size,
                                         random_state=split_seed).split(np.zeros(len(y)), y))
    splits = [(fi, _cap_validation(vi, y, split_seed + s, est.max_validation_items))
              for s, (fi, vi) in enumerate(splits)]
    n_workers = max(1, int(effective_n_jobs(est.n_jobs)))
    blas = max(1, (os.cpu_count() or 1) // n_workers) if n_workers > 1 else None
    return {"cands": cands, "X": X, "y": y, "splits": splits, "seed0": seed0,
            "deadline": deadline, "blas": blas, "n_workers": n_workers,
            "t_start": t_start, "states": {}, "rows": [], "items": {},
            "selection": est.selection,
            "hist": {"step": [], "seconds": [], "n_candidates": [],
                     "best_validation_score": []},
            "last_scores": {}, "reached": {}, "skipped": [], "shortest": 0.0,
            "n_fit": min(len(fi) for fi, _ in splits), "speed": None, "memory": None,
            "factor": est.factor, "n_jobs": est.n_jobs, "scoring": est.scoring,
            "verbose": est.verbose}


def _note_skipped(ctx: dict, members: list, r: int, why: str) -> None:
    """A row (no score) for each candidate of a stage that was never fitted."""
    nan = float("nan")
    for c in members:
        cand = ctx["cands"][c]
        row = {"candidate": c, "learner": cand.name, "params": cand.describe(None),
               "preprocessing": str(cand.prep), "stage": cand.stage, "round": r,
               "budget_param": cand.budget[0] if cand.budget else "", "budget": 0,
               "mean_validation_score": nan, "std_validation_score": nan,
               "mean_fit_time": 0.0, "warm_start": False, "error": "", "stopped": why}
        for s in range(len(ctx["splits"])):
            row[f"split{s}_validation_score"] = nan
        ctx["rows"].append(row)


def _best_row(rows: list, c: int) -> dict:
    """Candidate ``c``'s row with the highest finite validation score (the
    larger budget on a tie)."""
    mine = [row for row in rows if row["candidate"] == c
            and np.isfinite(row["mean_validation_score"])]
    return max(mine, key=lambda row: (row["mean_validation_score"], row["budget"]))


def _mark(rows: list, c: int, r: int, why: str) -> None:
    """Record on candidate ``c``'s last row up to round ``r`` why it left."""
    mine = [row for row in rows if row["candidate"] == c and row["round"] <= r]
    if mine and not mine[-1]["stopped"]:
        mine[-1]["stopped"] = why


# --------------------------------------------------------------------------
# the stages, cheapest first, and the final comparison
# --------------------------------------------------------------------------
def race_stages(ctx: dict) -> tuple[str, list[int]]:
    """Race the stages of ``ctx["cands"]`` one after the other.

    A later stage races above the *bar* (the best validation score of the
    stages raced before it) and starts with a pilot round; a stage that
    would start after the deadline is not raced (its candidates get a row
    with ``stopped = "max_time: ..."``).

    Returns
    -------
    stop : {"max_iter", "max_time"}
    champions : list of int
        The survivors of every stage raced.
    """
    cands, deadline = ctx["cands"], ctx["deadline"]
    stages = sorted({c.stage for c in cands})
    champions: list[int] = []           # the survivors of every stage raced
    stop, r0, bar = "max_iter", 0, -np.inf
    for k, st in enumerate(stages):
        members = [i for i, c in enumerate(cands) if c.stage == st]
        if k > 0 and time.time() + ctx["shortest"] >= deadline:
            stop = "max_time"
            _note_skipped(ctx, members, r0, "max_time: time_budget spent before "
                          f"stage {st} started")
            continue
        survivors, r0, st_stop = _StageRace(ctx, members, r0, bar if k else None,
                                            pilot=k > 0).run()
        if st_stop == "max_time":
            stop = "max_time"
        champions += survivors
        scored = [_best_row(ctx["rows"], c) for c in champions
                  if c in ctx["last_scores"]]
        if scored:
            bar = max(row["mean_validation_score"] for row in scored)
    return stop, champions


def _one_standard_error(ctx: dict, best: int, best_row: dict) -> tuple[int, str]:
    """The one-standard-error rule (Breiman, Friedman, Olshen and Stone,
    *Classification and Regression Trees*, 1984, Sec. 3.4.3; Hastie,
    Tibshirani and Friedman, *The Elements of Statistical Learning*, Sec.
    7.10): the simplest candidate whose validation score is within one
    standard error of the best.  The simplest is the no-learning candidate
    on the rows as given (``preprocessing=None``; the best of them if
    several): a preprocessing or a learned metric must beat it by more than
    the validation items' noise.  The standard error is that of the paired
    difference, item by item over every split (both were scored on the same
    validation items, :func:`~tripletml.metrics.validation_item_scores`), so
    it measures the two candidates' disagreement, not each one's spread; an
    item held out by several splits is one cluster of them
    (:func:`~tripletml.auto.selection.clustered_se`).

    Returns
    -------
    win : int
        ``best``, or the baseline when ``best``'s lead over it is at most
        one standard error.
    why : str
        For ``best``'s last row when the baseline won (else ``""``).
    """
    cands, last = ctx["cands"], ctx["last_scores"]
    refs = [c for c in last if not cands[c].learns and cands[c].prep is None]
    if not refs or best in refs:
        return best, ""
    ref = min(refs, key=lambda c: (-last[c], c))
    ref_row = _best_row(ctx["rows"], ref)
    a = ctx["items"].get((best, best_row["round"]))
    b = ctx["items"].get((ref, ref_row["round"]))
    if a is None or b is None:
        return best, ""
    d = np.concatenate([np.asarray(u, dtype=float) - np.asarray(v, dtype=float)
                        for u, v in zip(a, b)])
    item = np.concatenate([vi for _, vi in ctx["splits"]])
    within, lead, se = within_one_se(d, item)   # "map": NaN for items without a relevant one
    if not within:
        return best, ""
    return ref, (f"one_se: {lead:+.4f} over {cands[ref].name} (preprocessing=None) is "
                 f"within one standard error ({se:.4f}) of their paired difference on "
                 f"{int(np.isfinite(d).sum())} validation items")


def choose_winner(ctx: dict, champions: list[int], time_budget: float) -> tuple[int, dict]:
    """The final comparison: each survivor at its best validated budget
    (validated early stopping: a racer whose score fell at a larger budget
    is refitted with the budget that scored best); a tie goes to a
    no-learning baseline, then to the earlier candidate.  With
    ``selection="one_se"`` the best is then held to the one-standard-error
    rule (:func:`_one_standard_error`).

    Returns
    -------
    win : int
        The winning candidate.
    win_row : dict
        Its row of the best validation score (``stopped`` cleared).

    Raises
    ------
    RuntimeError
        No candidate was scored (time or resources spent), naming the
        first fits skipped and why.
    """
    last_scores, rows = ctx["last_scores"], ctx["rows"]
    if not last_scores:
        why = "; ".join(f"{s['learner']} {s['params']}: {s['reason']}"
                        for s in ctx["skipped"][:5])
        raise RuntimeError(f"{_WHO}: no candidate finished within time_budget="
                           f"{time_budget}" + (f"; skipped before fitting: {why}. "
                                               "Add a cheaper candidate (e.g. "
                                               "Euclidean) or reduce the dimension."
                                               if why else
                                               " (a fit still running when the budget "
                                               "ends is stopped and not scored); raise "
                                               "time_budget or add a no-learning "
                                               "candidate such as {'learner': "
                                               "'Euclidean'}, which is always scored."))
    pool = [c for c in champions if c in last_scores] or list(last_scores)
    best_rows = {c: _best_row(rows, c) for c in pool}
    # ties go to a no-learning baseline (as in the comparisons' race): equal
    # validation evidence does not justify a learned metric.  Equal to
    # rounding: the same counts of correct items over the splits, averaged
    # in a different order, differ in the last bits
    best = min(pool, key=lambda c: (round(-best_rows[c]["mean_validation_score"], 12),
                                    bool(ctx["cands"][c].learns), c))
    win, why = _one_standard_error(ctx, best, best_rows[best]) \
        if ctx["selection"] == "one_se" else (best, "")
    win_row = best_rows[win] if win in best_rows else _best_row(rows, win)
    if why:                              # the best's last row says why it lost
        last_row = [row for row in rows if row["candidate"] == best][-1]
        before = last_row["stopped"]
        last_row["stopped"] = why if not before or before.startswith("stage_end") \
            else f"{before}; {why}"
    mine = [row for row in rows if row["candidate"] == win]
    win_row["stopped"] = ""
    if mine[-1] is not win_row and (not mine[-1]["stopped"]
                                    or mine[-1]["stopped"].startswith("stage_end")):
        mine[-1]["stopped"] = (f"not_best_budget: refitted with {win_row['budget_param']}="
                               f"{win_row['budget']}, which scored higher")
    return win, win_row


def results_table(rows: list[dict], n_splits: int, win_row: dict, reached: dict) -> dict:
    """``cv_results_`` of the label race: one entry per row (fit), NumPy
    arrays, ranked (1 = the winner's row; then by the round reached and the
    score)."""
    def neg(v):
        return -v if np.isfinite(v) else np.inf

    last = {}
    for i, row in enumerate(rows):
        last[row["candidate"]] = i

    def eff(i):      # a candidate fitted once competes up to the round it left
        row = rows[i]
        return reached.get(row["candidate"], row["round"]) if last[row["candidate"]] == i \
            else row["round"]

    order = sorted(range(len(rows)), key=lambda i: (rows[i] is not win_row, -eff(i),
                                                    neg(rows[i]["mean_validation_score"]),
                                                    rows[i]["candidate"]))
    rank = np.empty(len(rows), dtype=int)
    rank[order] = np.arange(1, len(rows) + 1)
    keys = ["candidate", "learner", "params", "preprocessing", "stage", "round",
            "budget_param", "budget", *(f"split{s}_validation_score" for s in range(n_splits)),
            "mean_validation_score", "std_validation_score", "mean_fit_time",
            "warm_start", "error", "stopped"]
    out: dict[str, np.ndarray] = {}
    for k in keys:
        vals = [row[k] for row in rows]
        if k == "params":
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
        else:
            arr = np.asarray(vals)
        out[k] = arr
    out["rank_validation_score"] = rank
    return out


# --------------------------------------------------------------------------
# one stage: successive halving among its candidates
# --------------------------------------------------------------------------
class _StageRace:
    """Successive halving among ``members`` (global round numbers from
    ``r0``).

    ``bar``: the best validation score of the earlier stages; a candidate
    scoring below it after any round leaves the race (``stopped =
    "below_bar"``).  ``pilot``: at least three rounds, so the first (at ``1 /
    factor**2`` of the budget) is a cheap pilot.  A lone survivor with a
    budget skips the intermediate rounds and is fitted at its full budget
    next.  Each round (:meth:`run`) checks the clock (:meth:`_overruns`),
    fits and scores the survivors on every split (:meth:`_fit_round`),
    records a row per candidate (:meth:`_record`), drops those below the
    bar (:meth:`_scored`), logs the round (:meth:`_log`) and halves the
    field (:meth:`_halve`).
    """

    def __init__(self, ctx: dict, members: list, r0: int, bar: Optional[float],
                 pilot: bool):
        self.ctx, self.cands, self.bar = ctx, ctx["cands"], bar
        factor = ctx["factor"]
        n_rounds = max(1, math.ceil(math.log(len(members)) / math.log(factor) - 1e-9))
        if pilot and any(self.cands[c].budget is not None for c in members):
            n_rounds = max(3, n_rounds)
        self.n_rounds = n_rounds
        self.alive = list(members)
        self.stop = "max_iter"
        self.stage_rows: list[dict] = []
        self.fallen: list[int] = []          # fell below the bar after beating it
        self.last_round = r0
        self.rr, self.prev_rr, self.r = 0, 0, r0 - 1

    def run(self) -> tuple[list, int, str]:
        """Race the stage.  Returns the survivors, the next free round number
        and ``"max_time"`` or ``"max_iter"``."""
        ctx = self.ctx
        while self.rr < self.n_rounds:       # rr strictly increases: at most n_rounds rounds
            self.r += 1
            frac = float(ctx["factor"]) ** -(self.n_rounds - 1 - self.rr)
            if self.rr > 0 and self._overruns():
                break
            held, per = self._fit_round(frac)
            n_done, fresh = self._record(per, held)
            self.last_round = self.r
            if self.rr > 0 and n_done == 0 and self.stop == "max_time":
                break                        # nothing finished: last round's survivors stand
            # survivors: the candidates scored in this round (or fitted once)
            scored = self._scored(fresh)
            if not scored:
                self.alive = []
                break
            self._log(scored, per, frac)
            if self._halve(scored):
                break
        return self._finish()

    def _overruns(self) -> bool:
        """Whether this round, predicted from the last one (budget x factor
        per round), would end after the deadline; if so the stage stops
        (``stopped = "max_time: ..."`` on the last round's rows)."""
        ctx, r = self.ctx, self.r
        prev = [row for row in self.stage_rows if row["round"] == r - 1
                and row["candidate"] in self.alive]
        est = sum(row["mean_fit_time"] * len(ctx["splits"])
                  * (ctx["factor"] ** (self.rr - self.prev_rr)
                     if self.cands[row["candidate"]].budget else 0)
                  for row in prev) / ctx["n_workers"]
        if time.time() + est > ctx["deadline"]:
            self.stop = "max_time"
            for row in prev:
                row["stopped"] = "max_time: the next round would end after time_budget"
            return True
        return False

    def _fit_round(self, frac: float) -> tuple[list[int], dict[int, dict]]:
        """Fit and score every surviving candidate at ``frac`` of its full
        budget on every split (in parallel); a candidate too costly at this
        budget is skipped (``skipped_``) and, if already scored, *held* with
        its last score.  Returns the held candidates and, per candidate
        fitted, ``{"scores": per split (None: not started before the
        deadline), "secs", "budget", "error"}``."""
        ctx, r = self.ctx, self.r
        tasks, keys = [], []
        held: list[int] = []                 # not refitted: too costly at this budget
        free: dict[int, bool] = {}
        seen: dict[int, float] = {}          # each candidate's fit seconds this round
        for c in list(self.alive):
            cand = self.cands[c]
            if cand.budget is not None:
                bv = max(1, int(round(cand.budget[1] * frac)))
            elif self.rr > 0:
                continue                     # fitted once: its score stands
            else:
                bv = None
            why, secs = check_resources(ctx, cand, bv)
            if why:
                ctx["skipped"].append({"candidate": c, "learner": cand.name,
                                       "params": cand.describe(bv), "round": r,
                                       "reason": why})
                if c in ctx["last_scores"]:  # keeps the score of its last fit
                    held.append(c)
                else:
                    _note_skipped(ctx, [c], r, why)
                    self.alive.remove(c)
                continue
            for s, (fi, vi) in enumerate(ctx["splits"]):
                seed = int(np.random.SeedSequence([ctx["seed0"], c, s, r]).generate_state(1)[0])
                tasks.append(delayed(_run_job)(cand, ctx["X"], ctx["y"], fi, vi, bv, seed,
                                               ctx["states"].get((c, s)), ctx["deadline"],
                                               ctx["blas"],
                                               secs if secs < 0 and cand.budget is None
                                               else max(secs, ctx["shortest"]),
                                               ctx["scoring"], seen, c))
                free[c] = secs < 0
                keys.append((c, s, bv))
        results = Parallel(n_jobs=ctx["n_jobs"])(tasks) if tasks else []
        return held, self._collect(keys, results, free)

    def _collect(self, keys: list, results: list, free: dict) -> dict[int, dict]:
        """The jobs' results by candidate; updates the shortest fit seen and
        the warm-start states."""
        ctx = self.ctx
        n_splits = len(ctx["splits"])
        per: dict[int, dict] = {}
        for (c, s, bv), res in zip(keys, results):
            entry = per.setdefault(c, {"scores": [None] * n_splits, "secs": [],
                                       "budget": bv, "error": "", "items": [None] * n_splits})
            if res is None:
                continue
            score, secs, state, error, items = res
            entry["scores"][s] = score
            entry["items"][s] = items
            entry["secs"].append(secs)
            if not free.get(c) and np.isfinite(score):
                ctx["shortest"] = secs if not ctx["shortest"] else min(ctx["shortest"], secs)
            entry["error"] = entry["error"] or error
            if state is not None:
                ctx["states"][(c, s)] = state
        return per

    def _record(self, per: dict, held: list) -> tuple[int, list[int]]:
        """One row per candidate that finished on every split (a candidate
        not started before the deadline sets ``stop = "max_time"``).
        Returns the number of budgeted candidates recorded and the
        candidates with a current score (this round's, or fitted once, or
        held)."""
        ctx, cands, last_scores = self.ctx, self.cands, self.ctx["last_scores"]
        fresh = [c for c in self.alive if (cands[c].budget is None or c in held)
                 and c in last_scores]
        n_done = 0
        for c, entry in per.items():
            if any(v is None for v in entry["scores"]):
                self.stop = "max_time"       # not finished before the deadline
                if c in last_scores and c not in fresh:
                    fresh.append(c)          # cut or not started: its last score stands
                continue
            sc = np.asarray(entry["scores"], dtype=float)
            cand = cands[c]
            row = {"candidate": c, "learner": cand.name,
                   "params": cand.describe(entry["budget"]),
                   "preprocessing": str(cand.prep), "stage": cand.stage, "round": self.r,
                   "budget_param": cand.budget[0] if cand.budget else "",
                   "budget": entry["budget"] if entry["budget"] is not None else 0,
                   "mean_validation_score": float(sc.mean()),
                   "std_validation_score": float(sc.std()),
                   "mean_fit_time": float(np.mean(entry["secs"])),
                   "warm_start": bool(cand.warm and self.rr > 0), "error": entry["error"],
                   "stopped": ""}
            for s in range(len(ctx["splits"])):
                row[f"split{s}_validation_score"] = float(sc[s])
            ctx["rows"].append(row)
            self.stage_rows.append(row)
            n_done += cands[c].budget is not None
            if np.isfinite(sc).all():
                last_scores[c] = float(sc.mean())
                ctx["items"][(c, self.r)] = entry["items"]
                if c not in fresh:
                    fresh.append(c)
            else:
                last_scores.pop(c, None)
                row["stopped"] = "error"
        return n_done, fresh

    def _scored(self, fresh: list) -> list[int]:
        """The surviving candidates with a current score, best first; with a
        bar, those below it leave (a racer above the bar at an earlier
        budget still competes there, :attr:`fallen`)."""
        ctx, bar, r = self.ctx, self.bar, self.r
        last_scores = ctx["last_scores"]
        scored = sorted((c for c in self.alive if c in fresh),
                        key=lambda c: (-last_scores[c], c))
        if bar is not None:
            # escalation pays off only above the cheaper stages' best score
            below = [c for c in scored if last_scores[c] < bar]
            for c in below:
                _mark(self.stage_rows, c, r, f"below_bar: {last_scores[c]:.4f} < "
                      f"{bar:.4f}, the best of the cheaper stage(s)")
            scored = [c for c in scored if c not in below]
            for c in below:
                ctx["reached"][c] = r
                if _best_row(ctx["rows"], c)["mean_validation_score"] >= bar:
                    self.fallen.append(c)    # above the bar at an earlier budget
        return scored

    def _log(self, scored: list, per: dict, frac: float) -> None:
        """The round in ``history_`` (and on stderr with ``verbose``)."""
        ctx, r, cands = self.ctx, self.r, self.cands
        last_scores, hist = ctx["last_scores"], ctx["hist"]
        best_now = scored[0]
        for c in scored:
            ctx["reached"][c] = r
        hist["step"].append(r)
        hist["seconds"].append(time.time() - ctx["t_start"])
        hist["n_candidates"].append(len(scored))
        hist["best_validation_score"].append(last_scores[best_now])
        if ctx["verbose"]:
            print(f"AutoSimilarity round {self.rr + 1}/{self.n_rounds} of stage "
                  f"{cands[best_now].stage}: {len(scored)} candidates at "
                  f"{frac:.3g} of the budget, best {last_scores[best_now]:.4f} "
                  f"({cands[best_now].describe(per[best_now]['budget'] if best_now in per else None)}"
                  f"), {time.time() - ctx['t_start']:.1f} s",
                  file=sys.stderr)

    def _halve(self, scored: list) -> bool:
        """Keep the best ``ceil(n / factor)`` for the next round; True when
        the stage ends here (the last round, the clock, or a no-learning
        winner alone)."""
        factor, cands = self.ctx["factor"], self.cands
        if self.stop == "max_time" or self.rr == self.n_rounds - 1:
            self.alive = scored
            return True
        keep = scored[:max(1, math.ceil(len(scored) / factor))]
        for c in scored[len(keep):]:
            _mark(self.stage_rows, c, self.r,
                  f"halved: not in the best 1/{factor} of round {self.r}")
        self.alive = keep
        if len(keep) == 1 and cands[keep[0]].budget is None:
            return True                      # a no-learning winner: nothing left to race
        self.prev_rr = self.rr
        if sum(cands[c].budget is not None for c in keep) == 1:
            self.rr = self.n_rounds - 1      # a lone racer: straight to its full budget
        else:
            self.rr += 1
        return False

    def _finish(self) -> tuple[list, int, str]:
        survivors = [c for c in self.alive if c in self.ctx["last_scores"]]
        for c in survivors:                  # raced to the end of its stage
            _mark(self.stage_rows, c, self.ctx["reached"].get(c, self.last_round),
                  "stage_end: lost to the final comparison of the stages' survivors")
        # a racer that fell below the bar at a larger budget still competes
        # at the earlier budget where it beat the bar
        survivors += [c for c in self.fallen if c not in survivors]
        return survivors, self.last_round + 1, self.stop
