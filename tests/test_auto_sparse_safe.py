"""AutoSimilarity on high-dimensional sparse rows (issue 42 s5): a candidate
whose preprocessing would make the rows dense races with the sparse-safe
modes (None, "normalize") instead of being lost, and the race says so."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml import AutoSimilarity
from tripletml.core.preprocessing import MAX_DENSIFY_FEATURES

CANDS = [{"learner": "Euclidean", "grid": {"preprocessing": [None, "standardize"]}},
         {"learner": "OASIS", "grid": {"preprocessing": ["sphere", "whiten"], "C": [0.1]},
          "budget": ("n_triplets", 2000)}]


def _sparse_topics(n=90, d=MAX_DENSIFY_FEATURES + 500, k=3, seed=0):
    """Rows of k classes: 20 background words and 8 of the class's 30 topic words."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    topic = rng.choice(d, (k, 30), replace=False)
    r, c = [], []
    for i in range(n):
        cols = np.unique(np.r_[rng.choice(d, 20, replace=False),
                               rng.choice(topic[y[i]], 8, replace=False)])
        r += [i] * cols.size
        c += list(cols)
    X = sp.csr_matrix((rng.random(len(r)) + 0.5, (r, c)), shape=(n, d))
    return X, y


def test_centering_candidates_race_sparse_safe_with_a_warning():
    X, y = _sparse_topics()
    with pytest.warns(UserWarning, match="race with None and 'normalize' instead"):
        a = AutoSimilarity(candidates=CANDS, random_state=0, time_budget=60).fit(X, y)
    r = a.cv_results_
    assert not any(r["error"]), r["error"]
    raced = {(n, p.get("preprocessing")) for n, p in zip(r["learner"], r["params"])}
    assert raced == {("Euclidean", None), ("Euclidean", "normalize"), ("OASIS", None),
                     ("OASIS", "normalize")}        # duplicates dropped
    notes = [s for s in a.skipped_ if s["candidate"] is None]
    assert {s["params"]["preprocessing"] for s in notes} == {"standardize", "sphere",
                                                              "whiten"}
    assert all("would make it dense" in s["reason"] for s in notes)
    assert a.best_params_["learner"] == "OASIS"      # the topics are learnable
    assert sp.issparse(X) and a.n_features_in_ == X.shape[1]


def test_dense_or_narrow_rows_race_as_given():
    X, y = _sparse_topics(d=400)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        a = AutoSimilarity(candidates=CANDS[:1], random_state=0, time_budget=60).fit(X, y)
    assert [p["preprocessing"] for p in a.cv_results_["params"]] == [None, "standardize"]
    assert not [s for s in a.skipped_ if s["candidate"] is None]


def test_normalize_keeps_high_dimensional_sparse_rows_sparse():
    """"normalize" divides rows by their norms, it does not center: it is
    accepted on sparse X of any width and the rows stay sparse."""
    from tripletml.core.preprocessing import Preprocessor

    X, _ = _sparse_topics(n=12)
    Z = Preprocessor("normalize").fit(X).transform(X)
    assert sp.issparse(Z)
    norms = sp.linalg.norm(Z, axis=1)       # one norm for every row (then a feature unit)
    np.testing.assert_allclose(norms, norms[0])
    with pytest.raises(ValueError, match="would make this sparse X"):
        Preprocessor("standardize").fit(X)
