"""Independent reference tests of :class:`tripletml.KISSME`.

Koestinger et al., "Large scale metric learning from equivalence
constraints", CVPR 2012.  The references below are written in plain NumPy
from the definitions (brute-force loops over triplets / enumerations of the
sampling distribution), without looking at the library's implementation:

* a triplet ``(q, p+, p-)`` gives the similar pair ``(q, p+)`` and the
  dissimilar pair ``(q, p-)``;
* ``Sigma_S = mean (x_q - x_p+)(x_q - x_p+)^T``, ``Sigma_D`` likewise with
  ``p-`` (``similar_covariance_``, ``dissimilar_covariance_``);
* with labels and ``n_triplets=None`` these means are the exact expectations
  under the distribution of :func:`tripletml.triplets.random_class_triplets`;
* shrinkage ``C -> (1 - s) C + s tr(C) / d I``, then
  ``M = P_psd(inv(Sigma_S) - inv(Sigma_D))`` (negative eigenvalues clipped),
  ``components_`` L with ``L^T L = M``.
"""
from __future__ import annotations

import itertools
import os
import warnings

import numpy as np
import pytest

import tripletml
from tripletml.triplets import random_class_triplets

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")

RTOL = 1e-10


# ---------------------------------------------------------------- references
def ref_pair_cov(X, pairs):
    """Mean of (x_a - x_b)(x_a - x_b)^T over the rows of ``pairs``, by a loop."""
    d = X.shape[1]
    C = np.zeros((d, d))
    for a, b in pairs:
        v = X[a] - X[b]
        C += np.outer(v, v)
    return C / len(pairs)


def ref_triplet_covs(X, T):
    T = np.asarray(T)
    return ref_pair_cov(X, T[:, [0, 1]]), ref_pair_cov(X, T[:, [0, 2]])


def ref_exact_covs(X, y):
    """Exact E[(x_q - x_p)(.)^T], E[(x_q - x_n)(.)^T] under the sampler:
    q uniform over rows of classes with >= 2 members, p uniform over the
    other members of q's class, n uniform over the rows of other classes.
    Enumerates every (q, p, n) with its probability."""
    y = np.asarray(y)
    n, d = X.shape
    sizes = {c: int(np.sum(y == c)) for c in np.unique(y)}
    eligible = [i for i in range(n) if sizes[y[i]] >= 2]
    S = np.zeros((d, d))
    D = np.zeros((d, d))
    total = 0.0
    for q in eligible:
        pos = [j for j in range(n) if y[j] == y[q] and j != q]
        neg = [k for k in range(n) if y[k] != y[q]]
        for p, m in itertools.product(pos, neg):
            w = 1.0 / len(eligible) / len(pos) / len(neg)
            total += w
            u = X[q] - X[p]
            v = X[q] - X[m]
            S += w * np.outer(u, u)
            D += w * np.outer(v, v)
    assert abs(total - 1.0) < 1e-12
    return S, D


def ref_shrink(C, s):
    d = C.shape[0]
    return (1.0 - s) * C + s * np.trace(C) / d * np.eye(d)


def ref_M(S, D, s):
    """P_psd(inv(shrunk S) - inv(shrunk D)) by a symmetric eigendecomposition."""
    A = np.linalg.inv(ref_shrink(S, s)) - np.linalg.inv(ref_shrink(D, s))
    A = (A + A.T) / 2
    w, U = np.linalg.eigh(A)
    return (U * np.maximum(w, 0.0)) @ U.T


def ref_rank(M, tol):
    w = np.linalg.eigvalsh(M)
    top = w.max()
    return int(np.sum(w > tol * top)) if top > 0 else 0


def close(A, B, rtol=RTOL):
    """Entrywise closeness relative to the largest magnitude of B."""
    A = np.asarray(A)
    B = np.asarray(B)
    assert A.shape == B.shape
    scale = max(np.max(np.abs(B)), 1e-300)
    np.testing.assert_allclose(A, B, rtol=0, atol=rtol * scale)


# ------------------------------------------------------------------- data
def labeled_data(seed=0, n=17, d=4):
    """17 rows, 4 classes: one singleton class, one class with 9 rows (> n/2)."""
    rng = np.random.default_rng(seed)
    y = np.array([0] * 9 + [1] * 4 + [2] * 3 + [3])
    assert y.size == n
    centers = rng.normal(scale=2.0, size=(4, d))
    # anisotropic noise so that the covariances are not multiples of I
    X = centers[y] + rng.normal(size=(n, d)) * np.array([0.3, 1.0, 2.0, 0.5])[:d]
    perm = rng.permutation(n)           # classes interleaved in the row order
    return X[perm], y[perm]


