"""MMC's shrinkage towards the identity and its held-out choice on answers.

``M_ = (1 - s) A / S_A + s I / S_I``: ``A`` Xing et al.'s optimum, ``S_A``
and ``S_I`` the similar pairs' squared-distance sums under ``A`` and under the
identity.  The references below are written from that formula and from the
two held-out protocols (new items, new answers), on top of the paper's
optimum (``shrinkage=0``, checked against the paper's problem in
tests/test_mmc.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from tripletml import MMC, load_model
from tripletml.engine.early_stopping import choose_toward_last, two_protocol_splits
from tripletml.metrics import triplet_accuracy

from _crowd_answers import labels_keep_zero_shrinkage, noisy_answers


def _answers(seed=0, n=30, d=12, m=1500, noise=0.2):
    """:func:`_crowd_answers.noisy_answers`: a hidden 3-D configuration in
    the first columns, a share ``noise`` of the answers flipped."""
    return noisy_answers(seed, n, d, m, noise)


def _sims(X, T):
    """Similar pairs' differences (q, p+) of the triplets, one per answer."""
    return X[T[:, 0]] - X[T[:, 1]]


def _blend_ref(A, X, T, s):
    Ds = _sims(X, T)
    s_a = np.sum((Ds @ A) * Ds)
    s_i = np.sum(Ds * Ds)
    return (1 - s) * A / s_a + s * np.eye(len(A)) / s_i


@pytest.mark.parametrize("s", [0.0, 0.3, 1.0])
def test_fixed_shrinkage_is_the_blend_of_the_optimum_and_the_identity(s):
    X, T = _answers(seed=1)
    A = MMC(preprocessing=None, shrinkage=0.0).fit(X, triplets=T).M_
    m = MMC(preprocessing=None, shrinkage=s).fit(X, triplets=T)
    Xp = m.scaler_.transform(X)         # the rows M_ acts on (the feature unit)
    if s == 0.0:
        np.testing.assert_array_equal(m.M_, A)
    else:
        np.testing.assert_allclose(m.M_, _blend_ref(A, Xp, T, s), rtol=1e-10,
                                   atol=1e-14 * np.abs(m.M_).max())
        # a feasible point of eq. 3-5: the similar pairs' budget is spent
        Ds = _sims(Xp, T)
        assert np.sum((Ds @ m.M_) * Ds) == pytest.approx(1.0, rel=1e-10)
        assert m.rank_ == X.shape[1]
    # components_: eigen-directions, largest first, of M_
    L = m.components_
    np.testing.assert_allclose(L.T @ L, m.M_, atol=1e-12 * np.abs(m.M_).max())
    norms = np.sum(L ** 2, axis=1)
    assert np.all(np.diff(norms) <= 1e-12 * norms.max())
    assert m.shrinkage_ == s and not hasattr(m, "shrinkage_scores_")


def _brute_scores(X, T, grid):
    """The two protocols' mean held-out triplet accuracy of each blend,
    every fold's optimum refitted from scratch."""
    out = np.zeros((2, len(grid)))
    splits = two_protocol_splits(T, 3)
    for r, folds in enumerate(splits):
        for h in folds:
            fit, val = T[h.fit], T[h.val]
            A = MMC(preprocessing=None, shrinkage=0.0).fit(X, triplets=fit).M_
            for g, s in enumerate(grid):
                M = _blend_ref(A, X, fit, s)
                dp = np.einsum("ij,jk,ik->i", X[val[:, 0]] - X[val[:, 1]], M,
                               X[val[:, 0]] - X[val[:, 1]])
                dn = np.einsum("ij,jk,ik->i", X[val[:, 0]] - X[val[:, 2]], M,
                               X[val[:, 0]] - X[val[:, 2]])
                out[r, g] += np.mean((dp < dn) + 0.5 * (dp == dn)) / len(folds)
    return out


def test_auto_scores_each_blend_on_both_protocols_and_never_falls_below_the_identity():
    X, T = _answers(seed=2, noise=0.25)
    m = MMC(preprocessing=None).fit(X, triplets=T)
    grid = m.shrinkage_grid_
    assert grid[0] == 0.0 and grid[-1] == 1.0 and np.all(np.diff(grid) > 0)
    np.testing.assert_allclose(m.shrinkage_scores_, _brute_scores(X, T, grid), atol=1e-9)
    assert m.shrinkage_ == choose_toward_last(grid, m.shrinkage_scores_)
    chosen = int(np.flatnonzero(grid == m.shrinkage_)[0])
    assert (m.shrinkage_scores_[:, chosen] >= m.shrinkage_scores_[:, -1]).all()
    ref = MMC(preprocessing=None, shrinkage=m.shrinkage_).fit(X, triplets=T)
    np.testing.assert_allclose(m.M_, ref.M_, rtol=1e-12, atol=1e-15)


