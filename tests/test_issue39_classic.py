"""Issue 39, section 2: the classic learners' defaults (principled, scale-free
rules), each with a check that fails under the old rule."""
import numpy as np
import pytest

from tripletml import MMC, Euclidean
from tripletml.algorithms.mmc.estimator import (MAX_DEFAULT_PAIR_ENTRIES, PAIRS_PER_CLASS_PAIR,
                                                PAIRS_PER_PARAMETER, default_n_pairs)
from tripletml.metrics import evaluate_retrieval


def test_mmc_default_pairs_follow_the_parameters_of_m():
    # 20 per free parameter of M, at least metric-learn's 40 c^2
    assert default_n_pairs(10_000, 34, 2) == PAIRS_PER_PARAMETER * 34 * 35 // 2
    assert default_n_pairs(10_000, 34, 2, diagonal=True) == max(PAIRS_PER_CLASS_PAIR * 4,
                                                               PAIRS_PER_PARAMETER * 34)
    assert default_n_pairs(10_000, 4, 10) == PAIRS_PER_CLASS_PAIR * 100
    # capped by the distinct pairs and by the differences' memory
    assert default_n_pairs(30, 34, 2) == 30 * 29 // 2
    assert default_n_pairs(10**6, 5000, 2) == MAX_DEFAULT_PAIR_ENTRIES // 5000
    # the fitted model drew that many
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((200, 12)), np.repeat([0, 1], 100)
    m = MMC(random_state=0, max_iter=5, tol=None).fit(X, y)
    assert m.n_pairs is None and m.M_.shape == (12, 12)


def _binary(seed, n=300, d=30, informative=3):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    X = rng.standard_normal((n, d))
    X[:, :informative] += 1.2 * y[:, None]        # the classes differ in a few directions
    return X, y


def test_mmc_default_pairs_beat_40c2_on_a_binary_set_with_many_features():
    # 40 c^2 = 160 pairs for two classes whatever d: M (465 parameters at
    # d = 30) fits the sampled pairs; the default's pairs follow d
    gain = []
    for seed in range(3):
        X, y = _binary(seed)
        Xt, yt = _binary(seed + 100)
        new = evaluate_retrieval(MMC(random_state=seed).fit(X, y), Xt, yt, k=())["map"]
        old = evaluate_retrieval(MMC(random_state=seed, n_pairs=160).fit(X, y), Xt, yt,
                                 k=())["map"]
        gain.append(new - old)
        # and above the no-learning baseline (the 160-pair MMC was below it)
        assert new > evaluate_retrieval(Euclidean().fit(X), Xt, yt, k=())["map"]
    assert np.mean(gain) > 0.02, gain
