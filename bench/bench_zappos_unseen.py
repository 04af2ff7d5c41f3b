"""Zappos crowd triplets on unseen items (issue 30): learners on the AlexNet
features, trained on the triplets among 57 of the 85 shoes and scored on the
28 shoes they never saw.

Protocol: for each seed s in 0..4, ``p = default_rng(s).permutation(85)``,
train items ``sorted(p[:57])``, test items ``sorted(p[57:])``.  Training
triplets: those whose three items are all train items, re-indexed into the
train rows (``fit(X[train], triplets=local)``), optionally a random
subsample (``--n-triplets``, drawn with ``default_rng(s)``).  Two test sets,
scored with :func:`tripletml.metrics.triplet_accuracy` on the features of all
85 items: (a) ``test-test``, triplets whose three items are test items; (b)
``test-head``, triplets whose head is a test item (the other two anything).
Baselines: ``Euclidean`` on the raw rows and ``cosine`` (Euclidean on
l2-normalized rows).  Every triplet learner of the registry at its defaults
(``random_state=seed``) on the raw rows and on the l2-normalized rows.  Each
fit runs in a forked child with a wall-clock cap (``--timeout``); a learner
whose fit ran past the cap is skipped at the later seeds (noted in the CSV).

Scoring: the child returns the 85 x 85 similarity matrix of the fitted model
(``similarity``) and checks that it ranks 2,000 triplets exactly like the
model's own ``triplet_score``; the accuracy is then
``triplet_accuracy(PairTable(S), X, triplets)`` (a lookup, so that scoring
~95,000 triplets at d = 4096 takes milliseconds instead of ~10 s per model).

Sections: ``main`` (the table), ``study`` (regularization and rank of OASIS,
LORETA, LowRankDML, SDCA, KISSME on l2 rows; preprocessing on raw rows),
``study-c`` (OASIS's C where it binds, all seeds), ``span`` (share of a test item's squared norm outside the span of the train
rows, and cosine accuracy on the in-span / out-of-span parts alone).

Run: ``python -m bench.bench_zappos_unseen main study span`` (needs the shared
data: ``TRIPLETML_DATA`` or ``~/tripletml_data`` with ``zappos/``); results
go to ``results/zappos_unseen/`` (``--out``); ``tables`` prints the Markdown tables of
the CSVs there.
"""
from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np

N_ITEMS = 85
N_TRAIN = 57
OUT = Path(__file__).resolve().parents[1] / "results" / "zappos_unseen"
SETS = ("test-test", "test-head")
#: baselines of the main table (not learned)
BASELINES = ("Euclidean", "DotProduct")
FIELDS = ["section", "learner", "input", "params", "seed", "n_train_triplets", "status",
          "fit_s", "test-test", "test-head", "train", "n_test-test", "n_test-head", "note"]


# ------------------------------------------------------------------ protocol
def split_items(seed: int, n_items: int = N_ITEMS, n_train: int = N_TRAIN
                ) -> tuple[np.ndarray, np.ndarray]:
    """Train and test item ids of one seed: ``p = default_rng(seed).permutation
    (n_items)``, ``(sorted(p[:n_train]), sorted(p[n_train:]))``."""
    p = np.random.default_rng(seed).permutation(n_items)
    return np.sort(p[:n_train]), np.sort(p[n_train:])


def split_triplets(T: np.ndarray, train: np.ndarray, test: np.ndarray, n_items: int = N_ITEMS
                   ) -> dict[str, np.ndarray]:
    """The triplets of one item split (:func:`tripletml.datasets.split_items`
    with these train items; ``test`` must be the other items).

    Returns
    -------
    dict
        ``"train"``: the triplets whose three items are train items,
        re-indexed into ``train`` (row ``i`` of ``X[train]`` is item
        ``train[i]``); ``"train_global"``: the same in item ids;
        ``"test-test"``: triplets whose three items are test items;
        ``"test-head"``: triplets whose head is a test item (item ids).
    """
    from tripletml.datasets import split_items as by_items

    s = by_items(T, n_items, train_items=train)
    assert np.array_equal(s.test_items, np.sort(test)), "test must be the other items"
    return {"train": s.train, "train_global": s.train_items[s.train], "test-test": s.test,
            "test-head": s.test_head}


def l2_rows(X: np.ndarray) -> np.ndarray:
    """Rows divided by their Euclidean norms (cosine = inner product)."""
    return X / np.linalg.norm(X, axis=1, keepdims=True)


