"""LMNN (Weinberger & Saul, JMLR 2009): the objective against a plain dense
transcription of eqs. 11-13, the gradient by finite differences, the
impostor searches against each other, and the fitted model's behavior."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier

import tripletml as tm
import tripletml.algorithms.lmnn.kernels as solver
from tripletml import LMNN


# ------------------------------------------------------------------ reference
def reference_targets(X, y, k):
    """The k nearest same-class rows of each row (Euclidean), by sorting."""
    n = len(X)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    T = []
    for i in range(n):
        same = [j for j in range(n) if j != i and y[j] == y[i]]
        same.sort(key=lambda j: D[i, j])
        T.append(same[:k])
    return T


def reference_objective(L, X, y, T, mu):
    """eq. 13: (1 - mu) sum_{i, j~>i} ||L(x_i - x_j)||^2
    + mu sum_{i, j~>i} sum_l (1 - y_il) [1 + ||L(x_i - x_j)||^2 - ||L(x_i - x_l)||^2]_+,
    every triplet written out (dense n x n distances)."""
    Z = X @ L.T
    D = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    pull = push = 0.0
    for i in range(len(X)):
        for j in T[i]:
            pull += D[i, j]
            for l in range(len(X)):
                if y[l] != y[i]:
                    push += max(0.0, 1.0 + D[i, j] - D[i, l])
    return (1 - mu) * pull + mu * push


def reference_triplet_objective(L, X, triplets, mu):
    Z = X @ L.T
    d = lambda a, b: float(np.sum((Z[a] - Z[b]) ** 2))
    pairs = {(q, p) for q, p, _ in triplets}
    return ((1 - mu) * sum(d(q, p) for q, p in pairs)
            + mu * sum(max(0.0, 1 + d(q, p) - d(q, m)) for q, p, m in triplets))


def _data(seed=0, n=45, d=4, classes=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.normal(size=(n, d)) + 0.8 * y[:, None]
    return X, y


def _objective(X, y, k, mu):
    return solver.LMNNObjective(X, y, solver.select_targets(X, y, k), mu)


# ------------------------------------------------------------------ objective
@pytest.mark.parametrize("mu", [0.5, 0.2, 1.0])
@pytest.mark.parametrize("r", [4, 2])
def test_objective_equals_the_paper(mu, r):
    X, y = _data()
    T = reference_targets(X, y, 3)
    np.testing.assert_array_equal(solver.select_targets(X, y, 3), np.array(T))
    f = _objective(X, y, 3, mu)
    rng = np.random.default_rng(1)
    for scale in (0.3, 1.0, 2.0):
        L = scale * rng.normal(size=(r, 4))
        ref = reference_objective(L, X, y, T, mu)
        assert f(L)[0] == pytest.approx(ref, rel=1e-10, abs=1e-10)
        assert ref > 0


def test_target_ties_are_broken_by_row_number_whatever_the_scale():
    """Integer rows have exactly tied distances; rounding in a rescaled copy
    must not reorder them (else c * X would learn another metric)."""
    rng = np.random.default_rng(11)
    X = rng.integers(0, 3, size=(40, 3)).astype(float)
    y = np.arange(40) % 2
    T = solver.select_targets(X, y, 3)
    Xr = (X - X.mean(axis=0)) / X.std(axis=0)
    differ = 0
    for c in (1e-3, 0.1, 7.0, 1e3):
        Xc = (c * X - (c * X).mean(axis=0)) / (c * X).std(axis=0)
        differ += not np.array_equal(Xc, Xr)               # rounding differs
        np.testing.assert_array_equal(solver.select_targets(Xc, y, 3),
                                      solver.select_targets(Xr, y, 3))
    assert differ                                          # the test is not vacuous
    # ties by row number: the reference's stable sort
    ref = reference_targets(X, y, 3)
    np.testing.assert_array_equal(T, np.array(ref))


def test_gradient_by_finite_differences():
    X, y = _data(seed=2)
    f = _objective(X, y, 3, 0.5)
    rng = np.random.default_rng(3)
    for r in (4, 2):
        L = 0.7 * rng.normal(size=(r, 4))
        value, grad, info = f(L)
        assert info["active"] > 0          # the hinge is in play
        for _ in range(3):
            E = rng.normal(size=L.shape)
            h = 1e-6
            fd = (f(L + h * E)[0] - f(L - h * E)[0]) / (2 * h)
            assert fd == pytest.approx(float(np.sum(grad * E)), rel=1e-6)


def test_tree_and_brute_force_impostor_searches_agree(monkeypatch):
    X, y = _data(seed=4, n=60, d=3)
    L = np.random.default_rng(5).normal(size=(3, 3))
    brute = _objective(X, y, 2, 0.5)(L)
    monkeypatch.setattr(solver, "TREE_MIN_ROWS", 1)
    monkeypatch.setattr(solver, "TREE_MAX_DIM", 10)
    tree = _objective(X, y, 2, 0.5)(L)
    assert tree[0] == pytest.approx(brute[0], rel=1e-12)
    np.testing.assert_allclose(tree[1], brute[1], rtol=1e-10, atol=1e-10)
    assert tree[2] == brute[2]


def test_blocked_search_finds_every_impostor(monkeypatch):
    """Blocks of a few rows (many class rectangles and blocks) give the same
    candidate pairs as a dense search."""
    X, y = _data(seed=6, n=40, d=3, classes=4)
    f = _objective(X, y, 2, 0.5)
    L = np.random.default_rng(7).normal(size=(3, 3))
    Z = X @ L.T
    rad = np.random.default_rng(8).random(len(X)) * 4 + 1
    D = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    want = {(i, l) for i in range(len(X)) for l in range(len(X))
            if y[i] != y[l] and D[i, l] < rad[i]}
    import tripletml.linalg.pairwise as pw
    for elements in (pw.BLOCK_ELEMENTS, 30):
        monkeypatch.setattr(pw, "BLOCK_ELEMENTS", elements)
        got = set()
        for i, l in f._candidates(Z, rad):
            got |= set(zip(i.tolist(), l.tolist()))
        assert got == want


def test_triplet_objective_and_gradient():
    X, y = _data(seed=9)
    rng = np.random.default_rng(10)
    t = []
    while len(t) < 60:
        q, p, m = rng.integers(0, len(X), 3)
        if y[q] == y[p] and y[q] != y[m] and q != p:
            t.append((q, p, m))
    t = np.array(t + t[:5])                                 # repeated triplets count twice
    f = solver.LMNNTripletObjective(X, t, 0.4)
    L = rng.normal(size=(3, 4))
    value, grad, _ = f(L)
    assert value == pytest.approx(reference_triplet_objective(L, X, t.tolist(), 0.4), rel=1e-10)
    E = rng.normal(size=L.shape)
    h = 1e-6
    fd = (f(L + h * E)[0] - f(L - h * E)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(grad * E)), rel=1e-6)


# ---------------------------------------------------------------- the learner
def _easy(seed=0, n=120):
    """Two informative features (classes apart) under six wide noise ones:
    Euclidean k-NN is poor, a learned metric drops the noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    info = rng.normal(size=(n, 2)) * 0.3 + np.c_[np.cos(2 * y), np.sin(2 * y)]
    X = np.c_[info, 3.0 * rng.normal(size=(n, 6))]
    return X, y


