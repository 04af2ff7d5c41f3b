"""metric-learn's tuple inputs and the pair / triplet classifier methods.

Every triplet learner takes, besides rows ``X (n_samples, n_features)``:

* point pairs ``(n_pairs, 2, n_features)`` with labels ``y`` in
  ``{+1, -1}`` (or ``{1, 0}``) and point triplets ``(n_triplets, 3,
  n_features)`` (query, positive, negative), metric-learn's weakly
  supervised forms;
* with the ``preprocessor`` parameter set (an array of rows, or a callable
  mapping a 1-D array of indices to their rows), index tuples ``(n, 2)`` /
  ``(n, 3)`` of integers, and 1-D integer arrays standing for rows.

Inside the library a tuple input is always rows plus an index array into
them (:class:`TupleInput`); ``(n, k, d)`` arrays are never formed from index
tuples.

The classifier methods of :class:`TupleClassifierMixin` (``decision_function``,
``predict``, ``score`` on tuples, ``calibrate_threshold``,
``set_threshold``) follow metric-learn's ``_PairsClassifierMixin`` and
``_TripletsClassifierMixin``: a pair is predicted similar (+1) when its
score (the learner's ``pair_score``, higher = more similar) is at least
``threshold_``; a triplet is predicted +1 when its query is more similar to
the positive than to the negative.
"""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from tripletml.core.arrayspec import ArraySpec
from tripletml.pairs import check_pair_labels, pair_classes

__all__ = ["TupleInput", "tuple_input", "resolve_rows", "best_threshold", "THRESHOLD_STRATEGIES",
           "TupleClassifierMixin", "refuse_index_tuples", "TUPLE_ARRAYS", "available_if_fitted"]

#: ``calibrate_threshold`` strategies (metric-learn's names)
THRESHOLD_STRATEGIES = ("accuracy", "f_beta", "max_tpr", "max_tnr")
#: the fitted arrays of the tuple classifier, merged into every triplet
#: learner's ``_fitted_arrays``: ``classes_``, the two pair labels
#: ``predict`` answers in ([-1, 1] or [0, 1], as the labels fitted on)
TUPLE_ARRAYS = {"classes_": ArraySpec((2,), dtype="i", low=-1, high=2, optional=True)}
#: tuples scored per block (bounds the rows gathered at once)
_BLOCK = 8192
_KINDS = {2: "pairs", 3: "triplets"}


@dataclass(frozen=True)
class TupleInput:
    """Rows and tuples of row indices into them.

    ``kind`` is ``"pairs"`` or ``"triplets"``; ``rows`` an array (or CSR
    matrix) of shape (u, d); ``index`` int64 of shape (n, 2) or (n, 3).
    """

    kind: str
    rows: Any
    index: np.ndarray


def _who(est: Any) -> str:
    return type(est).__name__


def _as_array(X: Any):
    """``np.asarray`` of a list / tuple input, or None when it is ragged."""
    if isinstance(X, (list, tuple)):
        try:
            return np.asarray(X)
        except ValueError:
            return None
    return X


def _is_id_array(est: Any, a: Any) -> bool:
    """Whether ``a`` holds ids for ``est.preprocessor``: integers, or (for a
    callable preprocessor, as metric-learn's file-name example) strings."""
    if not isinstance(a, np.ndarray):
        return False
    if _is_int_array(a):
        return True
    pre = getattr(est, "preprocessor", None)
    return callable(pre) and not isinstance(pre, np.ndarray) and a.dtype.kind in "US"


def _is_int_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype != bool and np.issubdtype(a.dtype, np.integer)


def _integral_ids(est: Any, a: np.ndarray) -> np.ndarray:
    """With ``preprocessor=`` set, a 2-D ``(n, 2)`` / ``(n, 3)`` array is
    index tuples into its rows: a float array of integral values (what
    ``np.loadtxt`` or a pandas column gives) as int64; non-integral or
    non-finite values are a ValueError (they cannot be row indices, and
    reading them as two or three features would fit the wrong problem)."""
    if a.dtype.kind != "f" or not a.size:
        return a
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(a) & (a == np.round(a)) & (np.abs(a) < 2.0**62)
    if not ok.all():
        bad = a[~ok].ravel()[0]
        kind = _KINDS[a.shape[1]]
        raise ValueError(
            f"{_who(est)}: with preprocessor= set, a 2-D X of shape {a.shape} holds index "
            f"{kind} (row indices into the preprocessor's rows), but X holds the non-integral "
            f"value {bad!r}. Give integer indices, or leave preprocessor= unset to fit rows X "
            "with class labels y.")
    return a.astype(np.int64)


