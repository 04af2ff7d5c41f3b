"""``AutoSimilarity`` on comparisons: triplets or pairs, validated on unseen items.

What people give is often not class labels but answers about items with
features: "a is closer to b than to c" (triplets) or "a and b are alike / not
alike" (pairs).  The promise to such a user is a similarity of the features
that is never worse than the plain one (the cosine of features from a
network, the Euclidean distance of tabular ones) *on items the learner never
saw*, which is how it will be used.  So the race here:

1. **Parses the supervision once** (:func:`parse_comparisons`): rows X with
   ``triplets=`` (index triplets into X), point triplets ``(n, 3, d)``,
   ``pairs=`` with one label per pair, point pairs ``(n, 2, d)`` with labels,
   or index tuples with ``preprocessor=``, into one :class:`Comparisons`
   (the rows, the index tuples, the pair labels, the form it came in).
2. **Splits the items** (:func:`item_splits`), not the answers: ``cv``
   folds over the items (None: :data:`DEFAULT_FOLDS`; whole ``groups=``
   together when given, ``GroupKFold``; or any scikit-learn splitter,
   applied to the items).  A candidate is fitted on the answers whose items
   are all fit items, and scored on the answers whose items are all held-out
   items (the *unseen-items* protocol of ``bench/bench_zappos_unseen.py``):
   held-out triplet accuracy, or for pairs the ROC AUC of ``pair_score``.
   With ``holdout="answers"`` (:func:`answer_splits`) the folds are over the
   answers instead, every item on both sides: the *seen-items* protocol,
   for a user whose test answers are about the items of the training ones.
3. **Races the candidates over the splits by successive halving**: every
   candidate on the first split, the better half of the learned ones on
   the next, and so on (each fit checked against the time budget and the
   dense-work resources as in the label race, so that under a tight budget
   or on a busy machine every candidate is seen once before any is seen
   twice), keeps the best mean validation score over the splits the
   survivors completed, ties going to the earlier candidate, and refits
   the winner on all answers.  The no-learning candidates come first, run
   on every split and are always scored: Euclidean on the raw rows, the
   **cosine** (``Euclidean(preprocessing="normalize")``) and Euclidean on
   standardized columns.  So the winner is never below the best of them
   on the validation items, and with triplets (``selection="one_se"``, the
   default) a learned winner must beat the best of them by more than one
   standard error of the paired difference over the validation answers
   (:mod:`tripletml.auto.selection`), else that baseline wins.

Learned candidates start at those baselines and move away only as far as
the validation items reward: OASIS from ``W = I`` on normalized rows (the
cosine) or on the sphere lift (Euclidean), with its step cap ``C`` given
*relative to the data's own scale* (:func:`relative_step_cap`: a fraction
``kappa`` of the typical full passive-aggressive step, so that the same
grid binds on l2-normalized, raw and standardized rows), and KISSME's
closed form.  Crowd answers are noisy: a small ``kappa`` follows each
answer only a little, and the held-out items decide how much.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Optional

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold, KFold

from tripletml.auto.candidates import _expand_candidates
from tripletml.auto.resources import check_resources, sparse_safe, warn_sparse_safe
from tripletml.auto.selection import within_one_se
from tripletml.engine.driver import training_deadline
from tripletml.core.base import TripletLearner, _tuple_forms
from tripletml.core.preprocessing import Preprocessor
from tripletml.core.validation import check_triplets, check_X
from tripletml.metrics import triplet_accuracy
from tripletml.pairs import check_pairs

__all__ = ["Comparisons", "parse_comparisons", "item_splits", "answer_splits", "relative_step_cap",
           "relative_alpha", "typical_step_scale",
           "DEFAULT_COMPARISON_CANDIDATES", "COMPARISON_SCORINGS"]

_WHO = "AutoSimilarity"

#: ``cv=None``: this many folds over the items (each item validated once).
#: Answers are kept only within one side of a split, so a split holding out
#: a share v of the items validates on about v^3 of the answers: one split
#: is too few for noisy answers, three folds use every item once.
DEFAULT_FOLDS = 3

#: the validation scores of the comparison race, by supervision
COMPARISON_SCORINGS = {"triplets": "triplet_accuracy", "pairs": "roc_auc"}

#: The default race on comparisons.  ``kappa`` (OASIS): the step cap ``C`` as
#: a fraction of the typical full step on the fit items
#: (:func:`relative_step_cap`), from barely moving (1 % of a typical full
#: step) to a cap a hundred times it (plain passive-aggressive steps), on the
#: normalized rows (the cosine start) and, coarser, on the sphere lift (the
#: Euclidean start, for tabular features).  SDCA (Wu et al. 2015, dual
#: coordinate ascent) on the same two geometries with its regularization
#: ``alpha`` relative to the data's scale (``rho``, :func:`relative_alpha`):
#: from 1e-6 of the typical ``||X_i||^2`` (barely regularized: the dual
#: variables saturate and ``M`` is near the average of the answers' outer
#: products ``q (p - n)^T``, eq. 7) to 1e-2 (``M`` held close to 0), from
#: Wu et al.'s start ``M = 0`` (``start="zero"``: the grid was measured
#: there; SDCA's own default starts at the identity on answers, and raced
#: beside this grid it doubled the race's time on Zappos for a lower margin).
#: LinearTSTE (t-STE's likelihood, van der Maaten & Weinberger 2012, on a
#: linear map of the features) with its pull towards the PCA start from a
#: tenth to ten times the answers' weight (the penalty is relative to the
#: rows' mean squared distance, so the grid is scale-free).
DEFAULT_COMPARISON_CANDIDATES: tuple[dict, ...] = (
    {"learner": "Euclidean", "grid": {"preprocessing": [None, "normalize", "standardize"]}},
    {"learner": "OASIS", "grid": {"preprocessing": ["normalize"], "max_iter": [1]},
     "kappa": [1e-2, 1e-1, 1.0, 10.0, 100.0]},
    {"learner": "OASIS", "grid": {"preprocessing": ["sphere"], "max_iter": [1]},
     "kappa": [1e-1, 10.0]},
    {"learner": "SDCA", "grid": {"preprocessing": ["normalize", "sphere"], "start": ["zero"]},
     "rho": [1e-6, 1e-4, 1e-2]},
    {"learner": "KISSME", "grid": {"preprocessing": ["normalize", "standardize"],
                                   "shrinkage": [0.1]}},
    {"learner": "LinearTSTE", "grid": {"preprocessing": ["normalize", "standardize"],
                                       "regularization": [0.1, 1.0, 10.0]}},
)


@dataclass
class Comparisons:
    """The supervision of a fit on comparisons, parsed once.

    ``kind`` is ``"triplets"`` or ``"pairs"``; ``X`` the item rows (dense
    float array or CSR matrix); ``index`` int64 ``(m, 3)`` triplets
    ``(query, closer, farther)`` or ``(m, 2)`` pairs of row indices;
    ``labels`` the pairs' labels as +1 / -1 (None for triplets); ``form``
    how they were given (``"triplets"``, ``"pairs"``).
    """

    kind: str
    X: Any
    index: np.ndarray
    labels: Optional[np.ndarray]
    form: str

    @property
    def n_items(self) -> int:
        return int(self.X.shape[0])

    def among(self, items: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """The tuples whose items are all in ``items`` (sorted row ids),
        re-indexed into ``X[items]``, and their labels."""
        where = np.full(self.n_items, -1, dtype=np.int64)
        where[items] = np.arange(items.size)
        local = where[self.index]
        keep = (local >= 0).all(axis=1)
        return local[keep], None if self.labels is None else self.labels[keep]


@dataclass
class _Part:
    """One side of a validation split: the rows ``items`` a fit sees and,
    with ``holdout="answers"``, the ids of its ``answers`` (None: the
    answers whose items are all among ``items``)."""

    items: np.ndarray
    answers: Optional[np.ndarray] = None

    def rows(self, comp: Comparisons):
        """The rows of X this side sees (X itself when it sees them all)."""
        return comp.X if self.items.size == comp.n_items else comp.X[self.items]

    def tuples(self, comp: Comparisons) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Its answers, indexed into :meth:`rows`, and their labels."""
        if self.answers is None:
            return comp.among(self.items)
        lab = None if comp.labels is None else comp.labels[self.answers]
        return comp.index[self.answers], lab


