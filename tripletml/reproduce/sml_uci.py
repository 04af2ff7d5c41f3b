"""SML paper (Ying, Huang & Campbell 2009), Figure 1 on the four UCI sets.

Wine, Iris, Balance Scale, Ionosphere: random 85/15 splits (10 repeats);
features standardized on the training part; 1,500 random class triplets
from the training part.  The trade-off (the paper's gamma for SML / SMLgd,
lambda for LowRankDML: ``alpha`` of both) from {1e-5, ..., 1e2} and the k of the k-NN classifier from
{1, 3, 5, 7} by 3-fold cross-validation on the training part (k alone for
Euclidean); on a tie the larger trade-off wins (the sparser metric: on
wine most of the grid reaches zero validation error), then the smaller k.
Reported: test k-NN error and the learned dimensionality (the
eigenvalues of M above 1% of the largest, one rule for every method; d for
Euclidean), Figure 1 (a)-(h), and the objective of eq. (4)
against iterations for SMLsm vs SMLgd on each set at gamma = 1e-2
(Figure 1 (i)-(l)).

Solver settings: SMLsm with mu = 1 (the bias at the solution is ``mu
||M*||_F^2``; the paper's bound ``mu T / gamma`` is far looser) and the
backtracking Lipschitz estimate; SMLgd with step ``eta0 / sqrt(t)``, eta0 =
``1 / sqrt(sum_tau ||X_tau||_F^2)`` (a first step of Frobenius size about
one); 150 iterations inside cross-validation, 500 for the final fit.
LowRankDML (incsvd, triplet hinge averaged over the triplets, no ball)
stands for the library's other Mahalanobis learners.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

from tripletml import datasets
from tripletml.algorithms.baselines.estimator import Euclidean
from tripletml.algorithms.lowrank_dml.estimator import LowRankDML
from tripletml.algorithms.sml.estimator import SML
from tripletml.metrics import knn_error
from tripletml.triplets import random_class_triplets
from tripletml.reproduce import register
from tripletml.reproduce._common import mean_std, run_jobs, write_table

SETS = ("wine", "iris", "balance-scale", "ionosphere")
GRID = tuple(10.0 ** e for e in range(-5, 3))
KS = (1, 3, 5, 7)
N_TRIPLETS = 1500
#: the smoothing parameter of SMLsm (its bias at the solution is mu ||M*||_F^2)
SMOOTH_MU = 1.0
#: eigenvalues below this fraction of the largest do not count as dimensions
DIM_TOL = 1e-2


def effective_dim(M: np.ndarray, rel: float = DIM_TOL) -> int:
    """Eigenvalues of M above ``rel`` times the largest: the dimensionality
    the metric uses (one rule for every method)."""
    ev = np.linalg.eigvalsh(0.5 * (M + M.T))
    return int(np.sum(ev > rel * ev.max())) if ev.max() > 0 else 0


def _xnorm(X, t):
    a, b = X[t[:, 0]] - X[t[:, 1]], X[t[:, 0]] - X[t[:, 2]]
    na, nb, ab = (a * a).sum(1), (b * b).sum(1), (a * b).sum(1)
    return float(np.sqrt(np.sum(na ** 2 + nb ** 2 - 2 * ab ** 2)))


def _model(method, reg, X, t, max_iter, seed):
    if method == "SML":
        return SML(preprocessing=None,
                   alpha=reg, mu=SMOOTH_MU, max_iter=max_iter, tol=1e-6, random_state=seed)
    if method == "SMLgd":
        return SML(preprocessing=None,
                   alpha=reg, solver="subgradient", eta0=1.0 / _xnorm(X, t), max_iter=max_iter,
                   tol=1e-6, random_state=seed)
    return LowRankDML(preprocessing=None,
                      alpha=reg, constraint=None, eta0=1.0, batch_size=100, max_iter=max_iter,
                      eval_every=0, random_state=seed)


def _fit(model, X, t):
    """Fit on explicit triplets.  The budgets (150 / 500 iterations) are the
    protocol and ``tol=1e-6`` only ends a run early, so reaching the budget
    is expected (nearly every SML / SMLgd fit does): its ConvergenceWarning
    is silenced here; ``stop_reason_`` still tells."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, triplets=t)


