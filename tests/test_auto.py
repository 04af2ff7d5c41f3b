"""AutoSimilarity: the race, its validation by items, its budget, its fitted model."""
from __future__ import annotations

import math
import os
import time

import numpy as np
import scipy.sparse as sp
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris

import tripletml as tm
from tripletml import AutoSimilarity, load_model
from tripletml.algorithms.oasis.estimator import OASIS
from tripletml.metrics import evaluate_retrieval



def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


#: quick candidates (no preprocessing: valid before and after learners got a
#: preprocessing parameter)
QUICK = [
    {"learner": "Euclidean"},
    {"learner": "DotProduct"},
    {"learner": "SDCA", "grid": {"alpha": [1e-1, 1e-2, 1e-3], "tol": [None], "max_iter": [2]},
     "budget": ("n_triplets", 900)},
    {"learner": "OASIS", "grid": {"C": [0.01, 0.1, 1.0]}, "budget": ("n_triplets", 900)},
]


def _quick(**kw):
    kw.setdefault("random_state", 0)
    kw.setdefault("time_budget", 1e4)     # the race must not depend on the machine's load
    return AutoSimilarity(candidates=QUICK, **kw)


# --------------------------------------------------------------------------
# no validation item ever reaches a training triplet
# --------------------------------------------------------------------------
EVENTS: list[tuple[str, set]] = []


class RecordingOASIS(OASIS):
    """OASIS that records the ids (column 0) of the rows it is fitted on, of
    the rows its triplets name, and of the rows it scores."""

    def fit(self, X, y=None, *, triplets=None):
        self._ids = np.asarray(X)[:, 0].copy()
        EVENTS.append(("fit", set(self._ids.tolist())))
        return super().fit(X, y, triplets=triplets)

    def _fit(self, X, triplets, rng):
        EVENTS.append(("triplets", set(self._ids[np.unique(triplets)].tolist())))
        return super()._fit(X, triplets, rng)

    def partial_fit(self, X, triplets):
        ids = np.asarray(X)[:, 0]
        EVENTS.append(("partial_fit", set(ids.tolist())))
        EVENTS.append(("triplets", set(ids[np.unique(np.asarray(triplets))].tolist())))
        return super().partial_fit(X, triplets)

    def similarity(self, X, Y=None):
        EVENTS.append(("score", set(np.asarray(X)[:, 0].tolist())
                       | set(np.asarray(X if Y is None else Y)[:, 0].tolist())))
        return super().similarity(X, Y)


def test_validation_items_never_in_a_training_triplet():
    X, y = iris()
    ids = np.arange(X.shape[0], dtype=float) * 1000.0     # a unique id per row
    Xi = np.column_stack([ids, X])
    params = {"C": [0.01, 0.1, 1.0], "max_iter": [1],
              "preprocessing": [None]}                    # keep column 0 readable
    learner = RecordingOASIS(random_state=0)
    auto = AutoSimilarity(candidates=[{"learner": learner, "grid": params,
                                       "budget": ("n_triplets", 450)}],
                          n_splits=2, factor=2, random_state=0,
                          time_budget=3600)     # not cut short on a busy machine
    EVENTS.clear()
    auto.fit(Xi, y)
    racing = EVENTS[:-2]        # the last fit + triplets: the refit on all rows
    assert [e[0] for e in EVENTS[-2:]] == ["fit", "triplets"]
    assert EVENTS[-2][1] == set(ids.tolist())
    fitted, n_checked, n_warm = None, 0, 0
    for kind, seen in racing:
        if kind in ("fit", "partial_fit"):
            n_warm += kind == "partial_fit"
            fitted = seen
        elif kind == "triplets":
            assert seen <= fitted
        else:
            assert fitted is not None and not (seen & fitted), "validation item fitted on"
            assert len(fitted) + len(seen) == X.shape[0]
            n_checked += 1
    n_rows = len(auto.cv_results_["candidate"])
    assert n_checked >= 2 * n_rows        # every (candidate, round, split) was scored
    assert n_warm >= 2                    # OASIS (one pass) continued by partial_fit
    assert auto.cv_results_["warm_start"][auto.cv_results_["round"] > 0].all()


# --------------------------------------------------------------------------
# the race
# --------------------------------------------------------------------------
def test_halving_discards_candidates_and_budget_grows():
    X, y = iris()
    auto = _quick(factor=3).fit(X, y)
    res = auto.cv_results_
    n_cand = 2 + 3 + 3
    n_rounds = math.ceil(math.log(n_cand, 3))
    assert sorted(set(res["round"].tolist())) == list(range(n_rounds))
    r0 = res["candidate"][res["round"] == 0]
    assert len(r0) == n_cand
    s0 = res["mean_validation_score"][res["round"] == 0]
    keep = math.ceil(n_cand / 3)
    expected = set(r0[np.lexsort((r0, -s0))][:keep].tolist())     # the top third
    seen_later = set(res["candidate"][res["round"] == 1].tolist())
    baselines = {0, 1}
    assert seen_later == expected - baselines       # baselines are fitted once
    assert seen_later
    # the budget of a survivor grows by factor
    for c in seen_later:
        b = res["budget"][res["candidate"] == c]
        assert b[1] == 3 * b[0]
    win = res["rank_validation_score"] == 1
    if res["budget_param"][win][0]:
        assert auto.best_params_[res["budget_param"][win][0]] == res["budget"][win][0]
    assert res["round"].max() == n_rounds - 1
    assert auto.stop_reason_ == "max_iter"


def test_cv_results_shape_and_keys():
    X, y = iris()
    auto = _quick(n_splits=2).fit(X, y)
    res = auto.cv_results_
    keys = {"candidate", "learner", "params", "preprocessing", "stage", "round",
            "budget_param", "budget", "split0_validation_score", "split1_validation_score",
            "mean_validation_score", "std_validation_score", "mean_fit_time", "warm_start",
            "error", "stopped", "rank_validation_score"}
    assert set(res) == keys
    n = len(res["candidate"])
    for k, v in res.items():
        assert isinstance(v, np.ndarray) and v.shape == (n,), k
    assert sorted(res["rank_validation_score"].tolist()) == list(range(1, n + 1))
    best = res["rank_validation_score"] == 1
    assert res["learner"][best][0] == auto.best_params_["learner"]
    assert res["mean_validation_score"][best][0] == pytest.approx(auto.best_score_)
    assert res["params"][best][0] == auto.best_params_
    m = (res["split0_validation_score"] + res["split1_validation_score"]) / 2
    np.testing.assert_allclose(res["mean_validation_score"], m)
    assert np.all((res["mean_validation_score"] >= 0) & (res["mean_validation_score"] <= 1))
    assert set(auto.history_) == {"step", "seconds", "n_candidates", "best_validation_score"}
    assert auto.history_["n_candidates"][0] == 8


