"""Each linear-algebra kernel against its dense formula."""
import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.linalg import (as_csr, csr_row_diff, diff_buffers, rowwise_dot,
                              sparse_bilinear, sparse_rank_one_update)


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
        idx, val = diff_buffers(Xc)
        k = csr_row_diff(*a, j, 4, idx, val)
        v = np.zeros(9)
        v[idx[:k]] = val[:k]
        np.testing.assert_allclose(v, X[j] - X[4], atol=1e-15)
        assert np.all(np.diff(idx[:k]) > 0)  # sorted, no duplicates
        qi, qv = Xc.indices[Xc.indptr[i]:Xc.indptr[i + 1]], Xc.data[Xc.indptr[i]:Xc.indptr[i + 1]]
        assert sparse_bilinear(W, qi, qv, idx[:k], val[:k]) == pytest.approx(
            X[i] @ W @ (X[j] - X[4]), abs=1e-12)


def test_rank_one_update(data):
    X, Xc, rng = data
    W = rng.normal(size=(9, 9))
    W0 = W.copy()
    idx, val = diff_buffers(Xc)
    k = csr_row_diff(Xc.indptr, Xc.indices, Xc.data, 2, 5, idx, val)
    qi, qv = Xc.indices[Xc.indptr[1]:Xc.indptr[2]], Xc.data[Xc.indptr[1]:Xc.indptr[2]]
    sparse_rank_one_update(W, 0.37, qi, qv, idx[:k], val[:k])
    np.testing.assert_allclose(W, W0 + 0.37 * np.outer(X[1], X[2] - X[5]), atol=1e-12)


def test_row_diff_is_exact_for_close_rows():
    X = np.array([[1e8, 1.0], [1e8, 1.0 + 1e-6]])
    Xc = as_csr(X)
    idx, val = diff_buffers(Xc)
    k = csr_row_diff(Xc.indptr, Xc.indices, Xc.data, 0, 1, idx, val)
    assert np.dot(val[:k], val[:k]) == pytest.approx(1e-12, rel=1e-6)


def test_rowwise_dot_all_combinations():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(5, 4))
    B = rng.normal(size=(5, 4))
    expect = np.sum(A * B, axis=1)
    for a in (A, sp.csr_matrix(A)):
        for b in (B, sp.csr_matrix(B)):
            np.testing.assert_allclose(rowwise_dot(a, b), expect)


def test_pinv_full_column_rank_and_drift():
    from tripletml.linalg import pinv_drift, pinv_full_column_rank
    rng = np.random.default_rng(3)
    A = rng.normal(size=(40, 6))
    PT = pinv_full_column_rank(A)
    np.testing.assert_allclose(PT.T, np.linalg.pinv(A), atol=1e-13)
    assert pinv_drift(A, PT) < 1e-13
    assert pinv_drift(A, PT * 1.01) > 1e-3


@pytest.mark.parametrize("case", ["generic", "c_in_range", "tall"])
def test_rank_one_update_with_pinv_meyer(case):
    from tripletml.linalg import pinv_full_column_rank, rank_one_update_with_pinv
    rng = np.random.default_rng(4)
    n, k = (300, 12) if case == "tall" else (25, 4)
    A = rng.normal(size=(n, k))
    c = rng.normal(size=n) if case != "c_in_range" else A @ rng.normal(size=k)  # u = 0
    d = rng.normal(size=k)
    expect_A = A + np.outer(c, d)
    PT = pinv_full_column_rank(A)
    assert rank_one_update_with_pinv(A, PT, c, d, np.empty(n), np.empty(n))
    np.testing.assert_allclose(A, expect_A, atol=1e-14)
    np.testing.assert_allclose(PT.T, np.linalg.pinv(expect_A), rtol=1e-9, atol=1e-11)


def test_rank_one_update_with_pinv_refuses_singular_beta():
    from tripletml.linalg import pinv_full_column_rank, rank_one_update_with_pinv
    rng = np.random.default_rng(5)
    A = rng.normal(size=(10, 3))
    w = rng.normal(size=3)
    c = A @ w
    d = -w / (w @ w)           # beta = 1 + d^T A^+ c = 1 - 1 = 0: A + c d^T loses rank
    PT = pinv_full_column_rank(A)
    assert not rank_one_update_with_pinv(A, PT, c, d, np.empty(10), np.empty(10))


def test_balanced_factors():
    from tripletml.linalg import balanced_factors
    rng = np.random.default_rng(6)
    A = rng.normal(size=(30, 4)) * 1e3          # badly balanced: A huge, B tiny
    B = rng.normal(size=(25, 4)) * 1e-3
    A2, B2, PA, PB = balanced_factors(A, B)
    np.testing.assert_allclose(A2 @ B2.T, A @ B.T, atol=1e-12)
    np.testing.assert_allclose(A2.T @ A2, B2.T @ B2, atol=1e-12)   # balanced
    np.testing.assert_allclose(PA.T, np.linalg.pinv(A2), atol=1e-10)
    np.testing.assert_allclose(PB.T, np.linalg.pinv(B2), atol=1e-10)
    s = np.linalg.svd(A @ B.T, compute_uv=False)[:4]
    assert np.linalg.cond(A2) == pytest.approx(np.sqrt(s[0] / s[-1]), rel=1e-8)