def parse_comparisons(est: Any, X, y, triplets, pairs) -> Optional[Comparisons]:
    """Every comparison form ``fit`` accepts as one :class:`Comparisons`, or
    None when the supervision is class labels (rows X with y).

    Raises
    ------
    ValueError
        Indices outside X, degenerate triplets (an item compared with
        itself), pairs without both labels, y given with triplets.
    """
    X, y, triplets, pairs, form = _tuple_forms(est, X, y, triplets, pairs)
    if form is None:
        return None
    X = check_X(X, _WHO, accept_sparse=True)
    if sp.issparse(X):
        X = X.tocsr()
    n = X.shape[0]
    if triplets is not None:
        if pairs is not None:
            raise ValueError(f"{_WHO}: give triplets= or pairs=, not both.")
        if y is not None:
            raise ValueError(f"{_WHO}: triplets carry their own supervision (the query is "
                             "closer to the second item than to the third); fit(X, "
                             "triplets=T) takes no y.")
        T = check_triplets(triplets, n, _WHO, allow_degenerate=False)
        return Comparisons("triplets", X, T, None, form)
    pc = check_pairs(pairs, y, n, est)
    labels = np.asarray(pc.labels)
    if not ((labels > 0).any() and (labels < 0).any()):
        raise ValueError(f"{_WHO}: the pairs are all labeled {'similar' if labels[0] > 0 else 'dissimilar'}; "
                         "validation by ROC AUC (and learning) needs both similar and "
                         "dissimilar pairs.")
    return Comparisons("pairs", X, np.ascontiguousarray(pc.pairs, dtype=np.int64),
                       np.where(labels > 0, 1, -1).astype(np.int8), form)


