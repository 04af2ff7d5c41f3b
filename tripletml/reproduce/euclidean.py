"""The "Eucl" row of Table 2 of the SDCA paper (Wu et al.): Euclidean
retrieval mAP of test queries against the other test items, per-class 70/30
splits, averaged over seeds."""
from __future__ import annotations

import numpy as np

from tripletml import datasets
from tripletml.algorithms.baselines.estimator import Euclidean
from tripletml.metrics import evaluate_retrieval
from tripletml.reproduce import register
from tripletml.reproduce._common import mean_std, per_class_split, run_jobs, write_table

#: Table 2, row "Eucl", of sdca-relative-similarity.md
PAPER_EUCL = {"vehicle": 0.3697, "vowel": 0.2920, "letter": 0.2135, "svmguide4": 0.2088,
              "segment": 0.6645}


def euclidean_map(name: str, seed: int, data_home=None) -> float:
    """Test-vs-test leave-one-out mAP of the Euclidean baseline on one split."""
    b = datasets.load(name, data_home=data_home)
    _, test = per_class_split(b.target, 0.3, seed)
    X = b.data[test]
    return float(evaluate_retrieval(Euclidean().fit(X), X, b.target[test], k=())["map"])


@register("euclidean-baseline", "Euclidean mAP on the SDCA paper's five LIBSVM sets "
          "(Table 2, row Eucl)")
def run(out_dir, *, quick=False, seeds=None, data_home=None, verbose=1):
    seeds = seeds or (2 if quick else 5)
    rows = []
    maps = run_jobs(euclidean_map, [(name, s, data_home) for name in PAPER_EUCL
                                    for s in range(seeds)])
    for i, (name, paper) in enumerate(PAPER_EUCL.items()):
        vals = maps[i * seeds:(i + 1) * seeds]
        m, s = mean_std(vals)
        rows.append({"dataset": name, "paper": paper, "ours_mean": m, "ours_std": s,
                     "diff": m - paper, "seeds": seeds})
        if verbose:
            print(f"{name:10s} paper {paper:.4f}   ours {m:.4f} ± {s:.4f}   "
                  f"diff {m - paper:+.4f}")
    write_table(rows, out_dir, "euclidean_baseline",
                ["dataset", "paper", "ours_mean", "ours_std", "diff", "seeds"],
                title="Euclidean baseline, SDCA paper Table 2 (row Eucl)",
                notes=f"Per-class 70/30 split, test queries vs other test items, "
                      f"{seeds} seeds (0..{seeds - 1}).")
    _plot(rows, out_dir)
    return rows


def _plot(rows, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["dataset"] for r in rows]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(x - 0.2, [r["paper"] for r in rows], 0.4, label="paper")
    ax.bar(x + 0.2, [r["ours_mean"] for r in rows], 0.4, yerr=[r["ours_std"] for r in rows],
           label="tripletml")
    ax.set_xticks(x, names)
    ax.set_ylabel("mAP (Euclidean)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "euclidean_baseline.png", dpi=120)
    plt.close(fig)