def _object_ids(who: str, a: np.ndarray) -> np.ndarray:
    """Index tuples given to a learner with a ``preprocessor`` as a boolean or
    object array: an object array of Python / NumPy integers is taken as
    int64 ids; booleans and anything else are refused (they would otherwise
    be fitted as rows of 2 or 3 features)."""
    kind = "pairs" if a.shape[1] == 2 else "triplets"
    if a.dtype == bool:
        raise TypeError(f"{who}: with a preprocessor, X holds index {kind} (n, "
                        f"{a.shape[1]}) of integer row ids; got a boolean array of shape "
                        f"{a.shape}. Give the ids as integers.")
    flat = a.ravel()
    bad = next((v for v in flat if isinstance(v, (bool, np.bool_))
                or not isinstance(v, (int, np.integer))), None)
    if bad is not None or flat.size == 0:
        raise TypeError(f"{who}: with a preprocessor, X holds index {kind} (n, "
                        f"{a.shape[1]}) of integer row ids; got an object array holding "
                        f"{type(bad).__name__} {bad!r}." if bad is not None else
                        f"{who}: X holds no index tuple (shape {a.shape}).")
    try:
        return np.asarray(a.tolist(), dtype=np.int64)
    except OverflowError:
        big = max((int(v) for v in flat), key=abs)
        raise ValueError(f"{who}: index {big} is out of range for the preprocessor's "
                         "rows.") from None


def _preprocess_indices(est: Any, idx: np.ndarray) -> Any:
    """The rows of the 1-D index array ``idx`` from ``est.preprocessor``
    (an array of rows, or a callable from indices to rows), checked."""
    who = _who(est)
    pre = getattr(est, "preprocessor", None)
    if callable(pre) and not isinstance(pre, np.ndarray) and not sp.issparse(pre):
        idx = np.ascontiguousarray(idx)
        try:
            rows = pre(idx)
        except Exception as exc:  # the user's function: report it with context
            raise ValueError(f"{who}: the preprocessor raised {type(exc).__name__} on "
                             f"{idx.size} indices: {exc}") from exc
        if not sp.issparse(rows):
            try:
                rows = np.asarray(rows)
            except (ValueError, TypeError):
                raise ValueError(f"{who}: the preprocessor returned rows of different "
                                 f"lengths for {idx.size} indices; it must return one row "
                                 "of n_features numbers per index, an array of shape "
                                 f"({idx.size}, n_features).") from None
            if rows.dtype == object:
                raise ValueError(f"{who}: the preprocessor returned an object array (rows of "
                                 "different lengths or non-numeric values) for "
                                 f"{idx.size} indices; it must return an array of numbers of "
                                 f"shape ({idx.size}, n_features).")
        if getattr(rows, "ndim", None) != 2 or rows.shape[0] != idx.size:
            raise ValueError(f"{who}: the preprocessor must return one row per index, an "
                             f"array of shape ({idx.size}, n_features); it returned shape "
                             f"{getattr(rows, 'shape', None)} for {idx.size} indices.")
        return rows
    if idx.size and idx.dtype.kind == "u" and int(idx.max()) > np.iinfo(np.int64).max:
        # before the cast to int64, which would wrap 2**64 - 1 to -1
        n = np.shape(pre)[0] if np.ndim(pre) else 0
        raise ValueError(f"{who}: index {int(idx.max())} is out of range for the "
                         f"preprocessor's {n} rows (valid: 0..{n - 1}).")
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if not sp.issparse(pre):
        pre = np.asarray(pre)
    if getattr(pre, "ndim", None) != 2:
        raise ValueError(f"{who}: preprocessor must be a 2-D array of rows (n_samples, "
                         f"n_features) or a callable; got shape {getattr(pre, 'shape', None)}.")
    n = pre.shape[0]
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
        raise ValueError(f"{who}: index {bad} is out of range for the preprocessor's {n} rows "
                         f"(valid: 0..{n - 1}).")
    return pre[idx]