def _pd(d, seed, cond=1e2):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, 1.0 / cond, d)) @ Q.T, rng


def test_cholesky_update_and_downdate():
    from tripletml.linalg import chol_downdate, chol_update
    W, rng = _pd(12, 0)
    R = np.linalg.cholesky(W).T.copy()
    x = rng.normal(size=12)
    w = np.empty(12)
    chol_update(R, x, w)
    np.testing.assert_allclose(R.T @ R, W + np.outer(x, x), atol=1e-12)
    np.testing.assert_allclose(np.tril(R, -1), 0.0)
    assert chol_downdate(R, x, w)
    np.testing.assert_allclose(R.T @ R, W, atol=1e-12)
    # a downdate that leaves the cone is refused
    big = 10 * np.linalg.eigh(W)[1][:, -1]
    assert not chol_downdate(np.linalg.cholesky(W).T.copy(), big, w)


@pytest.mark.parametrize("seed, cond", [(1, 1e1), (2, 1e4), (3, 1e8)])
def test_schur_step_bound_equals_bisection_on_eigenvalues(seed, cond):
    from tripletml.linalg import row_column_update, schur_step_bound
    W, rng = _pd(10, seed, cond)
    Winv = np.linalg.inv(W)
    for k in (0, 4, 9):
        u = rng.normal(size=10)

        def pd(eta):
            W2 = W.copy()
            row_column_update(W2, k, u, eta)
            return np.linalg.eigvalsh(W2).min() > 0

        bound = schur_step_bound(W, Winv, k, u)
        lo, hi = 0.0, 1.0
        while pd(hi):
            hi *= 2
        for _ in range(100):  # dense eigenvalue bisection reference
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if pd(mid) else (lo, mid)
        # W^-1 carries relative errors ~ cond * eps into the bound
        assert bound == pytest.approx(lo, rel=max(1e-7, 1e-13 * cond))
        assert pd(0.999 * bound) and not pd(1.001 * bound)


def test_schur_step_bound_unbounded_direction():
    from tripletml.linalg import schur_step_bound
    W, _ = _pd(5, 4)
    u = np.zeros(5)
    u[2] = 1.0  # only the diagonal entry grows: PD for every eta > 0
    assert schur_step_bound(W, np.linalg.inv(W), 2, u) == np.inf


def test_woodbury_row_column_inverse_update():
    from tripletml.linalg import (inverse_row_column_update, row_column_update,
                                  schur_step_bound)
    W, rng = _pd(9, 5, 1e3)
    Winv = np.linalg.inv(W)
    for _ in range(200):  # many steps inside the cone: the error stays at rounding level
        k = int(rng.integers(0, 9))
        u = rng.normal(size=9)
        eta = 0.5 * min(1.0, schur_step_bound(W, Winv, k, u))
        row_column_update(W, k, u, eta)
        inverse_row_column_update(Winv, k, u, eta)
        assert np.linalg.eigvalsh(W).min() > 0
    ref = np.linalg.inv(W)
    assert np.abs(Winv - ref).max() <= 1e-8 * np.abs(ref).max()


def test_schur_bound_returns_the_product_it_computed():
    from tripletml.linalg import schur_step_bound
    W, rng = _pd(7, 9)
    Winv = np.linalg.inv(W)
    u = rng.normal(size=7)
    b, Wu = schur_step_bound(W, Winv, 3, u, return_Wu=True)
    assert b == schur_step_bound(W, Winv, 3, u)
    np.testing.assert_allclose(Wu, Winv @ u, atol=1e-13)


def test_chol_update_downdate_in_one_sweep():
    from tripletml.linalg import chol_update_downdate
    W, rng = _pd(11, 10)
    x = rng.normal(size=11)
    y = 0.5 * x + 0.01 * rng.normal(size=11)   # W + x x^T - y y^T stays PD
    R = np.linalg.cholesky(W).T.copy()
    assert chol_update_downdate(R, x, y, np.empty(11), np.empty(11))
    np.testing.assert_allclose(R.T @ R, W + np.outer(x, x) - np.outer(y, y), atol=1e-12)
    big = 10 * np.linalg.eigh(W)[1][:, -1]
    assert not chol_update_downdate(np.linalg.cholesky(W).T.copy(), 0 * x, big,
                                    np.empty(11), np.empty(11))


