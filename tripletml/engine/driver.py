"""The one training loop of tripletml.

Every iterative learner hands :func:`run` a *solver*: an object with

``step(budget) -> StepReport``
    Do the next piece of work (one epoch, one sweep block, one SGD
    iteration, one block of an online pass) and report it.  ``budget`` is
    the number of iterations still allowed by ``max_iter`` (a solver that
    runs several iterations in one call, such as ITML's compiled sweeps,
    must not exceed it; most do one).

``finish(result, history)`` (optional)
    Called once after the loop, with the :class:`TrainingResult` and the
    :class:`~tripletml.engine.History`; a solver may correct its last
    record there (LowRankDML's projected final objective).

The driver owns what used to be copied into every learner: the progress bar
(``verbose``), the history records, the divergence watch
(:class:`~tripletml.engine.DivergenceWatch`), the stopping rule (``tol``
compared with the report's ``criterion``, ``max_iter`` iterations,
``max_time`` seconds of training) and the stop reason.  It returns a
:class:`TrainingResult` and changes no estimator: :func:`apply_result`
records the result on the learner (``n_iter_``, ``stop_reason_``,
``history_``) and warns when a ``tol`` was asked for and not met
(:func:`tripletml.engine.stopping.finish`).  A solver that is a pure function of
its inputs therefore trains the same way in-process and on one partition of
a cluster.

The stopping rule (one for all learners):

* after each report that completes an iteration with a finite
  ``criterion``, the run stops with ``"tol"`` when ``tol`` is set and
  ``criterion <= tol``;
* it stops with ``"max_iter"`` after ``max_iter`` iterations;
* it stops with ``"max_time"`` once the training seconds (the reports'
  ``seconds`` where given, the wall time of ``step`` otherwise) reach
  ``max_time``, or once the clock passes a deadline set around the fit by
  :func:`training_deadline` (:class:`tripletml.AutoSimilarity`'s time
  budget: a racer's fit ends within one step of it).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Any, Protocol, Sequence, runtime_checkable

import numpy as np

from tripletml.engine.progress import progress_bar
from tripletml.engine.stopping import STOP_REASONS, finish
from tripletml.core.validation import check_scalar_param
from tripletml.engine.history import History
from tripletml.engine.watch import DivergenceWatch

__all__ = ["StepReport", "Solver", "TrainingResult", "run", "apply_result",
           "MAX_STEPS_PER_ITERATION", "training_deadline", "deadline_passed"]

#: the ``time.time()`` after which every run stops ("max_time"), or None
_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("tripletml_deadline", default=None)


@contextlib.contextmanager
def training_deadline(when: float | None):
    """Inside, every :func:`run` (and a solver that polls
    :func:`deadline_passed` between its blocks) stops with ``"max_time"``
    after its first step that ends past ``when`` (``time.time()`` seconds;
    None: no deadline).  An earlier deadline set around it is kept."""
    if when is not None and (isinstance(when, bool) or not isinstance(when, (int, float))
                             or not math.isfinite(when)):
        raise ValueError(f"training_deadline: the deadline must be a finite time.time() "
                         f"value or None, got {when!r}")
    outer = _DEADLINE.get()
    if when is not None and outer is not None:
        when = min(float(when), outer)
    token = _DEADLINE.set(outer if when is None else float(when))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline_passed() -> bool:
    """Whether the clock is past the deadline of :func:`training_deadline`."""
    when = _DEADLINE.get()
    return when is not None and time.time() >= when

#: the most steps in a row that may complete no iteration (blocks of one
#: online pass: at least 1,000 triplets each, so 10^7 blocks are 10^10
#: triplets) -- the cap that bounds the loop for a solver that never ends a
#: pass
MAX_STEPS_PER_ITERATION = 10_000_000


@dataclass
class StepReport:
    """What one ``step`` of a solver did.

    Attributes
    ----------
    iterations : int
        Iterations (epochs, passes, sweeps) completed by this step: 0 for a
        block inside a pass, usually 1, more for a compiled multi-sweep call.
    units : int
        Progress-bar units done (triplets, samples, sweeps, iterations).
    t : int, optional
        The solver's step counter for the history record.
    record : dict, optional
        Values of the history record (None: no record for this step).
    criterion : float, optional
        The stopping criterion after this step (compared with ``tol``).
    watch : sequence of (value, where) or (value, where, channel)
        Values for the divergence watch.
    losses : ndarray, optional
        Per-step losses for the watch's window (online learners), steps
        ``step0 + 1, ...``.
    step0 : int
        The step counter before the first of ``losses``.
    seconds : float, optional
        Training seconds of this step (default: the wall time of ``step``).
    """

    iterations: int = 1
    units: int = 1
    t: int | None = None
    record: dict | None = None
    criterion: float | None = None
    watch: Sequence[tuple] = ()
    losses: np.ndarray | None = None
    step0: int = 0
    seconds: float | None = None


@runtime_checkable
class Solver(Protocol):
    """The protocol :func:`run` drives (``finish`` is optional)."""

    def step(self, budget: int) -> StepReport:  # pragma: no cover - protocol
        ...


@dataclass
class TrainingResult:
    """What :func:`run` did: iterations, why it stopped, the last criterion,
    the history (a dict of lists) and the training seconds."""

    n_iter: int
    stop_reason: str
    criterion: float | None
    history: dict = field(default_factory=dict)
    seconds: float = 0.0


def run(solver: Solver, *, name: str, max_iter: int, tol: float | None = None,
        max_time: float | None = None, history: History | None = None,
        watch: DivergenceWatch | None = None, flush_window: int | None = None,
        verbose: Any = 0, total: int | None = None, unit: str = "it",
        monitor: Callable[[int], bool] | None = None,
        on_iteration: Callable[[int, float | None, float], None] | None = None
        ) -> TrainingResult:
    """Run ``solver`` until ``tol``, ``max_iter`` or ``max_time`` stops it.

    Parameters
    ----------
    solver : Solver
    name : str
        The learner's name (progress bar, errors).
    max_iter : int
        Iterations allowed (>= 1).
    tol : float, optional
        Stop when a completed iteration's criterion is ``<= tol``.
    max_time : float, optional
        Seconds of training allowed.
    history : History, optional
        The record to extend (a new one by default).
    watch : DivergenceWatch, optional
        Fed with the reports' ``watch`` values and ``losses``.
    flush_window : int, optional
        At the end, check the watch's open window when it holds at least
        this many steps (None: leave the window open, e.g. for the next
        ``partial_fit`` call).
    verbose : int
        Progress bar (see :func:`tripletml.engine.progress.progress_bar`).
    total, unit : int, str
        The bar's total and unit (default: ``max_iter`` iterations).
    monitor : callable, optional
        ``monitor(n_iter)`` after each step with iterations; True: stop ("validation").
    on_iteration : callable, optional
        ``on_iteration(n_iter, criterion, seconds)`` after each step with
        iterations, its record kept, before the stopping rule (a checkpoint:
        :func:`tripletml.engine.resume.run_resumable`).

    Returns
    -------
    TrainingResult
    """
    check_scalar_param(max_iter, "max_iter", name, kind="int", low=1)
    check_scalar_param(tol, "tol", name, kind="real", low=0, allow_none=True)
    check_scalar_param(max_time, "max_time", name, kind="real", low=0, low_inclusive=False,
                       allow_none=True)
    max_iter = int(max_iter)
    partial = 0                  # steps in a row that completed no iteration
    hist = History() if history is None else history
    bar = progress_bar(int(max_iter) if total is None else int(total), verbose=verbose,
                       desc=name, unit=unit)
    reason, criterion, n_iter, seconds = "max_iter", None, 0, 0.0
    try:
        # every step does work or raises; the bound is a guard against a solver
        # that reports no progress
        while n_iter < max_iter:
            t0 = time.perf_counter()
            rep = solver.step(int(max_iter) - n_iter)
            seconds += (time.perf_counter() - t0) if rep.seconds is None else rep.seconds
            partial = _checked_progress(rep, name, max_iter - n_iter, partial)
            n_iter += rep.iterations
            if bar is not None:
                bar.update(rep.units)
            if watch is not None:
                if rep.losses is not None:
                    watch.add(rep.losses, rep.step0)
                for item in rep.watch:
                    watch.update(*item)
            if rep.record is not None:
                hist.record(n_iter if rep.t is None else rep.t, **rep.record)
            if rep.iterations and rep.criterion is not None:
                criterion = float(rep.criterion)
            if rep.iterations and on_iteration is not None:
                on_iteration(n_iter, criterion, seconds)
            stop = bool(rep.iterations and monitor is not None and monitor(n_iter))
            if rep.iterations and rep.criterion is not None and tol is not None \
                    and criterion <= tol:
                reason = "tol"
                break
            if stop:
                reason = "validation"
                break
            if n_iter < max_iter and ((max_time is not None and seconds >= max_time)
                                      or deadline_passed()):
                reason = "max_time"
                break
    finally:
        if bar is not None:
            bar.close()
    if watch is not None and flush_window is not None:
        watch.flush(flush_window)
    result = TrainingResult(n_iter=n_iter, stop_reason=reason,
                            criterion=None if criterion is None or not math.isfinite(criterion)
                            else criterion, history=hist.data, seconds=seconds)
    finisher = getattr(solver, "finish", None)
    if finisher is not None:
        finisher(result, hist)
        result.history = hist.data
    return result


def _checked_progress(rep: StepReport, name: str, left: int, partial: int) -> int:
    """The steps in a row that completed no iteration, after ``rep`` (a
    RuntimeError for a report that overruns ``left`` iterations, makes no
    progress, or ends no pass within :data:`MAX_STEPS_PER_ITERATION` steps)."""
    if rep.iterations < 0 or rep.iterations > left:
        raise RuntimeError(f"{name}: the solver reported {rep.iterations} iterations "
                           f"with {left} left.")
    if rep.iterations == 0 and rep.units <= 0:
        raise RuntimeError(f"{name}: the solver's step made no progress.")
    partial = partial + 1 if rep.iterations == 0 else 0
    if partial > MAX_STEPS_PER_ITERATION:
        raise RuntimeError(f"{name}: {partial} steps in a row completed no iteration "
                           f"(the cap is MAX_STEPS_PER_ITERATION = "
                           f"{MAX_STEPS_PER_ITERATION}); the solver does not end its "
                           "passes.")
    return partial


def apply_result(est: Any, result: TrainingResult, *, tol: float | None, what: str,
                 advice: str, stacklevel: int = 5, early_stopped: bool = False) -> None:
    """Record ``result`` on ``est`` (``n_iter_``, ``stop_reason_``,
    ``history_``) and warn (:class:`~sklearn.exceptions.ConvergenceWarning`)
    when ``tol`` was set and not met; ``what`` names the criterion and
    ``advice`` says what to change.  ``early_stopped``: the run's budget was
    the count early stopping chose (:mod:`tripletml.engine.early_stopping`):
    spending it is stop reason ``"validation"``, never a warning."""
    if result.stop_reason not in STOP_REASONS:
        raise ValueError(f"unknown stop reason {result.stop_reason!r}")
    est.history_ = result.history
    reason = result.stop_reason
    if early_stopped and reason == "max_iter":
        reason = "validation"
    finish(est, result.n_iter, reason, tol=None if early_stopped else tol,
           criterion=result.criterion, what=what, advice=advice, stacklevel=stacklevel)
