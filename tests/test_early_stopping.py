"""Early stopping on answers about held-out items (tripletml.engine.early_stopping)
and its use by LMNN, NCA (L-BFGS), SML and ITML (the training driver): the
split, the watch, the monitors, and the refit on all answers for the best
count."""
import re

import numpy as np
import pytest

from tripletml import ITML, LMNN, NCA, SML
from tripletml.engine.early_stopping import (ValidationWatch, item_folds, pooled_curve,
                                             split_by_items, triplet_accuracy_on,
                                             within_one_standard_error)
from tripletml.linalg.linear_map import minimize_lbfgs
from _triplet_draws import hidden_answers


def _noisy_answers(seed=0, n=60, d=8, m=1500, flip=0.3):
    """Rows whose first two columns decide the answers, ``flip`` of them
    flipped: a learner that follows every answer fits noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    D = lambda a, b: ((X[a, :2] - X[b, :2]) ** 2).sum(1)
    swap = (D(t[:, 0], t[:, 1]) > D(t[:, 0], t[:, 2])) ^ (rng.random(m) < flip)
    t[swap] = t[swap][:, [0, 2, 1]]
    return X, t


# ------------------------------------------------------------------ the split
def test_split_holds_out_items_not_answers():
    _, t = _noisy_answers()
    s = split_by_items(t, 0.2, np.random.default_rng(0))
    named = np.unique(t)
    assert s.items.size == int(np.ceil(0.2 * named.size))
    held = np.isin(t, s.items)
    assert not held[s.fit].any()                      # no held-out item is fitted
    assert held[s.val, 0].all()                       # every validation head is held out
    assert np.intersect1d(s.fit, s.val).size == 0
    # the answers left out: a kept head with a held-out item
    rest = np.setdiff1d(np.arange(len(t)), np.union1d(s.fit, s.val))
    assert (~held[rest, 0] & held[rest].any(axis=1)).all()


def test_split_says_why_it_cannot_hold_out():
    one = split_by_items(np.array([[0, 0, 0]]), 0.2, np.random.default_rng(0))
    assert one.fit.size == 0 and "1 item" in one.reason
    few = split_by_items(np.array([[0, 1, 2]]), 0.2, np.random.default_rng(0))
    assert few.fit.size == 0 and "fewer than 1" in few.reason


@pytest.mark.parametrize("t, fraction, match", [
    (np.zeros((4, 2), int), 0.2, "an \\(m, 3\\) array"),
    (np.zeros((4, 3)), 0.2, "integer row indices"),
    (np.array([[0, 1, -2]]), 0.2, "negative row index"),
    (np.array([[0, 1, 2]]), 0.0, "fraction=0.0"),
    (np.array([[0, 1, 2]]), float("nan"), "fraction=nan"),
    (np.array([[0, 1, 2]]), True, "fraction=True"),
])
def test_split_refuses_bad_arguments(t, fraction, match):
    with pytest.raises(ValueError, match=f"split_by_items: .*{match}"):
        split_by_items(t, fraction, np.random.default_rng(0))


def test_accuracy_on_rows_is_the_metric_of_the_euclidean_model():
    from tripletml import Euclidean
    from tripletml.metrics import triplet_accuracy
    X, t = _noisy_answers()
    ref = triplet_accuracy(Euclidean(preprocessing="raw").fit(X, triplets=t), X, t)
    assert triplet_accuracy_on(X, t) == pytest.approx(ref)
    Z = np.zeros((3, 2))
    assert triplet_accuracy_on(Z, np.array([[0, 1, 2]])) == 0.5      # a tie is one half


def test_watch_keeps_the_earliest_best_and_counts_patience():
    """Scores .5 .7 .7 .6 on four embeddings (the share of 4 answers each
    ranks right): the best is the first .7; two iterations without a strict
    improvement end the run."""
    right, wrong = np.array([[0.0], [1.0], [3.0]]), np.array([[0.0], [3.0], [1.0]])

    def rows(k):            # k of the 4 copies ranked right: offsets per copy
        Z = np.zeros((3 * 4, 1))
        for i in range(4):
            Z[3 * i:3 * i + 3] = right if i < k else wrong
        return Z

    tt = np.array([[3 * i, 3 * i + 1, 3 * i + 2] for i in range(4)])
    w = ValidationWatch(tt, patience=2)
    stops = [w(it, rows(k)) for it, k in enumerate([2, 3, 3, 2])]
    assert w.scores == [0.5, 0.75, 0.75, 0.5]
    assert w.best_iter == 1 and w.best_score == 0.75       # the tie at 2 does not move it
    assert stops == [False, False, False, True]


def test_pooled_curve_weights_folds_by_answers_and_pads_with_the_last_iterate():
    a = ValidationWatch(np.zeros((3, 3), dtype=int), patience=5)
    b = ValidationWatch(np.zeros((1, 3), dtype=int), patience=5)
    for it, score in enumerate([0.5, 0.9]):
        a.record(it, score, eligible=it > 0)
    for it, score in enumerate([0.1, 0.2, 0.3]):
        b.record(it, score)
    curve, eligible = pooled_curve([a, b])
    np.testing.assert_allclose(curve, [(1.5 + 0.1) / 4, (2.7 + 0.2) / 4, (2.7 + 0.3) / 4])
    assert eligible.tolist() == [False, True, True]


def test_one_standard_error_keeps_what_is_within_noise_of_the_best():
    # best .73 over 1000 answers: se .014, so .72 is within it and .70 is not
    assert within_one_standard_error([0.70, 0.72, 0.73], 1000).tolist() == [False, True, True]
    # over 100 answers (se .044) all three are
    assert within_one_standard_error([0.70, 0.72, 0.73], 100).all()
    # an ineligible iterate is never a candidate, nor does it set the best
    got = within_one_standard_error([0.9, 0.72, 0.73], 1000, eligible=[False, True, True])
    assert got.tolist() == [False, True, True]


@pytest.mark.parametrize("cls", [LMNN, SML, ITML])
def test_the_probes_score_the_answers_among_each_folds_items(cls, monkeypatch):
    """Checked by brute force on what each probe received: three folds;
    each scores exactly the answers whose three items are among its scored
    items; its fitted answers name none of them (no leak); the folds' scored
    items are disjoint; the record counts them."""
    from tripletml.core.early_stopping import EarlyStoppingMixin
    seen = []
    choose = EarlyStoppingMixin._choose_count

    def spy(self, triplets, probe):
        def recording(fit, watch):
            seen.append((np.asarray(fit).copy(), np.asarray(watch.triplets).copy()))
            return probe(fit, watch)
        return choose(self, triplets, recording)

    monkeypatch.setattr(EarlyStoppingMixin, "_choose_count", spy)
    X, t = _noisy_answers()
    m = cls(random_state=0).fit(X, triplets=t)
    assert len(seen) == 3
    held = [set(np.unique(val).tolist()) for _, val in seen]
    for i, (fit, val) in enumerate(seen):
        inside = [row for row in t.tolist() if set(row) <= held[i]]
        assert sorted(map(tuple, val.tolist())) == sorted(map(tuple, inside))
        assert not any(set(row) & held[i] for row in fit.tolist())
        assert len(fit) > 0 and all(not held[i] & held[j] for j in range(i))
    n_fit, n_val = sum(len(f) for f, _ in seen), sum(len(v) for _, v in seen)
    assert f"{n_fit} answers fitted, {n_val} validated" in m.early_stopping_


def test_minimize_lbfgs_stops_when_the_monitor_says_so():
    A = np.diag([1.0, 4.0, 9.0])

    def fun(L):
        return float(np.sum((L - 1.0) ** 2 * np.diag(A))), 2 * (L - 1.0) * np.diag(A), {}

    seen = []

    def monitor(it, L):
        seen.append((it, L.copy()))
        return it == 2

    res = minimize_lbfgs(fun, np.zeros((1, 3)), max_iter=50, tol=None, verbose=0, who="t",
                         monitor=monitor)
    assert res.reason == "monitor" and res.n_iter == 2
    assert [it for it, _ in seen] == [0, 1, 2]
    np.testing.assert_array_equal(seen[0][1], np.zeros((1, 3)))
    np.testing.assert_array_equal(res.L, seen[-1][1])


# ------------------------------------------------------------ the learners
@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_refit_is_the_plain_fit_for_the_best_count(cls):
    X, t = _noisy_answers()
    m = cls(random_state=0, max_iter=60, tol=None).fit(X, triplets=t)
    n = int(m.early_stopping_.split(" answers fitted, ")[1].split(" validated")[0])
    best = int(np.flatnonzero(within_one_standard_error(m.validation_scores_, n))[0])
    assert 0 < best < m.validation_scores_.size - 1   # this data: an early stop
    assert f"iteration {best} of {m.validation_scores_.size - 1} chosen" in m.early_stopping_
    assert m.stop_reason_ == "validation" and m.n_iter_ == best
    ref = cls(random_state=0, early_stopping=False, max_iter=best, tol=None).fit(X, triplets=t)
    np.testing.assert_allclose(m.M_, ref.M_, rtol=1e-10, atol=1e-12 * np.abs(ref.M_).max())


def test_lmnn_early_stopping_beats_the_full_fit_on_new_items():
    """The point of it: crowd-like answers (15 % flipped) about few items
    with many non-negative, network-like features; on answers among items
    held out of both fits, the early-stopped map is at least the cosine it
    starts from, where the map fitted to convergence is far below it."""
    from tripletml import Euclidean
    from tripletml.metrics import triplet_accuracy
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(60, 3))
    X = np.maximum(0, Z @ rng.normal(size=(3, 200)) * 0.5 + rng.normal(size=(60, 200)))
    t = hidden_answers(rng, Z, 6000, noise=0.15)
    s = split_by_items(t, 1 / 3, np.random.default_rng(1))
    new = np.isin(t, s.items).all(axis=1)
    acc = lambda m: triplet_accuracy(m.fit(X, triplets=t[s.fit]), X, t[new])
    early = acc(LMNN(random_state=0))
    full = acc(LMNN(random_state=0, early_stopping=False))
    cosine = acc(Euclidean(preprocessing="normalize"))
    assert early >= cosine - 1e-12 and early > full + 0.1


@pytest.mark.parametrize("cls, where", [(LMNN, "tripletml.core.neighborhood"),
                                        (NCA, "tripletml.core.neighborhood"),
                                        (ITML, "tripletml.algorithms.itml.estimator")])
def test_the_start_is_kept_when_it_scores_best(cls, where, monkeypatch):
    """A watch whose scores only fall (as on the simulated crowd set of
    BENCHMARKS.md, where LMNN's and ITML's best count is 0): the model is
    the start (the identity of the preprocessed rows), with no iteration
    and no ConvergenceWarning."""
    import importlib
    import warnings

    from tripletml.engine.early_stopping import ValidationWatch

    class Falling(ValidationWatch):
        def record(self, it, score):
            return super().record(it, -float(it))

        def __call__(self, it, Z):
            return self.record(it, 0.0)

    monkeypatch.setattr(importlib.import_module("tripletml.core.early_stopping"), "ValidationWatch",
                        Falling)
    X, t = _noisy_answers()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = cls(random_state=0, preprocessing=None).fit(X, triplets=t)
    assert m.n_iter_ == 0 and m.stop_reason_ == "validation" and m.history_["step"] == [0]
    assert m.validation_scores_[0] == 0.0 and m.validation_scores_.size == 6
    np.testing.assert_allclose(m.M_, np.eye(X.shape[1]) * m.M_[0, 0], atol=1e-12)
    if cls is ITML:
        assert not m.dual_.any()
    else:
        start = cls(random_state=0, preprocessing=None, early_stopping=False, max_iter=1,
                    tol=None).fit(X, triplets=t)
        assert m.init_ == start.init_ == "identity"
        assert m.objective_ == m.initial_objective_ == start.initial_objective_


@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_auto_is_off_for_labels_and_on_for_answers(cls):
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    a = cls(random_state=0).fit(X, y)
    b = cls(random_state=0, early_stopping=False).fit(X, y)
    assert a.early_stopping_ == "off" and not hasattr(a, "validation_scores_")
    np.testing.assert_array_equal(a.M_, b.M_)
    Xa, t = _noisy_answers()
    assert cls(random_state=0).fit(Xa, triplets=t).early_stopping_.startswith("3 folds of the items")
    assert cls(random_state=0, early_stopping=False).fit(Xa, triplets=t).early_stopping_ == "off"


@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_early_stopping_is_reproducible_and_scale_free(cls):
    """``preprocessing=None`` divides the rows by one number only: the
    learners' steps, bounds and margins see X * 1e3 as it is scaled."""
    X, t = _noisy_answers()
    a = cls(random_state=0, preprocessing=None).fit(X, triplets=t)
    b = cls(random_state=0, preprocessing=None).fit(X * 1e3, triplets=t)
    assert a.early_stopping_ == b.early_stopping_
    np.testing.assert_allclose(a.validation_scores_, b.validation_scores_)
    np.testing.assert_allclose(a.similarity(X[:10]), b.similarity(X[:10] * 1e3), rtol=1e-6,
                               atol=1e-9 * np.abs(a.similarity(X[:10])).max())


