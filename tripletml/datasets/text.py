r"""Text features for 20 Newsgroups: information-gain selection and tf-idf.

The pipeline of :class:`NewsgroupsVectorizer` (fit on training text only)::

    raw message -> header handling -> lowercase, tokens r"(?u)\b[a-zA-Z][a-zA-Z]+\b",
    English stop words removed, min_df=2 -> term counts
    -> optional top-``n_features`` terms by information gain on the training labels
    -> tf-idf (raw tf, smooth idf computed on the training documents) -> rows l2-normalized

Vocabulary sizes measured on the bydate training part (11314 messages,
scikit-learn 1.9 English stop-word list):

=============================================================  ==========
setting                                                        vocabulary
=============================================================  ==========
default (Subject + body, stop words removed, min_df=2)             42,480
default, ``stop_words=None``                                       42,790
default, ``min_df=1``                                              78,911
``headers="keep"`` (whole message), min_df=2                       44,253
``headers="keep"``, ``min_df=1``                                   81,437
``headers="remove"`` (body only), min_df=2                         42,227
``token_pattern=r"(?u)\b\w\w+\b"`` (digits, _), min_df=2           53,642
same, ``headers="keep"``                                           56,126
same, ``headers="keep"``, ``stop_words=None``                      56,436
``min_df=1, max_features=60000`` (most frequent terms)             60,000
=============================================================  ==========

No natural setting gives the 62,061 features of LIBSVM's ``news20`` (15,935
training / 3,993 test messages: another split and preprocessing than bydate):
with ``min_df=2`` the vocabulary is 42-56k, with ``min_df=1`` 79-82k.  For about 60k
terms use the sklearn token pattern with ``headers="keep"`` (56k) or
``min_df=1, max_features=60000``.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.special import xlogy
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer
from sklearn.feature_selection import SelectorMixin
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted, check_X_y

from tripletml.core.validation import check_X
from tripletml.datasets._base import load

__all__ = ["information_gain", "InfoGainSelector", "NewsgroupsVectorizer",
           "strip_newsgroup_headers", "load_newsgroups_tfidf"]

TOKEN_PATTERN = r"(?u)\b[a-zA-Z][a-zA-Z]+\b"
_SUBJECT = re.compile(r"^subject:(.*)$", re.IGNORECASE | re.MULTILINE)


def information_gain(X, y) -> np.ndarray:
    """Information gain of each feature's presence about the class.

    For feature ``j`` with presence ``P = X[:, j] > 0``::

        IG_j = H(Y) - p(P) H(Y | P) - p(not P) H(Y | not P)

    in nats (natural log; divide by ``log(2)`` for bits), with ``0 log 0 = 0``.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        Feature values; only ``X > 0`` matters.  Sparse input is never densified:
        the counts come from one sparse product ``presence.T @ onehot(y)``.
    y : array-like of shape (n_samples,)
        Class labels (any hashable values).

    Returns
    -------
    ndarray of shape (n_features,)
        Non-negative information gains (float64).
    """
    X = check_X(X, "information_gain")  # sparse structure verified before SciPy's products
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be 1-d with {X.shape[0]} entries, got shape {y.shape}")
    classes, codes = np.unique(y, return_inverse=True)
    n = X.shape[0]
    if sp.issparse(X):
        present = X.copy()
        present.data = (present.data > 0).astype(np.float64)
    else:
        present = sp.csr_matrix((X > 0).astype(np.float64))
    onehot = sp.csr_matrix((np.ones(n), (np.arange(n), codes.ravel())),
                           shape=(n, len(classes)))
    n_jc = np.asarray((present.T @ onehot).todense())     # docs with j present, per class
    n_c = np.bincount(codes.ravel(), minlength=len(classes)).astype(np.float64)   # docs per class
    m_jc = n_c[None, :] - n_jc                             # docs with j absent, per class
    n_j, m_j = n_jc.sum(1), m_jc.sum(1)

    def nh(counts, totals):  # total * H(class | group) with counts per (group, class)
        return xlogy(totals, totals) - xlogy(counts, counts).sum(-1)

    ig = (nh(n_c, n) - nh(n_jc, n_j) - nh(m_jc, m_j)) / n
    return np.maximum(ig, 0.0)


class InfoGainSelector(SelectorMixin, BaseEstimator):
    """Keep the ``n_features`` features of highest :func:`information_gain`.

    Parameters
    ----------
    n_features : int
        Number of features to keep.  Ties are broken deterministically: stable
        sort on decreasing score, so the lower column index wins.

    Attributes
    ----------
    scores_ : ndarray of shape (``n_features_in_``,)
        Information gain (nats) of every input feature.
    ranking_ : ndarray
        Column indices sorted by decreasing score (ties: lower index first).
    n_features_in_ : int
    """

    def __init__(self, n_features: int = 1000):
        self.n_features = n_features

    def fit(self, X, y) -> "InfoGainSelector":
        """Compute the scores on ``(X, y)``; returns self."""
        X, y = check_X_y(X, y, accept_sparse=("csr", "csc", "coo"), dtype="numeric")
        k = self.n_features
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= X.shape[1]:
            raise ValueError(f"n_features must be an int in [1, {X.shape[1]}] (the number "
                             f"of input features), got {k!r}")
        self.n_features_in_ = X.shape[1]
        self.scores_ = information_gain(X, y)
        self.ranking_ = np.argsort(-self.scores_, kind="stable")
        return self

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        return tags

    def _get_support_mask(self) -> np.ndarray:
        check_is_fitted(self, "scores_")
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.ranking_[: self.n_features]] = True
        return mask


def strip_newsgroup_headers(text: str, headers: str = "subject") -> str:
    """Handle the header block of a Usenet message.

    The header is everything before the first blank line.  ``headers="subject"``
    keeps the text of the ``Subject:`` line (without the word ``Subject:``) followed
    by the body; ``"remove"`` keeps the body only; ``"keep"`` returns ``text`` as is.
    A message without a blank line is treated as all body.
    """
    if headers == "keep":
        return text
    if headers not in ("subject", "remove"):
        raise ValueError(f"headers must be 'subject', 'remove' or 'keep', got {headers!r}")
    head, sep, body = text.partition("\n\n")
    if not sep:
        return text
    if headers == "remove":
        return body
    m = _SUBJECT.search(head)
    return (m.group(1).strip() + "\n" if m else "") + body


class NewsgroupsVectorizer(TransformerMixin, BaseEstimator):
    """Tf-idf features for newsgroup messages, optionally selected by information gain.

    Pipeline (everything is fit on the training documents only): header handling
    (:func:`strip_newsgroup_headers`) -> :class:`~sklearn.feature_extraction.text.CountVectorizer`
    (``lowercase``, ``token_pattern``, ``stop_words``, ``min_df``, ``max_df``,
    ``max_features``) -> if ``n_features`` is set, the top ``n_features`` terms by
    information gain of term presence on the training labels -> tf-idf with raw
    term frequency (``sublinear_tf=False``) and smooth idf ``ln((1+n)/(1+df)) + 1``
    -> each row scaled to unit l2 norm (rows with no known term stay zero).  Terms
    not in the training vocabulary are ignored by :meth:`transform`.

    Parameters
    ----------
    n_features : int, optional
        Number of terms kept by information gain; None keeps the whole vocabulary.
    headers : {"subject", "remove", "keep"}, default "subject"
        Keep Subject line + body (default), body only, or the whole message.
        Other header lines (From, Organization, Lines, ...) identify the poster
        and leak the label, so they are dropped by default.
    lowercase, token_pattern, stop_words, min_df, max_df, max_features
        Passed to ``CountVectorizer``; defaults ``True``, ``r"(?u)\\b[a-zA-Z][a-zA-Z]+\\b"``,
        ``"english"``, ``2``, ``1.0``, ``None``.

    Attributes
    ----------
    vocabulary_ : dict
        Term -> output column.
    selector_ : InfoGainSelector or None
    idf_ : ndarray of shape (n_output_features,)
    feature_names_out_ : ndarray of str

    Notes
    -----
    Vocabulary sizes on the bydate training part are listed in the module docstring
    (42,480 with the defaults; 78,911 with ``min_df=1``).
    """

    def __init__(self, n_features: int | None = None, *, headers: str = "subject",
                 lowercase: bool = True, token_pattern: str = TOKEN_PATTERN,
                 stop_words: str | Sequence[str] | None = "english", min_df: int | float = 2,
                 max_df: int | float = 1.0, max_features: int | None = None):
        self.n_features = n_features
        self.headers = headers
        self.lowercase = lowercase
        self.token_pattern = token_pattern
        self.stop_words = stop_words
        self.min_df = min_df
        self.max_df = max_df
        self.max_features = max_features

    def _prepare(self, docs: Iterable[str]) -> list[str]:
        if isinstance(docs, str):
            raise TypeError("docs must be an iterable of str, not a single str")
        return [strip_newsgroup_headers(d, self.headers) for d in docs]

    def fit(self, docs: Iterable[str], y=None) -> "NewsgroupsVectorizer":
        """Learn vocabulary, selection and idf from training documents ``docs``."""
        self.fit_transform(docs, y)
        return self

    def fit_transform(self, docs: Iterable[str], y=None) -> sp.csr_matrix:
        """Fit on ``docs`` (and labels ``y`` when ``n_features`` is set) and transform them."""
        docs = self._prepare(docs)
        self.counter_ = CountVectorizer(
            lowercase=self.lowercase, token_pattern=self.token_pattern,
            stop_words=self.stop_words, min_df=self.min_df, max_df=self.max_df,
            max_features=self.max_features, dtype=np.float64)
        counts = self.counter_.fit_transform(docs)
        names = self.counter_.get_feature_names_out()
        self.selector_ = None
        if self.n_features is not None:
            if y is None:
                raise ValueError("y is required to select terms by information gain")
            self.selector_ = InfoGainSelector(self.n_features).fit(counts, y)
            counts = self.selector_.transform(counts)
            names = names[self.selector_.get_support()]
        self.tfidf_ = TfidfTransformer(norm="l2", use_idf=True, smooth_idf=True,
                                       sublinear_tf=False)
        X = self.tfidf_.fit_transform(counts)
        self.feature_names_out_ = np.asarray(names, dtype=object)
        self.vocabulary_ = {t: i for i, t in enumerate(self.feature_names_out_)}
        self.idf_ = self.tfidf_.idf_
        return sp.csr_matrix(X, dtype=np.float64)

    def transform(self, docs: Iterable[str]) -> sp.csr_matrix:
        """Return the l2-normalized tf-idf CSR matrix (float64) of ``docs``."""
        check_is_fitted(self, "tfidf_")
        counts = self.counter_.transform(self._prepare(docs))
        if self.selector_ is not None:
            counts = self.selector_.transform(counts)
        return sp.csr_matrix(self.tfidf_.transform(counts), dtype=np.float64)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Return the output terms, in column order."""
        check_is_fitted(self, "feature_names_out_")
        return self.feature_names_out_


