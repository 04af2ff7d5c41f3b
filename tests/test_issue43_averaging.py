"""Issue 43 / 38: tail averaging of the factored learners (``average=True``)
and LORETA's span route on short sparse rows.

The averaged model is checked against a dense reference written from the
rule (the step-weighted mean of the block iterates ``A_b B_b^T`` of the
pass, truncated to rank k by an SVD), and for invariance: rescaled X and
permuted features give the same model."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import tripletml as tm
from tripletml.triplets import random_class_triplets

NAMES = ["LORETA", "IterativePA", "NaivePA", "FactoredGD"]


def _blobs(n=90, d=12, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    centers = rng.normal(size=(3, d)) * 2.0
    return centers[y] + rng.normal(size=(n, d)), y


def _recording(cls):
    """A subclass recording ``(A_ B_^T, steps)`` at the end of every block."""
    class Rec(cls):
        def _run_block(self, Xc, triplets, idx, pos):
            out = super()._run_block(Xc, triplets, idx, pos)
            self.__dict__.setdefault("_rec", []).append((self.A_ @ self.B_.T,
                                                         int(idx.shape[0])))
            return out
    Rec.__name__ = cls.__name__
    return Rec


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_the_rank_k_truncation_of_the_step_weighted_mean(name):
    X, y = _blobs()
    T = random_class_triplets(y, 3500, random_state=0)   # 4 blocks of 1000, one of 500
    kw = dict(rank=3, preprocessing=None, random_state=0)
    if name in ("IterativePA", "NaivePA"):       # one fit (no held-out choice of C)
        kw["C"] = 0.001
    m = _recording(getattr(tm, name))(average=True, **kw).fit(X, triplets=T)
    last = getattr(tm, name)(average=False, **kw).fit(X, triplets=T)
    assert m.averaged_ is True and last.averaged_ is False
    Ws, w = zip(*m._rec)
    assert len(Ws) >= 3 and sum(w) == 3500
    # the last recorded iterate is the plain fit's model (same steps, same order)
    np.testing.assert_allclose(Ws[-1], last.A_ @ last.B_.T, atol=1e-10)
    mean = sum(wi * Wi for wi, Wi in zip(w, Ws)) / sum(w)
    U, s, Vt = np.linalg.svd(mean)
    ref = (U[:, :3] * s[:3]) @ Vt[:3]
    np.testing.assert_allclose(m.A_ @ m.B_.T, ref, atol=1e-9 * np.abs(ref).max())
    assert not np.allclose(ref, Ws[-1], atol=1e-6)          # the average is not the last
    if name == "LORETA":                # a rank-k point with exact pseudo-inverses
        np.testing.assert_allclose(m.pinv_A_.T @ m.A_, np.eye(3), atol=1e-9)
        np.testing.assert_allclose(m.pinv_B_.T @ m.B_, np.eye(3), atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_partial_fit_makes_plain_steps(name):
    X, y = _blobs()
    T = random_class_triplets(y, 1500, random_state=1)
    a = getattr(tm, name)(rank=3, preprocessing=None, random_state=0, average=True)
    b = getattr(tm, name)(rank=3, preprocessing=None, random_state=0, average=False)
    a.partial_fit(X, T)
    b.partial_fit(X, T)
    np.testing.assert_array_equal(a.A_, b.A_)
    assert getattr(a, "_tail", None) is None            # no snapshots kept
    a.partial_fit(X, T)
    assert getattr(a, "_tail", None) is None


@pytest.mark.parametrize("name", NAMES)
def test_averaged_model_does_not_depend_on_unit_or_feature_order(name):
    """Rescaled X (c = 1e-3, 1e3) and permuted features: the same averaged
    model (the pca start, the rank rule, the step and the average are all
    computed from the rows the solver sees)."""
    X, y = _blobs(seed=2)
    perm = np.random.default_rng(5).permutation(X.shape[1])
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, Xk in (("ref", X), ("small", 1e-3 * X), ("large", 1e3 * X),
                        ("perm", X[:, perm])):
            fits[key] = getattr(tm, name)(n_triplets=2000, random_state=0,
                                          preprocessing=None).fit(Xk, y)
    ref = fits["ref"]
    S = ref.similarity(X[:15], X)
    for key, Xk in (("small", 1e-3 * X), ("large", 1e3 * X), ("perm", X[:, perm])):
        est = fits[key]
        assert est.averaged_ and est.rank_ == ref.rank_
        np.testing.assert_allclose(est.similarity(Xk[:15], Xk), S,
                                   atol=1e-6 * np.abs(S).max())


def test_loreta_span_route_on_short_sparse_rows(monkeypatch):
    """Sparse rows with fewer non-zeros than rows (the generic rule's plain
    route) but fewer rows than features: LORETA takes the span route when
    n^2 <= steps * k, with the plain route's model."""
    import tripletml.linalg.span as span

    rng = np.random.default_rng(0)
    n, d = 40, 600
    y = np.arange(n) % 2
    X = sp.random(n, d, density=0.02, format="csr", random_state=1)
    X = X + sp.csr_matrix((np.where(y[:, None] == 1, 1.0, 0.0) * (rng.random((n, d)) < 0.01)))
    X = sp.csr_matrix(X)
    assert X.nnz / n < n                                 # short rows
    calls = []
    real = span.span_basis
    monkeypatch.setattr(span, "span_basis", lambda Z: calls.append(Z.shape) or real(Z))
    kw = dict(rank=4, n_triplets=2000, random_state=0, average=False, preprocessing=None)
    a = tm.LORETA(**kw).fit(X, y)                         # 40^2 <= 2000 * 4: the span route
    assert calls, "the span route was not taken"
    b = tm.LORETA(**kw)
    b._span_route = False
    b.fit(X, y)
    Xq = X[:10]
    Sa, Sb = a.similarity(Xq, X), b.similarity(Xq, X)
    np.testing.assert_allclose(Sa, Sb, atol=1e-8 * max(1.0, np.abs(Sb).max()))
    calls.clear()
    tm.LORETA(**{**kw, "n_triplets": 300}).fit(X, y)       # 1600 > 300 * 4: plain
    assert not calls
