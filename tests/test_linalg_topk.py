"""tripletml.linalg.topk: the one top-k accumulator, against a plain
argsort reference (ties by lower id, fewer than k candidates, NaN and
infinite scores, larger-is-closer and smaller-is-closer), for both of its
strategies (compiled insertion for small k, partition selection for large k)."""
from __future__ import annotations

import numpy as np
import pytest

from tripletml.linalg.topk import KERNEL_MAX_K, TopK, topk


def reference(scores, k, largest=True, ids=None):
    """Stable sort by (score best first, id), invalid entries dropped, padded."""
    S = np.asarray(scores, dtype=np.float64)
    n_q, n = S.shape
    ids = np.broadcast_to(np.arange(n), S.shape) if ids is None else np.asarray(ids)
    worst = -np.inf if largest else np.inf
    out_s = np.full((n_q, k), worst)
    out_i = np.full((n_q, k), -1, dtype=np.int64)
    for i in range(n_q):
        ok = ~np.isnan(S[i]) & (S[i] != worst) & (ids[i] >= 0)
        s, g = S[i][ok], ids[i][ok]
        order = np.lexsort((g, -s if largest else s))[:k]
        out_s[i, :order.size], out_i[i, :order.size] = s[order], g[order]
    return out_s, out_i


def _check(got, ref):
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[0], ref[0])


@pytest.mark.parametrize("k", [1, 3, KERNEL_MAX_K, KERNEL_MAX_K + 1, 150])
@pytest.mark.parametrize("largest", [True, False])
def test_matches_argsort_with_ties(k, largest):
    rng = np.random.default_rng(k)
    S = rng.integers(0, 7, size=(9, 200)).astype(np.float64)   # many ties
    _check(topk(S, k, largest=largest), reference(S, k, largest))


@pytest.mark.parametrize("k", [4, KERNEL_MAX_K + 6])
@pytest.mark.parametrize("largest", [True, False])
def test_blocks_in_any_order_give_the_one_answer(k, largest):
    """Blocks fed with their offsets, in shuffled order, with explicit ids."""
    rng = np.random.default_rng(1)
    S = np.round(rng.normal(size=(5, 300)), 1)
    ref = reference(S, k, largest)
    acc = TopK(5, k, largest=largest)
    starts = list(range(0, 300, 37))
    for s in rng.permutation(starts):
        acc.add(S[:, s:s + 37], offset=int(s))
    _check(acc.finalize(), ref)
    acc = TopK(5, k, largest=largest)
    for s in rng.permutation(starts):
        block = S[:, s:s + 37]
        acc.add(block, np.broadcast_to(np.arange(s, s + block.shape[1]), block.shape))
    _check(acc.finalize(), ref)


@pytest.mark.parametrize("k", [5, KERNEL_MAX_K + 10])
def test_fewer_candidates_than_k(k):
    S = np.array([[3.0, 1.0, 2.0], [0.0, 0.0, -1.0]])
    scores, ids = topk(S, k)
    assert ids[0, :3].tolist() == [0, 2, 1] and ids[1, :3].tolist() == [0, 1, 2]
    assert (ids[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    _check((scores, ids), reference(S, k))


@pytest.mark.parametrize("k", [3, KERNEL_MAX_K + 2])
@pytest.mark.parametrize("largest", [True, False])
def test_nan_and_worst_value_never_enter(k, largest):
    worst = -np.inf if largest else np.inf
    best = np.inf if largest else -np.inf
    S = np.array([[np.nan, worst, 1.0, best, 1.0, np.nan, 0.5]] * 2)
    S[1, :] = np.nan
    scores, ids = topk(S, k, largest=largest)
    _check((scores, ids), reference(S, k, largest))
    assert ids[0, 0] == 3 and (ids[1] == -1).all()      # +inf similarity is the best
    if largest:
        assert ids[0, :3].tolist() == [3, 2, 4]
    else:
        assert ids[0, :3].tolist() == [3, 6, 2]


def test_float32_scores_and_invalid_ids_in_merge():
    """Merging two top-k lists (scores, ids) with -1 slots, as sharded does."""
    a_s = np.array([[2.0, 1.0, -np.inf]], dtype=np.float32)
    a_i = np.array([[7, 3, -1]])
    b_s = np.array([[2.0, 1.5, 1.0]])
    b_i = np.array([[5, 9, 1]])
    acc = TopK(1, 4)
    acc.add(a_s, a_i)
    acc.add(b_s, b_i)
    scores, ids = acc.finalize()
    assert ids.tolist() == [[5, 7, 9, 1]] and scores.tolist() == [[2.0, 2.0, 1.5, 1.0]]


@pytest.mark.parametrize("k", [4, KERNEL_MAX_K + 1])
def test_sq_norms_turns_inner_products_into_neg_squared_distances(k):
    rng = np.random.default_rng(3)
    Q, X = rng.normal(size=(6, 5)), rng.normal(size=(90, 5))
    X[10] = Q[0]                                                 # distance 0: clamped
    acc = TopK(6, k)
    for s in range(0, 90, 25):
        acc.add(Q @ X[s:s + 25].T, offset=s,
                sq_norms=((Q * Q).sum(1), (X[s:s + 25] ** 2).sum(1)))
    scores, ids = acc.finalize()
    D = -((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    ref_s, ref_i = reference(D, k)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-12)
    assert ids[0, 0] == 10 and scores[0, 0] == 0.0


def test_rows_slice_updates_only_those_rows():
    acc = TopK(4, 2)
    acc.add(np.array([[1.0, 2.0], [3.0, 0.0]]), rows=slice(2, 4))
    scores, ids = acc.finalize()
    assert (ids[:2] == -1).all() and ids[2:].tolist() == [[1, 0], [0, 1]]


def test_bad_input_is_refused_naming_the_function():
    with pytest.raises(ValueError, match="TopK: k must be >= 1"):
        TopK(3, 0)
    with pytest.raises(TypeError, match="TopK: n_queries must be an int"):
        TopK(2.0, 1)
    acc = TopK(2, 1)
    with pytest.raises(ValueError, match=r"TopK.add: scores must have shape \(2, n\)"):
        acc.add(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="TopK.add: ids must be integers"):
        acc.add(np.zeros((2, 4)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="sq_norms needs largest=True"):
        TopK(2, 1, largest=False).add(np.zeros((2, 1)), sq_norms=(np.zeros(2), np.zeros(1)))
    with pytest.raises(ValueError, match="topk: scores must be 2-D"):
        topk(np.zeros(3), 1)