def test_auto_on_noisy_answers_keeps_the_features_where_the_optimum_follows_the_noise():
    """Answers about a configuration the rows carry in every column, half
    of them flipped: the optimum (low rank) ranks new answers worse than the
    identity; the choice does not."""
    X, T = _answers(seed=3, d=8, noise=0.45)
    tr, te = T[:1000], T[1000:]
    auto = MMC(preprocessing=None).fit(X, triplets=tr)
    euclid = MMC(preprocessing=None, shrinkage=1.0).fit(X, triplets=tr)
    assert triplet_accuracy(auto, X, te) >= triplet_accuracy(euclid, X, te) - 0.02
    assert auto.shrinkage_ > 0.0


def test_labels_keep_the_papers_optimum():
    labels_keep_zero_shrinkage(MMC)


def test_pairs_are_scored_by_the_auc():
    """Pairs: each blend's held-out ROC AUC of the negated distances (the
    similar pairs the positives), every fold refitted from its own pairs."""
    from sklearn.metrics import roc_auc_score

    X, T = _answers(seed=4, m=600)
    pairs = np.concatenate([T[:, [0, 1]], T[:, [0, 2]]])
    y = np.repeat([1, -1], len(T))
    m = MMC(preprocessing=None).fit(X, pairs=pairs, y=y)
    grid = m.shrinkage_grid_
    similar = y > 0
    want, ties = np.zeros((2, len(grid))), np.zeros((2, 1))
    splits = two_protocol_splits(pairs, 3, similar)
    for r, folds in enumerate(splits):
        for h in folds:
            ties[r] += _tied_share(pairs[h.val], similar[h.val]) / len(folds)
            fit = pairs[h.fit]
            A = MMC(preprocessing=None, shrinkage=0.0).fit(X, pairs=fit, y=y[h.fit]).M_
            Ds = X[fit[similar[h.fit], 0]] - X[fit[similar[h.fit], 1]]
            s_a, s_i = np.sum((Ds @ A) * Ds), np.sum(Ds * Ds)
            D = X[pairs[h.val, 0]] - X[pairs[h.val, 1]]
            da, di = np.sum((D @ A) * D, axis=1) / s_a, np.sum(D * D, axis=1) / s_i
            for g, w in enumerate(grid):
                want[r, g] += roc_auc_score(similar[h.val], -((1 - w) * da + w * di)) / len(folds)
    # the same pair of items held out as similar and as dissimilar (answers
    # about 30 items disagree) is an exact tie, counted 1/2; a GEMM may round
    # equal rows differently by their position in the block (OpenBLAS's
    # kernels differ by CPU), breaking such ties either way: at most their
    # share of the held-out (similar, dissimilar) pairs
    assert np.all(np.abs(m.shrinkage_scores_ - want) <= 0.5 * ties + 1e-9)
    assert m.shrinkage_ == choose_toward_last(grid, m.shrinkage_scores_)


def _tied_share(pairs: np.ndarray, similar: np.ndarray) -> float:
    """The share of (similar, dissimilar) pairs of ``pairs`` naming the same
    two items: the ties of the held-out ROC AUC, whatever the metric."""
    key = np.sort(pairs, axis=1) @ np.array([pairs.max() + 1, 1])
    keys, inv = np.unique(key, return_inverse=True)
    n_sim = np.bincount(inv, weights=similar, minlength=keys.size)
    n_dis = np.bincount(inv, weights=~similar, minlength=keys.size)
    return float(n_sim @ n_dis) / (similar.sum() * (~similar).sum())


def test_refits_leave_no_state_of_an_earlier_choice():
    X, T = _answers(seed=6)
    y = np.arange(len(X)) % 3
    m = MMC(preprocessing=None).fit(X, triplets=T)
    assert hasattr(m, "shrinkage_scores_")
    m.set_params(shrinkage=0.2).fit(X, triplets=T)
    assert m.shrinkage_ == 0.2 and not hasattr(m, "shrinkage_grid_")
    m.set_params(shrinkage="auto").fit(X, y)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")
    d = MMC(preprocessing=None, diagonal=True, shrinkage=0.5).fit(X, triplets=T)
    assert np.count_nonzero(d.M_ - np.diag(np.diag(d.M_))) == 0 and d.rank_ == X.shape[1]
    np.testing.assert_allclose(d.components_.T @ d.components_, d.M_, atol=1e-12)


