"""Protocol helpers shared by the reproductions: splits and table output."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np

from tripletml.distributed.dask_search import active_client

__all__ = ["per_class_split", "write_table", "markdown_table", "mean_std", "run_jobs"]


def run_jobs(func, jobs, n_jobs: int | None = 1):
    """``[func(*args, **kwargs) for args, kwargs in jobs]``, in order.

    Each job is ``(args, kwargs)`` or a plain tuple of args.  Serial by
    default; inside :func:`tripletml.distributed.dask_search.use_cluster` (``tripletml
    reproduce --scheduler ...``) the jobs go through joblib's Dask backend
    (``n_jobs=-1``), and with ``n_jobs != 1`` through joblib's local backend.
    Jobs are pure functions of their arguments (data, settings, seed), so
    every path gives the same numbers.  Returns a list.
    """
    jobs = [j if (len(j) == 2 and isinstance(j[0], tuple) and isinstance(j[1], dict))
            else (tuple(j), {}) for j in jobs]
    if active_client() is not None:
        n_jobs = -1
    if n_jobs == 1:
        return [func(*a, **kw) for a, kw in jobs]
    from joblib import Parallel, delayed
    return list(Parallel(n_jobs=n_jobs)(delayed(func)(*a, **kw) for a, kw in jobs))


def per_class_split(y, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split every class separately: ``round(test_fraction * n_c)`` of its
    members (shuffled with ``seed``) go to the test part.  Returns sorted
    (train_idx, test_idx)."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test.append(idx[: int(round(test_fraction * idx.size))])
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(y.size), test)
    return train, test


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=0))


def markdown_table(rows: list[dict], columns: Sequence[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4f}"
        return "" if v is None else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict], out_dir: Path, stem: str, columns: Sequence[str],
                title: str = "", notes: str = "") -> tuple[Path, Path]:
    """Write ``rows`` as ``stem.csv`` and ``stem.md``; return both paths."""
    out_dir = Path(out_dir)
    csv_path = out_dir / f"{stem}.csv"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    md_path = out_dir / f"{stem}.md"
    md = (f"# {title}\n\n" if title else "") + markdown_table(rows, columns)
    if notes:
        md += "\n" + notes.strip() + "\n"
    md_path.write_text(md)
    return csv_path, md_path
