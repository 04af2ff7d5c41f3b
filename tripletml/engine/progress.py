"""Progress reporting for long loops (tqdm on a terminal, silent otherwise)."""
from __future__ import annotations

import sys
from typing import Any, Iterable

__all__ = ["progress", "progress_bar"]


def progress(iterable: Iterable, *, total: int | None = None, verbose: Any = 0,
             desc: str | None = None, unit: str = "it") -> Iterable:
    """Wrap ``iterable`` in a tqdm bar when ``verbose`` is truthy and stderr is
    a terminal; return it unchanged otherwise (so logs and CI stay clean).
    ``verbose >= 2`` forces the bar even without a terminal."""
    if not _show(verbose):
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False)


def _show(verbose: Any) -> bool:
    if not verbose:
        return False
    return verbose >= 2 or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())


def progress_bar(total: int, *, verbose: Any = 0, desc: str | None = None,
                 unit: str = "it"):
    """A manually updated tqdm bar (``bar.update(k)``), or None when silent
    (same rule as :func:`progress`)."""
    if not _show(verbose):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False)
