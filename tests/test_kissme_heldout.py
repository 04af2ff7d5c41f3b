"""KISSME's ``shrinkage="auto"`` (issue 38): the shrinkage chosen inside
``fit`` by held-out answers, checked against a plain re-implementation from
the formulas (folds of :func:`answer_folds`, fold statistics by NumPy, the
grid's ridge ratio, ``inv`` instead of eigendecompositions), and its
invariances (order of the answers, scale of X, the span route)."""
import warnings

import numpy as np
import pytest

import tripletml
from tripletml import KISSME
from tripletml.metrics import triplet_accuracy
from tripletml.algorithms.kissme.kernels import (FALLBACK_SHRINKAGE, SHRINKAGE_FOLDS,
                                                 SHRINKAGE_KAPPAS, answer_folds, pair_keys,
                                                 shrinkage_grid)


def _triplets(n, m, seed):
    rng = np.random.default_rng(seed)
    T = rng.integers(0, n, size=(m, 3))
    return T[(T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])]


def _crowd(n=40, d=25, m=1500, noise=0.3, seed=0):
    """Items with features; answers from the Euclidean distances of the
    first 5 features, a share ``noise`` of them flipped (crowd answers)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    T = _triplets(n, m, seed + 1)
    D = ((X[:, None, :5] - X[None, :, :5]) ** 2).sum(-1)
    wrong = D[T[:, 0], T[:, 1]] > D[T[:, 0], T[:, 2]]
    wrong ^= rng.random(len(T)) < noise
    T[wrong] = T[wrong][:, [0, 2, 1]]
    return X, T


# ------------------------------------------------------------ reference
def ref_shrunk_inv(C, s):
    d = C.shape[0]
    return np.linalg.pinv((1 - s) * C + s * np.trace(C) / d * np.eye(d), hermitian=True,
                          rcond=1e-12)


def ref_M(S, D, s):
    A = ref_shrunk_inv(S, s) - ref_shrunk_inv(D, s)
    w, U = np.linalg.eigh((A + A.T) / 2)
    return (U * np.maximum(w, 0)) @ U.T


def ref_covs(X, T):
    E1 = X[T[:, 0]] - X[T[:, 1]]
    E2 = X[T[:, 0]] - X[T[:, 2]]
    return E1.T @ E1 / len(T), E2.T @ E2 / len(T)


def ref_choice(X, T):
    S, D = ref_covs(X, T)
    d = X.shape[1]
    r = np.linalg.matrix_rank(S + D)
    grid = [1.0 if np.isinf(k) else k * d / r / (1 + k * d / r) for k in SHRINKAGE_KAPPAS]
    folds = answer_folds(T)
    scores = np.zeros((SHRINKAGE_FOLDS, len(grid)))
    for f in range(SHRINKAGE_FOLDS):
        tr, te = T[folds != f], T[folds == f]
        S_tr, D_tr = ref_covs(X, tr)
        for g, s in enumerate(grid):
            M = ref_M(S_tr, D_tr, s)
            E1 = X[te[:, 0]] - X[te[:, 1]]
            E2 = X[te[:, 0]] - X[te[:, 2]]
            diff = np.einsum("ij,jk,ik->i", E2, M, E2) - np.einsum("ij,jk,ik->i", E1, M, E1)
            scores[f, g] = np.mean((diff > 0) + 0.5 * (diff == 0))
    mean = scores.mean(0)
    return np.array(grid), mean


def test_heldout_choice_is_the_reference():
    X, T = _crowd()
    est = KISSME(preprocessing=None).fit(X, triplets=T)
    grid, scores = ref_choice(X, T)
    np.testing.assert_allclose(est.shrinkage_grid_, grid, rtol=1e-12)
    np.testing.assert_allclose(est.shrinkage_scores_, scores, atol=1e-12)
    assert est.shrinkage_ == grid[int(np.argmax(scores))]
    S, D = ref_covs(est.scaler_.transform(X), T)      # None divides by the rows' unit
    np.testing.assert_allclose(est.M_, ref_M(S, D, est.shrinkage_), atol=1e-9 * np.abs(est.M_).max())


def test_noisy_answers_choose_a_heavier_ridge_that_generalises():
    """With noisy answers about few items, the light ridge overfits: the
    held-out choice picks a heavier one, which is better on new answers."""
    X, T = _crowd(n=40, d=25, m=1500, noise=0.3, seed=0)
    _, T_new = _crowd(n=40, d=25, m=4000, noise=0.0, seed=0)
    auto = KISSME(preprocessing=None).fit(X, triplets=T)
    light = KISSME(shrinkage=FALLBACK_SHRINKAGE, preprocessing=None).fit(X, triplets=T)
    assert auto.shrinkage_ > 0.5
    acc = [triplet_accuracy(m, X, T_new) for m in (auto, light)]
    assert acc[0] > acc[1] + 0.02, acc


def test_invariances():
    X, T = _crowd(seed=3)
    a = KISSME(preprocessing=None).fit(X, triplets=T)
    perm = np.random.default_rng(0).permutation(len(T))
    b = KISSME(preprocessing=None, random_state=5).fit(X, triplets=T[perm])   # order, seed
    assert b.shrinkage_ == a.shrinkage_
    np.testing.assert_allclose(b.M_, a.M_, atol=1e-9 * np.abs(a.M_).max())
    c = KISSME(preprocessing=None).fit(1e3 * X, triplets=T)                   # scale of X
    assert c.shrinkage_ == a.shrinkage_
    np.testing.assert_allclose(c.shrinkage_scores_, a.shrinkage_scores_, atol=1e-12)
    # permuted features
    cols = np.random.default_rng(1).permutation(X.shape[1])
    e = KISSME(preprocessing=None).fit(X[:, cols], triplets=T)
    assert e.shrinkage_ == a.shrinkage_


def test_standardized_rows_on_raw_statistics():
    """The default preprocessing forms the statistics on raw rows and maps
    them; the held-out distances are those of the preprocessed rows."""
    X, T = _crowd(seed=4)
    X = X * np.linspace(0.1, 10, X.shape[1])
    a = KISSME(preprocessing="standardize").fit(X, triplets=T)
    Z = a.scaler_.transform(X)
    b = KISSME(preprocessing=None).fit(Z, triplets=T)
    assert a.shrinkage_ == b.shrinkage_
    np.testing.assert_allclose(a.shrinkage_scores_, b.shrinkage_scores_, atol=1e-12)


def test_grid():
    g = shrinkage_grid(10, 10)
    assert g[0] == pytest.approx(0.01, rel=1e-14) and g[-1] == 1.0     # the old default
    assert np.all(np.diff(g) > 0)
    g2 = shrinkage_grid(10, 1000)       # a 10-dimensional span in 1000 dimensions
    # the same ridge relative to the span's mean eigenvalue: s / (1 - s) * d / r equal
    np.testing.assert_allclose((g2[:-1] / (1 - g2[:-1]) / 100), (g[:-1] / (1 - g[:-1])),
                               rtol=1e-12)
    with pytest.raises(ValueError):
        shrinkage_grid(0, 5)


def test_fallbacks():
    X, T = _crowd()
    few = KISSME(preprocessing=None).fit(X, triplets=T[:8])
    assert few.shrinkage_ == FALLBACK_SHRINKAGE and not hasattr(few, "shrinkage_grid_")
    y = np.arange(len(X)) % 3
    lab = KISSME(preprocessing=None).fit(X, y)          # exact statistics from labels
    assert lab.shrinkage_ == FALLBACK_SHRINKAGE and not hasattr(lab, "shrinkage_grid_")
    fixed = KISSME(shrinkage=0.2, preprocessing=None).fit(X, triplets=T)
    assert fixed.shrinkage_ == 0.2 and not hasattr(fixed, "shrinkage_grid_")
    with pytest.raises(ValueError, match="shrinkage"):
        KISSME(shrinkage="best").fit(X, triplets=T)


def test_pairs_auc_reference():
    X, T = _crowd(seed=6)
    pairs = np.concatenate([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.repeat([1, -1], len(T))
    est = KISSME(preprocessing=None).fit(X, pairs=pairs, y=y)
    sim = y == 1
    folds = answer_folds(pair_keys(pairs, sim))
    from sklearn.metrics import roc_auc_score
    f, g = 1, 2
    tr, te = folds != f, folds == f
    E = X[pairs[:, 0]] - X[pairs[:, 1]]
    S = E[tr & sim].T @ E[tr & sim] / (tr & sim).sum()
    D = E[tr & ~sim].T @ E[tr & ~sim] / (tr & ~sim).sum()
    M = ref_M(S, D, est.shrinkage_grid_[g])
    auc = roc_auc_score(sim[te], -np.einsum("ij,jk,ik->i", E[te], M, E[te]))
    # the stored score is the mean over folds; recompute all folds' AUC at g
    aucs = []
    for f in range(SHRINKAGE_FOLDS):
        tr, te = folds != f, folds == f
        S = E[tr & sim].T @ E[tr & sim] / (tr & sim).sum()
        D = E[tr & ~sim].T @ E[tr & ~sim] / (tr & ~sim).sum()
        M = ref_M(S, D, est.shrinkage_grid_[g])
        aucs.append(roc_auc_score(sim[te], -np.einsum("ij,jk,ik->i", E[te], M, E[te])))
    assert 0 < auc < 1
    assert est.shrinkage_scores_[g] == pytest.approx(np.mean(aucs), abs=1e-10)


def test_span_route_same_choice():
    """Few rows, many features: the span route holds out the same answers
    and gives the plain route's choice and model."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(14, 60))
    T = _triplets(14, 900, 4)
    fits = []
    for route in (False, None):
        est = KISSME(random_state=0)
        est._span_route = route
        fits.append(est.fit(X, triplets=T))
    a, b = fits
    np.testing.assert_allclose(b.shrinkage_grid_, a.shrinkage_grid_, rtol=1e-12)
    np.testing.assert_allclose(b.shrinkage_scores_, a.shrinkage_scores_, atol=1e-12)
    assert a.shrinkage_ == b.shrinkage_
    np.testing.assert_allclose(b.M_, a.M_, atol=1e-8 * np.abs(a.M_).max())


