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
5. **Choose.**  The best survivor of all stages (at its best validated
   budget) wins, unless its lead over the no-learning candidate on the rows
   as given (Euclidean, ``preprocessing=None``) is at most one standard
   error of their paired difference over the validation items (the
   one-standard-error rule, ``selection="one_se"``, the default): then that
   baseline wins.
6. **Refit.**  The winner is refitted on all training
   rows with the parameters and budget it won with, and becomes
   ``best_estimator_``.

Persistence: :meth:`AutoSimilarity.save` writes the *winning learner* (a
plain registered learner file, no pickle) with the search summary in its
metadata as the fitted attribute ``auto_search_``; :func:`tripletml.load_model`
of that file returns the winning learner, not an ``AutoSimilarity``.

The package, one module per part:

* :mod:`tripletml.auto.candidates`: the candidate space (the default specs
  :data:`DEFAULT_CANDIDATES`, :data:`FAST_CANDIDATES`, and the rules that
  expand ``candidates`` into racers);
* :mod:`tripletml.auto.resources`: the dense d x d work a fit cannot avoid,
  checked against the memory and the time left before each fit;
* :mod:`tripletml.auto.race`: the label race (steps 1-5 above);
* :mod:`tripletml.auto.comparisons`: the race on triplets or pairs;
* :mod:`tripletml.auto.estimator`: :class:`AutoSimilarity` itself
  (parameters, checks, the dispatch of ``fit``, the refit, the fitted
  attributes and the delegation to the winner).
"""
from __future__ import annotations

from tripletml.auto.candidates import DEFAULT_CANDIDATES, FAST_CANDIDATES
from tripletml.auto.estimator import AutoSimilarity

__all__ = ["AutoSimilarity", "DEFAULT_CANDIDATES", "FAST_CANDIDATES"]