class PairTable:
    """A fitted similarity as its table ``S[i, j]`` over the items: the
    ``triplet_score`` that :func:`tripletml.metrics.triplet_accuracy` calls
    is ``S[q, p+] - S[q, p-]`` (X only gives the item count)."""

    def __init__(self, S: np.ndarray):
        self.S = np.asarray(S, dtype=np.float64)

    def triplet_score(self, X, triplets) -> np.ndarray:
        t = np.asarray(triplets)
        return self.S[t[:, 0], t[:, 1]] - self.S[t[:, 0], t[:, 2]]


def item_similarity(model: Any, X: np.ndarray, check: Optional[np.ndarray] = None) -> np.ndarray:
    """``model.similarity(X)``; with ``check`` (triplets), assert that the
    table ranks them as ``model.triplet_score`` does (same sign; the sign of
    near-ties, |margin| < 1e-9 of the scale, is not compared)."""
    S = np.asarray(model.similarity(X), dtype=np.float64)
    if check is not None and len(check):
        ref = np.asarray(model.triplet_score(X, check))
        got = PairTable(S).triplet_score(X, check)
        tol = 1e-9 * max(1.0, float(np.abs(ref).max()))
        sure = np.abs(ref) > tol
        if not np.array_equal(ref[sure] > 0, got[sure] > 0):
            raise AssertionError("similarity table and triplet_score disagree")
    return S


def score_sets(S: np.ndarray, X: np.ndarray, sets: dict[str, np.ndarray]) -> dict[str, float]:
    """Triplet accuracy of the table ``S`` on each named triplet set."""
    from tripletml.metrics import triplet_accuracy

    return {k: triplet_accuracy(PairTable(S), X, v) for k, v in sets.items()}


# ------------------------------------------------------------------ fitting
def make_learner(name: str, params: dict, seed: int):
    """The registry learner ``name`` with ``params`` (and ``random_state=seed``
    where it has one)."""
    from tripletml.registry import get_entry

    cls = get_entry(name).cls
    kw = dict(params)
    if "random_state" in cls().get_params():
        kw.setdefault("random_state", seed)
    return cls(**kw)


