"""Meyer's update in its two passes and LORETA's one drift control
(tripletml.linalg.pinv.PinvFactors), against dense NumPy references."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tripletml.linalg.pinv import (balanced_factors, pinv_drift, pinv_full_column_rank,
                                   pinv_update_apply, pinv_update_prepare,
                                   rank_one_update_with_pinv)
from tripletml.linalg.pinv import PinvFactors


def test_two_passes_equal_the_one_call_and_the_dense_pinv():
    rng = np.random.default_rng(0)
    n, k = 30, 5
    A = rng.normal(size=(n, k))
    c, d = rng.normal(size=n), rng.normal(size=k)
    A1, P1 = A.copy(), pinv_full_column_rank(A)
    assert rank_one_update_with_pinv(A1, P1, c, d, np.empty(n), np.empty(n))
    A2, P2 = A.copy(), pinv_full_column_rank(A)
    kv, Ah, h, u = np.zeros(k), np.zeros(k), np.empty(n), np.empty(n)
    hh = pinv_update_prepare(P2, P2, c.copy(), d, h, kv, Ah, np.zeros(k), 0.0)
    assert pinv_update_apply(A2, P2, c.copy(), d, u, h, kv, Ah, hh)
    np.testing.assert_allclose(A2, A + np.outer(c, d), atol=1e-13)
    np.testing.assert_allclose(P2, P1, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(P2.T, np.linalg.pinv(A + np.outer(c, d)), rtol=1e-9, atol=1e-11)


def test_prepare_completes_c_on_the_fly():
    # with fa != 0, pass 1 adds fa * (S_i . w) to c_i: c must equal c0 + fa S w
    rng = np.random.default_rng(1)
    n, k = 20, 3
    A = rng.normal(size=(n, k))
    S, w, fa = rng.normal(size=(n, k)), rng.normal(size=k), -0.3
    c0, d = rng.normal(size=n), rng.normal(size=k)
    c = c0.copy()
    P = pinv_full_column_rank(A)
    pinv_update_prepare(S, P, c, d, np.empty(n), np.zeros(k), np.zeros(k), w, fa)
    np.testing.assert_allclose(c, c0 + fa * S @ w, atol=1e-13)


def _factors(rng, n=12, m=9, k=3, cond=1.0):
    A = rng.normal(size=(n, k)) @ np.diag(np.geomspace(1.0, cond, k))
    B = rng.normal(size=(m, k))
    return A, B


def test_pinv_factors_refactors_without_changing_w():
    rng = np.random.default_rng(2)
    A, B = _factors(rng, cond=1e4)
    W = A @ B.T
    f = PinvFactors(A.copy(), B.copy(), check_every=5, tol=1e-8)
    np.testing.assert_allclose(f.A @ f.B.T, W, atol=1e-10 * np.abs(W).max())
    np.testing.assert_allclose(f.A.T @ f.A, f.B.T @ f.B, atol=1e-9 * np.abs(W).max())
    np.testing.assert_allclose(f.PA.T, np.linalg.pinv(f.A), atol=1e-10)
    assert f.measure() < 1e-10 and f.n_refresh == 0


def test_pinv_factors_check_refreshes_only_above_tol():
    rng = np.random.default_rng(3)
    A, B = _factors(rng)
    f = PinvFactors(A, B, pinv_full_column_rank(A), pinv_full_column_rank(B) * 1.001,
                    check_every=5, tol=1e-8)
    f.check(step=7)
    assert f.n_refresh == 1 and f.drift > 1e-4 and f.measure() < 1e-10
    f.check(step=8)
    assert f.n_refresh == 1                  # exact now: no second refresh


def test_pinv_factors_run_checks_every_and_refactors_on_flags():
    rng = np.random.default_rng(4)
    A, B = _factors(rng)
    calls = []

    def kernel(ff, start, stop):
        calls.append((start, stop))
        return stop, 0

    f = PinvFactors(A, B, check_every=4, tol=1e-8)
    f.since_check = 0
    f.run(kernel, 11, lambda step: FloatingPointError(step))
    assert calls == [(0, 4), (4, 8), (8, 11)]      # chunks end at the drift checks
    assert f.since_check == 3 and f.n_refresh == 0

    def flagged(ff, start, stop):
        calls.append((start, stop))
        return (start + 1, 2) if start < 2 else (stop, 0)

    calls.clear()
    f4 = PinvFactors(A, B, check_every=100, tol=1e-8)
    f4.run(flagged, 6, lambda step: FloatingPointError(step))
    assert calls == [(0, 6), (1, 6), (2, 6)] and f4.n_refresh == 2


def test_pinv_factors_run_raises_the_owners_divergence():
    rng = np.random.default_rng(5)
    A, B = _factors(rng)
    f = PinvFactors(A, B, check_every=10, tol=1e-8)
    with pytest.raises(FloatingPointError, match="at 4"):
        f.run(lambda ff, s, e: (3, -1), 8, lambda step: FloatingPointError(f"at {step}"),
              step0=0)


def test_pinv_factors_rank_loss_is_a_floating_point_error():
    A = np.zeros((6, 2))
    A[0, 0] = 1.0                              # rank 1 < k = 2
    with pytest.raises(FloatingPointError, match="LORETA: W = A B\\^T lost rank 2"):
        PinvFactors(A, np.eye(6)[:, :2], owner="LORETA")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 12), k=st.integers(1, 3))
def test_balanced_factors_property(seed, n, k):
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=(n, k)), rng.normal(size=(n + 1, k))
    A2, B2, PA, PB = balanced_factors(A, B)
    scale = np.abs(A @ B.T).max()
    np.testing.assert_allclose(A2 @ B2.T, A @ B.T, atol=1e-9 * scale)
    assert pinv_drift(A2, PA) < 1e-8 and pinv_drift(B2, PB) < 1e-8
