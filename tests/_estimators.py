"""The generic tests' view of the learner registry (:mod:`tripletml.registry`):
add a learner there, not here."""
import numpy as np
import pytest

from tripletml.registry import entries
from tripletml.core.base import MahalanobisMixin


def _make(entry, variant):
    """The registry's test instance on raw features (``preprocessing=None``
    where the learner has the parameter): the generic tests compare with
    formulas in the raw coordinates; tests/test_preprocessing.py covers the
    preprocessing of every learner."""
    est = entry.make(variant)
    if "preprocessing" in est.get_params():
        est.set_params(preprocessing=None)
    return est


def _cases(kind, where=lambda cls: True):
    """One pytest.param(factory, alt) per test variant; nothing is built at
    collection time (only classes are looked at)."""
    out = []
    for e in entries(kind):
        if not where(e.cls):
            continue
        for i, test_id in enumerate(e.test_ids()):
            out.append(pytest.param(lambda e=e, i=i: _make(e, i), dict(e.alt), id=test_id))
    return out


#: (factory of a quick-to-fit instance, {param: alternative value}) for every
#: triplet learner (one case per registry test variant)
ESTIMATORS = _cases("triplet")
#: the same for the multi-label rankers (``fit(X, Y)``, label scores)
MULTILABEL = _cases("multilabel")
#: the triplet learners that need supervision (labels or triplets)
LEARNERS = _cases("triplet", lambda cls: cls._needs_triplets)
#: the Mahalanobis (transformer) learners
MAHALANOBIS = _cases("triplet", lambda cls: issubclass(cls, MahalanobisMixin))
#: every registry learner, triplet and multi-label
ALL = ESTIMATORS + MULTILABEL


def ids(cases):
    """pytest ids (kept for callers that pass ``ids=``)."""
    return [c.id for c in cases]


def toy_data(seed=0, n=30, d=5):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]
    return X, y


def toy_item_triplets(seed=0, n=15, m=300):
    """Triplets ``(head, close, far)`` of ``n`` item ids (three distinct ids a
    row; answered by planted 2-D points), for the ordinal embeddings (the
    registry's kind ``"embedding"``, fitted on triplets alone)."""
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(n, 2))
    t = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    d = lambda a, b: ((P[a] - P[b]) ** 2).sum(axis=1)  # noqa: E731
    swap = d(t[:, 0], t[:, 1]) > d(t[:, 0], t[:, 2])
    t[swap, 1:] = t[swap, 2:0:-1]
    return t


def toy_multilabel(seed=0, n=30, d=5, n_labels=4):
    """X (n x d) and a binary indicator Y (n x n_labels), every row with at
    least one label, every label used, labels correlated with X."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = (X[:, :1] + rng.normal(size=(n, n_labels)) > 0).astype(int)
    Y[np.arange(n), np.arange(n) % n_labels] = 1
    return X, Y