def _child(conn, name, params, seed, Xtr, Ttr, Xall, check):
    try:
        warnings.simplefilter("ignore")
        m = make_learner(name, params, seed)
        t0 = time.perf_counter()
        m.fit(Xtr, triplets=Ttr)
        dt = time.perf_counter() - t0
        conn.send(("ok", dt, item_similarity(m, Xall, check), ""))
    except BaseException as e:  # noqa: BLE001 - reported in the table
        conn.send(("error", float("nan"), None,
                   f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
        traceback.print_exc(file=sys.stderr)
    finally:
        conn.close()


def fit_capped(name: str, params: dict, seed: int, Xtr, Ttr, Xall, check, timeout: float
               ) -> tuple[str, float, Optional[np.ndarray], str]:
    """Fit in a forked child killed after ``timeout`` seconds: ``(status,
    fit seconds, item similarity table or None, note)``."""
    return run_forked(_child, (name, params, seed, Xtr, Ttr, Xall, check), timeout)


def run_forked(target, args: tuple, timeout: float):
    """``target(conn, *args)`` in a forked child killed after ``timeout``
    seconds: what it sent on ``conn``, or ``("timeout", seconds, None,
    note)`` / ``("error", nan, None, "child died")``."""
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(b, *args))
    t0 = time.perf_counter()
    p.start()
    b.close()
    if a.poll(timeout):
        try:
            out = a.recv()
        except EOFError:
            out = ("error", float("nan"), None, "child died")
        p.join()
        return out
    p.kill()
    p.join()
    return ("timeout", time.perf_counter() - t0, None, f"fit > {timeout:.0f} s")


# ------------------------------------------------------------------ runs
class Runner:
    """Loads the data once, appends rows to a CSV as they come."""

    def __init__(self, out: Path, timeout: float, n_triplets: Optional[int]):
        from tripletml.datasets import load_comparisons

        B = load_comparisons("zappos")
        self.T, self.X = B.triplets, np.asarray(B.features, dtype=np.float64)
        self.Xn = l2_rows(self.X)
        self.out, self.timeout, self.n_triplets = out, timeout, n_triplets
        out.mkdir(parents=True, exist_ok=True)

    def split(self, seed: int) -> dict:
        tr, te = split_items(seed)
        sp = split_triplets(self.T, tr, te)
        sp["all_train"], sp["all_train_global"] = sp["train"], sp["train_global"]
        if self.n_triplets is not None and self.n_triplets < len(sp["train"]):
            pick = np.sort(np.random.default_rng(seed).choice(len(sp["train"]), self.n_triplets,
                                                              replace=False))
            sp["train"], sp["train_global"] = sp["train"][pick], sp["train_global"][pick]
        sp["items"] = (tr, te)
        return sp

    def run(self, writer, section, name, params, inp, seed, sp, label=None) -> dict:
        X = self.X if inp == "raw" else self.Xn
        tr, _ = sp["items"]
        params = dict(params)
        if params.pop("n_train_triplets", None) == "all":      # all, not the subsample
            sp = dict(sp, train=sp["all_train"], train_global=sp["all_train_global"])
            label = label or f"{name} (all triplets)"
        chk = sp["test-head"][np.random.default_rng(seed).choice(len(sp["test-head"]), 2000,
                                                                 replace=False)]
        status, dt, S, note = fit_capped(name, params, seed, X[tr], sp["train"], X, chk,
                                         self.timeout)
        row = {"section": section, "learner": label or name, "input": inp,
               "params": ";".join(f"{k}={v}" for k, v in params.items()), "seed": seed,
               "n_train_triplets": len(sp["train"]), "status": status,
               "fit_s": f"{dt:.2f}", "n_test-test": len(sp["test-test"]),
               "n_test-head": len(sp["test-head"]), "note": note}
        if S is not None:
            acc = score_sets(S, X, {k: sp[k] for k in SETS} | {"train": sp["train_global"]})
            row.update({k: f"{v:.4f}" for k, v in acc.items()})
        writer.writerow(row)
        self._fh.flush()
        print(f"[{section}] {row['learner']:12s} {inp:3s} {row['params'][:40]:40s} s={seed} "
              f"{status:7s} {dt:7.1f}s  tt={row.get('test-test', '-')} "
              f"th={row.get('test-head', '-')} {note}", flush=True)
        return row

    def open(self, name: str):
        path = self.out / name
        new = not path.exists()
        self._fh = open(path, "a", newline="")
        w = csv.DictWriter(self._fh, FIELDS)
        if new:
            w.writeheader()
        return w


def learner_names(only: Optional[list[str]] = None) -> list[str]:
    """Registry triplet learners except the baselines (or ``only``)."""
    from tripletml.registry import REGISTRY

    names = [e.name for e in REGISTRY if e.kind == "triplet" and e.name not in BASELINES]
    return names if only is None else [n for n in only if n in names]


def section_main(R: Runner, seeds, only=None) -> None:
    w = R.open("main.csv")
    skip: dict[tuple, str] = {}
    for seed in seeds:
        sp = R.split(seed)
        R.run(w, "main", "Euclidean", {}, "raw", seed, sp)
        R.run(w, "main", "Euclidean", {}, "l2", seed, sp, label="cosine")
        for name in learner_names(only):
            for inp in ("raw", "l2"):
                if (name, inp) in skip:
                    w.writerow({"section": "main", "learner": name, "input": inp, "seed": seed,
                                "status": "skipped", "note": skip[(name, inp)]})
                    continue
                row = R.run(w, "main", name, {}, inp, seed, sp)
                if row["status"] == "timeout":
                    skip[(name, inp)] = f"skipped: fit > {R.timeout:.0f} s at seed {seed}"
    R._fh.close()


#: the study grid: (learner, params, input)
#: (the defaults of the main table, OASIS C=0.01 max_iter=1, LORETA rank 10,
#: Euclidean / OASIS on raw rows with their default preprocessing, are not
#: repeated here)
STUDY = ([("OASIS", {"C": c}, "l2") for c in (1e-6, 1e-5, 0.1)]
         + [("OASIS", {"max_iter": 3}, "l2")]
         + [("LORETA", {"rank": r}, "l2") for r in (5, 20, 40)]
         + [("Euclidean", {"preprocessing": p}, "raw") for p in ("standardize", "sphere")]
         + [("OASIS", {"preprocessing": p}, "raw") for p in (None, "standardize")]
         + [("OASIS", {"n_train_triplets": "all"}, "l2")]
         + [("SDCA", {"alpha": 0.1, "max_iter": 1}, "l2")]
         + [("KISSME", {"shrinkage": s}, "l2") for s in (0.01, 0.5)]
         + [("LowRankDML", {"max_iter": 50}, "l2")])


#: OASIS's cap C where it binds (a second pass, all seeds: on l2 rows, which
#: preprocessing=None divides by the RMS of the non-zero entries, the PA step
#: loss / (||q||^2 ||p+ - p-||^2) is ~1e-5, so C >= 1e-3 never binds)
STUDY_C = ([("OASIS", {"C": c}, "l2") for c in (3e-6, 1e-5, 3e-5, 1e-4)]
           + [("OASIS", {"C": 1e-5, "n_train_triplets": "all"}, "l2")])


def section_study(R: Runner, seeds, only=None, grid=None) -> None:
    STUDY_ = STUDY if grid is None else grid
    w = R.open("study.csv")
    skip: set = set()
    for seed in seeds:
        sp = R.split(seed)
        R.run(w, "study", "Euclidean", {}, "l2", seed, sp, label="cosine")
        if seed == seeds[0]:
            print(f"[study] seed {seed}: {len(sp['all_train'])} triplets among the train items",
                  flush=True)
        for name, params, inp in STUDY_:
            if only is not None and name not in only:
                continue
            key = (name, tuple(params.items()), inp)
            if key in skip:
                continue
            if R.run(w, "study", name, params, inp, seed, sp)["status"] == "timeout":
                skip.add(key)
    R._fh.close()


#: the C values the nested choice tries (OASIS on l2 rows)
NESTED_C = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 1e-2)


