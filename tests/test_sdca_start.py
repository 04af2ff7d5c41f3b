"""SDCA's start at the identity (``start="identity"``, the default ``"auto"``
on answers), against a plain dense reference written from the formulas.

The problem: ``P(M) = (1/n) sum_i [1 - x_i^T M v_i]_+^2 + (lambda/2) ||M - c I||_F^2``;
with ``M = c I + (lambda n)^-1 sum_i alpha_i X_i`` the dual is
``D = (1/n) sum_i (alpha_i b_i - alpha_i^2 / 4) - (lambda/2) ||M - c I||^2``,
``b_i = 1 - c x_i^T v_i``; Algorithm 1's closed-form step maximizes D in one
coordinate.  ``c = 1 / median_i |x_i^T v_i|``."""
import numpy as np
import pytest
import scipy.sparse as sp

from _triplet_draws import spy_on_split
from tripletml import SDCA
from tripletml.distributed.sharded import ShardedCollection


class DenseShiftedSDCA:
    """Coordinate ascent on D above with explicit d x d matrices (reference)."""

    def __init__(self, X, t, lam, c):
        self.X, self.t, self.lam, self.c = X, t, lam, c
        self.n, d = len(t), X.shape[1]
        self.M = c * np.eye(d)
        self.alpha = np.zeros(self.n)

    def Xi(self, i):
        q, p, m = self.t[i]
        return np.outer(self.X[q], self.X[p] - self.X[m])

    def b(self, i):
        return 1.0 - self.c * np.trace(self.Xi(i))

    def step(self, i):
        Xi, a, ln = self.Xi(i), self.alpha[i], self.lam * self.n
        # argmax over da of (a + da) b_i - (a + da)^2 / 4 - (lambda n / 2) ||M' + da Xi / (lambda n)||^2 / n
        num = self.b(i) - np.sum((self.M - self.c * np.eye(len(self.M))) * Xi) - a / 2
        da = max(num / (0.5 + np.sum(Xi * Xi) / ln), -a)
        self.alpha[i] += da
        self.M = self.M + da * Xi / ln

    def primal(self):
        R = self.M - self.c * np.eye(len(self.M))
        loss = sum(max(0.0, 1 - np.sum(self.M * self.Xi(i))) ** 2 for i in range(self.n))
        return loss / self.n + self.lam / 2 * np.sum(R * R)

    def dual(self):
        R = self.M - self.c * np.eye(len(self.M))
        conj = sum(a * self.b(i) - a * a / 4 for i, a in enumerate(self.alpha))
        return conj / self.n - self.lam / 2 * np.sum(R * R)


def _answers(seed=0, n=25, d=6, m=60):
    rng = np.random.default_rng(seed)
    X = np.abs(rng.normal(size=(n, d)))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    t = rng.integers(0, n, size=(3 * m, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])][:m]
    return X, t


def _median_scale(X, t):
    return 1.0 / np.median(np.abs(np.einsum("ij,ij->i", X[t[:, 0]], X[t[:, 1]] - X[t[:, 2]])))


def test_identity_start_matches_the_dense_reference_and_dual_ascends():
    X, t = _answers(seed=1)
    lam, epochs, seed = 0.05, 3, 4
    m = SDCA(preprocessing=None, alpha=lam, max_iter=epochs, output="last", tol=None,
             random_state=seed).fit(X, triplets=t)
    Xs = m.scaler_.transform(X)              # the rows the solver saw (one global unit)
    c = _median_scale(Xs, t)
    assert m.start_scale_ == pytest.approx(c, rel=1e-12)
    ref = DenseShiftedSDCA(Xs, t, lam, c)
    rng = np.random.default_rng(seed)
    duals = [ref.dual()]
    for _ in range(epochs):
        for i in rng.integers(0, len(t), size=len(t)):
            ref.step(i)
            duals.append(ref.dual())
    np.testing.assert_allclose(m.W_, ref.M, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.alpha_, ref.alpha, rtol=1e-10, atol=1e-12)
    assert np.all(np.diff(duals) >= -1e-12) and np.ptp(duals) > 0
    assert m.history_["primal"][-1] == pytest.approx(ref.primal(), rel=1e-9)
    assert m.history_["dual"][-1] == pytest.approx(ref.dual(), rel=1e-9)
    assert all(g >= -1e-12 for g in m.history_["gap"])


def test_identity_start_gap_closes():
    """Weak duality every pass, and the gap of the shifted problem goes to 0."""
    X, t = _answers(seed=2)
    m = SDCA(preprocessing=None, alpha=0.1, max_iter=300, tol=1e-6, output="last",
             random_state=0).fit(X, triplets=t)
    assert m.stop_reason_ == "tol"
    assert min(m.history_["gap"]) >= -1e-12
    assert m.history_["rel_gap"][-1] <= 1e-6