def test_best_score_is_the_validation_map_of_a_reference_fit():
    """The score of a row equals a plain fit on the fit items, scored by the
    mAP of the validation items (brute force, same split and seed)."""
    from sklearn.model_selection import StratifiedShuffleSplit
    X, y = iris()
    X = X + 1e-3 * np.random.default_rng(0).standard_normal(X.shape)   # no tied scores
    auto = AutoSimilarity(candidates=[{"learner": "Euclidean"}, {"learner": "DotProduct"}],
                          random_state=3).fit(X, y)
    seed = int(np.random.SeedSequence(3).generate_state(1)[0])
    fit, val = next(StratifiedShuffleSplit(1, test_size=0.3, random_state=seed).split(X, y))
    S = -((X[val, None, :] - X[None, val, :]) ** 2).sum(-1)
    ref = tm.metrics.mean_average_precision(S, y[val])
    res = auto.cv_results_
    assert res["mean_validation_score"][res["learner"] == "Euclidean"][0] == pytest.approx(ref)
    ref_dot = tm.metrics.mean_average_precision(X[val] @ X[val].T, y[val])
    assert res["mean_validation_score"][res["learner"] == "DotProduct"][0] == pytest.approx(
        ref_dot)
    assert auto.best_score_ == pytest.approx(max(ref, ref_dot))


def test_reproducible_with_random_state():
    X, y = iris()
    a = _quick(random_state=7).fit(X, y)
    b = _quick(random_state=7).fit(X, y)
    assert a.best_params_ == b.best_params_
    np.testing.assert_array_equal(a.cv_results_["mean_validation_score"],
                                  b.cv_results_["mean_validation_score"])
    np.testing.assert_array_equal(a.similarity(X[:10]), b.similarity(X[:10]))


def test_numpy_generator_random_state_like_every_learner():
    """A NumPy Generator is a valid random_state (drawn from once): equally
    seeded Generators give the same race; bad seeds are refused by name."""
    X, y = iris()
    a = _quick(random_state=np.random.default_rng(3)).fit(X, y)
    b = _quick(random_state=np.random.default_rng(3)).fit(X, y)
    np.testing.assert_array_equal(a.cv_results_["mean_validation_score"],
                                  b.cv_results_["mean_validation_score"])
    np.testing.assert_array_equal(a.similarity(X[:10]), b.similarity(X[:10]))
    for bad, exc in ((-1, ValueError), ("seed", TypeError), (1.5, TypeError)):
        with pytest.raises(exc, match="AutoSimilarity: random_state="):
            _quick(random_state=bad).fit(X, y)


def test_n_jobs_2_same_as_1():
    X, y = iris()
    a = _quick(n_jobs=1).fit(X, y)
    b = _quick(n_jobs=2).fit(X, y)
    assert a.best_params_ == b.best_params_
    np.testing.assert_array_equal(a.cv_results_["candidate"], b.cv_results_["candidate"])
    np.testing.assert_allclose(a.cv_results_["mean_validation_score"],
                               b.cv_results_["mean_validation_score"], rtol=1e-9)
    np.testing.assert_allclose(a.similarity(X[:10]), b.similarity(X[:10]), rtol=1e-9)


def test_time_budget_stops_the_race():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 30))
    y = np.repeat(np.arange(6), 100)
    slow = [{"learner": "Euclidean"},
            {"learner": "SDCA", "grid": {"alpha": list(np.geomspace(1e-4, 1e-1, 9)),
                                         "tol": [None], "max_iter": [3]},
             "budget": ("n_triplets", 900_000)}]
    t0 = time.perf_counter()
    auto = AutoSimilarity(candidates=slow, time_budget=1.0, random_state=0).fit(X, y)
    elapsed = time.perf_counter() - t0
    assert auto.stop_reason_ == "max_time"
    assert elapsed < 30.0                 # generous: one running fit + the refit
    res = auto.cv_results_
    assert len(res["candidate"]) < 1 + 9 + 3    # the race was cut short
    assert hasattr(auto, "best_estimator_") and auto.n_features_in_ == 30


def test_a_fit_running_at_the_deadline_is_cut_and_not_scored():
    """Issue 39 s3 / 38 s1 (the time budget): a racer's fit runs under the
    race's deadline (tripletml.engine.training_deadline), so a fit of
    200,000 steps started within the budget stops a step after it instead
    of running to its end (about 20 s here), and, cut short, is not scored:
    the winner comes from the fits that finished."""
    X, y = iris()
    cands = [{"learner": "Euclidean"},
             {"learner": "LowRankDML", "grid": {"max_iter": [200_000], "tol": [None]}}]
    t0 = time.perf_counter()
    auto = AutoSimilarity(candidates=cands, time_budget=0.5, n_splits=1,
                          random_state=0).fit(X, y)
    assert time.perf_counter() - t0 < 8.0
    assert auto.stop_reason_ == "max_time"
    res = auto.cv_results_
    learned = [i for i, name in enumerate(res["learner"]) if name == "LowRankDML"]
    assert all(not np.isfinite(res["mean_validation_score"][i]) for i in learned)
    assert type(auto.best_estimator_).__name__ == "Euclidean"
    # without a no-learning candidate nothing finished: a clear error says why
    with pytest.raises(RuntimeError, match="stopped and not scored.*'Euclidean'"):
        AutoSimilarity(candidates=cands[1:], time_budget=0.5, n_splits=1,
                       random_state=0).fit(X, y)


# --------------------------------------------------------------------------
# the cost-aware schedule: stages, bar, pilot, lone survivor, skipped stages
# --------------------------------------------------------------------------
def test_costly_stage_below_the_bar_leaves_after_its_pilot():
    """Stage 1 racers scoring below the best of stage 0 are not escalated."""
    X, y = iris()
    cands = [{"learner": "Euclidean", "stage": 0},
             {"learner": "OASIS", "grid": {"C": [1e-4, 1e-3], "preprocessing": [None]},
              "budget": ("n_triplets", 900), "stage": 1}]
    auto = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    res = auto.cv_results_
    bar = res["mean_validation_score"][res["learner"] == "Euclidean"][0]
    st1 = res["stage"] == 1
    assert st1.sum() == 2                             # the pilot only
    assert (res["mean_validation_score"][st1] < bar).all()
    assert (res["budget"][st1] == 100).all()          # 900 / 3**2: the pilot budget
    assert (res["round"][st1] == 1).all()             # numbered after stage 0's round 0
    for why in res["stopped"][st1]:
        assert why.startswith("below_bar") and f"{bar:.4f}" in why
    assert auto.best_params_ == {"learner": "Euclidean"}
    assert res["rank_validation_score"][res["learner"] == "Euclidean"][0] == 1


