"""C="auto" of OASIS and the PA baselines (tripletml.core.step_cap, issue 38):
labels keep the class default, answers choose the cap on held-out items, and
each held-out score equals a fresh fit of the estimator at that cap."""
import copy

import numpy as np
import pytest

import tripletml as tm
from tripletml.core import step_cap
from tripletml.metrics import triplet_accuracy
from _triplet_draws import hidden_answers, spy_on_split

LEARNERS = [(tm.OASIS, 0.01), (tm.IterativePA, 0.001), (tm.NaivePA, 0.001)]


def _answers(seed=0, n=30, d=50, m=3000, noise=0.25):
    """Fewer rows than features (the span route) and noisy answers from a
    hidden 3-D configuration."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 3))
    X = Z @ rng.normal(size=(3, d)) + 0.5 * rng.normal(size=(n, d))
    return X, hidden_answers(rng, Z, m, noise)


@pytest.mark.parametrize("cls,default", LEARNERS)
def test_labels_keep_the_class_default(cls, default):
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(40, 6)), np.repeat(np.arange(4), 10)
    m = cls(random_state=0).fit(X, y)
    assert m.C == "auto" and m.C_ == default and not hasattr(m, "C_scores_")
    ref = cls(C=default, random_state=0).fit(X, y)
    np.testing.assert_array_equal(m.similarity(X), ref.similarity(X))


@pytest.mark.parametrize("cls,default", LEARNERS)
def test_heldout_scores_are_fresh_fits_at_each_cap(cls, default, monkeypatch):
    """Every probe equals a fresh fit, with the same random_state, on the
    answers among the kept items (a probe that started from the previous
    probe's factors, as the span route once let it, fails this), the chosen
    cap is the best score's, and the final fit is the fit at that cap."""
    X, T = _answers()
    seen = spy_on_split(monkeypatch, step_cap)
    m = cls(random_state=0).fit(X, triplets=T)
    hold = seen["hold"]
    np.testing.assert_allclose(m.C_grid_, default * np.array([1, 1e-1, 1e-2, 1e-3, 1e-4]))
    for c, score in zip(m.C_grid_, m.C_scores_):
        probe = cls(C=float(c), random_state=0).fit(X, triplets=T[hold.fit])
        assert triplet_accuracy(probe, X, T[hold.val]) == pytest.approx(score, abs=1e-12)
    best = m.C_scores_.max()
    se = np.sqrt(best * (1 - best) / hold.val.size)
    assert m.C_ == m.C_grid_[np.flatnonzero(m.C_scores_ >= best - se)[-1]]
    fixed = cls(C=m.C_, random_state=0).fit(X, triplets=T)
    np.testing.assert_array_equal(fixed.similarity(X), m.similarity(X))


@pytest.mark.parametrize("cls,default", LEARNERS)
def test_auto_beats_the_label_cap_on_noisy_answers_and_is_scale_free(cls, default):
    X, T = _answers(seed=2, m=4000, noise=0.3)
    Xt, Tt = X, _answers(seed=2, m=6000, noise=0.0)[1][4000:]
    auto = cls(random_state=0).fit(X, triplets=T)
    assert auto.C_ < default
    label_cap = cls(C=default, random_state=0).fit(X, triplets=T)
    assert triplet_accuracy(auto, Xt, Tt) >= triplet_accuracy(label_cap, Xt, Tt)
    big = cls(random_state=0).fit(X * 1e3, triplets=T)
    assert big.C_ == auto.C_
    np.testing.assert_allclose(big.C_scores_, auto.C_scores_)


def test_partial_fit_and_a_later_fit_on_labels_use_the_default():
    X, T = _answers(seed=3, m=1500)
    m = tm.OASIS(random_state=0).fit(X, triplets=T)
    assert m.C_ < 0.01
    y = np.repeat(np.arange(3), 10)
    m.fit(X, y)
    assert m.C_ == 0.01 and not hasattr(m, "C_scores_")
    p = tm.OASIS(random_state=0).partial_fit(X, triplets=T[:200])
    q = tm.OASIS(C=0.01, random_state=0).partial_fit(X, triplets=T[:200])
    np.testing.assert_array_equal(p.W_, q.W_)


def test_partial_fit_continues_at_the_chosen_cap_unless_C_is_set():
    X, T = _answers(seed=3, m=1500)
    m = tm.OASIS(random_state=0).fit(X, triplets=T)
    W0, cap = m.W_.copy(), m.C_
    assert cap < 0.01
    same = tm.OASIS(C=cap, random_state=0).fit(X, triplets=T)      # the auto fit's model
    np.testing.assert_allclose(same.W_, W0)
    m.partial_fit(X, triplets=T[:300])
    same.partial_fit(X, triplets=T[:300])
    np.testing.assert_allclose(m.W_, same.W_)
    m.set_params(C=0.5).partial_fit(X, triplets=T[300:600])
    big = copy.deepcopy(same).set_params(C=0.5).partial_fit(X, triplets=T[300:600])
    np.testing.assert_allclose(m.W_, big.W_)
    assert not np.allclose(m.W_, same.partial_fit(X, triplets=T[300:600]).W_)


def test_one_standard_error_rule():
    from tripletml.core.step_cap import one_standard_error
    # se at .8 over 100 answers: .04
    assert one_standard_error(np.array([.80, .77, .70]), 100) == 1
    assert one_standard_error(np.array([.80, .75, .70]), 100) == 0
    assert one_standard_error(np.array([.70, .80, .79]), 10000) == 1
    assert one_standard_error(np.array([.5, .5, .5]), 50) == 2       # ties: the smallest


def test_saved_and_loaded(tmp_path):
    X, T = _answers(seed=4, m=1500)
    m = tm.IterativePA(random_state=0).fit(X, triplets=T)
    m.save(tmp_path / "pa.npz")
    back = tm.load_model(tmp_path / "pa.npz")
    assert back.C_ == m.C_
    np.testing.assert_array_equal(back.C_scores_, m.C_scores_)
    np.testing.assert_allclose(back.similarity(X[:5]), m.similarity(X[:5]))


def test_too_few_answers_keep_the_default_and_bad_values_are_named():
    X, T = _answers(seed=5, m=30)
    m = tm.NaivePA(random_state=0).fit(X, triplets=T)
    assert m.C_ == 0.001 and not hasattr(m, "C_scores_")
    for bad in ("big", 0.0, -1.0):
        with pytest.raises(ValueError, match="OASIS.*C"):
            tm.OASIS(C=bad).fit(X, triplets=T)


@pytest.mark.parametrize("cls,default", LEARNERS)
def test_auto_on_mixed_columns_is_the_same_at_any_unit(cls, default):
    """Binary, count and continuous columns of three scales and a duplicated
    one, at the defaults: X * 1e-3 and X * 1e3 give the same held-out scores,
    the same cap and the same rankings as X."""
    import warnings
    from test_early_stopping import _mixed_answers
    X, t = _mixed_answers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = cls(random_state=0).fit(X, triplets=t)
        assert a.C_scores_.shape == (5,) and a.C_ in a.C_grid_
        rank = np.argsort(a.similarity(X[:10], X), axis=1)
        for c in (1e-3, 1e3):
            b = cls(random_state=0).fit(c * X, triplets=t)
            assert b.C_ == a.C_
            np.testing.assert_allclose(b.C_scores_, a.C_scores_)
            np.testing.assert_array_equal(np.argsort(b.similarity(c * X[:10], c * X), axis=1),
                                          rank)