def test_triplet_rows_against_dense():
    """The query row and p+ - p- of a triplet, as the kernels see them."""
    from tripletml.linalg import triplet_rows
    rng = np.random.default_rng(5)
    X = rng.normal(size=(8, 6)) * (rng.random((8, 6)) < 0.5)
    Xc = as_csr(sp.csr_matrix(X))
    T = np.array([[0, 1, 2], [3, 3, 4], [5, 6, 6], [7, 0, 1]], dtype=np.int64)
    idx, val = diff_buffers(Xc)
    for t in range(len(T)):
        qi, qv, vi, vv = triplet_rows(Xc.indptr, Xc.indices, Xc.data, T, t, idx, val)
        q = np.zeros(6)
        q[qi] = qv
        v = np.zeros(6)
        v[vi] = vv
        np.testing.assert_array_equal(q, X[T[t, 0]])
        np.testing.assert_allclose(v, X[T[t, 1]] - X[T[t, 2]], rtol=0, atol=0)
        assert np.all(np.diff(vi) > 0)


def test_add_scaled_rounds_as_numpy_in_one_pass():
    """``add_scaled(Y, a, X)`` is NumPy's ``Y += a * X`` bit for bit (the
    product rounded before the sum): a fused multiply-add, which rounds
    once, differs on these values, so the test can tell them apart."""
    from tripletml.linalg.sparse_rows import add_scaled

    rng = np.random.default_rng(0)
    Y = rng.standard_normal((400, 250)) * 1e3
    X = rng.standard_normal((400, 250))
    for a in (3, 1111, 0.1234567):
        ref = Y + a * X
        got = add_scaled(Y.copy(), a, X)
        np.testing.assert_array_equal(got, ref)
        fused = (Y.astype(np.longdouble) + np.longdouble(a) * X.astype(np.longdouble))
        assert np.any(fused.astype(np.float64) != ref) or a == 3
    # other layouts and dtypes: NumPy's expression, the same result
    Yf = np.asfortranarray(Y)
    np.testing.assert_array_equal(add_scaled(Yf.copy(), 0.5, X), Y + 0.5 * X)
    Y32 = Y.astype(np.float32)
    np.testing.assert_array_equal(add_scaled(Y32.copy(), 2, X.astype(np.float32)),
                                  Y32 + 2 * X.astype(np.float32))


def test_gram_rank_one_update_is_the_rank_one_update_in_gram_space():
    """``H += s G[:, q] (G[a] - G[b])`` is ``W += s r_q (r_a - r_b)^T`` seen
    through ``H = R W R^T``; ``add_from_gram`` adds ``R^T A R`` (dense and
    sparse rows)."""
    import scipy.sparse as sp
    from tripletml.linalg.sparse_rows import add_from_gram, gram_rank_one_update, gram_space
    rng = np.random.default_rng(0)
    R = rng.normal(size=(6, 9))
    W = rng.normal(size=(9, 9))
    for rows in (R, sp.csr_matrix(np.where(rng.random(R.shape) < 0.8, 0.0, R))):
        Rd = rows.toarray() if sp.issparse(rows) else rows
        H, G, dense = gram_space(sp.csr_matrix(rows), W)
        np.testing.assert_allclose(H, Rd @ W @ Rd.T, atol=1e-12)
        np.testing.assert_allclose(G, Rd @ Rd.T, atol=1e-12)
        gram_rank_one_update(H, G, 0.7, 1, 2, 4, np.empty(6))
        W1 = W + 0.7 * np.outer(Rd[1], Rd[2] - Rd[4])
        np.testing.assert_allclose(H, Rd @ W1 @ Rd.T, atol=1e-12)
        A = rng.normal(size=(6, 6))
        W2 = W.copy()
        add_from_gram(W2, sp.csr_matrix(rows), dense, A)
        np.testing.assert_allclose(W2, W + Rd.T @ A @ Rd, atol=1e-12)


def test_used_rows_is_np_unique_with_inverse():
    from tripletml.linalg.sparse_rows import used_rows
    rng = np.random.default_rng(1)
    for n, shape in ((50, (40, 3)), (7, (100, 3)), (1000, (5, 3)), (10, (0, 3))):
        t = rng.integers(0, n, size=shape)
        rows, local = used_rows(t, n)
        r2, l2 = np.unique(t, return_inverse=True)
        np.testing.assert_array_equal(rows, r2)
        np.testing.assert_array_equal(local, l2.reshape(t.shape))
        assert local.dtype == np.int64 and local.shape == t.shape


def test_used_rows_refuses_bad_ids():
    from tripletml.linalg.sparse_rows import used_rows
    for bad in (np.array([[0, 1, 5]]), np.array([[0, -1, 2]]), np.array([[0.0, 1.0, 2.0]])):
        with pytest.raises(ValueError, match=r"used_rows: row ids must be integers in \[0, 5\)"):
            used_rows(bad, 5)
    rows, local = used_rows(np.zeros((0, 3), dtype=np.int64), 0)
    assert rows.size == 0 and local.shape == (0, 3)
