"""``history_``: one record per iteration (or ``partial_fit`` call)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["History"]


class History:
    """Collects ``history_``: a dict of equal-length lists, one entry per
    record (``step`` and ``seconds`` always present).

    Parameters
    ----------
    previous : dict, optional
        A ``history_`` to extend (``partial_fit``); its ``seconds`` continue.
    keys : tuple of str
        Columns present from the start (missing values are None).
    """

    def __init__(self, previous: dict | None = None, keys: tuple[str, ...] = ()):
        self.data: dict[str, list] = {k: list(v) for k, v in (previous or {}).items()}
        for k in ("step", "seconds") + tuple(keys):
            self.data.setdefault(k, [])
        self._t0 = time.perf_counter()
        self._offset = self.data["seconds"][-1] if self.data["seconds"] else 0.0

    def continue_from(self, previous: dict) -> None:
        """Replace the records by ``previous`` (a run resumed from a
        checkpoint); its ``seconds`` continue."""
        self.data = {k: list(v) for k, v in previous.items()}
        for k in ("step", "seconds"):
            self.data.setdefault(k, [])
        self._t0 = time.perf_counter()
        self._offset = self.data["seconds"][-1] if self.data["seconds"] else 0.0

    def __len__(self) -> int:
        return len(self.data["step"])

    def record(self, step: int, **values: Any) -> None:
        """Append one record at ``step`` (the solver's step counter)."""
        n = len(self.data["step"])
        self.data["step"].append(int(step))
        self.data["seconds"].append(self._offset + time.perf_counter() - self._t0)
        for k, v in values.items():
            col = self.data.setdefault(k, [None] * n)
            col.append(float(v) if isinstance(v, (float, np.floating, int, np.integer)) else v)
        for col in self.data.values():
            if len(col) < n + 1:
                col.append(None)

    def last(self, key: str) -> Any:
        """The last recorded value of ``key`` (None when there is none)."""
        col = self.data.get(key)
        return col[-1] if col else None

    def set_last(self, **values: Any) -> None:
        """Overwrite values of the last record (a solver's final correction)."""
        if not self.data["step"]:
            raise ValueError("History.set_last: no record yet.")
        for k, v in values.items():
            col = self.data.setdefault(k, [None] * len(self))
            col[-1] = float(v) if isinstance(v, (float, np.floating, int, np.integer)) else v
