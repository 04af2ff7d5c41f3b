"""SCML's blend with the identity and its held-out choice on answers.

``M_ = (1 - s) M_w / S_w + s I / S_I``: ``M_w = sum_b w_b u_b u_b^T`` the
paper's combination (eq. 4), ``S_w`` and ``S_I`` the fit answers' pairs
``(q, p+)`` and ``(q, p-)`` squared distances summed under ``M_w`` and under
the identity.  The references are written from that formula and from the
two held-out protocols (new items, new answers) with every fold's weights
refitted through the public ``fit``; ``M_w`` itself is checked against the
paper in tests/test_scml.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from tripletml import SCML, load_model
from tripletml.engine.early_stopping import choose_toward_last, two_protocol_splits
from tripletml.metrics import triplet_accuracy

from _crowd_answers import labels_keep_zero_shrinkage, noisy_answers


def _answers(seed=0, n=30, d=12, m=900, noise=0.2):
    """:func:`_crowd_answers.noisy_answers`: a hidden 3-D configuration in
    the first columns, a share ``noise`` of the answers flipped."""
    return noisy_answers(seed, n, d, m, noise)


def _sq(X, M, i, j):
    D = X[i] - X[j]
    return np.einsum("ij,jk,ik->i", D, M, D)


def _scales(X, Mw, T):
    s_w = sum(np.sum(_sq(X, Mw, T[:, 0], T[:, j])) for j in (1, 2))
    s_i = sum(np.sum(_sq(X, np.eye(X.shape[1]), T[:, 0], T[:, j])) for j in (1, 2))
    return s_w, s_i


def _paper(X, T, seed=0):
    """``M_w`` of the paper's problem (no blend), dense, and the rows it acts
    on (``preprocessing=None`` keeps the feature unit's scaling)."""
    m = SCML(preprocessing=None, shrinkage=0.0, random_state=seed).fit(X, triplets=T)
    return (m.basis_.T * m.weights_) @ m.basis_, m, m.scaler_.transform(X)


@pytest.mark.parametrize("s", [0.0, 0.3, 1.0])
def test_fixed_shrinkage_is_the_blend_of_the_papers_metric_and_the_identity(s):
    X, T = _answers(seed=1)
    Mw, ref, Xp = _paper(X, T)
    m = SCML(preprocessing=None, shrinkage=s, random_state=0).fit(X, triplets=T)
    np.testing.assert_array_equal(m.weights_, ref.weights_)     # the same weights
    if s == 0.0:
        np.testing.assert_array_equal(m.M_, ref.M_)
        assert m.metric_weight_ == 1.0 and m.identity_weight_ == 0.0
    else:
        s_w, s_i = _scales(Xp, Mw, T)
        want = (1 - s) * Mw / s_w + s * np.eye(len(Mw)) / s_i
        np.testing.assert_allclose(m.M_, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
        assert m.rank_ == X.shape[1]
    L = m.components_               # eigen-directions of M_, largest first
    np.testing.assert_allclose(L.T @ L, m.M_, atol=1e-10 * np.abs(m.M_).max())
    norms = np.sum(L ** 2, axis=1)
    assert np.all(np.diff(norms) <= 1e-10 * norms.max())
    assert m.shrinkage_ == s and not hasattr(m, "shrinkage_scores_")


def _brute_scores(X, T, grid, seeds):
    """The two protocols' mean held-out triplet accuracy of each blend, every
    fold's weights refitted by ``fit`` with the fold's seed."""
    out = np.zeros((2, len(grid)))
    for r, folds in enumerate(two_protocol_splits(T, 3)):
        for f, h in enumerate(folds):
            fit, val = T[h.fit], T[h.val]
            Mw, _, Xp = _paper(X, fit, int(seeds[r][f]))
            s_w, s_i = _scales(Xp, Mw, fit)
            for g, s in enumerate(grid):
                M = (1 - s) * Mw / s_w + s * np.eye(X.shape[1]) / s_i
                dp, dn = _sq(Xp, M, val[:, 0], val[:, 1]), _sq(Xp, M, val[:, 0], val[:, 2])
                tie = np.abs(dn - dp) <= 1e-9 * (np.abs(dp) + np.abs(dn))
                out[r, g] += (np.mean((dp < dn) & ~tie) + 0.5 * np.mean(tie)) / len(folds)
    return out


def test_auto_scores_each_blend_on_both_protocols_and_never_falls_below_the_identity(
        monkeypatch):
    X, T = _answers(seed=2, noise=0.25)
    seeds = [[], []]
    real = SCML._fold_scores

    def spy(self, X_, Z, answers, h, grid, seed):
        r = 0 if h.items.size else 1               # item folds name their held-out items
        seeds[r].append(seed)
        return real(self, X_, Z, answers, h, grid, seed)

    monkeypatch.setattr(SCML, "_fold_scores", spy)
    m = SCML(preprocessing=None, random_state=0).fit(X, triplets=T)
    grid = m.shrinkage_grid_
    assert grid[0] == 0.0 and grid[-1] == 1.0 and np.all(np.diff(grid) > 0)
    assert [len(s) for s in seeds] == [3, 3]
    np.testing.assert_allclose(m.shrinkage_scores_, _brute_scores(X, T, grid, seeds),
                               atol=1e-9)
    assert m.shrinkage_ == choose_toward_last(grid, m.shrinkage_scores_)
    chosen = int(np.flatnonzero(grid == m.shrinkage_)[0])
    assert (m.shrinkage_scores_[:, chosen] >= m.shrinkage_scores_[:, -1]).all()
    ref = SCML(preprocessing=None, shrinkage=m.shrinkage_, random_state=0).fit(X, triplets=T)
    np.testing.assert_allclose(m.M_, ref.M_, rtol=1e-12, atol=1e-15)


def test_auto_on_noisy_answers_stays_near_the_identity():
    """Answers about a configuration the rows carry in 3 of 30 columns,
    30 % of them flipped: the paper's metric ranks new answers worse than
    the features' own distance (.544 against .578); the choice does not."""
    X, T = _answers(seed=3, d=30, m=1500, noise=0.3)
    tr, te = T[:1000], T[1000:]
    auto = SCML(preprocessing=None, random_state=0).fit(X, triplets=tr)
    euclid = SCML(preprocessing=None, shrinkage=1.0, random_state=0).fit(X, triplets=tr)
    paper = SCML(preprocessing=None, shrinkage=0.0, random_state=0).fit(X, triplets=tr)
    acc = {k: triplet_accuracy(m, X, te) for k, m in
           (("auto", auto), ("euclid", euclid), ("paper", paper))}
    assert acc["paper"] < acc["euclid"] - 0.02 <= acc["auto"]
    assert auto.shrinkage_ > 0.0


def test_labels_keep_the_papers_metric():
    X, y = labels_keep_zero_shrinkage(SCML)
    blended = SCML(random_state=0, shrinkage=0.5).fit(X, y)   # an explicit blend: labels too
    assert blended.identity_weight_ > 0 and blended.rank_ == 5


def test_refits_leave_no_state_of_an_earlier_choice():
    X, T = _answers(seed=6)
    y = np.arange(len(X)) % 3
    m = SCML(preprocessing=None, random_state=0).fit(X, triplets=T)
    assert hasattr(m, "shrinkage_scores_")
    m.set_params(shrinkage=0.2).fit(X, triplets=T)
    assert m.shrinkage_ == 0.2 and not hasattr(m, "shrinkage_grid_")
    m.set_params(shrinkage="auto").fit(X, y)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")
    assert m.metric_weight_ == 1.0 and m.identity_weight_ == 0.0


def test_loading_refuses_an_inconsistent_blend(tmp_path):
    X, T = _answers(seed=7)
    m = SCML(preprocessing=None, shrinkage=0.5, random_state=0).fit(X, triplets=T)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.M_, m.M_)
    assert (back.metric_weight_, back.identity_weight_) == (m.metric_weight_,
                                                            m.identity_weight_)
    for name, value in (("identity_weight_", 2 * m.identity_weight_),
                        ("metric_weight_", -1.0), ("shrinkage_", 1.5)):
        bad = SCML(preprocessing=None, shrinkage=0.5, random_state=0).fit(X, triplets=T)
        setattr(bad, name, value)
        bad.save(tmp_path / f"bad{name}.npz")
        with pytest.raises(ValueError, match=name if name != "identity_weight_" else "M_"):
            load_model(tmp_path / f"bad{name}.npz")
    auto = SCML(preprocessing=None, random_state=0).fit(X, triplets=T)
    auto.shrinkage_scores_ = auto.shrinkage_scores_[:, :3]
    auto.save(tmp_path / "bad_scores.npz")
    with pytest.raises(ValueError, match="shrinkage_grid_"):
        load_model(tmp_path / "bad_scores.npz")


def test_too_few_answers_keep_the_paper():
    X, T = _answers(seed=5, m=12)
    m = SCML(preprocessing=None, random_state=0).fit(X, triplets=T)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")


def test_choice_is_scale_free_on_network_features():
    """Non-negative features (``preprocessing="auto"`` normalizes them):
    the same choice, scores and rankings at any scale of the rows."""
    X, T = _answers(seed=8, n=25, d=40)
    X = np.maximum(X, 0.0)
    a = SCML(random_state=0).fit(X, triplets=T)
    b = SCML(random_state=0).fit(X * 1e-3, triplets=T)
    assert a.shrinkage_ == b.shrinkage_
    np.testing.assert_allclose(a.shrinkage_scores_, b.shrinkage_scores_)
    Xn = np.abs(np.random.default_rng(9).normal(size=(6, 40)))
    np.testing.assert_allclose(b.pair_distance(Xn[:3] * 1e-3, Xn[3:] * 1e-3),
                               a.pair_distance(Xn[:3], Xn[3:]), rtol=1e-6)


def test_answer_distances_are_computed_in_bounded_blocks(monkeypatch):
    """The blend's distances in blocks (here of 7 answers) equal one pass."""
    import tripletml.algorithms.scml.estimator as E
    X, T = _answers(seed=10, m=300)
    want = E._sqdist(X, T[:, 0], T[:, 1])
    monkeypatch.setattr(E, "_BLOCK_ENTRIES", 7 * X.shape[1])
    np.testing.assert_array_equal(E._sqdist(X, T[:, 0], T[:, 1]), want)
    a = SCML(preprocessing=None, shrinkage=0.5, random_state=0).fit(X, triplets=T)
    monkeypatch.setattr(E, "_BLOCK_ENTRIES", 1 << 22)
    b = SCML(preprocessing=None, shrinkage=0.5, random_state=0).fit(X, triplets=T)
    np.testing.assert_array_equal(a.M_, b.M_)


@pytest.mark.parametrize("kind", ["binary", "counts", "duplicated feature", "x 1e-3"])
def test_auto_on_other_column_kinds_never_falls_below_the_identity(kind):
    """Binary and count columns, a duplicated feature and tiny values: the
    choice is made, the model is finite and PSD, and the chosen blend scores
    at least the identity on both held-out protocols; rows x 1e-3 give the
    same choice and rankings."""
    X0, T = _answers(seed=9, noise=0.3)
    X = {"binary": lambda: (X0 > 0).astype(float),
         "counts": lambda: np.floor(np.exp(X0)),
         "duplicated feature": lambda: np.hstack([X0, X0[:, :1]]),
         "x 1e-3": lambda: X0 * 1e-3}[kind]()
    m = SCML(random_state=0).fit(X, triplets=T)
    assert np.isfinite(m.M_).all()
    assert np.linalg.eigvalsh(m.M_).min() >= -1e-10 * np.abs(m.M_).max()
    assert hasattr(m, "shrinkage_scores_")
    chosen = int(np.flatnonzero(m.shrinkage_grid_ == m.shrinkage_)[0])
    assert (m.shrinkage_scores_[:, chosen] >= m.shrinkage_scores_[:, -1]).all()
    if kind == "x 1e-3":
        ref = SCML(random_state=0).fit(X0, triplets=T)
        assert m.shrinkage_ == ref.shrinkage_
        d, d0 = m.pair_distance(X[:10], X[10:20]), ref.pair_distance(X0[:10], X0[10:20])
        np.testing.assert_allclose(d, d0, rtol=1e-6)
