"""A solver whose own routine makes every iteration in one call.

scipy's L-BFGS (LMNN, NCA) and the compiled or projected loops of MMC and
SCML run their iterations inside one function and keep their state there
(an L-BFGS memory cannot be paused and resumed).  :class:`WholeRun` hands
such a routine to the driver (:func:`tripletml.engine.run`) as one step,
so the driver still owns what every learner records: ``n_iter_``,
``stop_reason_``, ``history_`` and the :class:`~sklearn.exceptions.
ConvergenceWarning` when a ``tol`` is not met.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from tripletml.engine.driver import StepReport

__all__ = ["WholeRun"]


class WholeRun:
    """One driver step that runs ``go(budget)`` to its end.

    Parameters
    ----------
    go : callable
        ``go(max_iter)`` runs at most ``max_iter`` iterations and returns an
        object with ``n_iter`` (iterations made), ``converged`` (the
        routine's own stopping rule met, or no further progress possible),
        ``criterion`` (its last value, or None) and optionally ``history``
        (a dict of equal-length lists, one record per iteration), which
        becomes the run's history.

    Notes
    -----
    The step reports the routine's iterations when it converged (at least
    one) and the whole budget when it did not (it stopped at its own
    iteration or evaluation cap), with criterion 0 when it converged: run
    it with ``tol=0.0`` when the learner's ``tol`` is None, so that a
    routine that stops by itself ends the run as "tol" instead of being
    started again.
    """

    def __init__(self, go: Callable[[int], Any]):
        self._go = go
        self.result: Any = None

    def step(self, budget: int = 1) -> StepReport:
        res = self._go(int(budget))
        self.result = res
        n = int(res.n_iter)
        if res.converged:
            crit, iters = 0.0, min(max(n, 1), int(budget))
        else:
            c = res.criterion
            crit = math.inf if c is None or not math.isfinite(float(c)) else float(c)
            iters = int(budget)
        return StepReport(iterations=iters, units=iters, criterion=crit)

    def finish(self, result, hist) -> None:
        """The routine's own per-iteration history becomes the run's."""
        h = getattr(self.result, "history", None)
        if h:
            hist.data.clear()
            hist.data.update({k: list(v) for k, v in h.items()})
        res = self.result
        if res is not None and res.criterion is not None and math.isfinite(float(res.criterion)):
            result.criterion = float(res.criterion)