def random_triplets(n, m, seed):
    """Arbitrary index triplets (not label based) of three distinct indices
    (training refuses q = p, q = k and p = k)."""
    rng = np.random.default_rng(seed)
    T = []
    while len(T) < m:
        q, p, k = rng.integers(0, n, size=3)
        if q != p and q != k and p != k:
            T.append((q, p, k))
    return np.array(T, dtype=np.int64)


# -------------------------------------------------------------- the tests
@pytest.mark.parametrize("shrinkage", [0.0, 0.01, 0.3])
def test_explicit_triplets_match_reference(shrinkage):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(15, 5)) * np.array([1.0, 0.2, 3.0, 1.0, 0.7])
    T = random_triplets(15, 60, seed=2)
    model = tripletml.KISSME(shrinkage=shrinkage, preprocessing=None).fit(X, triplets=T)
    S, D = ref_triplet_covs(X, T)
    close(model.similar_covariance_, S)
    close(model.dissimilar_covariance_, D)
    M = ref_M(S, D, shrinkage)
    assert np.linalg.norm(M) > 0                   # a non-trivial case
    close(model.M_, M, rtol=1e-9)
    assert model.rank_ == ref_rank(M, 1e-6)
    L = model.components_
    assert L.shape == (model.rank_, 5)
    close(L.T @ L, M, rtol=1e-9)
    close(model.get_mahalanobis_matrix(), M, rtol=1e-9)


def test_exact_label_statistics_match_enumeration():
    X, y = labeled_data()
    model = tripletml.KISSME(shrinkage=0.05, preprocessing=None).fit(X, y)
    S, D = ref_exact_covs(X, y)
    close(model.similar_covariance_, S)
    close(model.dissimilar_covariance_, D)
    M = ref_M(S, D, 0.05)
    close(model.M_, M, rtol=1e-9)
    assert model.rank_ == ref_rank(M, 1e-6)
    close(model.components_.T @ model.components_, M, rtol=1e-9)


def test_exact_statistics_are_not_pair_uniform():
    """The sampler's weighting (query uniform, then positive / negative) is not
    the plain mean over all same-class pairs: make sure the data tell them
    apart, so the enumeration test above really checks the weighting."""
    X, y = labeled_data()
    S, D = ref_exact_covs(X, y)
    same = [(i, j) for i in range(len(y)) for j in range(len(y)) if i != j and y[i] == y[j]]
    diff = [(i, j) for i in range(len(y)) for j in range(len(y)) if y[i] != y[j]]
    assert np.max(np.abs(ref_pair_cov(X, same) - S)) > 1e-3 * np.max(np.abs(S))
    assert np.max(np.abs(ref_pair_cov(X, diff) - D)) > 1e-3 * np.max(np.abs(D))
    model = tripletml.KISSME(preprocessing=None).fit(X, y)
    assert np.max(np.abs(model.dissimilar_covariance_ - ref_pair_cov(X, diff))) > \
        1e-3 * np.max(np.abs(D))


def test_sampled_triplets_converge_to_exact():
    X, y = labeled_data()
    S, D = ref_exact_covs(X, y)
    model = tripletml.KISSME(n_triplets=200_000, preprocessing=None,
                             random_state=0).fit(X, y)
    # fixed seed 0: measured relative Frobenius errors 4.7e-3 (S) and 2.5e-3 (D)
    # (seeds 0-4: all below 5e-3); the plain mean over all same-class /
    # different-class pairs (a wrong weighting) is 0.22 / 0.20 away
    errS = np.linalg.norm(model.similar_covariance_ - S) / np.linalg.norm(S)
    errD = np.linalg.norm(model.dissimilar_covariance_ - D) / np.linalg.norm(D)
    assert errS < 0.03 and errD < 0.03, (errS, errD)
    # and a small sample is not already exact
    small = tripletml.KISSME(n_triplets=20, preprocessing=None, random_state=0).fit(X, y)
    assert np.linalg.norm(small.similar_covariance_ - S) / np.linalg.norm(S) > 1e-3


