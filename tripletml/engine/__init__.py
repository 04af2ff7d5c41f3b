"""Training, once: the driver that runs every iterative solver.

* :mod:`tripletml.engine.history` -- :class:`History`, the ``history_``
  record (one entry per iteration or block).
* :mod:`tripletml.engine.watch` -- :class:`DivergenceWatch`, the
  divergence watch over running losses (per iteration, or in windows of
  steps for the online learners).
* :mod:`tripletml.engine.driver` -- :func:`run` drives a solver that
  follows the :class:`Solver` protocol (``step(budget) -> StepReport``)
  through ``max_iter``, ``tol`` and ``max_time``, owns the progress bar,
  history and watch, and returns a :class:`TrainingResult` (iterations,
  stop reason, last criterion, history, seconds) without touching any
  estimator; :func:`apply_result` records it on the estimator
  (``n_iter_``, ``stop_reason_``, ``history_``) and warns when a ``tol``
  was not met.
"""
from tripletml.engine.driver import (Solver, StepReport, TrainingResult, apply_result,
                                     deadline_passed, run, training_deadline)
from tripletml.engine.history import History
from tripletml.engine.watch import DivergenceWatch

__all__ = ["History", "DivergenceWatch", "Solver", "StepReport", "TrainingResult", "run",
           "apply_result", "training_deadline", "deadline_passed"]
