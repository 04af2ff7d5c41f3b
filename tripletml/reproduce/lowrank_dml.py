"""Low-rank DML paper (Zhang & Zhang, AAAI 2017), Figures 1 and 2.

Data: dexter (train + validation, 600 x 20,000) and news20 (the 20
Newsgroups bydate training part, 11,314 messages, tf-idf over the 60,000
most frequent terms: ``NewsgroupsVectorizer(min_df=1, max_features=60000)``,
in the role of LIBSVM's 62,061-term news20; gisette is not available).
Rows are l2-normalized.  20,000 random class triplets (i, j, k) per set,
minibatches of 100, ``||W||_F <= 1`` as in the paper's experiment.

lam (the paper's lambda, LowRankDML's ``alpha``): the paper's absolute
values (0.1 dexter, 0.01 news20) depend on a feature scaling it does not
state; here lam is a fraction of ``lam_max = lambda_max(mean_t (b_t b_t^T -
a_t a_t^T))``, the smallest lam for which W = 0 is optimal (computed by
Lanczos on ``X^T C X``).
Step sizes ``eta_t = c / sqrt(t)`` (constant c for GD, SGD-Batch, SGD-One;
``c / (t + 2)`` for FW) with c from the paper's grid extended upwards
(features are normalized), chosen per solver by the lowest objective after
a short pilot run, as the paper does ("the largest decrement"); for
Figure 2 on the smallest d and reused for the larger ones.

Figure 1: rank of W_t against the iteration (500 iterations, at most 400
s of training each on dexter, 900 s on news20) for several lam; c from a
50-iteration pilot per data set at its smallest lam.  Figure 2: objective against training
seconds (evaluations excluded) for the six solvers on dexter restricted to
its top-d information-gain features, d = 1,000, 5,000 and 10,000, with a
training budget of 45, 120 and 300 s (a solver stops at the first
iteration that ends past it; an eigh of a 10,000 x 10,000 W alone takes
minutes).  Full dexter and news20 are Figure 1's incsvd runs: a dense d x d
W and an eigh per step at d = 20,000 would need 13 GB and several minutes
per iteration; ``LowRankDML`` refuses the dense solvers when memory is
short.
"""
from __future__ import annotations

import time

import numpy as np
from sklearn.preprocessing import normalize

from tripletml import datasets
from tripletml.datasets.text import InfoGainSelector, NewsgroupsVectorizer
from tripletml.algorithms.lowrank_dml.estimator import LowRankDML
from tripletml.linalg.triplet_dml import TripletDMLProblem
from tripletml.triplets import random_class_triplets
from tripletml.reproduce import register
from tripletml.reproduce._common import write_table
from tripletml.reproduce.sml_uci import check_only

C_GRID = (0.1, 1.0, 10.0, 100.0)
SOLVERS = ("incsvd", "sgd", "sgd_batch", "gd", "fw", "sgd_one")