@pytest.mark.parametrize("params, match", [
    (dict(validation_fraction=0.0), "validation_fraction"),
    (dict(validation_fraction=1.0), "validation_fraction"),
    (dict(early_stopping="yes"), "early_stopping"),
    (dict(n_iter_no_change=0), "n_iter_no_change"),
])
@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_bad_early_stopping_parameters_are_named(cls, params, match):
    X, t = _noisy_answers()
    with pytest.raises(ValueError, match=f"{cls.__name__}: parameter {match}"):
        cls(**params).fit(X, triplets=t)


def test_a_loaded_model_keeps_its_validation_record(tmp_path):
    import tripletml
    X, t = _noisy_answers()
    m = LMNN(random_state=0).fit(X, triplets=t)
    m.save(tmp_path / "m.npz")
    back = tripletml.load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.validation_scores_, m.validation_scores_)
    assert back.early_stopping_ == m.early_stopping_ and back.stop_reason_ == m.stop_reason_


def test_sml_early_stopping_ends_a_fit_whose_gap_cannot_close():
    """Noisy answers keep SML's smoothed duality gap open (a
    ConvergenceWarning after max_iter); early stopping ends the fit on the
    held-out items' answers, without a warning, at least one iteration in
    (M = 0, the start, is no metric)."""
    import warnings
    X, t = _noisy_answers(flip=0.35)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = SML(random_state=0, max_iter=300).fit(X, triplets=t)
    assert m.stop_reason_ in ("validation", "tol") and 1 <= m.n_iter_ < 300
    assert m.validation_scores_[0] == 0.5                 # every distance 0: ties
    assert np.linalg.eigvalsh(m.M_).min() > -1e-10 * np.abs(m.M_).max()


