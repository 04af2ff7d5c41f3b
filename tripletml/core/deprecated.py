"""What is left of the names tripletml 0.2 deprecated (all removed in 0.3).

Removed in 0.3: ``decision_function(X, triplets)`` (use
``triplet_score(X, triplets)``; ``decision_function(X)`` scores tuples of
points after a fit on tuples) with its switch ``legacy_decision_function``,
``similarity_kind`` (read ``embedding_similarity``),
``tripletml.core.base.History`` (:class:`tripletml.engine.History`),
SDCA's ``M_`` (``W_``; files of 0.1 that store ``M_`` still load),
``ITMLSolver.run`` (``run_sweeps``) and the low-rank DML solvers' ``step``
(``update``).

:func:`_legacy_decision_function_available` remains only for a module that
still guards its own alias with it (:class:`tripletml.auto.AutoSimilarity`):
it always says "absent", so that alias is gone too; delete this module
once nothing imports it.
"""
from __future__ import annotations

from typing import Any

__all__: list[str] = []


def _legacy_decision_function_available(model: Any) -> bool:
    """Never: ``decision_function(X, triplets)`` was removed in 0.3 (an
    :func:`~sklearn.utils.metaestimators.available_if` check, so
    ``hasattr(model, "decision_function")`` is False)."""
    raise AttributeError(f"{type(model).__name__} has no decision_function(X, triplets): it "
                         "was removed in tripletml 0.3; score triplets with "
                         "triplet_score(X, triplets).")
