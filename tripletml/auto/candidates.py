"""The candidate space of :class:`~tripletml.auto.AutoSimilarity`.

A *candidate* is a learner, fixed values of its key hyper-parameters and a
*budget* parameter (``n_triplets`` or ``max_iter``) that grows from round to
round of the race; a *spec* (a dict ``{"learner", "grid", "budget",
"stage"}``) crosses its grid into candidates.  This module holds the default
specs (:data:`DEFAULT_CANDIDATES`, :data:`FAST_CANDIDATES`), the
:class:`_Candidate` racer and the rules that check and expand ``candidates``
(:func:`_expand_candidates`).
"""
from __future__ import annotations

import itertools
from typing import Optional

from sklearn.base import BaseEstimator, clone

from tripletml.core.preprocessing import PREPROCESSING_MODES
from tripletml.core.validation import check_scalar_param
from tripletml.registry import FEATURE_KINDS, get_entry
from tripletml.triplets import is_class_sampling

__all__ = ["DEFAULT_CANDIDATES", "FAST_CANDIDATES", "KNN_CANDIDATES", "default_candidates"]

_WHO = "AutoSimilarity"

#: The default race (chosen from measurements on the ten shipped sets; see
#: docs/user_guide/auto.rst and results/auto/).  ``grid`` lists values to
#: cross, ``budget`` is ``(parameter, full value)`` or None (fitted once),
#: ``stage`` orders the candidates by cost: stage 0 is the cheap rung, stage 1
#: the costly family (measured costs: BENCHMARKS.md), raced only while it beats the cheap rung's best validation score.  The
#: preprocessing of every candidate is explicit (not the learners' "auto").
#: the cheap racers both races share (no-learning baselines, the closed form,
#: one-pass OASIS)
_EUCLIDEAN = {"learner": "Euclidean", "grid": {"preprocessing": [None, "standardize", "whiten"]},
              "budget": None, "stage": 0}
_KISSME = {"learner": "KISSME", "grid": {"preprocessing": ["standardize"],
                                         "shrinkage": [0.0, 0.01, 0.1]},
           "budget": None, "stage": 0}
#: RCA is equivariant to invertible linear maps of X: one preprocessing
#: (only its scale-free ridge sees the column scales)
_RCA = {"learner": "RCA", "grid": {"preprocessing": ["standardize"]}, "budget": None, "stage": 0}
_OASIS = {"learner": "OASIS", "grid": {"preprocessing": ["sphere", "whiten"], "C": [0.1]},
          "budget": ("n_triplets", 10000), "stage": 0}

DEFAULT_CANDIDATES: tuple[dict, ...] = (
    _EUCLIDEAN,
    _KISSME,
    _RCA,
    _OASIS,
    {"learner": "SDCA", "grid": {"preprocessing": ["sphere", "whiten"],
                                 "alpha": [1e-2, 1e-3], "max_iter": [3], "tol": [None]},
     "budget": ("n_triplets", 10000), "stage": 0},
    # five epochs, no tolerance: the race's measured cost (COMET's own
    # default runs to tol=1e-2, up to 100 epochs)
    {"learner": "COMET", "grid": {"preprocessing": ["sphere", "whiten"],
                                  "max_iter": [5], "tol": [None]},
     "budget": ("n_triplets", 10000), "stage": 0},
    {"learner": "SML", "grid": {"preprocessing": [None, "standardize", "whiten"],
                                "n_triplets": [1500], "tol": [None]},
     "budget": ("max_iter", 300), "stage": 1},
)

#: The neighbourhood learners, whose objectives are the k-NN rule itself
#: (NCA: the expected leave-one-out accuracy of the stochastic 1-NN rule;
#: LMNN: k target neighbours pulled in, impostors pushed out by a margin;
#: SCML: the same triplets on a sparse basis; LFDA: Fisher's ratio on local,
#: within-neighbourhood scatter).  LFDA is a closed form (one generalized
#: eigenproblem): the cheap rung; NCA, LMNN and SCML are iterative, O(n^2)
#: per NCA step: the costly stage, raced above the cheap rung's best and
#: grown by their own iteration cap (the race's pilot round fits them at
#: 1/factor^2 of it and stops them when the next round would overrun
#: ``time_budget``).  Each keeps its own preprocessing rule ("standardize"
#: for these Mahalanobis learners), stated explicitly.
_LFDA = {"learner": "LFDA", "grid": {"preprocessing": ["standardize"]}, "budget": None,
         "stage": 0}
