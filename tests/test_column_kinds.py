"""Column kinds and the type-aware scale (tripletml.core.column_kinds)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import tripletml.core.column_kinds as ck
from tripletml.core.column_kinds import column_kinds, type_aware_scale


def _mixed(n: int = 300, seed: int = 0) -> np.ndarray:
    """Columns: 0 constant, 1 binary 0/1 (rare), 2-4 one-hot block of 3,
    5-9 pixels 0..255 (5 and 6 reach both ends, 9 near-constant),
    10-11 continuous in different units, 12 counts 1..8 alone."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, 13))
    X[:, 0] = 4.2
    X[:, 1] = rng.random(n) < 0.05
    X[np.arange(n), 2 + rng.integers(0, 3, n)] = 1.0
    P = rng.integers(0, 256, (n, 4)).astype(float)
    P[0, :2], P[1, :2] = 0, 255                         # shared range 0..255
    X[:, 5:9] = P
    X[:, 9] = 0.0
    X[3, 9] = 17.0                                      # near-constant pixel
    X[:, 10] = rng.normal(1000.0, 300.0, n)
    X[:, 11] = rng.normal(0.01, 0.002, n)
    X[:, 12] = rng.poisson(2.0, n).clip(0, 7) + 1      # e.g. rooms: 1..8
    X[0, 12] = 1
    return X


def _prep(X, div=None):
    k = column_kinds(X)
    if div is None:
        div, _ = type_aware_scale(X, k)
    return (np.asarray(X, float) - k.mean) / div


def test_kinds_on_synthetic_columns():
    X = _mixed()
    k = column_kinds(X)
    assert k.kinds[0] == "constant"
    assert list(k.kinds[1:5]) == ["binary"] * 4
    assert list(k.kinds[5:9]) == ["integer"] * 4
    assert k.kinds[9] == "binary"                   # two values {0, 17}: still a pixel
    assert list(k.kinds[10:12]) == ["continuous"] * 2
    assert k.kinds[12] == "integer" and k.count[12] and k.count[5]
    assert not k.count[10]
    # one group: the pixels, with the near-constant pixel joined
    assert len(k.groups) == 1 and k.groups[0].label == "pixels"
    assert list(k.groups[0].columns) == [5, 6, 7, 8, 9]
    assert k.groups[0].levels == 255
    assert k.group[12] == -1 and k.group[10] == -1 and k.group[1] == -1
    # one-hot: the indicators 1-4 do not sum to a constant (column 1)...
    assert not k.one_hot
    # ...but the block alone does
    assert column_kinds(X[:, 2:5]).one_hot


def test_binary_two_values_and_written_floats():
    X = np.array([[0.0000, -1.0, 3.0], [1.0000, 1.0, 3.5], [1.0000, -1.0, 4.0]])
    k = column_kinds(X)
    assert list(k.kinds) == ["binary", "binary", "continuous"]
    # integer detection robust to float noise of written values
    Y = np.array([[1.0 + 1e-12, 2.0], [3.0, 5.0 - 1e-12], [0.0, 7.0]])
    assert list(column_kinds(Y).kinds) == ["integer", "integer"]
    assert list(column_kinds(Y * 0.1).kinds) == ["continuous", "continuous"]


def test_scale_rule_per_kind():
    X = _mixed()
    k = column_kinds(X)
    div, summary = type_aware_scale(X, k)
    std = X.std(axis=0)
    assert div[0] == 1.0
    np.testing.assert_allclose(div[10:13], std[10:13], rtol=1e-10)       # own std
    pooled = np.sqrt(np.mean(std[5:10] ** 2))
    np.testing.assert_allclose(div[5:10], pooled, rtol=1e-10)            # one pooled std
    p = X[:, 1:5].mean(axis=0)
    np.testing.assert_allclose(div[1:5], 1.0)                           # |b - a|
    div_p, summary_p = type_aware_scale(X, k, binary="pooled")
    np.testing.assert_allclose(div_p[1:5], np.sqrt(np.mean(p * (1 - p))), rtol=1e-10)
    np.testing.assert_allclose(np.delete(div_p, [1, 2, 3, 4]), np.delete(div, [1, 2, 3, 4]))
    assert summary_p["binary"]["scale"] == "|b - a| * sqrt(mean p (1 - p))"
    with pytest.raises(ValueError, match="binary"):
        type_aware_scale(X, k, binary="std")
    assert summary["binary"]["columns"] == 4 and summary["binary"]["scale"] == "|b - a|"
    assert summary["commensurate"]["groups"][0]["columns"] == 5
    assert summary["continuous"] == {"columns": 2, "scale": "own std"}
    assert summary["integer"]["columns"] == 1 and summary["integer"]["counts"] == 1
    assert summary["constant"]["columns"] == 1


