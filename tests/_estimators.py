"""One registry of every public learner; the generic API tests are
parametrised over it (add each new learner here)."""
import numpy as np

import tripletml as tm

#: (factory for a quick-to-fit instance, {param: alternative value})
ESTIMATORS = [
    (lambda: tm.Euclidean(), {}),
    (lambda: tm.DotProduct(), {}),
    (lambda: tm.OASIS(n_triplets=200, random_state=0),
     {"C": 0.5, "n_epochs": 2, "n_triplets": 150, "init": "zeros", "random_state": 3,
      "verbose": 0}),
    (lambda: tm.SDCA(n_triplets=200, n_epochs=3, random_state=0),
     {"lam": 0.05, "n_epochs": 2, "n_triplets": 150, "output": "random",
      "average_start": 0.25, "tol": 1e-2, "random_state": 3, "verbose": 0}),
    (lambda: tm.LORETA(rank=2, n_triplets=200, step_size=0.05, random_state=0),
     {"rank": 3, "step_size": 0.01, "n_epochs": 2, "n_triplets": 150, "batch_size": 1,
      "algorithm": "general", "init": "random", "pinv_check_every": 10, "pinv_tol": 1e-6,
      "random_state": 3, "verbose": 0}),
]
ESTIMATORS.append(
    (lambda: tm.COMET(n_triplets=200, n_epochs=1, random_state=0),
     {"alpha": 0.5, "beta": 0.01, "loss": "log", "n_epochs": 2, "n_triplets": 150,
      "step_fraction": 0.3, "step_size": 0.5, "refactor_every": 3, "random_state": 3,
      "verbose": 0}))
ESTIMATORS.append(
    (lambda: tm.SparseCOMET(n_triplets=200, n_epochs=1, random_state=0),
     {"alpha": 0.5, "beta": 0.01, "loss": "squared_hinge", "lam": 0.5, "n_epochs": 2,
      "n_triplets": 150, "theta": 0.5, "step_fraction": 0.3, "refactor_every": 3,
      "random_state": 3, "verbose": 0}))
for _cls in (tm.FactoredGD, tm.IterativePA, tm.NaivePA):
    ESTIMATORS.append(
        (lambda c=_cls: c(rank=2, n_triplets=200, step_size=0.01, random_state=0),
         {"rank": 3, "step_size": 0.05, "C": 0.5, "n_epochs": 2, "n_triplets": 150,
          "init": "random", "random_state": 3, "verbose": 0}))

LEARNERS = [(f, alt) for f, alt in ESTIMATORS if f()._needs_triplets]


def ids(entries):
    return [type(f()).__name__ for f, _ in entries]


def toy_data(seed=0, n=30, d=5):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]
    return X, y
for _solver in ("incsvd", "sgd"):
    ESTIMATORS.append(
        (lambda s=_solver: tm.LowRankDML(solver=s, n_triplets=200, max_iter=20, batch_size=20,
                                         eta0=0.1, lam=0.01, random_state=0),
         {"lam": 0.05, "loss": "lmnn", "eta0": 0.05, "batch_size": 10, "max_iter": 15,
          "constraint": "spectral", "tau": 2.0, "n_triplets": 150, "schedule": "constant",
          "push_weight": 0.5, "max_time": 100.0, "eval_every": 3, "random_state": 3,
          "verbose": 0}))
ESTIMATORS.append(
    (lambda: tm.SML(n_triplets=100, max_iter=20, random_state=0),
     {"gamma": 0.1, "mu": 0.01, "solver": "subgradient", "max_iter": 15, "tol": 1e-3,
      "n_triplets": 80, "sampling": "knn", "line_search": True, "eta0": 0.05,
      "rank_tol": 1e-4, "random_state": 3, "verbose": 0}))