def test_sampled_triplets_equal_explicit_with_same_generator():
    X, y = labeled_data()
    model = tripletml.KISSME(n_triplets=500, preprocessing=None, random_state=3).fit(X, y)
    T = random_class_triplets(y, 500, random_state=np.random.default_rng(3))
    S, D = ref_triplet_covs(X, T)
    close(model.similar_covariance_, S)
    close(model.dissimilar_covariance_, D)
    close(model.M_, ref_M(S, D, model.shrinkage_), rtol=1e-9)   # held-out choice: own test
    again = tripletml.KISSME(n_triplets=np.int64(500), preprocessing=None,
                             random_state=3).fit(X, y)
    np.testing.assert_array_equal(again.M_, model.M_)


def test_transform_distances_similarity():
    X, y = labeled_data(seed=4)
    model = tripletml.KISSME(shrinkage=0.1, preprocessing=None).fit(X, y)
    S, D = ref_exact_covs(X, y)
    M = ref_M(S, D, 0.1)
    rng = np.random.default_rng(5)
    A = rng.normal(size=(7, 4)) * 2
    B = rng.normal(size=(7, 4)) * 2
    d2 = np.array([(a - b) @ M @ (a - b) for a, b in zip(A, B)])
    close(model.pair_distance(A, B, squared=True), d2, rtol=1e-9)
    close(model.pair_distance(A, B), np.sqrt(d2), rtol=1e-9)
    sim = np.array([[-(a - b) @ M @ (a - b) for b in B] for a in A])
    close(model.similarity(A, B), sim, rtol=1e-9)
    Z = model.transform(A)
    assert Z.shape == (7, model.rank_)
    close(Z @ Z.T, A @ M @ A.T, rtol=1e-9)
    close(Z, A @ model.components_.T)


def test_standardize_preprocessing():
    X, y = labeled_data(seed=6, d=4)
    X = X * np.array([100.0, 0.01, 1.0, 5.0]) + np.array([3.0, -7.0, 0.0, 1e3])
    X = np.column_stack([X, np.full(len(y), 2.5)])      # a constant column
    mean = X.mean(axis=0)
    std = X.std(axis=0)                                 # population std (ddof=0)
    Z = (X - mean) / np.where(std > 1e-12 * np.abs(mean).max(), std, 1.0)
    Z[:, -1] = 0.0
    for prep in ("standardize", "auto"):
        model = tripletml.KISSME(shrinkage=0.05, preprocessing=prep).fit(X, y)
        assert model.preprocessing_ == "standardize"
        S, D = ref_exact_covs(Z, y)
        close(model.similar_covariance_, S)
        close(model.dissimilar_covariance_, D)
        M = ref_M(S, D, 0.05)
        close(model.M_, M, rtol=1e-8)
        rng = np.random.default_rng(7)
        i, j = rng.integers(0, len(y), size=(2, 10))
        d2 = np.array([(Z[a] - Z[b]) @ M @ (Z[a] - Z[b]) for a, b in zip(i, j)])
        close(model.pair_distance(X[i], X[j], squared=True), d2, rtol=1e-8)


