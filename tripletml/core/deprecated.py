"""Names renamed in tripletml 0.2, kept for one release with a FutureWarning.

* ``decision_function(X, triplets)`` of the triplet learners and of
  :class:`~tripletml.AutoSimilarity` -> ``triplet_score(X, triplets)``: in
  scikit-learn ``decision_function(X)`` is a per-sample score, which a
  triplet learner does not have (a later release may give it the meaning
  "score of pairs" for pair verification).  The alias is an
  :func:`~sklearn.utils.metaestimators.available_if` method switched by
  :func:`legacy_decision_function`.
* ``similarity_kind`` -> ``embedding_similarity`` (one name for how scores
  relate to embeddings).
* ``tripletml.core.base.History`` -> :class:`tripletml.engine.History`.

The others are declared where they live: LORETA's ``algorithm`` ->
``solver`` (``_renamed_params``, read from old model files under the new
name), SDCA's ``M_`` -> ``W_``, ``ITMLSolver.run`` -> ``run_sweeps``, the
low-rank DML solvers' ``step(t, idx, eta)`` -> ``update``.
"""
from __future__ import annotations

import contextvars
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
from sklearn.utils.metaestimators import available_if

__all__ = ["legacy_decision_function", "legacy_decision_function_enabled",
           "LegacyDecisionFunction", "DeprecatedClassAttribute", "deprecated_alias"]

#: whether the deprecated ``decision_function(X, triplets)`` exists, per
#: thread / asyncio task (a context variable: one thread's block does not
#: change what another sees, and nested or overlapping blocks restore their
#: own value)
_DECISION_FUNCTION: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tripletml_legacy_decision_function", default=True)


@contextmanager
def legacy_decision_function(enabled: bool) -> Iterator[None]:
    """Switch the deprecated ``decision_function(X, triplets)`` of the triplet
    learners on or off inside a ``with`` block (in the current thread or
    task only).

    ``decision_function(X, triplets)`` was renamed ``triplet_score`` in 0.2.
    For one release the old name still works, with a FutureWarning; it is an
    :func:`sklearn.utils.metaestimators.available_if` method, so once it is
    switched off ``hasattr(model, "decision_function")`` is False and
    scikit-learn's ``check_estimator`` checks the learner as it will be
    after the deprecation (tripletml's own tests run the checks so)::

        with legacy_decision_function(False):
            check_estimator(OASIS())

    Parameters
    ----------
    enabled : bool
        Whether the deprecated alias exists inside the block (default
        outside any block: True, in this release).
    """
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"legacy_decision_function: enabled={enabled!r} must be True or False.")
    token = _DECISION_FUNCTION.set(bool(enabled))
    try:
        yield
    finally:
        _DECISION_FUNCTION.reset(token)


def legacy_decision_function_enabled() -> bool:
    """Whether the deprecated alias exists here (this thread / task)."""
    return _DECISION_FUNCTION.get()


def _legacy_decision_function_available(model: Any) -> bool:
    if not _DECISION_FUNCTION.get():
        raise AttributeError(f"{type(model).__name__} has no decision_function: a triplet "
                             "learner scores triplets with triplet_score(X, triplets).")
    return True


class LegacyDecisionFunction:
    """Mixin: the deprecated ``decision_function(X, triplets)``."""

    @available_if(_legacy_decision_function_available)
    def decision_function(self, X, triplets=None) -> np.ndarray:
        """Deprecated alias of ``triplet_score`` (``decision_function(X,
        triplets)``), kept for one release with a FutureWarning.

        A triplet learner has no per-sample decision function, so
        ``decision_function`` keeps scikit-learn's meaning by being absent:
        the alias exists only while :func:`legacy_decision_function` is on
        (the default in this release), and ``hasattr(model,
        "decision_function")`` is False once it is switched off or removed.
        """
        who = type(self).__name__
        if triplets is None:
            raise TypeError(f"{who}: a triplet learner has no per-sample decision_function; "
                            "score triplets with triplet_score(X, triplets) "
                            "(decision_function(X, triplets) is its deprecated name).")
        warnings.warn(f"{who}: decision_function(X, triplets) is deprecated since tripletml "
                      "0.2 and will be removed in 0.3; use triplet_score(X, triplets) (same "
                      "values).", FutureWarning, stacklevel=2)
        return self.triplet_score(X, triplets)


class DeprecatedClassAttribute:
    """A class attribute renamed in 0.2: reading it (on the class or an
    instance) warns and returns ``compute(cls)``."""

    def __init__(self, old: str, new: str, compute):
        self.old, self.new, self.compute = old, new, compute

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        cls = type(obj) if cls is None else cls
        warnings.warn(f"{cls.__name__}: {self.old} is deprecated since 0.2 and will be removed "
                      f"in 0.3; read {self.new}.", FutureWarning, stacklevel=2)
        return self.compute(cls)


def deprecated_alias(new_name: str, old_name: str, owner: str):
    """A method ``old_name`` that warns and calls ``new_name`` (same
    arguments)."""

    def alias(self, *args, **kwargs):
        warnings.warn(f"{owner}.{old_name} was renamed {new_name} in 0.2; the old name will be "
                      "removed in 0.3.", FutureWarning, stacklevel=2)
        return getattr(self, new_name)(*args, **kwargs)

    alias.__name__ = old_name
    alias.__doc__ = f"Deprecated alias of :meth:`{new_name}` (renamed in 0.2)."
    return alias