def resolve_rows(est: Any, X: Any) -> Any:
    """X, or the preprocessor's rows when ``est.preprocessor`` is set and X
    is a 1-D integer array of row indices (metric-learn's supervised form)."""
    if getattr(est, "preprocessor", None) is None:
        return X
    a = _as_array(X)
    if isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == object and a.size \
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                    for v in a.tolist()):
        a = np.asarray(a.tolist(), dtype=object if max(map(abs, a.tolist())) >= 2 ** 63
                       else np.int64)
        if a.dtype == object:
            raise ValueError(f"{_who(est)}: index {max(a.tolist(), key=abs)} is out of range "
                             "for the preprocessor's rows.")
    if _is_id_array(est, a) and a.ndim == 1:
        return _preprocess_indices(est, a)
    if isinstance(a, np.ndarray) and a.ndim == 1:
        raise TypeError(f"{_who(est)}: with a preprocessor, a 1-D X holds integer row ids "
                        f"(one per sample, with class labels y); got dtype {a.dtype}. Give "
                        "the ids as integers.")
    return X


def tuple_input(est: Any, X: Any, *, dedupe: bool = False) -> TupleInput | None:
    """X as a :class:`TupleInput`, or None when X is not a tuple input.

    Point tuples ``(n, k, d)`` (k = 2 or 3) become ``n k`` rows with the
    index ``(n, k)``; with a ``preprocessor``, ``(n, k)`` arrays are index
    tuples (the preprocessor gives each distinct index's row once): integers,
    or floats of integral values (others are a ValueError, see
    :func:`_integral_ids`).  ``dedupe`` (what ``fit`` uses): the distinct
    rows by value, so tuples sharing a point share a row and the
    preprocessing statistics count each point once, whichever form the
    tuples came in.  Other 3-D shapes raise a ValueError naming the forms.
    """
    if sp.issparse(X):
        return None
    a = _as_array(X)
    if not isinstance(a, np.ndarray):
        return None
    who = _who(est)
    if a.ndim == 3:
        n, k, d = a.shape
        if k not in _KINDS:
            raise ValueError(f"{who}: a 3-D X holds tuples of points: pairs (n_pairs, 2, "
                             "n_features) or triplets (n_triplets, 3, n_features); got shape "
                             f"{a.shape}.")
        if n == 0:
            raise ValueError(f"{who}: X holds no {_KINDS[k][:-1]} (shape {a.shape}).")
        rows = a.reshape(n * k, d)
        if dedupe and a.dtype.kind in "fiu" and rows.size:
            uniq, inv = np.unique(rows, axis=0, return_inverse=True)
            return TupleInput(_KINDS[k], uniq, np.asarray(inv, np.int64).reshape(n, k))
        return TupleInput(_KINDS[k], rows, np.arange(n * k, dtype=np.int64).reshape(n, k))
    if getattr(est, "preprocessor", None) is not None and a.ndim == 2 and a.shape[1] in _KINDS:
        a = _object_ids(who, a) if a.dtype.kind in "bO" else _integral_ids(est, a)
    if getattr(est, "preprocessor", None) is not None and a.ndim == 2 and _is_id_array(est, a) \
            and a.shape[1] in _KINDS:
        if a.shape[0] == 0:
            raise ValueError(f"{who}: X holds no index tuple (shape {a.shape}).")
        uniq, inv = np.unique(a, return_inverse=True)
        rows = _preprocess_indices(est, uniq)
        inv = np.asarray(inv, np.int64).reshape(a.shape)
        if dedupe and isinstance(rows, np.ndarray) \
                and rows.dtype.kind in "fiu" and rows.size:
            rows, again = np.unique(rows, axis=0, return_inverse=True)   # as point tuples
            inv = np.asarray(again, np.int64).ravel()[inv]
        return TupleInput(_KINDS[a.shape[1]], rows, inv)
    return None


def _looks_like_pair_labels(y: Any, n: int) -> bool:
    """Whether ``y`` is one label per pair in metric-learn's conventions:
    a 1-D array of n values within {-1, 1} or within {0, 1} (or booleans)."""
    try:
        a = np.asarray(y)
    except (ValueError, TypeError):
        return False
    if a.ndim != 1 or a.shape[0] != n or a.dtype.kind not in "biuf" or n == 0:
        return False
    vals = set(np.unique(a).tolist())
    return vals <= {-1, 1} or vals <= {0, 1}


