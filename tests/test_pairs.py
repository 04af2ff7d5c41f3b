"""metric-learn's pair form and pair verification (issue 29): pair labels and
indices, the pairs -> triplets rule against a brute-force reference, the
native pair learners against their papers' pair formulas, threshold
calibration against an exhaustive search, the preprocessor, and
cross-validation with pairs as X."""
import itertools
import os
import tempfile
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV, cross_val_score

from tripletml import ITML, KISSME, OASIS, RCA, Euclidean, load_model
from tripletml.core.tuples import best_threshold
from tripletml.pairs import (PairConstraints, check_pair_labels, check_pairs, class_pairs,
                             pairs_to_triplets)


@pytest.fixture(scope="module")
def iris_pairs():
    X, y = load_iris(return_X_y=True)
    pc = class_pairs(y, 300, 0)
    return X, y, pc


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("labels,expected", [([1, -1, 1], [1, -1, 1]), ([1, 0, 1], [1, -1, 1]),
                                             ([True, False, True], [1, -1, 1]),
                                             ([1.0, -1.0, -1.0], [1, -1, -1])])
def test_pair_labels_both_conventions(labels, expected):
    np.testing.assert_array_equal(check_pair_labels(labels, 3), expected)


@pytest.mark.parametrize("labels,match", [
    ([1, 2, -1], r"OASIS: pair labels must be \+1 \(similar\) and -1 \(dissimilar\), or 1 and "
                 r"0 \(0 = dissimilar\); y holds \[2\]"),
    ([1, 0, -1], r"y holds \[-1, 0, 1\]"),
    ([1, -1], r"y has 2 labels for 3 pairs"),
    (["a", "b", "a"], r"must be numbers"),
    ([1, np.nan, -1], r"y holds \[nan\]"),
    (None, r"pairs need labels"),
])
def test_bad_pair_labels(labels, match):
    with pytest.raises(ValueError, match=match):
        check_pairs([[0, 1], [1, 2], [2, 3]], labels, 5, OASIS())


@pytest.mark.parametrize("pairs,err,match", [
    ([[0, 1], [1, 7]], ValueError, r"index 7 is out of range for X with 5 rows"),
    ([[0, 1], [-1, 2]], ValueError, r"index -1 is out of range"),
    ([[0, 1, 2]], ValueError, r"shape \(n_pairs, 2\)"),
    ([[0.0, 1.0]], TypeError, r"integer indices"),
    (np.zeros((0, 2), int), ValueError, r"empty"),
    ([[0, 1], [3, 3], [2, 2]], ValueError, r"2 of the pairs pair a row with itself \(i, i\).*"
                                           r"positions 1, 2\."),
])
def test_bad_index_pairs(pairs, err, match):
    with pytest.raises(err, match=match):
        check_pairs(pairs, np.ones(len(pairs)), 5, "ITML")


def test_fit_refuses_bad_pairs_with_the_learners_name(iris_pairs):
    X, _, pc = iris_pairs
    with pytest.raises(ValueError, match=r"ITML: pair labels must be \+1"):
        ITML().fit(X, pairs=pc.pairs, y=np.full(pc.n_pairs, 3))
    with pytest.raises(ValueError, match=r"KISSME: pairs index 150 is out of range"):
        KISSME().fit(X, pairs=np.r_[pc.pairs, [[0, 150]]], y=np.r_[pc.labels, 1])
    with pytest.raises(ValueError, match=r"OASIS: give pairs= .* or triplets=, not both"):
        OASIS().fit(X, pairs=pc.pairs, y=pc.labels, triplets=[[0, 1, 2]])
    with pytest.raises(ValueError, match=r"OASIS: X of shape \(300, 2, 4\) holds pairs; give "
                                         r"their labels"):
        OASIS().fit(X[pc.pairs])
    with pytest.raises(ValueError, match=r"holds pairs themselves"):
        OASIS().fit(X[pc.pairs], pc.labels, pairs=pc.pairs)


# ------------------------------------------------------------------ sampling and conversion
def test_class_pairs_balanced_and_correct(iris_pairs):
    _, y, pc = iris_pairs
    sim = pc.similar
    assert sim.sum() == 150 and (~sim).sum() == 150
    assert (y[pc.pairs[sim, 0]] == y[pc.pairs[sim, 1]]).all()
    assert (y[pc.pairs[~sim, 0]] != y[pc.pairs[~sim, 1]]).all()
    assert (pc.pairs[:, 0] != pc.pairs[:, 1]).all()
    again = class_pairs(y, 300, 0)
    np.testing.assert_array_equal(again.pairs, pc.pairs)
    assert not np.array_equal(class_pairs(y, 300, 1).pairs, pc.pairs)


