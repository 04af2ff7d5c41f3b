"""The node of every reduction tree of the partitioned training
(:mod:`tripletml.distributed.partitioned`) and of :mod:`tripletml.distributed.sharded`."""
from __future__ import annotations

__all__ = ["tree_sum", "FAN_IN"]

#: partitions (or partial results) combined per reduction task
FAN_IN = 8


def tree_sum(*parts):
    """Sum of the non-None parts (numbers, arrays, or tuples of them,
    summed element-wise): the node of a reduction tree.  Returns new
    objects; the inputs are not modified (a task may be rerun)."""
    parts = [q for q in parts if q is not None]
    if not parts:
        return None
    if isinstance(parts[0], tuple):
        return tuple(tree_sum(*items) for items in zip(*parts))
    out = parts[0]
    for q in parts[1:]:
        out = out + q
    return out
