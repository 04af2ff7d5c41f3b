"""tripletml.search.index: exact search equals the brute-force top k of
``model.similarity`` (tie rule: lower index first), the faiss backends agree
with it, save/load round trips, and clear errors."""
import json
import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

import tripletml.search.index as tindex
from tripletml import DotProduct, LORETA, LowRankDML, OASIS
from tripletml.search.index import (IP_TO_L2_CONE, SimilarityIndex, build, embedding_cone,
                             faiss_available, load_index)

from _estimators import ESTIMATORS, toy_data

# faiss is in the dev extra: CI runs the faiss tests, never skips them
import faiss  # noqa: F401,E402


def brute_topk(model, Q, D, k):
    S = model.similarity(Q, D)
    S = S.toarray() if sp.issparse(S) else np.asarray(S)
    ids = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(S, ids, axis=1), S


def mixture(n, d=6, seed=0, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    centers = rng.normal(scale=3.0, size=(n_classes, d))
    return centers[y] + rng.normal(size=(n, d)), y


@pytest.fixture
def small_blocks(monkeypatch):
    """Tiny scan blocks, so that every boundary of the blockwise scan is hit."""
    monkeypatch.setattr(tindex, "_Q_BLOCK", 5)
    monkeypatch.setattr(tindex, "_DB_BLOCK", 7)
    monkeypatch.setattr(tindex, "_MERGE_ROWS", 16)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_exact_numpy_search_equals_brute_force(factory, alt, sparse, small_blocks):
    X, y = toy_data(seed=0, n=30, d=5)
    model = factory().fit(X, y)
    D, _ = mixture(160, d=5, seed=1)
    Q, _ = mixture(13, d=5, seed=2)
    if sparse:
        D, Q = sp.csr_matrix(D * (D > 0)), sp.csr_matrix(Q * (Q > 0))
    index = SimilarityIndex(model, backend="numpy")
    for s in range(0, 160, 50):               # ids continue across add calls
        index.add(D[s:s + 50], batch_size=17)
    assert index.ntotal == 160 and index.is_exact
    for k in (1, 4, 140):                     # 140 > _LARGE_K: the whole-row path
        scores, ids = index.search(Q, k, batch_size=6)
        ref_ids, ref_scores, _ = brute_topk(model, Q, D, k)
        np.testing.assert_array_equal(ids, ref_ids)
        scale = max(1.0, np.abs(ref_scores).max())
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-10, atol=1e-10 * scale)


@pytest.mark.parametrize("model_factory", [
    lambda: DotProduct(),
    lambda: LowRankDML(n_triplets=200, max_iter=20, batch_size=20, eta0=0.1, alpha=0.01,
                       random_state=0)], ids=["inner_product", "neg_squared_l2"])
def test_ties_lower_index_first(model_factory, small_blocks):
    rng = np.random.default_rng(0)
    base = rng.integers(-2, 3, size=(6, 4)).astype(float)
    D = base[rng.integers(0, 6, size=90)]      # many exact duplicates: many ties
    X, y = toy_data(seed=0, n=30, d=4)
    model = model_factory().fit(X, y)
    index = build(model, D, backend="numpy")
    for k in (1, 5, 30, 89):
        scores, ids = index.search(base, k)
        ref_ids, ref_scores, _ = brute_topk(model, base, D, k)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(scores, ref_scores, atol=1e-9)


def test_float32_numpy_storage_is_close():
    X, y = mixture(300, seed=3)
    model = OASIS(n_triplets=500, random_state=0).fit(X, y)
    index = build(model, X, backend="numpy", dtype="float32")
    scores, ids = index.search(X[:20], 10)
    _, _, S = brute_topk(model, X[:20], X, 10)
    np.testing.assert_allclose(scores, np.take_along_axis(S, ids, axis=1), rtol=1e-4, atol=1e-4)
    kth = np.sort(S, axis=1)[:, -10]
    assert (scores[:, -1] >= kth - 1e-4 * np.abs(kth).max()).all()


def _check_near_exact(model, Q, D, ids, scores, k, tol=1e-4):
    """ids are a top k up to float32 rounding; scores are their similarities."""
    _, _, S = brute_topk(model, Q, D, k)
    assert (ids >= 0).all()
    got = np.take_along_axis(S, ids, axis=1)
    scale = max(1.0, np.abs(S).max())
    np.testing.assert_allclose(scores, got, atol=tol * scale)
    kth = -np.sort(-S, axis=1)[:, k - 1]
    assert (got.min(axis=1) >= kth - tol * scale).all()
    assert all(len(set(r)) == k for r in ids)