def load_newsgroups_tfidf(n_features: int | None = 1000,
                          data_home: str | os.PathLike | None = None, *,
                          corpus: Bunch | None = None, verify: bool = True,
                          **vectorizer_params) -> Bunch:
    """20 Newsgroups bydate as tf-idf features, fit on the training part only.

    Parameters
    ----------
    n_features : int or None, default 1000
        Terms kept by information gain on the training labels (None: all).
    data_home : str or path-like, optional
        See :func:`tripletml.datasets.get_data_home`.
    corpus : Bunch, optional
        The result of ``load("20newsgroups", subset="all")`` to reuse instead of
        reading the archive again.
    verify : bool, default True
        Passed to :func:`tripletml.datasets.load`.
    **vectorizer_params
        Other :class:`NewsgroupsVectorizer` parameters.

    Returns
    -------
    sklearn.utils.Bunch
        ``X_train`` (11314 x n_features CSR), ``y_train``, ``X_test`` (7532 x
        n_features), ``y_test``, ``feature_names``, ``target_names``, ``vectorizer``.
    """
    if corpus is None:
        corpus = load("20newsgroups", data_home, subset="all", verify=verify)
    if corpus.get("name") != "20newsgroups" or corpus.get("subset") != "all":
        raise ValueError("corpus must be load('20newsgroups', subset='all')")
    is_train = np.array([f.startswith("20news-bydate-train/") for f in corpus.filenames])
    docs = corpus.data
    train = [d for d, t in zip(docs, is_train) if t]
    test = [d for d, t in zip(docs, is_train) if not t]
    vec = NewsgroupsVectorizer(n_features, **vectorizer_params)
    y_train, y_test = corpus.target[is_train], corpus.target[~is_train]
    X_train = vec.fit_transform(train, y_train)
    return Bunch(X_train=X_train, y_train=y_train, X_test=vec.transform(test), y_test=y_test,
                 feature_names=vec.get_feature_names_out(),
                 target_names=list(corpus.target_names), vectorizer=vec)
