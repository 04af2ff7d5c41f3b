"""SOE and t-STE (tripletml.embedding): the papers' objectives written plainly,
finite-difference gradients, recovery of a planted configuration, invariance
to relabelling the items, and bad input."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from tripletml.embedding import SOE, STE, TSTE
from tripletml.embedding._base import _Pairs

ESTIMATORS = [SOE, STE, TSTE]


# --------------------------------------------------------------------------- references
def soe_stress_plain(X, triplets, delta):
    """Terada & von Luxburg 2014, Eq. (1): sum max(0, d_ij + delta - d_ik)^2."""
    s = 0.0
    for i, j, k in triplets:
        dij = math.sqrt(sum((X[i, a] - X[j, a]) ** 2 for a in range(X.shape[1])))
        dik = math.sqrt(sum((X[i, a] - X[k, a]) ** 2 for a in range(X.shape[1])))
        s += max(0.0, dij + delta - dik) ** 2
    return s


def tste_objective_plain(X, triplets, alpha, lam):
    """van der Maaten & Weinberger 2012, Sec. 3.2: -sum log p_ijl + lam ||X||^2."""
    def kern(a, b):
        d2 = sum((X[a, c] - X[b, c]) ** 2 for c in range(X.shape[1]))
        return (1.0 + d2 / alpha) ** (-(alpha + 1.0) / 2.0)
    s = 0.0
    for i, j, l in triplets:
        kij, kil = kern(i, j), kern(i, l)
        s -= math.log(kij / (kij + kil))
    return s + lam * float((X ** 2).sum())


def ste_objective_plain(X, triplets, lam):
    """van der Maaten & Weinberger 2012, Sec. 3.1 (Gaussian kernel):
    -sum log p_ijl + lam ||X||^2 with p_ijl = K_ij / (K_ij + K_il), K = exp(-d^2)."""
    def kern(a, b):
        return math.exp(-sum((X[a, c] - X[b, c]) ** 2 for c in range(X.shape[1])))
    s = 0.0
    for i, j, l in triplets:
        kij, kil = kern(i, j), kern(i, l)
        s -= math.log(kij / (kij + kil))
    return s + lam * float((X ** 2).sum())


def _random_triplets(n, m, rng):
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    return t


def _planted(n=30, d=2, seed=0):
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(n, d))
    D = ((P[:, None] - P[None]) ** 2).sum(-1)
    t = np.array([(i, j, k) for i in range(n) for j, k in itertools.combinations(
        [x for x in range(n) if x != i], 2)])
    swap = D[t[:, 0], t[:, 1]] > D[t[:, 0], t[:, 2]]
    t[swap, 1], t[swap, 2] = t[swap, 2].copy(), t[swap, 1].copy()
    return P, t[rng.permutation(len(t))]


ROUTES = ["fused", "dense", "gather"]


def _compact(est, X, t, route):
    """The implementation's objective and gradient at X (all items used) on
    one route: the compiled pair kernel, NumPy per pair, NumPy per triplet."""
    est._check_params()
    est._fused = route == "fused"
    return est._loss_grad(X, _Pairs(t, X.shape[0], route != "gather"))


# --------------------------------------------------------------------------- objectives
@pytest.mark.parametrize("dense", ROUTES)
@pytest.mark.parametrize("margin", [0.1, 1.0, 3.0])
def test_soe_objective_matches_paper(dense, margin):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 3))
    t = _random_triplets(12, 200, rng)
    loss, _ = _compact(SOE(3, margin=margin), X, t, dense)
    ref = soe_stress_plain(X, t, margin)
    assert ref > 0
    assert abs(loss - ref) <= 1e-10 * ref


@pytest.mark.parametrize("dense", ROUTES)
@pytest.mark.parametrize("d, alpha, lam", [(2, None, 0.0), (3, 0.5, 0.1), (5, 7.0, 1e-3),
                                           (1, None, 0.0)])
def test_tste_objective_matches_paper(dense, d, alpha, lam):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(10, d))
    t = _random_triplets(10, 150, rng)
    est = TSTE(d, alpha=alpha, regularization=lam)
    loss, _ = _compact(est, X, t, dense)
    a = alpha if alpha is not None else max(d - 1, 1)
    ref = tste_objective_plain(X, t, a, lam)
    assert abs(loss - ref) <= 1e-10 * ref


@pytest.mark.parametrize("dense", ROUTES)
@pytest.mark.parametrize("d, lam", [(2, 0.0), (3, 0.1), (1, 1e-3)])
def test_ste_objective_matches_paper(dense, d, lam):
    rng = np.random.default_rng(5)
    X = 0.7 * rng.normal(size=(10, d))
    t = _random_triplets(10, 150, rng)
    loss, _ = _compact(STE(d, regularization=lam), X, t, dense)
    ref = ste_objective_plain(X, t, lam)
    assert abs(loss - ref) <= 1e-10 * ref


def _fd_grad(f, X, eps=1e-6):
    G = np.zeros_like(X)
    for idx in np.ndindex(X.shape):
        E = np.zeros_like(X)
        E[idx] = eps
        G[idx] = (f(X + E) - f(X - E)) / (2 * eps)
    return G


@pytest.mark.parametrize("dense", ROUTES)
@pytest.mark.parametrize("est", [SOE(3, margin=0.7), TSTE(3), TSTE(3, alpha=2.5,
                                                                    regularization=0.3),
                                 STE(3), STE(3, regularization=0.0)])
def test_gradient_finite_differences(est, dense):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(9, 3))
    t = _random_triplets(9, 120, rng)
    _, g = _compact(est, X, t, dense)
    fd = _fd_grad(lambda Y: _compact(est, Y, t, dense)[0], X)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    # the routes agree
    for other in ROUTES:
        l2, g2 = _compact(est, X, t, other)
        np.testing.assert_allclose(g, g2, rtol=1e-10, atol=1e-12)


def test_gradient_is_not_trivially_zero():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(9, 2))
    t = _random_triplets(9, 50, rng)
    for est in (SOE(2), STE(2), TSTE(2)):
        assert np.abs(_compact(est, X, t, "fused")[1]).max() > 1e-3


# --------------------------------------------------------------------------- recovery
@pytest.mark.parametrize("Est, kw", [(SOE, {}), (STE, {}), (TSTE, {"alpha": 10.0})])
def test_planted_configuration_recovered(Est, kw):
    P, t = _planted()
    half = len(t) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = Est(2, random_state=0, **kw).fit(t[:half])
    assert est.embedding_.shape == (30, 2) and est.n_items_ == 30
    assert est.score(t[half:]) > 0.98
    assert est.stop_reason_ in ("tol", "max_iter") and est.n_iter_ >= 1
    # a scrambled embedding scores badly: the score can fail
    bad = clone(est)
    bad.__dict__.update(est.__dict__)
    bad.embedding_ = est.embedding_[np.random.default_rng(0).permutation(30)]
    assert bad.score(t[half:]) < 0.8


def test_tste_default_alpha_trades_noiseless_accuracy_for_robustness():
    """At alpha = n_components - 1 = 1 the kernel ratio is scale-free far out,
    so the objective tolerates violating nearly tied triplets: even started
    from the planted truth its optimum agrees with about 93 % of the held-out
    noiseless triplets (a larger alpha approaches the Gaussian STE)."""
    P, t = _planted()
    half = len(t) // 2
    acc = TSTE(2, random_state=0).fit(t[:half]).score(t[half:])
    assert 0.88 < acc < 0.97


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_relabelling_items_permutes_the_embedding(Est):
    P, t = _planted(n=25, seed=5)
    train, test = t[:2000], t[2000:]
    perm = np.random.default_rng(1).permutation(25)       # new id of item i: perm[i]
    a = Est(2, random_state=0).fit(train)
    b = Est(2, random_state=0).fit(perm[train])
    pa, pb = a.predict(test), b.predict(perm[test])
    assert (pa == pb).mean() > 0.97
    # the relabeled embedding answers like the original one
    emb = b.embedding_[perm]
    d = lambda E, x, y: ((E[x] - E[y]) ** 2).sum(1)  # noqa: E731
    pred = np.where(d(emb, test[:, 0], test[:, 1]) < d(emb, test[:, 0], test[:, 2]), 1, -1)
    np.testing.assert_array_equal(pred, pb)


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_predict_and_score(Est):
    P, t = _planted(n=12, seed=2)
    est = Est(2, random_state=0).fit(t)
    p = est.predict(t)
    assert set(np.unique(p)) <= {-1, 1} and p.dtype == np.int8
    assert est.score(t) == pytest.approx((p == 1).mean())
    flipped = t[:, [0, 2, 1]]
    np.testing.assert_array_equal(est.predict(flipped), -p)     # no ties here
    assert not hasattr(est, "transform")


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_deterministic_given_seed_and_params_round_trip(Est):
    _, t = _planted(n=15, seed=3)
    a = Est(3, random_state=7).fit(t[:500])
    b = Est(3, random_state=7).fit(t[:500])
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    est = Est(4, n_items=20, max_iter=50, tol=1e-5, random_state=3, verbose=0)
    params = est.get_params()
    assert clone(est).get_params() == params
    est.set_params(**params)
    assert est.get_params() == params


# --------------------------------------------------------------------------- items, input
@pytest.mark.parametrize("Est", ESTIMATORS)
def test_unused_items_warned_and_kept_at_their_start(Est):
    _, t = _planted(n=10, seed=4)
    t = t[(t != 3).all(axis=1)]
    with pytest.warns(UserWarning, match=r"3 of 12 items appear in no triplet \(ids 3, 10, 11\)"):
        a = Est(2, n_items=12, random_state=0).fit(t)
    assert a.embedding_.shape == (12, 2)
    with pytest.warns(UserWarning, match="undetermined"):
        b = Est(2, n_items=12, random_state=0).fit(t[: len(t) // 2])
    # same seed, different triplets: the unused items have not moved from the start
    np.testing.assert_array_equal(a.embedding_[[3, 10, 11]], b.embedding_[[3, 10, 11]])
    assert not np.allclose(a.embedding_[0], b.embedding_[0])
    assert np.isfinite(a.embedding_).all()


@pytest.mark.parametrize("Est", ESTIMATORS)
@pytest.mark.parametrize("bad, match", [
    ([[0, -1, 2]], ">= 0"),
    ([[0, 1, 9]], "out of range for 5 items"),
    ([[0, 1, 1]], "repeats an item id"),
    ([[0, 1.5, 2]], "must be integers"),
    ([[0, 1]], r"shape \(m, 3\)"),
    (np.zeros((0, 3), int), "no rows"),
])
def test_bad_triplets(Est, bad, match):
    with pytest.raises(ValueError, match=f"{Est.__name__}: triplets.*{match}"):
        Est(n_items=5).fit(bad)


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_bad_params_and_predict_input(Est):
    t = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    for kw in ({"n_components": 0}, {"max_iter": 0}, {"tol": -1.0}, {"n_items": 0}):
        with pytest.raises(ValueError, match=f"{Est.__name__}: parameter"):
            Est(**kw).fit(t)
    with pytest.raises(ValueError, match="largest item id is 1000000000 .* Relabel"):
        Est().fit([[0, 1, 10 ** 9]])
    with pytest.raises(ValueError, match="y must be None"):
        Est().fit(t, np.ones(3))
    est = Est(random_state=0).fit(t)
    with pytest.raises(ValueError, match="out of range for 3 items"):
        est.predict([[0, 1, 3]])
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        Est().predict(t)


def test_model_specific_params():
    t = np.array([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ValueError, match="SOE: parameter margin"):
        SOE(margin=0).fit(t)
    with pytest.raises(ValueError, match="TSTE: parameter alpha"):
        TSTE(alpha=-1).fit(t)
    with pytest.raises(ValueError, match="TSTE: parameter regularization"):
        TSTE(regularization=-0.1).fit(t)
    assert TSTE(5).fit(t).alpha_ == 4.0 and TSTE(1).fit(t).alpha_ == 1.0


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_max_iter_cap_recorded_and_warned(Est):
    _, t = _planted(n=15, seed=6)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        est = Est(2, max_iter=2, random_state=0).fit(t)
    assert est.stop_reason_ == "max_iter" and est.n_iter_ == 2


# --------------------------------------------------------------------------- real data
def test_zappos_held_out_accuracy(data_home):
    from tripletml.datasets import load_comparisons
    T = load_comparisons("zappos", data_home).triplets
    rng = np.random.default_rng(0)
    p = rng.permutation(len(T))
    train, test = T[p[:5000]], T[p[-20000:]]
    for Est in ESTIMATORS:
        # the CNN features' cosine agrees with 71.8 % of the answers
        assert Est(2, random_state=0).fit(train).score(test) > 0.80


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_n_init_keeps_the_lowest_objective(Est):
    _, t = _planted(n=20, seed=8)
    one = Est(2, n_init=1, random_state=3).fit(t[:800])
    many = Est(2, n_init=5, random_state=3).fit(t[:800])   # its first start is one's
    assert many.loss_ <= one.loss_ + 1e-9
    with pytest.raises(ValueError, match=f"{Est.__name__}: parameter n_init"):
        Est(n_init=0).fit(t)
