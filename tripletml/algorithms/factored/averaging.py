"""Tail averaging of the factored learners (``average=True``, issue 43 / 38).

``fit`` returns the average of the iterates ``W_b = A_b B_b^T`` of its last
pass, taken at the ends of its blocks (about 20 per pass) and weighted by
their steps, re-truncated to rank k: the online-to-batch conversion
(Cesa-Bianchi, Conconi & Gentile, IEEE Trans. Inf. Theory 50(9), 2004), as
:class:`~tripletml.OASIS` does with its dense W, projected back onto the
model's set of rank-k matrices by the best rank-k approximation
(Eckart-Young; the same re-truncation iterative parameter mixing applies to
the partitions' factors, :func:`tripletml.linalg.lowrank_mix.mix_truncate`).

Why: one online step corrects the current triplet's loss (fully, for the
passive-aggressive steps), so the last iterate follows the last answers,
noise included, and its quality depends on their order; the average of the
iterates is the estimate of low variance.  Crowd answers are noisy as a
rule.  Measured (Zappos shoes, unseen items, IterativePA at its defaults,
seed 1): the last iterate of one order .667, of another .749, the average
of the pass .784 (cosine .750).

The snapshots cost ``2 d k`` floats per block (about 20 blocks); when they
do not fit in memory, ``fit`` keeps the last iterate (``averaged_`` says
which).  ``partial_fit`` and the partitioned fit make plain steps.
"""
from __future__ import annotations

import numpy as np

from tripletml.linalg.lowrank_mix import mix_truncate, split_balanced

__all__ = ["FactorTailAverage", "AVERAGE_DOC", "document_average"]

AVERAGE_DOC = """average : bool, default=True
        ``fit`` returns the average of the iterates ``A_b B_b^T`` of its
        last pass (tail averaging, the online-to-batch conversion of
        Cesa-Bianchi, Conconi & Gentile 2004, as OASIS), taken at the end
        of each block of steps (about 20 per pass, each weighted by its
        steps) and re-truncated to rank k by its best rank-k approximation
        (thin QRs of the stacked factors, never a d x d matrix; the
        partitioned fit's mixing rule).  Why: an online step corrects the
        current triplet's loss, so the last iterate follows the last
        answers, noise included, and depends on their order; the average
        is the estimate of low variance (see
        :mod:`tripletml.algorithms.factored.averaging`).  Memory: ``2 d k``
        floats per block; when they do not fit, the last iterate
        (``averaged_`` says which).  False: the paper's last iterate.
        ``partial_fit`` always makes plain steps."""


class FactorTailAverage:
    """Mixin of the factored learners (before the online driver in the
    MRO): the hooks ``_begin_epoch`` / ``_run_block`` keep the snapshots of
    ``fit``'s current pass, ``_fit`` replaces the factors by their truncated
    weighted average (``_set_factors`` sets them with any solver state)."""

    def _fit(self, X, triplets, rng):
        self._tail = None
        self.averaged_ = False
        self._averaging_fit = True
        try:
            super()._fit(X, triplets, rng)
            tail = self._tail
            if self.average and tail is not None and len(tail[2]) > 1:
                self.averaged_ = self._set_average(*tail)
        finally:
            self._tail = None
            self._averaging_fit = False

    def _begin_epoch(self, rng, m):
        """A pass of ``fit`` starts: the snapshots restart (the last pass's),
        when they fit in memory (about ``m / BLOCK_MIN`` blocks, at most 20
        and at least 1, of ``2 d k`` floats)."""
        super()._begin_epoch(rng, m)
        self._tail = None          # partial_fit's passes keep nothing
        if self.average and getattr(self, "_averaging_fit", False) and self._tail_fits(m):
            self._tail = ([], [], [])

    def _tail_fits(self, m: int) -> bool:
        from tripletml.core.online import BLOCK_MIN, BLOCKS_PER_EPOCH
        from tripletml.core.validation import check_dense_memory
        blocks = max(1, min(BLOCKS_PER_EPOCH, -(-int(m) // BLOCK_MIN)))
        d, k = self.A_.shape
        try:   # the snapshots, and the stacked copies mix_truncate makes of them
            check_dense_memory(2 * (blocks + 1) * 2 * 8 * d * k, self, "")
        except MemoryError:
            return False
        return True

    def _run_block(self, Xc, triplets, idx, pos):
        out = super()._run_block(Xc, triplets, idx, pos)
        tail = getattr(self, "_tail", None)
        if tail is not None:
            tail[0].append(np.array(self.A_, dtype=np.float64))
            tail[1].append(np.array(self.B_, dtype=np.float64))
            tail[2].append(int(idx.shape[0]))
        return out

    def _set_average(self, As, Bs, steps) -> bool:
        """Replace the factors by the rank-k truncation of the step-weighted
        average of the snapshots; False (the last iterate kept) when the
        average is not finite or, for a learner that needs a rank-k point
        (LORETA), lost rank."""
        w = np.asarray(steps, dtype=np.float64)
        w = w / w.sum()
        k = int(self.A_.shape[1])
        with np.errstate(all="ignore"):
            P, s, Q = mix_truncate(As, Bs, w, k)
        if not (np.isfinite(s).all() and np.isfinite(P).all() and np.isfinite(Q).all()):
            return False
        if self._average_needs_full_rank and not s[-1] > 0:
            return False
        A, B = split_balanced(P, s, Q)
        self._set_factors(A, B)
        return True

    #: LORETA's model is a point of the rank-k manifold (exact pseudo-inverses)
    _average_needs_full_rank = False

    def _set_factors(self, A: np.ndarray, B: np.ndarray) -> None:
        self.A_, self.B_ = A, B


def document_average(cls: type) -> type:
    """Class decorator: replace the line ``    {average}`` of the class
    docstring by :data:`AVERAGE_DOC` (one text for every factored learner)."""
    if cls.__doc__ and "    {average}\n" in cls.__doc__:
        cls.__doc__ = cls.__doc__.replace("    {average}\n", "    " + AVERAGE_DOC + "\n")
    return cls