def choose_c_inner(Xtr: np.ndarray, Ttr_local: np.ndarray, seed: int, n_triplets: int,
                   grid=NESTED_C) -> tuple[float, dict]:
    """OASIS's C chosen without the test shoes: the train shoes are split
    again (2/3 inner train, 1/3 inner validation, ``default_rng(1000 + seed)``),
    each C is fitted on (up to ``n_triplets`` of) the triplets among the inner
    train shoes and scored on the inner validation shoes' triplets (mean of
    test-test and test-head accuracy); the best C is returned with the scores."""
    import tripletml as tm

    k = Xtr.shape[0]
    p = np.random.default_rng(1000 + seed).permutation(k)
    n_in = (2 * k) // 3
    itr, ite = np.sort(p[:n_in]), np.sort(p[n_in:])
    sp = split_triplets(Ttr_local, itr, ite, n_items=k)
    t = sp["train"]
    if len(t) > n_triplets:
        t = t[np.random.default_rng(seed).choice(len(t), n_triplets, replace=False)]
    scores = {}
    for c in grid:
        m = tm.OASIS(C=c, random_state=seed).fit(Xtr[itr], triplets=t)
        S = item_similarity(m, Xtr)
        acc = score_sets(S, Xtr, {"test-test": sp["test-test"], "test-head": sp["test-head"]})
        scores[c] = 0.5 * (acc["test-test"] + acc["test-head"])
    return max(grid, key=lambda c: (scores[c], -c)), scores


def section_nested(R: Runner, seeds) -> None:
    """OASIS on l2 rows with C chosen by :func:`choose_c_inner` (no test shoe
    involved), scored on the unseen shoes like every other row."""
    w = R.open("nested.csv")
    for seed in seeds:
        sp = R.split(seed)
        tr, _ = sp["items"]
        R.run(w, "nested", "Euclidean", {}, "l2", seed, sp, label="cosine")
        c, scores = choose_c_inner(R.Xn[tr], sp["all_train"], seed, R.n_triplets or 10 ** 9)
        print(f"[nested] seed {seed}: inner scores "
              + ", ".join(f"{k:g}: {v:.4f}" for k, v in scores.items()) + f" -> C = {c:g}",
              flush=True)
        R.run(w, "nested", "OASIS", {"C": c}, "l2", seed, sp, label="OASIS (C inner split)")
    R._fh.close()


