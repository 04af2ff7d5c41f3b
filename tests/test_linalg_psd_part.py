"""tripletml.linalg.psd_part against dense references written here."""
import numpy as np
import pytest

from tripletml.linalg.psd_part import psd_part, psd_part_factored


def _reference(W):
    ev, U = np.linalg.eigh(0.5 * (W + W.T))
    return (U * np.clip(ev, 0, None)) @ U.T, ev


@pytest.mark.parametrize("seed", range(4))
def test_dense_is_the_clipped_symmetric_part(seed):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(7, 7))
    part = psd_part(W)
    Wp, ev = _reference(W)
    np.testing.assert_allclose(part.factor @ part.factor.T, Wp, atol=1e-12)
    assert np.all(np.diff(part.eigenvalues) <= 0) and part.factor.shape[1] == np.sum(ev > 0)
    assert part.fidelity == pytest.approx(1 - np.sum((W - Wp) ** 2) / np.sum(W * W))
    # the nearest PSD matrix: no random PSD matrix is closer to W
    for _ in range(20):
        G = rng.normal(size=(7, 3))
        assert np.sum((W - G @ G.T) ** 2) >= np.sum((W - Wp) ** 2)


def test_dense_psd_is_exact_and_truncation_keeps_the_top():
    rng = np.random.default_rng(5)
    G = rng.normal(size=(6, 6))
    W = G @ G.T
    part = psd_part(W)
    np.testing.assert_allclose(part.factor @ part.factor.T, W, atol=1e-10)
    assert part.fidelity == pytest.approx(1.0)
    ev = np.sort(np.linalg.eigvalsh(W))[::-1]
    two = psd_part(W, 2)
    assert two.factor.shape == (6, 2)
    np.testing.assert_allclose(two.eigenvalues, ev[:2])
    assert two.fidelity == pytest.approx(np.sum(ev[:2] ** 2) / np.sum(ev ** 2))
    assert psd_part(W, 100).factor.shape == (6, 6)            # more than there are: all


def test_zero_and_negative_definite():
    assert psd_part(np.zeros((3, 3))).factor.shape == (3, 0)
    assert psd_part(np.zeros((3, 3))).fidelity == 1.0
    part = psd_part(-np.eye(3))
    assert part.factor.shape == (3, 0) and part.fidelity == 0.0
    with pytest.raises(ValueError, match="square"):
        psd_part(np.zeros((2, 3)))


@pytest.mark.parametrize("d, k", [(30, 3), (4, 3), (10, 1)])
def test_factored_equals_dense(d, k):
    rng = np.random.default_rng(d + k)
    A, B = rng.normal(size=(d, k)), rng.normal(size=(d, k))
    W = A @ B.T
    f, dense = psd_part_factored(A, B), psd_part(W)
    np.testing.assert_allclose(f.factor @ f.factor.T, dense.factor @ dense.factor.T,
                               atol=1e-10 * np.abs(W).max())
    assert f.factor.shape[1] <= k                              # inertia: at most k positive
    assert f.fidelity == pytest.approx(dense.fidelity, rel=1e-10)
    np.testing.assert_allclose(f.eigenvalues, dense.eigenvalues[:f.factor.shape[1]],
                               rtol=1e-9)
    for m in (1, 2):
        a, b = psd_part_factored(A, B, m), psd_part(W, m)
        np.testing.assert_allclose(a.factor @ a.factor.T, b.factor @ b.factor.T,
                                   atol=1e-10 * np.abs(W).max())


def test_factored_symmetric_and_degenerate():
    rng = np.random.default_rng(9)
    A = rng.normal(size=(12, 4))
    part = psd_part_factored(A, A)                             # W = A A^T: exact
    np.testing.assert_allclose(part.factor @ part.factor.T, A @ A.T, atol=1e-10)
    assert part.factor.shape == (12, 4) and part.fidelity == pytest.approx(1.0)
    assert psd_part_factored(np.zeros((5, 2)), np.zeros((5, 2))).factor.shape == (5, 0)
    with pytest.raises(ValueError, match="shape"):
        psd_part_factored(np.zeros((5, 2)), np.zeros((5, 3)))
