"""Information gain, InfoGainSelector, NewsgroupsVectorizer and the 20NG tf-idf loader."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tripletml.datasets import load
from tripletml.datasets.text import (InfoGainSelector, NewsgroupsVectorizer, information_gain,
                                     load_newsgroups_tfidf, strip_newsgroup_headers)


def _entropy(labels: np.ndarray) -> float:
    if len(labels) == 0:
        return 0.0
    p = np.unique(labels, return_counts=True)[1] / len(labels)
    return float(-(p * np.log(p)).sum())


def _ig_brute(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = []
    for j in range(X.shape[1]):
        present = X[:, j] > 0
        p = present.mean()
        out.append(_entropy(y) - p * _entropy(y[present]) - (1 - p) * _entropy(y[~present]))
    return np.array(out)


@pytest.fixture
def toy():
    rng = np.random.default_rng(0)
    X = sp.random(60, 25, density=0.3, format="csr", random_state=1) * 5
    X.data -= 1.0  # some stored values are <= 0: they count as absent
    X = sp.hstack([X, sp.csr_matrix(np.ones((60, 1))), sp.csr_matrix((60, 1))], format="csr")
    y = rng.integers(0, 4, 60) * 10 + 3  # arbitrary class values
    return X, y


def test_information_gain_matches_brute_force(toy):
    X, y = toy
    expected = _ig_brute(X.toarray(), y)
    got = information_gain(X, y)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert got[-1] == 0 and got[-2] == 0  # always / never present
    np.testing.assert_allclose(information_gain(X.toarray(), y), expected, atol=1e-12)
    np.testing.assert_allclose(information_gain(X.tocsc(), list(y)), expected, atol=1e-12)


def test_information_gain_perfect_feature():
    y = np.array([0, 0, 1, 1])
    X = sp.csr_matrix(np.array([[1, 0], [1, 1], [0, 0], [0, 1]]))
    np.testing.assert_allclose(information_gain(X, y), [np.log(2), 0.0], atol=1e-12)


def test_information_gain_keeps_input_sparse(toy):
    X, y = toy

    def boom(*a, **k):
        raise AssertionError("X was densified")

    X.toarray = X.todense = boom
    assert information_gain(X, y).shape == (X.shape[1],)


def test_selector_top_k_and_ties(toy):
    X, y = toy
    scores = information_gain(X, y)
    sel = InfoGainSelector(n_features=5).fit(X, y)
    np.testing.assert_allclose(sel.scores_, scores)
    top = np.argsort(-scores, kind="stable")[:5]
    np.testing.assert_array_equal(np.flatnonzero(sel.get_support()), np.sort(top))
    Xt = sel.transform(X)
    assert sp.issparse(Xt) and Xt.shape == (60, 5)
    # duplicated columns tie: the lower index wins, whatever the order of the call
    Xd = sp.hstack([X[:, [top[0]]], X, X[:, [top[0]]]], format="csr")
    sel = InfoGainSelector(n_features=1).fit(Xd, y)
    np.testing.assert_array_equal(np.flatnonzero(sel.get_support()), [0])
    with pytest.raises(ValueError, match="n_features must be"):
        InfoGainSelector(n_features=X.shape[1] + 1).fit(X, y)


MSG = ("From: someone@example.com\nSubject: Re: Rocket engines\nOrganization: NASA\n"
       "Lines: 2\n\nThe engine burns fuel quickly.\nFuel is cheap.\n")


def test_strip_headers():
    assert strip_newsgroup_headers(MSG) == ("Re: Rocket engines\nThe engine burns fuel quickly.\n"
                                            "Fuel is cheap.\n")
    assert strip_newsgroup_headers(MSG, "remove").startswith("The engine")
    assert strip_newsgroup_headers(MSG, "keep") == MSG
    with pytest.raises(ValueError):
        strip_newsgroup_headers(MSG, "bogus")


def test_vectorizer_toy():
    train = [MSG,
             "Subject: hockey\n\nThe hockey game and the goalie.\n",
             "Subject: hockey again\n\nGoalie saves, hockey fans cheer fuel.\n",
             "Subject: space\n\nRocket fuel for the engine.\n"]
    y = [0, 1, 1, 0]
    vec = NewsgroupsVectorizer(min_df=1).fit(train)
    assert "someone" not in vec.vocabulary_ and "nasa" not in vec.vocabulary_  # headers dropped
    assert "rocket" in vec.vocabulary_ and "the" not in vec.vocabulary_      # subject kept, stop words
    X = vec.transform(train + ["Completely unseen words", ""])
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64
    norms = np.sqrt(np.asarray(X.multiply(X).sum(1))).ravel()
    np.testing.assert_allclose(norms[:4], 1.0)
    np.testing.assert_array_equal(norms[4:], 0.0)  # unseen words ignored
    names = vec.get_feature_names_out()
    assert [names[i] for i in sorted(vec.vocabulary_.values())] == list(names)

    sel = NewsgroupsVectorizer(n_features=2, min_df=1).fit(train, y)
    assert sel.transform(train).shape == (4, 2)
    assert set(sel.get_feature_names_out()) <= {"hockey", "goalie", "fuel", "engine", "rocket"}
    with pytest.raises(ValueError, match="y is required"):
        NewsgroupsVectorizer(n_features=2, min_df=1).fit(train)


def test_vectorizer_min_df_default():
    docs = ["Subject: a\n\nalpha beta", "Subject: b\n\nalpha gamma"]
    assert list(NewsgroupsVectorizer().fit(docs).get_feature_names_out()) == ["alpha"]


# --------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def corpus(data_home):
    return load("20newsgroups", data_home)


@pytest.mark.data
def test_load_newsgroups_tfidf(corpus):
    b = load_newsgroups_tfidf(1000, corpus=corpus)
    assert b.X_train.shape == (11314, 1000) and b.X_test.shape == (7532, 1000)
    assert b.X_train.format == "csr" and b.X_train.dtype == np.float64
    assert len(b.y_train) == 11314 and len(b.y_test) == 7532 and len(b.target_names) == 20
    np.testing.assert_array_equal(np.unique(b.y_train), np.arange(20))
    assert len(b.feature_names) == 1000
    norms = np.sqrt(np.asarray(b.X_train.multiply(b.X_train).sum(1))).ravel()
    assert np.all((np.abs(norms - 1) < 1e-9) | (norms == 0)) and (norms == 0).mean() < 0.01
    # fit on train only: the smooth idf comes from the document frequencies in X_train
    df = np.bincount(b.X_train.indices, minlength=1000)
    np.testing.assert_allclose(b.vectorizer.idf_, np.log((1 + 11314) / (1 + df)) + 1)
    assert {"god", "hockey", "space"} <= set(b.feature_names)
