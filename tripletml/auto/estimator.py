"""The estimator :class:`AutoSimilarity`: its parameters, their checks, the
dispatch of ``fit`` to the label race (:mod:`tripletml.auto.race`) or the
race on comparisons (:mod:`tripletml.auto.comparisons`), the final refit and
the fitted attributes, and the methods that delegate to the winner.
"""
from __future__ import annotations

import copy
import math
import numbers
import sys
import time
import warnings
from typing import Optional

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from tripletml.auto.candidates import _WHO, DEFAULT_CANDIDATES, _expand_candidates, \
    default_candidates
from tripletml.auto.comparisons import fit_comparisons, parse_comparisons
from tripletml.auto.race import choose_winner, new_context, race_stages, results_table
from tripletml.auto.resources import sparse_safe, warn_sparse_safe
from tripletml.core.validation import check_scalar_param, check_X
from tripletml.metrics import check_scoring, evaluate_retrieval

__all__ = ["AutoSimilarity"]

#: the validation scores of a fit on comparisons (tripletml.auto.comparisons)
_COMPARISON_SCORES = ("triplet_accuracy", "roc_auc")
#: n_splits="auto" with a k-NN accuracy as the race's score
KNN_AUTO_SPLITS = 3

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

    * **stage 0, the cheap rung**: Euclidean raw /
      standardized / whitened, KISSME (standardized; ``shrinkage`` 0, 0.01,
      0.1; a closed form, fitted once), RCA (standardized, closed form),
      OASIS (``"sphere"``, whitened), SDCA (3
      passes; ``"sphere"`` / whitened, alpha 1e-2 / 1e-3), COMET
      (``"sphere"``, whitened),
      raced by successive halving over ``n_triplets`` (1111, 3333, 10000);
    * **the bar**: the best validation score of stage 0;
    * **stage 1, the costly family** (SML with ``preprocessing`` None /
      standardized / whitened, budget ``max_iter`` 300): a pilot round at 33
      iterations; candidates below the bar leave (``stopped`` says so), a
      lone survivor goes straight to 300 iterations and must still beat the
      bar there;
    * the best survivor of both stages is refitted on all rows.

    Where the cheap rung already wins, the costly family costs three
    33-iteration pilots (measured times: BENCHMARKS.md).

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
        :data:`DEFAULT_CANDIDATES` (stage 0: Euclidean raw / standardized /
        whitened, KISSME, RCA, OASIS, SDCA, COMET; stage 1: SML); with
        ``scoring="knn_accuracy[@k]"`` :data:`~tripletml.auto.candidates.KNN_CANDIDATES`
        (the same, plus LFDA in stage 0, LMNN and SCML in a later stage and
        NCA in the last, grown by ``max_iter``).  Every default candidate
        sets ``preprocessing`` explicitly (the learners' ``"auto"`` is not
        used), whatever the ``scoring``.  A grid may vary ``sampling`` for
        any learner that has it (e.g. ``"grid": {"sampling": ["class",
        "knn"]}``; rounds are warm-started only for class sampling).
    scoring : str, default="map"
        What the race maximizes on the validation items (leave-one-out
        within them, :func:`tripletml.metrics.validation_score`): ``"map"``
        (retrieval mAP), ``"precision@<k>"`` (e.g. ``"precision@1"``,
        ``"precision@10"``), ``"knn_accuracy"`` (accuracy of the 1-NN
        classifier with the candidate's similarity) or ``"knn_accuracy@<k>"``
        (k-NN majority vote).  ``best_score_`` and the ``cv_results_``
        scores are in this criterion; ``score`` stays the mAP.
    time_budget : float, default=60.0
        Seconds for the race (> 0).  Guarantee: no round starts when the
        rounds so far predict that it would end after the budget, no
        candidate fit *starts* after it, and a fit running at its end stops
        after its training loop's step under way
        (:func:`tripletml.engine.training_deadline`; a closed form or a
        one-call solver, MMC's, LMNN's, NCA's, finishes) and is not scored;
        the race then stops, ``stop_reason_ = "max_time"``, and the best
        candidate of the last completed round is refitted.  So the whole
        ``fit`` takes at most about ``time_budget`` + one training step (or
        one such whole fit) + the final refit.
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
        alone).
    n_splits : int or "auto", default="auto"
        Number of stratified fit/validation splits (scores are averaged).
        "auto": 3 for the k-NN accuracies (``scoring="knn_accuracy[@k]"``:
        each validation item scores 0 or 1, on one split of a third of the
        rows a few items decide between two racers), else 1 (the retrieval
        scores average many ranks per item).  The number used is
        ``n_splits_``.
    validation_size : float, default=0.3
        Fraction of the training items held out for validation, in (0, 1).
    max_validation_items : int or None, default=1000
        At most this many validation items (a stratified subset of the held-out
        ones) are scored: scoring is quadratic in their number.  The held-out items that
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
    holdout : {"items", "answers"}, default="items"
        With triplets or pairs only: what the validation holds out.
        ``"items"``: the answers about items no fit saw (the model will
        rank new items).  ``"answers"``: answers about the same items,
        ``cv`` applied to the answers (the test answers will be about the
        items of the training answers: the *seen-items* protocol, where
        following the answers closely can pay; ``groups=`` then does not
        apply).
    preprocessor : array-like or callable or None, default=None
        metric-learn's row lookup: with it, ``fit`` takes index triplets
        ``(n, 3)`` or index pairs ``(n, 2)`` (with y) into its rows.
    selection : {"one_se", "best"}, default="one_se"
        How the final comparison picks the winner (class labels or
        triplets).
        ``"best"``: the highest mean validation score (a tie to a
        no-learning candidate).  ``"one_se"``: the one-standard-error rule
        (Breiman et al. 1984; Hastie et al., *Elements of Statistical
        Learning*, Sec. 7.10): the best must beat the no-learning candidate
        on the rows as given (Euclidean with ``preprocessing=None`` in the
        default races; any candidate that learns nothing with
        ``preprocessing=None``; without one the rule does nothing) by more
        than one standard error of their paired difference
        over the validation items (every split; each item's own term of the
        score, :func:`tripletml.metrics.validation_item_scores`), else that
        baseline wins and the best's ``cv_results_`` row says ``"one_se:
        ..."``.  A learned metric or a preprocessing is kept only where the
        validation items show it helps beyond their noise (measured on the
        shared sets: BENCHMARKS.md).  On triplets the baseline is the best
        no-learning racer (raw, cosine or standardized Euclidean) and the
        terms are the validation answers (1 / 0: ranked right or not), the
        answers about one query item a cluster; pairs (scored by an AUC,
        which has no term per answer) take the best score.

    Attributes
    ----------
    best_estimator_ : learner
        The winner refitted on all rows; its ``preprocessing`` (a learner
        parameter) is part of it, so it works on raw features.
    best_params_ : dict
        ``{"learner": name, **parameters, budget parameter: value}``.
    best_score_ : float
        Mean validation mAP of the winner in its last round.
    n_splits_ : int
        The label race's fit/validation splits (``n_splits`` resolved).
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
        comparison), ``"one_se: ..."`` (scored best, but within one
        standard error of a no-learning baseline, which won, see
        ``selection``; after the reason the row had, if any),
        ``""`` for the winner's last entry and for entries the
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
                 n_splits: int | str = "auto",
                 validation_size: float = 0.3, max_validation_items: Optional[int] = 1000,
                 factor: int = 3, n_jobs: Optional[int] = None, random_state=None,
                 verbose: int = 0, cv=None, holdout: str = "items", preprocessor=None,
                 selection: str = "one_se"):
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
        self.holdout = holdout
        self.preprocessor = preprocessor
        self.selection = selection

    # ------------------------------------------------------------ checks
    def _validate_params(self) -> None:
        if self.scoring not in _COMPARISON_SCORES:
            check_scoring(self.scoring, _WHO)
        check_scalar_param(self.time_budget, "time_budget", _WHO, low=0, low_inclusive=False)
        if isinstance(self.n_splits, str):
            if self.n_splits != "auto":
                raise TypeError(f"{_WHO}: parameter n_splits={self.n_splits!r} must be an "
                                "integer >= 1 or 'auto'.")
        else:
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
        if not (isinstance(self.selection, str) and self.selection in ("one_se", "best")):
            raise ValueError(f"{_WHO}: parameter selection={self.selection!r} must be "
                             "'one_se' (a learned metric or a preprocessing must beat the "
                             "raw features' baseline by one standard error) or 'best' (the "
                             "highest validation score).")
        if not (isinstance(self.holdout, str) and self.holdout in ("items", "answers")):
            raise ValueError(f"{_WHO}: parameter holdout={self.holdout!r} must be 'items' "
                             "(validate on items no fit saw: new items at test time) or "
                             "'answers' (on held-out answers about the same items).")

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
        """The race: ``candidates``, or the default race for the ``scoring``
        (:func:`~tripletml.auto.candidates.default_candidates`: the
        neighbourhood learners LMNN, NCA, SCML and LFDA join it for the
        k-NN accuracies)."""
        return default_candidates(self.scoring) if self.candidates is None else self.candidates

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
            Row indices into X of pairs labeled by y.
        groups : array-like of shape (n_samples,), optional
            With triplets or pairs: a group per row; the validation holds out
            whole groups of items (e.g. all the photos of one product).

        With triplets or pairs the race validates on held-out *items*
        (:mod:`tripletml.auto.comparisons`): ``cv`` (None: ``n_splits``
        random splits holding out ``validation_size`` of the items; an int:
        that many folds; or a scikit-learn splitter, applied to the items
        with ``groups``), held-out triplet accuracy or pair ROC AUC
        (``scoring_``), the no-learning Euclidean and cosine always among
        the candidates; with triplets a learned winner must lead the best
        of them by more than one standard error (``selection``).

        Returns
        -------
        self
        """
        t_start = time.time()
        for a in ("n_features_in_", "best_estimator_", "skipped_", "supervision_",
                  "scoring_", "n_splits_"):
            if hasattr(self, a):
                delattr(self, a)
        self._validate_params()
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
        if groups is not None or self.cv is not None or self.holdout != "items":
            raise ValueError(f"{_WHO}: groups=, cv= and holdout= apply to a fit on triplets "
                             "or pairs; the label race splits the items stratified by class "
                             "(n_splits, validation_size).")
        if self.scoring in _COMPARISON_SCORES:
            raise ValueError(f"{_WHO}: scoring={self.scoring!r} needs triplets or pairs; "
                             "with class labels use 'map', 'precision@k' or 'knn_accuracy'.")
        return self._fit_labels(X, y, t_start)

    def _resolved_splits(self) -> int:
        """``n_splits``, with "auto" resolved for the scoring (see there)."""
        if isinstance(self.n_splits, str):
            kind, _ = check_scoring(self.scoring, _WHO)
            return KNN_AUTO_SPLITS if kind == "knn_accuracy" else 1
        return int(self.n_splits)

    def _fit_labels(self, X, y, t_start: float):
        """The label race (:mod:`tripletml.auto.race`), then the refit of
        the winner on all rows."""
        self.n_splits_ = self._resolved_splits()
        X = check_X(X, _WHO, accept_sparse=True)
        if sp.issparse(X):
            X = X.tocsr()
        cands, replaced = sparse_safe(_expand_candidates(self._candidate_specs()), X)
        warn_sparse_safe(replaced, X, _WHO)
        y = self._check_y(y, X.shape[0])
        ctx = new_context(self, cands, X, y, t_start)
        stop, champions = race_stages(ctx)
        self.skipped_ = replaced + list(ctx["skipped"])
        win, win_row = choose_winner(ctx, champions, self.time_budget)
        win_budget = win_row["budget"] if cands[win].budget else None
        self.cv_results_ = results_table(ctx["rows"], len(ctx["splits"]), win_row,
                                         ctx["reached"])
        self.history_ = ctx["hist"]
        self.stop_reason_ = stop
        # refit on all training rows (seeded as the winner's last round)
        cand = cands[win]
        t0 = time.perf_counter()
        seed = int(np.random.SeedSequence([ctx["seed0"], win, 10**6]).generate_state(1)[0])
        model = cand.make(win_budget, seed)
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
            return int(check_random_state(rs).randint(0, 2**31 - 1))
        raise TypeError(f"{_WHO}: random_state={rs!r} must be None, an int, a numpy Generator "
                        "or RandomState.")

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

    def score(self, X, y) -> float:
        """Leave-one-out retrieval mAP within X (as every learner's ``score``)."""
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
                "time_budget": float(self.time_budget),
                "n_splits": int(getattr(self, "n_splits_", 1)),
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

