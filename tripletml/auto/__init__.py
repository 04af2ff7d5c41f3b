"""``AutoSimilarity``: one call that picks the learner and tunes it.

The search is a race (successive halving) among *candidates* -- a learner,
fixed values of its key hyper-parameters, and a *budget* parameter
(``n_triplets`` or ``max_iter``) that grows from round to round -- scored by
triplet-aware validation on the training data, and ordered by cost:

1. **Split by items.**  The training rows are split, stratified by class, into
   *fit items* and *validation items* (``n_splits`` such splits, each with
   ``validation_size`` of the rows held out; at most ``max_validation_items``
   of them, a stratified subset, are scored).  A candidate is fitted on the
   fit items only: the learner receives ``X[fit]`` and triplets sampled among
   those rows, so a validation item never appears in a training triplet (nor
   in the statistics of a ``preprocessing`` step).
2. **Score.**  Retrieval mAP of the validation items against the validation
   items (leave-one-out, :func:`tripletml.metrics.evaluate_retrieval`), the
   mean over the splits.
3. **Stages, cheapest first.**  Every candidate has a ``stage`` (0 = the cheap
   rung: Euclidean variants, KISSME, RCA, OASIS, SDCA with few passes, COMET; 1 = the
   costly family: SML).  The stages are raced one after the other.  The best
   validation score of the stages already raced is the *bar*: a candidate of
   a later stage that scores below it after any of its rounds leaves the race
   (``stopped = "below_bar: ..."`` in ``cv_results_``), so the costly family
   is only paid for while it can still win.  A later stage always starts with
   a *pilot* round at ``factor**-2`` of its full budget (SML: 33 of 300
   iterations); a stage that would start after ``time_budget`` is not raced
   (``stopped = "max_time: ..."``).
4. **Race within a stage.**  Round ``r`` (of ``R``) fits every surviving
   candidate with the fraction ``factor ** -(R - 1 - r)`` of its full budget
   and keeps the best ``ceil(n / factor)``; the last round uses the full
   budget, and a lone surviving racer skips straight to it.  Online learners
   fitted in one pass (``partial_fit`` and ``max_iter == 1``, e.g. OASIS) are
   *warm-started*: a later round continues the previous round's model with
   ``partial_fit`` on the extra triplets instead of refitting.  The others
   (SDCA, SML, ...) are refitted from scratch with the larger budget.
   Candidates without a budget (the no-learning baselines) are fitted once.
5. **Refit.**  The best survivor of all stages is refitted on all training
   rows with the parameters and budget it won with, and becomes
   ``best_estimator_``.

Persistence: :meth:`AutoSimilarity.save` writes the *winning learner* (a
plain registered learner file, no pickle) with the search summary in its
metadata as the fitted attribute ``auto_search_``; :func:`tripletml.load_model`
of that file returns the winning learner, not an ``AutoSimilarity``.
"""
from __future__ import annotations

import contextlib
import copy
import math
import numbers
import os
import sys
import time
import warnings
from typing import Any, Optional

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from tripletml.core.deprecated import _legacy_decision_function_available
from tripletml.core.preprocessing import PREPROCESSING_MODES
from tripletml.core.validation import check_scalar_param, check_X

__all__ = ["AutoSimilarity", "DEFAULT_CANDIDATES", "FAST_CANDIDATES"]

_WHO = "AutoSimilarity"
#: the validation scores of a fit on comparisons (tripletml.auto.comparisons)
_COMPARISON_SCORES = ("triplet_accuracy", "roc_auc")

#: The default race (chosen from measurements on the ten shipped sets; see
#: docs/user_guide/auto.rst and results/auto/).  ``grid`` lists values to
#: cross, ``budget`` is ``(parameter, full value)`` or None (fitted once),
#: ``stage`` orders the candidates by cost: stage 0 is the cheap rung (tens of
#: milliseconds per fit on the shipped sets), stage 1 the costly family, raced
#: only while it beats the cheap rung's best validation score.  The
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

#: The cheapest race that still validates: the no-learning baselines, KISSME
#: (closed form) and OASIS (sphere, whitened), one stage.  ``AutoSimilarity(candidates=
#: FAST_CANDIDATES)`` takes 13-140 ms of CPU on the shipped sets except letter
#: (0.62 s; results/auto/auto_floor.md) -- the floor of a validated search --
#: at an mAP within .03 of the default race (lower where SDCA or COMET win:
#: vehicle, balance-scale, wine).
FAST_CANDIDATES: tuple[dict, ...] = (_EUCLIDEAN, _KISSME, _OASIS)

# --------------------------------------------------------------------------
# resources: what a candidate's fit cannot avoid, decided before it starts
# --------------------------------------------------------------------------
#: Lower bounds on the dense d x d work of one fit, by learner class name:
#: ``(d x d float64 arrays held at once, symmetric eigendecompositions, d x
#: d matrix products[, rank-one updates of a d x d model])``; an item may be
#: a function of the candidate's parameters.  A rank-one update ``W += a
#: b^T`` touches ``nnz(a) nnz(b)`` entries: ``rho^2 d^2`` for rows of
#: density ``rho`` (1 once centred); OASIS makes one per triplet, SDCA one
#: per triplet and pass.  A learned Mahalanobis matrix is factored at least once
#: (``psd_factor``'s ``eigh`` for ``components_``) and held with that factor;
#: KISSME inverts two d x d covariances by ``eigh`` and a product each, then
#: factors M (it checks memory for six d x d arrays itself); RCA holds its
#: two scatters, M, its factor and the span's basis, with the eigh of the
#: total scatter and the generalised (Cholesky + eigh) whitening; SML factors its
#: d x d iterate at every iteration (the PSD projection / Lemma 3) and once
#: at the end; the bilinear learners hold one dense d x d ``W_`` (written in
#: full by every fit); the factored learners (a ``rank``) and the
#: no-learning baselines hold none.  A learner not listed is judged by its
#: kind: a Mahalanobis learner as ``(2, 1, 0)``, a bilinear one without a
#: ``rank`` parameter as ``(1, 0, 0)``, anything else as free.
_DENSE_WORK: dict[str, tuple] = {
    "Euclidean": (0, 0, 0), "DotProduct": (0, 0, 0),
    "KISSME": (6, 3, 2), "RCA": (5, 2, 3), "ITML": (2, 1, 0),
    "SML": (2, lambda p: int(p.get("max_iter") or 1) + 1, 0),
    "OASIS": (1, 0, 0, lambda p: int(p.get("n_triplets") or 0)),
    "SDCA": (1, 0, 0, lambda p: int(p.get("n_triplets") or 0) * int(p.get("max_iter") or 1)),
    "COMET": (1, 0, 0), "SparseCOMET": (1, 0, 0),
    "LowRankDML": (0, 0, 0), "LORETA": (0, 0, 0), "FactoredGD": (0, 0, 0),
    "IterativePA": (0, 0, 0), "NaivePA": (0, 0, 0),
}
#: flops of a symmetric eigendecomposition with eigenvectors, at least: the
#: tridiagonal reduction (4/3 d^3) and the back-transformation of the
#: eigenvectors (a d x d product, 2 d^3); of a product: 2 d^3
_EIGH_FLOPS, _PRODUCT_FLOPS = 10.0 / 3.0, 2.0