def test_the_sml_probe_scores_the_mahalanobis_distance():
    from tripletml.engine.early_stopping import MahalanobisScorer
    X, t = _noisy_answers()
    rng = np.random.default_rng(0)
    L = rng.normal(size=(3, X.shape[1]))
    assert MahalanobisScorer(X, t)(L.T @ L) == pytest.approx(triplet_accuracy_on(X @ L.T, t))


def test_itml_pairs_keep_the_plain_fit_and_say_so():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    P = rng.choice(40, size=(200, 2))
    P = P[P[:, 0] != P[:, 1]]
    y = np.where(rng.random(len(P)) < 0.5, 1, -1)
    m = ITML(random_state=0, preprocessor=X).fit(P, y)
    assert m.early_stopping_.startswith("off (pairs")
    assert not hasattr(m, "validation_scores_")


@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_a_refit_on_labels_drops_the_answers_record(cls):
    from sklearn.datasets import load_iris
    X, t = _noisy_answers()
    m = cls(random_state=0).fit(X, triplets=t)
    assert hasattr(m, "validation_scores_")
    Xi, y = load_iris(return_X_y=True)
    m.fit(Xi, y)
    assert m.early_stopping_ == "off" and not hasattr(m, "validation_scores_")


def test_sml_never_returns_the_zero_metric():
    """Answers of pure noise: the held-out score never rises above the ties
    of M = 0, which SML's first iterate still is; the model is a metric
    all the same (the first non-zero iterate, or the plain fit)."""
    X, t = _noisy_answers(flip=0.5, seed=1, m=600)
    m = SML(random_state=0).fit(X, triplets=t)
    assert m.rank_ > 0 and np.abs(m.M_).max() > 0


