"""BilinearEmbedding: a bilinear learner (LORETA) on one-hot item rows as an
ordinal embedding of item ids."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from tripletml import LORETA, OASIS
from tripletml.embedding import BilinearEmbedding, UnusedItemsWarning


def planted_triplets(P, m, seed):
    rng = np.random.default_rng(seed)
    n = len(P)
    t = rng.integers(0, n, size=(m, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    d = lambda a, b: ((P[a] - P[b]) ** 2).sum(axis=1)  # noqa: E731
    swap = d(t[:, 0], t[:, 1]) > d(t[:, 0], t[:, 2])
    t[swap, 1:] = t[swap, 2:0:-1]
    return t


P = np.random.default_rng(0).standard_normal((40, 2))


def test_planted_configuration_recovered_on_held_out_triplets():
    t, te = planted_triplets(P, 8000, 1), planted_triplets(P, 3000, 2)
    emb = BilinearEmbedding(n_components=4, random_state=0).fit(t)
    assert emb.score(te) > 0.9          # chance: 0.5; rank d + 2 = 4 holds -|x_i - x_j|^2
    assert emb.learner_.rank_ == 4 and emb.n_items_ == 40 and emb.n_features_in_ == 3
    assert emb.embedding_.shape[0] == 40 and 1 <= emb.embedding_.shape[1] <= 4
    # rank 1 cannot hold the 2-D configuration as well
    assert BilinearEmbedding(n_components=1, random_state=0).fit(t).score(te) < emb.score(te)


def test_predict_is_the_learners_own_triplet_decision():
    t = planted_triplets(P, 3000, 3)
    emb = BilinearEmbedding(n_components=3, random_state=0).fit(t)
    X = sp.identity(40, format="csr")
    ref = LORETA(rank=3, max_iter=20, preprocessing=None, random_state=0).fit(X, triplets=t)
    np.testing.assert_array_equal(emb.learner_.A_, ref.A_)
    margins = ref.triplet_score(X, t)
    np.testing.assert_array_equal(emb.decision_function(t), margins)
    np.testing.assert_array_equal(emb.predict(t), np.where(margins > 0, 1, -1))
    assert emb.score(t) == np.mean(margins > 0)
    S = emb.similarity()
    np.testing.assert_allclose(S[t[:, 0], t[:, 1]] - S[t[:, 0], t[:, 2]], margins, atol=1e-10)
    # the similarity is W = A B^T, not minus the distance of embedding_
    np.testing.assert_allclose(S, ref.A_ @ ref.B_.T, atol=1e-10)


def test_a_given_learner_is_cloned_and_takes_the_rank():
    t = planted_triplets(P, 2000, 4)
    learner = LORETA(rank=2, max_iter=5, preprocessing=None, random_state=1)
    emb = BilinearEmbedding(learner, n_components=3).fit(t)
    assert not hasattr(learner, "A_") and learner.rank == 2
    assert emb.learner_.rank_ == 3 and emb.learner_.max_iter == 5
    assert BilinearEmbedding(learner).fit(t).learner_.rank_ == 2
    with pytest.raises(ValueError, match="no rank parameter"):
        BilinearEmbedding(OASIS(), n_components=3).fit(t)
    emb2 = BilinearEmbedding(OASIS(preprocessing=None, random_state=0)).fit(t)
    assert emb2.score(t) > 0.6
    with pytest.raises(TypeError, match="triplet learner"):
        BilinearEmbedding(object()).fit(t)


def test_clone_params_and_validation():
    emb = BilinearEmbedding(n_components=5, n_items=40, random_state=3)
    assert clone(emb).get_params() == emb.get_params()
    t = planted_triplets(P, 500, 5)
    with pytest.raises(ValueError, match="out of range|n_items|0..|below"):
        BilinearEmbedding(n_items=10).fit(t)
    with pytest.raises(ValueError):
        BilinearEmbedding().fit(t[:, :2])
    with pytest.raises(ValueError, match="y must be None"):
        BilinearEmbedding().fit(t, np.ones(len(t)))
    with pytest.raises(ValueError):
        BilinearEmbedding(n_components=0).fit(t)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        BilinearEmbedding().predict(t)
    emb = BilinearEmbedding(random_state=0).fit(t)
    with pytest.raises(ValueError):
        emb.predict(np.array([[0, 1, 40]]))


def test_items_in_no_triplet_warn():
    t = planted_triplets(P, 500, 6)
    t = t[(t < 30).all(axis=1)]
    with pytest.warns(UnusedItemsWarning, match="10 of 40 items appear in no triplet"):
        BilinearEmbedding(n_items=40, random_state=0).fit(t)