def _dense_work(template, params: dict) -> tuple[int, int, int, int]:
    """``(d x d arrays, eigendecompositions, products, rank-one updates)``
    of one fit of ``template`` with ``params`` (see :data:`_DENSE_WORK`)."""
    from tripletml.core.base import BilinearMixin, MahalanobisMixin

    p = {**template.get_params(), **params}
    for klass in type(template).__mro__:
        if klass.__name__ in _DENSE_WORK:
            work = tuple(int(v(p) if callable(v) else v)
                         for v in _DENSE_WORK[klass.__name__])
            return (work + (0,))[:4]
    if isinstance(template, MahalanobisMixin):
        return 2, 1, 0, 0
    if isinstance(template, BilinearMixin) and "rank" not in p:
        return 1, 0, 0, 0
    return 0, 0, 0, 0


def _available_memory() -> Optional[float]:
    """Bytes of memory available now (``MemAvailable`` of /proc/meminfo,
    else the free physical pages); None when neither can be read."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES")) * float(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


#: side of the square matrices of the speed probe (2 x 512^3 flops: ~10 ms)
_PROBE_SIDE = 512


def _machine_speed() -> tuple[float, float]:
    """``(flops per second of a dense matrix product, d x d elements written
    per second)`` measured on this machine now (the best of three tries of a
    ``_PROBE_SIDE``-square product and of an identity of that side): a
    product is the fastest dense O(d^3) kernel, so an eigendecomposition's
    flop count divided by its rate is a lower bound on its time."""
    m = _PROBE_SIDE
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, m)), rng.standard_normal((m, m))
    t_mm = t_fill = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        t1 = time.perf_counter()
        np.eye(m)
        t2 = time.perf_counter()
        t_mm, t_fill = min(t_mm, t1 - t0), min(t_fill, t2 - t1)
    return 2.0 * m**3 / max(t_mm, 1e-9), float(m * m) / max(t_fill, 1e-9)


def _fmt_bytes(v: float) -> str:
    return f"{v / 2**30:.3g} GiB" if v >= 2**30 else f"{v / 2**20:.3g} MiB"


# --------------------------------------------------------------------------
# candidates
# --------------------------------------------------------------------------
class _Candidate:
    """One racer: a learner, fixed parameters, a budget parameter."""

    def __init__(self, name: str, template, params: dict, budget: Optional[tuple],
                 stage: int = 0):
        self.name = name
        self.stage = stage                  # 0: the cheap rung; higher: costlier, later
        self.template = template            # an unfitted estimator (cloned per fit)
        self.params = params                # including "preprocessing" when given
        self.budget = budget                # (param, full) or None
        has = template.get_params()
        # as the learner gets it: the grid's value, else the template's own
        self.prep = params["preprocessing"] if "preprocessing" in params \
            else has.get("preprocessing")
        from tripletml.triplets import is_class_sampling
        # a warm round adds random class triplets: only for class sampling
        self.warm = (budget is not None and budget[0] == "n_triplets"
                     and hasattr(template, "partial_fit")
                     and is_class_sampling(params.get("sampling", has.get("sampling", "class")))
                     and params.get("max_iter", has.get("max_iter", 1)) == 1)

    def make(self, budget_value: Optional[int], seed: int):
        est = clone(self.template)
        p = dict(self.params)
        if self.budget is not None:
            p[self.budget[0]] = budget_value
        if "random_state" in est.get_params():
            p["random_state"] = seed
        return est.set_params(**p)

    def describe(self, budget_value) -> dict:
        d = {"learner": self.name, **self.params}
        if self.budget is not None:
            d[self.budget[0]] = budget_value
        return d


def _learner_template(spec_learner, where: str):
    if isinstance(spec_learner, str):
        from tripletml.registry import FEATURE_KINDS, get_entry
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
    import itertools

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


# --------------------------------------------------------------------------
# one job: fit a candidate on the fit items of one split, score it
# --------------------------------------------------------------------------
#: one threadpoolctl controller per process (finding the BLAS / OpenMP
#: libraries reads /proc/self/maps: ~3 ms, once per job before)
_CONTROLLERS: dict[int, Any] = {}


def _blas_limit(n_threads: Optional[int]):
    """A context limiting BLAS / OpenMP threads to ``n_threads`` (None: no
    limit, nothing to do), through this process's cached controller."""
    if n_threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import ThreadpoolController
    ctl = _CONTROLLERS.get(os.getpid())
    if ctl is None:
        ctl = _CONTROLLERS[os.getpid()] = ThreadpoolController()
    return ctl.limit(limits=n_threads)


def _run_job(cand: _Candidate, X, y, fit_idx, val_idx, budget_value, seed: int,
             previous, deadline: Optional[float], blas_threads: Optional[int],
             min_secs: float = 0.0, scoring: str = "map"):
    """Returns (score, seconds, model-state for warm start, error) or None
    when, at its start, less than ``min_secs`` (the shortest this fit can
    take) was left before the deadline; ``min_secs < 0``: a free candidate
    without a budget (a baseline), always fitted."""
    if (deadline is not None and (cand.budget is not None or min_secs >= 0)
            and time.time() + max(0.0, min_secs) > deadline):
        return None
    from tripletml.metrics import validation_score
    from tripletml.triplets import random_class_triplets

    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with _blas_limit(blas_threads), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)   # a short round is not a bug
        t0 = time.perf_counter()
        X_fit, y_fit, X_val, y_val = X[fit_idx], y[fit_idx], X[val_idx], y[val_idx]
        try:
            # the learner fits its own preprocessing (if any) on the fit items
            Z_fit, Z_val = X_fit, X_val
            if cand.warm and previous is not None:
                # warm start: continue last round's model on the extra triplets,
                # sampled among the fit items only
                model, done = previous
                extra = budget_value - done
                if extra > 0:
                    t = random_class_triplets(y_fit, extra,
                                              random_state=np.random.default_rng(seed))
                    model.partial_fit(Z_fit, t)
            else:
                # the learner sees the fit items only: its triplets cannot
                # name a validation item
                model = cand.make(budget_value, seed)
                model.fit(Z_fit, y_fit)
            secs = time.perf_counter() - t0
            score = validation_score(model, Z_val, y_val, scoring)
            error = ""
        except (FloatingPointError, ArithmeticError, ValueError,
                np.linalg.LinAlgError) as exc:   # a diverged or failed racer drops out
            secs, score, model = time.perf_counter() - t0, float("nan"), None
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    state = (model, budget_value) if cand.warm and model is not None else None
    return score, secs, state, error