@pytest.mark.parametrize("cls", [SML, ITML])
def test_a_probe_that_stops_on_tol_scores_its_last_iterate(cls):
    """Consistent answers: the score still rises when the probe meets its
    tol; the last iterate is scored (one score per iteration and the
    start), and when it is the best the plain fit runs."""
    X, t = _noisy_answers(flip=0.0)
    m = cls(random_state=0, tol=0.2 if cls is SML else 0.1).fit(X, triplets=t)
    chosen, n_probe = map(int, re.search(r"iteration (\d+) of (\d+) chosen", m.early_stopping_).groups())
    assert m.validation_scores_.size == n_probe + 1
    if chosen == n_probe:
        assert m.stop_reason_ != "validation"


@pytest.mark.parametrize("cls", [LMNN, ITML])
def test_fit_on_a_collection_after_answers_keeps_the_plain_fit(cls):
    from sklearn.base import clone
    from tripletml.distributed.sharded import ShardedCollection
    X, t = _noisy_answers()
    coll = ShardedCollection([X], [len(X)]).with_triplets([t])
    m = cls(random_state=0).fit(X, triplets=t)
    a = m.fit(coll)
    b = clone(m).fit(coll)
    assert not hasattr(a, "validation_scores_") and a.stop_reason_ != "validation"
    np.testing.assert_array_equal(a.M_, b.M_)


