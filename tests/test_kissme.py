"""KISSME's kernels (tripletml.solvers.kissme) against plain loops, and the
fast column statistics of the preprocessing.

The learner's contract (exact statistics by enumeration, shrinkage, PSD
clipping, invariances, errors) is tested independently in
tests/test_kissme_independent.py.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import KISSME
from tripletml.preprocessing import _mean_std
from tripletml.solvers.kissme import (kissme_matrix, pair_scatter_from_labels,
                                      pair_scatter_from_triplets, shrunk_inverse)
from tripletml.triplets import random_class_triplets


def _labels_data(seed=0, n=40, d=5):
    rng = np.random.default_rng(seed)
    # unbalanced: one class holds more than half the rows (a negative weight
    # on its C_c in Sigma_D), one singleton class (never a query)
    y = np.r_[np.zeros(23), np.ones(9), np.full(7, 2), [3]].astype(int)[:n]
    X = rng.normal(size=(n, d)) + 3.0 * y[:, None] * rng.normal(size=d)
    X[:, 0] *= 100.0          # scales differ
    return X, y


def _expected_by_loop(X, y):
    """Sigma_S, Sigma_D as the probability-weighted sum over every triplet
    the class sampler can draw (query, positive, negative)."""
    n, d = X.shape
    classes, counts = np.unique(y, return_counts=True)
    size = dict(zip(classes, counts))
    queries = [i for i in range(n) if size[y[i]] >= 2]
    S = np.zeros((d, d))
    D = np.zeros((d, d))
    for q in queries:
        pos = [j for j in range(n) if y[j] == y[q] and j != q]
        neg = [j for j in range(n) if y[j] != y[q]]
        for j in pos:
            e = X[q] - X[j]
            S += np.outer(e, e) / (len(queries) * len(pos))
        for j in neg:
            e = X[q] - X[j]
            D += np.outer(e, e) / (len(queries) * len(neg))
    return S, D


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_scatter_from_labels_equals_the_sum_over_every_triplet(fmt):
    X, y = _labels_data()
    S0, D0 = _expected_by_loop(X, y)
    Xin = sp.csr_matrix(X) if fmt == "csr" else X
    S, D = pair_scatter_from_labels(Xin, y)
    scale = max(np.abs(S0).max(), np.abs(D0).max())
    np.testing.assert_allclose(S, S0, rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(D, D0, rtol=0, atol=1e-11 * scale)


def test_scatter_from_labels_does_not_depend_on_the_offset():
    """Only differences of rows enter: a large common offset changes nothing
    (the dense path centres each class on its own mean)."""
    X, y = _labels_data(seed=1)
    S, D = pair_scatter_from_labels(X, y)
    S2, D2 = pair_scatter_from_labels(X + 1e4, y)
    np.testing.assert_allclose(S2, S, rtol=1e-7, atol=1e-9 * np.abs(S).max())
    np.testing.assert_allclose(D2, D, rtol=1e-7, atol=1e-9 * np.abs(D).max())


def test_scatter_from_labels_is_the_limit_of_sampled_triplets():
    X, y = _labels_data(seed=2)
    S, D = pair_scatter_from_labels(X, y)
    t = random_class_triplets(y, 400_000, random_state=0)
    Ss, Ds = pair_scatter_from_triplets(X, t)
    assert np.linalg.norm(Ss - S) / np.linalg.norm(S) < 0.02
    assert np.linalg.norm(Ds - D) / np.linalg.norm(D) < 0.02
    # and a handful of triplets is visibly not the limit
    Sf, _ = pair_scatter_from_triplets(X, t[:10])
    assert np.linalg.norm(Sf - S) / np.linalg.norm(S) > 0.05


@pytest.mark.parametrize("fmt", ["dense", "csr"])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_scatter_from_triplets_equals_a_loop(fmt, chunk):
    X, y = _labels_data(seed=3)
    t = random_class_triplets(y, 50, random_state=1)
    S0 = sum(np.outer(X[a] - X[b], X[a] - X[b]) for a, b, _ in t) / len(t)
    D0 = sum(np.outer(X[a] - X[c], X[a] - X[c]) for a, _, c in t) / len(t)
    Xin = sp.csr_matrix(X) if fmt == "csr" else X
    S, D = pair_scatter_from_triplets(Xin, t, chunk=chunk)
    np.testing.assert_allclose(S, S0, rtol=1e-12, atol=1e-12 * np.abs(S0).max())
    np.testing.assert_allclose(D, D0, rtol=1e-12, atol=1e-12 * np.abs(D0).max())


def test_shrunk_inverse():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    C = A @ A.T
    for s in (0.0, 0.2, 1.0):
        want = np.linalg.inv((1 - s) * C + s * np.trace(C) / 6 * np.eye(6))
        np.testing.assert_allclose(shrunk_inverse(C, s), want, rtol=1e-8,
                                   atol=1e-10 * np.abs(want).max())
    # singular C, no shrinkage: the pseudo-inverse
    B = A[:, :3] @ A[:, :3].T
    np.testing.assert_allclose(shrunk_inverse(B, 0.0), np.linalg.pinv(B), rtol=1e-7,
                               atol=1e-9 * np.abs(np.linalg.pinv(B)).max())
    # a zero matrix has no inverse directions
    assert not shrunk_inverse(np.zeros((3, 3)), 0.0).any()


def test_kissme_matrix_is_the_clipped_difference_of_inverses():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(2, 5, 5))
    S, D = A @ A.T + np.eye(5), B @ B.T + 0.1 * np.eye(5)
    w, V = np.linalg.eigh(np.linalg.inv(S) - np.linalg.inv(D))
    assert w.min() < 0 < w.max()            # the clipping matters here
    want = (V * np.maximum(w, 0)) @ V.T
    M = kissme_matrix(S, D, 0.0)
    np.testing.assert_allclose(M, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
    assert np.linalg.eigvalsh(M).min() >= -1e-12 * np.abs(M).max()


def test_learner_exact_and_sampled_agree_on_the_same_statistics():
    X, y = _labels_data(seed=4)
    exact = KISSME(preprocessing=None).fit(X, y)
    S, D = pair_scatter_from_labels(X, y)
    np.testing.assert_allclose(exact.similar_covariance_, S)
    np.testing.assert_allclose(exact.M_, kissme_matrix(S, D, 0.01), rtol=1e-10,
                               atol=1e-12 * np.abs(exact.M_).max())
    sampled = KISSME(preprocessing=None, n_triplets=300_000, random_state=0).fit(X, y)
    rel = np.linalg.norm(sampled.M_ - exact.M_) / np.linalg.norm(exact.M_)
    assert rel < 0.1


def test_mean_std_fast_path_matches_numpy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 4)) * [1.0, 1e-3, 1e5, 1.0] + [0.0, 5.0, -1e6, 0.0]
    X[:, 3] = 0.1                           # constant: exact mean, zero spread
    m, s = _mean_std(X)
    np.testing.assert_allclose(m, X.mean(axis=0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(s[:3], X[:, :3].std(axis=0), rtol=1e-10)
    assert m[3] == 0.1 and s[3] == 0.0
    # sums that overflow take the scaled path and stay finite
    big = rng.uniform(0.5, 1.0, size=(50, 2)) * 1e307
    m, s = _mean_std(big)
    assert np.isfinite(m).all() and np.isfinite(s).all()
    np.testing.assert_allclose(m, (big / 1e307).mean(axis=0) * 1e307, rtol=1e-12)
