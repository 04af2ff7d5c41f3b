"""One supervision object (issue 37, item 2): every in-memory form of
``fit``'s input is parsed once into :class:`tripletml.core.supervision.Supervision`
(what the rows are, what the supervision is, how it was given), and ``fit``
consumes it."""
from __future__ import annotations

import numpy as np
import pytest

import tripletml as tm
from tripletml.core.supervision import GIVEN_AS, KINDS, read_supervision
from tripletml.pairs import PairConstraints


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    y = np.arange(12) % 3
    T = np.array([[0, 3, 1], [4, 7, 2], [8, 11, 5]])
    P = np.array([[0, 3], [1, 2], [4, 7], [5, 6]])
    return X, y, T, P


def test_every_form_is_read_into_one_object():
    X, y, T, P = _data()
    s = np.array([1, -1, 1, -1])
    cases = [
        (tm.OASIS(), (X, y), {}, "labels", "rows", None),
        (tm.Euclidean(), (X,), {}, "none", "rows", None),
        (tm.OASIS(), (X,), {"triplets": T}, "triplets", "rows+triplets", "triplets"),
        (tm.ITML(), (X, s), {"pairs": P}, "pairs", "rows+pairs", "pairs"),
        (tm.OASIS(), (X[T],), {}, "triplets", "point_triplets", "triplets"),
        (tm.ITML(), (X[P], s), {}, "pairs", "point_pairs", "pairs"),
        (tm.OASIS(preprocessor=X), (T,), {}, "triplets", "index_triplets", "triplets"),
        (tm.ITML(preprocessor=X), (P, s), {}, "pairs", "index_pairs", "pairs"),
        (tm.OASIS(preprocessor=X), (np.arange(12), y), {}, "labels", "row_ids", None),
    ]
    for est, args, kw, kind, how, form in cases:
        sup = read_supervision(est, *args, **kw)
        assert (sup.kind, sup.given_as, sup.tuple_form) == (kind, how, form), how
        assert sup.kind in KINDS and sup.given_as in GIVEN_AS
    # point and index tuples: the distinct rows, the tuples index them
    sup = read_supervision(tm.OASIS(preprocessor=X), T)
    np.testing.assert_array_equal(sup.rows[sup.triplets], X[T])


def test_checked_validates_against_the_rows():
    X, y, T, P = _data()
    sup = read_supervision(tm.ITML(), X, [1, 0, 1, 0], pairs=P).checked(tm.ITML(), X)
    assert isinstance(sup.pair_constraints, PairConstraints)
    assert sup.pair_constraints.labels.tolist() == [1, -1, 1, -1]
    sup = read_supervision(tm.OASIS(), X, triplets=T.tolist()).checked(tm.OASIS(), X)
    assert sup.target.dtype == np.int64 and sup.pair_constraints is None
    sup = read_supervision(tm.OASIS(), X, y).checked(tm.OASIS(), X)
    np.testing.assert_array_equal(sup.codes, y)
    with pytest.raises(ValueError, match="OASIS: give pairs= .* or triplets=, not both"):
        read_supervision(tm.OASIS(), X, [1, -1], triplets=T, pairs=P[:2]).checked(tm.OASIS(), X)
    with pytest.raises(ValueError, match="OASIS: .*index 12 is out of range"):
        read_supervision(tm.OASIS(), X, triplets=[[0, 1, 12]]).checked(tm.OASIS(), X)
    with pytest.raises(ValueError, match="X holds triplets themselves"):
        read_supervision(tm.OASIS(), X[T], triplets=T)


def test_fit_on_pairs_calibrates_on_the_pairs_it_read():
    """The threshold comes from the same checked pairs the learner saw: a
    fit on point pairs with 1/0 labels answers in 1/0 and its threshold is
    the best accuracy on those pairs."""
    X, y, T, P = _data()
    s = np.array([1, 0, 1, 0])
    m = tm.ITML().fit(X[P], s)
    assert m.tuple_form_ == "pairs" and m.classes_.tolist() == [0, 1]
    assert np.mean(m.predict(X[P]) == s) == 1.0


def test_partial_fit_reads_its_input_into_the_same_object():
    from tripletml.core.supervision import read_partial_supervision
    X, y, T, P = _data()
    est = tm.OASIS()
    assert read_partial_supervision(est, X, y).kind == "labels"
    sup = read_partial_supervision(est, X, triplets=T)
    assert (sup.kind, sup.tuple_form) == ("triplets", "triplets")
    assert read_partial_supervision(est, X, T).triplets is not None      # 0.2's positional form
    with pytest.raises(ValueError, match="OASIS: partial_fit takes class labels y or triplets="):
        read_partial_supervision(est, X, y, triplets=T)
    with pytest.raises(ValueError, match="OASIS: partial_fit needs class labels y"):
        read_partial_supervision(est, X)