def lam_max(X, triplets) -> float:
    """Smallest lam for which W = 0 minimizes the triplet objective: the top
    eigenvalue of ``mean_t (b b^T - a a^T) = -X^T C X`` (matrix-free)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    m = len(triplets)
    prob = TripletDMLProblem(X, triplets)
    C = prob.sample_matrix(np.arange(m), np.ones(m), np.ones(m)) / m
    d = X.shape[1]
    op = LinearOperator((d, d), matvec=lambda v: -np.asarray(X.T @ (C @ (X @ v))).ravel(),
                        dtype=float)
    return float(eigsh(op, k=1, which="LA", return_eigenvectors=False)[0])


def load(name: str, data_home=None, seed: int = 0):
    """(X, y) of ``dexter``, ``dexter-<d>`` (top-d information-gain
    features) or ``news20``; rows l2-normalized."""
    if name == "news20":
        c = datasets.load("20newsgroups", data_home=data_home, subset="train")
        X = NewsgroupsVectorizer(min_df=1, max_features=60000).fit_transform(c.data, c.target)
        return X.tocsr(), np.asarray(c.target)
    b = datasets.load("dexter", data_home=data_home)
    X, y = b.data, b.target
    if name != "dexter":
        X = InfoGainSelector(int(name.split("-")[1])).fit(X, y).transform(X)
    return normalize(X).tocsr(), y


def _fit(X, t, solver, lam, c, max_iter, max_time=None, eval_every=10, seed=0):
    m = LowRankDML(preprocessing=None,
                   solver=solver, alpha=lam, eta0=c, max_iter=max_iter, max_time=max_time,
                   eval_every=eval_every, random_state=seed)
    t0 = time.perf_counter()
    m.fit(X, triplets=t)
    return m, time.perf_counter() - t0


def _pick_c(X, t, solver, lam, iters, seed=0, verbose=1):
    best = None
    for c in C_GRID:
        try:
            m, _ = _fit(X, t, solver, lam, c, iters, eval_every=0, seed=seed)
            obj = m.history_["objective"][-1]
        except FloatingPointError:
            obj = np.inf
        if verbose:
            print(f"    pilot {solver:9s} c={c:<6g} objective {obj:.4f}", flush=True)
        if best is None or obj < best[1]:
            best = (c, obj)
    return best[0]


@register("lowrank-dml", "Low-rank DML (incremental SVD) paper Fig. 1 (rank vs iteration) and "
          "Fig. 2 (objective vs time, six solvers) on dexter and news20")
def run(out_dir, *, quick=False, seeds=None, data_home=None, verbose=1, only=None):
    n_triplets = 20_000
    fig1_iters = 100 if quick else 500
    fractions = {"dexter": (0.1, 0.3) if quick else (0.1, 0.3, 1.0), "news20": (0.3, 1.0)}
    fig1_time = {"dexter": 200.0 if quick else 400.0, "news20": 900.0}   # training seconds
    fig1_sets = ("dexter",) if quick else ("dexter", "news20")
    fig2_sets = ("dexter-1000",) if quick else ("dexter-1000", "dexter-5000", "dexter-10000")
    budget = {"dexter-1000": 30.0 if quick else 45.0, "dexter-5000": 120.0,
              "dexter-10000": 300.0}
    check_only(only, fig1_sets + fig2_sets, "lowrank-dml")
    chosen_c = {}            # Figure 2: c picked on the smallest d, reused for larger d
    sets = tuple(s for s in fig1_sets + fig2_sets if not only or s in only)
    t_start = time.perf_counter()
    rank_rows, obj_rows, summary = [], [], []
    for name in sets:
        X, y = load(name, data_home)
        t = random_class_triplets(y, n_triplets, random_state=0)
        lmax = lam_max(X, t)
        if verbose:
            print(f"{name}: {X.shape[0]} x {X.shape[1]}, {X.nnz / X.shape[0]:.0f} nnz/row, "
                  f"lam_max {lmax:.4g}", flush=True)
        lam = 0.1 * lmax
        if name in fig1_sets:                                   # Figure 1
            # the step-size pilot per data set, at its smallest lam
            c = _pick_c(X, t, "incsvd", min(fractions[name]) * lmax, 30 if quick else 50,
                        verbose=verbose)
            for f in fractions[name]:
                m, secs = _fit(X, t, "incsvd", f * lmax, c, fig1_iters,
                               max_time=fig1_time[name], eval_every=25)
                h = m.history_
                for it, r, ts, obj in zip(h["step"], h["rank"], h["train_seconds"],
                                          h["objective"]):
                    rank_rows.append({"dataset": name, "d": X.shape[1], "lam_fraction": f,
                                      "lam": f * lmax, "c": c, "iteration": it, "rank": r,
                                      "train_seconds": ts, "objective": obj})
                summary.append({"dataset": name, "d": X.shape[1], "solver": "incsvd",
                                "lam_fraction": f, "c": c, "iterations": m.n_iter_,
                                "final_rank": m.rank_, "max_rank": max(h["rank"]),
                                "objective": h["objective"][-1], "seconds": secs,
                                "gram_only_updates": m.n_gram_only_updates_})
                if verbose:
                    print(f"  incsvd lam={f:g} lam_max c={c:g}: rank {m.rank_} (max "
                          f"{max(h['rank']):.0f}), objective {h['objective'][-1]:.4f}, "
                          f"{secs:.0f} s", flush=True)
        if name in fig2_sets:                                   # Figure 2
            for solver in SOLVERS:
                if solver not in chosen_c:
                    chosen_c[solver] = _pick_c(X, t, solver, lam, 10, verbose=verbose)
                c = chosen_c[solver]
                m, secs = _fit(X, t, solver, lam, c, 100_000, max_time=budget[name],
                               eval_every=1 if solver in ("gd", "fw") else 5)
                h = m.history_
                obj_rows.append({"dataset": name, "d": X.shape[1], "solver": solver, "c": c,
                                 "iteration": 0, "train_seconds": 0.0, "objective": 1.0})
                for it, ts, obj in zip(h["step"], h["train_seconds"], h["objective"]):
                    if obj is not None:
                        obj_rows.append({"dataset": name, "d": X.shape[1], "solver": solver,
                                         "c": c, "iteration": it, "train_seconds": ts,
                                         "objective": obj})
                summary.append({"dataset": name, "d": X.shape[1], "solver": solver,
                                "lam_fraction": 0.1, "c": c, "iterations": m.n_iter_,
                                "final_rank": m.rank_, "max_rank": "",
                                "objective": h["objective"][-1], "seconds": secs,
                                "gram_only_updates": getattr(m, "n_gram_only_updates_", "")})
                if verbose:
                    print(f"  {solver:9s} c={c:g}: {m.n_iter_} iterations in "
                          f"{h['train_seconds'][-1]:.1f} s, objective {h['objective'][-1]:.4f}",
                          flush=True)
        _write(out_dir, rank_rows, obj_rows, summary, quick, t_start)
    _plot(rank_rows, obj_rows, out_dir)
    return summary


def _write(out_dir, rank_rows, obj_rows, summary, quick, t_start):
    write_table(rank_rows, out_dir, "lowrank_dml_rank",
                ["dataset", "d", "lam_fraction", "lam", "c", "iteration", "rank",
                 "train_seconds", "objective"], title="Figure 1: rank of W_t per iteration")
    write_table(obj_rows, out_dir, "lowrank_dml_objective",
                ["dataset", "d", "solver", "c", "iteration", "train_seconds", "objective"],
                title="Figure 2: objective against training seconds")
    write_table(summary, out_dir, "lowrank_dml",
                ["dataset", "d", "solver", "lam_fraction", "c", "iterations", "final_rank",
                 "max_rank", "objective", "seconds", "gram_only_updates"],
                title="Low-rank DML reproduction (Zhang & Zhang 2017, Figures 1-2)",
                notes=__doc__.split("\n\n", 1)[1] +
                f"\nTotal {time.perf_counter() - t_start:.0f} s{' (--quick)' if quick else ''}.")


def _panels(sets, draw, path):
    """One panel per data set, ``draw(ax, name)`` each, saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 3.6), squeeze=False)
    for ax, ds in zip(axes[0], sets):
        draw(ax, ds)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot(rank_rows, obj_rows, out_dir):
    def rank_panel(ax, ds):
        for f in sorted({r["lam_fraction"] for r in rank_rows if r["dataset"] == ds}):
            sel = [r for r in rank_rows if r["dataset"] == ds and r["lam_fraction"] == f]
            ax.plot([r["iteration"] for r in sel], [r["rank"] for r in sel],
                    label=f"lam = {f:g} lam_max")
        ax.set_title(f"{ds} (d = {sel[0]['d']})")
        ax.set_xlabel("iteration")
        ax.set_ylabel("rank of W_t")

    def objective_panel(ax, ds):
        for solver in SOLVERS:
            sel = [r for r in obj_rows if r["dataset"] == ds and r["solver"] == solver]
            if solver == "sgd_one" and sel:   # intermediate iterates are infeasible
                sel = [sel[0], sel[-1]]
            if sel:     # a step curve: a solver's objective holds until its next iterate
                ax.step([max(r["train_seconds"], 1e-3) for r in sel],
                        [r["objective"] for r in sel], where="post", label=solver)
                d = sel[0]["d"]
        ax.set_xscale("log")
        ax.set_title(f"{ds} (d = {d}), lam = 0.1 lam_max")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("objective")

    sets1 = sorted({r["dataset"] for r in rank_rows})
    if sets1:
        _panels(sets1, rank_panel, out_dir / "lowrank_dml_rank.png")
    sets2 = sorted({r["dataset"] for r in obj_rows}, key=lambda s: int(s.split("-")[1]))
    if sets2:
        _panels(sets2, objective_panel, out_dir / "lowrank_dml_objective.png")
