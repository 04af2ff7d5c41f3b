"""``C="auto"``: the passive-aggressive step cap chosen on held-out items.

OASIS and the PA baselines of the LORETA paper cap each step at ``C`` (PA-I):
the larger ``C``, the more fully each answer is followed.  The defaults were
chosen on triplets sampled from class labels, which never contradict each
other; people's answers do, and the same cap then follows noise (issue 38:
IterativePA -.07 below the cosine on a simulated crowd set at ``C =
0.001``, +.01 to +.04 at ``1e-4`` to ``1e-5``; OASIS on Zappos shoes best at
``3e-6`` by an inner split of the training shoes).  How far to trust the
answers is not in their scale but in whether they generalize, which only
held-out answers tell, so on answers ``"auto"`` is a held-out choice:

1. hold out a share of the *items* the answers name
   (:func:`tripletml.engine.early_stopping.split_by_items`, as early stopping
   does: a similarity is used on items no one judged);
2. fit the answers among the other items at each cap of the grid ``C_0
   10^-j`` (``C_0`` the class default, ``j = 0..4``), score the answers
   headed by a held-out item;
3. fit all answers at the smallest cap whose score is within one standard
   error of the best (the one-standard-error rule: a cap that follows the
   answers more closely must earn it).

Class labels keep the class default (the papers' setting, unchanged models);
so do a partitioned fit and ``partial_fit`` (no items to hold out).
"""
from __future__ import annotations

import copy
from numbers import Real

import numpy as np
import scipy.sparse as sp

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import Interval, StrOptions
from tripletml.engine.early_stopping import split_by_items, within_one_standard_error
from tripletml.core.validation import as_generator
from tripletml.linalg.sparse_rows import used_rows

__all__ = ["HeldoutStepCapMixin", "C_AUTO", "STEP_CAP_ARRAYS"]

#: the constraint of a ``C`` that may be "auto"
C_AUTO = [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})]
#: the held-out record's arrays (declared by each learner's ``_fitted_arrays``)
STEP_CAP_ARRAYS = {"C_grid_": ArraySpec((None,), optional=True),
                   "C_scores_": ArraySpec((None,), optional=True)}
#: the grid's factors below the class default
_GRID_FACTORS = (1.0, 1e-1, 1e-2, 1e-3, 1e-4)
#: share of the named items held out, fewest answers on either side
HELD_FRACTION, MIN_ANSWERS = 0.2, 20


class HeldoutStepCapMixin:
    """``C="auto"`` for the PA-capped online learners (see the module).

    Sets ``C_`` (the cap used) at every fit, and with a held-out choice
    ``C_grid_`` and ``C_scores_`` (the held-out triplet accuracy of each
    cap).  The kernels read :meth:`_step_cap`."""

    #: the cap of "auto" on labels (and where no choice is made)
    _default_C: float = 0.01

    def _step_cap(self) -> float:
        """A number ``C`` as given; "auto": the cap it resolved to at the last
        fit (``C_``, which ``partial_fit`` continues with), else the default."""
        if not isinstance(self.C, str):
            return float(self.C)
        c = self.__dict__.get("C_")
        return float(self._default_C if c is None else c)

    def _fit(self, X, triplets, rng):
        for name in ("C_grid_", "C_scores_"):
            self.__dict__.pop(name, None)
        self.C_ = None
        auto = isinstance(self.C, str) and bool(getattr(self, "_fit_from_answers", False))
        cap = self._heldout_cap(X, np.asarray(triplets), rng) if auto else None
        self.C_ = float(cap if cap is not None else self._step_cap())
        self._fit_plain(X, triplets, rng)

    def _fit_plain(self, X, triplets, rng):
        """The learner's own fit at the cap ``C_`` (a subclass that wraps its
        fit, as OASIS's averaging, overrides this and calls super)."""
        super()._fit(X, triplets, rng)

    def _heldout_cap(self, X, triplets: np.ndarray, rng) -> float | None:
        """The grid's best cap on the answers about held-out items (None: too
        few answers on a side to choose)."""
        # the split's draws come from random_state alone (not from the fit's
        # stream, which the span route advances before _fit); each probe
        # replays the fit's own stream, so it starts where the final fit
        # starts (the same initial model and order)
        split_rng = np.random.default_rng(as_generator(self.random_state, self).integers(2 ** 62))
        hold = split_by_items(triplets, HELD_FRACTION, split_rng, min_answers=MIN_ANSWERS)
        if hold.fit.size == 0:
            return None
        grid = np.array([float(f"{self._default_C * f:.12g}") for f in _GRID_FACTORS])
        scores = np.zeros(grid.size)
        for i, c in enumerate(grid):
            self.C_ = float(c)
            self._fit_plain(X, triplets[hold.fit], copy.deepcopy(rng))
            factors = self._bilinear_factors() or (self._bilinear_matrix(), None)
            scores[i] = bilinear_accuracy(X, factors, triplets[hold.val])
        self.C_grid_, self.C_scores_ = grid, scores
        return float(grid[one_standard_error(scores, hold.val.size)])


def one_standard_error(scores: np.ndarray, n: int) -> int:
    """The index of the most regularized value (the last: the grid runs from
    the largest cap down) whose held-out accuracy over ``n`` answers is
    within one standard error of the best
    (:func:`~tripletml.engine.early_stopping.within_one_standard_error`), so
    a cap that follows the answers more closely must earn it."""
    return int(np.flatnonzero(within_one_standard_error(scores, n))[-1])


def bilinear_accuracy(X, factors, t: np.ndarray) -> float:
    """Triplet accuracy (ties one half) of ``s(a, b) = x_a^T A B^T x_b``
    (``factors = (W, None)``: ``x_a^T W x_b``) on rows ``X`` (dense or CSR),
    through the rows the answers name."""
    A, B = factors
    rows, local = used_rows(t, X.shape[0])
    R = X[rows]
    left = np.asarray(R @ A)
    right = np.asarray(R.toarray() if sp.issparse(R) else R) if B is None else np.asarray(R @ B)
    sq = left[local[:, 0]]
    m = np.einsum("ij,ij->i", sq, right[local[:, 1]] - right[local[:, 2]])
    tie = np.abs(m) <= 1e-12 * max(1.0, float(np.abs(m).max()) if m.size else 1.0)
    return float(np.mean(np.where(tie, 0.5, m > 0)))
