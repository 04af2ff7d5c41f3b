"""Stopping criteria shared by every iterative learner.

One rule for all (in the spirit of pymanopt's stopping criteria and
scikit-learn's ``ConvergenceWarning``):

* A solver stops for exactly one reason, recorded in ``stop_reason_``:

  ``"tol"``       the learner's relative criterion fell below ``tol``;
  ``"max_iter"``  ``max_iter`` passes / iterations were made;
  ``"max_time"``  a time budget (``max_time``) ran out;
  ``"validation"`` the iterations early stopping chose on answers about
                  held-out items were made
                  (:mod:`tripletml.engine.early_stopping`).

* When ``tol`` is set and the solver stops at ``max_iter`` (or
  ``max_time``) without meeting it, a
  :class:`sklearn.exceptions.ConvergenceWarning` names the learner, the
  criterion's last value and what to change.  A learner run with
  ``tol=None`` asked for a fixed budget (the online algorithms of the papers),
  so reaching ``max_iter`` is the plan, not a failure: no warning.

* :class:`LossWatch` watches a running loss for divergence: a loss that is not
  finite, or that grows by ``factor`` (default 1e3) over its smallest value so
  far, raises the learner's :class:`FloatingPointError` with advice.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

from sklearn.exceptions import ConvergenceWarning

__all__ = ["STOP_REASONS", "relative_change", "finish", "LossWatch"]

STOP_REASONS = ("tol", "max_iter", "max_time", "validation")


def relative_change(old: float, new: float) -> float:
    """``|new - old| / max(|old|, |new|, 1e-12)``: the scale-free change that
    every ``tol`` of tripletml is compared with (NaN/inf give ``inf``)."""
    if not (math.isfinite(old) and math.isfinite(new)):
        return math.inf
    return abs(new - old) / max(abs(old), abs(new), 1e-12)


def finish(est: Any, n_iter: int, reason: str, *, tol: float | None = None,
           criterion: float | None = None, what: str = "relative change",
           advice: str = "increase max_iter or tol", stacklevel: int = 3) -> None:
    """Record ``n_iter_`` and ``stop_reason_`` on ``est``; warn when a ``tol``
    was asked for and not met.

    Parameters
    ----------
    est : estimator
    n_iter : int
        Passes / iterations made (stored as ``n_iter_``).
    reason : {"tol", "max_iter", "max_time", "validation"}
    tol : float or None
        The tolerance asked for (None: a fixed budget, never a warning).
    criterion : float or None
        The last value of the stopping criterion (for the message).
    what : str
        What the criterion measures (for the message).
    advice : str
        What to change.
    stacklevel : int, default=3
        Passed to :func:`warnings.warn` (3: the caller of the method that
        calls ``finish``, i.e. the user's ``fit``; add one per extra frame).
    """
    if reason not in STOP_REASONS:
        raise ValueError(f"unknown stop reason {reason!r}; one of {STOP_REASONS}")
    est.n_iter_ = int(n_iter)
    est.stop_reason_ = reason
    if reason != "tol" and tol is not None:
        last = "" if criterion is None else f" (last {what}: {criterion:.3g})"
        limit = (f"max_iter={n_iter}" if reason == "max_iter"
                 else f"max_time after {n_iter} iterations")
        warnings.warn(f"{type(est).__name__}: stopped at {limit} before the {what} fell "
                      f"below tol={tol:g}{last}; {advice}.", ConvergenceWarning, stacklevel=stacklevel)


class LossWatch:
    """Divergence watch over a running loss (one value per epoch or block).

    ``update(value, where)`` raises :class:`FloatingPointError` when the
    value is not finite or exceeds ``factor`` times the smallest value seen
    so far (plus ``floor``, so a loss that starts at zero may rise to a small
    positive value).  The message names the learner and suggests a smaller
    step size (``advice``).
    """

    def __init__(self, est: Any, *, factor: float = 1e3, floor: float = 1.0,
                 advice: str = "lower the step size (eta0) or scale the features down"):
        self.name = est if isinstance(est, str) else type(est).__name__
        self.factor, self.floor, self.advice = float(factor), float(floor), advice
        self.best = math.inf

    def update(self, value: float, where: str) -> None:
        value = float(value)
        if not math.isfinite(value):
            raise FloatingPointError(f"{self.name}: training diverged (non-finite loss at "
                                     f"{where}); {self.advice}.")
        if value > self.factor * (self.best + self.floor):
            raise FloatingPointError(
                f"{self.name}: training diverged (loss {value:.4g} at {where}, more than "
                f"{self.factor:g} times its smallest value {self.best:.4g}); {self.advice}.")
        self.best = min(self.best, value)