def test_class_pairs_needs_both_kinds():
    with pytest.raises(ValueError, match="single member"):
        class_pairs(np.arange(5), 10, 0)
    with pytest.raises(ValueError, match="same class"):
        class_pairs(np.zeros(5, int), 10, 0)


def _reference_triplets(pairs, labels):
    """Every (a, b, c): {a, b} similar, {a, c} dissimilar, b != c (brute force)."""
    out = set()
    for (p, lp), (q, lq) in itertools.product(zip(map(tuple, pairs), labels), repeat=2):
        if lp > 0 and lq < 0:
            for a, b in (p, p[::-1]):
                for a2, c in (q, q[::-1]):
                    if a == a2 and b != c:
                        out.add((a, b, c))
    return out


def test_pairs_to_triplets_equals_the_brute_force_rule():
    rng = np.random.default_rng(0)
    P = rng.integers(0, 12, size=(40, 2))
    P = P[P[:, 0] != P[:, 1]]
    lab = np.where(rng.random(len(P)) < 0.5, 1, -1).astype(np.int8)
    t = pairs_to_triplets(PairConstraints(P, lab), max_per_pair=10**6, rng=0)
    assert set(map(tuple, t.tolist())) == _reference_triplets(P, lab)
    # capped: at most max_per_pair per end of each similar pair, all valid
    t2 = pairs_to_triplets(PairConstraints(P, lab), max_per_pair=1, rng=0)
    assert len(t2) <= 2 * (lab > 0).sum()
    assert set(map(tuple, t2.tolist())) <= _reference_triplets(P, lab)


def test_disjoint_pairs_give_no_triplet_and_a_message():
    X = np.random.default_rng(0).normal(size=(8, 3))
    P = np.array([[0, 1], [2, 3], [4, 5], [6, 7]])
    lab = np.array([1, -1, 1, -1])
    assert pairs_to_triplets(PairConstraints(P, lab.astype(np.int8))).shape == (0, 3)
    with pytest.raises(ValueError, match=r"OASIS learns from triplets.*no similar and "
                                         r"dissimilar pair share a row.*ITML, KISSME, MMC, RCA"):
        OASIS().fit(X, pairs=P, y=lab)
    assert ITML().fit(X, pairs=P, y=lab).n_features_in_ == 3     # a pair learner takes them


# ------------------------------------------------------------------ native pair learners
def test_kissme_pairs_are_the_papers_covariances():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 4))
    P = rng.choice(40, (80, 2))
    P = P[P[:, 0] != P[:, 1]]
    lab = np.where(rng.random(len(P)) < 0.5, 1, -1)
    m = KISSME(preprocessing=None).fit(X, pairs=P, y=lab)
    E = X[P[:, 0]] - X[P[:, 1]]
    S = E[lab > 0].T @ E[lab > 0] / (lab > 0).sum()        # eq. 10
    D = E[lab < 0].T @ E[lab < 0] / (lab < 0).sum()        # eq. 11
    u2 = m.scaler_.unit_ ** 2                        # covariances of the rows / unit
    np.testing.assert_allclose(m.similar_covariance_ * u2, S, rtol=1e-10)
    np.testing.assert_allclose(m.dissimilar_covariance_ * u2, D, rtol=1e-10)