def test_shrinkage_one_is_identity_multiple():
    X, y = labeled_data(seed=8)
    model = tripletml.KISSME(shrinkage=1.0, preprocessing=None).fit(X, y)
    S, D = ref_exact_covs(X, y)
    d = X.shape[1]
    c = d / np.trace(S) - d / np.trace(D)
    assert c > 0
    close(model.M_, c * np.eye(d))
    assert model.rank_ == d
    # ranking = Euclidean ranking
    sim = model.similarity(X)
    eu = -((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    close(sim, c * eu, rtol=1e-9)


def test_translation_rotation_invariance():
    X, y = labeled_data(seed=9)
    rng = np.random.default_rng(10)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    shift = rng.normal(size=4) * 10
    X2 = X @ Q.T + shift
    m1 = tripletml.KISSME(shrinkage=0.2, preprocessing=None).fit(X, y)
    m2 = tripletml.KISSME(shrinkage=0.2, preprocessing=None).fit(X2, y)
    i, j = rng.integers(0, len(y), size=(2, 20))
    close(m2.pair_distance(X2[i], X2[j]), m1.pair_distance(X[i], X[j]), rtol=1e-8)
    close(m2.M_, Q @ m1.M_ @ Q.T, rtol=1e-8)
    assert m1.rank_ == m2.rank_


def test_psd_clipping_and_rank():
    """Dissimilar spread smaller than similar spread along some directions:
    the raw difference has negative eigenvalues, which must be clipped."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(16, 3))
    T = random_triplets(16, 80, seed=12)
    # make the negatives close to the queries along axis 0 only
    X[T[:, 2], 0] = X[T[:, 0], 0] + 0.01 * rng.normal(size=80)
    model = tripletml.KISSME(shrinkage=0.0, preprocessing=None).fit(X, triplets=T)
    S, D = ref_triplet_covs(X, T)
    raw = np.linalg.inv(S) - np.linalg.inv(D)
    w = np.linalg.eigvalsh((raw + raw.T) / 2)
    assert w.min() < 0 < w.max()                       # the case clips something
    M = ref_M(S, D, 0.0)
    close(model.M_, M, rtol=1e-9)
    assert np.linalg.eigvalsh(model.M_).min() > -1e-10 * np.abs(M).max()
    assert model.rank_ == ref_rank(M, 1e-6) == int(np.sum(w > 0))
    # a large rank_tol keeps only the top direction
    top = tripletml.KISSME(shrinkage=0.0, rank_tol=0.999, preprocessing=None).fit(X, triplets=T)
    assert top.rank_ == 1 and top.components_.shape == (1, 3)


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, exc", [
    ({"shrinkage": -0.1}, ValueError),
    ({"shrinkage": 1.5}, ValueError),
    ({"shrinkage": "0.1"}, TypeError),
    ({"n_triplets": 0}, ValueError),
])
def test_bad_parameters(kwargs, exc):
    X, y = labeled_data()
    with pytest.raises(exc, match="KISSME"):
        tripletml.KISSME(preprocessing=None, **kwargs).fit(X, y)


def test_numpy_scalars_accepted():
    X, y = labeled_data()
    ref = tripletml.KISSME(shrinkage=0.25, n_triplets=300, preprocessing=None,
                           random_state=1).fit(X, y)
    m = tripletml.KISSME(shrinkage=np.float32(0.25), n_triplets=np.int32(300),
                         preprocessing=None, random_state=1).fit(X, y)
    close(m.M_, ref.M_, rtol=1e-6)         # float32(0.25) is exactly 0.25
    m2 = tripletml.KISSME(shrinkage=np.float64(0.25), preprocessing=None).fit(X, y)
    S, D = ref_exact_covs(X, y)
    close(m2.M_, ref_M(S, D, 0.25), rtol=1e-9)


def test_all_singleton_classes():
    X = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(ValueError, match="KISSME"):
        tripletml.KISSME(preprocessing=None).fit(X, np.arange(6))


def test_identical_similar_pairs_raise():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 4)
    X = rng.normal(size=(3, 3))[y]                       # each class one repeated point
    with pytest.raises(ValueError):
        tripletml.KISSME(preprocessing=None).fit(X, y)
    T = np.array([[0, 1, 5], [4, 6, 9], [8, 10, 2]])
    with pytest.raises(ValueError):
        tripletml.KISSME(preprocessing=None).fit(X, triplets=T)


def test_negative_equals_positive_gives_zero():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    T = random_triplets(10, 30, seed=1)
    X = np.vstack([X, X])             # row i + 10 is the point of row i
    T[:, 2] = T[:, 1] + 10            # each negative is its positive's point
    with pytest.warns(UserWarning):
        model = tripletml.KISSME(preprocessing=None).fit(X, triplets=T)
    S, D = ref_triplet_covs(X, T)
    close(model.similar_covariance_, S)
    close(model.dissimilar_covariance_, S)
    assert model.rank_ == 0
    np.testing.assert_allclose(model.M_, 0.0, atol=1e-12 * np.abs(np.linalg.inv(S)).max())
    assert model.components_.shape[0] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(model.pair_distance(X[:3], X[3:6]), 0.0)


# -------------------------------------------------------------- real data
def test_iris_beats_euclidean():
    if not os.environ.get("TRIPLETML_DATA"):
        os.environ["TRIPLETML_DATA"] = "/work/shared/data"
    from sklearn.model_selection import train_test_split

    from tripletml import datasets
    from tripletml.metrics import evaluate_retrieval
    try:
        b = datasets.load("iris")
    except Exception as exc:                       # pragma: no cover - no data here
        pytest.skip(f"iris not available: {exc}")
    X, y = np.asarray(b.data), np.asarray(b.target)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    eu = evaluate_retrieval(tripletml.Euclidean().fit(Xtr, ytr), Xte, yte)["map"]
    ks = evaluate_retrieval(tripletml.KISSME().fit(Xtr, ytr), Xte, yte)["map"]
    # measured: Euclidean 0.8958, KISSME 0.9737 (margin 0.078)
    assert ks > eu + 0.05, (ks, eu)
