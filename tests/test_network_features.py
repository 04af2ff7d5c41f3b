"""preprocessing="normalize" and the "auto" rule for features from a network
(issue 38 s2): the model starts at the cosine of the rows, and the rule reads
the form of X (invariant to rescaling, permutations, duplicated rows)."""
import os
import tempfile
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import KISSME, OASIS, Euclidean, load_model
from tripletml.core.preprocessing import (MIN_NETWORK_FEATURES, Preprocessor,
                                     looks_like_network_features)
from tripletml.distributed.sharded import ShardedCollection


def _relu_features(n=60, d=128, seed=0):
    """ReLU activations of a random layer: non-negative, continuous, sparse-ish."""
    rng = np.random.default_rng(seed)
    return np.maximum(rng.standard_normal((n, 16)) @ rng.standard_normal((16, d)) - 0.5, 0.0)


def _cosine(X, Y):
    """The plain cosine, written out (independent of normalize_rows)."""
    return (X @ Y.T) / np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1))


# ------------------------------------------------------------------ the rule
def test_rule_accepts_activations_and_embeddings():
    X = _relu_features()
    assert looks_like_network_features(X)
    rng = np.random.default_rng(1)
    E = rng.standard_normal((50, 96))                   # signed embeddings, l2-normalized
    assert looks_like_network_features(E / np.linalg.norm(E, axis=1, keepdims=True))


def test_rule_rejects_tabular_quantised_signed_and_narrow():
    rng = np.random.default_rng(2)
    assert not looks_like_network_features(rng.integers(0, 256, (200, 100)).astype(float))
    assert not looks_like_network_features(rng.integers(0, 2, (200, 100)).astype(float))
    assert not looks_like_network_features(rng.integers(0, 17, (200, 64)).astype(float))
    assert not looks_like_network_features(rng.standard_normal((200, 100)))   # signed, raw
    narrow = _relu_features(d=MIN_NETWORK_FEATURES - 1)
    assert not looks_like_network_features(narrow)
    assert not looks_like_network_features(sp.csr_matrix(_relu_features()))


def test_rule_is_invariant_to_scale_permutations_and_duplicates():
    X = _relu_features()
    rng = np.random.default_rng(3)
    variants = [1e-6 * X, 1e6 * X, X[rng.permutation(len(X))],
                X[:, rng.permutation(X.shape[1])], np.vstack([X, X[:7]])]
    assert all(looks_like_network_features(V) for V in variants)
    Q = rng.integers(0, 256, (100, 80)).astype(float)
    assert not any(looks_like_network_features(V) for V in (Q / 255.0 * 1e-3, Q[::-1]))


# ------------------------------------------------------------ the mode itself
def test_normalize_mode_ranks_by_the_cosine_and_is_scale_free():
    X = _relu_features()
    e = Euclidean(preprocessing="normalize").fit(X)
    S = e.similarity(X[:5], X)
    C = _cosine(X[:5], X)
    assert np.array_equal(np.argsort(-S, axis=1, kind="stable")[:, :10],
                          np.argsort(-C, axis=1, kind="stable")[:, :10])
    rows = np.random.default_rng(4).uniform(0.1, 10, size=(len(X), 1))
    S2 = e.similarity(rows[:5] * X[:5], rows * X)       # per-row rescaling changes nothing
    np.testing.assert_allclose(S2, S, atol=1e-12)


def test_normalize_mode_zero_rows_and_sparse_rows():
    X = _relu_features()
    X[3] = 0.0
    Z = Preprocessor("normalize").fit(X).transform(X)
    assert np.all(np.isfinite(Z)) and not Z[3].any()
    Zs = Preprocessor("normalize").fit(sp.csr_matrix(X)).transform(sp.csr_matrix(X))
    assert sp.issparse(Zs)
    np.testing.assert_allclose(Zs.toarray(), Z, rtol=1e-12, atol=1e-15)
    norms = np.linalg.norm(np.delete(Z, 3, axis=0), axis=1)
    np.testing.assert_allclose(norms, norms[0], rtol=1e-12)


def test_auto_picks_normalize_for_network_features_and_saves():
    X = _relu_features(n=40)
    rng = np.random.default_rng(5)
    T = np.array([rng.choice(40, 3, replace=False) for _ in range(300)])
    for est in (OASIS(random_state=0), KISSME()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, triplets=T)
        assert est.preprocessing_ == "normalize"
        assert "network" in est.preprocessing_decision_["reason"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.npz")
            est.save(path)
            back = load_model(path)
        np.testing.assert_array_equal(back.similarity(X[:4], X), est.similarity(X[:4], X))
        # scale-free: c X gives the same model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est2 = type(est)(**est.get_params()).fit(1e3 * X, triplets=T)
        np.testing.assert_allclose(est2.similarity(1e3 * X[:4], 1e3 * X),
                                   est.similarity(X[:4], X), rtol=1e-7, atol=1e-9)


def test_partitioned_auto_and_normalize_equal_in_memory():
    X = _relu_features(n=90)
    y = np.repeat(np.arange(3), 30)
    for mode in ("auto", "normalize"):
        ref = KISSME(preprocessing=mode).fit(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = KISSME(preprocessing=mode).fit(ShardedCollection.from_arrays(X, y,
                                                                             n_partitions=4))
        assert m.preprocessing_ == ref.preprocessing_ == "normalize"
        assert m.scaler_.unit_ == pytest.approx(ref.scaler_.unit_, rel=1e-12)
        np.testing.assert_allclose(m.M_, ref.M_, rtol=1e-8, atol=1e-12 * np.abs(ref.M_).max())


def test_normalize_refuses_second_moment():
    pre = Preprocessor("normalize").fit(_relu_features())
    assert pre.linear_map() is None
    with pytest.raises(ValueError, match="not linear"):
        pre.second_moment(np.eye(pre.n_features_in_))