def test_itml_pairs_are_its_constraints():
    """Hard constraints (gamma = inf) on a feasible set: every similar pair
    ends at or below u, every dissimilar one at or above l (the paper's
    constraint sets S and D as given, one dual each)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 5))
    P = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]])
    lab = np.array([1, 1, 1, -1, -1, -1])
    m = ITML(gamma=float("inf"), max_iter=5000, tol=1e-12, preprocessing=None).fit(
        X, pairs=P, y=lab)
    assert m.dual_.shape == (6,) and m.stop_reason_ == "tol"
    d2 = m.pair_distance(X[P[:, 0]], X[P[:, 1]], squared=True)
    u, l = m.bounds_
    assert (d2[:3] <= u * (1 + 1e-6)).all() and (d2[3:] >= l * (1 - 1e-6)).all()
    # the Euclidean start violates them: the constraints did the work
    e2 = np.sum((X[P[:, 0]] - X[P[:, 1]]) ** 2, axis=1) / m.scaler_.unit_ ** 2
    assert (e2[:3] > u * 1.01).any() or (e2[3:] < l * 0.99).any()


def test_rca_pairs_chunklets_are_connected_components():
    """RCA (Bar-Hillel et al. 2005, Sec. 2): chunklets are the transitive
    closure of the similar pairs; dissimilar pairs play no part."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 3)) @ rng.normal(size=(3, 3))
    P = np.array([[0, 1], [1, 2], [5, 6], [10, 11], [11, 12], [12, 13], [3, 20], [4, 21]])
    lab = np.array([1, 1, 1, 1, 1, 1, -1, -1])
    m = RCA(preprocessing=None, regularization=0.0).fit(X, pairs=P, y=lab)
    chunks = [[0, 1, 2], [5, 6], [10, 11, 12, 13]]
    C = sum((X[c] - X[c].mean(0)).T @ (X[c] - X[c].mean(0)) for c in chunks) / 9
    np.testing.assert_allclose(m.chunklet_covariance_ * m.scaler_.unit_ ** 2, C,
                               rtol=1e-10)
    with pytest.raises(ValueError, match="RCA: the pairs hold no similar"):
        RCA().fit(X, pairs=P[6:], y=lab[6:])


# ------------------------------------------------------------------ point pairs, tuples as X
def test_point_pairs_equal_index_pairs_into_their_distinct_rows(iris_pairs):
    X, _, pc = iris_pairs
    used = np.unique(pc.pairs)
    rows, inv = np.unique(X[used], axis=0, return_inverse=True)
    P_rows = np.searchsorted(used, pc.pairs)            # into X[used]
    P_rows = inv.ravel()[P_rows]                        # into the distinct rows
    for cls in (KISSME, ITML, OASIS):
        kw = dict(random_state=0) if "random_state" in cls().get_params() else {}
        a = cls(**kw).fit(X[pc.pairs], pc.labels)
        b = cls(**kw).fit(rows, pairs=P_rows, y=pc.labels)
        assert a.n_features_in_ == 4 and a.tuple_form_ == "pairs"
        np.testing.assert_allclose(a.similarity(X[:10]), b.similarity(X[:10]), rtol=1e-10,
                                   atol=1e-12)
        assert a.threshold_ == pytest.approx(b.threshold_, rel=1e-10)


def test_pair_verification_methods(iris_pairs):
    from sklearn.metrics import roc_auc_score
    X, _, pc = iris_pairs
    P = X[pc.pairs]
    m = ITML().fit(P, pc.labels)
    s = m.decision_function(P)
    np.testing.assert_allclose(s, m.pair_score(P[:, 0], P[:, 1]))
    np.testing.assert_array_equal(m.predict(P), np.where(s >= m.threshold_, 1, -1))
    assert m.score(P, pc.labels) == pytest.approx(roc_auc_score(pc.labels, s))
    # the fit's threshold is the best accuracy on the training pairs
    acc = np.mean(m.predict(P) == pc.labels)
    assert acc == pytest.approx(max(np.mean(np.where(s >= t, 1, -1) == pc.labels)
                                    for t in np.r_[s, np.inf]))
    assert m.score(P, np.where(pc.labels > 0, 1, 0)) == m.score(P, pc.labels)
    m.set_threshold(1e9)
    assert (m.predict(P) == -1).all()
    with pytest.raises(ValueError, match="must be a finite number"):
        m.set_threshold(np.nan)


def test_triplet_classifier_methods(iris_pairs):
    X, y, _ = iris_pairs
    from tripletml.triplets import random_class_triplets
    T = random_class_triplets(y, 200, random_state=0)
    m = KISSME().fit(X[T])
    margins = m.triplet_score(X, T)
    np.testing.assert_allclose(m.decision_function(X[T]), margins)
    np.testing.assert_array_equal(m.predict(X[T]), np.where(margins > 0, 1, -1))
    assert m.score(X[T]) == pytest.approx(np.mean(margins > 0))
    with pytest.raises(ValueError, match="triplets need no threshold"):
        m.calibrate_threshold(X[T], np.ones(200))