def refuse_index_tuples(est: Any, X: Any, y: Any) -> None:
    """A ValueError naming ``preprocessor=`` when ``fit(X, y)`` without a
    preprocessor looks like metric-learn's index tuples (which need one).

    The rule (no ``preprocessor``, no ``triplets=`` / ``pairs=``): X is an
    integer array (not bool, not float, not sparse, not a DataFrame) of
    shape (n, 2) with no negative entry, and y holds one pair label per row
    (values within {-1, 1} or within {0, 1}) -- index pairs with their
    labels, which would otherwise be fitted as n rows of two features with
    two classes; or X is such an (n, 3) integer array and y is None (index
    triplets).  Learners that need no supervision (Euclidean, DotProduct)
    always take rows.  Genuine rows of two integer features with binary class
    labels are fitted after ``X.astype(float)`` (float X is always rows).
    """
    if getattr(est, "preprocessor", None) is not None or sp.issparse(X) \
            or not getattr(est, "_needs_triplets", True):    # baselines: rows only
        return
    a = _as_array(X)
    if not _is_int_array(a) or a.ndim != 2 or a.shape[1] not in _KINDS or a.shape[0] == 0:
        return
    if int(a.min()) < 0:
        return
    who = _who(est)
    if a.shape[1] == 2 and y is not None and _looks_like_pair_labels(y, a.shape[0]):
        raise ValueError(
            f"{who}: X is an integer array of shape {a.shape} and y holds pair labels: this "
            "looks like index pairs (i, j) into rows, which need the rows themselves. Give "
            f"them with preprocessor=, {who}(preprocessor=rows).fit(pairs, y) (metric-learn's "
            f"form), or fit(rows, pairs=pairs, y=y). If X really holds two integer features "
            "per row and y binary class labels, pass X.astype(float).")
    if a.shape[1] == 3 and y is None:
        raise ValueError(
            f"{who}: X is an integer array of shape {a.shape} without y: this looks like index "
            "triplets (query, positive, negative) into rows, which need the rows themselves. "
            f"Give them with preprocessor=, {who}(preprocessor=rows).fit(triplets), or "
            "fit(rows, triplets=triplets).")


def best_threshold(scores: np.ndarray, y: np.ndarray, strategy: str = "accuracy", *,
                   min_rate: float | None = None, beta: float = 1.0) -> float:
    """The threshold t on ``scores`` (predict +1 iff score >= t) that is best
    for ``strategy`` on the labeled pairs (y in {+1, -1}, both present).

    ``"accuracy"``: the largest accuracy; ``"f_beta"``: the largest F-beta
    score of the similar class; ``"max_tpr"``: the largest true positive rate
    among thresholds whose true negative rate is at least ``min_rate``;
    ``"max_tnr"``: the largest true negative rate among those whose true
    positive rate is at least ``min_rate``.  Among equally good thresholds the
    highest wins.  The threshold returned lies halfway between the chosen
    cut's lowest accepted score and the next lower score, so that scores on
    new pairs near the cut are split evenly; below the lowest score it is
    that score, above the highest the next float above it.
    """
    s = np.asarray(scores, dtype=float)
    pos = np.asarray(y) > 0
    order = np.argsort(-s, kind="stable")
    s, pos = s[order], pos[order]
    n_pos = int(pos.sum())
    n_neg = s.size - n_pos
    # cuts after each run of equal scores: accept the first j pairs (j = 0..n)
    last = np.flatnonzero(np.r_[s[1:] != s[:-1], True])   # last index of each distinct score
    j = np.r_[0, last + 1]
    tp = np.r_[0, np.cumsum(pos)][j].astype(float)
    fp = j - tp
    tn = n_neg - fp
    fn = n_pos - tp
    if strategy == "accuracy":
        obj = (tp + tn) / s.size
    elif strategy == "f_beta":
        b2 = float(beta) ** 2
        den = (1 + b2) * tp + b2 * fn + fp
        obj = np.where(den > 0, (1 + b2) * tp / np.where(den > 0, den, 1.0), 0.0)
    elif strategy in ("max_tpr", "max_tnr"):
        tpr, tnr = tp / n_pos, tn / n_neg
        ok = tnr >= min_rate if strategy == "max_tpr" else tpr >= min_rate
        obj = np.where(ok, tpr if strategy == "max_tpr" else tnr, -np.inf)
    else:  # pragma: no cover - checked by the caller
        raise ValueError(strategy)
    c = int(np.argmax(obj))
    if c == 0:
        return float(np.nextafter(s[0], np.inf))
    lo = s[j[c] - 1]                         # the lowest accepted score
    if j[c] == s.size:
        return float(lo)
    return float(lo + 0.5 * (s[j[c]] - lo)) if np.isfinite(s[j[c]]) else float(lo)


