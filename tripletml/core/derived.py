"""A cache of values derived from a fitted model's arrays, kept outside the
model.

``transform`` of a bilinear learner needs an eigendecomposition of its
model (:mod:`tripletml.linalg.psd_part`), too costly to redo per call and
not to be stored on the estimator: scikit-learn's checks require that
``transform`` leaves ``__dict__`` unchanged (check_dict_unchanged), a pickle
or a model file holds only the fitted arrays, and the arrays can change
after the value was computed (``partial_fit`` updates ``W_`` in place; a
user may assign ``W_``).  So the value is kept in a weak-keyed table beside
the estimator, keyed by a digest of the arrays it was computed from: it is
recomputed whenever they change, dropped with the estimator, and never
pickled, cloned or saved.
"""
from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any, Callable

import numpy as np

__all__ = ["derived", "fingerprint"]

_TABLE: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def fingerprint(*arrays, extra=()) -> tuple:
    """A key that changes when any of ``arrays`` changes (shape, dtype or a
    byte; a digest of the contents, O(size)) or ``extra`` does."""
    out = [tuple(extra)]
    for a in arrays:
        a = np.ascontiguousarray(a)
        h = hashlib.blake2b(a.view(np.uint8).reshape(-1) if a.size else b"", digest_size=16)
        out.append((a.shape, a.dtype.str, h.hexdigest()))
    return tuple(out)


def derived(owner, name: str, key: tuple, compute: Callable[[], Any]):
    """``compute()``, cached for ``owner`` under ``name`` while ``key`` is
    unchanged (computed outside the lock; two threads may both compute)."""
    with _LOCK:
        slot = _TABLE.get(owner)
        hit = None if slot is None else slot.get(name)
    if hit is not None and hit[0] == key:
        return hit[1]
    value = compute()
    with _LOCK:
        _TABLE.setdefault(owner, {})[name] = (key, value)
    return value
