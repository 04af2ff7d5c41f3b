"""Table 2 and Figures 1-2 of the SDCA paper (Wu et al., AAAI 2015).

Protocol (paper, "Experimental Testbed and Setup"): for vehicle, vowel,
letter, svmguide4 and segment, every class is split 70/30 into train/test;
10,000 random class triplets are drawn from the training part; lambda is
chosen from {0.0025, 0.005, 0.01} by validation on an 80/20 per-class split
of the training part; mAP of test queries against the other test items;
mean and s.d. over 5 seeds.  SDCA makes up to ``N_EPOCHS`` passes (it stops
earlier once its relative duality gap, gap / primal, is below 1e-3) and returns the average option.

The paper does not say how OASIS was run.  Two OASIS rows are reported:
``oasis_1pass`` -- one pass over the 10k triplets with C = 0.1, the setting
of Chechik et al. and the one whose mAP lands closest to the paper's OASIS
row -- and ``oasis_tuned`` -- C chosen from {0.01, 0.1, 1} by the same
validation as lambda, with the same ``N_EPOCHS`` passes as SDCA (a stronger
baseline than the paper's).

The paper's lambda grid binds: its smallest value, 0.0025, is chosen on most
sets.  The column "SDCA, wide lambda grid" repeats the selection over
{0.0003, 0.001, 0.0025, 0.005, 0.01}; it is reported for information and is
not the paper's protocol.

svmguide4 is the only one of the five LIBSVM files that is not pre-scaled
(its features span ranges from 0.01 to 2.4, and the file has 10 features
where the paper's Table 1 lists 6).  It is reported twice: as the file comes,
and scaled to [-1, 1] with the training part's min/max -- the transformation
LIBSVM's ``svm-scale`` applied to the other four ``.scale`` files.
"""
from __future__ import annotations

import time

import numpy as np

from tripletml import datasets
from tripletml.algorithms.baselines.estimator import Euclidean
from tripletml.algorithms.oasis.estimator import OASIS
from tripletml.algorithms.sdca.estimator import SDCA
from tripletml.metrics import evaluate_retrieval
from tripletml.triplets import random_class_triplets
from tripletml.reproduce import register
from tripletml.reproduce._common import markdown_table, mean_std, per_class_split, run_jobs, write_table

#: Table 2 of sdca-relative-similarity.md: (Eucl, OASIS, SDCA)
PAPER = {"vehicle": (0.3697, 0.5318, 0.5955), "vowel": (0.2920, 0.3383, 0.3564),
         "letter": (0.2135, 0.2531, 0.2806), "svmguide4": (0.2088, 0.2295, 0.2731),
         "segment": (0.6645, 0.6970, 0.7468)}
LAMBDAS = (0.0025, 0.005, 0.01)
#: the paper's grid extended downwards (reported separately, ``sdca_wide``):
#: the smallest paper value is chosen on most sets, so the grid binds.
LAMBDAS_WIDE = (0.0003, 0.001) + LAMBDAS
C_GRID = (0.01, 0.1, 1.0)
N_TRIPLETS = 10_000
N_EPOCHS = 30

#: (row label, data set, scale to [-1, 1])
VARIANTS = [("vehicle", "vehicle", False), ("vowel", "vowel", False),
            ("letter", "letter", False), ("svmguide4", "svmguide4", False),
            ("svmguide4 [-1,1]", "svmguide4", True), ("segment", "segment", False)]


def _scale(Xtr, Xte):
    lo, hi = Xtr.min(axis=0), Xtr.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    f = lambda Z: np.clip(2.0 * (Z - lo) / span - 1.0, -1.5, 1.5)  # noqa: E731
    return f(Xtr), f(Xte)


def _map(model, X, y) -> float:
    return float(evaluate_retrieval(model, X, y, k=())["map"])


def _select(make, grid, X, y, seed):
    """Pick the grid value with the best validation mAP (80/20 per class)."""
    fit_idx, val_idx = per_class_split(y, 0.2, seed + 1000)
    scores = [_map(make(v).fit(X[fit_idx], y[fit_idx]), X[val_idx], y[val_idx]) for v in grid]
    return grid[int(np.argmax(scores))], scores