def _cv_select(method, X, y, seed, max_iter=150):
    folds = StratifiedKFold(3, shuffle=True, random_state=seed).split(X, y)
    err = np.zeros((len(GRID) if method != "Euclidean" else 1, len(KS)))
    for f, (a, b) in enumerate(folds):
        if method == "Euclidean":
            err[0] += knn_error(Euclidean().fit(X[a]), X[a], y[a], X[b], y[b], k=KS)
            continue
        t = random_class_triplets(y[a], N_TRIPLETS, random_state=seed + f)
        for g, reg in enumerate(GRID):
            m = _fit(_model(method, reg, X[a], t, max_iter, seed), X[a], t)
            err[g] += knn_error(m, X[a], y[a], X[b], y[b], k=KS)
    g, k = cv_argmin(err)
    return (GRID[g] if method != "Euclidean" else None), KS[k]


def check_only(only, names, repro: str) -> None:
    """Refuse data-set names outside ``names`` before anything is written
    (``--only foo`` used to write empty tables, then fail in matplotlib)."""
    unknown = [o for o in (only or ()) if o not in names]
    if unknown or (only is not None and not tuple(only)):
        raise ValueError(f"reproduction {repro!r}: unknown data set(s) "
                         f"{', '.join(repr(u) for u in unknown) or '(none given)'} in --only; "
                         f"choose from {', '.join(names)}.")


def cv_argmin(err: np.ndarray) -> tuple[int, int]:
    """(regularization index, k index) of the lowest cross-validation error;
    ties go to the stronger regularization (the simpler, lower-rank metric),
    then to the smaller k."""
    g = np.flatnonzero(err.min(axis=1) == err.min()).max()
    return int(g), int(np.argmin(err[g]))


def run_split(name, seed, data_home=None, methods=("Euclidean", "SML", "SMLgd", "LowRankDML")):
    b = datasets.load(name, data_home=data_home)
    X, y = np.asarray(b.data, dtype=float), np.asarray(b.target)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), bool)
    for c in np.unique(y):                                  # 15 % per class
        idx = np.flatnonzero(y == c)
        test[rng.choice(idx, max(1, int(round(0.15 * len(idx)))), replace=False)] = True
    sc = StandardScaler().fit(X[~test])
    Xtr, ytr, Xte, yte = sc.transform(X[~test]), y[~test], sc.transform(X[test]), y[test]
    t = random_class_triplets(ytr, N_TRIPLETS, random_state=seed)
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        reg, k = _cv_select(method, Xtr, ytr, seed)
        if method == "Euclidean":
            m, dim = Euclidean().fit(Xtr), Xtr.shape[1]
        else:
            m = _fit(_model(method, reg, Xtr, t, 500, seed), Xtr, t)
            dim = effective_dim(m.get_mahalanobis_matrix())
        rows.append({"dataset": name, "seed": seed, "method": method,
                     "reg": "" if reg is None else reg, "k": k,
                     "error": float(knn_error(m, Xtr, ytr, Xte, yte, k=k)), "dim": dim,
                     "d": Xtr.shape[1], "seconds": time.perf_counter() - t0})
    return rows


def convergence(name, data_home=None, gamma=1e-2, iters=500, seed=0):
    b = datasets.load(name, data_home=data_home)
    X = StandardScaler().fit_transform(np.asarray(b.data, dtype=float))
    t = random_class_triplets(np.asarray(b.target), N_TRIPLETS, random_state=seed)
    out = {}
    for method in ("SML", "SMLgd"):
        m = _model(method, gamma, X, t, iters, seed)
        m.set_params(tol=None)                     # the full budget
        m.fit(X, triplets=t)
        out[method] = (m.history_["objective"], m.history_["seconds"])
    return out


@register("sml-uci", "SML paper Fig. 1: k-NN error, learned dimensionality and SMLsm vs SMLgd "
          "convergence on wine, iris, balance-scale, ionosphere")