def test_saved_model_keeps_the_choice(tmp_path):
    X, T = _crowd(seed=7)
    est = KISSME(preprocessing=None).fit(X, triplets=T)
    est.save(tmp_path / "k.npz")
    back = tripletml.load_model(tmp_path / "k.npz")
    assert back.shrinkage == "auto" and back.shrinkage_ == est.shrinkage_
    np.testing.assert_array_equal(back.shrinkage_scores_, est.shrinkage_scores_)
    np.testing.assert_array_equal(back.M_, est.M_)
    back.shrinkage_ = 0.5 if est.shrinkage_ != 0.5 else 0.25      # not the model's
    with pytest.raises(ValueError, match="KISSME matrix"):
        back._check_loaded()
    back.shrinkage_ = "x"
    with pytest.raises(ValueError, match="shrinkage_"):
        back._check_loaded()


@pytest.mark.parametrize("sparse", [False, True])
def test_laplacian_scatter_is_the_sum_of_outer_products(sparse):
    """Few rows under many triplets: the pair scatters by the pair counts'
    Laplacian (``X^T L X``) equal the sums of outer products."""
    import scipy.sparse as sps

    from tripletml.algorithms.kissme import kernels

    rng = np.random.default_rng(0)
    X = rng.normal(size=(9, 30))
    X[rng.random(X.shape) < 0.5] = 0.0
    T = _triplets(9, 500, 1)
    assert kernels._laplacian_pays(9, len(T), 30)
    Xa = sps.csr_matrix(X) if sparse else X
    S, D = kernels._scatter_from_triplets(Xa, T)
    R = ref_covs(X, T)
    np.testing.assert_allclose(S, R[0], atol=1e-12)
    np.testing.assert_allclose(D, R[1], atol=1e-12)
    assert not kernels._laplacian_pays(5000, 100, 30)


