"""tripletml.linalg.pairwise: blocked squared distances and the weighted sum
of outer products of row differences (LMNN's and NCA's gradients), against
plain loops."""
import numpy as np
import pytest
import scipy.sparse as sp

import tripletml.linalg.pairwise as pw
from tripletml.linalg.pairwise import PairOuterSum, block_size, squared_distances_block


def _naive_outer_sum(Z, X, W):
    n = X.shape[0]
    S = np.zeros((Z.shape[1], X.shape[1]))
    for a in range(n):
        for b in range(n):
            if W[a, b]:
                S += W[a, b] * np.outer(Z[a] - Z[b], X[a] - X[b])
    return S


def test_squared_distances_block_matches_differences():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(23, 4)) + 5.0
    Y = rng.normal(size=(11, 4))
    ref = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(squared_distances_block(Z, slice(3, 9)), ref[3:9],
                               rtol=1e-12, atol=1e-12)
    ref_y = ((Z[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(squared_distances_block(Z, slice(0, 23), Y=Y), ref_y,
                               rtol=1e-12, atol=1e-12)
    D = squared_distances_block(Z, slice(0, 23))
    assert (D >= 0).all() and np.allclose(np.diag(D), 0, atol=1e-12)


@pytest.mark.parametrize("r,d", [(2, 5), (5, 5), (6, 3)])
@pytest.mark.parametrize("sparse", [False, True])
def test_pair_outer_sum_blocks_equal_the_double_loop(r, d, sparse):
    rng = np.random.default_rng(r + 10 * d)
    n = 17
    X = rng.normal(size=(n, d))
    L = rng.normal(size=(r, d))
    Z = X @ L.T
    W = rng.normal(size=(n, n)) * (rng.random((n, n)) < 0.4)
    ref = _naive_outer_sum(Z, X, W)
    acc = PairOuterSum(Z, X)
    for s in range(0, n, 5):                      # blocks of rows
        blk = W[s:s + 5]
        acc.add(slice(s, min(n, s + 5)), sp.csr_matrix(blk) if sparse else blk)
    np.testing.assert_allclose(acc.result(), ref, rtol=1e-11, atol=1e-11)
    # 2 S is the gradient of sum w_ab ||L (x_a - x_b)||^2 at fixed weights
    f = lambda L: sum(W[a, b] * np.sum((L @ (X[a] - X[b])) ** 2)
                      for a in range(n) for b in range(n))
    E = rng.normal(size=L.shape)
    h = 1e-6
    fd = (f(L + h * E) - f(L - h * E)) / (2 * h)
    assert fd == pytest.approx(float(np.sum(2 * ref * E)), rel=1e-6, abs=1e-8)


def test_block_size_bounds(monkeypatch):
    assert block_size(10, 3) == 10
    assert block_size(10**6, 10**6) == 2
    assert block_size(5, 10**9) == 1
    assert block_size(100, 10, elements=35) == 3
    monkeypatch.setattr(pw, "BLOCK_ELEMENTS", 40)
    assert block_size(100, 10) == 4


@pytest.mark.parametrize("sparse", [False, True])
def test_pair_difference_scatter_is_the_sum_of_outer_products(sparse):
    """Grouped over the distinct rows (repeated pairs, reversed pairs, rows
    named by no pair) it is the plain loop over the pairs."""
    from tripletml.linalg.pairwise import pair_difference_scatter
    rng = np.random.default_rng(7)
    X = rng.normal(size=(11, 5))
    a = rng.integers(0, 8, size=60)
    b = (a + rng.integers(1, 8, size=60)) % 8          # rows 8-10 unused
    a[:5], b[:5] = b[5:10], a[5:10]                      # some pairs reversed
    want = sum(np.outer(X[i] - X[j], X[i] - X[j]) for i, j in zip(a, b))
    got = pair_difference_scatter(sp.csr_matrix(X) if sparse else X, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.array_equal(pair_difference_scatter(X, a[:0], b[:0]), np.zeros((5, 5)))