def _check_groups(groups, n: int) -> Optional[np.ndarray]:
    if groups is None:
        return None
    if sp.issparse(groups):
        raise TypeError(f"{_WHO}: groups must be a 1-D array with one group per row of X, "
                        "got a sparse matrix.")
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise ValueError(f"{_WHO}: groups must hold one group per row (item) of X: {n} "
                         f"values; got shape {g.shape}.")
    if g.dtype.kind == "f" and not np.isfinite(g).all():
        raise ValueError(f"{_WHO}: groups holds NaN or infinite values.")
    if np.unique(g).size < 2:
        raise ValueError(f"{_WHO}: groups has a single group; holding out items needs at "
                         "least 2.")
    return g


def _splitter(est: Any, groups: Optional[np.ndarray], seed: int):
    cv = DEFAULT_FOLDS if est.cv is None else est.cv
    if isinstance(cv, Integral) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"{_WHO}: cv={cv} folds; at least 2 are needed.")
        return GroupKFold(n_splits=int(cv)) if groups is not None else \
            KFold(n_splits=int(cv), shuffle=True, random_state=seed)
    if hasattr(cv, "split"):
        return cv
    raise TypeError(f"{_WHO}: cv must be None, a number of folds or a scikit-learn splitter "
                    f"(an object with split(X, y, groups)); got {type(cv).__name__}.")