def run_split(name: str, seed: int, scale: bool = False, data_home=None) -> dict:
    """One seed of the protocol on one data set; returns mAPs and choices."""
    b = datasets.load(name, data_home=data_home)
    X = b.data.toarray() if hasattr(b.data, "toarray") else np.asarray(b.data)
    y = b.target
    tr, te = per_class_split(y, 0.3, seed)
    Xtr, Xte = (X[tr], X[te]) if not scale else _scale(X[tr], X[te])
    ytr, yte = y[tr], y[te]

    def sdca(lam):
        return SDCA(preprocessing=None,
                    alpha=lam, n_triplets=N_TRIPLETS, max_iter=N_EPOCHS, tol=1e-3,
                    random_state=seed)

    def oasis(C):
        return OASIS(preprocessing=None,
                     C=C, n_triplets=N_TRIPLETS, max_iter=N_EPOCHS, random_state=seed)

    lam, scores = _select(sdca, LAMBDAS, Xtr, ytr, seed)
    C, _ = _select(oasis, C_GRID, Xtr, ytr, seed)
    # the wide grid re-uses the validation scores of the paper's values
    wide_scores = [_select(sdca, (v,), Xtr, ytr, seed)[1][0] for v in LAMBDAS_WIDE[:2]] + scores
    lam_wide = LAMBDAS_WIDE[int(np.argmax(wide_scores))]
    t0 = time.perf_counter()
    m_sdca = sdca(lam).fit(Xtr, ytr)
    t_sdca = time.perf_counter() - t0
    t0 = time.perf_counter()
    m_oasis = oasis(C).fit(Xtr, ytr)
    t_oasis = time.perf_counter() - t0
    m_oasis1 = OASIS(preprocessing=None,
                     C=0.1, n_triplets=N_TRIPLETS, max_iter=1, random_state=seed).fit(Xtr, ytr)
    return {"eucl": _map(Euclidean().fit(Xtr), Xte, yte), "oasis_1pass": _map(m_oasis1, Xte, yte),
            "oasis_tuned": _map(m_oasis, Xte, yte),
            "sdca": _map(m_sdca, Xte, yte),
            "sdca_wide": _map(sdca(lam_wide).fit(Xtr, ytr), Xte, yte) if lam_wide != lam
            else _map(m_sdca, Xte, yte),
            "lam": lam, "lam_wide": lam_wide, "C": C, "sdca_s": t_sdca,
            "oasis_s": t_oasis, "sdca_gap": m_sdca.history_["gap"][-1],
            "sdca_epochs": m_sdca.n_iter_}


def convergence_curves(name: str = "vehicle", lam: float = 0.0025, C: float = 0.1,
                       n_steps: int = 100_000, chunk: int = 1000, seed: int = 0,
                       data_home=None) -> dict:
    """Average hinge loss and online mistake rate against steps (Fig. 1-2):
    both learners see the same uniformly drawn stream of the 10k triplets."""
    b = datasets.load(name, data_home=data_home)
    X = b.data.toarray() if hasattr(b.data, "toarray") else np.asarray(b.data)
    tr, _ = per_class_split(b.target, 0.3, seed)
    X, y = X[tr], b.target[tr]
    rng = np.random.default_rng(seed)
    t = random_class_triplets(y, N_TRIPLETS, random_state=rng)
    stream = rng.integers(0, N_TRIPLETS, size=n_steps)
    sdca = SDCA(preprocessing=None, alpha=lam, n_triplets=N_TRIPLETS, output="last")
    oasis = OASIS(preprocessing=None, C=C)
    for s in range(0, n_steps, chunk):
        ids = stream[s:s + chunk]
        sdca.partial_fit(X, t[ids], triplet_ids=ids)
        oasis.partial_fit(X, t[ids])
    return {"step": sdca.history_["step"], "sdca_loss": sdca.history_["avg_loss"],
            "oasis_loss": oasis.history_["avg_loss"],
            "sdca_mistakes": sdca.history_["mistake_rate"],
            "oasis_mistakes": oasis.history_["mistake_rate"]}


