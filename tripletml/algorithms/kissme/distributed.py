"""KISSME over the partitions of a collection (strategy ``"statistics"``,
:mod:`tripletml.distributed.class_stats`): its exact ``(Sigma_S, Sigma_D)``
from labels.

KISSME's weights ``a_c`` of
:func:`~tripletml.algorithms.kissme.kernels._label_weights` depend
non-linearly on the *global* class sizes, so the per-class scatters stay
apart until the reduction is done (one pass).  When ``k d^2`` floats of
per-class scatters exceed :data:`PER_CLASS_BYTES`, two passes instead: the
class sizes and means first, then per partition the two weighted class
scatters *about the global class means* (:func:`weighted_gram_task`),
summed: the in-memory computation's own form, O(d^2) per partition whatever
the number of classes.
"""
from __future__ import annotations

import numpy as np

from tripletml.algorithms.kissme.kernels import (_blocked_class_gram, _label_weights,
                                                 answer_folds, factor_distances, row_images,
                                                 fold_scatter_sums, heldout_counts,
                                                 scatter_from_class_statistics)
from tripletml.distributed.class_stats import (add_arrays, check_labels, class_moments_task,
                                               gather_reduce, merge_class_moments)

__all__ = ["PER_CLASS_BYTES", "weighted_gram_task", "kissme_label_scatters",
           "fold_pair_sums_task", "heldout_counts_task"]

#: largest per-partition statistic of per-class ``d x d`` scatters
#: (``k d^2`` float64) for the one-pass KISSME fit; beyond it, two passes
PER_CLASS_BYTES = 1 << 27


def weighted_gram_task(p, sup, raw_means: np.ndarray, wS: np.ndarray,
                       wD: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sum_i wS_{c_i} z_i z_i^T, sum_i wD_{c_i} z_i z_i^T)`` over the
    partition's rows, ``z_i = x_i - mu_{c_i}`` about the *global* class
    means (KISSME's second pass; the in-memory kernel on the partition)."""
    return _blocked_class_gram(sup.rows(p), sup.codes_of(p), raw_means, wS, wD)


def kissme_label_scatters(plan, sup, k: int, d: int) -> tuple:
    """KISSME's exact ``(Sigma_S, Sigma_D)`` from labels
    (:func:`~tripletml.algorithms.kissme.kernels.pair_scatter_from_labels` of the
    concatenated rows ``sup.rows``), and the number of passes (1: per-class
    scatters merged in the tree; 2: class means, then weighted scatters
    about them)."""
    be = plan.backend
    one_pass = k * d * d * 8 <= PER_CLASS_BYTES
    counts, means, scat = gather_reduce(
        be, merge_class_moments, be.map(class_moments_task, sup, k, True if one_pass else None))
    check_labels(counts, "KISSME: every class has a single member; no (query, positive) "
                 "pair of the same class exists.")
    w = _label_weights(counts)
    if one_pass:
        S_w = np.tensordot(w["a"], scat, axes=1)
        C_w = np.tensordot(w["c"], scat, axes=1)
    else:
        S_w, C_w = gather_reduce(be, add_arrays,
                                 be.map(weighted_gram_task, sup, be.broadcast(means),
                                        w["a"], w["c"]))
    S, D = scatter_from_class_statistics(counts, means, S_w, C_w)
    return S, D, 1 if one_pass else 2


# ------------------------------------------- shrinkage="auto" on triplets
def _global_triplets(p, sup, offsets):
    """The partition's triplets (as :func:`class_stats.pair_sums_task`
    samples them) and their folds, hashed on the row ids of the concatenated
    rows (``offsets[p.index]`` + local ids): the in-memory fit's folds."""
    T = sup.triplets(p, sup.rows(p))
    return T, answer_folds(T + int(offsets[p.index]))


def fold_pair_sums_task(p, sup, rows_sup, offsets, n_folds: int):
    """Per fold of the held-out choice, the partition's answers and its
    unnormalised similar and dissimilar pair scatters of ``rows_sup``'s rows
    (:func:`~tripletml.algorithms.kissme.kernels.fold_scatter_sums`)."""
    T, folds = _global_triplets(p, sup, offsets)
    return fold_scatter_sums(rows_sup.rows(p), T, folds, n_folds)


def heldout_counts_task(p, sup, pre_sup, offsets, fold: int, factors):
    """``C[g]``: the partition's triplets of fold ``fold`` that the model of
    ``factors[g]`` (on the preprocessed rows ``pre_sup.rows(p)``) orders as
    answered, ties one half."""
    T, folds = _global_triplets(p, sup, offsets)
    C = np.zeros(len(factors))
    t = T[folds == fold]
    if len(t):
        Z = pre_sup.rows(p)
        for g, L in enumerate(factors):
            Y = row_images(Z, L, 2 * len(t))
            C[g] = heldout_counts(factor_distances(Z, t[:, 0], t[:, 1], L, Y),
                                  factor_distances(Z, t[:, 0], t[:, 2], L, Y))
    return (C,)
