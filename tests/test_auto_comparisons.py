"""AutoSimilarity fitted on comparisons (issue 38 s1): triplets and pairs in
every form, validated on held-out items, never below the no-learning
candidates on its validation items, and clear errors for bad input."""
import numpy as np
import pytest
from sklearn.model_selection import GroupKFold

from tripletml import AutoSimilarity
from tripletml.auto.comparisons import item_splits, parse_comparisons, relative_step_cap
from tripletml.metrics import triplet_accuracy

FAST = [{"learner": "Euclidean", "grid": {"preprocessing": [None, "normalize"]}},
        {"learner": "OASIS", "grid": {"preprocessing": ["normalize"], "max_iter": [1]},
         "kappa": [0.1, 1.0]}]


def _items(n=40, d=12, seed=0):
    """Items whose answers follow a hidden bilinear similarity of the
    normalized rows (the first three features count ten times more), with
    10 % of the answers flipped."""
    rng = np.random.default_rng(seed)
    X = np.abs(rng.standard_normal((n, d)))
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    w = np.ones(d)
    w[:3] = 10.0
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(1500)])
    sp_ = (Xn[T[:, 0]] * Xn[T[:, 1]] * w).sum(1)
    sn_ = (Xn[T[:, 0]] * Xn[T[:, 2]] * w).sum(1)
    T[sp_ < sn_] = T[sp_ < sn_][:, [0, 2, 1]]
    flip = rng.random(len(T)) < 0.1
    T[flip] = T[flip][:, [0, 2, 1]]
    return X, T


def _auto(**kw):
    kw.setdefault("candidates", FAST)
    return AutoSimilarity(random_state=0, n_splits=2, time_budget=60, **kw)


def test_triplets_race_never_below_the_baselines_on_validation():
    X, T = _items()
    a = _auto().fit(X, triplets=T)
    r = a.cv_results_
    base = [i for i, n in enumerate(r["learner"]) if n == "Euclidean"]
    assert a.best_score_ >= max(r["mean_validation_score"][i] for i in base)
    assert a.best_score_ == pytest.approx(np.nanmax(r["mean_validation_score"]))
    assert a.supervision_ == "triplets" and a.scoring_ == "triplet_accuracy"
    assert r["rank_validation_score"].min() == 1
    assert 0.5 < triplet_accuracy(a, X, T) <= 1.0
    # the learned race beats the raw metric here (the hidden metric is not Euclidean)
    assert a.best_params_["learner"] == "OASIS"


def test_point_triplets_and_index_triplets_with_preprocessor_agree():
    X, T = _items(n=30)
    a = _auto().fit(X, triplets=T)
    b = _auto(preprocessor=X).fit(T)   # the rows the ids name, deduplicated into items
    c = _auto().fit(X[T])              # point triplets: likewise
    for m in (b, c):
        assert m.supervision_ == "triplets" and m.n_features_in_ == X.shape[1]
        assert m.best_params_["learner"] == a.best_params_["learner"]
        assert triplet_accuracy(m, X, T) > 0.6