def test_pooling_keeps_near_constant_pixel_small():
    """Fails if pooling is removed: the one bright value of a near-constant
    pixel must not become the loudest coordinate."""
    X = _mixed()
    Z = _prep(X)
    assert np.abs(Z[:, 9]).max() < 2 * np.abs(Z[:, 5:9]).max()
    Zs = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1)
    assert np.abs(Zs[:, 9]).max() > 10          # what per-column std does


@pytest.mark.parametrize("binary", ["amplitude", "pooled"])
@pytest.mark.parametrize("c", [1e-3, 0.37, 255.0, 1e5])
def test_rescaled_X_gives_same_rows(c, binary):
    X = _mixed()
    X[:, 1] *= 3.0                            # an indicator {0, 3}
    k1, k2 = column_kinds(X), column_kinds(c * X)
    d1, _ = type_aware_scale(X, k1, binary=binary)
    d2, _ = type_aware_scale(c * X, k2, binary=binary)
    nc = k1.kinds != "constant"
    np.testing.assert_allclose(d2[nc], c * d1[nc], rtol=1e-9)
    np.testing.assert_allclose((c * X - k2.mean) / d2, (X - k1.mean) / d1,
                               rtol=1e-8, atol=1e-9)
    assert [len(g.columns) for g in k2.groups] == [len(g.columns) for g in k1.groups]


def test_pixels_over_255_same_rows_as_pixels():
    X = _mixed()[:, 5:10]
    Y = X / 255.0                             # a common user rescale of pixels
    k = column_kinds(Y)
    assert k.groups[0].label == "quantised" and k.groups[0].levels == 255
    assert list(k.kinds[:4]) == ["continuous"] * 4 and len(k.groups[0].columns) == 5
    np.testing.assert_allclose(_prep(Y), _prep(X), rtol=1e-8, atol=1e-9)


def test_permuted_features_and_duplicated_rows():
    X = _mixed()
    d, _ = type_aware_scale(X)
    perm = np.random.default_rng(1).permutation(X.shape[1])
    dp, _ = type_aware_scale(X[:, perm])
    np.testing.assert_allclose(dp, d[perm], rtol=1e-12)
    assert list(column_kinds(X[:, perm]).kinds) == list(column_kinds(X).kinds[perm])
    dd, _ = type_aware_scale(np.vstack([X, X, X]))
    np.testing.assert_allclose(dd, d, rtol=1e-10)


def test_sparse_matches_dense():
    X = _mixed()
    X[:, 10:12] -= X[:, 10:12].mean(0)         # signed continuous columns
    kd, ks = column_kinds(X), column_kinds(sp.csr_matrix(X))
    assert list(kd.kinds) == list(ks.kinds)
    assert [list(g.columns) for g in kd.groups] == [list(g.columns) for g in ks.groups]
    assert kd.one_hot == ks.one_hot
    assert column_kinds(sp.csc_matrix(X[:, 2:5])).one_hot
    np.testing.assert_allclose(type_aware_scale(None, ks)[0], type_aware_scale(None, kd)[0],
                               rtol=1e-10)
    np.testing.assert_allclose(ks.mean, X.mean(0), rtol=1e-10, atol=1e-12)


def test_sparse_tfidf_like_high_dimensional():
    rng = np.random.default_rng(0)
    X = sp.random(200, 20000, density=0.001, random_state=0, format="csr")
    X.data = rng.random(X.data.size)
    k = column_kinds(X)
    assert k.kinds.shape == (20000,)
    div, _ = type_aware_scale(X, k)
    assert np.isfinite(div).all() and (div > 0).all()


@pytest.mark.parametrize("c", [1e-300, 1e300])
def test_extreme_values_finite(c):
    X = _mixed()
    X[:, 10:12] -= X[:, 10:12].mean(0)
    X = X / np.abs(X).max(0) * c
    k = column_kinds(X)
    div, _ = type_aware_scale(X, k)
    assert np.isfinite(div).all() and (div > 0).all()
    assert np.isfinite(k.mean).all() and np.isfinite(k.std).all()
    with np.errstate(over="ignore"):
        Z = X / div - k.mean / div
    assert np.isfinite(Z).all()
    assert list(k.kinds[1:5]) == ["binary"] * 4


def test_invalid_input():
    with pytest.raises(ValueError, match="NaN"):
        column_kinds(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="2-D"):
        column_kinds(np.ones(3))
    with pytest.raises(ValueError, match="no rows"):
        column_kinds(np.ones((0, 3)))


def test_bounded_memory(monkeypatch):
    """Blocks of rows: peak memory well below n x d (no n x n, no d x d)."""
    monkeypatch.setattr(ck, "BLOCK_ELEMENTS", 1 << 14)
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (20000, 100)).astype(float)
    tracemalloc.start()
    type_aware_scale(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < X.nbytes / 4
