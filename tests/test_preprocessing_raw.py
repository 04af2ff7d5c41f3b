"""``preprocessing="raw"``: the rows exactly as given (no feature unit).

The reference is the learner with ``preprocessing=None`` when the feature
unit is forced to 1 (the ``raw_rows`` fixture, the way the paper-formula
tests run the solvers on the caller's numbers): both must give the same
model on every triplet learner.  A raw model saves and loads with its
meaning, and is *not* scale-equivariant, unlike ``None``: the test that
tells the two apart.
"""
import numpy as np
import pytest

import tripletml as tm
from tripletml.registry import entries
from tripletml.core.preprocessing import Preprocessor
from tripletml.persistence import load_model

TRIPLET = entries("triplet")


def _data(seed=0, n=30, d=5):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]               # feature unit about 1.5, not 1
    return X, y, tm.triplets.random_class_triplets(y, 100, random_state=seed)


def _fit(entry, mode, X, t):
    return entry.make(0, preprocessing=mode).fit(X, triplets=t)


@pytest.mark.parametrize("entry", TRIPLET, ids=lambda e: e.name)
def test_raw_is_none_with_unit_one(entry, monkeypatch):
    X, y, t = _data()
    a = _fit(entry, "raw", X, t)
    assert a.preprocessing_ is None and a.scaler_.unit_ is None
    import tripletml.core.preprocessing as prep
    monkeypatch.setattr(prep, "feature_unit", lambda X, mean=None: 1.0)
    b = _fit(entry, None, X, t)
    S = a.similarity(X[:6], X[6:20])
    np.testing.assert_allclose(S, b.similarity(X[:6], X[6:20]),
                               rtol=1e-9, atol=1e-12 * max(1.0, np.abs(S).max()))


def test_raw_is_not_scale_equivariant_but_none_is():
    X, y, t = _data()
    ranks = {}
    for mode in (None, "raw"):
        a = tm.OASIS(C=0.1, preprocessing=mode, random_state=0).fit(X, triplets=t)
        b = tm.OASIS(C=0.1, preprocessing=mode, random_state=0).fit(1e-3 * X, triplets=t)
        ranks[mode] = np.array_equal(np.argsort(a.similarity(X[:5], X), axis=1),
                                     np.argsort(b.similarity(X[:5], X), axis=1))
    assert ranks[None] and not ranks["raw"]


def test_raw_model_file_round_trip(tmp_path):
    X, y, t = _data()
    a = tm.OASIS(preprocessing="raw", random_state=0).fit(X, triplets=t)
    a.save(tmp_path / "m.npz")
    b = load_model(tmp_path / "m.npz")
    np.testing.assert_allclose(a.similarity(X[:4], X), b.similarity(X[:4], X), rtol=1e-12)


def test_raw_preprocessor_fits_nothing_and_keeps_sparse():
    import scipy.sparse as sp
    X = sp.random(20, 3000, density=0.01, format="csr", random_state=0) * 9.0
    p = Preprocessor("raw").fit(X)
    assert p.mode_ is None and p.unit_ is None and p.linear_map() == 1.0
    Z = p.transform(X)
    assert sp.issparse(Z) and (Z != X).nnz == 0


def test_bad_mode_message_lists_raw():
    X, y, t = _data()
    with pytest.raises(ValueError, match="'raw'"):
        tm.OASIS(preprocessing="rawest").fit(X, triplets=t)