class _FittedMethod:
    """The descriptor of :func:`available_if_fitted`."""

    def __init__(self, fn, check):
        self.fn, self.check = fn, check
        functools.update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        # sklearn's NotFittedError is an AttributeError too: hasattr() is
        # False before fit, and a call says "not fitted"
        check_is_fitted(obj)
        if not self.check(obj):
            raise AttributeError(f"This {type(obj).__name__!r} has no attribute "
                                 f"{self.fn.__name__!r}")
        return types.MethodType(self.fn, obj)


def raise_fitted_method_error(obj, name: str) -> None:
    """Re-raise the error of an :func:`available_if_fitted` method ``name``
    of ``obj`` (NotFittedError before fit), for a class whose
    ``__getattr__`` would replace it by a plain AttributeError; return when
    ``name`` is not such a method."""
    for klass in type(obj).__mro__:
        if name in vars(klass):
            if isinstance(vars(klass)[name], _FittedMethod):
                vars(klass)[name].__get__(obj, type(obj))
            return


def available_if_fitted(check):
    """scikit-learn's ``available_if`` for a method of a fitted model: before
    fit, getting the method raises ``NotFittedError`` (so ``model.predict(X)``
    says the model is not fitted, where ``available_if`` says it has no
    ``predict``; ``hasattr`` is False either way); once fitted the method
    exists when ``check(model)`` is true."""
    return lambda fn: _FittedMethod(fn, check)