#: NCA last, in a stage of its own: every L-BFGS evaluation is O(n^2 (r +
#: d)) (all pairs' softmax), which the race's resource check (dense d x d
#: work) does not see, so it only starts when LMNN and SCML left time
_NEIGHBOURHOOD = (
    {"learner": "LMNN", "grid": {"preprocessing": ["standardize"]},
     "budget": ("max_iter", 1000), "stage": 2},
    {"learner": "SCML", "grid": {"preprocessing": ["standardize"]},
     "budget": ("max_iter", 10000), "stage": 2},
    {"learner": "NCA", "grid": {"preprocessing": ["standardize"]},
     "budget": ("max_iter", 100), "stage": 3},
)

#: The race for ``scoring="knn_accuracy"`` (and ``"knn_accuracy@k"``): the
#: default race plus the neighbourhood learners (LFDA in the cheap rung,
#: LMNN / SCML in a stage after SML, NCA after them, each stage raced only
#: while it beats the best of the stages before it).  Measured: results/auto/auto_knn.md.
KNN_CANDIDATES: tuple[dict, ...] = DEFAULT_CANDIDATES[:4] + (_LFDA,) \
    + DEFAULT_CANDIDATES[4:] + _NEIGHBOURHOOD


def default_candidates(scoring: str = "map") -> tuple[dict, ...]:
    """The default race for ``scoring``: :data:`KNN_CANDIDATES` for the
    k-NN accuracies (``"knn_accuracy"``, ``"knn_accuracy@k"``), whose
    criterion is the neighbourhood learners' own objective, else
    :data:`DEFAULT_CANDIDATES` (the ``map`` / ``precision@k`` race, unchanged)."""
    if isinstance(scoring, str) and scoring.startswith("knn_accuracy"):
        return KNN_CANDIDATES
    return DEFAULT_CANDIDATES


#: The cheapest race that still validates: the no-learning baselines, KISSME
#: (closed form) and OASIS (sphere, whitened), one stage: the floor of a
#: validated search (its time and its mAP against the default race:
#: BENCHMARKS.md, results/auto/auto_floor.md).
FAST_CANDIDATES: tuple[dict, ...] = (_EUCLIDEAN, _KISSME, _OASIS)


class _Candidate:
    """One racer: a learner, fixed parameters, a budget parameter."""

    def __init__(self, name: str, template, params: dict, budget: Optional[tuple],
                 stage: int = 0):
        self.name = name
        self.stage = stage                  # 0: the cheap rung; higher: costlier, later
        self.template = template            # an unfitted estimator (cloned per fit)
        self.params = params                # including "preprocessing" when given
        self.budget = budget                # (param, full) or None
        #: False for the no-learning baselines: fitted and scored whatever
        #: the time budget (the race's fits of the others run under its deadline)
        self.learns = bool(getattr(type(template), "_learns", True))
        has = template.get_params()
        # as the learner gets it: the grid's value, else the template's own
        self.prep = params["preprocessing"] if "preprocessing" in params \
            else has.get("preprocessing")
        # a warm round adds random class triplets: only for class sampling
        self.warm = (budget is not None and budget[0] == "n_triplets"
                     and hasattr(template, "partial_fit")
                     and is_class_sampling(params.get("sampling", has.get("sampling", "class")))
                     and params.get("max_iter", has.get("max_iter", 1)) == 1)

    def make(self, budget_value: Optional[int], seed: int):
        """A fresh clone of the template with the candidate's parameters, the
        budget parameter at ``budget_value`` and ``random_state=seed`` (when
        the learner has one)."""
        est = clone(self.template)
        p = dict(self.params)
        if self.budget is not None:
            p[self.budget[0]] = budget_value
        if "random_state" in est.get_params():
            p["random_state"] = seed
        return est.set_params(**p)

    def describe(self, budget_value) -> dict:
        """``{"learner": name, **parameters, budget parameter: value}``."""
        d = {"learner": self.name, **self.params}
        if self.budget is not None:
            d[self.budget[0]] = budget_value
        return d


