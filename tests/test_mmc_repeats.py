"""MMC on many answers about few rows (issue 38 s3): repeated pairs are
aggregated (one difference per distinct pair, weighted by its count), which
is the same objective, gradient and model as one row per answer."""
import numpy as np
import pytest

from tripletml import MMC
from tripletml.algorithms.mmc import estimator as mmc_estimator


def _data(n=15, d=8, m=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    T = rng.integers(0, n, size=(m, 3))
    T = T[(T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])]
    return X, T


@pytest.mark.parametrize("kw", [{}, {"diagonal": True}])
def test_repeated_pairs_aggregated_is_the_plain_model(kw, monkeypatch):
    X, T = _data()
    agg = MMC(preprocessing=None, tol=1e-8, max_iter=300, **kw).fit(X, triplets=T)
    calls = []
    orig = mmc_estimator._weighted_differences

    def spy(X_, pairs, power):
        out = orig(X_, pairs, power)
        calls.append((len(pairs), out.shape[0]))
        return out

    monkeypatch.setattr(mmc_estimator, "_weighted_differences", spy)
    MMC(preprocessing=None, tol=1e-8, max_iter=300, **kw).fit(X, triplets=T)
    assert all(rows < pairs / 2 for pairs, rows in calls)        # aggregated here
    monkeypatch.setattr(mmc_estimator, "_AGGREGATE_RATIO", 0.0)   # one row per answer
    plain = MMC(preprocessing=None, tol=1e-8, max_iter=300, **kw).fit(X, triplets=T)
    scale = np.abs(plain.M_).max()
    np.testing.assert_allclose(agg.M_, plain.M_, atol=1e-6 * scale)


def test_weighted_differences_terms():
    """Rows times sqrt(count) keep the similar scatter; rows times count keep
    the sum of dissimilar distances under any A."""
    X, T = _data(n=6, d=4, m=400, seed=2)
    P = T[:, [0, 2]]
    P[::3] = P[::3, ::-1]                                 # reversed pairs: one answer
    E = X[P[:, 0]] - X[P[:, 1]]
    Ws = mmc_estimator._weighted_differences(X, P, 0.5)
    Wd = mmc_estimator._weighted_differences(X, P, 1.0)
    assert Ws.shape[0] <= 15
    np.testing.assert_allclose(Ws.T @ Ws, E.T @ E, rtol=1e-12)
    A = np.random.default_rng(3).normal(size=(4, 4))
    A = A @ A.T
    dist = lambda R: np.sqrt(np.einsum("ij,jk,ik->i", R, A, R)).sum()
    assert dist(Wd) == pytest.approx(dist(E), rel=1e-12)
