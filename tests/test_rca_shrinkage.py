"""RCA's shrinkage towards the identity and its held-out choice on answers
(issue 38): the model against a dense inverse of the shrunk covariance, the
held-out scores against fits of the estimator's own closed form on each fold,
and the rule that the choice never falls below the identity."""
import numpy as np
import pytest

from tripletml import RCA, load_model
from tripletml.algorithms.rca.estimator import _centered_scatters, rca_model
from tripletml.algorithms.rca.kernels import (RCA_FOLDS, choose_shrinkage, shrinkage_scores,
                                              span_basis_of)
from tripletml.algorithms.kissme.kernels import answer_folds
from tripletml.engine.early_stopping import item_folds
from tripletml.linalg.pairwise import pair_difference_scatter
from _triplet_draws import hidden_answers


def _answers(seed=0, n=40, d=12, m=1500, noise=0.0, informative=True):
    """Items whose first two columns decide the answers; with
    ``informative`` the other columns vary more within the answers' pairs
    than the signal (so a whitening helps)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 2))
    X = np.hstack([Z, rng.normal(size=(n, d - 2)) * (3.0 if informative else 0.05)])
    return X, hidden_answers(rng, Z, m, noise)


@pytest.mark.parametrize("n", [30, 200])
@pytest.mark.parametrize("s", [0.05, 0.5, 1.0])
def test_shrunk_model_is_the_dense_inverse(n, s):
    """M = ((1 - s) C + s tr(C) / d I)^{-1} on the whole space, from the span
    route (fewer rows than features) and from T's eigenvectors, every
    direction; L^T L = M."""
    rng = np.random.default_rng(1)
    d = 60
    X = rng.normal(size=(n, d)) * rng.uniform(0.2, 5, size=d)
    t = rng.integers(0, n, size=(300, 2))
    t = t[t[:, 0] != t[:, 1]]
    C = pair_difference_scatter(X, t[:, 0], t[:, 1]) / (4 * len(t))
    _, T, _ = _centered_scatters(X, np.full(n, -1), 0)
    want = np.linalg.inv((1 - s) * C + s * np.trace(C) / d * np.eye(d))
    for rows in (X, None):
        L, M = rca_model(C, T, 1e-3, None, rows=rows, shrinkage=s)
        np.testing.assert_allclose(M, want, rtol=1e-7, atol=1e-9 * np.abs(want).max())
        np.testing.assert_allclose(L.T @ L, want, rtol=1e-7, atol=1e-9 * np.abs(want).max())


def test_shrunk_components_are_generalized_eigenvectors():
    """n_components = k with shrinkage: rows whiten the shrunk covariance
    (L A L^T = I), diagonalise the total scatter in decreasing order, and
    past the span's dimension continue on its complement."""
    rng = np.random.default_rng(2)
    n, d, s = 10, 30, 0.3
    X = rng.normal(size=(n, d))
    t = np.array([rng.choice(n, 2, replace=False) for _ in range(50)])
    C = pair_difference_scatter(X, t[:, 0], t[:, 1]) / (4 * len(t))
    _, T, _ = _centered_scatters(X, np.full(n, -1), 0)
    A = (1 - s) * C + s * np.trace(C) / d * np.eye(d)
    for k in (4, 15):
        L, M = rca_model(C, T, 1e-3, k, rows=X, shrinkage=s)
        assert L.shape == (k, d)
        np.testing.assert_allclose(L @ A @ L.T, np.eye(k), atol=1e-8)
        ratio = np.diag(L @ T @ L.T)
        assert np.all(np.diff(ratio) <= 1e-8 * ratio.max())
        np.testing.assert_allclose(M, L.T @ L)
    assert np.allclose(ratio[n - 1:], 0.0, atol=1e-8 * ratio.max())


def _brute_scores(X, T, grid, reg):
    """The two held-out protocols by brute force: for each fold, the
    estimator's closed form (rca_model) on the fold's rows and answers, its
    dense M, and the triplet accuracy (ties one half) of the held-out ones."""
    def acc(M, t):
        dp = np.einsum("ij,jk,ik->i", X[t[:, 0]] - X[t[:, 1]], M, X[t[:, 0]] - X[t[:, 1]])
        dn = np.einsum("ij,jk,ik->i", X[t[:, 0]] - X[t[:, 2]], M, X[t[:, 0]] - X[t[:, 2]])
        return np.mean((dp < dn) + 0.5 * (dp == dn))

    out = np.zeros((2, len(grid)))
    af = answer_folds(T, RCA_FOLDS)
    splits = [[(h.fit, h.val, h.items) for h in item_folds(T, RCA_FOLDS, val="all")],
              [(np.flatnonzero(af != f), np.flatnonzero(af == f), []) for f in range(RCA_FOLDS)]]
    for r, folds in enumerate(splits):
        for fit, val, held in folds:
            kept = np.setdiff1d(np.arange(len(X)), held)
            t = T[fit]
            C = pair_difference_scatter(X, t[:, 0], t[:, 1]) / (4 * len(t))
            _, Tk, _ = _centered_scatters(X[kept], np.full(len(kept), -1), 0)
            for g, s in enumerate(grid):
                _, M = rca_model(C, Tk, reg, None, rows=X[kept], shrinkage=float(s))
                out[r, g] += acc(M, T[val]) / RCA_FOLDS
    return out


