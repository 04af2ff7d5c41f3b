"""The divergence watch the training driver feeds.

One :class:`DivergenceWatch` per fit (kept across ``partial_fit`` calls by
the online learners) holds

* named *channels*, each a :class:`tripletml.engine.stopping.LossWatch` over one
  running quantity (a loss per epoch, an objective per evaluation): a value
  that is not finite, or that exceeds ``factor`` times the smallest value of
  its channel so far plus ``floor``, raises the learner's
  ``FloatingPointError`` with advice;
* optionally a *window* of ``window`` steps over per-step losses (the online
  learners: the mean loss of each window of consecutive steps, which may span
  blocks, passes and ``partial_fit`` calls, is fed to the ``"steps"``
  channel).  The first value of that channel may be the loss of the initial
  model (``initial``), so a run that blows up within its first window is
  caught.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tripletml.engine.stopping import LossWatch

__all__ = ["DivergenceWatch", "STEPS"]

#: the channel fed by the window of per-step losses
STEPS = "steps"


class DivergenceWatch:
    """Divergence watch over one or more running losses.

    Parameters
    ----------
    est : estimator or str
        The learner (or its name) named in the error.
    advice : str
        What the error suggests.
    factor, floor : float
        A value above ``factor * (smallest so far + floor)`` is divergence.
    window : int, optional
        Steps per window of :meth:`add` (None: no windowed channel).
    initial : float, optional
        The initial model's loss, the windowed channel's first value.
    """

    def __init__(self, est: Any, *, advice: str, factor: float = 1e3, floor: float = 1.0,
                 window: int | None = None, initial: float | None = None):
        self.name = est if isinstance(est, str) else type(est).__name__
        self.advice = advice
        self.factor, self.floor = float(factor), float(floor)
        self.window = None if window is None else int(window)
        self._channels: dict[str, LossWatch] = {}
        self.total, self.count, self.start = 0.0, 0, 0
        if initial is not None:
            self.update(initial, "the initial model", STEPS)

    def _channel(self, channel: str) -> LossWatch:
        w = self._channels.get(channel)
        if w is None:
            w = self._channels[channel] = LossWatch(self.name, factor=self.factor,
                                                    floor=self.floor, advice=self.advice)
        return w

    def update(self, value: float, where: str, channel: str = "loss") -> None:
        """Feed one value of ``channel`` (raises FloatingPointError on divergence)."""
        self._channel(channel).update(value, where)

    def add(self, losses: np.ndarray, step0: int) -> None:
        """Add the per-step losses of steps ``step0 + 1 ...`` to the window."""
        if self.window is None:
            raise ValueError(f"{self.name}: this divergence watch has no window of steps.")
        i, n = 0, losses.shape[0]
        while i < n:                      # at most n / window + 1 rounds
            take = min(self.window - self.count, n - i)
            self.total += float(np.sum(losses[i:i + take]))
            if self.count == 0:
                self.start = step0 + i + 1
            self.count += take
            i += take
            if self.count >= self.window:
                self._close()

    def flush(self, min_count: int) -> None:
        """Check the open window when it holds at least ``min_count`` steps
        (the end of a fit: a run shorter than one window is watched too)."""
        if self.count >= min_count:
            self._close()
        self.total, self.count = 0.0, 0

    def _close(self) -> None:
        self.update(self.total / self.count,
                    f"steps {self.start}-{self.start + self.count - 1}", STEPS)
        self.total, self.count = 0.0, 0