def test_costly_stage_above_the_bar_pilot_then_full_budget():
    """Three stage-1 racers: a pilot at 1/9 of the budget, the best goes
    straight to the full budget (a lone racer skips the middle round) and
    wins when it beats the bar there."""
    X, y = iris()
    cands = [{"learner": "DotProduct"},                  # the bar (poor on raw iris)
             {"learner": "SDCA", "grid": {"alpha": [1e-1, 1e-2, 1e-3], "tol": [None],
                                          "max_iter": [2], "preprocessing": ["standardize"]},
              "budget": ("n_triplets", 900), "stage": 1}]
    auto = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    res = auto.cv_results_
    bar = res["mean_validation_score"][res["learner"] == "DotProduct"][0]
    st1 = res["stage"] == 1
    pilot = st1 & (res["round"] == 1)
    assert pilot.sum() == 3 and (res["budget"][pilot] == 100).all()
    s = res["mean_validation_score"][pilot]
    c = res["candidate"][pilot]
    best = c[np.lexsort((c, -s))][0]
    later = st1 & (res["round"] > 1)
    assert res["candidate"][later].tolist() == [best]
    assert res["budget"][later].tolist() == [900] and res["round"][later].tolist() == [2]
    assert res["mean_validation_score"][later][0] > bar
    halved = pilot & (res["candidate"] != best)
    assert all(w.startswith("halved") for w in res["stopped"][halved])
    # the winner is refitted at the budget of its best validation score
    mine = res["candidate"] == best
    top = np.flatnonzero(mine)[np.argmax(res["mean_validation_score"][mine])]
    assert auto.best_params_["learner"] == "SDCA"
    assert auto.best_params_["n_triplets"] == res["budget"][top]
    assert auto.best_score_ == res["mean_validation_score"][top]
    assert res["rank_validation_score"][top] == 1 and res["stopped"][top] == ""
    assert auto.stop_reason_ == "max_iter"


class OverfitsAtLargeBudget(tm.Euclidean):
    """Euclidean up to ``n_triplets=100``, its opposite above (a racer whose
    validation score collapses at the larger budget)."""

    def __init__(self, n_triplets=100, preprocessing=None):
        super().__init__(preprocessing=preprocessing)
        self.n_triplets = n_triplets

    def similarity(self, X, Y=None):
        S = super().similarity(X, Y)
        return -S if self.n_triplets > 100 else S


def test_winner_refitted_at_its_best_validated_budget():
    """Validated early stopping: when a racer's score falls at the larger
    budget, the smaller budget that scored best is refitted."""
    X, y = iris()
    cands = [{"learner": "DotProduct"},
             {"learner": OverfitsAtLargeBudget(), "budget": ("n_triplets", 900), "stage": 1}]
    auto = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    res = auto.cv_results_
    mine = res["learner"] == "OverfitsAtLargeBudget"
    assert res["budget"][mine].tolist() == [100, 900]      # pilot, then the full budget
    s = res["mean_validation_score"][mine]
    assert s[0] > res["mean_validation_score"][res["learner"] == "DotProduct"][0] > s[1]
    assert auto.best_params_ == {"learner": "OverfitsAtLargeBudget", "n_triplets": 100}
    assert auto.best_estimator_.n_triplets == 100 and auto.best_score_ == s[0]
    assert res["stopped"][mine][0] == ""
    assert res["stopped"][mine][1].startswith("below_bar")   # not escalated further
    assert res["rank_validation_score"][mine][0] == 1


def test_staged_race_independent_of_n_jobs():
    X, y = iris()
    cands = QUICK + [{"learner": "SDCA", "grid": {"alpha": [1e-2, 1e-3], "tol": [None],
                                                  "max_iter": [2],
                                                  "preprocessing": ["standardize", "whiten"]},
                      "budget": ("n_triplets", 900), "stage": 1}]
    a = AutoSimilarity(candidates=cands, random_state=5, time_budget=1e4, n_jobs=1).fit(X, y)
    b = AutoSimilarity(candidates=cands, random_state=5, time_budget=1e4, n_jobs=2).fit(X, y)
    assert (a.cv_results_["stage"] == 1).any()
    assert a.best_params_ == b.best_params_
    for k in ("candidate", "round", "budget", "stopped"):
        np.testing.assert_array_equal(a.cv_results_[k], b.cv_results_[k])
    np.testing.assert_allclose(a.cv_results_["mean_validation_score"],
                               b.cv_results_["mean_validation_score"], rtol=1e-9)


def test_stage_not_started_after_the_time_budget_is_recorded():
    X, y = iris()
    cands = [{"learner": "Euclidean"},
             {"learner": "SML", "grid": {"tol": [None]}, "budget": ("max_iter", 300),
              "stage": 1}]
    auto = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e-9).fit(X, y)
    res = auto.cv_results_
    st1 = res["stage"] == 1
    assert st1.sum() == 1 and np.isnan(res["mean_validation_score"][st1]).all()
    assert res["stopped"][st1][0].startswith("max_time")
    assert auto.stop_reason_ == "max_time" and auto.best_params_ == {"learner": "Euclidean"}


def test_bad_stage():
    X, y = iris()
    with pytest.raises(ValueError, match=r"candidates\[0\] stage"):
        AutoSimilarity(candidates=[{"learner": "Euclidean", "stage": -1}]).fit(X, y)
    with pytest.raises(TypeError, match=r"candidates\[0\] stage"):
        AutoSimilarity(candidates=[{"learner": "Euclidean", "stage": 0.5}]).fit(X, y)


