"""Issue 39, section 3: the neighbourhood learners in the k-NN race, and the
race never picking a learner that validates below the no-learning baseline."""
import numpy as np

from tripletml import AutoSimilarity
from tripletml.auto import DEFAULT_CANDIDATES
from tripletml.auto.candidates import KNN_CANDIDATES, _expand_candidates, default_candidates


def test_knn_race_holds_the_neighbourhood_learners_and_the_map_race_is_unchanged():
    assert default_candidates("map") is DEFAULT_CANDIDATES
    assert default_candidates("precision@10") is DEFAULT_CANDIDATES
    assert default_candidates("knn_accuracy") is KNN_CANDIDATES
    assert default_candidates("knn_accuracy@3") is KNN_CANDIDATES
    names = {c.name: c for c in _expand_candidates(KNN_CANDIDATES)}
    assert {"LMNN", "NCA", "SCML", "LFDA"} <= set(names)
    # every default candidate is still there, in the same stages
    dflt = [(c.name, c.stage, tuple(sorted(c.params.items()))) for c in
            _expand_candidates(DEFAULT_CANDIDATES)]
    knn = [(c.name, c.stage, tuple(sorted(c.params.items()))) for c in
           _expand_candidates(KNN_CANDIDATES)]
    assert [k for k in knn if k[0] not in ("LMNN", "NCA", "SCML", "LFDA")] == dflt
    # LFDA (closed form) in the cheap rung; the iterative ones after SML,
    # grown by their own iteration cap; NCA (O(n^2) per step) last
    sml = max(c.stage for c in names.values() if c.name == "SML")
    assert names["LFDA"].stage == 0 and names["LFDA"].budget is None
    for n in ("LMNN", "SCML", "NCA"):
        assert names[n].stage > sml and names[n].budget[0] == "max_iter"
    assert names["NCA"].stage > names["LMNN"].stage


def _noisy_neighbours(seed, n_per=40):
    # three classes on a ring in 2 informative columns, 6 noise columns of
    # larger spread: 1-NN with the Euclidean distance is poor, a learned
    # metric that drops the noise is near perfect
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    ang = 2 * np.pi * y / 3
    X = np.c_[np.cos(ang), np.sin(ang)] * 3 + 0.5 * rng.standard_normal((y.size, 2))
    return np.c_[X, 6.0 * rng.standard_normal((y.size, 6))], y


def test_knn_race_can_pick_a_neighbourhood_learner_and_beats_euclidean():
    X, y = _noisy_neighbours(0)
    # the cheap part of the k-NN race (the iterative learners cost seconds)
    spec = [s for s in KNN_CANDIDATES if s["learner"] in ("Euclidean", "LFDA")]
    m = AutoSimilarity(candidates=spec, scoring="knn_accuracy", random_state=0).fit(X, y)
    assert m.best_params_["learner"] == "LFDA"
    Xt, yt = _noisy_neighbours(1)
    S = m.similarity(Xt, X)
    acc = np.mean(y[S.argmax(1)] == yt)
    D = ((Xt[:, None, :] - X[None]) ** 2).sum(-1)
    assert acc > np.mean(y[D.argmin(1)] == yt) + 0.1


def test_race_does_not_pick_rca_where_it_validates_below_euclidean():
    # the classes differ in 2 columns of large spread; 12 columns of tiny,
    # class-free noise: RCA whitens the within-class scatter, so the noise
    # columns get the weight of the informative ones, and it validates
    # below the raw Euclidean distance, which the race always holds
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    X = np.c_[5.0 * np.eye(3)[y][:, :2] + rng.standard_normal((120, 2)),
              1e-3 * rng.standard_normal((120, 12))]
    spec = [{"learner": "Euclidean", "grid": {"preprocessing": [None]}, "budget": None},
            {"learner": "RCA", "grid": {"preprocessing": ["standardize"]}, "budget": None}]
    m = AutoSimilarity(candidates=spec, scoring="knn_accuracy", random_state=0).fit(X, y)
    r = m.cv_results_
    score = {ln: s for ln, s in zip(r["learner"], r["mean_validation_score"])}
    assert score["RCA"] < score["Euclidean"]
    assert m.best_params_["learner"] == "Euclidean"


def test_the_estimator_races_the_knn_candidates_for_the_knn_scores():
    from tripletml import AutoSimilarity

    assert AutoSimilarity(scoring="knn_accuracy")._candidate_specs() is KNN_CANDIDATES
    assert AutoSimilarity(scoring="knn_accuracy@3")._candidate_specs() is KNN_CANDIDATES
    assert AutoSimilarity()._candidate_specs() is DEFAULT_CANDIDATES
    own = [{"learner": "Euclidean"}]
    assert AutoSimilarity(scoring="knn_accuracy", candidates=own)._candidate_specs() is own


def test_final_comparison_ties_to_rounding_go_to_the_no_learning_baseline():
    """Equal counts of correct validation items averaged in a different
    order differ in the last bit (dexter at seed 2: 0.7751322751322752
    against 0.775132275132275); such a tie goes to the candidate that
    learns nothing, a real difference to the better score."""
    from types import SimpleNamespace

    from tripletml.auto.race import choose_winner

    def ctx(scores):
        rows = [{"candidate": c, "mean_validation_score": s, "budget": 1, "stopped": "",
                 "budget_param": None, "round": 0} for c, s in enumerate(scores)]
        return {"last_scores": dict(enumerate(scores)), "rows": rows, "skipped": [],
                "cands": [SimpleNamespace(learns=True), SimpleNamespace(learns=False)]}
    assert choose_winner(ctx([0.7751322751322752, 0.775132275132275]), [0, 1], 60.0)[0] == 1
    assert choose_winner(ctx([0.7751322751322752, 0.7751322751322752]), [0, 1], 60.0)[0] == 1
    assert choose_winner(ctx([0.78, 0.775132275132275]), [0, 1], 60.0)[0] == 0