def test_heldout_scores_against_the_closed_form_on_each_fold():
    X, T = _answers(seed=3, n=24, d=40, m=3000, noise=0.2)     # fewer rows than features
    grid = np.array([0.0, 0.01, 0.3, 0.9, 1.0])

    def cov(B, idx):
        return pair_difference_scatter(B, T[idx, 0], T[idx, 1]) / (4 * len(idx))

    got = shrinkage_scores(X, T, grid, 1e-3, cov)
    np.testing.assert_allclose(got, _brute_scores(X, T, grid, 1e-3), atol=1e-12)


def test_choice_never_below_the_identity_on_either_protocol():
    grid = np.array([0.0, 0.5, 1.0])
    assert choose_shrinkage(grid, np.array([[.8, .7, .6], [.5, .65, .6]])) == 0.5
    assert choose_shrinkage(grid, np.array([[.9, .5, .6], [.5, .55, .6]])) == 1.0
    assert choose_shrinkage(grid, np.array([[.6, .6, .6], [.6, .6, .6]])) == 0.0   # ties


def test_auto_whitens_where_the_answers_support_it_and_keeps_the_features_otherwise():
    from tripletml.metrics import triplet_accuracy
    X, T = _answers(seed=4, informative=True, noise=0.1)
    tr, te = T[:1000], T[1000:]
    m = RCA(preprocessing=None).fit(X, triplets=tr)
    assert m.shrinkage_ < 1.0 and m.shrinkage_scores_.shape == (2, m.shrinkage_grid_.size)
    euclid = RCA(shrinkage=1.0, preprocessing=None).fit(X, triplets=tr)
    assert triplet_accuracy(m, X, te) > triplet_accuracy(euclid, X, te) + 0.05
    # whatever the answers, the choice scores at least the identity's on
    # both held-out protocols (random answers, uninformative extra columns)
    rng = np.random.default_rng(5)
    noise = np.array([rng.choice(len(X), 3, replace=False) for _ in range(1500)])
    for Xs, Ts in ((X, noise), _answers(seed=5, informative=False, noise=0.3)):
        f = RCA(preprocessing=None).fit(Xs, triplets=Ts)
        chosen = int(np.flatnonzero(f.shrinkage_grid_ == f.shrinkage_)[0])
        assert (f.shrinkage_scores_[:, chosen] >= f.shrinkage_scores_[:, -1]).all()


def test_labels_keep_the_papers_rca():
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(60, 5)), np.repeat(np.arange(3), 20)
    m = RCA().fit(X, y)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")
    np.testing.assert_array_equal(m.M_, RCA(shrinkage=0.0).fit(X, y).M_)


def test_choice_is_scale_free_and_saved(tmp_path):
    X, T = _answers(seed=7, noise=0.1)
    a = RCA(preprocessing=None).fit(X, triplets=T)
    b = RCA(preprocessing=None).fit(X * 1e3, triplets=T)
    assert a.shrinkage_ == b.shrinkage_
    np.testing.assert_allclose(a.shrinkage_scores_, b.shrinkage_scores_)
    np.testing.assert_allclose(a.transform(X), b.transform(X * 1e3), rtol=1e-6,
                               atol=1e-8 * np.abs(a.transform(X)).max())
    a.save(tmp_path / "rca.npz")
    back = load_model(tmp_path / "rca.npz")
    assert back.shrinkage_ == a.shrinkage_
    np.testing.assert_array_equal(back.shrinkage_scores_, a.shrinkage_scores_)
    np.testing.assert_allclose(back.pair_distance(X[:5], X[5:10]),
                               a.pair_distance(X[:5], X[5:10]))


def test_too_few_answers_keep_the_paper_and_pairs_choose_too():
    X, T = _answers(seed=8, m=12)
    assert RCA(preprocessing=None).fit(X, triplets=T).shrinkage_ == 0.0
    X, T = _answers(seed=9, m=2000, noise=0.1)
    P = np.vstack([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.r_[np.ones(len(T)), -np.ones(len(T))]
    m = RCA(preprocessing=None, preprocessor=X).fit(P, y)
    assert m.shrinkage_scores_.shape == (2, 7) and 0.0 <= m.shrinkage_ <= 1.0


def test_item_folds():
    rng = np.random.default_rng(10)
    T = rng.integers(0, 30, size=(400, 3))
    held = []
    for rule in ("head", "all", "any"):
        folds = item_folds(T, 3, val=rule)
        for h in folds:
            assert not np.isin(T[h.fit], h.items).any()
            inside = np.isin(T[h.val], h.items)
            assert {"head": inside[:, 0], "all": inside.all(1), "any": inside.any(1)}[rule].all()
            if rule == "all":
                held.append(h.items)
    np.testing.assert_array_equal(np.sort(np.concatenate(held)), np.unique(T))
    perm = rng.permutation(len(T))           # the order of the answers does not matter
    assert [list(h.items) for h in item_folds(T[perm], 3)] == \
        [list(h.items) for h in item_folds(T, 3)]
    with pytest.raises(ValueError, match="item_folds: val='some'"):
        item_folds(T, 3, val="some")
    with pytest.raises(ValueError, match="item_folds: n_folds=1"):
        item_folds(T, 1)
    with pytest.raises(ValueError, match="item_folds: answers must be"):
        item_folds(T.astype(float), 3)


def test_span_basis_of_rows_and_scatter_agree():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(8, 20))
    _, T, _ = _centered_scatters(X, np.full(8, -1), 0)
    ev_r, U_r = span_basis_of(X)
    ev_t, U_t = span_basis_of(None, T)
    assert U_r.shape == U_t.shape == (20, 7)
    np.testing.assert_allclose(U_r @ U_r.T, U_t @ U_t.T, atol=1e-8)
    np.testing.assert_allclose(np.sort(ev_r), np.sort(ev_t), rtol=1e-8)