@pytest.mark.parametrize("model_factory", [
    lambda: OASIS(n_triplets=500, random_state=0),
    lambda: LORETA(rank=3, n_triplets=500, eta0=0.05, random_state=0),
    lambda: LowRankDML(n_triplets=300, max_iter=30, batch_size=20, eta0=0.1, alpha=0.01,
                       random_state=0)], ids=["OASIS", "LORETA", "LowRankDML"])
def test_faiss_flat_is_exact_up_to_float32(model_factory):
    X, y = mixture(400, seed=4)
    model = model_factory().fit(X, y)
    index = build(model, X[:300], backend="faiss", kind="flat")
    assert index.backend == "faiss" and index.dtype == np.float32
    scores, ids = index.search(X[300:], 10)
    _check_near_exact(model, X[300:], X[:300], ids, scores, 10)


@pytest.mark.parametrize("kind, params", [("ivf", dict(nlist=8)), ("hnsw", dict(hnsw_m=16))])
@pytest.mark.parametrize("model_factory, aug", [
    (lambda: OASIS(n_triplets=500, random_state=0), False),
    (lambda: OASIS(n_triplets=500, random_state=0), True),
    (lambda: LowRankDML(n_triplets=300, max_iter=30, batch_size=20, eta0=0.1, alpha=0.01,
                        random_state=0), False)], ids=["ip", "ip_to_l2", "l2"])
def test_faiss_approximate_kinds(kind, params, model_factory, aug):
    X, y = mixture(2000, seed=5)
    model = model_factory().fit(X[:300], y[:300])
    D, Q = X[:1900], X[1900:]
    index = build(model, D, kind=kind, random_state=0, ip_to_l2=aug, **params)
    assert index.ip_to_l2 == aug
    exact_ids, _, _ = brute_topk(model, Q, D, 10)
    if kind == "ivf":
        index.nprobe = index.nlist            # every cell visited: exact
        scores, ids = index.search(Q, 10)
        _check_near_exact(model, Q, D, ids, scores, 10)
        index.nprobe = 1
    scores, ids = index.search(Q, 10)
    found = ids >= 0
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact_ids)])
    assert recall >= 0.5, recall
    _, _, S = brute_topk(model, Q, D, 10)
    np.testing.assert_allclose(scores[found], np.take_along_axis(S, np.where(found, ids, 0),
                                                                 axis=1)[found],
                               atol=1e-4 * max(1, np.abs(S).max()))
    if kind == "hnsw":
        index.ef_search = 400
        _, ids = index.search(Q, 10)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact_ids)])
        assert recall >= 0.95, recall


@pytest.mark.parametrize("backend, kind", [("numpy", "flat"), ("faiss", "flat"),
                                           ("faiss", "ivf"), ("faiss", "hnsw")])
def test_save_load_round_trip(tmp_path, backend, kind):
    X, y = mixture(600, seed=6)
    model = LORETA(rank=3, n_triplets=500, eta0=0.05, random_state=0).fit(X, y)
    params = dict(nlist=4, nprobe=2) if kind == "ivf" else {}
    index = build(model, sp.csr_matrix(X), kind=kind, backend=backend, random_state=0, **params)
    scores, ids = index.search(X[:25], 7)
    path = tmp_path / "idx"
    index.save(path)
    index.save(path)                          # replacing an index directory is allowed
    files = sorted(p.name for p in path.iterdir())
    assert files == sorted(["index.json", "model.npz",
                            "vectors.npy" if backend == "numpy" else "index.faiss"])
    loaded = load_index(path)
    assert (loaded.backend, loaded.kind, loaded.metric, loaded.ntotal, loaded.dim) == \
        (backend, kind, "inner_product", 600, 3)
    assert (loaded.ip_to_l2, loaded.max_norm) == (index.ip_to_l2, index.max_norm)
    # the default: IVF augments; HNSW decides from the embeddings (centered here)
    assert loaded.ip_to_l2 is (kind == "ivf")
    assert embedding_cone(model.embed_database(X)) < IP_TO_L2_CONE
    np.testing.assert_array_equal(loaded.model.A_, model.A_)
    scores2, ids2 = loaded.search(X[:25], 7)
    np.testing.assert_array_equal(ids2, ids)
    np.testing.assert_array_equal(scores2, scores)
    # the loaded index keeps working: more rows
    loaded.add(X[:10])
    assert loaded.ntotal == 610


