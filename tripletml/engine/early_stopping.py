"""Early stopping on answers about held-out items.

People's answers ("a is closer to b than to c") are noisy, and a learner that
follows them for as long as its objective decreases can end further from the
truth than where it started (issue 38: LMNN on Zappos shoes gains +.04 over
the cosine on unseen shoes after one L-BFGS iteration and loses -.12 at
convergence).  The remedy here is the standard one (Goodfellow, Bengio &
Courville, *Deep Learning*, 2016, Section 7.8, Algorithms 7.1 and 7.2):

1. split the *items* the answers name in folds (not the answers: a
   similarity is used on items no one judged);
2. for each fold, train on the answers among the other items and score,
   after every iteration, the accuracy of the answers whose three items are
   in the fold (answers that name a known item keep rewarding a fit to the
   known items; measured in ``BENCHMARKS.md``);
3. stop a fold's run when that accuracy has not improved for ``patience``
   iterations; pool the folds' curves and keep the fewest iterations ``k``
   within one standard error of the best (the one-standard-error rule);
4. retrain on all answers for ``k`` iterations (Algorithm 7.2), so that no
   answer is lost to the validation.

Nothing here knows an algorithm: :func:`item_folds` and
:func:`split_by_items` split index triplets, :class:`ValidationWatch` scores
an embedding ``Z`` of the rows, :func:`pooled_curve` and
:func:`within_one_standard_error` choose.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from tripletml.linalg.sparse_rows import used_rows

__all__ = ["ItemHoldout", "split_by_items", "item_folds", "hash_folds", "ValidationWatch",
           "pooled_curve", "within_one_standard_error", "triplet_accuracy_on", "MahalanobisScorer",
           "pair_keys", "two_protocol_splits", "choose_toward_last", "IDENTITY_BLEND_GRID",
           "BLEND_FOLDS", "MIN_FOLD_ANSWERS", "check_blend_record"]

#: a blend ``(1 - s) A / S_A + s I / S_I`` of a learned metric with the
#: features' own geometry chosen on answers (MMC's and SCML's
#: ``shrinkage="auto"``): the weights ``s`` of the identity, odds ``(1 - s) /
#: s`` of 10, 1, 1/10 and 1/100 between the two, with the two ends
IDENTITY_BLEND_GRID = (0.0, 1.0 / 11.0, 0.5, 10.0 / 11.0, 100.0 / 101.0, 1.0)
#: folds of each held-out protocol of such a choice (:func:`two_protocol_splits`)
BLEND_FOLDS = 3
#: fewest held-out answers per fold (of each kind for pairs) for a choice
MIN_FOLD_ANSWERS = 5


@dataclass
class ItemHoldout:
    """What :func:`split_by_items` returns: ``fit`` and ``val`` index the
    answers (rows of the triplet array); ``items`` are the held-out item
    ids; ``reason`` says why no split was made (``fit``/``val`` empty)."""
    fit: np.ndarray
    val: np.ndarray
    items: np.ndarray
    reason: str = ""
    meta: dict = field(default_factory=dict)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_folds(keys: np.ndarray, n_folds: int) -> np.ndarray:
    """The fold (``0..n_folds-1``) of each row of ``keys`` (``(m, k)``
    non-negative ints) from its content alone: a splitmix64 hash of its
    entries, so the same row lands in the same fold whatever the order of
    the rows, the random state or the partition it comes from."""
    keys = np.asarray(keys, dtype=np.int64)
    h = np.zeros(keys.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(keys.shape[1]):
            h = _splitmix64(h ^ keys[:, j].astype(np.uint64))
    return (h % np.uint64(n_folds)).astype(np.int64)


def item_folds(answers: np.ndarray, n_folds: int = 3, *, val: str = "head"
               ) -> list[ItemHoldout]:
    """Each named item held out once: ``n_folds`` splits of the answers by
    the fold of their items (a hash of the item id, as
    :func:`hash_folds`, as KISSME's held-out folds hash answers:
    the same item is in the same fold whatever the order of the answers).

    Parameters
    ----------
    answers : ndarray of int, shape (m, k)
        Row indices: triplets ``(head, close, far)`` or pairs ``(a, b)``.
    n_folds : int, default=3
    val : {"head", "all", "any"}, default="head"
        Which answers are held out for scoring: those whose *head* is held
        out (the test-head protocol of :func:`split_by_items`), those whose
        items are *all* held out (the test-test protocol: every item new, as
        on a gallery of new items), or those naming *any* held-out item.

    Returns
    -------
    list of ItemHoldout
        One per fold: ``fit`` the answers naming no held-out item, ``val``
        as above, ``items`` the held-out ids (possibly empty for a fold no
        named item hashes to).
    """
    t = np.asarray(answers)
    if t.ndim != 2 or t.dtype.kind not in "iu" or (t.size and t.min() < 0):
        raise ValueError(f"item_folds: answers must be a 2-D array of non-negative row "
                         f"indices, got shape {t.shape} and dtype {t.dtype}.")
    val_rule = val
    if val_rule not in ("head", "all", "any"):
        raise ValueError(f"item_folds: val={val_rule!r} must be 'head', 'all' or 'any'.")
    if isinstance(n_folds, (bool, np.bool_)) or int(n_folds) < 2:
        raise ValueError(f"item_folds: n_folds={n_folds!r} must be an integer >= 2.")
    named = np.unique(t)
    fold_of = hash_folds(named[:, None], int(n_folds))
    out = []
    for f in range(int(n_folds)):
        held = named[fold_of == f]
        inside = np.isin(t, held)
        val = {"head": lambda: inside[:, 0], "all": lambda: inside.all(axis=1),
               "any": lambda: inside.any(axis=1)}[val_rule]()
        out.append(ItemHoldout(np.flatnonzero(~inside.any(axis=1)), np.flatnonzero(val), held))
    return out


def pair_keys(pairs: np.ndarray, similar: np.ndarray) -> np.ndarray:
    """``(min, max, label)`` rows of labeled pairs for :func:`hash_folds`
    (a pair and its reverse are one answer)."""
    pairs = np.asarray(pairs, dtype=np.int64)
    return np.column_stack([pairs.min(axis=1), pairs.max(axis=1),
                            np.asarray(similar, dtype=np.int64)])


def two_protocol_splits(answers: np.ndarray, n_folds: int, similar: np.ndarray | None = None,
                        min_val: int = 5) -> list[list[ItemHoldout]] | None:
    """The two held-out protocols of a choice towards the features' own
    geometry on answers (RCA's and MMC's ``shrinkage="auto"``).

    Row 0: ``n_folds`` folds of the *items* (:func:`item_folds`, ``val="all"``):
    fit on the answers among the other items, score the answers whose items
    are all held out (a gallery of new items).  Row 1: ``n_folds`` folds of
    the *answers* (:func:`hash_folds` of their content; pairs by
    :func:`pair_keys`): new answers about known items.

    Returns None when a fold leaves fewer than ``min_val`` answers to score
    (of each kind, for pairs with ``similar``) or none to fit on."""
    answers = np.asarray(answers)
    keys = answers if similar is None else pair_keys(answers, similar)
    by_answer = hash_folds(keys, n_folds)
    splits = [item_folds(answers, n_folds, val="all"),
              [ItemHoldout(np.flatnonzero(by_answer != f), np.flatnonzero(by_answer == f),
                           np.zeros(0, np.int64)) for f in range(n_folds)]]

    def usable(h: ItemHoldout) -> bool:
        if h.fit.size < 1 or h.val.size < min_val:
            return False
        if similar is None:
            return True
        v, f = similar[h.val], similar[h.fit]
        return bool(min(v.sum(), (~v).sum()) >= min_val and f.any())

    return splits if all(usable(h) for folds in splits for h in folds) else None


def choose_toward_last(grid: np.ndarray, scores: np.ndarray) -> float:
    """The value of ``grid`` (last: the features' own geometry) whose smaller
    gain over the last value on the protocols of ``scores`` (one row each,
    :func:`two_protocol_splits`) is largest: never below the last on either
    protocol; ties to the first."""
    gain = (scores - scores[:, -1:]).min(axis=0)
    return float(grid[int(np.argmax(gain))])


def check_blend_record(model, name: str = "shrinkage") -> float:
    """Check a loaded model's record of a choice towards the identity:
    ``<name>_`` a number in [0, 1] (0 when a file written before the choice
    existed lacks it), and ``<name>_grid_`` / ``<name>_scores_`` together,
    one column of the two protocols' scores per grid value, ``<name>_`` in
    the grid.  Returns the value; ValueError otherwise."""
    value = getattr(model, f"{name}_", None)
    if value is None:
        value = 0.0
        setattr(model, f"{name}_", value)
    if isinstance(value, (bool, np.bool_)) or not (isinstance(value, Real)
                                                  and 0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name}_={value!r} must be a number in [0, 1]")
    grid, scores = getattr(model, f"{name}_grid_", None), getattr(model, f"{name}_scores_", None)
    if (grid is None) != (scores is None) or (
            grid is not None and (scores.shape != (2, grid.size)
                                  or not np.any(grid == float(value)))):
        raise ValueError(f"{name}_grid_ and {name}_scores_ must come together, with one "
                         f"column of scores per grid value and {name}_ in the grid")
    return float(value)


def split_by_items(triplets: np.ndarray, fraction: float, rng: np.random.Generator, *,
                   min_answers: int = 1) -> ItemHoldout:
    """Hold out ``ceil(fraction * u)`` of the ``u`` items the answers name.

    Parameters
    ----------
    triplets : ndarray of int, shape (m, 3)
        ``(head, close, far)`` row indices.
    fraction : float in (0, 1)
        Share of the named items held out (rounded up; at least one item on
        each side).
    rng : numpy Generator
        Draws the permutation of the named items.
    min_answers : int, default=1
        Fewest answers each side must keep for the split to be made.

    Returns
    -------
    ItemHoldout
        ``fit``: the answers whose three items are kept; ``val``: the
        answers whose head is held out (their other items anything);
        answers with a kept head and a held-out item are in neither.  With
        fewer than two named items, or fewer than ``min_answers`` on a
        side, ``fit`` and ``val`` are empty and ``reason`` says why.
    """
    t = np.asarray(triplets)
    if t.ndim != 2 or t.shape[1] != 3 or t.dtype.kind not in "iu":
        raise ValueError(f"split_by_items: triplets must be an (m, 3) array of integer row "
                         f"indices, got shape {t.shape} and dtype {t.dtype}.")
    if t.size and t.min() < 0:
        raise ValueError(f"split_by_items: triplets hold a negative row index ({t.min()}).")
    if isinstance(fraction, (bool, np.bool_)) or not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"split_by_items: fraction={fraction!r} must be in (0, 1).")
    named = np.unique(t)
    u = named.size
    empty = np.zeros(0, dtype=np.int64)
    if u < 2:
        return ItemHoldout(empty, empty, empty, reason=f"the answers name {u} item(s)")
    k = min(u - 1, max(1, math.ceil(float(fraction) * u)))
    held = np.sort(rng.permutation(named)[:k])
    out = np.isin(t, held)
    fit = np.flatnonzero(~out.any(axis=1))
    val = np.flatnonzero(out[:, 0])
    if fit.size < min_answers or val.size < min_answers:
        return ItemHoldout(empty, empty, held,
                           reason=f"holding out {k} of {u} items leaves {fit.size} answers to "
                                  f"fit and {val.size} to validate (fewer than {min_answers})")
    return ItemHoldout(fit, val, held)


def triplet_accuracy_on(Z: np.ndarray, triplets: np.ndarray) -> float:
    """Share of ``(head, close, far)`` with ``||z_head - z_close|| <
    ||z_head - z_far||`` on the embedded rows ``Z``; a tie counts one half
    (so that the start, where every distance can tie, scores 0.5)."""
    t = np.asarray(triplets)
    if t.shape[0] == 0:
        return math.nan
    a, b, c = Z[t[:, 0]], Z[t[:, 1]], Z[t[:, 2]]
    margin = np.einsum("ij,ij->i", a - c, a - c) - np.einsum("ij,ij->i", a - b, a - b)
    return float(np.mean(margin > 0) + 0.5 * np.mean(margin == 0))


class ValidationWatch:
    """Track the validation accuracy of each iterate; say when to stop.

    ``watch(it, Z)`` records the accuracy of iteration ``it`` (0: the
    start) on the embedded rows ``Z`` and returns True once ``patience``
    iterations have passed without a strict improvement over the best.
    ``best_iter`` and ``best_score`` are the best so far (the earliest on
    ties); ``scores`` all of them.
    """

    def __init__(self, triplets: np.ndarray, patience: int):
        self.triplets = np.asarray(triplets)
        self.patience = int(patience)
        self.scores: list[float] = []
        self.eligible: list[bool] = []
        self.best_iter, self.best_score = 0, -math.inf

    def __call__(self, it: int, Z: np.ndarray) -> bool:
        return self.record(it, triplet_accuracy_on(Z, self.triplets))

    def record(self, it: int, score: float, eligible: bool = True) -> bool:
        """Record the score of iteration ``it``; True when it is time to stop.
        An iterate that is no model (``eligible`` False: SML's ``M = 0``) is
        recorded but never the best."""
        self.scores.append(float(score))
        self.eligible.append(bool(eligible))
        if eligible and score > self.best_score:
            self.best_iter, self.best_score = int(it), float(score)
        return int(it) - self.best_iter >= self.patience


def within_one_standard_error(scores: np.ndarray, n: int,
                              eligible: np.ndarray | None = None) -> np.ndarray:
    """Which (eligible) scores are within one standard error
    ``sqrt(p (1 - p) / n)`` of the best ``p``, accuracies over ``n``
    held-out answers: the candidates of the one-standard-error rule (Breiman
    et al. 1984; Hastie, Tibshirani & Friedman, *Elements of Statistical
    Learning*, 2009, Section 7.10), of which the caller takes the simplest
    model (the fewest iterations, the smallest step cap)."""
    s = np.asarray(scores, dtype=np.float64)
    ok = np.ones(s.size, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if not ok.any():
        return ok
    best = float(np.max(s[ok]))
    se = math.sqrt(max(best * (1.0 - best), 0.0) / max(int(n), 1))
    return ok & (s >= best - se)


def pooled_curve(watches: list[ValidationWatch]) -> tuple[np.ndarray, np.ndarray]:
    """The validation curve of several folds' probe runs: at each iteration
    the accuracy over all their held-out answers (each fold weighted by its
    answers; a fold that stopped earlier counts with its last iterate, the
    model it ended at), and whether every fold's iterate there may be
    chosen (``eligible``).  Returns ``(scores, eligible)``."""
    length = max(len(w.scores) for w in watches)
    total, weight = np.zeros(length), 0
    eligible = np.ones(length, dtype=bool)
    for w in watches:
        s = np.asarray(w.scores, dtype=np.float64)
        e = np.asarray(w.eligible, dtype=bool)
        pad = length - s.size
        total += len(w.triplets) * np.concatenate([s, np.full(pad, s[-1])])
        eligible &= np.concatenate([e, np.full(pad, e[-1])])
        weight += len(w.triplets)
    return total / max(weight, 1), eligible


class MahalanobisScorer:
    """The accuracy of answers under ``d(a, b) = (x_a - x_b)^T M (x_a -
    x_b)`` for a sequence of ``M`` (d x d): the rows the answers name are
    kept (dense); each call costs ``r d^2 + m d`` for their ``r`` rows and
    ``m`` answers, in ``O(r d + m)`` memory (a tie counts one half, as
    :func:`triplet_accuracy_on`)."""

    def __init__(self, X, triplets: np.ndarray):
        t = np.asarray(triplets)
        rows, local = used_rows(t, X.shape[0])
        Xr = X[rows]
        self.Xr = np.asarray(Xr.toarray() if hasattr(Xr, "toarray") else Xr, dtype=np.float64)
        self.t = local

    def __call__(self, M: np.ndarray) -> float:
        if self.t.shape[0] == 0:
            return math.nan
        M = 0.5 * (M + M.T)
        q, p, n = self.t[:, 0], self.t[:, 1], self.t[:, 2]
        XM = self.Xr @ M
        # d(q, n) - d(q, p) = (x_n - x_p)^T M (x_n + x_p - 2 x_q), M symmetric
        a = self.Xr[n] - self.Xr[p]
        b = XM[n] + XM[p] - 2.0 * XM[q]
        margin = np.einsum("ij,ij->i", a, b)
        return float(np.mean(margin > 0) + 0.5 * np.mean(margin == 0))