class AutoSimilarity(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Pick and tune a similarity learner by triplet-aware validation.

    A race (successive halving) among candidate learners and hyper-parameters,
    scored by the retrieval mAP (or the ``scoring`` criterion) of held-out training *items* (a validation
    item never appears in a training triplet); the winner is refitted on all
    of ``X`` and every method (``similarity``, ``pair_score``,
    ``triplet_score``, ``score``, ``transform``, ``embed_queries``,
    ``embed_database``, ``save``) delegates to it.

    A scikit-learn transformer whatever learner wins (every triplet learner
    has ``transform``, see :class:`tripletml.core.base.EmbeddingMixin`):
    ``make_pipeline(StandardScaler(), AutoSimilarity(), KNeighborsClassifier())``
    works, as do ``fit_transform``, ``set_output(transform="pandas")`` and
    ``get_feature_names_out`` (``"autosimilarity0"``, ... : the names do not
    depend on the winner).

    The schedule is cost-aware (see the module docstring and
    docs/user_guide/auto.rst):

    * **stage 0, the cheap rung** (every default candidate fits in
      milliseconds to a few hundred milliseconds): Euclidean raw /
      standardised / whitened, KISSME (standardised; ``shrinkage`` 0, 0.01,
      0.1; a closed form, fitted once), RCA (standardised, closed form),
      OASIS (``"sphere"``, whitened), SDCA (3
      passes; ``"sphere"`` / whitened, alpha 1e-2 / 1e-3), COMET
      (``"sphere"``, whitened),
      raced by successive halving over ``n_triplets`` (1111, 3333, 10000);
    * **the bar**: the best validation score of stage 0;
    * **stage 1, the costly family** (SML with ``preprocessing`` None /
      standardised / whitened, budget ``max_iter`` 300): a pilot round at 33
      iterations; candidates below the bar leave (``stopped`` says so), a
      lone survivor goes straight to 300 iterations and must still beat the
      bar there;
    * the best survivor of both stages is refitted on all rows.

    On a set where the cheap rung already wins (balance-scale, wine), the
    costly family costs three 33-iteration pilots; the whole fit then takes a
    few hundred milliseconds.

    Parameters
    ----------
    candidates : list of dict or None, default=None
        The racers.  Each dict has ``"learner"`` (a registered triplet learner
        name, any case, or an unfitted learner instance), ``"grid"`` (dict
        ``{parameter: [values]}``, crossed; ``"preprocessing"`` may be given
        for every learner: a learner with that parameter receives it, for one
        without it AutoSimilarity fits and applies the map itself) and
        ``"budget"`` (``(parameter, full value)``, e.g. ``("n_triplets",
        20000)`` or ``("max_iter", 300)``, the resource that grows per round;
        None: fitted once) and optionally ``"stage"`` (int >= 0, default 0:
        the candidates of stage 0 are raced first, each later stage only above
        the bar of the earlier ones, see above).  None:
        :data:`DEFAULT_CANDIDATES` (stage 0: Euclidean raw / standardised /
        whitened, KISSME, RCA, OASIS, SDCA, COMET; stage 1: SML).  Every default candidate
        sets ``preprocessing`` explicitly (the learners' ``"auto"`` is not
        used), whatever the ``scoring``.  A grid may vary ``sampling`` for
        any learner that has it (e.g. ``"grid": {"sampling": ["class",
        "knn"]}``; rounds are warm-started only for class sampling).
    scoring : str, default="map"
        What the race maximises on the validation items (leave-one-out
        within them, :func:`tripletml.metrics.validation_score`): ``"map"``
        (retrieval mAP), ``"precision@<k>"`` (e.g. ``"precision@1"``,
        ``"precision@10"``), ``"knn_accuracy"`` (accuracy of the 1-NN
        classifier with the candidate's similarity) or ``"knn_accuracy@<k>"``
        (k-NN majority vote).  ``best_score_`` and the ``cv_results_``
        scores are in this criterion; ``score`` stays the mAP.
    time_budget : float, default=60.0
        Seconds for the race (> 0).  Guarantee: no round starts when the
        rounds so far predict that it would end after the budget, and no
        candidate fit *starts* after it (a fit already running finishes); the
        race then stops, ``stop_reason_ = "max_time"``, and the best candidate
        of the last completed round is refitted.  So the whole ``fit`` takes
        at most about ``time_budget`` + one candidate fit + the final refit.
        The no-learning candidates (no budget) are always scored (milliseconds),
        so there is always a winner.  A stage that would start after the
        budget is not raced (its candidates get a row with no score and
        ``stopped = "max_time: ..."``).

        **Resources.**  A fit cannot be interrupted, so what it costs is
        decided before it starts.  Every learner has a lower bound on its
        dense d x d work (``d``: the features it sees): ``k`` d x d arrays it
        holds, ``e`` symmetric eigendecompositions (at least ``(10/3) d^3``
        flops each: the tridiagonal reduction and the eigenvectors'
        back-transformation) and ``p`` d x d products (``2 d^3``): a learned
        Mahalanobis matrix ``k = 2, e = 1`` (the ``eigh`` behind
        ``components_``); KISSME ``k = 6, e = 3, p = 2``; SML ``e = max_iter
        + 1`` (a PSD projection per iteration); OASIS / SDCA / COMET one
        dense ``W_``, ``k = 1``, and OASIS / SDCA a rank-one update of it
        per triplet (and pass), ``rho^2 d^2`` writes for rows of density
        ``rho``; the baselines and the factored learners none.  A candidate is **skipped** (``stopped = "memory: ..."`` or
        ``"time: ..."`` on a row with no score, and an entry of
        ``skipped_``) when its ``k`` arrays, times the parallel workers,
        exceed the memory available now, or when its flops at this machine's
        matrix-product rate (measured once per ``fit`` on a 512 x 512
        product, the fastest dense kernel: so the estimate is a lower bound)
        plus its writes at the measured write rate of an identity matrix
        (faster than any update) exceed the seconds left.  A candidate already
        scored that becomes too costly at a larger budget keeps the score of
        its last fit.  Work no larger than the probe's own is never measured
        nor skipped, so data sets of up to a few hundred features race as
        they did.  And no fit but the free baselines' starts when less time
        is left than its own lower bound or than the shortest such fit seen
        so far: the race overruns ``time_budget`` by at most about one fit.
        Example: on a 300 x 20,000 sparse matrix the default race skips SML
        (34 eigendecompositions of a 20,000 x 20,000 matrix in its pilot
        alone) and finishes in about a second; before, that pilot ran for
        minutes.
    n_splits : int, default=1
        Number of stratified fit/validation splits (scores are averaged).
    validation_size : float, default=0.3
        Fraction of the training items held out for validation, in (0, 1).
    max_validation_items : int or None, default=1000
        At most this many validation items (a stratified subset of the held-out
        ones) are scored: scoring is quadratic in their number (4,200 letter
        items take 3 s per score, 1,000 take 0.1 s).  The held-out items that
        are not scored are not fitted on either.  None: score all.
    factor : int, default=3
        Halving factor (as scikit-learn's ``HalvingGridSearchCV``): each round keeps ``ceil(n / factor)`` candidates and
        multiplies the budget by ``factor``.
    n_jobs : int or None, default=None
        Parallel fits through :class:`joblib.Parallel` (no backend is forced:
        ``with joblib.parallel_backend("dask"): auto.fit(X, y)`` runs them on a
        Dask cluster).  BLAS threads are limited per worker to
        ``max(1, cpu_count // n_workers)`` through one cached
        :class:`threadpoolctl.ThreadpoolController` per worker process.
    random_state : int, numpy Generator, RandomState instance or None, default=None
        Seeds the splits, the triplets and every candidate (a Generator or a
        RandomState is drawn from once, as every learner does); with an int the
        race and the winner are reproducible (unless the time budget cuts it)
        and do not depend on ``n_jobs``.
    verbose : int, default=0
        1: one line per round on stderr.
    cv : int, scikit-learn splitter or None, default=None
        With triplets or pairs only: how the *items* are split for
        validation (:mod:`tripletml.auto.comparisons`).  None: 3 shuffled
        folds over the items (``GroupKFold`` over ``groups`` when given); an
        int: that many folds; a splitter (``GroupKFold``,
        ``GroupShuffleSplit``, ...): its ``split(items, None, groups)``.
        ``n_splits`` and ``validation_size`` are the label race's.
    preprocessor : array-like or callable or None, default=None
        metric-learn's row lookup: with it, ``fit`` takes index triplets
        ``(n, 3)`` or index pairs ``(n, 2)`` (with y) into its rows.

    Attributes
    ----------
    best_estimator_ : learner
        The winner refitted on all rows; its ``preprocessing`` (a learner
        parameter) is part of it, so it works on raw features.
    best_params_ : dict
        ``{"learner": name, **parameters, budget parameter: value}``.
    best_score_ : float
        Mean validation mAP of the winner in its last round.
    cv_results_ : dict of ndarray
        One entry per (candidate, round) fitted: ``candidate``, ``learner``,
        ``params``, ``preprocessing``, ``stage``, ``round`` (numbered across
        the stages), ``budget_param``, ``budget``,
        ``split<i>_validation_score``, ``mean_validation_score``,
        ``std_validation_score``, ``mean_fit_time``, ``warm_start``,
        ``error``, ``stopped`` (why the candidate's race ended after this
        entry: ``"halved: ..."``, ``"below_bar: ..."``, ``"max_time: ..."``,
        ``"memory: ..."`` / ``"time: ..."`` (skipped before its first fit, see
        ``time_budget``), ``"error"``, ``"stage_end: ..."`` (survived its stage, lost the final
        comparison), ``""`` for the winner's last entry and for entries the
        candidate went on from), ``rank_validation_score`` (1 = the winner;
        then by round reached and score).  A stage skipped for time gets one
        entry per candidate with NaN scores.  ``pandas.DataFrame(cv_results_)``
        reads it.
    skipped_ : list of dict
        The fits not started because of their dense d x d work (see
        ``time_budget``), one dict each: ``candidate``, ``learner``,
        ``params`` (with the budget it would have had), ``round``, ``reason``
        (``"memory: ..."`` or ``"time: ..."``, with the sizes and the
        measured rate).  Empty on small data.
    history_ : dict
        One record per round: ``step`` (round), ``seconds``, ``n_candidates``,
        ``best_validation_score``.
    n_features_in_ : int
    stop_reason_ : {"max_iter", "max_time"}
        ``"max_iter"``: every round ran; ``"max_time"``: the time budget
        stopped the race.
    refit_time_ : float
        Seconds of the final refit.
    supervision_ : {"triplets", "pairs"}
        After a fit on comparisons: what was given (absent after a label fit).
    scoring_ : {"triplet_accuracy", "roc_auc"}
        After a fit on comparisons: the held-out score ``best_score_`` is in.
    """

    def __init__(self, candidates=None, *, scoring: str = "map", time_budget: float = 60.0,
                 n_splits: int = 1,
                 validation_size: float = 0.3, max_validation_items: Optional[int] = 1000,
                 factor: int = 3, n_jobs: Optional[int] = None, random_state=None,
                 verbose: int = 0, cv=None, preprocessor=None):
        self.candidates = candidates
        self.scoring = scoring
        self.time_budget = time_budget
        self.n_splits = n_splits
        self.validation_size = validation_size
        self.max_validation_items = max_validation_items
        self.factor = factor
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.cv = cv
        self.preprocessor = preprocessor

    # ------------------------------------------------------------ checks
    def _validate_params(self) -> None:
        from tripletml.metrics import check_scoring
        if self.scoring not in _COMPARISON_SCORES:
            check_scoring(self.scoring, _WHO)
        check_scalar_param(self.time_budget, "time_budget", _WHO, low=0, low_inclusive=False)
        check_scalar_param(self.n_splits, "n_splits", _WHO, kind="int", low=1)
        check_scalar_param(self.validation_size, "validation_size", _WHO, low=0, high=1,
                           low_inclusive=False, high_inclusive=False)
        check_scalar_param(self.max_validation_items, "max_validation_items", _WHO,
                           kind="int", low=2, allow_none=True)
        check_scalar_param(self.factor, "factor", _WHO, kind="int", low=2)
        check_scalar_param(self.n_jobs, "n_jobs", _WHO, kind="int", allow_none=True)
        if self.n_jobs == 0:
            raise ValueError(f"{_WHO}: parameter n_jobs=0 is not allowed (None, -1 or a "
                             "positive number of workers).")
        check_scalar_param(self.verbose, "verbose", _WHO, kind="int", low=0)

    def _check_y(self, y, n: int) -> np.ndarray:
        if y is None:
            raise ValueError(f"{_WHO}: fit needs class labels y (the validation splits and "
                             "triplets are drawn from them).")
        if sp.issparse(y):
            raise TypeError(f"{_WHO}: y must be a 1-D array of class labels, got a sparse "
                            "matrix.")
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"{_WHO}: y must be 1-D class labels, got shape {y.shape}.")
        if y.shape[0] != n:
            raise ValueError(f"{_WHO}: X has {n} rows but y has {y.shape[0]} labels.")
        if y.dtype.kind == "f" and not np.isfinite(y).all():
            raise ValueError(f"{_WHO}: y holds NaN or infinite labels.")
        classes, counts = np.unique(y, return_counts=True)
        if classes.size < 2:
            raise ValueError(f"{_WHO}: y has one class only ({classes[0]!r}); similarity "
                             "learning from class triplets needs at least 2 classes.")
        need = self._min_per_class()
        small = classes[counts < need]
        if small.size:
            raise ValueError(
                f"{_WHO}: class(es) {small[:5].tolist()} have fewer than {need} items, too "
                f"few for a fit/validation split by items with validation_size="
                f"{self.validation_size} (each class needs 2 fit items and 1 validation "
                "item); merge or drop rare classes.")
        return y

    def _candidate_specs(self):
        """The race: ``candidates``, or :data:`DEFAULT_CANDIDATES` whatever
        the ``scoring`` (adding OASIS with ``sampling="knn"`` for
        ``scoring="knn_accuracy"`` never won on digits, vehicle, vowel,
        segment, seed 0, and cost 1-4 s more per race)."""
        return DEFAULT_CANDIDATES if self.candidates is None else self.candidates

    def _min_per_class(self) -> int:
        v = float(self.validation_size)
        # at least one validation item and two fit items per class
        return max(3, math.ceil(1.0 / v), math.ceil(2.0 / (1.0 - v)))

    # --------------------------------------------------------------- fit
    def fit(self, X, y=None, *, triplets=None, pairs=None, groups=None):
        """Race the candidates and refit the winner on all the supervision.

        Parameters
        ----------
        X : array-like or scipy.sparse matrix of shape (n_samples, n_features)
            The rows (items).  Also metric-learn's tuple forms: point
            triplets ``(n, 3, n_features)`` (no y), point pairs ``(n, 2,
            n_features)`` with y, or index tuples ``(n, 3)`` / ``(n, 2)`` into
            the rows of ``preprocessor``.
        y : array-like of shape (n_samples,) or (n_pairs,), optional
            Class labels of the rows (the label race), or with pairs one
            label per pair (+1 / -1, or 1 / 0).
        triplets : array-like of shape (n_triplets, 3), optional
            ``(query, closer, farther)`` row indices into X: "the query is
            more like the second item than the third" (people's answers).
        pairs : array-like of shape (n_pairs, 2), optional
            Row indices into X of pairs labelled by y.
        groups : array-like of shape (n_samples,), optional
            With triplets or pairs: a group per row; the validation holds out
            whole groups of items (e.g. all the photos of one product).

        With triplets or pairs the race validates on held-out *items*
        (:mod:`tripletml.auto.comparisons`): ``cv`` (None: ``n_splits``
        random splits holding out ``validation_size`` of the items; an int:
        that many folds; or a scikit-learn splitter, applied to the items
        with ``groups``), held-out triplet accuracy or pair ROC AUC
        (``scoring_``), the no-learning Euclidean and cosine always among
        the candidates.

        Returns
        -------
        self
        """
        t_start = time.time()
        for a in ("n_features_in_", "best_estimator_", "skipped_", "supervision_",
                  "scoring_"):
            if hasattr(self, a):
                delattr(self, a)
        self._validate_params()
        from tripletml.auto.comparisons import fit_comparisons, parse_comparisons

        comp = parse_comparisons(self, X, y, triplets, pairs)
        if comp is not None:
            want = {"triplets": "triplet_accuracy", "pairs": "roc_auc"}[comp.kind]
            if self.scoring not in ("map", want):
                raise ValueError(f"{_WHO}: scoring={self.scoring!r} does not apply to "
                                 f"{comp.kind}; the race on {comp.kind} is scored by "
                                 f"{want!r} on held-out items.")
            fit_comparisons(self, comp, groups, t_start)
            if self.verbose:
                print(f"AutoSimilarity: {self.best_params_} (validation {self.scoring_} "
                      f"{self.best_score_:.4f}), total {time.time() - t_start:.1f} s",
                      file=sys.stderr)
            return self
        if groups is not None or self.cv is not None:
            raise ValueError(f"{_WHO}: groups= and cv= apply to a fit on triplets or pairs; "
                             "the label race splits the items stratified by class "
                             "(n_splits, validation_size).")
        if self.scoring in _COMPARISON_SCORES:
            raise ValueError(f"{_WHO}: scoring={self.scoring!r} needs triplets or pairs; "
                             "with class labels use 'map', 'precision@k' or 'knn_accuracy'.")
        return self._fit_labels(X, y, t_start)

    def _fit_labels(self, X, y, t_start: float):
        """The label race (the module docstring)."""
        from joblib import effective_n_jobs
        from sklearn.model_selection import StratifiedShuffleSplit
        cands = _expand_candidates(self._candidate_specs())
        X = check_X(X, _WHO, accept_sparse=True)
        if sp.issparse(X):
            X = X.tocsr()
        y = self._check_y(y, X.shape[0])
        deadline = t_start + float(self.time_budget)
        seed0 = self._seed()
        ss = np.random.SeedSequence(seed0)
        split_seed = int(ss.generate_state(1)[0])
        splits = list(StratifiedShuffleSplit(n_splits=self.n_splits,
                                             test_size=self.validation_size,
                                             random_state=split_seed).split(np.zeros(len(y)), y))
        splits = [(fi, self._cap_validation(vi, y, split_seed + s))
                  for s, (fi, vi) in enumerate(splits)]
        n_workers = max(1, int(effective_n_jobs(self.n_jobs)))
        blas = max(1, (os.cpu_count() or 1) // n_workers) if n_workers > 1 else None
        ctx = {"cands": cands, "X": X, "y": y, "splits": splits, "seed0": seed0,
               "deadline": deadline, "blas": blas, "n_workers": n_workers,
               "t_start": t_start, "states": {}, "rows": [],
               "hist": {"step": [], "seconds": [], "n_candidates": [],
                        "best_validation_score": []},
               "last_scores": {}, "reached": {}, "skipped": [], "shortest": 0.0,
               "n_fit": min(len(fi) for fi, _ in splits), "speed": None, "memory": None}
        stages = sorted({c.stage for c in cands})
        champions: list[int] = []           # the survivors of every stage raced
        stop, r0, bar = "max_iter", 0, -np.inf
        for k, st in enumerate(stages):
            members = [i for i, c in enumerate(cands) if c.stage == st]
            if k > 0 and time.time() + ctx["shortest"] >= deadline:
                stop = "max_time"
                self._note_skipped(ctx, members, r0, "max_time: time_budget spent before "
                                   f"stage {st} started")
                continue
            survivors, r0, st_stop = self._race_stage(ctx, members, r0, bar if k else None,
                                                      pilot=k > 0)
            if st_stop == "max_time":
                stop = "max_time"
            champions += survivors
            scored = [self._best_row(ctx["rows"], c) for c in champions
                      if c in ctx["last_scores"]]
            if scored:
                bar = max(row["mean_validation_score"] for row in scored)
        last_scores, rows = ctx["last_scores"], ctx["rows"]
        self.skipped_ = list(ctx["skipped"])
        if not last_scores:
            why = "; ".join(f"{s['learner']} {s['params']}: {s['reason']}"
                            for s in ctx["skipped"][:5])
            raise RuntimeError(f"{_WHO}: no candidate finished within time_budget="
                               f"{self.time_budget}" + (f"; skipped before fitting: {why}. "
                                                        "Add a cheaper candidate (e.g. "
                                                        "Euclidean) or reduce the dimension."
                                                        if why else "."))
        pool = [c for c in champions if c in last_scores] or list(last_scores)
        # the final comparison: each survivor at its best validated budget
        # (validated early stopping: a racer whose score fell at a larger
        # budget is refitted with the budget that scored best)
        best_rows = {c: self._best_row(rows, c) for c in pool}
        win = min(pool, key=lambda c: (-best_rows[c]["mean_validation_score"], c))
        win_row = best_rows[win]
        win_budget = win_row["budget"] if cands[win].budget else None
        mine = [row for row in rows if row["candidate"] == win]
        win_row["stopped"] = ""
        if mine[-1] is not win_row and (not mine[-1]["stopped"]
                                        or mine[-1]["stopped"].startswith("stage_end")):
            mine[-1]["stopped"] = (f"not_best_budget: refitted with {win_row['budget_param']}="
                                   f"{win_row['budget']}, which scored higher")
        self.cv_results_ = self._results(rows, len(splits), win_row, ctx["reached"])
        self.history_ = ctx["hist"]
        self.stop_reason_ = stop
        # refit on all training rows (seeded as the winner's last round)
        cand = cands[win]
        t0 = time.perf_counter()
        seed = int(np.random.SeedSequence([seed0, win, 10**6]).generate_state(1)[0])
        model = cand.make(win_budget, seed)
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y)
        self.refit_time_ = time.perf_counter() - t0
        self.best_estimator_ = model
        self.best_params_ = cand.describe(win_budget)
        self.best_score_ = float(win_row["mean_validation_score"])
        self.n_features_in_ = X.shape[1]
        if self.verbose:
            print(f"AutoSimilarity: {self.best_params_} (validation {self.scoring} "
                  f"{self.best_score_:.4f})"
                  f", refit in {self.refit_time_:.2f} s, total {time.time() - t_start:.1f} s, "
                  f"stopped by {stop}", file=sys.stderr)
        return self

    @staticmethod
    def _expand(specs) -> list[_Candidate]:
        """The candidates of ``specs`` (the rules of ``candidates``), for
        :mod:`tripletml.auto.comparisons`."""
        return _expand_candidates(specs)

    def _cap_validation(self, vi: np.ndarray, y: np.ndarray, seed: int) -> np.ndarray:
        """At most ``max_validation_items`` validation items (a stratified
        subset): scoring is quadratic in their number."""
        cap = self.max_validation_items
        if cap is None or len(vi) <= cap:
            return vi
        from sklearn.model_selection import train_test_split
        try:
            keep, _ = train_test_split(vi, train_size=int(cap), stratify=y[vi],
                                       random_state=seed % (2**32))
        except ValueError:                   # a class too small to stratify
            keep = np.random.default_rng(seed).choice(vi, size=int(cap), replace=False)
        return np.sort(keep)

    @staticmethod
    def _note_skipped(ctx: dict, members: list, r: int, why: str) -> None:
        """A row (no score) for each candidate of a stage that was never fitted."""
        nan = float("nan")
        for c in members:
            cand = ctx["cands"][c]
            row = {"candidate": c, "learner": cand.name, "params": cand.describe(None),
                   "preprocessing": str(cand.prep), "stage": cand.stage, "round": r,
                   "budget_param": cand.budget[0] if cand.budget else "", "budget": 0,
                   "mean_validation_score": nan, "std_validation_score": nan,
                   "mean_fit_time": 0.0, "warm_start": False, "error": "", "stopped": why}
            for s in range(len(ctx["splits"])):
                row[f"split{s}_validation_score"] = nan
            ctx["rows"].append(row)

    @staticmethod
    def _resources(ctx: dict, cand: _Candidate, budget_value) -> tuple[str, float]:
        """Whether ``cand`` may be fitted at ``budget_value`` now: ``(reason,
        seconds)``, the reason empty when it may, the seconds a lower bound on
        the fit's dense d x d work on this machine (0 when not measured).

        The rule (decided before the fit: a running fit cannot be
        interrupted): the unavoidable dense work of the learner
        (:func:`_dense_work`: ``k`` d x d arrays held, ``e`` symmetric
        eigendecompositions of ``(10/3) d^3`` flops at least each and ``p``
        products of ``2 d^3``, ``d`` the features the learner sees) is
        skipped when its arrays, times the parallel workers, exceed the
        memory available now, or when its flops at this machine's measured
        matrix-product rate plus its entries written (``k d^2``, and ``rho^2
        d^2`` per rank-one update of an online learner, ``rho`` the density
        of the rows it sees) at its measured write rate exceed the seconds
        left of ``time_budget``.  Returns seconds
        -1 for a candidate with no dense work (fitted even after the
        deadline: the baselines always score).  Work no larger than the speed probe's own (a
        product of two 512 x 512 matrices) is not measured and never skipped,
        so small data sets race as before."""
        from tripletml.core.preprocessing import n_added_features, resolve_preprocessing

        n_dd, n_eig, n_prod, n_upd = _dense_work(cand.template, cand.describe(budget_value))
        if not n_dd and not n_eig and not n_prod and not n_upd:
            return "", -1.0                  # free: always fitted
        X = ctx["X"]
        try:
            prep = resolve_preprocessing(cand.prep, X, cand.template)
        except ValueError:
            return "", 0.0                   # the fit refuses it itself (its error says why)
        d = float(X.shape[1] + n_added_features(prep))
        m = float(_PROBE_SIDE)
        nbytes = 8.0 * d * d * n_dd
        if nbytes > 8.0 * m * m:
            if ctx["memory"] is None:
                ctx["memory"] = _available_memory() or np.inf
            need = nbytes * ctx["n_workers"]
            if need > ctx["memory"]:
                return (f"memory: {cand.name} holds {n_dd} dense {int(d)} x {int(d)} "
                        f"array(s), {_fmt_bytes(need)} for {ctx['n_workers']} worker(s), "
                        f"more than the {_fmt_bytes(ctx['memory'])} available"), 0.0
        flops = (n_eig * _EIGH_FLOPS + n_prod * _PRODUCT_FLOPS) * d**3
        # entries written: the arrays once, each update's rho^2 d^2
        rho = 1.0 if prep is not None or not sp.issparse(X) else \
            X.nnz / max(1.0, float(X.shape[0]) * X.shape[1])
        writes = (n_dd + n_upd * rho * rho) * d * d
        if flops <= 2.0 * m**3 and writes <= m * m:
            return "", 0.0
        if ctx["speed"] is None:
            ctx["speed"] = _machine_speed()
        rate, fill = ctx["speed"]
        secs = flops / rate + writes / fill
        left = ctx["deadline"] - time.time()
        if secs > left:
            return (f"time: {cand.name}'s dense work ({n_eig} eigendecomposition(s) and "
                    f"{n_prod} product(s) of {int(d)} x {int(d)} matrices, {flops:.3g} flops, "
                    f"{n_dd} such array(s) and {n_upd} rank-one update(s) of rows of density "
                    f"{rho:.3g}) takes at least {secs:.3g} s at this machine's measured "
                    f"{rate / 1e9:.3g} GFLOP/s and {fill / 1e9:.3g} G writes/s; "
                    f"{max(left, 0.0):.3g} s of time_budget "
                    "left"), secs
        return "", secs

    def _race_stage(self, ctx: dict, members: list, r0: int, bar: Optional[float],
                    pilot: bool) -> tuple[list, int, str]:
        """Successive halving among ``members`` (global round numbers from
        ``r0``).  ``bar``: the best validation score of the earlier stages; a
        candidate scoring below it after any round leaves the race
        (``stopped = "below_bar"``).  ``pilot``: at least three rounds, so the
        first (at ``1 / factor**2`` of the budget) is a cheap pilot.  A lone
        survivor with a budget skips the intermediate rounds and is fitted at
        its full budget next.  Returns the
        survivors, the next free round number and ``"max_time"`` or
        ``"max_iter"``."""
        from joblib import Parallel, delayed

        cands, splits, seed0 = ctx["cands"], ctx["splits"], ctx["seed0"]
        rows, states, last_scores = ctx["rows"], ctx["states"], ctx["last_scores"]
        reached, hist, deadline = ctx["reached"], ctx["hist"], ctx["deadline"]
        factor = self.factor
        n_rounds = max(1, math.ceil(math.log(len(members)) / math.log(factor) - 1e-9))
        if pilot and any(cands[c].budget is not None for c in members):
            n_rounds = max(3, n_rounds)
        alive = list(members)
        stop = "max_iter"
        stage_rows: list[dict] = []
        fallen: list[int] = []               # fell below the bar after beating it
        last_round = r0
        rr, prev_rr, r = 0, 0, r0 - 1
        while rr < n_rounds:                 # rr strictly increases: at most n_rounds rounds
            r += 1
            frac = float(factor) ** -(n_rounds - 1 - rr)
            if rr > 0:
                # predict this round's wall time from the last one (budget x factor per round)
                prev = [row for row in stage_rows if row["round"] == r - 1
                        and row["candidate"] in alive]
                est = sum(row["mean_fit_time"] * len(splits)
                          * (factor ** (rr - prev_rr) if cands[row["candidate"]].budget else 0)
                          for row in prev) / ctx["n_workers"]
                if time.time() + est > deadline:
                    stop = "max_time"
                    for row in prev:
                        row["stopped"] = "max_time: the next round would end after time_budget"
                    break
            tasks, keys = [], []
            held: list[int] = []             # not refitted: too costly at this budget
            free: dict[int, bool] = {}
            for c in list(alive):
                cand = cands[c]
                if cand.budget is not None:
                    bv = max(1, int(round(cand.budget[1] * frac)))
                elif rr > 0:
                    continue                 # fitted once: its score stands
                else:
                    bv = None
                why, secs = self._resources(ctx, cand, bv)
                if why:
                    ctx["skipped"].append({"candidate": c, "learner": cand.name,
                                           "params": cand.describe(bv), "round": r,
                                           "reason": why})
                    if c in last_scores:     # keeps the score of its last fit
                        held.append(c)
                    else:
                        self._note_skipped(ctx, [c], r, why)
                        alive.remove(c)
                    continue
                for s, (fi, vi) in enumerate(splits):
                    seed = int(np.random.SeedSequence([seed0, c, s, r]).generate_state(1)[0])
                    tasks.append(delayed(_run_job)(cand, ctx["X"], ctx["y"], fi, vi, bv, seed,
                                                   states.get((c, s)), deadline, ctx["blas"],
                                                   secs if secs < 0 and cand.budget is None
                                                   else max(secs, ctx["shortest"]),
                                                   self.scoring))
                    free[c] = secs < 0
                    keys.append((c, s, bv))
            results = Parallel(n_jobs=self.n_jobs)(tasks) if tasks else []
            per: dict[int, dict] = {}
            for (c, s, bv), res in zip(keys, results):
                entry = per.setdefault(c, {"scores": [None] * len(splits), "secs": [],
                                           "budget": bv, "error": ""})
                if res is None:
                    continue
                score, secs, state, error = res
                entry["scores"][s] = score
                entry["secs"].append(secs)
                if not free.get(c) and np.isfinite(score):
                    ctx["shortest"] = secs if not ctx["shortest"] else min(ctx["shortest"], secs)
                entry["error"] = entry["error"] or error
                if state is not None:
                    states[(c, s)] = state
            fresh = [c for c in alive if (cands[c].budget is None or c in held)
                     and c in last_scores]
            n_done = 0
            for c, entry in per.items():
                if any(v is None for v in entry["scores"]):
                    stop = "max_time"        # not finished before the deadline
                    continue
                sc = np.asarray(entry["scores"], dtype=float)
                cand = cands[c]
                row = {"candidate": c, "learner": cand.name,
                       "params": cand.describe(entry["budget"]),
                       "preprocessing": str(cand.prep), "stage": cand.stage, "round": r,
                       "budget_param": cand.budget[0] if cand.budget else "",
                       "budget": entry["budget"] if entry["budget"] is not None else 0,
                       "mean_validation_score": float(sc.mean()),
                       "std_validation_score": float(sc.std()),
                       "mean_fit_time": float(np.mean(entry["secs"])),
                       "warm_start": bool(cand.warm and rr > 0), "error": entry["error"],
                       "stopped": ""}
                for s in range(len(splits)):
                    row[f"split{s}_validation_score"] = float(sc[s])
                rows.append(row)
                stage_rows.append(row)
                n_done += cands[c].budget is not None
                if np.isfinite(sc).all():
                    last_scores[c] = float(sc.mean())
                    if c not in fresh:
                        fresh.append(c)
                else:
                    last_scores.pop(c, None)
                    row["stopped"] = "error"
            last_round = r
            if rr > 0 and n_done == 0 and stop == "max_time":
                break                        # nothing finished: last round's survivors stand
            # survivors: the candidates scored in this round (or fitted once)
            scored = sorted((c for c in alive if c in fresh), key=lambda c: (-last_scores[c], c))
            if bar is not None:
                # escalation pays off only above the cheaper stages' best score
                below = [c for c in scored if last_scores[c] < bar]
                for c in below:
                    self._mark(stage_rows, c, r, f"below_bar: {last_scores[c]:.4f} < "
                               f"{bar:.4f}, the best of the cheaper stage(s)")
                scored = [c for c in scored if c not in below]
                for c in below:
                    reached[c] = r
                    if self._best_row(rows, c)["mean_validation_score"] >= bar:
                        fallen.append(c)     # above the bar at an earlier budget
            if not scored:
                alive = []
                break
            best_now = scored[0]
            for c in scored:
                reached[c] = r
            hist["step"].append(r)
            hist["seconds"].append(time.time() - ctx["t_start"])
            hist["n_candidates"].append(len(scored))
            hist["best_validation_score"].append(last_scores[best_now])
            if self.verbose:
                print(f"AutoSimilarity round {rr + 1}/{n_rounds} of stage "
                      f"{cands[best_now].stage}: {len(scored)} candidates at "
                      f"{frac:.3g} of the budget, best {last_scores[best_now]:.4f} "
                      f"({cands[best_now].describe(per[best_now]['budget'] if best_now in per else None)}"
                      f"), {time.time() - ctx['t_start']:.1f} s",
                      file=sys.stderr)
            if stop == "max_time" or rr == n_rounds - 1:
                alive = scored
                break
            keep = scored[:max(1, math.ceil(len(scored) / factor))]
            for c in scored[len(keep):]:
                self._mark(stage_rows, c, r, f"halved: not in the best 1/{factor} of round {r}")
            alive = keep
            if len(alive) == 1 and cands[alive[0]].budget is None:
                break                        # a no-learning winner: nothing left to race
            prev_rr = rr
            if sum(cands[c].budget is not None for c in alive) == 1:
                rr = n_rounds - 1            # a lone racer: straight to its full budget
            else:
                rr += 1
        survivors = [c for c in alive if c in last_scores]
        for c in survivors:                  # raced to the end of its stage
            self._mark(stage_rows, c, reached.get(c, last_round),
                       "stage_end: lost to the final comparison of the stages' survivors")
        # a racer that fell below the bar at a larger budget still competes
        # at the earlier budget where it beat the bar
        survivors += [c for c in fallen if c not in survivors]
        return survivors, last_round + 1, stop

    @staticmethod
    def _best_row(rows: list, c: int) -> dict:
        """Candidate ``c``'s row with the highest finite validation score (the
        larger budget on a tie)."""
        mine = [row for row in rows if row["candidate"] == c
                and np.isfinite(row["mean_validation_score"])]
        return max(mine, key=lambda row: (row["mean_validation_score"], row["budget"]))

    @staticmethod
    def _mark(rows: list, c: int, r: int, why: str) -> None:
        """Record on candidate ``c``'s last row up to round ``r`` why it left."""
        mine = [row for row in rows if row["candidate"] == c and row["round"] <= r]
        if mine and not mine[-1]["stopped"]:
            mine[-1]["stopped"] = why

    def _seed(self) -> int:
        """The search's base seed: an int ``random_state`` itself; one draw
        from a NumPy ``Generator`` (as every learner accepts); a
        ``RandomState`` or None as in 0.1 (one ``randint`` of scikit-learn's
        ``check_random_state``, so ``np.random.seed`` still governs None)."""
        rs = self.random_state
        if isinstance(rs, numbers.Integral) and not isinstance(rs, (bool, np.bool_)):
            if rs < 0:
                raise ValueError(f"{_WHO}: random_state={rs} must be non-negative.")
            return int(rs) % (2**32)
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(0, 2**31 - 1))
        if rs is None or isinstance(rs, np.random.RandomState):
            from sklearn.utils import check_random_state
            return int(check_random_state(rs).randint(0, 2**31 - 1))
        raise TypeError(f"{_WHO}: random_state={rs!r} must be None, an int, a numpy Generator "
                        "or RandomState.")

    @staticmethod
    def _results(rows: list[dict], n_splits: int, win_row: dict, reached: dict) -> dict:
        def neg(v):
            return -v if np.isfinite(v) else np.inf

        last = {}
        for i, row in enumerate(rows):
            last[row["candidate"]] = i

        def eff(i):      # a candidate fitted once competes up to the round it left
            row = rows[i]
            return reached.get(row["candidate"], row["round"]) if last[row["candidate"]] == i \
                else row["round"]

        order = sorted(range(len(rows)), key=lambda i: (rows[i] is not win_row, -eff(i),
                                                        neg(rows[i]["mean_validation_score"]),
                                                        rows[i]["candidate"]))
        rank = np.empty(len(rows), dtype=int)
        rank[order] = np.arange(1, len(rows) + 1)
        keys = ["candidate", "learner", "params", "preprocessing", "stage", "round",
                "budget_param", "budget", *(f"split{s}_validation_score" for s in range(n_splits)),
                "mean_validation_score", "std_validation_score", "mean_fit_time",
                "warm_start", "error", "stopped"]
        out: dict[str, np.ndarray] = {}
        for k in keys:
            vals = [row[k] for row in rows]
            if k == "params":
                arr = np.empty(len(vals), dtype=object)
                arr[:] = vals
            else:
                arr = np.asarray(vals)
            out[k] = arr
        out["rank_validation_score"] = rank
        return out

    # -------------------------------------------------------- delegation
    def _best(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def similarity(self, X, Y=None) -> np.ndarray:
        """Similarity matrix of the winner (higher = more similar)."""
        return self._best().similarity(X, Y)

    def pair_score(self, X1, X2) -> np.ndarray:
        """Row-wise similarity ``S(X1[i], X2[i])`` of the winner."""
        return self._best().pair_score(X1, X2)

    def triplet_score(self, X, triplets) -> np.ndarray:
        """``S(q, p+) - S(q, p-)`` per triplet, from the winner."""
        return self._best().triplet_score(X, triplets)

    @available_if(_legacy_decision_function_available)
    def decision_function(self, X, triplets=None) -> np.ndarray:
        """Deprecated alias of :meth:`triplet_score` (one release, FutureWarning);
        see :func:`tripletml.core.base.legacy_decision_function`."""
        if triplets is None:
            raise TypeError("AutoSimilarity: a triplet learner has no per-sample "
                            "decision_function; score triplets with triplet_score(X, "
                            "triplets) (decision_function(X, triplets) is its deprecated "
                            "name).")
        warnings.warn("AutoSimilarity: decision_function(X, triplets) is deprecated since "
                      "tripletml 0.2 and will be removed in 0.3; use triplet_score(X, "
                      "triplets) (same values).", FutureWarning, stacklevel=2)
        return self.triplet_score(X, triplets)

    def score(self, X, y) -> float:
        """Leave-one-out retrieval mAP within X (as every learner's ``score``)."""
        from tripletml.metrics import evaluate_retrieval

        check_is_fitted(self, "best_estimator_")
        return float(evaluate_retrieval(self, X, np.asarray(y), k=())["map"])

    def transform(self, X) -> np.ndarray:
        """The winner's embedding, ``best_estimator_.transform(X)`` (see
        :class:`tripletml.core.base.EmbeddingMixin`; for a bilinear winner the
        PSD part of its W, ``transform_fidelity_``)."""
        return self._best().transform(X)

    @property
    def _n_features_out(self) -> int:
        if not self.__sklearn_is_fitted__():
            raise AttributeError("_n_features_out")  # check_is_fitted: NotFittedError
        return int(self.best_estimator_._n_features_out)

    @property
    def transform_fidelity_(self) -> float:
        """The winner's ``transform_fidelity_``: the share of its learned
        model that ``transform`` keeps."""
        return self._best().transform_fidelity_

    def embed_queries(self, X) -> np.ndarray:
        """Query embedding of the winner (see ``embedding_similarity``)."""
        return self._best().embed_queries(X)

    def embed_database(self, X) -> np.ndarray:
        """Database embedding of the winner."""
        return self._best().embed_database(X)

    @property
    def embedding_similarity(self) -> str:
        """The winner's ``embedding_similarity`` ("inner_product" or
        "neg_squared_l2")."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.embedding_similarity

    def search_summary(self) -> dict:
        """The JSON-able summary stored with a saved model (``auto_search_``)."""
        check_is_fitted(self, "best_estimator_")
        res = self.cv_results_
        return {"best_params": self.best_params_, "best_score": float(self.best_score_),
                "stop_reason": self.stop_reason_,
                "n_candidates": int(len(set(res["candidate"].tolist()))),
                "n_fits": int(len(res["candidate"])),
                "n_rounds": int(len(self.history_["step"])),
                "time_budget": float(self.time_budget), "n_splits": int(self.n_splits),
                "validation_size": float(self.validation_size), "factor": int(self.factor)}

    def save(self, path) -> None:
        """Save the winning learner (a registered learner file, no pickle)
        with :meth:`search_summary` as its fitted attribute ``auto_search_``;
        :func:`tripletml.load_model` returns that learner.

        """
        check_is_fitted(self, "best_estimator_")
        model = copy.copy(self.best_estimator_)
        model.auto_search_ = self.search_summary()
        if isinstance(getattr(self, "training_data_", None), dict):
            model.training_data_ = self.training_data_
        model.save(path)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "best_estimator_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        return tags
