"""Each linear-algebra kernel against its dense formula."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.linalg import (as_csr, csr_bilinear, csr_row_dot, csr_row_sqdist,
                              csr_triplet_margin, csr_triplet_rank_one_update, rowwise_dot)


@pytest.fixture(params=["dense", "sparse"])
def data(request):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 9))
    if request.param == "sparse":
        X[rng.random(X.shape) < 0.7] = 0.0
        X[3] = 0.0  # an empty row
        Xc = as_csr(sp.csr_matrix(X))
    else:
        Xc = as_csr(X)
    return X, Xc, rng


def test_as_csr_roundtrip(data):
    X, Xc, _ = data
    np.testing.assert_array_equal(Xc.toarray(), X)
    assert Xc.has_sorted_indices


def test_row_kernels(data):
    X, Xc, rng = data
    W = rng.normal(size=(9, 9))
    a = (Xc.indptr, Xc.indices, Xc.data)
    for i, j in [(0, 1), (3, 5), (2, 2), (7, 3)]:
        assert csr_row_dot(*a, i, j) == pytest.approx(X[i] @ X[j], abs=1e-12)
        assert csr_row_sqdist(*a, i, j) == pytest.approx(np.sum((X[i] - X[j]) ** 2), abs=1e-12)
        assert csr_bilinear(W, *a, i, j) == pytest.approx(X[i] @ W @ X[j], abs=1e-12)
        assert csr_triplet_margin(W, *a, i, j, 4) == pytest.approx(X[i] @ W @ (X[j] - X[4]),
                                                                     abs=1e-12)


def test_rank_one_update(data):
    X, Xc, rng = data
    W = rng.normal(size=(9, 9))
    W0 = W.copy()
    csr_triplet_rank_one_update(W, 0.37, Xc.indptr, Xc.indices, Xc.data, 1, 2, 5)
    np.testing.assert_allclose(W, W0 + 0.37 * np.outer(X[1], X[2] - X[5]), atol=1e-12)


def test_sqdist_has_no_cancellation():
    X = np.array([[1e8, 1.0], [1e8, 1.0 + 1e-6]])
    Xc = as_csr(X)
    assert csr_row_sqdist(Xc.indptr, Xc.indices, Xc.data, 0, 1) == pytest.approx(1e-12, rel=1e-6)


def test_rowwise_dot_all_combinations():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(5, 4))
    B = rng.normal(size=(5, 4))
    expect = np.sum(A * B, axis=1)
    for a in (A, sp.csr_matrix(A)):
        for b in (B, sp.csr_matrix(B)):
            np.testing.assert_allclose(rowwise_dot(a, b), expect)
