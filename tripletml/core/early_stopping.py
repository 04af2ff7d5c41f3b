"""What a learner with early stopping on answers declares and records
(:mod:`tripletml.engine.early_stopping` holds the split and the watch).

:class:`EarlyStoppingMixin` gives a learner the three parameters'
constraints, the docstring entries ``{early_stopping}`` and
``{early_stopping_attributes}``, the ``"auto"`` rule and the record of a
probe run.  The learner's own ``_fit`` runs the probe (its solver, with a
monitor) and the refit for the chosen count; LMNN and NCA through
:class:`tripletml.core.neighborhood.LinearMapLearner`, SML directly.
"""
from __future__ import annotations

from numbers import Integral, Real
from typing import Callable

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import Interval, StrOptions
from tripletml.engine.early_stopping import (ValidationWatch, item_folds, pooled_curve,
                                             within_one_standard_error)

__all__ = ["EarlyStoppingMixin", "EARLY_STOPPING_DOC", "EARLY_STOPPING_ATTRIBUTES_DOC"]

#: early stopping's parameters (``{early_stopping}``) and attributes
#: (``{early_stopping_attributes}``) in a subclass docstring
EARLY_STOPPING_DOC = """\
    early_stopping : {"auto", True, False}, default="auto"
        Stop on answers about held-out items
        (:mod:`tripletml.engine.early_stopping`; Goodfellow et al. 2016,
        Algorithms 7.1-7.2): the named items are split in
        ``round(1 / validation_fraction)`` folds (by a hash of the item id:
        the same folds whatever ``random_state``); for each, a probe run on
        the answers among the other items is scored after every iteration
        on the answers whose three items are in the fold (the use on new
        items), until ``n_iter_no_change`` iterations bring no better
        score; over the pooled scores the fewest iterations within one
        standard error of the best are chosen (the one-standard-error rule)
        and all answers are fitted for that many (unless it is the end of
        the longest probe: the plain fit).  ``"auto"``: on for answers
        (``triplets=``, and pairs except for ITML, whose held-out score
        would need triplets), off for class labels (exact constraints, the
        paper's setting); ``True`` also holds items out of the triplets a
        learner samples from labels (SML, ITML; LMNN and NCA use the labels
        themselves and stay off).  ``fit(collection)`` keeps the plain fit.
    validation_fraction : float in (0, 1), default=1/3
        Share of the named items each fold holds out (the number of folds
        is ``round(1 / validation_fraction)``, at least 2).
    n_iter_no_change : int, default=5
        Iterations without a better held-out score that end a probe run.
"""
EARLY_STOPPING_ATTRIBUTES_DOC = """\
    stop_reason_ : {"tol", "max_iter", "validation"}
        ``"validation"``: the iteration count chosen by early stopping was
        made.
    early_stopping_ : str
        ``"off"``, why no items could be held out, or what early stopping
        held out and chose.
    validation_scores_ : ndarray
        With early stopping: the held-out accuracy of the probe run's
        iterates (0: the start); absent otherwise.
"""


class EarlyStoppingMixin:
    """Parameters, docstrings and records of early stopping on answers."""

    #: the constraints of ``early_stopping``, ``validation_fraction`` and
    #: ``n_iter_no_change`` (merged into a learner's ``_parameter_constraints``)
    _early_stopping_constraints = {
        "early_stopping": [StrOptions({"auto"}), "boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
    }
    #: the probe's scores, a fitted array when early stopping ran
    _validation_array = {"validation_scores_": ArraySpec((None,), optional=True)}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for key, text in (("early_stopping", EARLY_STOPPING_DOC),
                          ("early_stopping_attributes", EARLY_STOPPING_ATTRIBUTES_DOC)):
            if cls.__doc__ and f"    {{{key}}}\n" in cls.__doc__:
                cls.__doc__ = cls.__doc__.replace(f"    {{{key}}}\n", text)

    def _early_stopping_on(self) -> bool:
        """``early_stopping``: True, False, or ``"auto"``: on when the fit's
        supervision is answers (triplets or pairs, ``tuple_form``), off for
        class labels."""
        flag = getattr(self, "early_stopping", False)
        if flag == "auto":
            return bool(getattr(self, "_fit_from_answers", False))
        return bool(flag)

    def _choose_count(self, triplets: np.ndarray,
                      probe: Callable[[np.ndarray, ValidationWatch], int | None]) -> int | None:
        """The iteration count early stopping chooses on ``triplets``, or None
        for the plain fit (``early_stopping_`` says why; ``validation_scores_``
        holds the pooled curve when the probes ran).

        The named items are split in ``k = round(1 / validation_fraction)``
        folds (:func:`~tripletml.engine.early_stopping.item_folds`, by item
        id); for each fold ``probe(fit_answers, watch)`` runs the learner's
        solver on the answers among the other folds' items, calls ``watch``
        after every iteration (0: the start) and returns its iteration count
        (None: nothing to fit in that fold).  The watch scores the answers
        whose three items are all in the fold: a similarity is used on items
        no one judged, and answers that name a known item keep rewarding a fit
        to the known items (measured in ``BENCHMARKS.md``).  The count is the
        earliest best of the pooled curve
        (:func:`~tripletml.engine.early_stopping.pooled_curve`); None when
        that is the end of the longest probe (still improving: the plain
        fit)."""
        self.__dict__.pop("validation_scores_", None)
        if not self._early_stopping_on():
            self.early_stopping_ = "off"
            return None
        t = np.asarray(triplets)
        k = max(2, int(round(1.0 / float(self.validation_fraction))))
        watches, n_fit = [], 0
        for hold in item_folds(t, k, val="all"):
            if hold.fit.size == 0 or hold.val.size == 0:
                continue
            watch = ValidationWatch(t[hold.val], int(self.n_iter_no_change))
            if probe(t[hold.fit], watch) is not None and watch.scores:
                watches.append(watch)
                n_fit += hold.fit.size
        if not watches:
            self.early_stopping_ = (f"not possible: no fold of {k} over the {np.unique(t).size} "
                                    "named items has answers among its own items and among "
                                    "the others")
            return None
        curve, eligible = pooled_curve(watches)
        self.validation_scores_ = curve
        last = curve.size - 1
        n_val = sum(len(w.triplets) for w in watches)
        near = within_one_standard_error(curve, n_val, eligible)
        best = int(np.flatnonzero(near)[0]) if near.any() else last
        self.early_stopping_ = (f"{len(watches)} folds of the items: {n_fit} answers fitted, "
                                f"{n_val} validated (all three items held out); iteration "
                                f"{best} of {last} chosen (the best "
                                f"{int(np.argmax(np.where(eligible, curve, -np.inf)))}, "
                                "within one standard error)")
        return None if best >= last else best