def _uneven_norms(n, d, seed):
    """Gaussian rows with norms spread over two decades: where the
    ip_to_l2 coordinate sqrt(M^2 - ||x||^2) matters."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * np.exp(rng.uniform(-2.3, 2.3, size=(n, 1)))


@pytest.mark.parametrize("model_factory", [
    lambda: DotProduct(),
    lambda: OASIS(n_triplets=500, random_state=0),
    lambda: LORETA(rank=3, n_triplets=500, eta0=0.05, random_state=0)],
    ids=["DotProduct", "OASIS", "LORETA"])
def test_ip_to_l2_flat_returns_the_exact_inner_product_neighbors(model_factory):
    """x -> [x, sqrt(M^2 - |x|^2)], q -> [q, 0] searched as L2 (faiss flat)
    gives the neighbors and scores of exact inner-product search: the
    brute-force top k of model.similarity and faiss's IndexFlatIP."""
    X, y = mixture(300, seed=13)
    model = model_factory().fit(X, y)
    D, Q = _uneven_norms(500, 6, seed=14), _uneven_norms(40, 6, seed=15)
    aug = build(model, D, kind="flat", backend="faiss", ip_to_l2=True)
    ip = build(model, D, kind="flat", backend="faiss")
    assert aug.ip_to_l2 and not ip.ip_to_l2 and aug.metric == "inner_product"
    assert aug._faiss_index.d == aug.dim + 1 == ip._faiss_index.d + 1
    E = model.embed_database(D)
    assert aug.max_norm == pytest.approx(np.linalg.norm(E, axis=1).max(), rel=1e-12)
    ref_ids, ref_scores, _ = brute_topk(model, Q, D, 10)
    scores, ids = aug.search(Q, 10)
    ip_scores, ip_ids = ip.search(Q, 10)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(ids, ip_ids)
    scale = np.abs(ref_scores).max()
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5 * scale)
    np.testing.assert_allclose(scores, ip_scores, atol=1e-5 * scale)


def test_ip_to_l2_defaults_limits_and_later_adds(tmp_path):
    X, y = mixture(300, seed=16)
    # standardized, not "sphere" (whose embeddings all have one norm)
    ip_model = OASIS(n_triplets=300, preprocessing="standardize", random_state=0).fit(X, y)
    l2_model = LowRankDML(n_triplets=200, max_iter=10, batch_size=20, eta0=0.1, alpha=0.01,
                          random_state=0).fit(X, y)
    # None: on for IVF over an inner-product model, decided at the first add
    # for HNSW (below), off for everything else
    assert SimilarityIndex(ip_model, kind="hnsw").ip_to_l2 is None
    assert SimilarityIndex(ip_model, kind="ivf").ip_to_l2 is True
    assert SimilarityIndex(ip_model, kind="hnsw", max_norm=2.0).ip_to_l2 is True
    assert SimilarityIndex(ip_model, kind="flat").ip_to_l2 is False
    assert SimilarityIndex(ip_model, kind="flat", ip_to_l2=True).ip_to_l2
    assert not SimilarityIndex(ip_model, kind="hnsw", ip_to_l2=False).ip_to_l2
    assert not SimilarityIndex(l2_model, kind="hnsw").ip_to_l2
    assert not SimilarityIndex(ip_model, backend="numpy").ip_to_l2
    with pytest.raises(ValueError, match="ip_to_l2=True.*inner-product model"):
        SimilarityIndex(l2_model, kind="hnsw", ip_to_l2=True)
    with pytest.raises(ValueError, match="ip_to_l2=True.*backend='faiss'"):
        SimilarityIndex(ip_model, backend="numpy", ip_to_l2=True)
    with pytest.raises(TypeError, match="ip_to_l2"):
        SimilarityIndex(ip_model, kind="hnsw", ip_to_l2="yes")
    with pytest.raises(ValueError, match="max_norm"):
        SimilarityIndex(ip_model, kind="hnsw", max_norm=0.0)
    with pytest.raises(ValueError, match="max_norm.*needs ip_to_l2"):
        SimilarityIndex(ip_model, kind="flat", max_norm=3.0)
    with pytest.raises(ValueError, match="max_norm.*needs ip_to_l2"):
        SimilarityIndex(ip_model, kind="hnsw", ip_to_l2=False, max_norm=3.0)
    # M is fixed by the first add: larger rows later are refused, nothing added
    D = _uneven_norms(400, 6, seed=17)
    norms = np.linalg.norm(ip_model.embed_database(D), axis=1)
    small, big = D[norms < np.median(norms)], D[norms >= np.median(norms)]
    index = build(ip_model, small, kind="flat", backend="faiss", ip_to_l2=True, batch_size=33)
    with pytest.raises(ValueError, match="exceeds this index's max_norm"):
        index.add(big)
    assert index.ntotal == small.shape[0]
    # room left with max_norm: later adds stay exact
    index = build(ip_model, small, kind="flat", backend="faiss", ip_to_l2=True,
                  max_norm=float(norms.max()))
    index.add(big, batch_size=50)
    ref_ids, ref_scores, _ = brute_topk(ip_model, X[:20], np.vstack([small, big]), 5)
    scores, ids = index.search(X[:20], 5)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5 * np.abs(ref_scores).max())
    # save / load keeps the augmentation and M
    index.save(tmp_path / "idx")
    loaded = load_index(tmp_path / "idx")
    assert loaded.ip_to_l2 and loaded.max_norm == index.max_norm
    np.testing.assert_array_equal(loaded.search(X[:20], 5)[1], ids)


