"""KISSME's kernels (tripletml.algorithms.kissme.kernels) against plain loops, and the
fast column statistics of the preprocessing.

The learner's contract (exact statistics by enumeration, shrinkage, PSD
clipping, invariances, errors) is tested independently in
tests/test_kissme_independent.py.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import KISSME
from tripletml.core.preprocessing import _mean_std
from tripletml.algorithms.kissme.kernels import (kissme_matrix, pair_scatter_from_labels,
                                      pair_scatter_from_triplets, shrunk_inverse)
from tripletml.triplets import random_class_triplets

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


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
    (the dense path centers each class on its own mean)."""
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


@pytest.mark.parametrize("offset", [0.0, 1e4, 1e8])
def test_scatter_from_labels_csr_with_a_large_offset(offset):
    """CSR rows far from the origin (a dense matrix stored sparse): the
    expanded second moment would cancel, so the class-centered blocks take
    over; both formats agree with the dense computation."""
    X, y = _labels_data(seed=5)
    X = X / np.abs(X).max(axis=0)
    X[:, 1:3] += offset
    S, D = pair_scatter_from_labels(X, y)
    S2, D2 = pair_scatter_from_labels(sp.csr_matrix(X), y)
    np.testing.assert_allclose(S2, S, rtol=1e-7, atol=1e-9 * np.abs(S).max())
    np.testing.assert_allclose(D2, D, rtol=1e-7, atol=1e-9 * np.abs(D).max())
    S0, _ = _expected_by_loop(X - X.mean(axis=0), y)
    np.testing.assert_allclose(S, S0, rtol=1e-7, atol=1e-9 * np.abs(S0).max())


def test_sparse_expansion_is_used_where_it_is_accurate():
    from tripletml.algorithms.kissme import kernels as K
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    X = sp.random(300, 40, density=0.1, format="csr", random_state=0)
    onehot = sp.csr_matrix((np.ones(300), (y, np.arange(300))), shape=(3, 300))
    counts = np.bincount(y).astype(float)
    means = (onehot @ X).toarray() / counts[:, None]
    assert K._sparse_gram_is_accurate(X, onehot, means, counts)
    Xo = sp.csr_matrix(X.toarray() + 1e6)
    means_o = (onehot @ Xo).toarray() / counts[:, None]
    assert not K._sparse_gram_is_accurate(Xo, onehot, means_o, counts)


def test_scatter_codes_are_validated_and_reencoded():
    X, y = _labels_data(seed=6)
    S, D = pair_scatter_from_labels(X, y)
    S2, D2 = pair_scatter_from_labels(X, 3 * y + 5)          # unused code values
    np.testing.assert_allclose(S2, S)
    np.testing.assert_allclose(D2, D)
    with pytest.raises(TypeError, match="pair_scatter_from_labels: codes must be"):
        pair_scatter_from_labels(X, y.astype(float))
    with pytest.raises(ValueError, match="codes must be >= 0"):
        pair_scatter_from_labels(X, y - 1)


def test_components_in_decreasing_order():
    X, y = _labels_data(seed=7)
    m = KISSME(preprocessing=None).fit(X, y)
    norms = np.linalg.norm(m.components_, axis=1)       # sqrt of M's eigenvalues
    assert m.rank_ >= 2
    assert np.all(np.diff(norms) <= 1e-12 * norms[0])
    np.testing.assert_allclose(norms ** 2, np.sort(np.linalg.eigvalsh(m.M_))[::-1][:m.rank_],
                               rtol=1e-8)


