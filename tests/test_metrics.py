"""Tests of tripletml.metrics against brute-force loop references."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.neighbors import KNeighborsClassifier

from tripletml.metrics import (
    average_precision_per_query,
    evaluate_retrieval,
    knn_error,
    mean_average_precision,
    precision_at_k,
    triplet_accuracy,
)


# --------------------------------------------------------------------------
# brute-force references: plain Python loops, written from the definitions
# --------------------------------------------------------------------------
def _ranking(S, i, loo):
    """Database indices for query i sorted by (-score, index)."""
    items = [(j, float(S[i][j])) for j in range(len(S[i]))
             if not (loo and j == i)]
    items.sort(key=lambda t: (-t[1], t[0]))
    return [j for j, _ in items]


def ref_ap(S, yq, ydb=None):
    loo = ydb is None
    labels = list(yq) if loo else list(ydb)
    out = []
    for i in range(len(S)):
        hits, total = 0, 0.0
        for rank, j in enumerate(_ranking(S, i, loo), start=1):
            if labels[j] == yq[i]:
                hits += 1
                total += hits / rank
        out.append(total / hits if hits else float("nan"))
    return np.array(out)


def ref_map(S, yq, ydb=None):
    ap = [a for a in ref_ap(S, yq, ydb) if a == a]
    return sum(ap) / len(ap)


def ref_pk(S, yq, ydb, k):
    loo = ydb is None
    labels = list(yq) if loo else list(ydb)
    total = 0.0
    for i in range(len(S)):
        top = _ranking(S, i, loo)[:k]
        total += sum(labels[j] == yq[i] for j in top) / k
    return total / len(S)


def ref_knn_error(S, y_train, y_test, k):
    """S: (n_test, n_train) similarities; y_test None = leave-one-out."""
    loo = y_test is None
    truth = list(y_train) if loo else list(y_test)
    wrong = 0
    for i in range(len(S)):
        nbrs = _ranking(S, i, loo)[:k]
        votes = Counter(y_train[j] for j in nbrs)
        best = max(votes.values())
        pred = next(y_train[j] for j in nbrs if votes[y_train[j]] == best)
        wrong += pred != truth[i]
    return wrong / len(S)


class DotEstimator:
    """similarity = X @ Y.T (sparse in, sparse out); records chunk sizes."""

    def __init__(self):
        self.rows = []

    def similarity(self, X, Y):
        self.rows.append(X.shape[0])
        return X @ Y.T


class NegSqEuclidean:
    def similarity(self, X, Y):
        return -euclidean_distances(X, Y, squared=True)


def _tie_data(seed, n_q, n_db, n_labels=3):
    rng = np.random.default_rng(seed)
    S = rng.integers(0, 3, size=(n_q, n_db)).astype(float)  # many ties
    names = np.array([f"c{i}" for i in range(n_labels)])
    yq = names[rng.integers(0, n_labels, n_q)]
    ydb = names[rng.integers(0, n_labels, n_db)]
    return S, yq, ydb


# --------------------------------------------------------------------------
# hand-computed cases
# --------------------------------------------------------------------------
def test_hand_computed_query_db():
    S = np.array([[0.9, 0.1, 0.5, 0.3],
                  [0.2, 0.8, 0.8, 0.1],
                  [0.4, 0.4, 0.4, 0.4]])
    yq = ["a", "b", "c"]
    ydb = ["a", "b", "a", "b"]
    # q0 (a): order 0(a) 2(a) 3(b) 1(b)          -> AP = (1/1 + 2/2)/2 = 1
    # q1 (b): tie 1,2 -> 1 first: 1(b) 2(a) 0(a) 3(b)
    #                                            -> AP = (1/1 + 2/4)/2 = 0.75
    # q2 (c): no relevant item                   -> AP = NaN (left out)
    # mAP = (1 + 0.75) / 2 = 0.875
    # P@1 = (1 + 1 + 0)/3, P@2 = (1 + 1/2 + 0)/3, P@3 = (2/3 + 1/3 + 0)/3
    ap = average_precision_per_query(S, yq, ydb)
    np.testing.assert_allclose(ap[:2], [1.0, 0.75])
    assert np.isnan(ap[2])
    assert mean_average_precision(S, yq, ydb) == pytest.approx(0.875)
    np.testing.assert_allclose(precision_at_k(S, yq, ydb, k=[1, 2, 3]),
                               [2 / 3, 0.5, 1 / 3])
    assert precision_at_k(S, yq, ydb, k=4) == pytest.approx(1 / 3)
    assert isinstance(precision_at_k(S, yq, ydb, k=1), float)


def test_hand_computed_leave_one_out():
    # the diagonal is the largest score: it must be excluded
    S = np.array([[9, 3, 3, 1],
                  [3, 9, 5, 0],
                  [3, 5, 9, 2],
                  [1, 0, 2, 9]])
    y = [0, 0, 1, 1]
    # 0: 1(rel) 2 3 (tie 1,2 -> 1 first)  AP = 1
    # 1: 2 0(rel) 3                       AP = 1/2
    # 2: 1 0 3(rel)                       AP = 1/3
    # 3: 2(rel) 0 1                       AP = 1
    # mAP = (1 + 1/2 + 1/3 + 1)/4 = 17/24;  P@1 = (1+0+0+1)/4
    np.testing.assert_allclose(average_precision_per_query(S, y),
                               [1, 0.5, 1 / 3, 1])
    assert mean_average_precision(S, y) == pytest.approx(17 / 24)
    assert precision_at_k(S, y, k=1) == pytest.approx(0.5)
    assert precision_at_k(S, y, k=3) == pytest.approx(1 / 3)


def test_tie_rule_lower_index_first():
    S = np.zeros((1, 6))
    ydb = [0, 0, 0, 1, 1, 1]
    # all tied: ranking is 0..5
    assert precision_at_k(S, [0], ydb, k=3) == 1.0
    assert precision_at_k(S, [1], ydb, k=3) == 0.0
    assert average_precision_per_query(S, [1], ydb)[0] == pytest.approx(
        (1 / 4 + 2 / 5 + 3 / 6) / 3)
    # boundary tie: one clear winner, then a tie group straddling k
    S = np.array([[0.0, 1.0, 1.0, 2.0, 1.0, 1.0]])
    ydb = [1, 0, 1, 0, 1, 1]
    # order: 3, 1, 2, 4, 5, 0
    np.testing.assert_allclose(precision_at_k(S, [1], ydb, k=[1, 2, 3, 4]),
                               [0, 0, 1 / 3, 2 / 4])


# --------------------------------------------------------------------------
# random data with many ties vs. the brute-force reference
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("loo", [True, False])
@pytest.mark.parametrize("chunk_size", [None, 1, 7])
def test_against_bruteforce_with_ties(seed, loo, chunk_size):
    n_q, n_db = (30, 30) if loo else (25, 40)
    S, yq, ydb = _tie_data(seed, n_q, n_db)
    if loo:
        ydb = None
    n_avail = n_q - 1 if loo else n_db
    ap = average_precision_per_query(S, yq, ydb, chunk_size=chunk_size)
    ref = ref_ap(S, list(yq), None if loo else list(ydb))
    np.testing.assert_array_equal(np.isnan(ap), np.isnan(ref))
    np.testing.assert_allclose(ap[~np.isnan(ap)], ref[~np.isnan(ref)],
                               rtol=1e-12)
    assert mean_average_precision(S, yq, ydb, chunk_size=chunk_size) == \
        pytest.approx(ref_map(S, list(yq), None if loo else list(ydb)))
    ks = [1, 2, 3, 5, 10, n_avail - 1, n_avail]
    got = precision_at_k(S, yq, ydb, k=ks, chunk_size=chunk_size)
    want = [ref_pk(S, list(yq), None if loo else list(ydb), k) for k in ks]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for k in (1, 4):
        assert precision_at_k(S, yq, ydb, k=k, chunk_size=chunk_size) == \
            pytest.approx(want[ks.index(k)] if k in ks else
                          ref_pk(S, list(yq), None if loo else list(ydb), k))


def test_precision_top_k_path_matches_full_sort():
    # larger rows, so the partition path (K < n_db) is exercised hard
    rng = np.random.default_rng(7)
    S = rng.integers(0, 4, size=(60, 500)).astype(np.float32)
    yq = rng.integers(0, 5, 60)
    ydb = rng.integers(0, 5, 500)
    order = np.argsort(-S.astype(float), axis=1, kind="stable")
    rel = ydb[order] == yq[:, None]
    ks = [1, 3, 17, 100, 499, 500]
    want = [rel[:, :k].mean() for k in ks]
    np.testing.assert_allclose(precision_at_k(S, yq, ydb, k=ks), want)


def test_float_scores_without_ties_and_sparse_S():
    rng = np.random.default_rng(3)
    S = rng.standard_normal((20, 20))
    y = rng.integers(0, 3, 20)
    assert mean_average_precision(S, y) == pytest.approx(ref_map(S, list(y)))
    Ssp = sp.csr_matrix(np.where(np.abs(S) > 0.5, S, 0.0))
    assert mean_average_precision(Ssp, y) == pytest.approx(
        ref_map(Ssp.toarray(), list(y)))


def test_label_types():
    S = np.array([[3.0, 2.0, 1.0]])
    # 1 and "1" differ; 1 and 1.0 are equal (==)
    assert precision_at_k(S, [1], ["1", 1.0, 2], k=1) == 0.0
    assert average_precision_per_query(S, [1], ["1", 1.0, 2])[0] == 0.5
    assert precision_at_k(S, [(1, "a")], [(1, "a"), (2, "a"), (1, "a")],
                          k=[1, 3])[1] == pytest.approx(2 / 3)
    assert precision_at_k(S, np.array([2]), [1, 2, 2], k=2) == 0.5


# --------------------------------------------------------------------------
# chunked evaluator == full-matrix functions
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("loo", [True, False])
def test_evaluator_matches_full_matrix(sparse, loo):
    rng = np.random.default_rng(11)
    Xq = rng.integers(0, 2, size=(23, 4)).astype(float)   # dot products tie
    Xdb = rng.integers(0, 2, size=(31, 4)).astype(float)
    yq = np.array(["x", "y", "z"])[rng.integers(0, 3, 23)]
    ydb = np.array(["x", "y", "z"])[rng.integers(0, 3, 31)]
    if loo:
        Xdb, ydb = None, None
    S = Xq @ (Xq if loo else Xdb).T
    ks = (1, 5, 10)
    want = {"map": mean_average_precision(S, yq, ydb)}
    want.update({f"precision_at_{k}": p for k, p in
                 zip(ks, precision_at_k(S, yq, ydb, k=list(ks)))})
    assert want["map"] == pytest.approx(ref_map(S, list(yq),
                                                None if loo else list(ydb)))
    if sparse:
        Xq = sp.csr_matrix(Xq)
        Xdb = None if loo else sp.csr_matrix(Xdb)
    for cs in (1, 7, 23):
        est = DotEstimator()
        got = evaluate_retrieval(est, Xq, yq, Xdb, ydb, k=ks, chunk_size=cs)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-12), (cs, key)
        assert max(est.rows) <= cs and sum(est.rows) == 23
        assert len(est.rows) == -(-23 // cs)


def test_evaluator_default_chunk_verbose_and_map_only():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((15, 3))
    y = rng.integers(0, 2, 15)
    got = evaluate_retrieval(DotEstimator(), X, y, k=3, verbose=True)
    assert set(got) == {"map", "precision_at_3"}
    assert got["map"] == pytest.approx(mean_average_precision(X @ X.T, y))
    assert evaluate_retrieval(DotEstimator(), X, y, k=()) == {
        "map": pytest.approx(got["map"])}


# --------------------------------------------------------------------------
# k-NN error
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_knn_error_matches_sklearn(sparse):
    rng = np.random.default_rng(5)
    X_train = rng.standard_normal((80, 5))
    y_train = (X_train[:, 0] + 0.8 * rng.standard_normal(80) > 0).astype(int)
    X_test = rng.standard_normal((50, 5))
    y_test = (X_test[:, 0] + 0.8 * rng.standard_normal(50) > 0).astype(int)
    want = []
    for k in (1, 3):
        clf = KNeighborsClassifier(n_neighbors=k, algorithm="brute")
        clf.fit(X_train, y_train)
        want.append(np.mean(clf.predict(X_test) != y_test))
    if sparse:
        X_train, X_test = sp.csr_matrix(X_train), sp.csr_matrix(X_test)
    est = NegSqEuclidean()
    assert knn_error(est, X_train, y_train, X_test, y_test, k=1) == \
        pytest.approx(want[0])
    assert knn_error(est, X_train, y_train, X_test, y_test, k=3,
                     chunk_size=7) == pytest.approx(want[1])
    np.testing.assert_allclose(
        knn_error(est, X_train, y_train, X_test, y_test, k=[3, 1]),
        want[::-1])
    assert 0 < want[1] < 0.5  # the comparison is not trivial


@pytest.mark.parametrize("chunk_size", [None, 1, 6])
def test_knn_error_leave_one_out_with_ties(chunk_size):
    rng = np.random.default_rng(9)
    X = rng.integers(0, 3, size=(40, 2)).astype(float)   # distance ties
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 40)]  # vote ties
    est = NegSqEuclidean()
    S = est.similarity(X, X)
    ks = [1, 2, 3, 4, 6, 39]
    got = knn_error(est, X, y, k=ks, chunk_size=chunk_size)
    want = [ref_knn_error(S, list(y), None, k) for k in ks]
    np.testing.assert_allclose(got, want)
    # query/db case against the same reference
    Xt = rng.integers(0, 3, size=(25, 2)).astype(float)
    yt = np.array(["a", "b", "c"])[rng.integers(0, 3, 25)]
    St = est.similarity(Xt, X)
    got = knn_error(est, X, y, Xt, yt, k=ks + [40], chunk_size=chunk_size)
    want = [ref_knn_error(St, list(y), list(yt), k) for k in ks + [40]]
    np.testing.assert_allclose(got, want)


def test_knn_vote_tie_goes_to_nearest_class():
    class Fixed:
        def similarity(self, X, Y):
            return np.array([[1.0, 5.0, 4.0, 3.0, 2.0]])
    X_train = np.zeros((5, 1))
    y_train = ["a", "b", "a", "b", "c"]   # neighbors by rank: b a b a c
    X_test = np.zeros((1, 1))
    assert knn_error(Fixed(), X_train, y_train, X_test, ["b"], k=2) == 0.0
    assert knn_error(Fixed(), X_train, y_train, X_test, ["b"], k=4) == 0.0
    assert knn_error(Fixed(), X_train, y_train, X_test, ["a"], k=3) == 1.0
    # k=5: a, b both 2 votes; b nearest
    assert knn_error(Fixed(), X_train, y_train, X_test, ["b"], k=5) == 0.0


# --------------------------------------------------------------------------
# triplet accuracy
# --------------------------------------------------------------------------
def test_triplet_accuracy_against_loop():
    class Dot:
        def triplet_score(self, X, T):
            return (np.einsum("ij,ij->i", X[T[:, 0]], X[T[:, 1]])
                    - np.einsum("ij,ij->i", X[T[:, 0]], X[T[:, 2]]))

    rng = np.random.default_rng(2)
    X = rng.integers(0, 2, size=(30, 3)).astype(float)   # some exact zeros
    T = rng.integers(0, 30, size=(200, 3))
    want = np.mean([float(X[q] @ X[p] - X[q] @ X[n] > 0) for q, p, n in T])
    assert 0 < want < 1
    assert triplet_accuracy(Dot(), X, T) == pytest.approx(want)


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------
def _pk1(S, yq, ydb=None):
    return precision_at_k(S, yq, ydb, k=1)


_pk1.__name__ = "precision_at_k"

S4 = np.arange(16, dtype=float).reshape(4, 4)
Y4 = [0, 1, 0, 1]


@pytest.mark.parametrize("func", [average_precision_per_query,
                                  mean_average_precision, precision_at_k])
def test_bad_S(func):
    if func is precision_at_k:
        func = _pk1
    for bad in (np.nan, np.inf, -np.inf):
        S = S4.copy()
        S[2, 1] = bad
        with pytest.raises(ValueError, match="S contains NaN or infinity"):
            func(S, Y4)
    with pytest.raises(ValueError, match=func.__name__ + ".*square"):
        func(S4[:3], Y4[:3])
    with pytest.raises(ValueError, match=func.__name__ + ".*y_query"):
        func(S4, Y4[:3])
    with pytest.raises(ValueError, match=func.__name__ + ".*y_db"):
        func(S4, Y4, [0, 1, 0])
    with pytest.raises(ValueError, match=func.__name__ + ".*y_query"):
        func(S4[:3], Y4, Y4)
    with pytest.raises(ValueError, match="2-D"):
        func(S4[0], Y4)
    with pytest.raises(TypeError, match="S must be real"):
        func(S4.astype(complex), Y4)


@pytest.mark.parametrize("k", [0, -1, 4, [1, 4], [0, 2]])
def test_bad_k_value_loo(k):
    with pytest.raises(ValueError, match=r"precision_at_k: k must satisfy"):
        precision_at_k(S4, Y4, k=k)


def test_bad_k_other():
    # k = n - 1 is allowed: each query ranks the 3 others, one of which shares its label
    assert precision_at_k(S4, Y4, k=3) == pytest.approx(1 / 3)
    # k = n_db allowed: 2 of the 4 database items share each query's label
    assert precision_at_k(S4[:2], Y4[:2], Y4, k=4) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k must satisfy"):
        precision_at_k(S4[:2], Y4[:2], Y4, k=5)
    for k in (1.5, "3", True, [1, 2.0], None):
        with pytest.raises(TypeError, match="precision_at_k"):
            precision_at_k(S4, Y4, k=k)
    with pytest.raises(ValueError, match="empty"):
        precision_at_k(S4, Y4, k=[])


def test_no_relevant_item():
    with pytest.raises(ValueError, match="mean_average_precision: no query"):
        mean_average_precision(S4, [0, 1, 2, 3])
    assert np.isnan(average_precision_per_query(S4, [0, 1, 2, 3])).all()


def test_estimator_errors():
    X = np.eye(4)
    with pytest.raises(TypeError, match="evaluate_retrieval.*similarity"):
        evaluate_retrieval(object(), X, Y4)
    with pytest.raises(ValueError, match="evaluate_retrieval.*y_query"):
        evaluate_retrieval(DotEstimator(), X, Y4[:3])
    with pytest.raises(ValueError, match="y_db is None"):
        evaluate_retrieval(DotEstimator(), X, Y4, X)
    with pytest.raises(ValueError, match="k must satisfy"):
        evaluate_retrieval(DotEstimator(), X, Y4, k=(1, 4))

    class Bad:
        def __init__(self, out):
            self.out = out

        def similarity(self, X, Y):
            return self.out

    with pytest.raises(ValueError, match="shape"):
        evaluate_retrieval(Bad(np.zeros((4, 3))), X, Y4, k=1)
    nan = np.zeros((4, 4))
    nan[0, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        evaluate_retrieval(Bad(nan), X, Y4, k=1)
    with pytest.raises(ValueError, match="knn_error: k must satisfy"):
        knn_error(DotEstimator(), X, Y4, k=4)
    with pytest.raises(ValueError, match="knn_error: k must satisfy"):
        knn_error(DotEstimator(), X, Y4, X, Y4, k=5)
    with pytest.raises(ValueError, match="knn_error.*y_test"):
        knn_error(DotEstimator(), X, Y4, X)
    with pytest.raises(ValueError, match="knn_error.*y_train"):
        knn_error(DotEstimator(), X, Y4[:2])
    with pytest.raises(TypeError, match="triplet_accuracy.*triplet_score"):
        triplet_accuracy(DotEstimator(), X, [[0, 1, 2]])


def test_triplet_errors():
    class Zero:
        def triplet_score(self, X, T):
            return np.zeros(len(T))

    X = np.eye(4)
    with pytest.raises(ValueError, match="triplet_accuracy: triplets must have shape"):
        triplet_accuracy(Zero(), X, [[0, 1]])
    with pytest.raises(ValueError, match="triplet_accuracy: .*index 4 is out of range .*0..3"):
        triplet_accuracy(Zero(), X, [[0, 1, 4]])
    with pytest.raises(TypeError, match="integer"):
        triplet_accuracy(Zero(), X, [[0.0, 1.0, 2.0]])
    assert triplet_accuracy(Zero(), X, [[0, 1, 2]]) == 0.0


def test_empty_or_nothing_to_rank():
    class Dot:
        def similarity(self, X, Y):
            return X @ Y.T

    X = np.eye(3)
    with pytest.raises(ValueError, match="evaluate_retrieval: nothing to rank: X_query has 1"):
        evaluate_retrieval(Dot(), X[:1], [0])
    with pytest.raises(ValueError, match="evaluate_retrieval: nothing to rank: X_db has 0"):
        evaluate_retrieval(Dot(), X, [0, 1, 0], X[:0], np.array([], int))
    with pytest.raises(ValueError, match="knn_error: nothing to rank: X_train has 1"):
        knn_error(Dot(), X[:1], [0])
    with pytest.raises(ValueError, match="knn_error: X_test has no rows"):
        knn_error(Dot(), X, [0, 1, 0], X[:0], np.array([], int))


def test_triplet_accuracy_falls_back_to_a_0_1_decision_function():
    """An estimator written for 0.1 (decision_function(X, triplets), no
    triplet_score) still scores, with a FutureWarning, for one release."""
    class Old:
        def decision_function(self, X, T):
            return X[T[:, 0], 0] - X[T[:, 2], 0]

    X = np.arange(8.0).reshape(4, 2)
    with pytest.warns(FutureWarning, match="decision_function"):
        acc = triplet_accuracy(Old(), X, [[3, 1, 0], [0, 1, 3]])
    assert acc == 0.5


def test_validation_item_scores_are_each_rows_term_of_the_validation_score():
    """Each row's own term: its AP, its precision at k, or whether the
    leave-one-out k-NN vote is right (written from the definition here with
    dense distances); their mean is :func:`validation_score`, which is what
    it was before the terms existed, bit for bit (the reductions of
    :func:`evaluate_retrieval` and :func:`knn_error`)."""
    from tripletml import Euclidean
    from tripletml.metrics import validation_item_scores, validation_score

    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 5))
    y = np.r_[rng.integers(0, 3, 39), 7]            # class 7: one row, no relevant row
    model = Euclidean().fit(X, y)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    order = np.argsort(D, axis=1, kind="stable")
    knn1 = (y[order[:, 0]] == y).astype(float)
    items = validation_item_scores(model, X, y, "knn_accuracy")
    np.testing.assert_array_equal(items, knn1)
    assert validation_score(model, X, y, "knn_accuracy") == 1.0 - knn_error(model, X, y)
    assert validation_score(model, X, y, "knn_accuracy") == pytest.approx(items.mean(), abs=1e-15)
    p3 = validation_item_scores(model, X, y, "precision@3")
    np.testing.assert_allclose(p3, (y[order[:, :3]] == y[:, None]).mean(1))
    assert validation_score(model, X, y, "precision@3") \
        == evaluate_retrieval(model, X, y, k=(3,))["precision_at_3"]
    assert validation_score(model, X, y, "precision@3") == pytest.approx(p3.mean(), abs=1e-15)
    ap = validation_item_scores(model, X, y, "map")
    assert np.isnan(ap[-1]) and np.isfinite(ap[:-1]).all()
    for i in (0, 5):                                 # AP from its definition
        rel = y[order[i, :-1]] == y[i]
        prec = np.cumsum(rel) / np.arange(1, rel.size + 1)
        assert ap[i] == pytest.approx(prec[rel].mean(), abs=1e-12)
    assert validation_score(model, X, y, "map") == ap[:-1].mean() \
        == evaluate_retrieval(model, X, y, k=())["map"]
    with pytest.raises(ValueError, match="validation_item_scores: parameter scoring='auc'"):
        validation_item_scores(model, X, y, "auc")


@pytest.mark.parametrize("func", ["validation_item_scores", "validation_score_and_items",
                                  "validation_score"])
@pytest.mark.parametrize("scoring", ["map", "precision@2", "knn_accuracy"])
def test_validation_terms_refuse_bad_input_naming_the_function(func, scoring):
    import tripletml.metrics as M
    from tripletml import Euclidean

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 3)), np.arange(20) % 2
    model = Euclidean().fit(X, y)
    f = getattr(M, func)
    with pytest.raises(ValueError, match="NaN or infinity"):
        f(model, np.where(np.eye(20, 3) > 0, np.nan, X), y, scoring)
    with pytest.raises(ValueError, match="NaN or infinity"):
        f(model, X + np.inf, y, scoring)
    with pytest.raises(ValueError, match=f"^{func}: .*2-D"):
        f(model, X[:, 0], y, scoring)
    with pytest.raises(ValueError, match=f"^{func}: .*no rows"):
        f(model, X[:0], y[:0], scoring)
    with pytest.raises(ValueError, match=f"^{func}: len\\(y"):
        f(model, X, y[:5], scoring)
    with pytest.raises(TypeError, match=f"^{func}: y must be a sequence"):
        f(model, X, None, scoring)
    with pytest.raises(ValueError, match=f"^{func}: parameter scoring='auc'"):
        f(model, X, y, "auc")


def test_triplet_accuracy_per_triplet_is_each_triplets_verdict():
    from tripletml import Euclidean

    rng = np.random.default_rng(0)
    X = rng.standard_normal((15, 3))
    model = Euclidean().fit(X, np.arange(15) % 3)
    T = np.array([rng.choice(15, 3, replace=False) for _ in range(50)])
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    right = triplet_accuracy(model, X, T, per_triplet=True)
    np.testing.assert_array_equal(right, D[T[:, 0], T[:, 1]] < D[T[:, 0], T[:, 2]])
    assert triplet_accuracy(model, X, T) == right.mean()
    with pytest.raises(TypeError, match="triplet_accuracy: per_triplet must be a bool"):
        triplet_accuracy(model, X, T, per_triplet="yes")
    with pytest.raises(ValueError, match="triplet_accuracy: triplets index 15 is out of range"):
        triplet_accuracy(model, X, np.array([[0, 1, 15]]), per_triplet=True)