def item_splits(est: Any, comp: Comparisons, groups, seed: int
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(fit items, validation items)`` per split, each a sorted int64
    array of row ids; every split leaves answers to fit and to validate on.

    Raises
    ------
    ValueError
        ``groups`` of the wrong length, a splitter with fewer than 2 items,
        or a split that leaves no answer among its fit or its validation
        items (the message names the split and what to change).
    """
    n = comp.n_items
    g = _check_groups(groups, n)
    try:
        raw = list(_splitter(est, g, seed).split(np.zeros((n, 1)), None, g))
    except ValueError as exc:
        raise ValueError(f"{_WHO}: the item splitter failed on {n} items: {exc}") from None
    if not raw:
        raise ValueError(f"{_WHO}: the splitter gave no split.")
    out = []
    for s, (fi, vi) in enumerate(raw):
        fi, vi = np.unique(np.asarray(fi, np.int64)), np.unique(np.asarray(vi, np.int64))
        if np.intersect1d(fi, vi).size:
            raise ValueError(f"{_WHO}: split {s} puts items both in fit and validation; the "
                             "race holds out items, so the splitter must not share them.")
        for items, what in ((fi, "fit"), (vi, "validation")):
            t, lab = comp.among(items)
            if t.shape[0] == 0:
                raise ValueError(
                    f"{_WHO}: split {s} leaves no {comp.kind[:-1]} whose items are all "
                    f"among its {items.size} {what} items (of {n}); answers are kept only "
                    "within one side of a split. Hold out more items (validation_size), "
                    "use fewer or larger groups, or give more answers.")
            if lab is not None and what == "validation" and np.unique(lab).size < 2:
                raise ValueError(f"{_WHO}: split {s}'s validation pairs are all of one "
                                 "label; the ROC AUC needs both. Hold out more items.")
        out.append((fi, vi))
    return out


def answer_splits(est: Any, comp: Comparisons, groups, seed: int
                  ) -> list[tuple[_Part, _Part]]:
    """``holdout="answers"``: ``cv`` applied to the answers (None:
    :data:`DEFAULT_FOLDS` shuffled folds); each side sees every item and
    its own answers.

    Raises
    ------
    ValueError
        ``groups=`` (it groups items, which this holdout does not split), a
        splitter that fails on the answers or leaves a side without
        answers, validation pairs of one label.
    """
    if groups is not None:
        raise ValueError(f"{_WHO}: groups= holds out whole groups of items; with "
                         "holdout='answers' the items are shared by fit and validation. "
                         "Use holdout='items', or a splitter of the answers through cv=.")
    m, everything = comp.index.shape[0], np.arange(comp.n_items)
    try:
        raw = list(_splitter(est, None, seed).split(np.zeros((m, 1))))
    except ValueError as exc:
        raise ValueError(f"{_WHO}: the answer splitter failed on {m} answers: {exc}") from None
    out = []
    for s, (fa, va) in enumerate(raw):
        fa, va = np.unique(np.asarray(fa, np.int64)), np.unique(np.asarray(va, np.int64))
        if fa.size == 0 or va.size == 0:
            raise ValueError(f"{_WHO}: split {s} of the answers leaves a side with no "
                             "answer; give more answers or fewer folds.")
        if comp.labels is not None and np.unique(comp.labels[va]).size < 2:
            raise ValueError(f"{_WHO}: split {s}'s validation pairs are all of one label; "
                             "the ROC AUC needs both. Use fewer folds.")
        out.append((_Part(everything, fa), _Part(everything, va)))
    if not out:
        raise ValueError(f"{_WHO}: the splitter gave no split.")
    return out


def typical_step_scale(Z, seed: int, sample: int = 2000) -> float:
    """The typical ``||V||_F^2 = ||q||^2 ||p - n||^2`` of an answer on the
    preprocessed rows ``Z`` (dense or sparse): the median of ``||z_i||^2``
    times the median of ``||z_i - z_j||^2`` over random pairs (1 when the
    rows give no scale).  ``c Z`` gives ``c^4`` times it."""
    n = Z.shape[0]
    if n == 0:
        raise ValueError(f"{_WHO}: no rows to take the data's scale from (empty X).")
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, n, size=sample), rng.integers(0, n, size=sample)
    keep = i != j
    if sp.issparse(Z):              # sparse rows stay sparse: O(nnz) memory
        Z = sp.csr_matrix(Z, dtype=np.float64)
        sq = np.asarray(Z.multiply(Z).sum(axis=1), dtype=np.float64).ravel()
        D = Z[i[keep]] - Z[j[keep]]
        diff = np.asarray(D.multiply(D).sum(axis=1), dtype=np.float64).ravel()
    else:
        Zd = np.asarray(Z, dtype=np.float64)
        sq = np.einsum("ij,ij->i", Zd, Zd)
        D = Zd[i[keep]] - Zd[j[keep]]
        diff = np.einsum("ij,ij->i", D, D)
    if not diff.size:
        diff = np.ones(1)
    s = float(np.median(sq)) * float(np.median(diff))
    return s if np.isfinite(s) and s > 0 else 1.0


def relative_step_cap(kappa: float, Z, seed: int, sample: int = 2000) -> float:
    """OASIS's cap ``C`` as a fraction ``kappa`` of the typical full step.

    A passive-aggressive step is ``tau = min(C, loss / ||V||_F^2)`` with
    ``V = q (p - n)^T`` (Chechik et al. 2010, eq. 6); a loss of the order of
    the margin 1 asks for a step of about ``1 / ||V||^2``.  So ``C = kappa /
    s`` with ``s`` :func:`typical_step_scale`: ``kappa = 1`` follows a
    typical answer fully, ``kappa = 0.01`` goes 1 % of the way.  ``c Z``
    gives ``C / c^4`` and the same steps ``tau V``: the cap is scale-free.
    """
    return float(kappa) / typical_step_scale(Z, seed, sample)


def relative_alpha(rho: float, Z, seed: int, sample: int = 2000) -> float:
    """SDCA's regularization ``lambda`` (its ``alpha``) relative to the
    data's scale: ``alpha = rho s`` with ``s`` :func:`typical_step_scale`.

    In P(M) = (1/n) sum_i [1 - <M, X_i>]_+^2 + (lambda/2)||M||_F^2 (Wu et
    al. 2015, eq. 3-4), ``c Z`` scales each ``X_i`` by ``c^2``; the
    minimiser becomes ``M / c^2`` (the same margins) only if ``lambda``
    grows by ``c^4``, as ``s`` does.  So ``rho`` means the same on
    l2-normalized, raw and standardized rows, where a fixed ``alpha`` does
    not bind at all when the rows are long (e.g. thousands of features).
    """
    return float(rho) * typical_step_scale(Z, seed, sample)


#: the relative parameters a comparison spec may carry: key -> (the
#: learner's parameter it sets, the rule)
RELATIVE = {"kappa": ("C", relative_step_cap), "rho": ("alpha", relative_alpha)}


class _Racer:
    """One candidate of the comparison race: a learner template, its fixed
    parameters and, optionally, one relative parameter (``kappa``: OASIS's
    step cap, ``rho``: SDCA's regularization) set from the fit rows' scale."""

    def __init__(self, cand, rel: Optional[tuple[str, float]] = None):
        self.cand = cand
        self.rel = rel

    @property
    def name(self) -> str:
        return self.cand.name

    def params(self) -> dict:
        p = dict(self.cand.params)
        if self.rel is not None:
            p[self.rel[0]] = self.rel[1]
        return p

    def make(self, X_fit, seed: int):
        est = self.cand.make(None, seed)
        if self.rel is not None:
            key, value = self.rel
            target, rule = RELATIVE[key]
            pre = Preprocessor(est.get_params().get("preprocessing"), auto="sphere",
                               owner=self.name).fit(X_fit)
            est.set_params(**{target: rule(value, pre.transform(X_fit), seed)})
        return est


def expand_racers(est: Any) -> list[_Racer]:
    """The racers of ``est.candidates`` (None:
    :data:`DEFAULT_COMPARISON_CANDIDATES`), expanded by the estimator's own
    candidate rules (:func:`tripletml.auto.candidates._expand_candidates`);
    a spec may carry one relative parameter (:data:`RELATIVE`): ``"kappa"``
    (a list of relative step caps, for a learner with a ``C``) or ``"rho"``
    (relative regularizations, for a learner with an ``alpha``)."""
    candidates = est.candidates
    specs = DEFAULT_COMPARISON_CANDIDATES if candidates is None else candidates
    out: list[_Racer] = []
    for i, spec in enumerate(specs if not isinstance(specs, dict) else [specs]):
        key, values = None, None
        if isinstance(spec, dict) and set(spec) & set(RELATIVE):
            spec = dict(spec)
            keys = sorted(set(spec) & set(RELATIVE))
            if len(keys) > 1:
                raise ValueError(f"{_WHO}: candidates[{i}] has {keys}; give one relative "
                                 "parameter per spec.")
            key = keys[0]
            values = list(spec.pop(key))
            if not values or not all(isinstance(k, (int, float)) and not isinstance(k, bool)
                                     and k > 0 and math.isfinite(k) for k in values):
                raise ValueError(f"{_WHO}: candidates[{i}]['{key}'] must be a non-empty list "
                                 "of positive numbers.")
        for cand in _expand_candidates([spec]):
            if key is None:
                out.append(_Racer(cand))
                continue
            target = RELATIVE[key][0]
            if target not in cand.template.get_params():
                what = "the step cap C" if key == "kappa" else "the regularization alpha"
                raise ValueError(f"{_WHO}: candidates[{i}]: '{key}' sets {what}, "
                                 f"which {cand.name} does not have.")
            out.extend(_Racer(cand, (key, v)) for v in values)
    return out


def score_split(model, comp: Comparisons, part: "_Part") -> tuple[float, Optional[np.ndarray]]:
    """The validation score of a fitted model on the answers of ``part``:
    triplet accuracy (:func:`tripletml.metrics.triplet_accuracy`; a tie
    counts as wrong) or the pairs' ROC AUC; and, for triplets, whether each
    answer is ranked right (None for pairs: an AUC has no term per answer)."""
    t, lab = part.tuples(comp)
    Xv = part.rows(comp)
    if comp.kind == "triplets":
        right = triplet_accuracy(model, Xv, t, per_triplet=True)
        return float(np.mean(right)), right      # triplet_accuracy's own mean
    return float(roc_auc_score(lab, model.pair_score(Xv[t[:, 0]], Xv[t[:, 1]]))), None


def _query_items(comp: Comparisons, part: "_Part") -> np.ndarray:
    """The row id (in ``comp.X``) of each validation answer's query item:
    the answers about one query are one cluster of the one-standard-error
    rule (:mod:`tripletml.auto.selection`)."""
    t, _ = part.tuples(comp)
    return part.items[t[:, 0]] if part.answers is None else t[:, 0]


def fit_on(model, comp: Comparisons, part: Optional["_Part"] = None):
    """Fit ``model`` on the answers of ``part`` (None: all)."""
    if part is None:
        X, t, lab = comp.X, comp.index, comp.labels
    else:
        t, lab = part.tuples(comp)
        X = part.rows(comp)
    if comp.kind == "triplets":
        return model.fit(X, triplets=t)
    return model.fit(X, lab, pairs=t)


def _has_span_route(template) -> bool:
    """Whether a learner fits in the span of its rows when they are fewer
    than the features (``_span_lift_spec`` overridden)."""
    own = getattr(type(template), "_span_lift_spec", None)
    return own is not None and own is not getattr(TripletLearner, "_span_lift_spec", None)


def _work_proxy(template, X, part: "_Part"):
    """What the dense-work estimate (:func:`tripletml.auto.resources.check_resources`) should
    see: the fit rows, narrowed to their span's width for a learner with the
    span route (its d x d work happens at that width; the lift is one
    ``O(d^2 r)`` product)."""
    n, d = part.items.size, X.shape[1]
    if _has_span_route(template) and n < d:
        return np.zeros((n, n))
    return X[part.items]


def _with_answers(cand, comp: Comparisons, part: "_Part"):
    """``cand`` with its ``n_triplets`` set to the answers it will get, so
    that the estimate counts the updates the fit makes (the answers among
    the fit items, not the learner's default draw)."""
    if "n_triplets" not in cand.template.get_params():
        return cand
    m = int(part.tuples(comp)[0].shape[0])
    out = copy.copy(cand)
    out.params = {**cand.params, "n_triplets": max(1, m)}
    return out


_FAILURES = (FloatingPointError, ArithmeticError, ValueError, np.linalg.LinAlgError,
             MemoryError)


def _new_row(c: int, racer) -> dict:
    return {"candidate": c, "learner": racer.name, "params": racer.params(),
            "preprocessing": str(racer.cand.prep), "scores": [], "items": [], "fit_time": [],
            "error": "", "stopped": "", "free": False, "secs": 0.0}


def _fit_score(racer, comp: Comparisons, split: tuple, seed: int, row: dict,
               deadline: float | None = None) -> bool:
    """Fit ``racer`` on one split's fit items, append its validation score
    (or its error) to ``row``; returns whether it scored.  The fit runs
    under ``deadline`` (:func:`tripletml.engine.training_deadline`); one
    that ends past it is not scored (``stopped`` says so)."""
    fi, vi = split
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), training_deadline(deadline):
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = fit_on(racer.make(fi.rows(comp), seed), comp, fi)
        if deadline is not None and time.time() > deadline:
            row["stopped"] = "max_time: the fit ended after time_budget; not scored"
            return False
        score, right = score_split(model, comp, vi)
        row["scores"].append(score)
        row["items"].append(right)
        return True
    except _FAILURES as exc:
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        row["stopped"] = "error"
        return False
    finally:
        row["fit_time"].append(time.perf_counter() - t0)


def _halve(rows: list[dict], alive: list[int], s: int) -> list[int]:
    """Successive halving after split ``s``: the free racers (no-learning
    baselines) always go on; of the learned racers, the better half (by mean
    score over splits ``0..s``, ties to the earlier racer) go on."""
    learned = [c for c in alive if not rows[c]["free"]]
    keep = sorted(learned, key=lambda c: (-float(np.mean(rows[c]["scores"])), c))
    keep = set(keep[:max(1, math.ceil(len(keep) / 2))])
    for c in learned:
        if c not in keep:
            rows[c]["stopped"] = f"halved: below the better half after split {s}"
    return [c for c in alive if rows[c]["free"] or c in keep]


def race(est: Any, comp: Comparisons, splits: list, t_start: float, seed0: int) -> dict:
    """Race the racers over the splits by successive halving: every racer
    on split 0, the better half of the learned ones on split 1, and so on
    (the no-learning baselines on every split).  A racer whose fit is
    predicted to end after the time budget is not started (``stopped``
    says so); so under a tight budget or a busy machine every racer still
    gets its first split before any gets a second.  Returns the race's
    record: ``rows`` (one dict per racer), ``racers``, ``skipped``, ``stop``,
    ``rounds`` (the splits every surviving racer completed)."""
    racers, replaced = sparse_safe(expand_racers(est), comp.X, key=lambda r: r.cand)
    warn_sparse_safe(replaced, comp.X, _WHO)
    deadline = t_start + float(est.time_budget)
    fi0 = splits[0][0]
    ctx = {"deadline": deadline, "memory": None, "speed": None, "n_workers": 1}
    rows, skipped, alive = [], list(replaced), []
    for c, racer in enumerate(racers):
        row = _new_row(c, racer)
        rows.append(row)
        ctx["X"] = _work_proxy(racer.cand.template, comp.X, fi0)
        why, secs = check_resources(ctx, _with_answers(racer.cand, comp, fi0), None)
        row["free"], row["secs"] = secs < 0, max(secs, 0.0)
        if why:
            row["stopped"] = why
            skipped.append({"candidate": c, "learner": racer.name, "params": racer.params(),
                            "reason": why})
        else:
            alive.append(c)
    stop, rounds = "max_iter", 0
    for s, split in enumerate(splits):
        done = []
        for c in alive:
            row = rows[c]
            if not row["free"] and time.time() + row["secs"] > deadline:
                row["stopped"] = f"max_time: time_budget spent before split {s}"
                stop = "max_time"
                continue
            seed = int(np.random.SeedSequence([seed0, c, s]).generate_state(1)[0])
            if _fit_score(racers[c], comp, split, seed, row,
                          deadline if racers[c].cand.learns else None):
                done.append(c)
            elif row["stopped"].startswith("max_time"):
                stop = "max_time"
        if stop == "max_time":          # this round is partial: compare on the earlier ones
            break
        rounds = s + 1
        alive = _halve(rows, done, s) if s + 1 < len(splits) else done
    for row in rows:
        row.pop("secs")
    return {"rows": rows, "racers": racers, "skipped": skipped, "stop": stop,
            "rounds": rounds}


def compared(rows: list[dict], rounds: int) -> dict[int, float]:
    """The racers the race can compare and their scores: those scored on
    the first ``max(rounds, 1)`` splits, by their mean over those splits
    (so that a racer halved early is not compared on fewer, luckier
    splits than the ones that went on)."""
    k = max(int(rounds), 1)
    return {i: float(np.mean(r["scores"][:k])) for i, r in enumerate(rows)
            if len(r["scores"]) >= k and not r["error"]}


def results_table(rows: list[dict], n_splits: int, win: int, scores: dict[int, float]
                  ) -> dict:
    """``cv_results_``: one entry per racer (NumPy arrays, pandas-readable);
    ``mean_validation_score`` is the score the race compared (:func:`compared`),
    NaN for a racer halved or stopped before those splits (its own splits'
    scores are in ``split<k>_validation_score``)."""
    nan = float("nan")
    full = [i in scores for i in range(len(rows))]
    mean = [scores.get(i, nan) for i in range(len(rows))]
    order = sorted(range(len(rows)), key=lambda i: (i != win, not full[i],
                                                    -(mean[i] if full[i] else -np.inf), i))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(1, len(rows) + 1)
    out: dict[str, Any] = {
        "candidate": np.array([r["candidate"] for r in rows]),
        "learner": np.array([r["learner"] for r in rows], dtype=object),
        "params": np.array([r["params"] for r in rows], dtype=object),
        "preprocessing": np.array([r["preprocessing"] for r in rows], dtype=object),
        "mean_validation_score": np.array(mean),
        "std_validation_score": np.array([float(np.std(r["scores"])) if ok else nan
                                          for r, ok in zip(rows, full)]),
        "mean_fit_time": np.array([float(np.mean(r["fit_time"])) if r["fit_time"] else 0.0
                                   for r in rows]),
        "error": np.array([r["error"] for r in rows], dtype=object),
        "stopped": np.array([r["stopped"] for r in rows], dtype=object),
        "rank_validation_score": rank,
    }
    for s in range(n_splits):
        out[f"split{s}_validation_score"] = np.array(
            [r["scores"][s] if len(r["scores"]) > s else nan for r in rows])
    return out


def _one_standard_error(rec: dict, comp: Comparisons, splits: list, scores: dict[int, float],
                        best: int) -> int:
    """The one-standard-error rule on triplets (:mod:`tripletml.auto.selection`):
    ``best``, a learned racer, must beat the best no-learning racer by more
    than one standard error of their paired difference over the validation
    answers of the compared splits, the answers about one query item a
    cluster; else that baseline wins (``stopped`` on ``best``'s row says
    so).  Pairs (scored by an AUC, no term per answer) keep ``best``."""
    rows, racers = rec["rows"], rec["racers"]
    refs = [i for i in scores if not racers[i].cand.learns]
    if comp.kind != "triplets" or not refs or best in refs:
        return best
    ref = max(refs, key=lambda i: (scores[i], -i))
    k = max(int(rec["rounds"]), 1)
    d = np.concatenate([rows[best]["items"][s].astype(float) - rows[ref]["items"][s]
                        for s in range(k)])
    query = np.concatenate([_query_items(comp, splits[s][1]) for s in range(k)])
    within, lead, se = within_one_se(d, query)
    if not within:
        return best
    why = (f"one_se: {lead:+.4f} over {racers[ref].name} ({rows[ref]['preprocessing']}) is "
           f"within one standard error ({se:.4f}) of their paired difference on {d.size} "
           "validation answers")
    before = rows[best]["stopped"]
    rows[best]["stopped"] = f"{before}; {why}" if before else why
    return ref


def fit_comparisons(est: Any, comp: Comparisons, groups, t_start: float) -> None:
    """``AutoSimilarity.fit`` on comparisons: split the items, race, refit
    the winner on all answers; sets the fitted attributes on ``est``."""
    seed0 = est._seed()
    split_seed = int(np.random.SeedSequence(seed0).generate_state(1)[0])
    if getattr(est, "holdout", "items") == "answers":
        splits = answer_splits(est, comp, groups, split_seed)
    else:
        splits = [(_Part(fi), _Part(vi)) for fi, vi in item_splits(est, comp, groups,
                                                                   split_seed)]
    rec = race(est, comp, splits, t_start, seed0)
    rows = rec["rows"]
    scores = compared(rows, rec["rounds"])
    if not scores:
        raise RuntimeError(f"{_WHO}: no candidate was scored within "
                           f"time_budget={est.time_budget}.")
    # ties go to the earlier racer: the no-learning baselines come first
    win = max(scores, key=lambda i: (scores[i], -i))
    if getattr(est, "selection", "one_se") == "one_se":
        win = _one_standard_error(rec, comp, splits, scores, win)
    racer = rec["racers"][win]
    seed = int(np.random.SeedSequence([seed0, win, 10**6]).generate_state(1)[0])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = fit_on(racer.make(comp.X, seed), comp)
    est.refit_time_ = time.perf_counter() - t0
    est.best_estimator_ = model
    est.best_params_ = {"learner": racer.name, **racer.params()}
    if racer.rel is not None:
        target = RELATIVE[racer.rel[0]][0]
        est.best_params_[target] = float(model.get_params()[target])
    est.best_score_ = scores[win]
    est.cv_results_ = results_table(rows, len(splits), win, scores)
    est.skipped_ = rec["skipped"]
    est.stop_reason_ = rec["stop"]
    est.history_ = {"step": [0], "seconds": [time.time() - t_start],
                    "n_candidates": [len(rows)], "best_validation_score": [est.best_score_]}
    est.supervision_ = comp.kind
    est.scoring_ = COMPARISON_SCORINGS[comp.kind]
    est.n_features_in_ = comp.X.shape[1]
