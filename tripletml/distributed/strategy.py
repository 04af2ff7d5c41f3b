"""The one small protocol between a partitioned fit and an algorithm: the
:class:`PartitionedStrategy` object an estimator class holds as
``_partitioned_strategy``, and the split of a budget over the partitions
(:func:`partition_shares`) the strategies share.

The distributed layer provides the generic strategies
(:data:`tripletml.distributed.statistics.STRATEGY`,
:data:`tripletml.distributed.mixing.STRATEGY`,
:data:`tripletml.distributed.sample.STRATEGY` and the gradient-sum rounds of
:mod:`tripletml.distributed.gradient_sums`); an algorithm with a strategy of
its own defines it in its folder (SDCA's CoCoA+ in
:mod:`tripletml.algorithms.sdca.distributed`).  The distributed layer calls
``strategy.fit(learner, plan)`` and never imports an algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["PartitionedStrategy", "partition_shares"]


@dataclass(frozen=True)
class PartitionedStrategy:
    """How ``learner.fit(collection)`` trains over the partitions.

    Parameters
    ----------
    name : str
        Recorded in ``partitioned_["strategy"]`` and in a checkpoint's
        settings (``"statistics"``, ``"cocoa"``, ``"mixing"``,
        ``"gradients"``, ``"sample"``).
    fit : callable(learner, plan)
        Trains ``learner`` on the
        :class:`~tripletml.distributed.partitioned.PartitionedFit` ``plan``
        and sets its fitted attributes (and ``plan.info["report"]``).
    checkpoints : bool, default=False
        Whether the strategy has rounds and honours
        ``fit_partitioned(checkpoint_dir=)``.
    ships_model : bool, default=False
        Whether every round ships the learner's model to and from every
        partition (a dense ``d x d`` one is refused when too large to ship
        or to reduce on the driver).
    syncs_per_pass : callable(m_total, learner=None) -> int, optional
        Round trips (broadcast, tasks, reduction, gather) per pass over
        ``m_total`` triplets when more than one (parameter mixing mixes
        once per in-memory block: :func:`tripletml.distributed.mixing.rounds_per_pass`);
        None: one.  A cost model that prices one round trip per pass
        multiplies it by this.
    """

    name: str
    fit: Callable[[Any, Any], None]
    checkpoints: bool = False
    ships_model: bool = False
    syncs_per_pass: Callable[[int], int] | None = None

    def __repr__(self) -> str:
        return f"PartitionedStrategy({self.name!r})"


def partition_shares(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders, ties
    to the lower partition); zero weight gets zero."""
    w = np.asarray(weights, dtype=np.float64)
    if total <= 0 or w.sum() <= 0:
        return [0] * len(w)
    exact = total * w / w.sum()
    base = np.floor(exact).astype(np.int64)
    rest = int(total - base.sum())
    order = np.lexsort((np.arange(len(w)), -(exact - base)))
    base[order[:rest]] += 1
    return [int(v) for v in base]
