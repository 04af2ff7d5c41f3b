"""k-NN with any learner through the index, and evaluate_retrieval(index=...),
against brute-force loops over ``model.similarity``."""
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from tripletml import LORETA, OASIS, DotProduct, Euclidean, LowRankDML
from tripletml.search.index import build
from tripletml.metrics import evaluate_retrieval, knn_error
from tripletml.search.neighbors import KNeighborsTripletClassifier

from _estimators import ESTIMATORS


def data(n=120, d=5, seed=0, n_classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    X = rng.normal(size=(n, d)) + 1.5 * np.eye(n_classes, d)[y]
    return X, np.array(["a", "b", "c"])[y]


def brute_knn(model, Xtr, ytr, Xte, k):
    """Per-query loop: stable order of -S, majority, class tie -> nearest."""
    S = np.asarray(model.similarity(Xte, Xtr))
    pred, proba = [], []
    classes = np.unique(ytr)
    for row in S:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        labels = [ytr[j] for j in order]
        c = Counter(labels)
        best = max(c.values())
        pred.append(next(lab for lab in labels if c[lab] == best))
        proba.append([c[cl] / k for cl in classes])
    return np.array(pred), np.array(proba)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
def test_knn_classifier_equals_brute_force(factory, alt):
    Xtr, ytr = data(90, seed=1)
    Xte, yte = data(40, seed=2)
    for k in (1, 4, 7):
        clf = KNeighborsTripletClassifier(factory(), n_neighbors=k).fit(Xtr, ytr)
        ref_pred, ref_proba = brute_knn(clf.learner_, Xtr, ytr, Xte, k)
        np.testing.assert_array_equal(clf.predict(Xte), ref_pred)
        np.testing.assert_allclose(clf.predict_proba(Xte), ref_proba)
        assert clf.score(Xte, yte) == pytest.approx(np.mean(ref_pred == yte))
        assert 1 - clf.score(Xte, yte) == pytest.approx(
            knn_error(clf.learner_, Xtr, ytr, Xte, yte, k=k))


def test_knn_bilinear_prefit_sparse_and_ties():
    Xtr, ytr = data(80, seed=3)
    Xte, _ = data(30, seed=4)
    model = OASIS(n_triplets=400, random_state=0).fit(Xtr, ytr)
    clf = KNeighborsTripletClassifier(model, n_neighbors=4, prefit=True).fit(
        sp.csr_matrix(Xtr), ytr)
    assert clf.learner_ is model
    ref_pred, ref_proba = brute_knn(model, Xtr, ytr, Xte, 4)
    np.testing.assert_array_equal(clf.predict(sp.csr_matrix(Xte)), ref_pred)
    np.testing.assert_allclose(clf.predict_proba(Xte), ref_proba)
    # k=2 with two different classes is a class tie: the nearest one wins
    clf2 = KNeighborsTripletClassifier(model, n_neighbors=2, prefit=True).fit(Xtr, ytr)
    _, ids = clf2.kneighbors(Xte)
    split = ytr[ids[:, 0]] != ytr[ids[:, 1]]
    assert split.any()
    np.testing.assert_array_equal(clf2.predict(Xte)[split], ytr[ids[split, 0]])
    sims, ids = clf.kneighbors(Xte, n_neighbors=3)
    S = model.similarity(Xte, Xtr)
    np.testing.assert_array_equal(ids, np.argsort(-S, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(sims, np.take_along_axis(S, ids, axis=1))


def test_knn_default_learner_is_euclidean_and_clone():
    Xtr, ytr = data(60, seed=5)
    clf = KNeighborsTripletClassifier(n_neighbors=3).fit(Xtr, ytr)
    assert isinstance(clf.learner_, Euclidean)
    ref, _ = brute_knn(Euclidean().fit(Xtr), Xtr, ytr, Xtr[:20], 3)
    np.testing.assert_array_equal(clf.predict(Xtr[:20]), ref)
    est = KNeighborsTripletClassifier(LORETA(rank=2, n_triplets=100), n_neighbors=2)
    c2 = clone(est)
    assert c2.get_params()["learner__rank"] == 2
    c2.set_params(learner__rank=3, n_neighbors=1)
    assert c2.learner.rank == 3 and est.learner.rank == 2


def test_knn_faiss_hnsw_close_to_exact():
    Xtr, ytr = data(600, seed=6)
    Xte, yte = data(100, seed=7)
    model = LowRankDML(n_triplets=300, max_iter=30, batch_size=20, eta0=0.1, alpha=0.01,
                       random_state=0)
    exact = KNeighborsTripletClassifier(model, n_neighbors=5).fit(Xtr, ytr)
    approx = KNeighborsTripletClassifier(model, n_neighbors=5, index_kind="hnsw",
                                         backend="faiss",
                                         index_params={"ef_search": 300}).fit(Xtr, ytr)
    assert approx.index_.kind == "hnsw"
    assert np.mean(approx.predict(Xte) == exact.predict(Xte)) >= 0.95


def test_knn_errors():
    X, y = data(30)
    with pytest.raises(NotFittedError):
        KNeighborsTripletClassifier().predict(X)
    with pytest.raises(ValueError, match="KNeighborsTripletClassifier.*n_neighbors"):
        KNeighborsTripletClassifier(n_neighbors=0).fit(X, y)
    with pytest.raises(TypeError, match="KNeighborsTripletClassifier: learner must be"):
        KNeighborsTripletClassifier(learner="oasis").fit(X, y)
    with pytest.raises(ValueError, match="index_kind"):
        KNeighborsTripletClassifier(index_kind="lsh").fit(X, y)
    with pytest.raises(TypeError, match="prefit"):
        KNeighborsTripletClassifier(prefit="yes").fit(X, y)
    with pytest.raises(NotFittedError):
        KNeighborsTripletClassifier(OASIS(), prefit=True).fit(X, y)
    with pytest.raises(ValueError, match="continuous"):
        KNeighborsTripletClassifier().fit(X, np.linspace(0, 1, 30))
    clf = KNeighborsTripletClassifier(n_neighbors=31).fit(X, y)
    with pytest.raises(ValueError, match="n_neighbors=31 must satisfy"):
        clf.predict(X)
    clf = KNeighborsTripletClassifier(n_neighbors=3).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :2])


# --------------------------------------------------------------------------
# evaluate_retrieval(index=...)
# --------------------------------------------------------------------------
def brute_retrieval(model, Xq, yq, Xdb, ydb, ks, K=None):
    """Loop over queries: AP over the top K (all when None), P@k, recall@k."""
    loo = Xdb is None
    S = np.asarray(model.similarity(Xq, Xq if loo else Xdb))
    ydb = yq if loo else ydb
    aps, prec, rec = [], {k: [] for k in ks}, {k: [] for k in ks}
    for i, row in enumerate(S):
        order = [j for j in sorted(range(len(row)), key=lambda j: (-row[j], j))
                 if not (loo and j == i)]
        rel = [ydb[j] == yq[i] for j in order]
        n_rel = sum(rel)
        top = rel if K is None else rel[:K]
        hits, ap = 0, 0.0
        for r, is_rel in enumerate(top, 1):
            if is_rel:
                hits += 1
                ap += hits / r
        if n_rel:
            aps.append(ap / n_rel)
        for k in ks:
            prec[k].append(sum(rel[:k]) / k)
            if n_rel:
                rec[k].append(sum(rel[:k]) / n_rel)
    out = {"map" if K is None else f"map_at_{K}": np.mean(aps)}
    out.update({f"precision_at_{k}": np.mean(prec[k]) for k in ks})
    out.update({f"recall_at_{k}": np.mean(rec[k]) for k in ks})
    return out


@pytest.mark.parametrize("model_factory", [
    lambda: OASIS(n_triplets=300, random_state=0),
    lambda: LowRankDML(n_triplets=300, max_iter=30, batch_size=20, eta0=0.1, alpha=0.01,
                       random_state=0),
    lambda: DotProduct()], ids=["OASIS", "LowRankDML", "DotProduct"])
def test_evaluate_retrieval_with_exact_index_equals_brute_force(model_factory):
    Xdb, ydb = data(150, seed=8)
    Xq, yq = data(35, seed=9)
    Xdb = np.round(Xdb)                       # ties in the rankings
    model = model_factory().fit(Xdb, ydb)
    ks = (1, 3, 10)
    index = build(model, Xdb, backend="numpy")
    plain = evaluate_retrieval(model, Xq, yq, Xdb, ydb, k=ks, recall=True)
    via = evaluate_retrieval(model, Xq, yq, y_db=ydb, k=ks, index=index, recall=True,
                             chunk_size=8)
    ref = brute_retrieval(model, Xq, yq, Xdb, ydb, ks)
    assert set(via) == set(ref) == set(plain)
    for key in ref:
        assert via[key] == pytest.approx(ref[key], abs=1e-12), key
        assert plain[key] == pytest.approx(ref[key], abs=1e-12), key
    # leave-one-out: the queries are the index rows
    via = evaluate_retrieval(None, Xdb, ydb, k=ks, index=index, recall=True)
    ref = brute_retrieval(model, Xdb, ydb, None, None, ks)
    for key in ref:
        assert via[key] == pytest.approx(ref[key], abs=1e-12), key
    # truncated ranking: AP over the top 20
    via = evaluate_retrieval(model, Xq, yq, y_db=ydb, k=ks, index=index, search_k=20,
                             recall=True)
    ref = brute_retrieval(model, Xq, yq, Xdb, ydb, ks, K=20)
    assert set(via) == set(ref)
    for key in ref:
        assert via[key] == pytest.approx(ref[key], abs=1e-12), key


def test_evaluate_retrieval_index_errors():
    Xdb, ydb = data(50, seed=10)
    model = OASIS(n_triplets=100, random_state=0).fit(Xdb, ydb)
    index = build(model, Xdb, backend="numpy")
    with pytest.raises(ValueError, match="X_db must be None"):
        evaluate_retrieval(model, Xdb, ydb, Xdb, ydb, index=index)
    with pytest.raises(ValueError, match="len\\(y_db\\)=49"):
        evaluate_retrieval(model, Xdb, ydb, y_db=ydb[:49], index=index)
    with pytest.raises(ValueError, match="leave-one-out"):
        evaluate_retrieval(model, Xdb[:10], ydb[:10], index=index)
    with pytest.raises(ValueError, match="search_k=3 is smaller"):
        evaluate_retrieval(model, Xdb, ydb, y_db=ydb, index=index, k=5, search_k=3)
    with pytest.raises(TypeError, match="search_k must be an int"):
        evaluate_retrieval(model, Xdb, ydb, y_db=ydb, index=index, search_k=3.0)
    with pytest.raises(ValueError, match="only used with an index"):
        evaluate_retrieval(model, Xdb, ydb, search_k=3)
    with pytest.raises(TypeError, match="index must be"):
        evaluate_retrieval(model, Xdb, ydb, y_db=ydb, index=object())