def test_max_validation_items_caps_the_scored_items_stratified():
    """Scored validation items: at most the cap, a stratified subset of the
    held-out rows, never fitted on; the score equals a brute-force mAP on
    exactly the scored items."""
    X, y = iris()
    ids = np.arange(X.shape[0], dtype=float) * 1000.0
    Xi = np.column_stack([ids, X])
    learner = RecordingOASIS(random_state=0)
    auto = AutoSimilarity(candidates=[{"learner": learner,
                                       "grid": {"max_iter": [1], "preprocessing": [None]},
                                       "budget": ("n_triplets", 90)}],
                          max_validation_items=21, random_state=0)
    EVENTS.clear()
    auto.fit(Xi, y)
    scored = [seen for kind, seen in EVENTS[:-2] if kind == "score"]
    fitted = [seen for kind, seen in EVENTS[:-2] if kind == "fit"]
    assert scored and all(len(s) == 21 for s in scored)
    for f, s in zip(fitted, scored):
        assert not (f & s) and len(f) == 105          # fit items: 70 % of 150
        rows = np.sort(np.array(sorted(s)) / 1000.0).astype(int)
        assert np.bincount(y[rows]).tolist() == [7, 7, 7]
    # the Euclidean score is the mAP of exactly those items
    eu = AutoSimilarity(candidates=[{"learner": "Euclidean"}], max_validation_items=21,
                        random_state=0).fit(X, y)
    rows = (np.array(sorted(scored[0])) / 1000.0).astype(int)
    S = -((X[rows, None, :] - X[None, rows, :]) ** 2).sum(-1)
    ref = tm.metrics.mean_average_precision(S, y[rows])
    assert eu.best_score_ == pytest.approx(ref)
    with pytest.raises(ValueError, match="max_validation_items"):
        AutoSimilarity(max_validation_items=1).fit(X, y)


def test_default_candidates_set_preprocessing_explicitly_and_are_staged():
    from tripletml.auto import DEFAULT_CANDIDATES
    for spec in DEFAULT_CANDIDATES:
        assert spec["stage"] in (0, 1)
        if spec["learner"] != "Euclidean" or "grid" in spec:
            assert "auto" not in spec["grid"]["preprocessing"]
            assert spec["grid"]["preprocessing"]
    costly = {s["learner"] for s in DEFAULT_CANDIDATES if s["stage"] == 1}
    assert costly == {"SML"}


def test_fast_candidates_one_stage_of_cheap_racers():
    from tripletml.auto import FAST_CANDIDATES
    X, y = iris()
    auto = AutoSimilarity(candidates=FAST_CANDIDATES, random_state=0).fit(X, y)
    res = auto.cv_results_
    assert set(res["stage"].tolist()) == {0}
    assert set(res["learner"].tolist()) == {"Euclidean", "KISSME", "OASIS"}
    assert len(set(res["candidate"].tolist())) == 8
    assert auto.best_score_ == res["mean_validation_score"].max()


# --------------------------------------------------------------------------
# an ordinary fitted model
# --------------------------------------------------------------------------
def test_delegation_and_save_load(tmp_path):
    X, y = iris()
    auto = _quick().fit(X, y)
    best = auto.best_estimator_
    assert auto.n_features_in_ == 4
    np.testing.assert_allclose(auto.similarity(X[:5], X), best.similarity(X[:5], X))
    np.testing.assert_allclose(auto.pair_score(X[:5], X[5:10]), best.pair_score(X[:5], X[5:10]))
    t = np.array([[0, 1, 60], [50, 51, 0]])
    np.testing.assert_allclose(auto.triplet_score(X, t), best.triplet_score(X, t))
    assert auto.score(X, y) == pytest.approx(evaluate_retrieval(best, X, y, k=())["map"])
    np.testing.assert_allclose(auto.embed_queries(X[:3]), best.embed_queries(X[:3]))
    np.testing.assert_allclose(auto.embed_database(X[:3]), best.embed_database(X[:3]))
    assert auto.embedding_similarity == best.embedding_similarity
    assert hasattr(auto, "transform") == hasattr(best, "transform")
    path = tmp_path / "auto.npz"
    auto.save(path)
    loaded = load_model(path)
    assert type(loaded) is type(best)
    assert loaded.auto_search_["best_params"] == auto.best_params_
    assert loaded.auto_search_["best_score"] == pytest.approx(auto.best_score_)
    np.testing.assert_allclose(loaded.similarity(X[:5], X), auto.similarity(X[:5], X))


def test_transform_delegates_to_the_winner():
    X, y = iris()
    auto = AutoSimilarity(candidates=[{"learner": "Euclidean"}], random_state=0).fit(X, y)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):                    # a transformer: unfitted raises
        AutoSimilarity().transform(X)
    np.testing.assert_allclose(auto.transform(X), X)
    # every learner transforms (issue 29): a bilinear winner too
    auto = AutoSimilarity(candidates=[{"learner": "DotProduct"}], random_state=0).fit(X, y)
    np.testing.assert_allclose(auto.transform(X), auto.best_estimator_.transform(X))