class TupleClassifierMixin:
    """Pair verification and triplet classification on tuple inputs.

    Available after a fit on tuples (pairs or triplets: ``tuple_form_`` is
    set) or once a threshold is set (:meth:`calibrate_threshold`,
    :meth:`set_threshold`); a model fitted on labels has no ``predict``, as
    scikit-learn expects of a transformer.
    """

    def _tuple_ready(self) -> bool:
        return "threshold_" in vars(self) or "tuple_form_" in vars(self)

    def _pair_classes(self) -> np.ndarray:
        """The two pair labels ``predict`` answers in: ``classes_`` (set
        from the labels given to ``fit`` / ``calibrate_threshold``), else
        [-1, 1]."""
        c = vars(self).get("classes_")
        return np.array([-1, 1]) if c is None else np.asarray(c)

    def _tuples(self, X, what: str) -> TupleInput:
        ti = tuple_input(self, X)
        if ti is None:
            shape = getattr(_as_array(X), "shape", None)
            raise TypeError(f"{_who(self)}: a triplet learner has no per-sample {what}; "
                            f"{what} takes pairs of points (n_pairs, 2, n_features) or "
                            "triplets of points (n_triplets, 3, n_features) (with a "
                            f"preprocessor: index tuples (n, 2) / (n, 3)), got shape {shape}. "
                            "Score rows with triplet_score(X, triplets), pair_score or "
                            "similarity.")
        return ti

    def _tuple_scores(self, ti: TupleInput) -> np.ndarray:
        """``pair_score`` of each pair, or the margin of each triplet."""
        if ti.kind == "triplets":
            return self.triplet_score(ti.rows, ti.index)
        n = ti.index.shape[0]
        out = np.empty(n)
        for s in range(0, n, _BLOCK):
            c = ti.index[s:s + _BLOCK]
            out[s:s + _BLOCK] = self.pair_score(ti.rows[c[:, 0]], ti.rows[c[:, 1]])
        return out

    def _tuple_decision(self, X) -> np.ndarray:
        check_is_fitted(self)
        return self._tuple_scores(self._tuples(X, "decision_function"))

    def _tuple_predict(self, X) -> np.ndarray:
        check_is_fitted(self)
        ti = self._tuples(X, "predict")
        s = self._tuple_scores(ti)
        if ti.kind == "triplets":
            return np.where(s > 0, 1, -1)
        if "threshold_" not in vars(self):
            raise NotFittedError(f"{_who(self)}: predict on pairs needs a threshold: call "
                                 "calibrate_threshold(pairs, y) or set_threshold(t) first.")
        neg, pos = self._pair_classes()
        return np.where(s >= self.threshold_, pos, neg)

    def _tuple_score(self, X, y=None) -> float:
        """ROC AUC of the pairs' scores against y; the fraction of triplets
        predicted +1 (the query nearer the positive)."""
        from sklearn.metrics import roc_auc_score

        check_is_fitted(self)
        ti = self._tuples(X, "score")
        s = self._tuple_scores(ti)
        if ti.kind == "triplets":
            return float(np.mean(s > 0))
        lab = check_pair_labels(y, s.size, self)
        if np.unique(lab).size < 2:
            raise ValueError(f"{_who(self)}: score on pairs is the ROC AUC, which needs both "
                             "similar (+1) and dissimilar (-1) pairs in y.")
        return float(roc_auc_score(lab, s))

    def calibrate_threshold(self, X, y, *, strategy: str = "accuracy",
                            min_rate: float | None = None, beta: float = 1.0):
        """Set ``threshold_`` from labeled pairs (metric-learn's method).

        Parameters
        ----------
        X : array of shape (n_pairs, 2, n_features), or (n_pairs, 2) indices with a preprocessor
            Pairs of points.
        y : array-like of shape (n_pairs,)
            +1 similar, -1 dissimilar (or 1 / 0); both must occur.
        strategy : {"accuracy", "f_beta", "max_tpr", "max_tnr"}, default="accuracy"
            What the threshold maximizes on these pairs (:func:`best_threshold`).
        min_rate : float in [0, 1], optional
            Required with ``"max_tpr"`` (the smallest true negative rate
            allowed) and ``"max_tnr"`` (the smallest true positive rate).
        beta : float > 0, default=1
            The F-beta weight of ``"f_beta"``.

        Returns
        -------
        self
        """
        who = _who(self)
        if strategy not in THRESHOLD_STRATEGIES:
            raise ValueError(f"{who}: strategy={strategy!r} must be one of "
                             f"{', '.join(THRESHOLD_STRATEGIES)}.")
        if strategy in ("max_tpr", "max_tnr"):
            if isinstance(min_rate, bool) or not isinstance(min_rate, Real) \
                    or not 0.0 <= float(min_rate) <= 1.0:
                raise ValueError(f"{who}: strategy={strategy!r} needs min_rate, a number in "
                                 f"[0, 1]; got {min_rate!r}.")
        if strategy == "f_beta" and (isinstance(beta, bool) or not isinstance(beta, Real)
                                     or not float(beta) > 0 or not np.isfinite(float(beta))):
            raise ValueError(f"{who}: beta={beta!r} must be a positive number.")
        check_is_fitted(self)
        ti = self._tuples(X, "calibrate_threshold")
        if ti.kind != "pairs":
            raise ValueError(f"{who}: calibrate_threshold takes pairs (n_pairs, 2, n_features); "
                             "triplets need no threshold.")
        s = self._tuple_scores(ti)
        lab = check_pair_labels(y, s.size, self)
        if np.unique(lab).size < 2:
            raise ValueError(f"{who}: calibrate_threshold needs both similar (+1) and "
                             "dissimilar (-1) pairs in y.")
        self.threshold_ = best_threshold(s, lab, strategy, min_rate=min_rate, beta=beta)
        self.classes_ = pair_classes(y)
        return self

    def set_threshold(self, threshold: float):
        """Set ``threshold_`` by hand: pairs scoring at least it are similar.

        Returns
        -------
        self
        """
        if isinstance(threshold, bool) or not isinstance(threshold, Real) \
                or not np.isfinite(float(threshold)):
            raise ValueError(f"{_who(self)}: threshold={threshold!r} must be a finite number.")
        check_is_fitted(self)
        self.threshold_ = float(threshold)
        return self