def test_auto_is_zero_on_labels_and_identity_on_answers():
    X, t = _answers(seed=3)
    y = np.arange(len(X)) % 3
    kw = dict(preprocessing=None, max_iter=2, random_state=0)
    a, z = SDCA(**kw).fit(X, y), SDCA(start="zero", **kw).fit(X, y)
    assert a.start_scale_ == 0.0
    np.testing.assert_array_equal(a.W_, z.W_)
    a, i = SDCA(**kw).fit(X, triplets=t), SDCA(start="identity", **kw).fit(X, triplets=t)
    assert a.start_scale_ > 0
    np.testing.assert_array_equal(a.W_, i.W_)
    z = SDCA(start="zero", **kw).fit(X, triplets=t)
    assert z.start_scale_ == 0.0 and not np.allclose(z.W_, a.W_)


def test_start_scale_follows_the_rows_scale():
    """``c`` scales as 1/s^2 for rows scaled by s (the identity's margin on
    the typical answer is 1 at any scale); with the rows' own unit taken out
    first (``preprocessing=None`` keeps a global unit) the fitted start and
    the similarity's rankings are the same for X and 7 X."""
    from tripletml.algorithms.sdca.kernels import identity_margins
    from tripletml.linalg import as_csr
    X, t = _answers(seed=4)
    m1 = SDCA(preprocessing=None, max_iter=1, random_state=0).fit(X, triplets=t)
    m7 = SDCA(preprocessing=None, max_iter=1, random_state=0).fit(7.0 * X, triplets=t)
    assert m7.start_scale_ == pytest.approx(m1.start_scale_, rel=1e-10)
    np.testing.assert_allclose(m7.W_, m1.W_, rtol=1e-9, atol=1e-12)
    med = np.median(np.abs(identity_margins(as_csr(X), t)))
    med7 = np.median(np.abs(identity_margins(as_csr(7.0 * X), t)))
    assert 1 / med7 == pytest.approx(1 / med / 49.0, rel=1e-12)


def test_span_route_keeps_the_identity_outside_the_rows():
    """Fewer rows than features: the span route's model equals the plain
    route's, and a new item orthogonal to the rows' span keeps ``c x^T y``."""
    rng = np.random.default_rng(5)
    X = np.abs(rng.normal(size=(12, 30)))
    t = rng.integers(0, 12, size=(200, 3))
    t = t[(t[:, 0] != t[:, 1]) & (t[:, 0] != t[:, 2]) & (t[:, 1] != t[:, 2])]
    kw = dict(preprocessing=None, max_iter=3, random_state=0)
    span = SDCA(**kw).fit(X, triplets=t)
    plain = SDCA(**kw)
    plain._span_route = False
    plain.fit(X, triplets=t)
    for name in ("W_", "M_last_", "avg_accum_"):
        np.testing.assert_allclose(getattr(span, name), getattr(plain, name), rtol=1e-9,
                                   atol=1e-9 * np.abs(getattr(plain, name)).max())
    Q, _ = np.linalg.qr(X.T)
    u = rng.normal(size=(2, 30))
    u -= (u @ Q) @ Q.T                             # outside the span of the rows
    us = span.scaler_.transform(u)                 # a global unit: still outside it
    assert us[0] @ span.W_ @ us[1] == pytest.approx(span.start_scale_ * (us[0] @ us[1]),
                                                    rel=1e-8)


def test_identity_start_needs_the_fit():
    X, t = _answers(seed=6)
    with pytest.raises(ValueError, match="start='identity'.*partial_fit"):
        SDCA(start="identity", preprocessing=None).partial_fit(X, triplets=t[:5])
    coll = ShardedCollection.from_arrays(X, np.arange(len(X)) % 3, n_partitions=2)
    with pytest.raises(ValueError, match="start='identity'.*partitioned"):
        SDCA(start="identity", max_iter=1).fit(coll)
    m = SDCA(start="identity", preprocessing=None, max_iter=1, random_state=0).fit(
        sp.csr_matrix(X), triplets=t)
    c = m.start_scale_
    m.partial_fit(X, triplets=t[:5])                 # a fitted model continues
    assert m.start_scale_ == c and m.t_ == len(t) + 5


# ------------------------------------------------------------ alpha="auto"
def test_alpha_auto_keeps_the_paper_value_on_labels():
    X, _ = _answers(seed=8)
    y = np.arange(len(X)) % 3
    m = SDCA(preprocessing=None, max_iter=2, random_state=0).fit(X, y)
    assert m.alpha == "auto" and m.lambda_ == 0.01 and not hasattr(m, "alpha_grid_")
    ref = SDCA(alpha=0.01, preprocessing=None, max_iter=2, random_state=0).fit(X, y)
    np.testing.assert_array_equal(m.W_, ref.W_)