def test_preprocessing_of_the_winner_applied_to_raw_features(tmp_path):
    X, y = iris()
    X = X * np.array([1.0, 100.0, 0.01, 5.0])
    auto = AutoSimilarity(candidates=[{"learner": "Euclidean",
                                       "grid": {"preprocessing": ["standardize"]}}],
                          random_state=0).fit(X, y)
    Z = (X - X.mean(0)) / X.std(0)
    S = -((Z[:5, None, :] - Z[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(auto.similarity(X[:5], X), S, atol=1e-9)
    auto.save(tmp_path / "m.npz")
    np.testing.assert_allclose(load_model(tmp_path / "m.npz").similarity(X[:5], X), S,
                               atol=1e-9)


def test_native_preprocessing_saved_with_the_winner(tmp_path):
    X, y = iris()
    X = X * np.array([1.0, 100.0, 0.01, 5.0])
    auto = AutoSimilarity(candidates=[{"learner": "Euclidean",
                                       "grid": {"preprocessing": ["whiten"]}}],
                          random_state=0).fit(X, y)
    assert auto.best_estimator_.get_params()["preprocessing"] == "whiten"
    auto.save(tmp_path / "m.npz")
    np.testing.assert_allclose(load_model(tmp_path / "m.npz").similarity(X[:5], X),
                               auto.similarity(X[:5], X))


def test_params_round_trip_and_clone():
    a = AutoSimilarity(candidates=QUICK, time_budget=5.0, n_splits=2, validation_size=0.25,
                       factor=2, n_jobs=2, random_state=3, verbose=1)
    p = a.get_params()
    b = AutoSimilarity().set_params(**p)
    assert b.get_params() == p
    c = clone(a)
    assert c.get_params()["candidates"] == QUICK and c.get_params()["factor"] == 2
    assert AutoSimilarity().candidates is None


def test_default_candidates_valid_and_quick_on_iris():
    X, y = iris()
    auto = AutoSimilarity(random_state=0, time_budget=30.0).fit(X, y)
    eu = tm.Euclidean().fit(X, y)
    assert auto.best_score_ >= auto.cv_results_["mean_validation_score"][
        auto.cv_results_["learner"] == "Euclidean"].max() - 1e-12
    assert auto.score(X, y) > 0.5 and eu.n_features_in_ == 4


def test_n_splits_auto_is_three_for_the_knn_accuracies_and_one_otherwise():
    X, y = iris()
    knn = _quick(scoring="knn_accuracy").fit(X, y)
    assert knn.n_splits_ == 3 and "split2_validation_score" in knn.cv_results_
    first = knn.cv_results_["candidate"] == 0
    parts = [knn.cv_results_[f"split{s}_validation_score"][first][0] for s in range(3)]
    assert knn.cv_results_["mean_validation_score"][first][0] == pytest.approx(np.mean(parts))
    assert _quick(scoring="knn_accuracy@3").fit(X, y).n_splits_ == 3
    retrieval = _quick().fit(X, y)
    assert retrieval.n_splits_ == 1 and "split1_validation_score" not in retrieval.cv_results_
    assert _quick(scoring="knn_accuracy", n_splits=2).fit(X, y).n_splits_ == 2
    assert AutoSimilarity().get_params()["n_splits"] == "auto"
    from tripletml.triplets import random_class_triplets     # a later fit on answers
    knn.set_params(scoring="map").fit(X, triplets=random_class_triplets(y, 300, random_state=0))
    assert not hasattr(knn, "n_splits_")


def test_verbose_prints_rounds(capsys):
    X, y = iris()
    _quick(verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "AutoSimilarity round 1/" in err and "refit in" in err


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------
@pytest.mark.parametrize("params, exc, msg", [
    (dict(time_budget=0), ValueError, "AutoSimilarity: parameter time_budget=0 must be > 0"),
    (dict(time_budget=-1.0), ValueError, "time_budget"),
    (dict(time_budget="10"), TypeError, "AutoSimilarity: parameter time_budget"),
    (dict(n_splits=0), ValueError, "n_splits"),
    (dict(n_splits=1.5), TypeError, "n_splits"),
    (dict(n_splits="three"), TypeError, "n_splits='three' must be an integer >= 1 or 'auto'"),
    (dict(validation_size=1.0), ValueError, "validation_size"),
    (dict(factor=1), ValueError, "factor"),
    (dict(n_jobs=0), ValueError, "n_jobs=0"),
    (dict(candidates="SDCA"), TypeError, "candidates must be None or a list"),
    (dict(candidates=[]), ValueError, "candidates is empty"),
    (dict(candidates=[{"learner": "Nope"}]), ValueError, r"AutoSimilarity: candidates\[0\]"),
    (dict(candidates=[{"learner": "MatrixPerceptron"}]), ValueError, "multi-label"),
    (dict(candidates=[{"learner": "SDCA", "grid": {"lam": [1]}}]), ValueError,
     "SDCA has no parameter 'lam'"),
    (dict(candidates=[{"learner": "SDCA", "grid": {"alpha": 0.1}}]), TypeError,
     "non-empty list"),
    (dict(candidates=[{"learner": "SDCA", "budget": ("epochs", 3)}]), ValueError,
     "budget parameter 'epochs'"),
    (dict(candidates=[{"learner": "SDCA", "budget": ("n_triplets", 0)}]), ValueError,
     "budget"),
    (dict(candidates=[{"learner": "SDCA", "grid": {"preprocessing": ["zca"]}}]), ValueError,
     "preprocessing values"),
    (dict(candidates=[{"learner": "SDCA", "oops": 1}]), ValueError, "unknown key"),
    (dict(candidates=[{"learner": 3}]), TypeError, "'learner' must be"),
])
def test_bad_parameters(params, exc, msg):
    X, y = iris()
    with pytest.raises(exc, match=msg):
        AutoSimilarity(**params).fit(X, y)


def test_bad_data():
    X, y = iris()
    with pytest.raises(ValueError, match="AutoSimilarity: y has one class only"):
        AutoSimilarity().fit(X, np.zeros(150))
    y2 = y.copy()
    y2[:2] = 7                       # a class of two items
    with pytest.raises(ValueError, match=r"AutoSimilarity: class\(es\) \[7\] have fewer than"):
        AutoSimilarity().fit(X, y2)
    with pytest.raises(ValueError, match="AutoSimilarity: fit needs class labels"):
        AutoSimilarity().fit(X, None)
    with pytest.raises(ValueError, match="AutoSimilarity: X has 150 rows but y has 10"):
        AutoSimilarity().fit(X, y[:10])
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="AutoSimilarity"):
        AutoSimilarity().fit(Xn, y)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        AutoSimilarity().similarity(X)
    auto = AutoSimilarity(candidates=[{"learner": "Euclidean"}]).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        auto.similarity(X[:, :3])


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------
def test_cli_fit_auto_then_evaluate_and_index(tmp_path, capsys):
    import json

    from sklearn.datasets import dump_svmlight_file

    from tripletml.cli import main
    X, y = iris()
    data = tmp_path / "iris.svm"
    dump_svmlight_file(X, y, str(data), zero_based=False)
    model = tmp_path / "auto.npz"
    cands = json.dumps([{"learner": "Euclidean"},
                        {"learner": "SDCA", "grid": {"alpha": [0.01, 0.001], "tol": [None]},
                         "budget": ["n_triplets", 600]}])
    rc = main(["fit", "auto", str(data), "-o", str(model), "--time-budget", "20",
               "--n-jobs", "1", "--seed", "0", "--param", f"candidates={cands}", "-v"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "AutoSimilarity chose" in cap.out and "saved" in cap.out
    assert "AutoSimilarity round 1/" in cap.err
    loaded = load_model(model)
    assert loaded.auto_search_["n_candidates"] == 3
    assert main(["evaluate", str(model), str(data)]) == 0
    out = capsys.readouterr().out
    assert "map" in out
    assert main(["index", "build", str(model), str(data), "-o", str(tmp_path / "ix"),
                 "--backend", "numpy"]) == 0
    assert main(["fit", "OASIS", str(data), "-o", str(tmp_path / "o.npz"),
                 "--time-budget", "3"]) == 2
    assert "--time-budget applies to 'tripletml fit auto' only" in capsys.readouterr().err


def test_blas_limit_uses_one_cached_controller_per_process():
    from threadpoolctl import threadpool_info

    from tripletml.auto import race as auto
    with auto._blas_limit(None):            # no limit asked: nothing is inspected
        pass
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    if not blas:
        pytest.skip("no BLAS library visible to threadpoolctl")
    before = {i["filepath"]: i["num_threads"] for i in blas}
    with auto._blas_limit(1):
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    ctl = auto._CONTROLLERS[os.getpid()]
    with auto._blas_limit(1):
        pass
    assert auto._CONTROLLERS[os.getpid()] is ctl
    after = {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    assert after == before                  # restored on exit


# --------------------------------------------------------------------------
# resources: dense d x d candidates at large d (issue 26, item 7)
# --------------------------------------------------------------------------
def _sparse_wide(n_per_class=8, n_classes=4, d=20_000):
    import scipy.sparse as sp
    X = sp.random(n_per_class * n_classes, d, density=0.002, format="csr", random_state=0)
    return X, np.repeat(np.arange(n_classes), n_per_class)


def test_sparse_large_d_skips_the_dense_candidates_and_says_why():
    """The issue's case with few rows: SML (34 eigendecompositions of a
    20,000 x 20,000 matrix in its pilot) is skipped before it starts, with
    the reason recorded; the race still returns a fitted winner.  (The
    default race's cheap stage now races sparse-safe and may spend a short
    budget before SML's stage: tests/test_auto_sparse_safe.py.)"""
    from tripletml.auto.candidates import DEFAULT_CANDIDATES

    X, y = _sparse_wide()
    specs = [DEFAULT_CANDIDATES[0]] + [c for c in DEFAULT_CANDIDATES if c["learner"] == "SML"]
    with pytest.warns(UserWarning, match="race with None and 'normalize'"):
        auto = AutoSimilarity(candidates=specs, time_budget=5, random_state=0).fit(X, y)
    sml = [s for s in auto.skipped_ if s["learner"] == "SML" and s["candidate"] is not None]
    assert sml and sml[0]["params"]["preprocessing"] is None
    assert sml[0]["params"]["max_iter"] == 33                  # the pilot was not started
    assert sml[0]["reason"].startswith(("time: SML", "memory: SML"))
    assert "20000 x 20000" in sml[0]["reason"]
    res = auto.cv_results_
    row = [i for i in range(len(res["candidate"])) if res["candidate"][i] == sml[0]["candidate"]]
    assert len(row) == 1 and np.isnan(res["mean_validation_score"][row[0]])
    assert res["stopped"][row[0]] == sml[0]["reason"]
    # the centering candidates raced sparse-safe (tests/test_auto_sparse_safe.py)
    assert auto.best_params_["preprocessing"] in (None, "normalize")
    assert auto.n_features_in_ == 20_000


def test_small_sets_never_probe_the_machine(monkeypatch):
    """Work no larger than the probe's own is never measured nor skipped:
    the shipped-size race is the one it was."""
    from tripletml.auto import resources as auto_mod

    def boom(*args):
        raise AssertionError("probed")

    monkeypatch.setattr(auto_mod, "_machine_speed", boom)
    monkeypatch.setattr(auto_mod, "_available_memory", boom)
    X, y = iris()
    a = AutoSimilarity(random_state=0, time_budget=1e4).fit(X, y)
    assert a.skipped_ == []
    assert not any(s.startswith(("time", "memory")) for s in a.cv_results_["stopped"])


def _wide_dense(d=520):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 12)
    return rng.standard_normal((36, d)) + y[:, None], y


def test_dense_arrays_beyond_the_available_memory_are_skipped(monkeypatch):
    from tripletml.auto import resources as auto_mod

    monkeypatch.setattr(auto_mod, "_available_memory", lambda: 1e6)   # 1 MB left
    X, y = _wide_dense()
    cands = [{"learner": "Euclidean"}, {"learner": "KISSME", "grid": {"preprocessing": [None]}}]
    a = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    (s,) = a.skipped_
    assert s["learner"] == "KISSME" and s["reason"].startswith("memory: KISSME holds 6 dense")
    assert "520 x 520" in s["reason"]
    assert a.best_params_ == {"learner": "Euclidean"}
    # nothing left to race: a clear error naming the estimator and the reason
    with pytest.raises(RuntimeError, match=r"AutoSimilarity: no candidate finished.*memory"):
        AutoSimilarity(candidates=cands[1:], random_state=0, time_budget=1e4).fit(X, y)


def test_a_racer_too_costly_at_a_larger_budget_keeps_its_last_score(monkeypatch):
    """Four racers whose (mocked) dense work is one eigendecomposition per
    triplet: fitted at 300 triplets (6,000 s predicted of a 10,000 s
    budget), not refitted at 900 (18,000 s); the winner keeps the score of
    its last fit and is refitted with the budget it was scored at."""
    from tripletml.auto import resources as auto_mod

    X, y = iris()
    d = X.shape[1]
    monkeypatch.setattr(auto_mod, "_PROBE_SIDE", 1)
    monkeypatch.setitem(auto_mod._DENSE_WORK, "OASIS", (0, lambda p: p["n_triplets"], 0))
    monkeypatch.setattr(auto_mod, "_machine_speed",
                        lambda d_: (300 * auto_mod._EIGH_FLOPS * d**3 / 6000.0, 1e30))
    cands = [{"learner": "OASIS", "grid": {"C": [1e-3, 1e-2, 1e-1, 1.0],
                                           "preprocessing": [None]},
              "budget": ("n_triplets", 900)}]
    a = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    res = a.cv_results_
    assert len(res["round"]) == 4 and (res["round"] == 0).all() and (res["budget"] == 300).all()
    assert np.isfinite(res["mean_validation_score"]).all()
    assert len(a.skipped_) == 2             # the best ceil(4 / 3) went on to round 1
    assert all(s["round"] == 1 and s["params"]["n_triplets"] == 900
               and s["reason"].startswith("time: OASIS's dense work (900 eigendecomposition")
               for s in a.skipped_)
    assert a.best_params_["n_triplets"] == 300 and a.best_estimator_.n_triplets == 300
    assert a.best_params_["C"] in {s["params"]["C"] for s in a.skipped_}
    # the two held racers stay in the race with their round-0 scores
    stopped = sorted(w.split(":")[0] for w in res["stopped"])
    assert stopped == ["", "halved", "halved", "stage_end"]


def test_no_fit_starts_with_less_than_its_shortest_time_left():
    from tripletml.auto.candidates import _expand_candidates
    from tripletml.auto.race import _run_job

    X, y = iris()
    (cand,) = _expand_candidates([{"learner": "OASIS", "budget": ("n_triplets", 100)}])
    fi, vi = np.arange(0, 150, 2), np.arange(1, 150, 2)
    soon = time.time() + 100.0
    assert _run_job(cand, X, y, fi, vi, 100, 0, None, soon, None, min_secs=1000.0) is None
    score, secs, _, error, _ = _run_job(cand, X, y, fi, vi, 100, 0, None, soon, None,
                                        min_secs=1.0)
    assert np.isfinite(score) and error == ""


def test_a_later_split_does_not_start_when_the_first_took_longer_than_the_time_left():
    """The jobs of a round share what each candidate's fits took: a split
    is not started when an earlier split of the same candidate took longer
    than the time left (the dense-work bound can be far below a fit's time
    on large arrays: dexter's OASIS took 8-17 s per split against a 4 s
    bound)."""
    from tripletml.auto.candidates import _expand_candidates
    from tripletml.auto.race import _run_job

    X, y = iris()
    (cand,) = _expand_candidates([{"learner": "OASIS", "budget": ("n_triplets", 100)}])
    fi, vi = np.arange(0, 150, 2), np.arange(1, 150, 2)
    seen = {}
    res = _run_job(cand, X, y, fi, vi, 100, 0, None, time.time() + 100.0, None,
                   min_secs=0.0, seen=seen, key=7)
    assert res is not None and seen[7] == pytest.approx(res[1])
    seen[7] = 500.0                          # as if the first split had taken 500 s
    assert _run_job(cand, X, y, fi, vi, 100, 1, None, time.time() + 100.0, None,
                    min_secs=0.0, seen=seen, key=7) is None
    assert _run_job(cand, X, y, fi, vi, 100, 1, None, time.time() + 100.0, None,
                    min_secs=0.0, seen=seen, key=8) is not None       # another candidate


def test_after_the_deadline_only_the_free_baselines_are_fitted():
    """A candidate without a budget but with dense work (KISSME) is held to
    the deadline like a budgeted one; a free baseline always scores."""
    from tripletml.auto.candidates import _expand_candidates
    from tripletml.auto.race import _run_job

    X, y = iris()
    kiss, euc = _expand_candidates([{"learner": "KISSME"}, {"learner": "Euclidean"}])
    fi, vi = np.arange(0, 150, 2), np.arange(1, 150, 2)
    past = time.time() - 1.0
    assert _run_job(kiss, X, y, fi, vi, None, 0, None, past, None, min_secs=0.0) is None
    score, _, _, error, _ = _run_job(euc, X, y, fi, vi, None, 0, None, past, None,
                                     min_secs=-1.0)
    assert np.isfinite(score) and error == ""


def test_dense_work_table_and_fallbacks():
    from tripletml.auto.resources import _dense_work
    from tripletml.algorithms.itml.estimator import ITML
    from tripletml.algorithms.loreta.estimator import LORETA
    from tripletml.algorithms.sml.estimator import SML

    assert _dense_work(SML(), {"max_iter": 33}) == (2, 34, 0, 0, 0, 0)
    assert _dense_work(OASIS(), {"n_triplets": 900}) == (1, 0, 0, 900, 0, 3)
    # the tail average: per pass its restart, per block of 1,000+ steps the
    # addition of the weighted model; the final division
    assert _dense_work(OASIS(), {"n_triplets": 30000, "max_iter": 3}) == (1, 0, 0, 30000, 0, 64)
    assert _dense_work(OASIS(), {"n_triplets": 30000, "max_iter": 9, "tol": 1e-3})[5] == 43
    assert _dense_work(OASIS(), {"n_triplets": 30000, "average": False})[5] == 0
    # SDCA: its objectives after every pass and its output
    assert _dense_work(tm.SDCA(), {"n_triplets": 100, "max_iter": 3}) == (1, 0, 0, 300, 0, 4)
    assert _dense_work(tm.Euclidean(), {}) == (0, 0, 0, 0, 0, 0)
    assert _dense_work(LORETA(), {}) == (0, 0, 0, 0, 0, 0)
    # NCA: a pass over all row pairs per iteration; LMNN: at least one
    assert _dense_work(tm.NCA(), {"max_iter": 40}) == (2, 1, 0, 0, 40, 0)
    assert _dense_work(tm.LMNN(), {}) == (2, 1, 0, 0, 1, 0)

    class MyITML(ITML):                      # a subclass inherits its parent's entry
        pass

    assert _dense_work(MyITML(), {}) == (2, 1, 0, 0, 0, 0)


def test_the_pairs_of_many_rows_are_costed():
    """NCA's n^2 pairs per iteration count in the time check: many rows and
    a large max_iter are skipped before the fit with a reason naming the
    row pairs; few rows are free of the probe."""
    from tripletml.auto.candidates import _expand_candidates
    from tripletml.auto.resources import check_resources

    cand = _expand_candidates([{"learner": "NCA", "grid": {"preprocessing": [None]},
                                "budget": ("max_iter", 10**6)}])[0]
    ctx = {"X": np.zeros((20000, 16)), "deadline": time.time() + 1.0, "memory": None,
           "speed": (1e10, 1e9), "n_workers": 1}
    why, secs = check_resources(ctx, cand, 10**6)
    assert why.startswith("time: NCA") and "20000^2 row pairs" in why and secs > 1.0
    ctx["X"] = np.zeros((30, 16))
    assert check_resources(ctx, cand, 10) == ("", 0.0)


def test_oasis_average_and_every_split_are_costed():
    """OASIS on wide rows writes its d x d tail average in full once per
    block (on dexter's 20,000 features a race round overran a 20 s budget
    by 8 s): those writes are costed at the rate a fresh array is filled,
    and the race's validation splits one after the other.  The seconds
    returned are one fit's (a job's own lower bound)."""
    from tripletml.auto.candidates import _expand_candidates
    from tripletml.auto.resources import check_resources

    cand = _expand_candidates([{"learner": "OASIS", "grid": {"preprocessing": [None]},
                                "budget": ("n_triplets", 3000)}])[0]
    d = 2000
    X = sp.random(50, d, density=0.001, format="csr", random_state=0)
    # 3,000 triplets: 3 blocks -> W, the restart, 3 additions and the
    # division = 6 d^2 writes
    ctx = {"X": X, "deadline": time.time() + 100.0, "memory": None, "n_workers": 1,
           "speed": (1e12, 1e12, 6.0 * d * d / 10.0), "splits": [None]}
    why, secs = check_resources(ctx, cand, 3000)
    assert why == "" and secs == pytest.approx(10.0, rel=1e-3)
    ctx["splits"] = [None] * 3 * 4           # 12 fits of 10 s, 4 at a time: 30 s
    ctx["n_workers"] = 4
    assert check_resources(ctx, cand, 3000)[0] == ""
    ctx["n_workers"] = 1                     # 120 s > 100 s left
    why, secs = check_resources(ctx, cand, 3000)
    assert why.startswith("time: OASIS") and "written 6 time(s)" in why
    assert "12 fit(s) of 10 s" in why and secs == pytest.approx(10.0, rel=1e-3)
    # a 2-tuple speed (before the fresh-array rate) still works
    ctx["speed"], ctx["splits"] = (1e12, 6.0 * d * d / 10.0), [None]
    assert check_resources(ctx, cand, 3000)[1] == pytest.approx(10.0, rel=1e-3)


def test_machine_speed_measures_fresh_arrays():
    from tripletml.auto.resources import _machine_speed

    rate, fill, fresh = _machine_speed(100.0)
    assert rate > 0 and fill > 0 and fresh > 0


# --------------------------------------------------------------------------
# scoring: the criterion the race maximizes (issue 27, item 4)
# --------------------------------------------------------------------------
def _local_vs_global(seed=0):
    """Two classes made of tight clusters of 6 scattered at random (raw
    Euclidean: perfect nearest neighbors, poor mAP) plus a noisy class
    feature at a small scale (standardized, it pulls the classes apart:
    better mAP, worse 1-NN)."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for c in range(60):
        pts = rng.uniform(0, 100, 2) + rng.normal(0, 0.05, (6, 2))
        f0 = (c % 2) + rng.normal(0, 0.6, (6, 1))
        X.append(np.hstack([f0, pts]))
        y += [c % 2] * 6
    return np.vstack(X), np.array(y)


_PREP_RACE = [{"learner": "Euclidean", "grid": {"preprocessing": [None, "standardize"]}}]


@pytest.mark.parametrize("scoring,winner", [("map", "standardize"), ("knn_accuracy", None),
                                            ("precision@1", None),
                                            ("precision@5", "standardize")])
def test_scoring_changes_the_selection_criterion(scoring, winner):
    from tripletml.metrics import validation_score
    X, y = _local_vs_global()
    a = AutoSimilarity(candidates=_PREP_RACE, scoring=scoring, random_state=0).fit(X, y)
    assert a.best_params_["preprocessing"] == winner
    assert a.scoring == scoring
    # the reported scores are in that criterion
    i = int(np.argmax(a.cv_results_["mean_validation_score"]))
    assert a.best_score_ == pytest.approx(a.cv_results_["mean_validation_score"][i])
    if scoring == "knn_accuracy":
        assert a.best_score_ > 0.9            # raw: cluster mates are the neighbors


def test_validation_score_matches_the_metrics():
    from tripletml.metrics import evaluate_retrieval, knn_error, validation_score
    X, y = iris()
    m = tm.Euclidean().fit(X, y)
    assert validation_score(m, X, y) == pytest.approx(evaluate_retrieval(m, X, y, k=())["map"])
    assert validation_score(m, X, y, "precision@10") == pytest.approx(
        evaluate_retrieval(m, X, y, k=(10,))["precision_at_10"])
    assert validation_score(m, X, y, "knn_accuracy") == pytest.approx(1 - knn_error(m, X, y))
    assert validation_score(m, X, y, "knn_accuracy@5") == pytest.approx(
        1 - knn_error(m, X, y, k=5))
    # in leave-one-out, precision@1 is the 1-NN accuracy
    assert validation_score(m, X, y, "precision@1") == pytest.approx(
        validation_score(m, X, y, "knn_accuracy"))


@pytest.mark.parametrize("scoring", ["prec@1", "precision@0", "precision@", "precision",
                                     "knn_accuracy@x", "knn_accuracy@01", "MAP", "", 3, None,
                                     "map@5"])
def test_bad_scoring_raises_naming_autosimilarity(scoring):
    X, y = iris()
    with pytest.raises(ValueError) as info:
        _quick(scoring=scoring).fit(X, y)
    assert str(info.value) == (
        f"AutoSimilarity: parameter scoring={scoring!r} must be 'map', 'precision@<k>' "
        "(e.g. 'precision@1', 'precision@10'), 'knn_accuracy' or 'knn_accuracy@<k>' with an "
        "integer k >= 1.")


def test_default_race_is_the_map_race_except_for_the_knn_scores():
    """The retrieval scores race DEFAULT_CANDIDATES; the k-NN accuracies add
    the neighbourhood learners (issue 39 s3; tests/test_issue39_knn_race.py)."""
    from tripletml.auto.candidates import KNN_CANDIDATES

    for scoring in ("map", "precision@10"):
        assert AutoSimilarity(scoring=scoring)._candidate_specs() is tm.auto.DEFAULT_CANDIDATES
    for scoring in ("knn_accuracy", "knn_accuracy@3"):
        assert AutoSimilarity(scoring=scoring)._candidate_specs() is KNN_CANDIDATES


def test_race_may_vary_sampling_and_keeps_it_in_results():
    X, y = iris()
    cands = [{"learner": "OASIS", "grid": {"C": [0.1], "sampling": ["class", "knn"]},
              "budget": ("n_triplets", 900)}]
    a = AutoSimilarity(candidates=cands, scoring="knn_accuracy", random_state=0,
                       time_budget=1e4).fit(X, y)
    assert {p["sampling"] for p in a.cv_results_["params"]} == {"class", "knn"}
    assert a.best_params_["sampling"] in ("class", "knn")
    assert a.best_estimator_.sampling == a.best_params_["sampling"]


def test_the_race_uses_the_learners_memory_rule(monkeypatch):
    """The race's memory check is the learners' own (address-space and
    cgroup limits included), and a racer whose own check refuses still
    drops out instead of ending the race."""
    import tripletml.core.validation as val
    from tripletml.auto import resources as auto_mod

    monkeypatch.setattr(val, "available_memory", lambda: 123456789)
    assert auto_mod._available_memory() == 123456789.0
    monkeypatch.setattr(auto_mod, "_available_memory", lambda: float("inf"))  # race check passes
    monkeypatch.setattr(val, "available_memory", lambda: 1000)               # the fit's refuses
    X, y = _wide_dense()
    cands = [{"learner": "Euclidean"}, {"learner": "KISSME", "grid": {"preprocessing": [None]}}]
    a = AutoSimilarity(candidates=cands, random_state=0, time_budget=1e4).fit(X, y)
    assert a.best_params_ == {"learner": "Euclidean"}
    errors = [e for e in a.cv_results_["error"] if e]
    assert errors and all(e.startswith("MemoryError: KISSME") for e in errors)
