"""The re-truncation kernel of iterative parameter mixing
(tripletml.linalg.lowrank_mix) against a dense reference."""
import numpy as np
import pytest

from tripletml.linalg.lowrank_mix import mix_truncate, mix_truncate_many, split_balanced


def _dense_reference(As, Bs, mu, k):
    """sum_j mu_j A_j B_j^T formed densely, truncated by a full SVD."""
    M = sum(w * A @ B.T for w, A, B in zip(mu, As, Bs))
    U, s, Vt = np.linalg.svd(M)
    return (U[:, :k] * s[:k]) @ Vt[:k], s


@pytest.mark.parametrize("K,n,m,k", [(1, 9, 9, 3), (3, 12, 10, 2), (4, 20, 20, 4), (8, 6, 7, 2)])
def test_mix_truncate_equals_dense_truncated_svd(K, n, m, k):
    rng = np.random.default_rng(K * 100 + n)
    As = [rng.standard_normal((n, k)) for _ in range(K)]
    Bs = [rng.standard_normal((m, k)) for _ in range(K)]
    mu = rng.random(K)
    mu /= mu.sum()
    ref, s_ref = _dense_reference(As, Bs, mu, k)
    P, s, Q = mix_truncate(As, Bs, mu, k)
    np.testing.assert_allclose((P * s) @ Q.T, ref, atol=1e-12 * max(1.0, s_ref[0]))
    np.testing.assert_allclose(s, s_ref[:k], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(k), atol=1e-12)


def test_split_balanced_factors_and_pseudo_inverses():
    rng = np.random.default_rng(1)
    As = [rng.standard_normal((15, 3)) for _ in range(4)]
    Bs = [rng.standard_normal((11, 3)) for _ in range(4)]
    mu = [0.1, 0.2, 0.3, 0.4]
    ref, _ = _dense_reference(As, Bs, mu, 3)
    A, B, PA, PB = split_balanced(*mix_truncate(As, Bs, mu, 3), pinv=True)
    np.testing.assert_allclose(A @ B.T, ref, atol=1e-12)
    np.testing.assert_allclose(A.T @ A, B.T @ B, atol=1e-12)          # balanced
    np.testing.assert_allclose(PA.T, np.linalg.pinv(A), atol=1e-10)
    np.testing.assert_allclose(PB.T, np.linalg.pinv(B), atol=1e-10)
    A2, B2 = split_balanced(*mix_truncate(As, Bs, mu, 3))
    np.testing.assert_array_equal(A2, A)
    np.testing.assert_array_equal(B2, B)


def test_mix_of_equal_models_is_the_model_and_zero_weights_are_skipped():
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((10, 2)), rng.standard_normal((10, 2))
    C = rng.standard_normal((10, 2)) * np.nan                # weight 0: never read
    P, s, Q = mix_truncate([A, A, C], [B, B, C], [0.5, 0.5, 0.0], 2)
    np.testing.assert_allclose((P * s) @ Q.T, A @ B.T, atol=1e-12)


def test_rank_deficient_mix_and_errors():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 1)), rng.standard_normal((8, 1))
    A = np.hstack([a, np.zeros((8, 1))])
    B = np.hstack([b, np.zeros((8, 1))])
    P, s, Q = mix_truncate([A, A], [B, B], [0.5, 0.5], 2)
    assert s[1] <= 1e-14 * s[0]
    np.testing.assert_allclose((P * s) @ Q.T, a @ b.T, atol=1e-12)
    with pytest.raises(np.linalg.LinAlgError, match="lost rank"):
        split_balanced(P, np.array([s[0], 0.0]), Q, pinv=True)
    with pytest.raises(ValueError, match="weights"):
        mix_truncate([A], [B], [np.nan], 1)
    with pytest.raises(ValueError, match="every weight of a mixture is zero"):
        mix_truncate_many([A, A], [B, B], [[1.0, 0.0], [0.0, 0.0]], 1)
    with pytest.raises(ValueError, match="every weight is zero"):
        mix_truncate([A], [B], [0.0], 1)
    with pytest.raises(ValueError, match="rank k"):
        mix_truncate([A], [B], [1.0], 9)
    with pytest.raises(ValueError, match="one of each"):
        mix_truncate([A, A], [B], [1.0, 1.0], 1)


@pytest.mark.parametrize("K,n,k,s", [(2, 12, 3, 2.0), (4, 20, 4, 4.0), (8, 9, 2, 2.83), (3, 10, 3, 1.0)])
def test_signed_mix_truncate_equals_dense_reference(K, n, k, s):
    """The line-search candidates W0 + s sum_i mu_i (W_i - W0): W0's factors
    get the negative weight 1 - s, the W_i get s mu_i (signed weights)."""
    rng = np.random.default_rng(K * 10 + n)
    As = [rng.standard_normal((n, k)) for _ in range(K + 1)]
    Bs = [rng.standard_normal((n + 1, k)) for _ in range(K + 1)]
    mu = rng.random(K)
    mu /= mu.sum()
    w = np.concatenate([[1.0 - s], s * mu])
    W0 = As[0] @ Bs[0].T
    Wbar = sum(m * A @ B.T for m, A, B in zip(mu, As[1:], Bs[1:]))
    M = W0 + s * (Wbar - W0)
    U, sv, Vt = np.linalg.svd(M)
    ref = (U[:, :k] * sv[:k]) @ Vt[:k]
    P, got_s, Q = mix_truncate(As, Bs, w, k)
    np.testing.assert_allclose((P * got_s) @ Q.T, ref, atol=1e-11 * max(1.0, sv[0]))
    np.testing.assert_allclose(got_s, sv[:k], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-12)
    # several candidates sharing the QRs of the unscaled stacks
    steps = [1.0, s, float(K)]
    many = mix_truncate_many(As, Bs, [np.concatenate([[1.0 - t], t * mu]) for t in steps], k)
    for t, (P2, s2, Q2) in zip(steps, many):
        Mt = W0 + t * (Wbar - W0)
        U, sv, Vt = np.linalg.svd(Mt)
        np.testing.assert_allclose((P2 * s2) @ Q2.T, (U[:, :k] * sv[:k]) @ Vt[:k],
                                   atol=1e-11 * max(1.0, sv[0]))
        np.testing.assert_allclose(s2, sv[:k], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(Q2.T @ Q2, np.eye(k), atol=1e-12)


def test_nonnegative_weights_keep_the_balanced_scaling():
    """Non-negative weights: the signed scaling is the former sqrt(mu) on both
    sides, bit for bit (averaging unchanged)."""
    rng = np.random.default_rng(5)
    As = [rng.standard_normal((10, 2)) for _ in range(3)]
    Bs = [rng.standard_normal((10, 2)) for _ in range(3)]
    mu = np.array([0.2, 0.3, 0.5])
    r = np.sqrt(mu)
    S = np.hstack([A * x for A, x in zip(As, r)])
    T = np.hstack([B * x for B, x in zip(Bs, r)])
    QS, RS = np.linalg.qr(S)
    QT, RT = np.linalg.qr(T)
    U, s, Vt = np.linalg.svd(RS @ RT.T)
    P, sv, Q = mix_truncate(As, Bs, mu, 2)
    np.testing.assert_array_equal(P, QS @ U[:, :2])
    np.testing.assert_array_equal(sv, s[:2])