def test_loading_refuses_an_inconsistent_choice(tmp_path):
    X, T = _answers(seed=7)
    MMC(preprocessing=None).fit(X, triplets=T).save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for name, value in (("shrinkage_scores_", arrays["shrinkage_scores_"][:, :3]),):
        bad = dict(arrays, **{name: value})
        np.savez(tmp_path / "bad.npz", **bad)
        with pytest.raises(ValueError):
            load_model(tmp_path / "bad.npz")


def test_too_few_answers_keep_the_paper():
    X, T = _answers(seed=5, m=12)
    m = MMC(preprocessing=None).fit(X, triplets=T)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")


def test_choice_is_scale_free_and_saved(tmp_path):
    X, T = _answers(seed=7)
    a = MMC(preprocessing=None).fit(X, triplets=T)
    b = MMC(preprocessing=None).fit(X * 1e3, triplets=T)
    assert a.shrinkage_ == b.shrinkage_
    np.testing.assert_allclose(a.shrinkage_scores_, b.shrinkage_scores_)
    d_a, d_b = a.pair_distance(X[:10], X[10:20]), b.pair_distance(X[:10] * 1e3, X[10:20] * 1e3)
    np.testing.assert_allclose(d_b, d_a, rtol=1e-6)
    a.save(tmp_path / "mmc.npz")
    back = load_model(tmp_path / "mmc.npz")
    assert back.shrinkage_ == a.shrinkage_
    np.testing.assert_array_equal(back.shrinkage_scores_, a.shrinkage_scores_)
    np.testing.assert_array_equal(back.M_, a.M_)


def test_span_route_with_the_identity_part_is_the_plain_model():
    """Fewer rows than features: the blend's identity part also weighs the
    complement of the rows' span (new items off the span)."""
    X, T = _answers(seed=8, n=20, d=40)
    plain = MMC(preprocessing=None, shrinkage=0.5)
    plain._span_route = False
    plain.fit(X, triplets=T)
    span = MMC(preprocessing=None, shrinkage=0.5).fit(X, triplets=T)
    np.testing.assert_allclose(span.M_, plain.M_, atol=1e-9 * np.abs(plain.M_).max())
    assert span.rank_ == plain.rank_ == 40
    np.testing.assert_allclose(span.components_.T @ span.components_, plain.M_,
                               atol=1e-9 * np.abs(plain.M_).max())
    norms = np.sum(span.components_ ** 2, axis=1)       # eigen-directions, largest first
    assert np.all(np.diff(norms) <= 1e-9 * norms.max())
    np.testing.assert_allclose(norms, np.sum(plain.components_ ** 2, axis=1),
                               atol=1e-9 * norms.max())
    Xn = np.random.default_rng(9).normal(size=(5, 40))
    np.testing.assert_allclose(span.pair_distance(Xn, Xn[::-1]),
                               plain.pair_distance(Xn, Xn[::-1]), rtol=1e-7)


@pytest.mark.parametrize("kind", ["binary", "counts", "duplicated feature", "x 1e-3"])
def test_auto_on_other_column_kinds_never_falls_below_the_identity(kind):
    """Binary and count columns, a duplicated feature and tiny values: the
    choice is made (or the paper kept), the model is finite and PSD, and the
    chosen blend scores at least the identity on both held-out protocols."""
    X, T = _answers(seed=9, noise=0.3)
    X = {"binary": lambda: (X > 0).astype(float),
         "counts": lambda: np.floor(np.exp(X)),
         "duplicated feature": lambda: np.hstack([X, X[:, :1]]),
         "x 1e-3": lambda: X * 1e-3}[kind]()
    m = MMC().fit(X, triplets=T)
    assert np.isfinite(m.M_).all() and np.linalg.eigvalsh(m.M_).min() >= -1e-10 * np.abs(m.M_).max()
    assert hasattr(m, "shrinkage_scores_")
    chosen = int(np.flatnonzero(m.shrinkage_grid_ == m.shrinkage_)[0])
    assert (m.shrinkage_scores_[:, chosen] >= m.shrinkage_scores_[:, -1]).all()
    if kind == "x 1e-3":        # the same choice and rankings as on X
        ref = MMC().fit(X * 1e3, triplets=T)
        assert ref.shrinkage_ == m.shrinkage_
        np.testing.assert_allclose(m.pair_distance(X[:10], X[10:20]),
                                   ref.pair_distance(X[:10] * 1e3, X[10:20] * 1e3), rtol=1e-6)