@register("sdca-table2", "SDCA paper Table 2 (mAP, 5 LIBSVM sets) and Figures 1-2")
def run(out_dir, *, quick=False, seeds=None, data_home=None, verbose=1):
    seeds = seeds or (2 if quick else 5)
    rows = []
    t_start = time.perf_counter()
    splits = run_jobs(run_split, [(name, s, scale, data_home) for _, name, scale in VARIANTS
                                  for s in range(seeds)])
    for i, (label, name, scale) in enumerate(VARIANTS):
        res = splits[i * seeds:(i + 1) * seeds]
        pe, po, ps = PAPER[name]
        row = {"dataset": label, "paper_eucl": pe, "paper_oasis": po, "paper_sdca": ps}
        for key in ("eucl", "oasis_1pass", "oasis_tuned", "sdca", "sdca_wide"):
            m, s = mean_std([r[key] for r in res])
            row[f"{key}_mean"], row[f"{key}_std"] = m, s
        row["sdca_minus_paper"] = row["sdca_mean"] - ps
        row["lam_chosen"] = " ".join(f"{r['lam']:g}" for r in res)
        row["lam_wide_chosen"] = " ".join(f"{r['lam_wide']:g}" for r in res)
        row["C_chosen"] = " ".join(f"{r['C']:g}" for r in res)
        row["sdca_fit_s"] = float(np.mean([r["sdca_s"] for r in res]))
        row["oasis_fit_s"] = float(np.mean([r["oasis_s"] for r in res]))
        row["sdca_final_gap"] = float(np.max([r["sdca_gap"] for r in res]))
        row["seeds"] = seeds
        rows.append(row)
        if verbose:
            print(f"{label:17s} Eucl {row['eucl_mean']:.4f}±{row['eucl_std']:.4f} (paper {pe:.4f})"
                  f"  OASIS {row['oasis_1pass_mean']:.4f}±{row['oasis_1pass_std']:.4f} (paper {po:.4f})"
                  f" tuned {row['oasis_tuned_mean']:.4f}±{row['oasis_tuned_std']:.4f}"
                  f"  SDCA {row['sdca_mean']:.4f}±{row['sdca_std']:.4f} (paper {ps:.4f})",
                  flush=True)
    cols = ["dataset", "paper_eucl", "eucl_mean", "eucl_std", "paper_oasis", "oasis_1pass_mean",
            "oasis_1pass_std", "oasis_tuned_mean", "oasis_tuned_std", "paper_sdca", "sdca_mean",
            "sdca_std", "sdca_minus_paper", "sdca_wide_mean", "sdca_wide_std", "lam_chosen",
            "lam_wide_chosen", "C_chosen", "sdca_fit_s", "oasis_fit_s", "sdca_final_gap", "seeds"]
    write_table(rows, out_dir, "sdca_table2", cols,
                title="SDCA paper, Table 2: mAP on the LIBSVM sets (all columns)")
    pm = lambda r, k: f"{r[k + '_mean']:.4f} ± {r[k + '_std']:.4f}"  # noqa: E731
    compact = [{"data set": r["dataset"],
                "Eucl (paper)": f"{pm(r, 'eucl')} ({r['paper_eucl']:.4f})",
                "OASIS 1 pass (paper)": f"{pm(r, 'oasis_1pass')} ({r['paper_oasis']:.4f})",
                "OASIS tuned": pm(r, "oasis_tuned"),
                "SDCA (paper)": f"**{pm(r, 'sdca')}** ({r['paper_sdca']:.4f})",
                "SDCA - paper": f"{r['sdca_minus_paper']:+.4f}",
                "lambda chosen": r["lam_chosen"],
                "SDCA, wide lambda grid": pm(r, "sdca_wide"),
                "lambda chosen (wide)": r["lam_wide_chosen"]} for r in rows]
    (out_dir / "sdca_table2.md").write_text(
        "# SDCA paper, Table 2: mAP (mean ± s.d. over seeds; paper in brackets)\n\n"
        + markdown_table(compact, list(compact[0])) + "\n" + __doc__.split("\n\n", 1)[1]
        + f"\nTotal time {time.perf_counter() - t_start:.0f} s; all columns in sdca_table2.csv.\n")
    curves = convergence_curves(n_steps=20_000 if quick else 100_000, data_home=data_home)
    write_table([dict(zip(curves, v)) for v in zip(*curves.values())], out_dir,
                "sdca_oasis_convergence", list(curves),
                title="Average loss and online mistake rate against steps (vehicle)")
    _plot_curves(curves, out_dir)
    return rows


def _plot_curves(c, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    def thousands(v, _pos):       # 250000 -> "250k": short tick labels never overlap
        return f"{v / 1000:g}k" if v else "0"

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    for ax, key, title, ylabel in [(axes[0], "loss", "average hinge loss", "loss"),
                                   (axes[1], "mistakes", "online mistake rate", "rate")]:
        ax.plot(c["step"], c[f"sdca_{key}"], label="SDCA")
        ax.plot(c["step"], c[f"oasis_{key}"], label="OASIS")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.xaxis.set_major_formatter(FuncFormatter(thousands))
        ax.set_xlabel("triplet steps")
        ax.set_ylabel(ylabel)
        ax.set_title(title + " (vehicle)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.savefig(out_dir / "sdca_oasis_convergence.png", dpi=120)
    plt.close(fig)