def _knn(model, X, y, Xt, yt):
    E, Et = (X, Xt) if model is None else (model.transform(X), model.transform(Xt))
    return KNeighborsClassifier(3).fit(E, y).score(Et, yt)


def test_fit_lowers_the_objective_and_raises_knn_accuracy(raw_rows):
    X, y = _easy()
    Xt, yt = _easy(seed=1)
    m = LMNN(preprocessing=None).fit(X, y)
    T = reference_targets(X, y, 3)
    assert m.objective_ == pytest.approx(reference_objective(m.components_, X, y, T, 0.5),
                                         rel=1e-10)
    assert m.initial_objective_ == pytest.approx(
        reference_objective(np.eye(8), X, y, T, 0.5), rel=1e-10)
    assert m.objective_ < 0.5 * m.initial_objective_
    assert m.init_ == "identity"
    before, after = _knn(None, X, y, Xt, yt), _knn(m, X, y, Xt, yt)
    assert before < 0.8 and after > 0.9, (before, after)
    np.testing.assert_allclose(m.M_, m.components_.T @ m.components_)
    assert np.linalg.eigvalsh(m.M_).min() > -1e-10
    h = m.history_
    assert len(h["objective"]) == m.n_iter_ + 1 == len(h["active"])
    assert h["objective"][0] == pytest.approx(m.initial_objective_)
    assert h["objective"][-1] == pytest.approx(m.objective_)


