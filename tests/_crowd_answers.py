"""Simulated crowd answers for the tests of the choices towards the
features' own geometry (MMC's and SCML's ``shrinkage="auto"``)."""
import numpy as np


def noisy_answers(seed=0, n=30, d=12, m=1500, noise=0.2):
    """Rows whose first 3 columns carry a hidden configuration, ``m``
    answers ``(q, p+, p-)`` about it with a share ``noise`` flipped."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 3))
    X = np.hstack([Z, 0.7 * rng.normal(size=(n, d - 3))])
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    close = ((Z[T[:, 0]] - Z[T[:, 1]]) ** 2).sum(1) < ((Z[T[:, 0]] - Z[T[:, 2]]) ** 2).sum(1)
    keep = close ^ (rng.random(m) < noise)
    T[~keep] = T[~keep][:, [0, 2, 1]]
    return X, T


def labels_keep_zero_shrinkage(cls, **params):
    """Fit ``cls`` on three classes at ``shrinkage="auto"``: class labels
    keep the paper's matrix (``shrinkage_ == 0``, no held-out scores, ``M_``
    equal to the fit at ``shrinkage=0``).  Returns the data for more checks."""
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(60, 5)), np.repeat(np.arange(3), 20)
    m = cls(random_state=0, **params).fit(X, y)
    assert m.shrinkage_ == 0.0 and not hasattr(m, "shrinkage_scores_")
    np.testing.assert_array_equal(m.M_, cls(random_state=0, shrinkage=0.0, **params).fit(X, y).M_)
    return X, y
