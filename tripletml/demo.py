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

from .learners.baselines import DotProduct, Euclidean
from .learners.oasis import OASIS
from .learners.comet import COMET
from .learners.factored import FactoredGD, IterativePA, NaivePA
from .learners.loreta import LORETA
from .learners.lowrank_dml import LowRankDML
from .learners.sml import SML
from .learners.sdca import SDCA
from .metrics import evaluate_retrieval

__all__ = ["DEMO_LEARNERS", "run_demo"]

#: (name, factory) for every learner the demo shows; each algorithm adds its own.
DEMO_LEARNERS: list[tuple[str, Callable]] = [
    ("Euclidean", lambda seed: Euclidean()),
    ("DotProduct", lambda seed: DotProduct()),
    ("OASIS", lambda seed: OASIS(C=0.1, n_triplets=50000, n_epochs=3, random_state=seed)),
    ("SDCA", lambda seed: SDCA(lam=0.0025, n_triplets=50000, n_epochs=5, random_state=seed)),
    ("COMET", lambda seed: COMET(n_triplets=10000, n_epochs=5, random_state=seed)),
    ("LORETA k=10", lambda seed: LORETA(rank=10, step_size=0.01, n_triplets=50000,
                                        random_state=seed)),
    ("PA k=10", lambda seed: IterativePA(rank=10, C=0.1, n_triplets=50000, random_state=seed)),
    ("PA v2 k=10", lambda seed: NaivePA(rank=10, C=0.1, n_triplets=50000, random_state=seed)),
    ("GD k=10", lambda seed: FactoredGD(rank=10, step_size=0.01, n_triplets=50000,
                                        random_state=seed)),
    ("LowRankDML", lambda seed: LowRankDML(lam=1e-3, constraint=None, max_iter=500,
                                           n_triplets=20000, eval_every=0, random_state=seed)),
    ("SML", lambda seed: SML(gamma=1e-2, max_iter=300, random_state=seed)),
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