def test_invariant_to_permuted_features():
    X, y = _easy(n=60)
    perm = np.random.default_rng(0).permutation(X.shape[1])
    a = LMNN().fit(X, y)
    b = LMNN().fit(X[:, perm], y)
    np.testing.assert_allclose(b.similarity(X[:10, perm], X[:, perm]), a.similarity(X[:10], X),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(b.get_mahalanobis_matrix(),
                               a.get_mahalanobis_matrix()[np.ix_(perm, perm)],
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("load", [load_iris, load_wine])
def test_defaults_converge_without_warning(load):
    X, y = load(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = LMNN().fit(X, y)
    assert m.stop_reason_ == "tol" and m.n_iter_ < m.max_iter


def test_max_iter_is_recorded_and_warns_only_with_tol():
    X, y = _easy(n=60)
    with pytest.warns(ConvergenceWarning, match="LMNN: stopped at max_iter=2"):
        m = LMNN(max_iter=2).fit(X, y)
    assert m.stop_reason_ == "max_iter" and m.n_iter_ == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = LMNN(max_iter=2, tol=None).fit(X, y)
    assert m.stop_reason_ == "max_iter"


def test_small_classes_get_fewer_targets_and_say_so():
    X, y = _data(n=30)
    y = y.copy()
    y[:2] = 3                                       # a class of two: one target each
    y[2] = 4                                        # a class of one: no target
    with pytest.warns(UserWarning, match=r"LMNN: 2 class\(es\) have n_neighbors=3 members or "
                                         r"fewer \(smallest: 1\)"):
        m = LMNN().fit(X, y)
    assert np.isfinite(m.components_).all()
    T = solver.select_targets(X, y, 3)
    assert (T[0] == [1, -1, -1]).all() and (T[2] == -1).all()
    with pytest.raises(ValueError, match="LMNN: every class has a single member"):
        LMNN().fit(X[:5], np.arange(5))
    with pytest.raises(ValueError, match="LMNN: y has 1 class"):
        LMNN().fit(X, np.zeros(len(X)))


def test_n_components_init_and_triplets():
    X, y = _easy(n=60)
    for init, r in (("pca", 3), ("lda", 2), ("identity", 4), ("random", 5), ("auto", 2)):
        m = LMNN(n_components=r, init=init, random_state=0, max_iter=30, tol=None).fit(X, y)
        assert m.components_.shape == (r, 8) and m.rank_ == r
        assert m.transform(X).shape == (60, r)
    assert LMNN(n_components=2).fit(X, y).init_ == "lda"
    assert LMNN(n_components=5).fit(X, y).init_ == "pca"
    with pytest.raises(ValueError, match="LMNN: n_components=9 exceeds the number of features"):
        LMNN(n_components=9).fit(X, y)
    with pytest.raises(ValueError, match="LMNN: init='lda' gives at most"):
        LMNN(n_components=3, init="lda").fit(X, y)
    t = np.array([(q, p, m) for q in range(0, 60, 3) for p in range(q % 3, 60, 9) if p != q
                  for m in ((q + 1) % 60,)])
    m = LMNN(preprocessing=None, early_stopping=False).fit(X, triplets=t)
    assert m.objective_ <= m.initial_objective_
    assert (m.triplet_score(X, t) > 0).mean() > 0.9
    with pytest.raises(ValueError, match="LMNN: init='lda' needs class labels"):
        LMNN(init="lda").fit(X, triplets=t)


def test_save_load_and_tampered_files(tmp_path):
    X, y = _easy(n=60)
    m = LMNN(n_components=3, max_iter=20, tol=None).fit(X, y)
    m.save(tmp_path / "m.npz")
    b = tm.load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(b.transform(X), m.transform(X))
    assert b.stop_reason_ == m.stop_reason_ and b.n_iter_ == m.n_iter_
    data = dict(np.load(tmp_path / "m.npz", allow_pickle=False))
    data["M_"] = data["M_"] + 0.5 * np.eye(8)      # not L^T L
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError, match="components_ is not a factor"):
        tm.load_model(tmp_path / "bad.npz")
    data["M_"] = -np.eye(8)
    np.savez(tmp_path / "bad2.npz", **data)
    with pytest.raises(ValueError):
        tm.load_model(tmp_path / "bad2.npz")


def test_bad_parameters_named():
    X, y = _easy(n=30)
    for kw, what in ((dict(n_neighbors=0), "n_neighbors"), (dict(regularization=1.5),
                     "regularization"), (dict(init="svd"), "init"), (dict(max_iter=0),
                     "max_iter"), (dict(n_components=0), "n_components")):
        with pytest.raises(ValueError, match=f"LMNN: parameter {what}="):
            LMNN(**kw).fit(X, y)
