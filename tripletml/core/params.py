"""Declarative hyper-parameter constraints (scikit-learn's vocabulary).

Every learner declares its parameters in a class attribute
``_parameter_constraints`` with scikit-learn's constraint objects, e.g.::

    _parameter_constraints = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "init": [StrOptions({"identity", "random"})],
        "eta0": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
    }

and :func:`validate_constraints` checks an estimator's ``get_params()``
against them.  The constraint objects and their descriptions are
scikit-learn's (:class:`Interval`, :class:`StrOptions`, :class:`Options`,
``None``, ``"boolean"``, a type); the rules tripletml adds, as its
imperative checks did before:

* booleans are not numbers: ``True`` is refused where an int or a float is
  expected (scikit-learn's ``Interval`` accepts it);
* real numbers must be finite unless an ``Options(Real, {inf})`` says
  otherwise (an unbounded ``Interval`` already refuses ``inf`` and NaN);
* the error names the estimator and the parameter,
  ``"OASIS: parameter C=-1 must be a real number > 0."``; it is
  scikit-learn's ``InvalidParameterError``, a :class:`ValueError` and a
  :class:`TypeError` at once;
* parameters named ``"random_state"`` are checked when ``fit`` turns them
  into a Generator (:func:`tripletml.core.validation.as_generator`), which
  also accepts a NumPy ``Generator``: declare them ``["no_validation"]``.

Cross-parameter rules (e.g. ITML's ``u <= l``) stay in the learner's
``_check_params`` hook.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.utils._param_validation import (HasMethods, Interval, InvalidParameterError,
                                             Options, StrOptions, make_constraint)

__all__ = ["Interval", "StrOptions", "Options", "HasMethods", "InvalidParameterError",
           "validate_constraints",
           "constraint_allows", "describe", "COMMON"]


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _accepts(c, value: Any) -> bool:
    """``c.is_satisfied_by(value)`` with tripletml's rule on booleans."""
    if isinstance(c, (Interval, Options)) and getattr(c, "type", None) is not bool \
            and _is_bool(value):
        return False
    return bool(c.is_satisfied_by(value))


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def describe(c) -> str:
    """A short description of one constraint: ``"an integer >= 1"``, ``"a
    real number in (0, 1)"``, ``"one of 'a', 'b'"`` (scikit-learn's own
    wording for the others)."""
    if isinstance(c, Interval):
        what = "an integer" if c.type is numbers.Integral else "a real number"
        lo, hi = c.left, c.right
        lc = c.closed in ("left", "both")
        rc = c.closed in ("right", "both")
        if lo is not None and hi is not None:
            return (f"{what} in {'[' if lc else '('}{_num(lo)}, {_num(hi)}"
                    f"{']' if rc else ')'}")
        if lo is not None:
            return f"{what} {'>=' if lc else '>'} {_num(lo)}"
        if hi is not None:
            return f"{what} {'<=' if rc else '<'} {_num(hi)}"
        return what
    if isinstance(c, StrOptions):
        return "one of " + ", ".join(repr(o) for o in sorted(c.options - c.deprecated))
    if type(c).__name__ == "_Booleans":
        return "True or False"
    return str(c)


def constraint_allows(constraints: list, value: Any) -> bool:
    """Whether any of ``constraints`` (declarations) accepts ``value``."""
    return any(_accepts(make_constraint(c), value) for c in constraints)


def validate_constraints(est: Any, constraints: dict | None = None) -> None:
    """Check ``est``'s parameters against ``constraints`` (default: the
    class's ``_parameter_constraints``).

    Raises
    ------
    InvalidParameterError
        scikit-learn's error for a parameter, both a :class:`ValueError` and a
        :class:`TypeError` (as in scikit-learn: a wrong type and a wrong value
        are caught by either).
    """
    constraints = type(est)._parameter_constraints if constraints is None else constraints
    who = type(est).__name__
    params = est.get_params(deep=False)
    for name, allowed in constraints.items():
        if name not in params or allowed == "no_validation" or "no_validation" in allowed:
            continue
        value = params[name]
        cons = [make_constraint(c) for c in allowed]
        if any(_accepts(c, value) for c in cons):
            continue
        shown = [describe(c) for c in cons if type(c).__name__ != "_NoneConstraint"]
        if len(shown) < len(cons):
            shown.append("None")
        desc = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
        raise InvalidParameterError(f"{who}: parameter {name}={value!r} must be {desc}.")


#: declarations shared by many learners
COMMON = {
    "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
    "n_triplets": [Interval(numbers.Integral, 1, None, closed="left")],
    "verbose": [Interval(numbers.Integral, 0, None, closed="left")],
    # checked by fit (as_generator accepts Generators) and by
    # check_preprocessing (its own wording)
    "random_state": ["no_validation"],
    "preprocessing": ["no_validation"],
    # a string naming a policy or a sampler object (tripletml.triplets);
    # "random" is SML's former name of "class"
    "sampling": [StrOptions({"class", "knn", "semihard", "random"}, deprecated={"random"}),
                 HasMethods(["sample"])],
}