def run(out_dir, *, quick=False, seeds=None, data_home=None, verbose=1, only=None):
    check_only(only, SETS, "sml-uci")
    seeds = seeds or (2 if quick else 10)
    sets = tuple(s for s in SETS if not only or s in only)
    t_start = time.perf_counter()
    raw = []
    grid = [(name, s) for name in sets for s in range(seeds)]
    for (name, s), new in zip(grid, run_jobs(run_split, [(n, s_, data_home) for n, s_ in grid])):
        raw += new
        if verbose:
            for r in new:
                print(f"{name:14s} seed {s} {r['method']:11s} reg {r['reg']!s:>7s} k {r['k']} "
                      f"error {r['error']:.4f} dim {r['dim']} {r['seconds']:.1f}s", flush=True)
    rows = []
    for name in sets:
        for method in ("Euclidean", "SML", "SMLgd", "LowRankDML"):
            sel = [r for r in raw if r["dataset"] == name and r["method"] == method]
            e, esd = mean_std([r["error"] for r in sel])
            dm, dsd = mean_std([r["dim"] for r in sel])
            rows.append({"dataset": name, "method": method, "error": e, "error_sd": esd,
                         "dim": dm, "dim_sd": dsd, "d": sel[0]["d"], "splits": len(sel)})
    conv_rows = []
    for name in sets:
        c = convergence(name, data_home, iters=200 if quick else 500)
        for method, (obj, secs) in c.items():
            for i, (o, s_) in enumerate(zip(obj, secs)):
                conv_rows.append({"dataset": name, "method": method, "iteration": i + 1,
                                  "seconds": s_, "objective": o})
    best = {name: min(r["objective"] for r in conv_rows if r["dataset"] == name)
            for name in sets}
    iters_to = []
    for name in sets:
        for method in ("SML", "SMLgd"):
            obj = [r["objective"] for r in conv_rows
                   if r["dataset"] == name and r["method"] == method]
            hit = [i + 1 for i, o in enumerate(obj) if o <= best[name] * 1.01]
            iters_to.append({"dataset": name, "method": method,
                             "iterations_to_1pct": hit[0] if hit else f">{len(obj)}",
                             "final_objective": obj[-1], "best_known": best[name]})
    write_table(raw, out_dir, "sml_uci_all",
                ["dataset", "seed", "method", "reg", "k", "error", "dim", "d", "seconds"],
                title="SML reproduction: every split")
    write_table(rows, out_dir, "sml_uci",
                ["dataset", "method", "error", "error_sd", "dim", "dim_sd", "d", "splits"],
                title="SML paper Fig. 1 (a)-(h): k-NN test error and learned dimensionality",
                notes=__doc__.split("\n\n", 1)[1]
                + f"\n{seeds} splits{' (--quick)' if quick else ''}; total "
                f"{time.perf_counter() - t_start:.0f} s.")
    write_table(conv_rows, out_dir, "sml_convergence",
                ["dataset", "method", "iteration", "seconds", "objective"],
                title="SML paper Fig. 1 (i)-(l): objective per iteration, gamma = 1e-2")
    write_table(iters_to, out_dir, "sml_iterations_to_1pct",
                ["dataset", "method", "iterations_to_1pct", "final_objective", "best_known"],
                title="Iterations to reach 1% of the best known objective (gamma = 1e-2)")
    _plot(rows, conv_rows, sets, out_dir)
    return rows


def _plot(rows, conv_rows, sets, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(sets), figsize=(3.6 * len(sets), 6.4), squeeze=False)
    for j, name in enumerate(sets):
        sel = [r for r in rows if r["dataset"] == name]
        axes[0, j].bar([r["method"] for r in sel], [r["error"] for r in sel],
                       yerr=[r["error_sd"] for r in sel])
        axes[0, j].set_title(f"{name}: k-NN error")
        axes[0, j].tick_params(axis="x", labelsize=7)
        best = min(r["objective"] for r in conv_rows if r["dataset"] == name)
        for method in ("SML", "SMLgd"):
            c = [r for r in conv_rows if r["dataset"] == name and r["method"] == method]
            axes[1, j].plot([r["iteration"] for r in c],
                            [r["objective"] - best + 1e-9 * abs(best) for r in c], label=method)
        axes[1, j].set_yscale("log")
        axes[1, j].set_xlabel("iteration")
        axes[1, j].set_ylabel("objective - best known")
        axes[1, j].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "sml_uci.png", dpi=120)
    plt.close(fig)
