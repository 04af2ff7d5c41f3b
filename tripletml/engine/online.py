"""Passes of an online learner as a solver of the training driver.

:class:`OnlinePasses` turns an online learner's step kernel into the
driver's protocol (:mod:`tripletml.engine.driver`): each ``step()`` runs
one *block* of the current pass (``block`` consecutive items of the pass's
order), reports its per-step losses to the driver's windowed divergence watch
and, when the block ends the pass, completes one iteration with the pass's
history record and stopping criterion.  The driver owns the loop, the watch,
the progress bar, ``tol`` and ``max_iter``.

The *stepper* (the online learner) provides

``_run_block(Xc, data, idx, pos) -> (losses, margins, cumulative)``
    Steps on items ``idx`` (the block at position ``pos`` of the pass):
    each step's loss before its update, its margin (None for learners
    without one) and further per-step series (dict of arrays).
``_model_finite() -> bool`` and ``_diverged(t) -> Exception``
    The whole-model check made once per pass (``_model_diverged(t)``, when
    the stepper has it, words that error).
``_epoch_indices(rng, m)``, ``_begin_epoch(rng, m)``
    The order of a pass of ``fit`` and per-pass preparation.
``_end_epoch(Xc, data, loss, prev_loss) -> (criterion, extra_record)``
    The pass's criterion (``fit`` only).
``_record_extra() -> dict``
    Solver values added to each record.
``t_``
    The step counter, advanced here by each block.

History records (one per pass of ``fit``, one per ``partial_fit`` call):
``loss`` is the pass's mean loss; ``avg_loss``, ``mistake_rate`` (when the
stepper reports margins) and every cumulative series are running means over
all steps so far (the curves of the OASIS and SDCA papers), continued from
the previous record across ``partial_fit`` calls.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tripletml.engine.driver import StepReport

__all__ = ["OnlinePasses"]


class OnlinePasses:
    """The passes of an online learner, one block per ``step``.

    Parameters
    ----------
    stepper : online learner
        Provides the hooks listed in the module docstring.
    Xc : CSR matrix
        The preprocessed rows.
    data : ndarray
        The items of a pass (triplets, or the label matrix of the
        multi-label rankers); ``m = data.shape[0]``.
    block : int
        Steps per block.
    rng : numpy Generator, optional
        ``fit``: each pass in the stepper's random order, with its
        per-pass criterion.  None (``partial_fit``): one pass in the given
        order, no criterion.
    previous : dict, optional
        The history so far (running means continue from its last record).
    """

    def __init__(self, stepper: Any, Xc, data, *, block: int,
                 rng: np.random.Generator | None = None, previous: dict | None = None):
        self.s, self.Xc, self.data = stepper, Xc, data
        self.m = int(data.shape[0])
        self.block = max(1, int(block))
        self.rng = rng
        self.pos = self.m            # a new pass at the first step
        self.prev_loss: float | None = None
        self.t_recorded = int(stepper.t_)
        prev = previous or {}
        self.means = {k: (v[-1] if v else None) for k, v in prev.items()}

    def _new_pass(self) -> None:
        if self.rng is None:
            self.idx = np.arange(self.m)
        else:
            self.idx = self.s._epoch_indices(self.rng, self.m)
            self.s._begin_epoch(self.rng, self.m)
        self.pos = 0
        self.losses, self.margins = np.empty(self.m), np.empty(self.m)
        self.has_margins = False
        self.cumulative: dict[str, np.ndarray] = {}

    def step(self, budget: int = 1) -> StepReport:
        """One block of the current pass (a new pass when the last ended)."""
        if self.pos >= self.m:
            self._new_pass()
        s, a = self.s, self.pos
        sl = self.idx[a:a + self.block]
        k = sl.shape[0]
        lo, mg, cum = s._run_block(self.Xc, self.data, sl, a)
        t0 = int(s.t_)
        s.t_ = t0 + k
        self.losses[a:a + k] = lo
        if mg is not None:
            self.margins[a:a + k] = mg
            self.has_margins = True
        for name, v in cum.items():
            self.cumulative.setdefault(name, np.empty(self.m))[a:a + k] = v
        self.pos = a + k
        if self.pos < self.m:
            return StepReport(iterations=0, units=k, losses=lo, step0=t0)
        # the end of a pass: the kernels check every margin, the whole model
        # is checked once per pass (O(size))
        if not s._model_finite():
            raise getattr(s, "_model_diverged", s._diverged)(s.t_)
        loss = float(self.losses.mean()) if self.m else 0.0
        criterion, extra = (None, {}) if self.rng is None else \
            s._end_epoch(self.Xc, self.data, loss, self.prev_loss)
        self.prev_loss = loss
        record = self._record(loss, extra)
        return StepReport(iterations=1, units=k, losses=lo, step0=t0, t=self.t_recorded,
                          criterion=criterion, record=record)

    def _record(self, loss: float, extra: dict) -> dict:
        prev = self.t_recorded
        self.t_recorded = T = prev + self.m
        series = {"avg_loss": self.losses}
        if self.has_margins:
            series["mistake_rate"] = (self.margins <= 0).astype(float)
        series.update(self.cumulative)
        values: dict = {"loss": loss}
        for name, per_step in series.items():
            last = self.means.get(name)
            before = last * prev if (prev and last is not None) else 0.0
            values[name] = self.means[name] = (before + float(np.sum(per_step))) / max(T, 1)
        values.update(self.s._record_extra())
        values.update(extra)
        return values
