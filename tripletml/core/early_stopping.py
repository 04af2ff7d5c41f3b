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

import numpy as np

from tripletml.core.arrayspec import ArraySpec
from tripletml.core.params import Interval, StrOptions
from tripletml.engine.early_stopping import ItemHoldout, ValidationWatch, split_by_items

__all__ = ["EarlyStoppingMixin", "EARLY_STOPPING_DOC", "EARLY_STOPPING_ATTRIBUTES_DOC"]

#: early stopping's parameters (``{early_stopping}``) and attributes
#: (``{early_stopping_attributes}``) in a subclass docstring
EARLY_STOPPING_DOC = """\
    early_stopping : {"auto", True, False}, default="auto"
        Stop on answers about held-out items
        (:mod:`tripletml.engine.early_stopping`; Goodfellow et al. 2016,
        Algorithms 7.1-7.2): hold out ``validation_fraction`` of the items
        the answers name, fit on the answers among the others, score after
        every iteration the accuracy of the answers headed by a held-out
        item, stop after ``n_iter_no_change`` iterations without a better
        score, then fit all answers for the best iteration count (unless
        the last iterate scored best).  ``"auto"``: on for answers
        (``triplets=``, and pairs except for ITML, whose held-out score
        would need triplets), off for class labels (exact constraints, the
        paper's setting); ``True`` also holds items out of the triplets a
        learner samples from labels (SML, ITML; LMNN and NCA use the labels
        themselves and stay off).  ``fit(collection)`` keeps the plain fit.
    validation_fraction : float in (0, 1), default=0.2
        Share of the named items that early stopping holds out.
    n_iter_no_change : int, default=5
        Iterations without a better held-out score that end the probe run.
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

    def _holdout(self, triplets: np.ndarray, rng) -> ItemHoldout | None:
        """The held-out items of this fit, or None (``early_stopping_`` then
        says why: off, or no split possible)."""
        if not self._early_stopping_on():
            self.early_stopping_ = "off"
            return None
        hold = split_by_items(triplets, float(self.validation_fraction), rng)
        if hold.fit.size == 0:
            self.early_stopping_ = f"not possible: {hold.reason}"
            return None
        return hold

    def _record_probe(self, hold: ItemHoldout, watch: ValidationWatch, n_iter: int) -> None:
        """``validation_scores_`` and ``early_stopping_`` of a probe run."""
        self.validation_scores_ = np.asarray(watch.scores, dtype=np.float64)
        self.early_stopping_ = (f"held out {hold.items.size} items: {hold.fit.size} answers "
                                f"fitted, {hold.val.size} validated; best iteration "
                                f"{watch.best_iter} of {n_iter}")