def test_partitioned_fit_makes_the_same_choice(monkeypatch):
    """fit(ShardedCollection) holds out the same answers (folds hashed on the
    concatenated rows' ids) and gives the in-memory choice and model."""
    from tripletml.distributed.sharded import ShardedCollection

    monkeypatch.setenv("TRIPLETML_PARTITIONED_BACKEND", "cluster")
    X, T = _crowd(n=40, d=25, m=6000, noise=0.3, seed=0)
    y = np.arange(40) % 2
    sizes = [18, 22]
    Ts = [T[(T < 18).all(1)], T[(T >= 18).all(1)] - 18]
    coll = ShardedCollection([X[:18], X[18:]], sizes, [y[:18], y[18:]]).with_triplets(Ts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = KISSME(preprocessing="standardize").fit(coll)
    mem = KISSME(preprocessing="standardize").fit(X, triplets=np.vstack([Ts[0], Ts[1] + 18]))
    assert mem.shrinkage_ > 0.5          # a heavy ridge: not the grid's first value
    assert part.shrinkage_ == mem.shrinkage_
    np.testing.assert_allclose(part.shrinkage_scores_, mem.shrinkage_scores_, atol=1e-12)
    np.testing.assert_allclose(part.M_, mem.M_, atol=1e-9 * np.abs(mem.M_).max())