def test_predict_absent_after_a_label_fit_until_calibrated(iris_pairs):
    X, y, pc = iris_pairs
    m = ITML().fit(X, y)
    assert not hasattr(m, "predict") and not hasattr(m, "decision_function")
    m.calibrate_threshold(X[pc.pairs], pc.labels)
    assert hasattr(m, "predict") and hasattr(m, "decision_function")
    assert m.score(X, y) > 0.5                              # rows + labels: the mAP still
    with pytest.raises(TypeError, match="ITML: a triplet learner has no per-sample predict"):
        m.predict(X)
    m.fit(X, y)                                             # a refit forgets the threshold
    assert "threshold_" not in vars(m)


def _brute_threshold(s, y, strategy, min_rate=None, beta=1.0):
    """The best value of each strategy over every cut (exhaustive)."""
    best = -np.inf
    for t in np.r_[np.unique(s), np.inf]:
        p = s >= t
        tp, fp = np.sum(p & (y > 0)), np.sum(p & (y < 0))
        fn, tn = np.sum(~p & (y > 0)), np.sum(~p & (y < 0))
        tpr, tnr = tp / (tp + fn), tn / (tn + fp)
        if strategy == "accuracy":
            v = (tp + tn) / len(s)
        elif strategy == "f_beta":
            den = (1 + beta**2) * tp + beta**2 * fn + fp
            v = (1 + beta**2) * tp / den if den else 0.0
        elif strategy == "max_tpr":
            v = tpr if tnr >= min_rate else -np.inf
        else:
            v = tnr if tpr >= min_rate else -np.inf
        best = max(best, v)
    return best


def _value(s, y, t, strategy, min_rate=None, beta=1.0):
    p = s >= t
    tp, fp = np.sum(p & (y > 0)), np.sum(p & (y < 0))
    fn, tn = np.sum(~p & (y > 0)), np.sum(~p & (y < 0))
    if strategy == "accuracy":
        return (tp + tn) / len(s)
    if strategy == "f_beta":
        den = (1 + beta**2) * tp + beta**2 * fn + fp
        return (1 + beta**2) * tp / den if den else 0.0
    if strategy == "max_tpr":
        return tp / (tp + fn) if tn / (tn + fp) >= min_rate else -np.inf
    return tn / (tn + fp) if tp / (tp + fn) >= min_rate else -np.inf


@pytest.mark.parametrize("strategy,kw", [("accuracy", {}), ("f_beta", {"beta": 0.5}),
                                         ("f_beta", {"beta": 2.0}),
                                         ("max_tpr", {"min_rate": 0.8}),
                                         ("max_tnr", {"min_rate": 0.7})])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_threshold_matches_exhaustive_search(strategy, kw, seed):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(60) < 0.4, 1, -1)
    s = np.round(rng.normal(size=60) + 0.8 * y, 1)        # ties on purpose
    t = best_threshold(s, y, strategy, **kw)
    assert _value(s, y, t, strategy, **kw) == pytest.approx(_brute_threshold(s, y, strategy,
                                                                             **kw))


def test_calibrate_threshold_checks(iris_pairs):
    X, y, pc = iris_pairs
    m = KISSME().fit(X, y)
    P = X[pc.pairs]
    with pytest.raises(ValueError, match="strategy='best' must be one of accuracy, f_beta"):
        m.calibrate_threshold(P, pc.labels, strategy="best")
    with pytest.raises(ValueError, match="strategy='max_tpr' needs min_rate"):
        m.calibrate_threshold(P, pc.labels, strategy="max_tpr")
    with pytest.raises(ValueError, match="beta=-1 must be a positive number"):
        m.calibrate_threshold(P, pc.labels, strategy="f_beta", beta=-1)
    with pytest.raises(ValueError, match="needs both similar"):
        m.calibrate_threshold(P, np.ones(pc.n_pairs))
    m.calibrate_threshold(P, pc.labels, strategy="max_tnr", min_rate=0.9)
    tpr = np.mean(m.predict(P)[pc.similar] == 1)
    assert tpr >= 0.9