def section_span(R: Runner, seeds) -> list[dict]:
    """Per seed: mean share of a test item's squared norm outside span(train
    rows) (raw, l2 rows, columns standardized on the train rows), and the
    cosine accuracy of the in-span part alone, the out-of-span part alone."""
    rows = []
    for seed in seeds:
        sp = R.split(seed)
        tr, te = sp["items"]
        for inp, X in (("raw", R.X), ("l2", R.Xn),
                       ("standardized", (R.X - R.X[tr].mean(0))
                        / np.where(R.X[tr].std(0) > 0, R.X[tr].std(0), 1.0))):
            Q, _ = np.linalg.qr(X[tr].T)                    # d x 57 basis of the span
            Xin = X @ Q @ Q.T
            Xout = X - Xin
            share = (np.linalg.norm(Xout[te], axis=1) ** 2 / np.linalg.norm(X[te], axis=1) ** 2)
            r = {"seed": seed, "input": inp, "out_share_mean": share.mean(),
                 "out_share_min": share.min(), "out_share_max": share.max()}
            for part, Z in (("full", X), ("in-span", Xin), ("out-of-span", Xout)):
                # the out-of-span part of a train item is 0: only test-test there
                sets = SETS if part != "out-of-span" else ("test-test",)
                with np.errstate(invalid="ignore", divide="ignore"):
                    Zn = l2_rows(Z)
                acc = score_sets(Zn @ Zn.T, Z, {k: sp[k] for k in sets})
                for k in sets:
                    r[f"cos {part} {k}"] = acc[k]
            rows.append(r)
            print(f"[span] s={seed} {inp:12s} outside share {share.mean():.3f} "
                  + " ".join(f"{k}={v:.4f}" for k, v in r.items() if k.startswith("cos")),
                  flush=True)
    with open(R.out / "span.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


# ------------------------------------------------------------------ tables
def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def summarize(path: Path, section: str) -> str:
    """Markdown table: mean +- sd of each (learner, input, params) over the
    seeds, the paired margin over cosine of the same seed, and the mean
    accuracy on the training triplets."""
    rows = [r for r in _read(path) if r["section"] == section]
    cos = {(r["seed"]): r for r in rows if r["learner"] == "cosine" and r["status"] == "ok"}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["learner"], r["input"], r["params"]), []).append(r)
    out = ["| learner | input | params | seeds | fit s (median) | test-test | margin vs cosine "
           "| test-head | margin vs cosine | train triplets | note |", "|" + "---|" * 11]
    for (name, inp, params), g in groups.items():
        ok = [r for r in g if r["status"] == "ok"]
        notes = sorted({r["note"] for r in g if r["note"]})
        cells = [name, inp, params or "defaults", str(len(ok))]
        cells.append(f"{np.median([float(r['fit_s']) for r in ok]):.1f}" if ok else
                     ", ".join(f"{float(r['fit_s']):.0f}" for r in g if r["status"] == "timeout"
                               and r.get("fit_s")) or "-")
        for k in SETS:
            if not ok:
                cells += ["-", "-"]
                continue
            a = np.array([float(r[k]) for r in ok])
            m = np.array([float(r[k]) - float(cos[r["seed"]][k]) for r in ok if r["seed"] in cos])
            cells.append(f"{a.mean():.3f} ± {a.std(ddof=1) if len(a) > 1 else 0:.3f}")
            cells.append(f"{m.mean():+.3f} ± {m.std(ddof=1) if len(m) > 1 else 0:.3f}")
        cells.append(f"{np.mean([float(r['train']) for r in ok]):.3f}" if ok else "-")
        cells.append("; ".join(notes)[:120])
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sections", nargs="*", default=["main", "study", "span"],
                    choices=["main", "study", "study-c", "nested", "span", "tables"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--n-triplets", type=int, default=20000,
                    help="training triplets per seed (0: all among the train items)")
    ap.add_argument("--timeout", type=float, default=300.0, help="cap per fit, seconds")
    ap.add_argument("--learners", nargs="+", default=None, help="only these learners")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from bench._provenance import git_revision, machine_info

    if "tables" not in args.sections:
        R = Runner(args.out, args.timeout, args.n_triplets or None)
        print(f"git {git_revision()}  {machine_info()}  timeout {args.timeout:.0f} s  "
              f"n_triplets {args.n_triplets or 'all'}", flush=True)
        if "span" in args.sections:
            section_span(R, args.seeds)
        if "main" in args.sections:
            section_main(R, args.seeds, args.learners)
        if "study" in args.sections:
            section_study(R, args.seeds, args.learners)
        if "study-c" in args.sections:
            section_study(R, args.seeds, args.learners, STUDY_C)
        if "nested" in args.sections:
            section_nested(R, args.seeds)
    for name in ("main", "study", "nested"):
        if (args.out / f"{name}.csv").exists():
            print(f"\n## {name}\n\n" + summarize(args.out / f"{name}.csv", name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
