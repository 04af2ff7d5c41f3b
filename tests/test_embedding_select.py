"""Choosing the dimension of an ordinal embedding: GridSearchCV over
triplets, and choose_dimension's one-standard-error rule on planted
configurations."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from tripletml.embedding import (SOE, STE, TSTE, BilinearEmbedding, DimensionChoice,
                                 UnusedItemsWarning, choose_dimension)


def planted_triplets(n_items, dim, m, seed):
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((n_items, dim))
    t = rng.integers(0, n_items, size=(m, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    d = lambda a, b: ((P[a] - P[b]) ** 2).sum(axis=1)  # noqa: E731
    swap = d(t[:, 0], t[:, 1]) > d(t[:, 0], t[:, 2])
    t[swap, 1:] = t[swap, 2:0:-1]
    return P, t


def test_grid_search_cv_over_triplets_out_of_the_box():
    _, t = planted_triplets(30, 2, 3000, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedItemsWarning)   # every item in every fold
        gs = GridSearchCV(SOE(n_items=30, random_state=0), {"n_components": [1, 2, 3, 5, 8]},
                          cv=5).fit(t)
    scores = gs.cv_results_["mean_test_score"]
    assert np.isfinite(scores).all()
    assert scores[0] < scores[1] - 0.05         # 1-D cannot hold a 2-D configuration
    assert gs.best_params_["n_components"] in (2, 3)
    assert gs.best_estimator_.embedding_.shape == (30, gs.best_params_["n_components"])
    assert gs.score(t) == gs.best_estimator_.score(t)


@pytest.mark.parametrize("dim, n_items, m", [(2, 30, 3000), (5, 40, 8000)])
def test_choose_dimension_finds_the_planted_dimension(dim, n_items, m):
    _, t = planted_triplets(n_items, dim, m, 1)
    res = choose_dimension(SOE(random_state=0), t, dims=(1, 2, 3, 5, 8), random_state=0)
    assert isinstance(res, DimensionChoice)
    # the grid has no neighbor of 2 other than 1 and 3 and none of 5 within 1:
    # the planted dimension exactly for 5, within one for 2
    assert abs(res.dim - dim) <= (1 if dim == 2 else 0), res.table()
    assert res.scores.shape == (5, 5)
    np.testing.assert_allclose(res.mean_score, res.scores.mean(axis=1))
    np.testing.assert_allclose(res.sem_score, res.scores.std(axis=1, ddof=1) / np.sqrt(5))
    assert res.estimator.n_components == res.dim
    assert res.estimator.embedding_.shape == (n_items, res.dim)
    assert res.mean_score[list(res.dims).index(1)] < res.mean_score.max() - 0.05
    assert "*" in res.table()


def test_one_se_rule_takes_the_smallest_dimension_near_the_best():
    _, t = planted_triplets(30, 2, 2000, 2)
    a = choose_dimension(SOE(random_state=0, n_init=1), t, dims=(1, 2, 4, 8), cv=3,
                         random_state=0)
    b = choose_dimension(SOE(random_state=0, n_init=1), t, dims=(1, 2, 4, 8), cv=3,
                         random_state=0, one_se=False)
    np.testing.assert_array_equal(a.scores, b.scores)   # same folds, same fits
    assert b.dim == b.best_dim == a.best_dim == int(a.dims[np.argmax(a.mean_score)])
    ib = np.argmax(a.mean_score)
    ok = a.mean_score >= a.mean_score[ib] - a.sem_score[ib]
    assert a.dim == a.dims[np.flatnonzero(ok)[0]] <= a.best_dim


def test_a_splitter_and_other_estimators():
    _, t = planted_triplets(20, 2, 1200, 3)
    for est in (STE(random_state=0, n_init=1), TSTE(random_state=0, n_init=1),
                BilinearEmbedding(random_state=0)):
        res = choose_dimension(est, t, dims=(2, 4), cv=KFold(3))
        assert res.scores.shape == (2, 3) and res.dim in (2, 4)
        assert est.get_params()["n_components"] == clone(est).get_params()["n_components"]


def test_estimator_untouched_and_clone_round_trip():
    est = SOE(3, margin=0.5, n_items=25, random_state=7)
    params = est.get_params()
    _, t = planted_triplets(25, 2, 1000, 4)
    res = choose_dimension(est, t, dims=[1, 2], cv=2, random_state=0)
    assert est.get_params() == params and not hasattr(est, "embedding_")
    got = res.estimator.get_params()
    assert got == {**params, "n_components": res.dim}
    assert clone(res.estimator).get_params() == got


def test_missing_items_warn_once_and_n_items_is_fixed():
    # few triplets over many items: some items are missing from training folds
    rng = np.random.default_rng(5)
    t = np.array([rng.choice(40, 3, replace=False) for _ in range(60)])
    with pytest.warns(UnusedItemsWarning) as rec:
        res = choose_dimension(SOE(random_state=0, n_init=1, max_iter=50), t, dims=(1, 2),
                               cv=3, random_state=0)
    cv_warnings = [w for w in rec if "choose_dimension" in str(w.message)]
    assert len(cv_warnings) == 1
    assert res.n_unused.shape == (3,) and res.n_unused.max() > 0
    # every fold embedded all max id + 1 items, so no held-out triplet was invalid
    assert res.estimator.n_items == int(t.max()) + 1
    assert np.isfinite(res.scores).all()


@pytest.mark.parametrize("kw, err", [
    (dict(dims=()), ValueError), (dict(dims=(0, 2)), ValueError),
    (dict(dims=(1.5,)), ValueError), (dict(cv=1), ValueError), (dict(cv="x"), TypeError),
    (dict(param="rank"), ValueError),
])
def test_bad_arguments(kw, err):
    _, t = planted_triplets(10, 2, 200, 6)
    with pytest.raises(err):
        choose_dimension(SOE(), t, **kw)


def test_held_out_item_unseen_in_training_gets_a_hint():
    t = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    est = SOE(n_init=1, random_state=0).fit(t)
    with pytest.raises(ValueError, match="pass n_items"):
        est.score(np.array([[0, 1, 5]]))
    est = SOE(n_init=1, n_items=6, random_state=0)
    with pytest.warns(UnusedItemsWarning, match="3 of 6 items"):
        est.fit(t)
    assert est.score(np.array([[0, 1, 5]])) in (0.0, 1.0)
