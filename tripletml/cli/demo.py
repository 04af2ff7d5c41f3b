"""``tripletml demo``: every learner on scikit-learn's bundled digits data.

Offline, about half a minute on 2 cores.  Pixel intensities are scaled to
[0, 1]; a stratified 70/30 split; learners fit on the training part; test
queries are ranked against the other test items (leave-one-out).
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tripletml.registry import entries
from tripletml.metrics import evaluate_retrieval

__all__ = ["DEMO_LEARNERS", "run_demo"]

#: (label, factory(seed)) for every learner the demo shows: the registry's
#: entries with demo parameters (:mod:`tripletml.registry`), in its order.
DEMO_LEARNERS: list[tuple[str, Callable]] = [
    (e.demo_label, e.make_demo) for e in entries("triplet") if e.demo is not None
]


def run_demo(random_state: int = 0, out: TextIO = sys.stdout,
             learners: list[tuple[str, Callable]] | None = None) -> list[dict]:
    """Fit every demo learner on digits and print a results table.

    Returns the rows (learner, map, precision_at_1/5/10, fit_seconds).
    """
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y,
                                          random_state=random_state)
    print(f"digits: {X.shape[0]} images x {X.shape[1]} pixels, 10 classes; "
          f"train {len(ytr)}, test {len(yte)} (test queries vs other test items)", file=out)
    rows = []
    header = f"{'learner':<13}{'mAP':>8}{'P@1':>8}{'P@5':>8}{'P@10':>8}{'fit s':>9}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for name, factory in (learners or DEMO_LEARNERS):
        model = factory(random_state)
        t0 = time.perf_counter()
        model.fit(Xtr, ytr)
        secs = time.perf_counter() - t0
        r = evaluate_retrieval(model, Xte, yte, k=(1, 5, 10))
        row = {"learner": name, "map": r["map"], "precision_at_1": r["precision_at_1"],
               "precision_at_5": r["precision_at_5"], "precision_at_10": r["precision_at_10"],
               "fit_seconds": secs}
        rows.append(row)
        print(f"{name:<13}{row['map']:>8.4f}{row['precision_at_1']:>8.4f}"
              f"{row['precision_at_5']:>8.4f}{row['precision_at_10']:>8.4f}{secs:>9.2f}",
              file=out, flush=True)
    return rows
