"""Zappos crowd triplets: ``AutoSimilarity`` fitted on the answers, against the
cosine, Euclidean and (seen items) the feature-free ordinal embeddings
(issue 38 s4).

Two protocols, 20,000 training triplets drawn per seed (``default_rng(seed)``):

* ``unseen`` (the items split, as ``bench/bench_zappos_unseen.py``): for seed
  s, ``p = default_rng(s).permutation(85)``, train shoes ``sorted(p[:57])``;
  fit on the triplets among train shoes (``fit(X[train], triplets=local)``),
  score on the triplets whose three shoes are test shoes (``test-test``) and
  whose head is a test shoe (``test-head``).
* ``seen`` (the answers split): KFold(5, shuffled, seed 0) over the 283,770
  triplets; fit on 20,000 of a fold's 80 %, score on its 20 %, all 85 shoes
  known.  Feature-free SOE / STE / t-STE (10-D, ``n_init=4``) beside them.

Rows: ``cosine`` = ``Euclidean(preprocessing="normalize")``, ``Euclidean``
(raw), ``AutoSimilarity`` at defaults (``random_state=seed``: its own
item-held-out validation inside the training shoes, ``n_splits=1``,
``time_budget=60``; the winner's parameters are printed) and OASIS at its
defaults (``preprocessing="auto"``, which keeps the cosine of these network
features) and LinearTSTE at its defaults.  On the seen protocol also ``AutoSimilarity holdout=answers``
(its validation folds over the answers, every shoe on both sides: the
protocol's own question).  Fit seconds are wall seconds of ``fit``.

Run: ``python -m bench.bench_zappos_auto [unseen] [seen] [--seeds 0 1 2 3 4]``
(needs the shared data: ``TRIPLETML_DATA`` or ``~/tripletml_data`` with
``zappos/``); prints a Markdown table per protocol (kept in
``results/zappos_auto/``).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from .bench_zappos_unseen import split_items, split_triplets


def _learners(seed: int, seen: bool = False) -> dict:
    """The no-learning baselines, AutoSimilarity and OASIS at defaults; on
    the seen protocol also AutoSimilarity validated on held-out answers
    (``holdout="answers"``: the protocol's own question)."""
    from tripletml import OASIS, AutoSimilarity, Euclidean, LinearTSTE

    out = {"cosine": Euclidean(preprocessing="normalize"), "Euclidean": Euclidean(),
           "AutoSimilarity": AutoSimilarity(random_state=seed),
           "OASIS defaults": OASIS(random_state=seed),
           "LinearTSTE defaults": LinearTSTE(random_state=seed)}
    if seen:
        out["AutoSimilarity holdout=answers"] = AutoSimilarity(random_state=seed,
                                                               holdout="answers")
    return out


def _fit_score(model, X, T, sets: dict) -> tuple[float, dict]:
    from tripletml.metrics import triplet_accuracy

    t0 = time.perf_counter()
    model.fit(X, triplets=T)
    secs = time.perf_counter() - t0
    return secs, {k: triplet_accuracy(model, Xs, v) for k, (Xs, v) in sets.items()}


def unseen_split(X, T, s: int, n_train: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Seed ``s`` of the unseen protocol: the train shoes, ``n_train`` of the
    triplets among them (re-indexed into ``X[train]``, drawn with
    ``default_rng(s)``) and the two test sets ``{name: (X, triplets)}``."""
    tr, te = split_items(s)
    sp = split_triplets(T, tr, te)
    loc = sp["train"]
    loc = loc[np.sort(np.random.default_rng(s).choice(len(loc), min(n_train, len(loc)),
                                                      replace=False))]
    return tr, loc, {"test-test": (X, sp["test-test"]), "test-head": (X, sp["test-head"])}


def run_unseen(X, T, seeds, n_train: int) -> list[dict]:
    rows = []
    for s in seeds:
        tr, loc, sets = unseen_split(X, T, s, n_train)
        for name, m in _learners(s).items():
            secs, acc = _fit_score(m, X[tr], loc, sets)
            note = ""
            if name == "AutoSimilarity":
                note = f"{m.best_params_} val {m.best_score_:.4f}"
            rows.append({"seed": s, "learner": name, "fit_s": secs, **acc, "note": note})
            print(rows[-1], flush=True)
    return rows


def seen_split(T, s: int, n_train: int) -> tuple[np.ndarray, np.ndarray]:
    """Seed ``s`` of the seen protocol: ``n_train`` training triplets drawn
    (``default_rng(s)``) from fold ``s % 5``'s 80 % of KFold(5, shuffled,
    seed 0) over the answers, and the fold's other 20 % as the test set."""
    from sklearn.model_selection import KFold

    tr_i, te_i = list(KFold(5, shuffle=True, random_state=0).split(T))[s % 5]
    return T[np.random.default_rng(s).choice(tr_i, n_train, replace=False)], T[te_i]


def run_seen(X, T, seeds, n_train: int) -> list[dict]:
    from tripletml.embedding import SOE, STE, TSTE

    rows = []
    for s in seeds:
        tr, te = seen_split(T, s, n_train)
        sets = {"test": (X, te)}
        for name, m in _learners(s, seen=True).items():
            secs, acc = _fit_score(m, X, tr, sets)
            note = f"{m.best_params_} val {m.best_score_:.4f}" \
                if name.startswith("AutoSimilarity") else ""
            rows.append({"seed": s, "learner": name, "fit_s": secs, **acc, "note": note})
            print(rows[-1], flush=True)
        for E in (SOE, STE, TSTE):
            t0 = time.perf_counter()
            e = E(10, random_state=s, n_init=4, n_items=X.shape[0]).fit(tr)
            rows.append({"seed": s, "learner": f"{E.__name__} 10-D (no features)",
                         "fit_s": time.perf_counter() - t0, "test": e.score(te), "note": ""})
            print(rows[-1], flush=True)
    return rows


def table(rows: list[dict], cols: list[str]) -> str:
    names = list(dict.fromkeys(r["learner"] for r in rows))
    base = {(r["seed"], c): r[c] for r in rows if r["learner"] == "cosine" for c in cols}
    out = ["| learner | seeds | fit s (median) | " + " | ".join(
        f"{c} | margin vs cosine (min)" for c in cols) + " |",
        "|---|---|---|" + "---|---|" * len(cols)]
    for n in names:
        rs = [r for r in rows if r["learner"] == n]
        cells = []
        for c in cols:
            v = np.array([r[c] for r in rs])
            m = np.array([r[c] - base[(r["seed"], c)] for r in rs if (r["seed"], c) in base])
            cells.append(f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0:.4f} | "
                         + (f"{m.mean():+.4f} ({m.min():+.4f})" if m.size else "-"))
        out.append(f"| {n} | {len(rs)} | {np.median([r['fit_s'] for r in rs]):.2f} | "
                   + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocols", nargs="*", default=["unseen", "seen"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--n-triplets", type=int, default=20000)
    args = ap.parse_args(argv)
    from tripletml.datasets import load_comparisons

    warnings.simplefilter("ignore")
    B = load_comparisons("zappos")
    X, T = np.asarray(B.features, dtype=np.float64), B.triplets
    if "unseen" in args.protocols:
        rows = run_unseen(X, T, args.seeds, args.n_triplets)
        print("\n## unseen shoes (items split 57/28)\n")
        print(table(rows, ["test-test", "test-head"]))
        for r in rows:
            if r["note"]:
                print(f"- seed {r['seed']}: {r['note']}")
    if "seen" in args.protocols:
        rows = run_seen(X, T, args.seeds, args.n_triplets)
        print("\n## seen shoes (answers split 80/20)\n")
        print(table(rows, ["test"]))
        for r in rows:
            if r["note"]:
                print(f"- seed {r['seed']}: {r['note']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