# ------------------------------------------------------------------ scikit-learn model selection
def test_cross_val_score_and_grid_search_on_pairs(iris_pairs):
    X, _, pc = iris_pairs
    P = X[pc.pairs]
    sc = cross_val_score(KISSME(), P, pc.labels, cv=3)
    assert sc.shape == (3,) and (sc > 0.8).all()                    # ROC AUC per fold
    acc = cross_val_score(ITML(tol=1e-2), P, pc.labels, cv=3, scoring="accuracy")
    assert (acc > 0.7).all()
    gs = GridSearchCV(KISSME(), {"shrinkage": [0.0, 0.5]}, cv=3).fit(P, pc.labels)
    assert gs.best_params_["shrinkage"] in (0.0, 0.5)
    assert gs.predict(P).shape == (pc.n_pairs,)


def test_cross_val_score_on_point_triplets(iris_pairs):
    X, y, _ = iris_pairs
    from tripletml.triplets import random_class_triplets
    T = random_class_triplets(y, 300, random_state=0)
    sc = cross_val_score(KISSME(), X[T], cv=3)
    assert (sc > 0.8).all()


# ------------------------------------------------------------------ persistence
def test_threshold_survives_save_and_load(iris_pairs):
    X, _, pc = iris_pairs
    m = ITML().fit(X[pc.pairs], pc.labels)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.npz")
        m.save(path)
        m2 = load_model(path)
    assert m2.threshold_ == m.threshold_ and m2.tuple_form_ == "pairs"
    np.testing.assert_array_equal(m2.predict(X[pc.pairs]), m.predict(X[pc.pairs]))


def test_euclidean_baseline_verifies_pairs(iris_pairs):
    X, _, pc = iris_pairs
    m = Euclidean().fit(X[pc.pairs], pc.labels)
    assert 0.5 < m.score(X[pc.pairs], pc.labels) <= 1.0


# ------------------------------------------------------------------ every learner
from _estimators import ESTIMATORS  # noqa: E402


@pytest.mark.parametrize("factory,alt", ESTIMATORS)
def test_every_learner_verifies_pairs(factory, alt, iris_pairs):
    """Every triplet learner fits pairs of points (natively or through the
    shared-row triplets), calibrates its threshold at fit and classifies
    pairs better than chance; the fitted width is the points' width."""
    X, _, pc = iris_pairs
    P = X[pc.pairs]
    est = factory()
    if "preprocessing" in est.get_params():      # the defaults' lift (bilinear learners)
        est.set_params(preprocessing="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(P, pc.labels)
    assert est.n_features_in_ == 4 and est.tuple_form_ == "pairs"
    assert np.isfinite(est.threshold_)
    pred = est.predict(P)
    assert set(np.unique(pred)) <= {-1, 1}
    assert est.score(P, pc.labels) > 0.6, type(est).__name__


def test_pair_score_and_distance_take_one_array_of_pairs(iris_pairs):
    """metric-learn's pair_score(pairs) / pair_distance(pairs)."""
    X, _, pc = iris_pairs
    P = X[pc.pairs]
    m = ITML(tol=1e-2).fit(X, np.arange(150) % 3)
    np.testing.assert_allclose(m.pair_score(P), m.pair_score(P[:, 0], P[:, 1]))
    np.testing.assert_allclose(m.pair_distance(P), m.pair_distance(P[:, 0], P[:, 1]))
    o = OASIS(random_state=0).fit(X, np.arange(150) % 3)
    np.testing.assert_allclose(o.pair_score(P), o.pair_score(P[:, 0], P[:, 1]))
    with pytest.raises(TypeError, match=r"OASIS: pair_score takes two arrays of rows"):
        o.pair_score(X)


def test_point_pairs_of_identical_points_are_left_out_with_a_warning(iris_pairs):
    """Two equal points at different indices: the index form keeps the pair
    (its distance is 0 under every metric), the point form cannot tell the
    rows apart and leaves it out, saying which pairs."""
    X, _, pc = iris_pairs
    X = X.copy()
    X[5] = X[3]
    P = np.r_[pc.pairs, [[3, 5]]]
    lab = np.r_[pc.labels, 1]
    with pytest.warns(UserWarning, match=r"KISSME: 1 of the 301 pairs join two identical "
                                         r"points \(pairs 300\)"):
        a = KISSME().fit(X[P], lab)
    b = KISSME().fit(X[pc.pairs], pc.labels)
    np.testing.assert_allclose(a.get_mahalanobis_matrix(), b.get_mahalanobis_matrix())
    with pytest.raises(ValueError, match="every pair joins two identical points"):
        KISSME().fit(X[[[3, 5], [5, 3]]], [1, -1])
