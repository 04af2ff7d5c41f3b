"""``tripletml.datasets.load``: the registered sets (:func:`._base.load`) and
the comparison sets (:func:`.comparisons.load_comparisons`) under one name."""
from __future__ import annotations

import os

from sklearn.utils import Bunch

from tripletml.datasets import _base
from tripletml.datasets.comparisons import COMPARISONS, load_comparisons

__all__ = ["load"]


def load(name: str, data_home: str | os.PathLike | None = None, *, subset: str = "all",
         verify: bool = True) -> Bunch:
    if isinstance(name, str) and name in COMPARISONS:
        if subset != "all":
            raise ValueError(f"load: the comparison set {name!r} has no subsets; got "
                             f"subset={subset!r}.")
        return load_comparisons(name, data_home, verify=verify)
    return _base.load(name, data_home, subset=subset, verify=verify)


load.__doc__ = (_base.load.__doc__ or "").rstrip() + """

    Notes
    -----
    Comparison sets (``"zappos"``: human triplets about items) load through
    :func:`tripletml.datasets.load_comparisons` and return its Bunch
    (``triplets``, ``features``, ``n_items``, ...); they have no subsets.
    """
