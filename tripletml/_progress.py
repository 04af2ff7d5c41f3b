"""Progress reporting for long loops (tqdm on a terminal, silent otherwise)."""
from __future__ import annotations

import sys
from typing import Any, Iterable

__all__ = ["progress"]


def progress(iterable: Iterable, *, total: int | None = None, verbose: Any = 0,
             desc: str | None = None, unit: str = "it") -> Iterable:
    """Wrap ``iterable`` in a tqdm bar when ``verbose`` is truthy and stderr is
    a terminal; return it unchanged otherwise (so logs and CI stay clean).
    ``verbose >= 2`` forces the bar even without a terminal."""
    if not verbose:
        return iterable
    if verbose < 2 and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False)