def test_alpha_auto_probes_are_fresh_fits_and_the_choice_is_one_standard_error(monkeypatch):
    """The grid is ``(s / m) 10^j`` (``s`` the answers' median ``||X_i||^2``
    on the rows the solver sees), every probe equals a fresh fit at that
    alpha on the answers among the kept items, the choice is the largest
    alpha within one standard error of the best, and the final model is the
    fit at the chosen alpha."""
    from tripletml.algorithms.sdca import estimator as est
    from tripletml.metrics import triplet_accuracy
    X, t = _answers(seed=9, n=40, d=8, m=900)
    seen = spy_on_split(monkeypatch, est)
    m = SDCA(preprocessing=None, max_iter=3, random_state=0).fit(X, triplets=t)
    hold = seen["hold"]
    Xs = m.scaler_.transform(X)
    V = Xs[t[:, 1]] - Xs[t[:, 2]]
    s = np.median((Xs[t[:, 0]] ** 2).sum(1) * (V ** 2).sum(1))
    np.testing.assert_allclose(m.alpha_grid_, s / len(t) * np.array([1e-4, 1e-2, 1.0]),
                               rtol=1e-10)
    for lam, score in zip(m.alpha_grid_, m.alpha_scores_):
        probe = SDCA(alpha=float(lam), preprocessing=None, max_iter=3,
                     random_state=0).fit(X, triplets=t[hold.fit])
        assert triplet_accuracy(probe, X, t[hold.val]) == pytest.approx(score, abs=1e-12)
    best = m.alpha_scores_.max()
    se = np.sqrt(best * (1 - best) / hold.val.size)
    assert m.lambda_ == m.alpha_grid_[np.flatnonzero(m.alpha_scores_ >= best - se)[-1]]
    fixed = SDCA(alpha=m.lambda_, preprocessing=None, max_iter=3, random_state=0).fit(
        X, triplets=t)
    np.testing.assert_array_equal(fixed.W_, m.W_)


def test_alpha_auto_is_scale_free_and_continues_in_partial_fit(tmp_path):
    from tripletml.persistence import load_model, save_model
    X, t = _answers(seed=10, n=40, d=8, m=900)
    a = SDCA(max_iter=2, random_state=0).fit(X, triplets=t)
    b = SDCA(max_iter=2, random_state=0).fit(1e3 * X, triplets=t)
    np.testing.assert_allclose(b.alpha_scores_, a.alpha_scores_, atol=1e-12)
    assert np.argmax(a.alpha_grid_ == a.lambda_) == np.argmax(b.alpha_grid_ == b.lambda_)
    save_model(a, tmp_path / "m.npz")
    c = load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(c.alpha_grid_, a.alpha_grid_)
    c.partial_fit(X, triplets=t[:5])               # the dual state's alpha continues
    assert c.lambda_ == a.lambda_


def test_a_partitioned_refit_drops_the_heldout_record():
    """``fit(collection)`` after an in-memory fit on answers: 0.01 and the
    zero start, and no ``alpha_grid_`` left from the earlier fit."""
    X, t = _answers(seed=11, n=40, d=8, m=900)
    m = SDCA(max_iter=2, random_state=0).fit(X, triplets=t)
    assert hasattr(m, "alpha_grid_") and m.start_scale_ > 0
    m.fit(ShardedCollection.from_arrays(X, np.arange(len(X)) % 3, n_partitions=2))
    assert not hasattr(m, "alpha_grid_") and m.lambda_ == 0.01 and m.start_scale_ == 0.0


def test_defaults_on_mixed_columns_are_the_same_at_any_unit():
    """Binary, count and continuous columns of three scales and a duplicated
    one, at the defaults (identity start, held-out alpha): X * 1e-3 and
    X * 1e3 give the same start, the same held-out scores and choice, and the
    same rankings as X."""
    import warnings
    from test_early_stopping import _mixed_answers
    X, t = _mixed_answers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = SDCA(random_state=0).fit(X, triplets=t)
        assert a.start_scale_ > 0 and a.alpha_scores_.shape == (3,)
        rank = np.argsort(a.similarity(X[:10], X), axis=1)
        for c in (1e-3, 1e3):
            b = SDCA(random_state=0).fit(c * X, triplets=t)
            assert b.start_scale_ == pytest.approx(a.start_scale_, rel=1e-9)
            np.testing.assert_allclose(b.alpha_scores_, a.alpha_scores_)
            assert np.argmax(b.alpha_grid_ == b.lambda_) == np.argmax(a.alpha_grid_ == a.lambda_)
            np.testing.assert_array_equal(np.argsort(b.similarity(c * X[:10], c * X), axis=1),
                                          rank)


@pytest.mark.parametrize("form", ["labels", "pairs"])
def test_span_route_equals_the_plain_route_for_labels_and_pairs(form):
    """The span route's start (computed from the supervision it is handed)
    is the plain route's for triplets sampled from labels and for pairs."""
    rng = np.random.default_rng(12)
    X = np.abs(rng.normal(size=(30, 80)))
    if form == "labels":
        args, kw = (X, np.arange(30) % 3), dict(start="identity")
    else:
        P = rng.integers(0, 30, size=(300, 2))
        P = P[P[:, 0] != P[:, 1]]
        args, kw = (P, np.where(rng.random(len(P)) < 0.5, 1, -1)), dict(preprocessor=X)
    span = SDCA(random_state=0, max_iter=2, **kw).fit(*args)
    plain = SDCA(random_state=0, max_iter=2, **kw)
    plain._span_route = False
    plain.fit(*args)
    assert span.start_scale_ > 0
    assert span.start_scale_ == pytest.approx(plain.start_scale_, rel=1e-10)
    np.testing.assert_allclose(span.W_, plain.W_, rtol=1e-9, atol=1e-12)