def _mixed_answers(seed=3, n=80, m=1200):
    """Continuous columns of three scales, binary and count columns and a
    duplicated column; answers decided by the first continuous column and a
    count column, 20 % flipped."""
    rng = np.random.default_rng(seed)
    cont = rng.normal(size=(n, 3)) * [1.0, 50.0, 0.01]
    binary = (rng.random((n, 4)) < 0.3).astype(float)
    counts = rng.poisson(3, size=(n, 3)).astype(float)
    X = np.hstack([cont, binary, counts, cont[:, :1]])
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    key = np.c_[cont[:, 0], counts[:, 0]]
    D = lambda a, b: ((key[a] - key[b]) ** 2).sum(1)
    swap = (D(t[:, 0], t[:, 1]) > D(t[:, 0], t[:, 2])) ^ (rng.random(m) < 0.2)
    t[swap] = t[swap][:, [0, 2, 1]]
    return X, t


@pytest.mark.parametrize("preprocessing", ["auto", None])
@pytest.mark.parametrize("cls", [LMNN, NCA, SML, ITML])
def test_early_stopping_on_mixed_columns_ranks_rescaled_rows_alike(cls, preprocessing):
    """Binary, count and continuous columns and a duplicated one, at the
    defaults: X * 1e-3 and X * 1e3 give the same held-out split, the same
    probe scores and the same rankings as X (no step, bound or margin of
    the probe depends on the caller's unit)."""
    import warnings
    X, t = _mixed_answers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = cls(random_state=0, preprocessing=preprocessing).fit(X, triplets=t)
        S = a.similarity(X[:15], X)
        assert np.isfinite(S).all() and a.early_stopping_.startswith("3 folds of the items")
        for c in (1e-3, 1e3):
            b = cls(random_state=0, preprocessing=preprocessing).fit(c * X, triplets=t)
            assert b.early_stopping_ == a.early_stopping_
            np.testing.assert_allclose(b.validation_scores_, a.validation_scores_)
            Sb = b.similarity(c * X[:15], c * X)     # distances in the model's unit
            np.testing.assert_allclose(Sb, S, rtol=1e-6, atol=1e-9 * np.abs(S).max())
