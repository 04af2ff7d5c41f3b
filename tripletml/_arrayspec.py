"""Declarations of a learner's fitted arrays, checked by ``load_model``.

Each learner class lists the arrays its kernels index, so a crafted model
file cannot hand a Numba kernel an array of the wrong shape or dtype::

    _fitted_arrays = {
        "W_": ArraySpec(("d", "d")),                    # float64, finite
        "alpha_": ArraySpec(("=m",)),
        "dual_ids_": ArraySpec(("=m",), dtype="i", low=0, high="n_samples_fit_"),
        "A_": ArraySpec(("d", "rank")),
    }

Shape entries: an int (exact), None (any length), ``"d"`` (=
``n_features_in_``), the name of an int parameter or fitted attribute of the
model (``"rank"``, ``"n_labels_"``, ``"rank_"``), or ``"=sym"``: every
entry with the same symbol must have the same length.  ``dtype`` is a NumPy
kind: ``"f"`` (float64, all finite unless ``finite=False``), ``"i"``
(integer, values in ``[low, high)`` when given; ``high`` may name an int
attribute like a shape entry) or ``"b"`` (bool).  ``optional=True``: the
array may be absent (e.g. only kept for some settings).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["ArraySpec"]

Dim = Union[int, str, None]


@dataclass(frozen=True)
class ArraySpec:
    shape: tuple[Dim, ...]
    dtype: str = "f"
    finite: bool = True
    low: Optional[int] = None
    high: Dim = None
    optional: bool = False
