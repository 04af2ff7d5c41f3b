"""LinearTSTE (t-STE's likelihood on a linear map of the features, issue 38):
the objective against a plain formula, its gradient by finite differences,
the span route against the plain route, and invariances (scaled rows,
permuted features, relabelled items)."""
from __future__ import annotations

import numpy as np
import pytest

from tripletml import LinearTSTE
from tripletml.algorithms.linear_tste.kernels import LinearTSTEObjective, mean_squared_distance
from tripletml.metrics import triplet_accuracy


def _problem(n=30, d=6, m=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    return X, t


def _reference(X, t, L, alpha, lam, L0):
    """F(L) from the paper's formula, one triplet at a time."""
    s = np.mean([[np.sum((a - b) ** 2) for b in X] for a in X])
    Y = X @ L.T
    total = 0.0
    for q, p, n in t:
        kp = (1 + np.sum((Y[q] - Y[p]) ** 2) / alpha) ** (-(alpha + 1) / 2)
        kn = (1 + np.sum((Y[q] - Y[n]) ** 2) / alpha) ** (-(alpha + 1) / 2)
        total -= np.log(kp / (kp + kn))
    return total + lam * s * np.sum((L - L0) ** 2)


@pytest.mark.parametrize("n,m,dense", [(12, 400, True), (40, 60, False)])  # the two routes
@pytest.mark.parametrize("alpha", [1.0, 4.0])
def test_objective_is_the_formula_and_its_gradient_the_derivative(n, m, dense, alpha):
    X, t = _problem(n=n, m=m)
    rng = np.random.default_rng(1)
    L, L0 = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    f = LinearTSTEObjective(X, t, alpha, 0.3, L0, mean_squared_distance(X))
    if not dense:
        f.pairs = type(f.pairs)(t, n, dense=False)
    assert f.pairs.dense == dense
    value, grad, _ = f(L)
    assert value == pytest.approx(_reference(X, t, L, alpha, 0.3, L0), rel=1e-10)
    E = rng.normal(size=L.shape)
    h = 1e-6
    fd = (f(L + h * E)[0] - f(L - h * E)[0]) / (2 * h)
    assert fd == pytest.approx(float(np.sum(grad * E)), rel=1e-6)


def test_start_is_the_principal_subspace_at_unit_spread_and_a_strong_prior_keeps_it():
    X, t = _problem()
    m = LinearTSTE(n_components=2, regularization=1e8, preprocessing=None).fit(X, triplets=t)
    Y = m.transform(X)
    assert mean_squared_distance(Y) == pytest.approx(1.0, rel=1e-5)
    Xc = X - X.mean(0)
    V = np.linalg.svd(Xc, full_matrices=False)[2][:2]
    np.testing.assert_allclose(np.abs(m.components_ @ V.T) / np.linalg.norm(m.components_, axis=1)[:, None],
                               np.eye(2), atol=1e-5)


def test_scaled_rows_and_permuted_features_give_the_same_points():
    X, t = _problem(d=8)
    base = LinearTSTE(n_components=3, preprocessing=None).fit(X, triplets=t).transform(X)
    big = LinearTSTE(n_components=3, preprocessing=None).fit(1e3 * X, triplets=t).transform(1e3 * X)
    perm = np.random.default_rng(2).permutation(8)
    per = LinearTSTE(n_components=3, preprocessing=None).fit(X[:, perm], triplets=t)
    D = lambda Y: ((Y[:, None] - Y[None]) ** 2).sum(-1)  # noqa: E731
    small = LinearTSTE(n_components=3, preprocessing=None).fit(1e-3 * X, triplets=t)
    np.testing.assert_allclose(D(big), D(base), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(D(small.transform(1e-3 * X)), D(base), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(D(per.transform(X[:, perm])), D(base), rtol=1e-5, atol=1e-8)


def test_relabelled_items_give_the_same_points():
    X, t = _problem()
    base = LinearTSTE(n_components=3, preprocessing=None).fit(X, triplets=t).transform(X)
    p = np.random.default_rng(3).permutation(len(X))
    inv = np.argsort(p)                    # new row i is old row p[i]
    m = LinearTSTE(n_components=3, preprocessing=None).fit(X[p], triplets=inv[t])
    D = lambda Y: ((Y[:, None] - Y[None]) ** 2).sum(-1)  # noqa: E731
    np.testing.assert_allclose(D(m.transform(X)), D(base), rtol=1e-5, atol=1e-8)


def test_span_route_gives_the_plain_routes_model():
    """Fewer rows than features: the span route's points are the plain
    route's (the prior keeps L in the span of the rows)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(15, 60))
    t = np.array([rng.choice(15, 3, replace=False) for _ in range(300)])
    span = LinearTSTE(n_components=3, preprocessing=None, tol=1e-10).fit(X, triplets=t)
    plain = LinearTSTE(n_components=3, preprocessing=None, tol=1e-10)
    plain._span_route = False
    plain.fit(X, triplets=t)
    D = lambda Y: ((Y[:, None] - Y[None]) ** 2).sum(-1)  # noqa: E731
    np.testing.assert_allclose(D(span.transform(X)), D(plain.transform(X)), rtol=1e-4, atol=1e-6)


def test_few_items_many_features_fit_the_answers_as_a_free_embedding_does():
    """The answers come from a hidden 2-D configuration unrelated to the
    features; with fewer rows than features the map can still place every
    item, so the training answers are fitted (the features' own geometry
    gets about half)."""
    rng = np.random.default_rng(5)
    n = 40
    X = rng.normal(size=(n, 100))
    Z = rng.normal(size=(n, 2))
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(2000)])
    closer = ((Z[t[:, 0]] - Z[t[:, 1]]) ** 2).sum(1) < ((Z[t[:, 0]] - Z[t[:, 2]]) ** 2).sum(1)
    t[~closer] = t[~closer][:, [0, 2, 1]]
    m = LinearTSTE(regularization=0.01, preprocessing=None).fit(X, triplets=t)
    assert triplet_accuracy(m, X, t) > 0.95
    from tripletml import Euclidean
    assert triplet_accuracy(Euclidean(preprocessing=None).fit(X), X, t) < 0.65


def test_labels_sample_triplets_and_the_width_defaults_to_ten():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    m = LinearTSTE(n_triplets=500, random_state=0).fit(X[:300], y[:300])
    assert m.components_.shape == (10, 64) and m.alpha_ == 9.0
    assert m.stop_reason_ in ("tol", "max_iter") and m.n_iter_ >= 1
    small = LinearTSTE(n_triplets=100, random_state=0).fit(X[:50, :4], y[:50])
    assert small.components_.shape == (4, 4) and small.alpha_ == 3.0


@pytest.mark.parametrize("preprocessing", [None, "auto", "normalize"])
def test_identical_rows_are_refused_with_a_clear_message(preprocessing):
    X = np.tile([1.0, 2.0, 3.0], (12, 1))
    t = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    with pytest.raises(ValueError, match="LinearTSTE: every row of X is the same"):
        LinearTSTE(preprocessing=preprocessing).fit(X, triplets=t)


def test_more_components_than_rows_names_the_real_sizes():
    """Fewer rows than features: asking for more principal axes than rows
    is refused with the plain route's message (the span's width never shows)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 60))
    t = np.array([rng.choice(20, 3, replace=False) for _ in range(100)])
    with pytest.raises(ValueError, match=r"min\(n_samples, n_features\) = 20, got 30"):
        LinearTSTE(n_components=30, preprocessing=None).fit(X, triplets=t)
    with pytest.raises(ValueError, match="exceeds the number of features the learner sees "
                                         r"\(60"):
        LinearTSTE(n_components=61, preprocessing=None).fit(X, triplets=t)


@pytest.mark.parametrize("kind", ["binary", "counts"])
def test_defaults_give_the_same_ranking_for_rescaled_binary_and_count_columns(kind):
    """At its defaults (``preprocessing="auto"``) the learned similarity of
    binary or count columns is the same for X, X * 1e-3 and X * 1e3."""
    rng = np.random.default_rng(6)
    X = (rng.random((40, 12)) < 0.3).astype(float) if kind == "binary" else \
        rng.poisson(3.0, size=(40, 12)).astype(float)
    t = np.array([rng.choice(40, 3, replace=False) for _ in range(300)])
    D = lambda Y: ((Y[:, None] - Y[None]) ** 2).sum(-1)  # noqa: E731
    base = D(LinearTSTE(random_state=0).fit(X, triplets=t).transform(X))
    for c in (1e-3, 1e3):
        got = D(LinearTSTE(random_state=0).fit(c * X, triplets=t).transform(c * X))
        np.testing.assert_allclose(got, base, rtol=1e-5, atol=1e-8 * base.max())
