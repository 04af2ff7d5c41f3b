"""metric-learn's keyword names given to tripletml: a TypeError that names
what to write instead.

A metric-learn user writes ``LMNN(k=5)``, ``ITML(prior="covariance")``,
``MMC(n_constraints=200)`` or ``SCML(beta=1e-5)``; Python's own answer is a
bare ``TypeError: __init__() got an unexpected keyword argument``.
:func:`check_init_keywords` (run by every learner's constructor, see
:meth:`tripletml.core.base.LearnerBase.__init_subclass__`) turns it into a
TypeError naming the estimator and tripletml's parameter (the table of
``docs/user_guide/migration.rst``); :func:`check_fit_keywords` does the same
for ``fit`` (metric-learn's ``ITML().fit(pairs, y, bounds=...)``).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["METRIC_LEARN_NAMES", "check_init_keywords", "check_fit_keywords", "wrap_init"]

_N_TRIPLETS = ("use n_triplets=n (each sampled triplet gives one similar and one dissimilar "
               "constraint, as metric-learn's n of each)")
_PRIOR = ("use preprocessing='whiten' for prior='covariance' (the prior is the identity of "
          "the preprocessed coordinates; prior='identity' is the default)")
_NO_CHUNKS = "no counterpart: RCA().fit(X, y) makes every class one chunklet"

#: metric-learn's keyword names and what to write in tripletml instead, per
#: learner (the ``"*"`` entry: any learner without its own); ``{who}`` is the
#: learner's name
METRIC_LEARN_NAMES: dict[str, dict[str, str]] = {
    "*": {
        "k": "{who} has no neighborhood size (LMNN's is n_neighbors, LFDA's k)",
        "prior": _PRIOR,
        "bounds": "{who} has no bounds (ITML's constructor parameter)",
        "n_constraints": "use n_triplets, the number of triplets sampled from the labels",
        "num_constraints": "use n_triplets, the number of triplets sampled from the labels",
        "beta": "{who} has no beta (SCML's beta is tripletml's alpha)",
        "num_dims": "use n_components",
        "convergence_threshold": "use tol",
        "convergence_tol": "use tol",
        "max_iters": "use max_iter",
        "learn_rate": "use eta0 where the learner has a step size",
    },
    "ITML": {"prior": _PRIOR, "A0": _PRIOR, "n_constraints": _N_TRIPLETS,
             "num_constraints": _N_TRIPLETS},
    "LMNN": {"k": "use n_neighbors",
             "learn_rate": "no counterpart: LMNN runs L-BFGS (no step size)",
             "min_iter": "no counterpart: L-BFGS stops by tol"},
    "MMC": {"n_constraints": "use n_pairs=2 * n (n_pairs counts both kinds, half similar "
                             "and half dissimilar)",
            "num_constraints": "use n_pairs=2 * n (n_pairs counts both kinds)",
            "prior": "no counterpart: MMC starts from the identity of the preprocessed "
                     "coordinates (preprocessing='whiten' for prior='covariance')",
            "init": "no counterpart: MMC starts from the identity of the preprocessed "
                    "coordinates",
            "max_proj": "no counterpart: the projection onto the constraints is exact",
            "diagonal_c": "no counterpart: the diagonal problem has no extra weight"},
    "SCML": {"beta": "use alpha", "gamma": "use eta0=1 / gamma", "output_iter":
             "use check_every", "n_constraints": "no counterpart: the triplets from labels "
                                                 "come from k_genuine and k_impostor"},
    "RCA": {"n_chunks": _NO_CHUNKS, "chunk_size": _NO_CHUNKS, "num_chunks": _NO_CHUNKS},
    "NCA": {"learning_rate": "no counterpart: NCA runs L-BFGS"},
    "KISSME": {"n_constraints": _N_TRIPLETS},
    "SML": {"prior": _PRIOR},
}


def _hint(who: str, name: str) -> str | None:
    own = METRIC_LEARN_NAMES.get(who, {})
    hint = own.get(name, METRIC_LEARN_NAMES["*"].get(name))
    return None if hint is None else hint.format(who=who)


def _message(who: str, where: str, bad: list[str], valid: list[str]) -> str:
    parts = []
    for name in bad:
        hint = _hint(who, name)
        if hint is None:
            parts.append(f"{who}: {where} got an unexpected keyword argument {name!r}")
        else:
            parts.append(f"{who}: {where} got an unexpected keyword argument {name!r} "
                         f"(metric-learn's name): {hint}")
    return ("; ".join(parts) + f". {who}'s {where} takes: {', '.join(valid)} "
            "(docs/user_guide/migration.rst maps metric-learn's names).")


def check_init_keywords(who: str, kwargs: dict, valid: list[str]) -> None:
    """A TypeError naming tripletml's parameter for each keyword of
    ``kwargs`` that ``valid`` (the constructor's parameters) lacks."""
    bad = [k for k in kwargs if k not in valid]
    if bad:
        raise TypeError(_message(who, "__init__()", bad, valid))


def check_fit_keywords(est: Any, kwargs: dict, valid: list[str]) -> None:
    """The same for ``fit``: ``bounds`` is ITML's constructor parameter
    (metric-learn passes it to ``fit``)."""
    who = type(est).__name__
    if not kwargs:
        return
    bad = list(kwargs)
    if "bounds" in bad and "bounds" in est.get_params():
        raise TypeError(f"{who}: fit() got an unexpected keyword argument 'bounds' "
                        f"(metric-learn's ITML.fit argument); in tripletml it is a "
                        f"constructor parameter, {who}(bounds=(u, l)).fit(...).")
    raise TypeError(_message(who, "fit()", bad, valid))


def wrap_init(cls: type) -> None:
    """Wrap the ``__init__`` that ``cls`` defines so that unknown keywords
    raise :func:`check_init_keywords`' error (``functools.wraps`` keeps the
    signature that scikit-learn's ``get_params`` reads)."""
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, "_checks_keywords", False):
        return
    params = inspect.signature(init).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n in params if n != "self"]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for k in kwargs:
            if k not in params:
                check_init_keywords(type(self).__name__, kwargs, valid)
        init(self, *args, **kwargs)

    __init__._checks_keywords = True
    cls.__init__ = __init__