def _learner_template(spec_learner, where: str):
    """``(name, unfitted template)`` of a spec's ``"learner"``: a registered
    triplet learner's name (any case) or an unfitted learner instance."""
    if isinstance(spec_learner, str):
        try:
            entry = get_entry(spec_learner, case_sensitive=False, kind=FEATURE_KINDS)
        except ValueError as exc:
            raise ValueError(f"{_WHO}: {where}: {exc}") from None
        if entry.kind != "triplet":
            raise ValueError(f"{_WHO}: {where}: {entry.name} is a multi-label ranker; "
                             "AutoSimilarity races triplet learners only.")
        return entry.name, entry.cls()
    if isinstance(spec_learner, BaseEstimator) and hasattr(spec_learner, "similarity"):
        return type(spec_learner).__name__, spec_learner
    raise TypeError(f"{_WHO}: {where}: 'learner' must be a learner name or an unfitted "
                    f"triplet learner instance, got {type(spec_learner).__name__}.")


def _expand_candidates(candidates) -> list[_Candidate]:
    """Check the specs of ``candidates`` (None: :data:`DEFAULT_CANDIDATES`)
    and cross each spec's grid into racers.

    Raises
    ------
    TypeError, ValueError
        A spec that is not a dict with a ``"learner"``, an unknown key, a
        grid parameter the learner does not have, an unknown preprocessing,
        an empty grid list, a malformed budget, or no candidate at all.
    """
    specs = DEFAULT_CANDIDATES if candidates is None else candidates
    if isinstance(specs, (str, bytes, dict)) or not hasattr(specs, "__iter__"):
        raise TypeError(f"{_WHO}: parameter candidates must be None or a list of dicts "
                        f"with keys 'learner', 'grid', 'budget'; got {type(specs).__name__}.")
    out: list[_Candidate] = []
    for i, spec in enumerate(specs):
        where = f"candidates[{i}]"
        if not isinstance(spec, dict) or "learner" not in spec:
            raise TypeError(f"{_WHO}: {where} must be a dict with a 'learner' key, got "
                            f"{spec!r}.")
        extra = set(spec) - {"learner", "grid", "budget", "stage"}
        if extra:
            raise ValueError(f"{_WHO}: {where} has unknown key(s) {sorted(extra)}; the keys "
                             "are 'learner', 'grid', 'budget' and 'stage'.")
        stage = spec.get("stage", 0)
        check_scalar_param(stage, f"{where} stage", _WHO, kind="int", low=0)
        name, template = _learner_template(spec["learner"], where)
        has = template.get_params()
        grid = spec.get("grid") or {}
        if not isinstance(grid, dict):
            raise TypeError(f"{_WHO}: {where}['grid'] must be a dict of lists.")
        for k, v in grid.items():
            if k not in has:
                raise ValueError(f"{_WHO}: {where}: {name} has no parameter {k!r}; its "
                                 f"parameters: {', '.join(has) or 'none'}.")
            if k == "preprocessing":
                bad = [m for m in v if m not in PREPROCESSING_MODES]
                if bad:
                    raise ValueError(f"{_WHO}: {where}: preprocessing values {bad} are not "
                                     f"among {list(PREPROCESSING_MODES)}.")
            if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__") or len(list(v)) == 0:
                raise TypeError(f"{_WHO}: {where}['grid'][{k!r}] must be a non-empty list "
                                "of values.")
        budget = spec.get("budget")
        if budget is not None:
            if (not isinstance(budget, (tuple, list)) or len(budget) != 2
                    or not isinstance(budget[0], str)):
                raise TypeError(f"{_WHO}: {where}['budget'] must be None or (parameter, "
                                f"full value), got {budget!r}.")
            if budget[0] not in has:
                raise ValueError(f"{_WHO}: {where}: budget parameter {budget[0]!r} is not a "
                                 f"parameter of {name}.")
            check_scalar_param(budget[1], f"{where} budget", _WHO, kind="int", low=1)
            budget = (budget[0], int(budget[1]))
        keys = list(grid)
        for values in itertools.product(*(list(grid[k]) for k in keys)):
            out.append(_Candidate(name, template, dict(zip(keys, values)), budget,
                                  int(stage)))
    if not out:
        raise ValueError(f"{_WHO}: candidates is empty; give at least one learner.")
    return out

