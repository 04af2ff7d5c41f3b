"""The one list of tripletml's public learners.

Every place that needs "all the learners" reads it: :func:`tripletml.load_model`
(the only classes a model file may name: every entry), and, of the learners
on features (:data:`FEATURE_KINDS`), ``tripletml.__all__``, the generic tests
(``tests/_estimators.py``), the command line (``tripletml fit``) and the
demo.  A new learner is added here and nowhere else.

An entry holds:

``name``
    The class name (also the name ``tripletml fit`` accepts, case-insensitive).
``module``
    The module defining the class, relative to ``tripletml`` (imported lazily:
    this module imports no learner, so ``base`` / ``persistence`` can use it
    without an import cycle).
``kind``
    ``"triplet"`` (``fit(X, y | triplets)``, a similarity between samples),
    ``"multilabel"`` (``fit(X, Y)`` with a binary indicator Y, label scores) or
    ``"embedding"`` (``fit(triplets)`` of item ids, no features X: the ordinal
    embeddings of :mod:`tripletml.embedding`).  Only the first two are
    fitted on feature rows (:data:`FEATURE_KINDS`): whatever assumes
    ``fit(X, y)`` (the package namespace, ``tripletml fit``, the demo, the
    generic learner tests) asks for those kinds; ``load_model`` allows every
    kind.
``tests``
    Parameters of quick-to-fit test instances (one dict per variant; a
    ``random_state`` of 0 is added where the learner has one).
``alt``
    ``{param: alternative value}`` for the get/set_params round trip (every
    value valid, so a fit with them works).
``demo``, ``demo_label``
    Parameters and row label in ``tripletml demo`` (None: not shown; the
    demo adds ``random_state``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = ["LearnerEntry", "REGISTRY", "KINDS", "FEATURE_KINDS", "entries", "get_entry",
           "learner_class", "learner_names"]

KINDS = ("triplet", "multilabel", "embedding")
#: the kinds fitted on feature rows, ``fit(X, y)`` (not the item embeddings)
FEATURE_KINDS = ("triplet", "multilabel")


@dataclass(frozen=True)
class LearnerEntry:
    name: str
    module: str
    kind: str
    tests: tuple[dict, ...]
    alt: dict = field(default_factory=dict)
    demo: Optional[dict] = None
    demo_label: Optional[str] = None

    @property
    def cls(self) -> type:
        """The learner class (imports its module on first use)."""
        mod = importlib.import_module(f".{self.module}", "tripletml")
        return getattr(mod, self.name)

    def make(self, variant: int = 0, **params: Any):
        """A quick test instance (variant ``variant`` of ``tests``)."""
        cls = self.cls
        kw = dict(self.tests[variant])
        if "random_state" in cls().get_params():
            kw.setdefault("random_state", 0)
        kw.update(params)
        return cls(**kw)

    def make_demo(self, random_state: int = 0):
        """The demo instance, seeded with ``random_state`` where it has one."""
        cls = self.cls
        kw = dict(self.demo or {})
        if "random_state" in cls().get_params():
            kw["random_state"] = random_state
        return cls(**kw)

    def test_ids(self) -> list[str]:
        """pytest ids of the test variants (``Name`` or ``Name-<variant>``)."""
        if len(self.tests) == 1:
            return [self.name]
        return [f"{self.name}-{v.get('solver', i)}" for i, v in enumerate(self.tests)]


#: the alternative ``preprocessor`` of every triplet learner: an array of
#: rows (metric-learn's preprocessor), which leaves inputs that are already
#: float rows as they are, so fits with the other alternatives still work;
#: one element, so that ``==`` in the round-trip tests is a plain bool
_PREPROCESSOR_ALT = np.zeros((1, 1))

_FACTORED_ALT = {"rank": 3, "preprocessing": "whiten", "max_iter": 2, "n_triplets": 150, "init": "random",
                 "random_state": 3, "verbose": 0}

REGISTRY: tuple[LearnerEntry, ...] = (
    LearnerEntry("Euclidean", "algorithms.baselines.estimator", "triplet", tests=({},),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "standardize"}, demo={}, demo_label="Euclidean"),
    LearnerEntry("DotProduct", "algorithms.baselines.estimator", "triplet", tests=({},),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center"}, demo={}, demo_label="DotProduct"),
    LearnerEntry("OASIS", "algorithms.oasis.estimator", "triplet", tests=(dict(n_triplets=200),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "C": 0.5, "max_iter": 2, "tol": 0.5, "n_triplets": 150, "init": "zeros", "average": False,
                      "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None, C=0.1, n_triplets=50000, max_iter=3), demo_label="OASIS"),
    LearnerEntry("SDCA", "algorithms.sdca.estimator", "triplet", tests=(dict(n_triplets=200, max_iter=3),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "alpha": 0.05, "max_iter": 2, "n_triplets": 150, "output": "random",
                      "average_start": 0.25, "tol": 1e-2, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None, alpha=0.0025, n_triplets=50000, max_iter=5, tol=None), demo_label="SDCA"),
    LearnerEntry("COMET", "algorithms.comet.estimator", "triplet", tests=(dict(n_triplets=200, max_iter=1, tol=None),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "alpha": 0.5, "beta": 0.01, "loss": "log", "max_iter": 2, "tol": 1e-3,
                      "n_triplets": 150, "step_fraction": 0.3, "eta0": 0.5,
                      "refactor_every": 3, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None, n_triplets=10000, max_iter=5, tol=None), demo_label="COMET"),
    LearnerEntry("SparseCOMET", "algorithms.comet.estimator", "triplet",
                 tests=(dict(n_triplets=200, max_iter=1, tol=None),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "alpha": 0.5, "beta": 0.01, "loss": "squared_hinge", "group_alpha": 0.5,
                      "tol": 1e-3,
                      "max_iter": 2, "n_triplets": 150, "eta0": 0.5, "step_fraction": 0.3,
                      "refactor_every": 3, "random_state": 3, "verbose": 0}),
    LearnerEntry("LORETA", "algorithms.loreta.estimator", "triplet",
                 tests=(dict(rank=2, n_triplets=200, eta0=0.005),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "rank": 3, "eta0": 0.01, "max_iter": 2, "tol": 0.5, "n_triplets": 150,
                      "batch_size": 1, "solver": "general", "init": "random",
                      "pinv_check_every": 10, "pinv_tol": 1e-6, "random_state": 3,
                      "verbose": 0},
                 demo=dict(preprocessing=None, rank=10, eta0=0.01, n_triplets=50000), demo_label="LORETA k=10"),
    LearnerEntry("IterativePA", "algorithms.factored.estimator", "triplet",
                 tests=(dict(rank=2, n_triplets=200, C=0.1),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, **_FACTORED_ALT, "C": 0.5},
                 demo=dict(preprocessing=None, rank=10, C=0.1, n_triplets=50000), demo_label="PA k=10"),
    LearnerEntry("NaivePA", "algorithms.factored.estimator", "triplet",
                 tests=(dict(rank=2, n_triplets=200, C=0.1),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, **_FACTORED_ALT, "C": 0.5},
                 demo=dict(preprocessing=None, rank=10, C=0.1, n_triplets=50000), demo_label="PA v2 k=10"),
    LearnerEntry("FactoredGD", "algorithms.factored.estimator", "triplet",
                 tests=(dict(rank=2, n_triplets=200, eta0=0.002),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, **_FACTORED_ALT, "eta0": 0.05},
                 demo=dict(preprocessing=None, rank=10, eta0=0.01, n_triplets=50000), demo_label="GD k=10"),
    LearnerEntry("LowRankDML", "algorithms.lowrank_dml.estimator", "triplet",
                 tests=tuple(dict(solver=s, n_triplets=200, max_iter=20, batch_size=20,
                                  eta0=0.1, alpha=0.01) for s in ("incsvd", "sgd")),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "alpha": 0.05, "loss": "lmnn", "eta0": 0.05, "batch_size": 10,
                      "max_iter": 15, "constraint": "spectral", "tau": 2.0, "n_triplets": 150,
                      "learning_rate": "constant", "push_weight": 0.5, "max_time": 100.0,
                      "eval_every": 3, "tol": 1e-4, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None, alpha=1e-3, constraint=None, max_iter=500, n_triplets=20000,
                           eval_every=0), demo_label="LowRankDML"),
    LearnerEntry("SML", "algorithms.sml.estimator", "triplet", tests=(dict(n_triplets=100, max_iter=20, tol=None),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "alpha": 0.1, "mu": 0.01, "solver": "subgradient", "max_iter": 15,
                      "tol": 1e-3, "n_triplets": 80, "sampling": "knn", "line_search": True,
                      "eta0": 0.05, "rank_tol": 1e-4, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None, alpha=1e-2, max_iter=300, tol=None), demo_label="SML"),
    LearnerEntry("KISSME", "algorithms.kissme.estimator", "triplet",
                 tests=(dict(), dict(n_triplets=300)),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "shrinkage": 0.1, "n_triplets": 150,
                      "rank_tol": 1e-4, "random_state": 3},
                 demo=dict(preprocessing=None), demo_label="KISSME"),
    LearnerEntry("RCA", "algorithms.rca.estimator", "triplet",
                 tests=(dict(),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "n_components": 2, "regularization": 0.1},
                 demo=dict(preprocessing=None), demo_label="RCA"),
    LearnerEntry("ITML", "algorithms.itml.estimator", "triplet",
                 tests=(dict(n_triplets=200, max_iter=20, tol=None),
                        dict(n_triplets=100, gamma=float("inf"), max_iter=30, tol=None)),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "gamma": 0.5, "bounds": (1.0, 10.0),
                      "n_triplets": 150, "max_iter": 15, "tol": 1e-3, "rank_tol": 1e-4,
                      "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None), demo_label="ITML"),
    LearnerEntry("LFDA", "algorithms.lfda.estimator", "triplet",
                 tests=(dict(),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "n_components": 2, "k": 3,
                      "embedding_type": "orthonormalized"},
                 demo=dict(preprocessing=None), demo_label="LFDA"),
    LearnerEntry("MMC", "algorithms.mmc.estimator", "triplet",
                 tests=(dict(n_pairs=200), dict(n_pairs=200, diagonal=True)),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "diagonal": True, "n_components": 2, "n_pairs": 150,
                      "max_iter": 300,
                      "tol": 1e-4, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None), demo_label="MMC"),
    LearnerEntry("SCML", "algorithms.scml.estimator", "triplet",
                 tests=(dict(n_basis=20, max_iter=300, check_every=100),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "n_components": 2, "preprocessing": "center", "alpha": 1e-4, "basis": "triplet_diffs",
                      "n_basis": 15, "k_genuine": 2, "k_impostor": 5, "eta0": 100.0,
                      "batch_size": 5, "max_iter": 200, "tol": None, "check_every": 50,
                      "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None), demo_label="SCML"),
    LearnerEntry("LMNN", "algorithms.lmnn.estimator", "triplet",
                 tests=(dict(max_iter=20, tol=None),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "n_components": 2, "n_neighbors": 2,
                      "regularization": 0.3, "max_iter": 15, "tol": 1e-3, "init": "pca",
                      "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None), demo_label="LMNN"),
    LearnerEntry("NCA", "algorithms.nca.estimator", "triplet",
                 tests=(dict(max_iter=20, tol=None),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "n_components": 2, "init": "pca",
                      "max_iter": 15, "tol": 1e-3, "random_state": 3, "verbose": 0},
                 demo=dict(preprocessing=None), demo_label="NCA"),
    LearnerEntry("LinearTSTE", "algorithms.linear_tste.estimator", "triplet",
                 tests=(dict(n_triplets=300, max_iter=20),),
                 alt={"preprocessor": _PREPROCESSOR_ALT, "preprocessing": "center", "n_components": 2, "alpha": 2.0,
                      "regularization": 0.1, "init": "random", "n_triplets": 150, "sampling": "knn",
                      "max_iter": 15, "tol": 1e-3, "random_state": 3, "verbose": 0},
                 demo=dict(), demo_label="LinearTSTE"),
    LearnerEntry("LORETAMultilabel", "algorithms.multilabel.estimator", "multilabel",
                 tests=(dict(rank=2, eta0=0.1, max_iter=2),),
                 alt={"rank": 3, "eta0": 0.05, "max_iter": 3, "init": "random",
                      "fit_intercept": False, "pinv_check_every": 10, "pinv_tol": 1e-6,
                      "random_state": 3, "verbose": 0}),
    LearnerEntry("IterativePAMultilabel", "algorithms.multilabel.estimator", "multilabel",
                 tests=(dict(rank=2, C=0.1, max_iter=2),),
                 alt={"rank": 3, "C": 0.5, "max_iter": 3, "init": "random",
                      "fit_intercept": False, "random_state": 3, "verbose": 0}),
    LearnerEntry("MatrixPerceptron", "algorithms.multilabel.estimator", "multilabel",
                 tests=(dict(eta0=0.1, max_iter=2),),
                 alt={"eta0": 0.05, "max_iter": 3, "fit_intercept": False, "random_state": 3,
                      "verbose": 0}),
    # ordinal embeddings of item ids: fit(triplets), no X
    LearnerEntry("SOE", "embedding.soe", "embedding",
                 tests=(dict(n_components=2, max_iter=200, n_init=1),),
                 alt={"n_components": 3, "margin": 0.5, "max_iter": 20, "n_init": 2,
                      "tol": 1e-5, "random_state": 3, "verbose": 0}),
    LearnerEntry("STE", "embedding.ste", "embedding",
                 tests=(dict(n_components=2, max_iter=200, n_init=1),),
                 alt={"n_components": 3, "regularization": 0.5, "max_iter": 20, "n_init": 2,
                      "tol": 1e-5, "random_state": 3, "verbose": 0}),
    LearnerEntry("TSTE", "embedding.tste", "embedding",
                 tests=(dict(n_components=2, max_iter=200, n_init=1),),
                 alt={"n_components": 3, "alpha": 2.0, "regularization": 0.5, "max_iter": 20,
                      "n_init": 2, "tol": 1e-5, "random_state": 3, "verbose": 0}),
    LearnerEntry("BilinearEmbedding", "embedding.bilinear", "embedding",
                 tests=(dict(n_components=2),),
                 alt={"n_components": 3, "random_state": 3}),
)

_BY_NAME = {e.name: e for e in REGISTRY}
_BY_LOWER = {e.name.lower(): e for e in REGISTRY}


def _kinds(kind: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """``kind`` (None: every kind; a kind; a tuple of kinds) as a tuple."""
    if kind is None:
        return KINDS
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown learner kind {k!r}; one of {KINDS}")
    return kinds


def entries(kind: str | tuple[str, ...] | None = None) -> tuple[LearnerEntry, ...]:
    """Registry entries, all or of one ``kind`` (or a tuple of kinds, e.g.
    :data:`FEATURE_KINDS`)."""
    kinds = _kinds(kind)
    return tuple(e for e in REGISTRY if e.kind in kinds)


def learner_names(kind: str | tuple[str, ...] | None = None) -> list[str]:
    """Class names of the registered learners, in registry order."""
    return [e.name for e in entries(kind)]


def get_entry(name: str, *, case_sensitive: bool = True,
              kind: str | tuple[str, ...] | None = None) -> LearnerEntry:
    """The entry of a learner by class name (``case_sensitive=False``: any
    case, as the CLI accepts), of any kind or of ``kind`` (a kind or a tuple
    of kinds).  Raises ValueError for an unknown name (or one of another
    kind)."""
    kinds = _kinds(kind)
    entry = None
    if isinstance(name, str):
        entry = _BY_NAME.get(name) if case_sensitive else _BY_LOWER.get(name.lower())
    if entry is None or entry.kind not in kinds:
        known = ", ".join(e.name for e in REGISTRY if e.kind in kinds)
        raise ValueError(f"unknown learner {name!r}; known: {known}")
    return entry


def learner_class(name: str) -> type:
    """The class of a registered learner (exact class name)."""
    return get_entry(name).cls