def test_pairs_race_scores_by_auc_and_accepts_0_1_labels():
    X, T = _items(n=30)
    P = np.vstack([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.r_[np.ones(len(T)), np.zeros(len(T))]
    a = _auto().fit(X, y, pairs=P)
    assert a.supervision_ == "pairs" and a.scoring_ == "roc_auc"
    assert 0.5 < a.best_score_ <= 1.0
    b = _auto().fit(X[P], np.where(y > 0, 1, -1))
    assert b.supervision_ == "pairs"


def test_groups_and_cv_hold_out_whole_groups():
    X, T = _items(n=40)
    groups = np.repeat(np.arange(8), 5)
    a = _auto(cv=GroupKFold(n_splits=2)).fit(X, triplets=T, groups=groups)
    assert a.best_score_ > 0.5
    comp = parse_comparisons(a, X, None, T, None)
    for fi, vi in item_splits(_auto(cv=GroupKFold(n_splits=2)), comp, groups, 0):
        assert not set(groups[fi]) & set(groups[vi])


def test_bad_input_clear_errors_and_nothing_half_fitted():
    X, T = _items(n=30)
    a = _auto()
    with pytest.raises(ValueError, match="AutoSimilarity.*out of range|AutoSimilarity.*index"):
        a.fit(X, triplets=np.vstack([T, [[0, 1, 30]]]))
    assert not hasattr(a, "best_estimator_")
    with pytest.raises(ValueError, match="AutoSimilarity"):
        a.fit(X, triplets=np.vstack([T, [[2, 2, 3]]]))              # degenerate
    with pytest.raises(ValueError, match="groups must hold one group per row"):
        a.fit(X, triplets=T, groups=np.arange(5))
    with pytest.raises(ValueError, match="takes no y"):
        a.fit(X, np.zeros(30), triplets=T)
    few = np.array([[0, 1, 2]])
    with pytest.raises(ValueError, match="leaves no triplet"):
        a.fit(X, triplets=few)
    P = T[:, :2]
    with pytest.raises(ValueError, match="all labeled similar"):
        a.fit(X, np.ones(len(P)), pairs=P)
    with pytest.raises(ValueError, match="does not apply to triplets"):
        _auto(scoring="roc_auc").fit(X, triplets=T)
    with pytest.raises(ValueError, match="groups=, cv= and holdout= apply"):
        _auto().fit(X, np.arange(30) % 3, groups=np.arange(30))
    assert not hasattr(a, "best_estimator_")


def test_nan_empty_and_misshaped_supervision_refused():
    X, T = _items(n=30)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="AutoSimilarity.*(NaN|infinity)"):
        _auto().fit(Xn, triplets=T)
    with pytest.raises(ValueError, match="AutoSimilarity"):
        _auto().fit(X, triplets=np.empty((0, 3), dtype=int))
    with pytest.raises(ValueError, match="AutoSimilarity"):
        _auto().fit(X, triplets=T[:, :2])
    with pytest.raises(ValueError, match="AutoSimilarity"):
        _auto().fit(X, triplets=T - 1)                  # -1: out of range


def test_relabeled_items_give_the_same_race():
    """Permuting the items (rows of X and the ids in the answers) with a
    splitter keyed to the items' groups changes nothing."""
    X, T = _items(n=40)
    groups = np.repeat(np.arange(8), 5)
    perm = np.random.default_rng(7).permutation(40)
    inv = np.argsort(perm)
    a = _auto(cv=GroupKFold(n_splits=2)).fit(X, triplets=T, groups=groups)
    b = _auto(cv=GroupKFold(n_splits=2)).fit(X[perm], triplets=inv[T], groups=groups[perm])
    assert a.best_params_["learner"] == b.best_params_["learner"]
    np.testing.assert_allclose(a.cv_results_["mean_validation_score"][:2],
                               b.cv_results_["mean_validation_score"][:2], atol=1e-12)


def test_relative_step_cap_is_scale_free():
    Z = np.abs(np.random.default_rng(0).standard_normal((30, 8)))
    c = relative_step_cap(0.5, Z, 0)
    assert relative_step_cap(0.5, 10 * Z, 0) == pytest.approx(c / 1e4, rel=1e-12)
    assert relative_step_cap(1.0, Z, 0) == pytest.approx(2 * c, rel=1e-12)


def test_race_halves_over_splits_and_compares_on_the_same_splits():
    """Successive halving over the item splits: every racer on split 0, the
    better half of the learned racers on the next split; the baselines on
    every split; a halved racer is not compared (NaN mean) and says why."""
    X, T = _items()
    kappas = [1e-3, 1e-2, 0.1, 1.0]
    cands = [FAST[0], {**FAST[1], "kappa": kappas}]
    a = AutoSimilarity(random_state=0, cv=3, time_budget=120, candidates=cands).fit(
        X, triplets=T)
    r = a.cv_results_
    learned = np.flatnonzero(r["learner"] == "OASIS")
    n_scored = [np.isfinite([r[f"split{s}_validation_score"][i] for s in range(3)]).sum()
                for i in range(len(r["learner"]))]
    assert all(n_scored[i] == 3 for i in np.flatnonzero(r["learner"] == "Euclidean"))
    assert sorted(n_scored[i] for i in learned) == [1, 1, 2, 3]
    halved = [i for i in learned if n_scored[i] < 3]
    assert all(str(r["stopped"][i]).startswith("halved") for i in halved)
    assert np.isnan(r["mean_validation_score"][halved]).all()
    # the racers that went on were the better ones on the splits they shared
    s0 = r["split0_validation_score"]
    assert min(s0[i] for i in learned if n_scored[i] >= 2) >= max(
        s0[i] for i in learned if n_scored[i] == 1)
    assert a.best_score_ == pytest.approx(np.nanmax(r["mean_validation_score"]))


def test_a_spent_budget_compares_every_racer_on_its_first_split():
    """When the budget ends the race, the winner is chosen on the splits
    every compared racer completed (here the first), never on more splits
    for the baselines than for the learners."""
    from tripletml.auto.comparisons import compared

    rows = [{"scores": [0.6, 0.7, 0.65], "error": ""},      # a baseline, every split
            {"scores": [0.8], "error": ""},                 # a learner, stopped by time
            {"scores": [], "error": ""},                     # never started
            {"scores": [0.9], "error": "ValueError: x"}]     # failed: not compared
    assert compared(rows, 0) == {0: 0.6, 1: 0.8}
    assert compared(rows, 2) == {0: pytest.approx(0.65)}


def test_relative_alpha_is_scale_free_and_rho_sets_sdca_alpha():
    """SDCA's alpha from ``rho``: c X gives c^4 alpha (the objective's
    minimiser then keeps its margins); the racer sets it on the fit rows."""
    from tripletml.auto.comparisons import expand_racers, relative_alpha

    X, T = _items()
    a1 = relative_alpha(1e-3, X, 0)
    assert relative_alpha(1e-3, 10.0 * X, 0) == pytest.approx(1e4 * a1, rel=1e-9)
    est = _auto(candidates=[{"learner": "SDCA", "grid": {"preprocessing": [None]},
                             "rho": [1e-3]}])
    (racer,) = expand_racers(est)
    assert racer.params()["rho"] == 1e-3
    from tripletml.core.preprocessing import Preprocessor

    Z = Preprocessor(None).fit(X).transform(X)     # the rows as SDCA sees them
    assert racer.make(X, 0).get_params()["alpha"] == pytest.approx(
        relative_alpha(1e-3, Z, 0), rel=1e-9)
    with pytest.raises(ValueError, match="'rho' sets the regularization alpha"):
        expand_racers(_auto(candidates=[{"learner": "OASIS", "rho": [1.0]}]))
    with pytest.raises(ValueError, match="AutoSimilarity: no rows"):
        relative_alpha(1e-3, np.zeros((0, 4)), 0)
    assert relative_alpha(1e-3, np.full((5, 4), np.nan), 0) == 1e-3   # no scale: rho itself
    with pytest.raises(ValueError, match="one relative parameter"):
        expand_racers(_auto(candidates=[{"learner": "SDCA", "rho": [1.0], "kappa": [1.0]}]))


def _random_answers(seed, n=40, d=12, m=1500):
    """Answers that no feature explains: each query's closer item drawn at
    random."""
    rng = np.random.default_rng(seed)
    X = np.abs(rng.standard_normal((n, d)))
    return X, np.array([rng.choice(n, 3, replace=False) for _ in range(m)])


def test_triplets_race_hands_a_noise_lead_to_the_best_baseline():
    # a learned racer that validates best on answers no feature explains won
    # by the validation answers' noise; the one-standard-error rule hands it
    # to the best no-learning racer (a lead of one standard error is still
    # reached by chance now and then) and says so on its row
    n_base = {"best": 0, "one_se": 0}
    for seed in range(6):
        X, T = _random_answers(seed)
        fits = {sel: AutoSimilarity(candidates=FAST, random_state=seed, n_splits=2,
                                    time_budget=60, selection=sel).fit(X, triplets=T)
                for sel in n_base}
        for sel, a in fits.items():
            n_base[sel] += a.best_params_["learner"] == "Euclidean"
        changed = fits["best"].best_params_ != fits["one_se"].best_params_
        why = [s for s in fits["one_se"].cv_results_["stopped"] if "one_se:" in s]
        assert len(why) == changed
        if changed:
            assert fits["one_se"].best_params_["learner"] == "Euclidean"
        assert not [s for s in fits["best"].cv_results_["stopped"] if "one_se:" in s]
    assert n_base["one_se"] > n_base["best"]


def test_one_se_on_triplets_is_the_clustered_se_of_the_paired_answers():
    """The rule's arithmetic against its definition, on two splits that hold
    out different items: the answers about one query item (its row in X,
    whichever split) are one cluster; a gain concentrated on a few queries
    is less evidence than the same gain spread over many."""
    from types import SimpleNamespace

    from tripletml.auto.comparisons import Comparisons, _one_standard_error, _Part

    rng = np.random.default_rng(1)
    n = 30
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(3000)])
    comp = Comparisons(kind="triplets", X=np.zeros((n, 2)), index=T, labels=None,
                       form="triplets")
    parts = [_Part(np.arange(6, n)), _Part(np.arange(0, n - 6))]
    splits = [(None, p) for p in parts]
    answers = [comp.among(p.items)[0] for p in parts]
    queries = [p.items[t[:, 0]] for p, t in zip(parts, answers)]     # rows of X
    ref = [rng.integers(0, 2, len(t)).astype(bool) for t in answers]
    racers = [SimpleNamespace(name="Euclidean", cand=SimpleNamespace(learns=False)),
              SimpleNamespace(name="OASIS", cand=SimpleNamespace(learns=True))]
    verdicts = set()
    for spread in (False, True):
        for n_gain in range(0, 400, 20):
            best = [r.copy() for r in ref]
            for b, q in zip(best, queries):
                # the gain: wrong answers made right, about the queries 6..11
                # only (concentrated) or about every query (spread)
                pool = np.flatnonzero(~b & ((q >= 6) & (q < 12) | spread))
                b[pool[:n_gain // 2]] = True
                b[np.flatnonzero(b)[:40]] = False        # and 40 right ones made wrong
            d = np.concatenate([b.astype(float) - r for b, r in zip(best, ref)])
            g = np.concatenate(queries)
            res = d - d.mean()
            G = np.unique(g)
            se = np.sqrt(G.size / (G.size - 1) * sum(res[g == k].sum() ** 2 for k in G)) / d.size
            naive = d.std(ddof=1) / np.sqrt(d.size)
            rows = [{"items": ref, "stopped": "", "preprocessing": "normalize"},
                    {"items": best, "stopped": "", "preprocessing": "normalize"}]
            scores = {0: float(np.mean([r.mean() for r in ref])),
                      1: float(np.mean([b.mean() for b in best]))}
            rec = {"rows": rows, "racers": racers, "rounds": 2}
            win = _one_standard_error(rec, comp, splits, scores, 1)
            assert win == (1 if d.mean() > se + 1e-12 else 0), (spread, n_gain, d.mean(), se)
            assert ("one_se:" in rows[1]["stopped"]) == (win == 0)
            verdicts.add((win, d.mean() > naive))
    # a lead above the answers' naive standard error but not above the
    # clustered one went to the baseline: the clusters changed a verdict
    assert (0, True) in verdicts and (1, True) in verdicts
