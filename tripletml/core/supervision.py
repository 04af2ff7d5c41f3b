"""What the user gave ``fit``, parsed once: one :class:`Supervision`.

``fit`` accepts rows with class labels, rows with ``triplets=`` or
``pairs=`` (index tuples into the rows, pairs with their labels in ``y``),
metric-learn's point tuples ``(n, 3, d)`` / ``(n, 2, d)`` and, with the
``preprocessor`` parameter, index tuples ``(n, 3)`` / ``(n, 2)`` or 1-D row
ids.  :func:`read_supervision` turns each of these forms into one object --
what the rows are, what the supervision is and how it was given -- before
anything is validated or fitted; :meth:`Supervision.checked` then validates
the supervision against the validated rows (the triplets' indices, the
pairs and their labels, the class labels as codes).
:meth:`tripletml.core.base.TripletLearner.fit` consumes it: the sampling
policy, the pairs' triplets, the threshold calibrated on pairs and
``tuple_form_`` all read the same object; an online learner's
``partial_fit`` reads its input with :func:`read_partial_supervision`.

The partitioned and streamed fits (:mod:`tripletml.distributed`) read their
supervision from a :class:`~tripletml.distributed.sharded.ShardedCollection`
(labels or triplets per partition) and keep their own path; the
per-partition labels / triplets there are the ``"labels"`` /
``"triplets"`` kinds of this object, so a partition could hand
``Supervision(rows=X_p, kind=..., ...)`` to the same checks.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from tripletml.core.tuples import refuse_index_tuples, tuple_input
from tripletml.core.validation import check_triplets
from tripletml.pairs import PairConstraints, check_pairs
from tripletml.triplets import check_labels

__all__ = ["Supervision", "read_supervision", "read_partial_supervision", "KINDS", "GIVEN_AS"]

#: what the supervision is
KINDS = ("labels", "triplets", "pairs", "none")
#: how it was given: rows with ``y`` / ``triplets=`` / ``pairs=`` (or no
#: supervision), metric-learn's point tuples, index tuples into a
#: ``preprocessor``, 1-D row ids into a ``preprocessor`` with class labels
GIVEN_AS = ("rows", "rows+triplets", "rows+pairs", "point_triplets", "point_pairs",
            "index_triplets", "index_pairs", "row_ids")


@dataclass(frozen=True)
class Supervision:
    """The input of one ``fit``: rows, supervision and how they were given.

    Attributes
    ----------
    rows : array-like, scipy.sparse matrix or DataFrame
        The rows the supervision refers to: X as given (rows, or 1-D row
        ids into a ``preprocessor``), or the distinct points of point tuples
        / the preprocessor's rows of index tuples.  Validated rows after
        :meth:`checked`.
    kind : {"labels", "triplets", "pairs", "none"}
        Class labels ``y`` (triplets are sampled from them), triplets,
        labeled pairs, or nothing (the no-learning baselines).
    given_as : str
        One of :data:`GIVEN_AS`.
    y : array-like or None
        The class labels (``"labels"``) or the pair labels (``"pairs"``),
        as given.
    triplets, pairs : array-like or None
        The index tuples into ``rows`` as given (both may be set: ``fit``
        refuses that after validating X, as it always did).
    codes : ndarray or None
        After :meth:`checked`: each row's class code (``"labels"``, for a
        learner that samples triplets).
    target : ndarray, PairConstraints or None
        After :meth:`checked`: the checked triplets (int64 ``(m, 3)``) or
        pairs (:class:`~tripletml.pairs.PairConstraints`).
    """

    rows: Any
    kind: str
    given_as: str
    y: Any = None
    triplets: Any = None
    pairs: Any = None
    codes: np.ndarray | None = None
    target: Any = None
    checked_: bool = False

    @property
    def tuple_form(self) -> str | None:
        """``"triplets"`` / ``"pairs"`` for a fit on tuples (what
        ``tuple_form_`` records: ``predict``, ``decision_function`` and
        ``score`` then take tuples of that kind); None for labels."""
        if self.triplets is not None:
            return "triplets"
        if self.pairs is not None:
            return "pairs"
        return None

    @property
    def pair_constraints(self) -> PairConstraints | None:
        """The checked pairs (after :meth:`checked`), else None."""
        return self.target if isinstance(self.target, PairConstraints) else None

    def checked(self, est: Any, rows: Any) -> "Supervision":
        """This supervision checked against ``rows`` (the validated rows):
        labeled pairs as :class:`~tripletml.pairs.PairConstraints` (similar
        and dissimilar both present unless the learner's
        ``_pairs_need_both`` is False), triplets as int64 indices (no
        degenerate triplet), class labels as codes
        (:func:`~tripletml.triplets.check_labels`, then the learner's
        ``_label_codes``).  A learner that needs no supervision
        (``_needs_triplets`` False) gets its pairs checked (for the
        threshold) and nothing else.  ValueError naming the learner."""
        who = type(est).__name__
        n = rows.shape[0]
        target = codes = None
        if self.pairs is not None:
            if self.triplets is not None:
                raise ValueError(f"{who}: give pairs= (with y their +1/-1 labels) or "
                                 "triplets=, not both.")
            target = check_pairs(self.pairs, self.y, n, est, both=est._pairs_need_both)
        elif est._needs_triplets and self.triplets is not None:
            target = check_triplets(self.triplets, n, est, allow_degenerate=False)
        elif est._needs_triplets:
            if self.y is None:
                raise ValueError(f"{who}: fit requires y to be passed, but the "
                                 "target y is None; give class labels y (to sample triplets) "
                                 "or an explicit triplets=(m, 3) index array (or pairs=(m, 2) "
                                 "with y their +1/-1 labels).")
            if n < 3:
                raise ValueError(f"{who}: X has {n} samples; at "
                                 "least 3 are needed to form a triplet.")
            classes, codes = check_labels(self.y, n, est)
            codes = est._label_codes(classes, codes)
        return dataclasses.replace(self, rows=rows, codes=codes, target=target, checked_=True)


def read_supervision(est: Any, X: Any, y: Any = None, triplets: Any = None,
                     pairs: Any = None) -> Supervision:
    """Parse ``fit(X, y, triplets=, pairs=)`` into one :class:`Supervision`.

    Point triplets ``(n, 3, d)`` and point pairs ``(n, 2, d)`` become their
    distinct rows and index tuples into them; with a ``preprocessor``, index
    tuples ``(n, 2)`` / ``(n, 3)`` the rows it gives.  Misplaced forms get
    an error naming the right one: index tuples without ``preprocessor=``,
    index tuples passed as y, tuples as X together with ``triplets=`` /
    ``pairs=``, point triplets with y, point pairs without y.  Pairs that
    join two identical points are left out with a warning (every pair: a
    ValueError).  Values are checked later (:meth:`Supervision.checked`).
    """
    who = type(est).__name__
    if triplets is None and pairs is None:
        refuse_index_tuples(est, X, y)      # index tuples need preprocessor=
    if triplets is None and pairs is None and y is not None:
        ya = y if isinstance(y, np.ndarray) else None
        if isinstance(y, (list, tuple)):
            try:
                ya = np.asarray(y)
            except ValueError:
                ya = None
        if ya is not None and ya.ndim == 2 and ya.shape[1] in (2, 3) and ya.dtype != bool \
                and np.issubdtype(ya.dtype, np.integer):
            what = ("index triplets (query, positive, negative) go in the keyword argument, "
                    "fit(X, triplets=T)" if ya.shape[1] == 3 else
                    "index pairs go in the keyword argument, fit(X, pairs=P, y=labels) with "
                    "one +1/-1 label per pair")
            raise ValueError(f"{who}: y has shape {ya.shape} of integers: {what}; y holds one "
                             "class label per row of X.")
    ti = tuple_input(est, X, dedupe=True)
    if ti is None:
        if triplets is not None:
            return Supervision(X, "triplets", "rows+triplets", y=y, triplets=triplets,
                               pairs=pairs)
        if pairs is not None:
            return Supervision(X, "pairs", "rows+pairs", y=y, pairs=pairs)
        ids = getattr(est, "preprocessor", None) is not None and np.ndim(X) == 1
        return Supervision(X, "labels" if y is not None else "none",
                           "row_ids" if ids else "rows", y=y)
    if triplets is not None or pairs is not None:
        raise ValueError(f"{who}: X holds {ti.kind} themselves (shape "
                         f"{np.shape(X)}); give either tuples as X or rows X with "
                         "triplets= / pairs=, not both.")
    how = ("point_" if np.ndim(X) == 3 else "index_") + ti.kind
    if ti.kind == "triplets":
        if y is not None:
            raise ValueError(f"{who}: X of shape {np.shape(X)} holds triplets (query, "
                             "positive, negative), which carry their own supervision: fit(X) "
                             "without y or triplets.")
        return Supervision(ti.rows, "triplets", how, triplets=ti.index)
    if y is None:
        raise ValueError(f"{who}: X of shape {np.shape(X)} holds pairs; give their labels, "
                         "fit(pairs, y) with y +1 (similar) or -1 (dissimilar) per pair.")
    index = ti.index
    same = np.flatnonzero(index[:, 0] == index[:, 1])
    if same.size:       # two equal points: no metric tells them apart (metric-learn keeps them)
        at = ", ".join(str(int(i)) for i in same[:10])
        if same.size == index.shape[0]:
            raise ValueError(f"{who}: every pair joins two identical points; no metric can be "
                             "learned from them.")
        warnings.warn(f"{who}: {same.size} of the {index.shape[0]} pairs join two identical "
                      f"points (pairs {at}{', ...' if same.size > 10 else ''}); their distance "
                      "is 0 under every metric, so they are left out.", UserWarning,
                      stacklevel=3)
        keep = np.ones(index.shape[0], bool)
        keep[same] = False
        index = index[keep]
        y = np.asarray(y)[keep] if np.ndim(y) == 1 and np.shape(y)[0] == keep.size else y
    return Supervision(ti.rows, "pairs", how, y=y, pairs=index)


def read_partial_supervision(est: Any, X: Any, y: Any = None,
                             triplets: Any = None) -> Supervision:
    """Parse ``partial_fit(X, y, triplets=)`` of an online learner into a
    :class:`Supervision`: rows with ``triplets=`` (or an ``(m, 3)`` integer
    array passed as y, the form of tripletml 0.2), or rows with class labels
    (from which ``partial_fit`` draws one class triplet per row).  Values are
    checked by ``partial_fit`` against the rows of the call."""
    who = type(est).__name__
    if triplets is not None:
        if y is not None:
            raise ValueError(f"{who}: partial_fit takes class labels y or triplets=, not "
                             "both.")
        return Supervision(X, "triplets", "rows+triplets", triplets=triplets)
    if y is None:
        raise ValueError(f"{who}: partial_fit needs class labels y (one per row of X) or "
                         "triplets=(m, 3) row indices.")
    ya = np.asarray(y) if not sp.issparse(y) else y
    if getattr(ya, "ndim", 0) == 2 and ya.shape[1] == 3 and ya.dtype != bool \
            and np.issubdtype(ya.dtype, np.integer):
        return Supervision(X, "triplets", "rows+triplets", triplets=ya)   # positionally
    return Supervision(X, "labels", "rows", y=y)
