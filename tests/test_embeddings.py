"""Query / database embeddings of every registry triplet learner: the inner
product (or minus squared distance) of the embeddings equals ``similarity``."""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

from tripletml import LORETA, OASIS, LowRankDML
from tripletml.registry import entries
from tripletml.core.base import EMBEDDING_SIMILARITIES

from _estimators import ESTIMATORS, toy_data

# the solvers against their papers' formulas on the rows as given
pytestmark = pytest.mark.usefixtures("raw_rows")


def _combine(kind, EQ, ED):
    if kind == "inner_product":
        return EQ @ ED.T
    diff = EQ[:, None, :] - ED[None, :, :]          # brute force, small sizes
    return -np.einsum("ijk,ijk->ij", diff, diff)


def test_every_triplet_learner_is_covered():
    names = {e.name for e in entries("triplet")}
    assert {"Euclidean", "DotProduct", "OASIS", "LORETA", "LowRankDML", "SML"} <= names
    assert len(ESTIMATORS) >= len(names)


@pytest.mark.parametrize("factory, alt", ESTIMATORS)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_embeddings_reproduce_similarity(factory, alt, sparse):
    X, y = toy_data(seed=1, n=30, d=5)
    model = factory().fit(X, y)
    assert model.embedding_similarity in EMBEDDING_SIMILARITIES
    rng = np.random.default_rng(5)
    Q = rng.normal(size=(7, 5)) * (rng.random((7, 5)) < 0.7)
    D = rng.normal(size=(11, 5)) * (rng.random((11, 5)) < 0.7)
    if sparse:
        Q, D = sp.csr_matrix(Q), sp.csr_matrix(D)
    EQ, ED = model.embed_queries(Q), model.embed_database(D)
    assert isinstance(EQ, np.ndarray) and isinstance(ED, np.ndarray)
    assert EQ.dtype == ED.dtype == np.float64
    assert EQ.shape[0] == 7 and ED.shape[0] == 11 and EQ.shape[1] == ED.shape[1]
    ref = model.similarity(Q, D)
    ref = ref.toarray() if sp.issparse(ref) else np.asarray(ref)
    got = _combine(model.embedding_similarity, EQ, ED)
    scale = max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * scale)


def test_sides_matter_for_a_non_symmetric_W():
    """Swapping query and database sides of OASIS must change the result
    (so the test above would catch a transposed W)."""
    X, y = toy_data(seed=2, n=30, d=5)
    model = OASIS(preprocessing=None, n_triplets=300, random_state=0).fit(X, y)
    W = model.get_bilinear_matrix()
    assert not np.allclose(W, W.T)
    Q, D = X[:4], X[4:9]
    wrong = model.embed_database(Q) @ model.embed_queries(D).T
    assert not np.allclose(wrong, model.similarity(Q, D))
    np.testing.assert_allclose(model.embed_queries(Q), Q @ W)


def test_factored_embedding_has_rank_dims_and_never_forms_w():
    rng = np.random.default_rng(0)
    d, n = 20000, 60
    X = sp.random(n, d, density=5e-4, format="csr", random_state=1) + sp.eye(n, d, format="csr")
    y = np.arange(n) % 3
    model = LORETA(preprocessing=None, rank=3, n_triplets=200, eta0=0.05, random_state=0).fit(X, y)
    Q = sp.random(5, d, density=1e-3, format="csr", random_state=2)
    tracemalloc.start()
    EQ = model.embed_queries(Q)
    ED = model.embed_database(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert EQ.shape == (5, 3) and ED.shape == (n, 3)
    assert peak < 8 * d * 16          # a d x d (3.2 GB) or n x d array would not fit
    np.testing.assert_allclose(EQ @ ED.T, model.similarity(Q, X), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(EQ, Q @ model.A_)
    np.testing.assert_allclose(ED, X @ model.B_)
    del rng


def test_mahalanobis_embedding_is_transform():
    X, y = toy_data(seed=3, n=30, d=5)
    model = LowRankDML(preprocessing=None, n_triplets=200, max_iter=20, batch_size=20, eta0=0.1, alpha=0.01,
                       random_state=0).fit(X, y)
    np.testing.assert_allclose(model.embed_queries(X), model.transform(X))
    np.testing.assert_allclose(model.embed_database(X), model.transform(X))


@pytest.mark.parametrize("method", ["embed_queries", "embed_database"])
def test_embedding_input_errors(method):
    X, y = toy_data(seed=0, n=30, d=5)
    model = OASIS(preprocessing=None, n_triplets=100, random_state=0)
    with pytest.raises(NotFittedError):
        getattr(model, method)(X)
    model.fit(X, y)
    with pytest.raises(ValueError, match="OASIS.*features"):
        getattr(model, method)(X[:, :4])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="OASIS"):
        getattr(model, method)(bad)
