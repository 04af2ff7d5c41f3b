"""Declarative hyper-parameter constraints (tripletml.core.params): the rules
tripletml adds to scikit-learn's constraint objects, and that every learner
of the registry declares every constructor parameter."""
import numbers

import numpy as np
import pytest
from sklearn.base import BaseEstimator

from tripletml.core.params import (Interval, InvalidParameterError, Options, StrOptions, describe,
                               validate_constraints)
from tripletml.registry import entries


class Toy(BaseEstimator):
    _parameter_constraints = {
        "n": [Interval(numbers.Integral, 1, None, closed="left")],
        "x": [Interval(numbers.Real, 0, 1, closed="right"), None],
        "g": [Interval(numbers.Real, 0, None, closed="neither"), Options(numbers.Real, {np.inf})],
        "mode": [StrOptions({"a", "b"})],
        "eta": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "flag": ["boolean"],
        "anything": ["no_validation"],
    }

    def __init__(self, n=1, x=None, g=1.0, mode="a", eta="auto", flag=False, anything=None):
        self.n, self.x, self.g, self.mode, self.eta = n, x, g, mode, eta
        self.flag, self.anything = flag, anything


@pytest.mark.parametrize("params", [
    {}, {"n": np.int64(3)}, {"x": 1}, {"x": 0.5}, {"g": np.inf}, {"g": 2}, {"mode": "b"},
    {"eta": 0.1}, {"flag": np.bool_(True)}, {"anything": object()},
])
def test_valid(params):
    validate_constraints(Toy(**params))


@pytest.mark.parametrize("params, msg", [
    ({"n": 0}, "n=0 must be an integer >= 1"),
    ({"n": 2.0}, "n=2.0 must be an integer >= 1"),
    ({"n": True}, "n=True must be an integer >= 1"),          # booleans are not numbers
    ({"x": 0.0}, r"x=0.0 must be a real number in \(0, 1\] or None"),
    ({"x": np.nan}, "x=nan must be"),
    ({"x": False}, "x=False must be"),
    ({"g": 0}, r"g=0 must be a real number > 0 or a float among \{inf\}"),
    ({"g": -np.inf}, "g=-inf must be"),
    ({"mode": "c"}, "mode='c' must be one of 'a', 'b'"),
    ({"mode": 1}, "mode=1 must be one of"),
    ({"eta": "3"}, "eta='3' must be one of 'auto' or a real number > 0"),
    ({"eta": np.inf}, "eta=inf must be"),
    ({"flag": 1}, "flag=1 must be True or False"),
])
def test_invalid_names_the_estimator_and_is_both_error_types(params, msg):
    for exc in (ValueError, TypeError, InvalidParameterError):
        with pytest.raises(exc, match="Toy: parameter " + msg):
            validate_constraints(Toy(**params))


def test_describe():
    assert describe(Interval(numbers.Real, None, 1, closed="neither")) == "a real number < 1"
    assert describe(Interval(numbers.Integral, 0, 5, closed="both")) == "an integer in [0, 5]"


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_every_learner_declares_every_parameter(entry):
    """No parameter escapes validation: each one is declared (possibly as
    'no_validation' with the reason in a comment of the learner)."""
    params = set(entry.cls().get_params(deep=False))
    declared = set(entry.cls._parameter_constraints)
    assert params <= declared, f"{entry.name}: undeclared {sorted(params - declared)}"


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
def test_defaults_are_valid(entry):
    validate_constraints(entry.cls())