def test_embedding_cone_against_its_formula():
    rng = np.random.default_rng(3)
    E = rng.normal(size=(50, 4)) + [3.0, 0, 0, 0]
    ref = np.linalg.norm(E.mean(0)) / np.mean([np.linalg.norm(e) for e in E])
    assert embedding_cone(E) == pytest.approx(ref, rel=1e-12)
    assert embedding_cone(np.tile([[1.0, 2.0]], (5, 1))) == pytest.approx(1.0)
    assert embedding_cone(np.vstack([E, -E])) == pytest.approx(0.0, abs=1e-12)
    assert embedding_cone(np.zeros((3, 2))) == 0.0 and embedding_cone(np.zeros((0, 2))) == 0.0


def test_hnsw_default_picks_the_better_graph_on_digits():
    """ip_to_l2=None decides from the embeddings' cone.  A model on raw
    non-negative pixels (cone ~0.8): an HNSW graph over the raw inner product
    misses neighbors no ef_search finds (measured 0.83 at 64, 0.86 at 256),
    the augmentation (chosen) reaches 1.  A standardized model (centered
    embeddings, cone < 0.1): the raw inner product (chosen) is the better graph."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Xtr, Xte, ytr = X[:1300], X[1300:], y[:1300]

    def recall(model, index, ef):
        _, exact = build(model, Xtr, backend="numpy").search(Xte, 10)
        index.ef_search = ef
        _, ids = index.search(Xte, 10)
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact)])

    # raw features, C=0.1: the model of the first measurement
    model = OASIS(n_triplets=20000, C=0.1, preprocessing=None, random_state=0).fit(Xtr, ytr)
    assert embedding_cone(model.embed_database(Xtr)) > IP_TO_L2_CONE
    chosen = build(model, Xtr, kind="hnsw", hnsw_m=16, ef_construction=128)
    raw = build(model, Xtr, kind="hnsw", hnsw_m=16, ef_construction=128, ip_to_l2=False)
    assert chosen.ip_to_l2 and not raw.ip_to_l2
    assert recall(model, chosen, 64) >= 0.98
    assert recall(model, chosen, 1300) == 1.0
    assert recall(model, raw, 64) < recall(model, chosen, 64)
    # standardized rows: centered embeddings, raw inner product (the default
    # "sphere" also gives a cone below 0.1, and all its database embeddings
    # have one norm, so there the augmentation changes nothing)
    model = OASIS(n_triplets=20000, preprocessing="standardize", random_state=0).fit(Xtr, ytr)
    assert embedding_cone(model.embed_database(Xtr)) < 0.1
    sphere = OASIS(n_triplets=2000, random_state=0).fit(Xtr, ytr)
    assert embedding_cone(sphere.embed_database(Xtr)) < 0.1
    chosen = build(model, Xtr, kind="hnsw", hnsw_m=16, ef_construction=128)
    aug = build(model, Xtr, kind="hnsw", hnsw_m=16, ef_construction=128, ip_to_l2=True)
    assert chosen.ip_to_l2 is False and aug.ip_to_l2
    assert recall(model, chosen, 64) >= 0.98
    assert recall(model, chosen, 64) > recall(model, aug, 64)


def test_load_reads_a_version_1_index(tmp_path):
    """Version 1 had no ip_to_l2: its faiss files hold the raw vectors."""
    X, y = mixture(200, seed=18)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    index = build(model, X, kind="hnsw", ip_to_l2=False)
    path = tmp_path / "idx"
    index.save(path)
    meta = json.loads((path / "index.json").read_text())
    for name in ("ip_to_l2", "max_norm"):
        del meta["params"][name]
    del meta["hashes"]
    (path / "index.json").write_text(json.dumps(dict(meta, format_version=1)))
    with pytest.warns(UserWarning, match="no content hashes"):
        loaded = load_index(path, allow_unverified=True)
    assert not loaded.ip_to_l2
    np.testing.assert_array_equal(loaded.search(X[:5], 3)[1], index.search(X[:5], 3)[1])
    # an augmented file that claims no augmentation is refused
    build(model, X, kind="hnsw", ip_to_l2=True).save(path)
    meta = json.loads((path / "index.json").read_text())
    meta["params"].update(ip_to_l2=False, max_norm=None)
    (path / "index.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not match"):
        load_index(path)



def _saved_numpy_index(tmp_path, n: int, seed: int):
    """An OASIS fitted on a mixture of n rows, its exact numpy index saved at
    tmp_path / "idx": ``(X, model, path)``."""
    X, y = mixture(n, seed=seed)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    path = tmp_path / "idx"
    build(model, X, backend="numpy").save(path)
    return X, model, path

def test_load_refuses_inconsistent_files(tmp_path):
    X, model, path = _saved_numpy_index(tmp_path, 100, 7)
    meta = json.loads((path / "index.json").read_text())
    with pytest.raises(FileNotFoundError, match="load_index"):
        load_index(tmp_path / "nothing")
    bad = dict(meta, ntotal=99)
    (path / "index.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="vectors.npy"):
        load_index(path)
    (path / "index.json").write_text(json.dumps(dict(meta, metric="neg_squared_l2")))
    with pytest.raises(ValueError, match="metric"):
        load_index(path)
    (path / "index.json").write_text(json.dumps(dict(meta, format="other")))
    with pytest.raises(ValueError, match="not a tripletml index"):
        load_index(path)
    (path / "index.json").write_text(json.dumps(meta))
    np.save(path / "vectors.npy", np.array([{"a": 1}] * 100, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="vectors.npy"):
        load_index(path)
    other = tmp_path / "file.txt"
    other.write_text("keep me")
    with pytest.raises(ValueError, match="refusing"):
        build(model, X, backend="numpy").save(other)
    assert other.read_text() == "keep me"


def test_without_faiss(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)     # import faiss -> ImportError
    assert not faiss_available()
    X, y = mixture(100, seed=8)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    for kw in (dict(kind="hnsw"), dict(kind="ivf"), dict(backend="faiss")):
        with pytest.raises(ImportError, match=r"pip install tripletml\[index\]"):
            build(model, X, **kw)
    index = build(model, X)                   # auto -> exact numpy
    assert index.backend == "numpy"
    ref_ids, _, _ = brute_topk(model, X[:5], X, 3)
    np.testing.assert_array_equal(index.search(X[:5], 3)[1], ref_ids)


def test_input_errors():
    X, y = mixture(50, seed=9)
    with pytest.raises(NotFittedError):
        build(OASIS(), X)
    with pytest.raises(TypeError, match="SimilarityIndex: model must be a tripletml triplet"):
        build(object(), X)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="kind"):
        build(model, X, kind="lsh")
    with pytest.raises(ValueError, match="backend"):
        build(model, X, backend="annoy")
    with pytest.raises(ValueError, match="numpy backend is exact"):
        build(model, X, backend="numpy", kind="hnsw")
    with pytest.raises(ValueError, match="float32"):
        build(model, X, backend="faiss", dtype="float64")
    with pytest.raises(TypeError, match="unknown parameter"):
        build(model, X, n_lists=3)
    with pytest.raises(ValueError, match="nlist"):
        build(model, X, kind="ivf", nlist=0)
    with pytest.raises(ValueError, match="needs at least 60"):
        build(model, X, kind="ivf", nlist=60)
    index = SimilarityIndex(model, backend="numpy")
    with pytest.raises(ValueError, match="empty"):
        index.search(X, 1)
    with pytest.raises(ValueError, match="no rows"):
        index.add(X[:0])
    with pytest.raises(ValueError, match="2-D"):
        index.add(X[0])
    index.add(X)
    with pytest.raises(ValueError, match="1 <= k <= ntotal=50"):
        index.search(X, 51)
    with pytest.raises(ValueError, match="1 <= k"):
        index.search(X, 0)
    with pytest.raises(TypeError, match="k must be an int"):
        index.search(X, 2.0)
    with pytest.raises(ValueError, match="OASIS.*features"):
        index.search(X[:, :3], 2)
    with pytest.raises(ValueError, match="batch_size"):
        index.search(X, 2, batch_size=0)


# --------------------------------------------------------------------------
# command line: tripletml index build / tripletml search
# --------------------------------------------------------------------------
def _cli_main(monkeypatch):
    """tripletml.cli.main with the search subcommands registered (as cli.py
    does with tripletml.cli.search.add_subcommands; no-op once it does)."""
    import argparse

    import tripletml.cli as cli
    from tripletml.cli.search import add_subcommands

    original = cli.build_parser

    def build_parser():
        p = original()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        if "search" not in sub.choices:
            add_subcommands(sub)
        return p

    monkeypatch.setattr(cli, "build_parser", build_parser)
    return cli.main, build_parser


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_cli_index_build_and_search(tmp_path, capsys, monkeypatch, kind):
    from sklearn.datasets import dump_svmlight_file

    from tripletml import load_model

    main, _ = _cli_main(monkeypatch)
    X, y = mixture(300, d=5, seed=11)
    X = np.abs(X)
    dump_svmlight_file(X, y, str(tmp_path / "db.svm"), zero_based=False)
    dump_svmlight_file(X[:7], y[:7], str(tmp_path / "q.svm"), zero_based=False)
    model_path, index_path = tmp_path / "m.npz", tmp_path / "idx"
    assert main(["fit", "loreta", str(tmp_path / "db.svm"), "-o", str(model_path),
                 "--param", "rank=3", "--param", "n_triplets=500", "--param", "eta0=0.05",
                 "--seed", "0"]) == 0
    capsys.readouterr()
    args = ["index", "build", str(model_path), str(tmp_path / "db.svm"), "-o", str(index_path),
            "--kind", kind]
    if kind == "hnsw":
        args += ["--ef-search", "400", "--ef-construction", "100", "--no-ip-to-l2"]
    assert main(args) == 0
    assert "indexed 300 rows" in capsys.readouterr().out
    if kind == "hnsw":
        saved = load_index(index_path)
        assert not saved.ip_to_l2 and saved.ef_construction == 100
    assert main(["search", str(index_path), str(tmp_path / "q.svm"), "-k", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "query\trank\tid\tscore" and len(lines) == 1 + 7 * 4
    got = np.array([int(line.split("\t")[2]) for line in lines[1:]]).reshape(7, 4)
    model = load_model(model_path)
    S = model.similarity(X[:7], X)
    ref = np.argsort(-S, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(got, ref)
    out = tmp_path / "res.npz"
    assert main(["search", str(index_path), str(tmp_path / "q.svm"), "-k", "4", "-o",
                 str(out)]) == 0
    with np.load(out, allow_pickle=False) as f:
        np.testing.assert_array_equal(f["ids"], ref)
        np.testing.assert_allclose(f["scores"], np.take_along_axis(S, ref, axis=1),
                                   rtol=1e-4, atol=1e-5)


def test_cli_search_errors(tmp_path, capsys, monkeypatch):
    main, _ = _cli_main(monkeypatch)
    assert main(["search", str(tmp_path / "nothing"), "q.svm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tripletml: error:") and "not a tripletml index" in err
    X, y = mixture(100, d=4, seed=12)
    from sklearn.datasets import dump_svmlight_file
    dump_svmlight_file(X, y, str(tmp_path / "db.svm"), zero_based=False)
    assert main(["fit", "oasis", str(tmp_path / "db.svm"), "-o", str(tmp_path / "m.npz"),
                 "--param", "n_triplets=200"]) == 0
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert main(["index", "build", str(tmp_path / "m.npz"), str(tmp_path / "db.svm"), "-o",
                 str(tmp_path / "idx"), "--kind", "hnsw"]) == 2
    assert "pip install tripletml[index]" in capsys.readouterr().err
    # help text of every argument: tests/test_cli.py walks the whole parser,
    # index and search included


def test_loreta_50000_features_rank_25_index_memory_is_o_n_plus_d_times_k(tmp_path):
    """Issue 15's memory goal at its own size: building, searching, saving
    and loading an index of a 50,000-feature, rank-25 LORETA model allocates
    O((n + d) k), never d x d (20 GB) nor n x d (1.2 GB): the traced NumPy
    peak stays under 8 (n + d) k float64 values plus one block of scores."""
    import tracemalloc

    d, k, n, n_q = 50_000, 25, 3000, 40
    rng = np.random.default_rng(0)

    def rows(m, seed):
        """30 uniform features a row plus one of 50 'topic' features (CSR
        built directly: scipy's sp.random is slow at this width)."""
        r = np.random.default_rng(seed)
        cols = np.hstack([r.integers(50, d, size=(m, 30)), r.integers(0, 50, size=(m, 1))])
        X = sp.csr_matrix((r.exponential(size=cols.size), cols.ravel(),
                           np.arange(0, cols.size + 1, 31)), shape=(m, d))
        X.sum_duplicates()
        return X

    Xtr = rows(200, 1)
    model = LORETA(rank=k, n_triplets=100, eta0=0.05, init="random",
                   random_state=0).fit(Xtr, rng.integers(0, 5, 200))
    Xdb, Xq = rows(n, 2), rows(n_q, 3)
    # model (A, B and their pseudo-inverse factors, d x k each) and
    # embeddings, a few times over, plus the scan's fixed score block
    bound = 8 * (n + d) * k * 8 + tindex._Q_BLOCK * tindex._DB_BLOCK * 8
    assert bound < d * d * 8 / 100 and bound < n * d * 8 / 5
    build(model, Xdb[:20], backend="numpy").search(Xq[:2], 10)     # compile outside
    tracemalloc.start()
    try:
        index = build(model, Xdb, backend="numpy", batch_size=1000)
        scores, ids = index.search(Xq, 10)
        index.save(tmp_path / "idx")
        loaded = load_index(tmp_path / "idx")
        _, ids2 = loaded.search(Xq, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < bound, (peak, bound)
    assert index.dim == k
    np.testing.assert_array_equal(ids2, ids)
    ref_ids, _, _ = brute_topk(model, Xq, Xdb, 10)
    np.testing.assert_array_equal(ids, ref_ids)


def test_hnsw_default_needs_enough_rows_to_read_the_cone():
    """One row's cone is always 1: a first add below IP_TO_L2_MIN_ROWS keeps
    the raw inner product, and later adds of ordinary rows still work."""
    X, y = mixture(300, seed=21)
    model = OASIS(n_triplets=300, preprocessing=None, random_state=0).fit(X, y)
    index = SimilarityIndex(model, kind="hnsw")
    index.add(X[:1])
    assert index.ip_to_l2 is False
    index.add(X[1:])
    assert index.ntotal == 300
    assert embedding_cone(model.embed_database(X[:1])) == pytest.approx(1.0)


def test_index_over_autosimilarity_is_the_winners(tmp_path):
    from tripletml import AutoSimilarity
    from tripletml.auto import FAST_CANDIDATES

    X, y = mixture(240, seed=22)
    auto = AutoSimilarity(candidates=FAST_CANDIDATES, random_state=0).fit(X, y)
    exact = build(auto, X, backend="numpy")
    ref_ids, ref_scores, _ = brute_topk(auto.best_estimator_, X[:5], X, 3)
    scores, ids = exact.search(X[:5], 3)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12, atol=1e-12)
    index = build(auto, X, kind="hnsw")
    assert type(index.model) is type(auto.best_estimator_)
    _, ids = index.search(X[:5], 3)
    index.save(tmp_path / "idx")
    np.testing.assert_array_equal(load_index(tmp_path / "idx").search(X[:5], 3)[1], ids)


# ---------------------------------------------------------------------------
# integrity (issue 26, item 6): content hashes, regular files, no overwrite
# ---------------------------------------------------------------------------
def _flip(file, where=0.6):
    data = bytearray(file.read_bytes())
    pos = int(len(data) * where)
    data[pos] ^= 0xFF
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
def test_flipped_bytes_in_the_body_are_refused(tmp_path, backend):
    X, y = mixture(200, seed=31)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    path = tmp_path / "idx"
    build(model, X, backend=backend, kind="flat").save(path)
    meta = json.loads((path / "index.json").read_text())
    name = "index.faiss" if backend == "faiss" else "vectors.npy"
    assert set(meta["hashes"]) == {"model.npz", name} and meta["format_version"] == 3
    load_index(path)                                  # intact: loads
    _flip(path / name)
    with pytest.raises(ValueError, match=f"{name} does not match the SHA-256"):
        load_index(path)


def test_replaced_model_is_refused(tmp_path):
    X, y = mixture(200, seed=32)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    other = OASIS(n_triplets=200, random_state=1).fit(X, y)   # same class, same shape
    path = tmp_path / "idx"
    build(model, X, backend="numpy").save(path)
    other.save(path / "model.npz")
    with pytest.raises(ValueError, match="model.npz does not match the SHA-256"):
        load_index(path)


def test_stripped_or_malformed_hashes_are_refused(tmp_path):
    X, model, path = _saved_numpy_index(tmp_path, 120, 33)
    meta = json.loads((path / "index.json").read_text())
    for bad in ({}, {"model.npz": meta["hashes"]["model.npz"]}, "x",
                dict(meta["hashes"], **{"vectors.npy": 5})):
        (path / "index.json").write_text(json.dumps(dict(meta, hashes=bad)))
        with pytest.raises(ValueError, match="does not record the SHA-256"):
            load_index(path)
    # a downgrade to a version without hashes is refused by default ...
    legacy = {k: v for k, v in meta.items() if k != "hashes"}
    (path / "index.json").write_text(json.dumps(dict(legacy, format_version=2)))
    with pytest.raises(ValueError, match="without content hashes.*rebuild"):
        load_index(path)
    with pytest.raises(TypeError, match="allow_unverified"):
        load_index(path, allow_unverified="yes")
    # ... loads with a warning on request, and saving it again records them
    with pytest.warns(UserWarning, match="unverified"):
        loaded = load_index(path, allow_unverified=True)
    loaded.save(path)
    assert json.loads((path / "index.json").read_text())["format_version"] == 3
    load_index(path)
    (path / "index.json").write_text(json.dumps(dict(meta, format_version=2)))
    with pytest.raises(ValueError, match="hashes in a version-2 index"):
        load_index(path, allow_unverified=True)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", ["index.json", "vectors.npy", "model.npz"])
def test_special_files_in_an_index_are_refused_without_blocking(tmp_path, name):
    X, model, path = _saved_numpy_index(tmp_path, 120, 34)
    (path / name).unlink()
    os.mkfifo(path / name)
    with pytest.raises(ValueError, match="FIFO"):
        load_index(path)
    (path / name).unlink()
    (path / name).mkdir()
    with pytest.raises(ValueError, match="directory"):
        load_index(path)


def test_save_replaces_only_index_directories(tmp_path):
    X, y = mixture(120, seed=35)
    model = OASIS(n_triplets=200, random_state=0).fit(X, y)
    index = build(model, X, backend="numpy")
    # a directory holding an index.json of another program, or an index
    # directory with files of the user in it, is not replaced
    web = tmp_path / "site"
    web.mkdir()
    (web / "index.json").write_text('{"page": 1}')
    mixed = tmp_path / "mixed"
    index.save(mixed)
    (mixed / "notes.txt").write_text("mine")
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "link"
    link.symlink_to(mixed)
    for target in (web, mixed, empty, link):
        with pytest.raises(ValueError, match="refusing to overwrite"):
            index.save(target)
    assert (web / "index.json").read_text() == '{"page": 1}'
    assert (mixed / "notes.txt").read_text() == "mine"
    assert tindex.is_index_dir(tmp_path / "idx") is False
    index.save(tmp_path / "idx")
    assert tindex.is_index_dir(tmp_path / "idx") is True
    index.save(tmp_path / "idx")                      # an index is replaced