@pytest.mark.parametrize("n", [3000, 10000])
@pytest.mark.parametrize("c", [0.1, 0.3, 1 / 3, 1e8])
def test_mean_std_constant_column_is_exact_on_many_rows(n, c):
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=n), np.full(n, c)])
    m, s = _mean_std(X)
    assert m[1] == c and s[1] == 0.0
    np.testing.assert_allclose(m[0], X[:, 0].mean(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s[0], X[:, 0].std(), rtol=1e-12)


def test_mean_std_tiny_and_near_constant_columns():
    m, s = _mean_std(np.array([[1e-300], [2e-300], [3e-300]]))
    np.testing.assert_allclose(m, [2e-300], rtol=1e-14)
    np.testing.assert_allclose(s, [np.sqrt(2 / 3) * 1e-300], rtol=1e-12)
    rng = np.random.default_rng(1)
    X = 1e8 + 1e-6 * rng.normal(size=(3000, 1))   # spread ~1e-14 of the mean
    m, s = _mean_std(X)
    np.testing.assert_allclose(m, X.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(s, X.std(axis=0), rtol=1e-6)


def test_public_kernels_refuse_bad_input():
    X, y = _labels_data(seed=8)
    t = random_class_triplets(y, 20, random_state=0)
    bad_X = X.copy()
    bad_X[0, 0] = np.nan
    with pytest.raises(ValueError, match="pair_scatter_from_labels"):
        pair_scatter_from_labels(bad_X, y)
    with pytest.raises(ValueError, match="pair_scatter_from_labels"):
        pair_scatter_from_labels(X[:0], y[:0])
    with pytest.raises(TypeError, match="pair_scatter_from_labels: codes"):
        pair_scatter_from_labels(X, y[:-1])
    with pytest.raises(ValueError, match="pair_scatter_from_labels: needs two classes"):
        pair_scatter_from_labels(X, np.zeros(len(y), dtype=int))
    with pytest.raises(ValueError, match="pair_scatter_from_labels: needs two classes"):
        pair_scatter_from_labels(X[:3], np.arange(3))          # every class a singleton
    with pytest.raises(ValueError, match="pair_scatter_from_triplets"):
        pair_scatter_from_triplets(bad_X, t)
    with pytest.raises(ValueError, match="pair_scatter_from_triplets.*out of range"):
        pair_scatter_from_triplets(X, t + len(y))
    with pytest.raises(ValueError, match="pair_scatter_from_triplets.*shape"):
        pair_scatter_from_triplets(X, t[:, :2])
    with pytest.raises(ValueError, match="pair_scatter_from_triplets.*empty"):
        pair_scatter_from_triplets(X, t[:0])
    with pytest.raises(ValueError, match="pair_scatter_from_triplets.*chunk"):
        pair_scatter_from_triplets(X, t, chunk=0)
    with pytest.raises(ValueError, match="shrunk_inverse: C contains NaN"):
        shrunk_inverse(np.full((2, 2), np.nan), 0.1)
    with pytest.raises(ValueError, match="shrunk_inverse: C must be a non-empty square"):
        shrunk_inverse(np.ones((2, 3)), 0.1)
    with pytest.raises(ValueError, match="shrunk_inverse.*shrinkage"):
        shrunk_inverse(np.eye(2), 1.5)
    with pytest.raises(ValueError, match="kissme_matrix: Sigma_S .* differ"):
        kissme_matrix(np.eye(2), np.eye(3), 0.0)
    with pytest.raises(ValueError, match="kissme_matrix: Sigma_D contains NaN"):
        kissme_matrix(np.eye(2), np.full((2, 2), np.inf), 0.0)


@pytest.mark.parametrize("mode", ["standardize", "center", "whiten", "sphere"])
@pytest.mark.parametrize("fmt", ["dense", "csr", "fortran", "float32"])
def test_fit_never_modifies_the_callers_X(mode, fmt):
    """The prelude standardizes a densified copy in place: the caller's rows,
    in any format, must come back untouched."""
    from tripletml import OASIS
    X, y = _labels_data(seed=9)
    Xin = {"dense": X.copy(), "csr": sp.csr_matrix(X), "fortran": np.asfortranarray(X),
           "float32": X.astype(np.float32)}[fmt]
    before = Xin.toarray().copy() if sp.issparse(Xin) else Xin.copy()
    for est in (KISSME(preprocessing=mode), OASIS(preprocessing=mode, n_triplets=50,
                                                  random_state=0)):
        est.fit(Xin, y)
        est.similarity(Xin[:3])
        after = Xin.toarray() if sp.issparse(Xin) else Xin
        np.testing.assert_array_equal(after, before)


@pytest.mark.filterwarnings("ignore:KISSME. no direction")   # random triplets: M may be 0
@pytest.mark.parametrize("mode", [None, "center", "standardize", "whiten", "sphere"])
@pytest.mark.parametrize("given", ["labels", "triplets"])
def test_statistics_on_raw_rows_equal_those_of_preprocessed_rows(mode, given):
    """The learner forms the pair statistics on the raw rows and maps them
    through the (linear) preprocessing: the same as forming them on the
    preprocessed rows."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((60, 4)) * [1.0, 30.0, 0.01, 5.0] + [0.0, 1e4, -3.0, 7.0]
    y = rng.integers(0, 3, 60)
    T = np.stack([rng.permutation(60)[:3] for _ in range(40)])   # any (q, p, n) rows
    est = KISSME(preprocessing=mode)
    est.fit(X, y) if given == "labels" else est.fit(X, triplets=T)
    Z = est._preprocess(X)
    if given == "labels":
        S, D = pair_scatter_from_labels(Z, np.unique(y, return_inverse=True)[1])
    else:
        S, D = pair_scatter_from_triplets(Z, T)
    scale = np.abs(S).max()
    np.testing.assert_allclose(est.similar_covariance_, S, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(est.dissimilar_covariance_, D, rtol=1e-9,
                               atol=1e-12 * np.abs(D).max())


def test_columns_of_extreme_scale_are_standardized_first():
    """Raw second moments of columns near 1e160 overflow and near 1e-170
    underflow: such columns take the standardize-first path, with the same
    result as moderate columns of the same shape."""
    rng = np.random.default_rng(12)
    base = rng.standard_normal((50, 3))
    y = rng.integers(0, 2, 50)
    X = base * [1e160, 1e-170, 1.0]
    a = KISSME(preprocessing="standardize").fit(X, y)
    b = KISSME(preprocessing="standardize").fit(base, y)
    assert np.isfinite(a.M_).all()
    np.testing.assert_allclose(a.M_, b.M_, rtol=1e-9, atol=1e-12 * np.abs(b.M_).max())
