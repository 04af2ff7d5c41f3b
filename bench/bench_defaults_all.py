"""Defaults benchmark over every kind of data (issue 27, item 5).

Every registered tripletml triplet learner at its DEFAULTS (and again with
``preprocessing=None``), Euclidean, AutoSimilarity (defaults, and
``scoring="knn_accuracy"``) and metric-learn 0.7.0's methods, on every shared
data set and on copies rescaled by 1e-3 and 1e3.

Usage
-----
From the repository root, with the data home set (``TRIPLETML_DATA``)::

    python -m bench.bench_defaults_all                       # everything -> results/defaults_all/
    python -m bench.bench_defaults_all --scales 1 --seeds 0,1,2 --resume     # unscaled first
    python -m bench.bench_defaults_all --scales 1e-3,1e3 --seeds 0 --resume  # then the copies
    python -m bench.bench_defaults_all --report-only
    python -m bench.bench_defaults_all --sets iris --seeds 0 --methods Euclidean,OASIS \\
        --no-peers --out /tmp/x                               # smallest run, no metric-learn

Machinery
---------
Reused from :mod:`bench.bench_peers` (nothing copied): the metric-learn
environment (``--venv``, created on first use with pip; ``--no-peers`` skips
it and metric-learn, the workers then run with this Python), one worker
process per (set, scale) appending JSON rows to ``OUT/rows/*.jsonl``, a forked
child per fit with a timeout (``--timeout``, default 120 s; a timeout is a
row with status ``timeout`` and counts as a goal miss; a method that timed out
on one seed of a set is not run on its other seeds, whose rows say so, also
across ``--resume`` runs) and an
address-space cap (``--mem-limit``), the untimed warm-up fit (Numba's JIT:
once per worker on a 50-row, 32-column slice, inherited by the forked fits,
then in each child on 50 full rows; the workers use
``NUMBA_THREADING_LAYER=workqueue`` because GNU OpenMP's layer aborts a fork
after use), ``--resume`` (rows with status ``error`` are run again),
provenance.  ``rows/*.jsonl`` is the raw log (later lines win), kept so that
runs may overlap (e.g. the rescaled copies beside the unscaled sets).

Protocol
--------
* Sets: vehicle, vowel, svmguide4, segment, letter, balance-scale, ionosphere,
  iris, wine, digits, dexter, semeion, car, optdigits, mnist-test and
  wine-quality (subset ``"red"``: 1,599 rows), from
  ``tripletml.datasets.load``.  Dense (densified, as bench_peers), except
  dexter, which stays sparse (CSR, 20,000 features) for tripletml;
  metric-learn gets its dense copy.
* Sets with more than ``--max-rows`` (5,000) rows (letter: 20,000;
  mnist-test: 10,000) are subsampled, stratified, to 5,000 rows, with a fixed
  seed (0) for every split seed, so the 30 % test part has 1,500 rows.
* Rescaled copies: ``X * 1e-3`` and ``X * 1e3``, named ``SET*1e-3`` /
  ``SET*1e3``.
* Seeds (``--seeds``, default 0,1,2): ``train_test_split(test_size=0.3,
  stratify=y, random_state=seed)``; fit on the train part with defaults
  (only ``random_state=seed``).
* Scores, test vs test (leave-one-out within the test part), one code path for
  every method, :func:`tripletml.metrics.validation_score` with ``"map"``,
  ``"precision@1"`` and ``"knn_accuracy"`` (1-NN accuracy).  A metric-learn
  model is scored as :class:`tripletml.Euclidean` on its ``transform``.
* Fit seconds (fit alone).  Warnings raised during ``fit`` are recorded per
  row (category and text, de-duplicated).

Goals (the issue's), per set and rescaled copy
----------------------------------------------
1. every learner (not the baselines Euclidean / DotProduct), with ``"auto"``
   and with ``None``: mean mAP >= Euclidean's - 0.005 (no result = miss);
2. AutoSimilarity's mAP >= metric-learn's best;
3. AutoSimilarity(scoring="knn_accuracy")'s 1-NN accuracy >= Euclidean's and
   >= metric-learn's best 1-NN accuracy;
4. no default run (a learner at its defaults, AutoSimilarity) warns.

Output (``--out``, default ``results/defaults_all/``): ``defaults_all.csv``,
``defaults_all.md`` (goal misses first, then a table per set),
``provenance.json``.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence

from . import bench_peers as bp

REPO = bp.REPO
DEFAULT_OUT = REPO / "results" / "defaults_all"
#: run order: small sets first, so that a partial run covers many sets
SETS = ("iris", "wine", "balance-scale", "ionosphere", "vehicle", "vowel", "svmguide4",
        "dexter", "segment", "wine-quality", "semeion", "car", "digits", "optdigits",
        "letter", "mnist-test")
LOAD_KW = {"wine-quality": {"subset": "red"}}
#: sets kept sparse for tripletml (metric-learn gets a dense copy)
SPARSE_SETS = ("dexter",)
SCALES = {1.0: "", 1e-3: "*1e-3", 1e3: "*1e3"}
MAX_ROWS = 5000
TOL = 0.005

AUTO = bp.AUTO
AUTO_KNN = AUTO + "[knn_accuracy]"
NONE_SUFFIX = "[None]"
ML_FAMILY, TML_FAMILY, AUTO_FAMILY = bp.ML_FAMILY, bp.TML_FAMILY, bp.AUTO_FAMILY
CSV_FIELDS = ("set", "base_set", "scale", "method", "family", "seed", "status", "map", "p1",
              "knn1", "fit_s", "n_train", "n_test", "n_features", "n_classes", "warnings",
              "preprocessing", "message")
SCORINGS = (("map", "map"), ("p1", "precision@1"), ("knn1", "knn_accuracy"))


def log(msg: str) -> None:
    print(f"[bench_defaults_all {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------
def _default_prep_is_none(row_name: str) -> bool:
    import tripletml
    cls = getattr(tripletml, bp.TML_RENAMED.get(row_name, row_name))
    return cls().get_params().get("preprocessing", None) is None


def tml_methods() -> list[str]:
    """Every registered triplet learner (bench_peers' row names), then the same
    with ``preprocessing=None`` where its default is not already None."""
    base = list(bp.TML_METHODS)
    return base + [m + NONE_SUFFIX for m in base if not _default_prep_is_none(m)]


def all_methods(peers: bool = True) -> list[str]:
    return [*tml_methods(), AUTO, AUTO_KNN, *(bp.ML_METHODS if peers else ())]


def base_method(method: str) -> str:
    if method == AUTO_KNN:
        return AUTO
    return method[:-len(NONE_SUFFIX)] if method.endswith(NONE_SUFFIX) else method


def family_of(method: str) -> str:
    return bp.family_of(base_method(method))


def is_default(method: str) -> bool:
    """A learner (or AutoSimilarity) exactly at its defaults."""
    return method == base_method(method)


def make_estimator(method: str, seed: int):
    est = bp.make_estimator(base_method(method), seed)
    if method.endswith(NONE_SUFFIX):
        est.set_params(preprocessing=None)
    elif method == AUTO_KNN:
        est.set_params(scoring="knn_accuracy")
    return est


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def set_name(base: str, scale: float) -> str:
    return base + SCALES[scale]


def parse_set(name: str) -> tuple[str, float]:
    for scale, suffix in SCALES.items():
        if suffix and name.endswith(suffix):
            return name[:-len(suffix)], scale
    return name, 1.0


def load(base: str, scale: float = 1.0, max_rows: int = MAX_ROWS):
    """``(X, y, note)``: the set (dense unless in :data:`SPARSE_SETS`), stratified
    subsample to ``max_rows`` (fixed seed 0), times ``scale``."""
    import numpy as np
    from sklearn.model_selection import train_test_split
    from tripletml import datasets
    b = datasets.load(base, **LOAD_KW.get(base, {}))
    X, y = b.data, np.asarray(b.target)
    if hasattr(X, "toarray") and base not in SPARSE_SETS:
        X = X.toarray()
    if not hasattr(X, "toarray"):
        X = np.ascontiguousarray(X, dtype=np.float64)
    else:
        X = X.tocsr().astype(np.float64)
    note = ""
    if max_rows and X.shape[0] > max_rows:
        note = f"stratified subsample {max_rows} of {X.shape[0]} rows (seed 0)"
        keep, _ = train_test_split(np.arange(X.shape[0]), train_size=max_rows, stratify=y,
                                   random_state=0)
        keep = np.sort(keep)
        X, y = X[keep], y[keep]
    if scale != 1.0:
        X = X * scale
    return X, y, note


# --------------------------------------------------------------------------------------
# one fit (in the forked child)
# --------------------------------------------------------------------------------------
def _warning_text(caught) -> str:
    seen = []
    for w in caught:
        t = f"{w.category.__name__}: {str(w.message).splitlines()[0] if str(w.message) else ''}"
        t = t[:160]
        if t not in seen:
            seen.append(t)
    return " | ".join(seen)[:600]


def fit_and_score(method: str, seed: int, Xtr, ytr, Xte, yte) -> dict:
    import warnings
    from tripletml.metrics import validation_score
    fam = family_of(method)
    if fam == ML_FAMILY and hasattr(Xtr, "toarray"):
        Xtr, Xte = Xtr.toarray(), Xte.toarray()
    if fam != ML_FAMILY:                    # Numba JIT compile, untimed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                w = bp._warmup_rows(ytr)
                make_estimator(method, seed).fit(Xtr[w], ytr[w])
            except Exception:  # noqa: BLE001 - the timed fit reports errors
                pass
    est = make_estimator(method, seed)
    message = bp.adjust_rca(est, ytr) if base_method(method) == "RCA" else ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est.fit(Xtr, ytr)
        fit_s = time.perf_counter() - t0
    wtext = _warning_text(caught)
    prep = ""
    for attr in ("preprocessing_decision_", "preprocessing_", "best_name_", "best_params_"):
        v = getattr(est, attr, None)
        if v is not None:
            prep = f"{attr}={v}"[:200].replace("\n", " ")
            break
    if fam == ML_FAMILY:
        est, Xte = bp.ml_as_euclidean(est, Xtr, Xte)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = {key: float(validation_score(est, Xte, yte, scoring))
                  for key, scoring in SCORINGS}
    return {**scores, "fit_s": fit_s, "warnings": wtext, "preprocessing": prep,
            "message": message}


def warm_up_in_worker(method: str, X, y, n_features: int = 32) -> None:
    """An untimed fit on about 50 rows and at most ``n_features`` columns (same
    dtype and sparsity) in the worker, so that Numba compiles each kernel once
    and every forked fit inherits it (the child's own warm-up is then cheap)."""
    import warnings
    w = bp._warmup_rows(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make_estimator(method, 0).fit(X[w][:, :n_features], y[w])
        except Exception:  # noqa: BLE001 - the timed fit reports errors
            pass


# --------------------------------------------------------------------------------------
# worker: one (set, scale)
# --------------------------------------------------------------------------------------
def worker(name: str, methods: Sequence[str], seeds: Sequence[int], timeout: float,
           rows_file: Path, skip: Iterable[tuple] = (), mem_gib: float = 0.0,
           max_rows: int = MAX_ROWS, check_checkout: bool = True,
           timed_out: Optional[dict] = None) -> None:
    if check_checkout:
        bp._import_checkout_tripletml(REPO)
    import numpy as np
    skip = {(s, m, int(sd)) for s, m, sd in skip}
    base, scale = parse_set(name)
    X, y, note = load(base, scale, max_rows)
    log(f"{name}: {X.shape[0]} rows, {X.shape[1]} features, {len(np.unique(y))} classes"
        + (f" ({note})" if note else ""))
    rows_file.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for method in dict.fromkeys(methods):
        if family_of(method) != ML_FAMILY:
            warm_up_in_worker(method, X, y)
    log(f"{name}: warm-up (JIT compile, inherited by the forked fits) "
        f"{time.perf_counter() - t0:.0f} s")
    # method -> the seed it timed out on (its other seeds are not run)
    timed_out = dict(timed_out or {})
    for seed in seeds:
        Xtr, Xte, ytr, yte = bp.split(X, y, seed)
        info = {"set": name, "base_set": base, "scale": scale, "seed": int(seed),
                "n_train": int(len(ytr)), "n_test": int(len(yte)),
                "n_features": int(X.shape[1]), "n_classes": int(len(np.unique(y)))}
        for method in methods:
            if (name, method, int(seed)) in skip:
                continue
            row = {**info, "method": method, "family": family_of(method), "map": None,
                   "p1": None, "knn1": None, "fit_s": None, "warnings": "",
                   "preprocessing": "", "message": note}
            if method in timed_out:
                res = {"status": "timeout", "message": f"not run: timed out on seed "
                                                       f"{timed_out[method]} of this set"}
            else:
                res = bp.run_one_with_timeout(method, seed, (Xtr, ytr, Xte, yte), timeout,
                                              mem_gib, fit=fit_and_score)
                if res["status"] == "timeout":
                    timed_out[method] = seed
            tb = res.pop("traceback", None)
            if tb:
                print(tb, file=sys.stderr, flush=True)
            msg = "; ".join(t for t in (note, res.pop("message", "")) if t)
            row.update(res)
            row["message"] = msg
            with open(rows_file, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            f3 = lambda v: "-" if v is None else f"{v:.3f}"          # noqa: E731
            fs = "-" if row["fit_s"] is None else f"{row['fit_s']:.2f} s"
            log(f"{name} seed {seed} {method:22s} {row['status']:7s} mAP {f3(row['map'])} "
                f"knn {f3(row['knn1'])} fit {fs}"
                + (" WARN" if row.get("warnings") else "")
                + (f" {row['message'][:120]}" if row["status"] != "ok" else ""))


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------
def normalize_row(r: dict) -> dict:
    out = {k: r.get(k, "") for k in CSV_FIELDS}
    out["seed"] = int(out["seed"])
    for k in ("map", "p1", "knn1", "fit_s"):
        out[k] = bp._num(out[k])
    out["scale"] = float(out["scale"] or 1.0)
    for k in ("n_train", "n_test", "n_features", "n_classes"):
        out[k] = int(out[k]) if out[k] not in ("", None) else None
    out["family"] = out["family"] or family_of(out["method"])
    for k in ("message", "warnings", "preprocessing"):
        out[k] = (out[k] or "").replace("\n", " ")
    return out


def read_rows(out: Path) -> dict:
    rows: dict = {}
    path = out / "defaults_all.csv"
    if path.exists():
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                r = normalize_row(r)
                rows[bp.row_key(r)] = r
    for jl in sorted((out / "rows").glob("*.jsonl")) if (out / "rows").exists() else []:
        for line in jl.read_text().splitlines():
            try:
                r = normalize_row(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            rows[bp.row_key(r)] = r
    return rows


def _set_order(name: str):
    base, scale = parse_set(name)
    return (SETS.index(base) if base in SETS else 99, base, list(SCALES).index(scale))


def write_csv(rows: Iterable[dict], path: Path) -> None:
    order = {m: i for i, m in enumerate(all_methods())}
    rows = sorted(rows, key=lambda r: (_set_order(r["set"]), order.get(r["method"], 99),
                                       r["method"], r["seed"]))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            r = dict(r)
            for k in ("map", "p1", "knn1"):
                r[k] = "" if r[k] is None else f"{r[k]:.6f}"
            r["fit_s"] = "" if r["fit_s"] is None else f"{r['fit_s']:.4f}"
            w.writerow(r)


# --------------------------------------------------------------------------------------
# summary, goals, report
# --------------------------------------------------------------------------------------
def summarize(rows: Iterable[dict]) -> dict:
    """``{set: {method: stats}}``: mean of map / p1 / knn1 / fit_s over ok rows,
    n_ok, n, bad statuses, warnings (set of texts)."""
    out: dict = {}
    for r in rows:
        s = out.setdefault(r["set"], {}).setdefault(
            r["method"], {"family": r["family"], "vals": {k: [] for k in
                                                          ("map", "p1", "knn1", "fit_s")},
                          "n": 0, "bad": [], "warnings": set(), "seeds": set()})
        s["n"] += 1
        s["seeds"].add(r["seed"])
        if r["status"] == "ok" and r["map"] is not None:
            for k in s["vals"]:
                s["vals"][k].append(r[k] if r[k] is not None else float("nan"))
        else:
            s["bad"].append(r["status"])
        if r.get("warnings"):
            s["warnings"].add(r["warnings"])
    for methods in out.values():
        for s in methods.values():
            s["n_ok"] = len(s["vals"]["map"])
            for k, v in s["vals"].items():
                s[k] = sum(v) / len(v) if v else None
            s["map_sd"] = bp._mean_sd(s["vals"]["map"])[1] if s["vals"]["map"] else None
    return out


def _best(methods: dict, family: str, key: str) -> Optional[str]:
    c = [(s[key], m) for m, s in methods.items() if s["family"] == family and s[key] is not None]
    return max(c)[1] if c else None


def goals(summary: dict) -> dict:
    """Per set: lists of misses (strings) for each goal, plus the references."""
    res = {}
    for name, methods in summary.items():
        g = {"below_eucl": [], "auto_map": [], "knn": [], "warns": [], "notes": []}
        eu = methods.get("Euclidean")
        eu_map = eu["map"] if eu else None
        for m, s in methods.items():
            if s["family"] != TML_FAMILY or base_method(m) in bp.BASELINES:
                continue
            if eu_map is None:
                continue
            if s["map"] is None:
                g["below_eucl"].append((m, None, f"{m}: no result "
                                                 f"({', '.join(sorted(set(s['bad'])))})"))
            elif s["map"] < eu_map - TOL:
                g["below_eucl"].append((m, s["map"] - eu_map,
                                        f"{m} {s['map']:.3f} vs Euclidean {eu_map:.3f} "
                                        f"({s['map'] - eu_map:+.3f})"))
        mlb = _best(methods, ML_FAMILY, "map")
        g["ml_best"] = mlb
        auto = methods.get(AUTO)
        if mlb is not None and auto is not None:
            ml = methods[mlb]["map"]
            if auto["map"] is None:
                g["auto_map"].append((AUTO, None, f"{AUTO}: no result vs {mlb} {ml:.3f}"))
            elif auto["map"] < ml:
                g["auto_map"].append((AUTO, auto["map"] - ml,
                                      f"{AUTO} {auto['map']:.3f} vs {mlb} {ml:.3f} "
                                      f"({auto['map'] - ml:+.3f})"))
        mlk = _best(methods, ML_FAMILY, "knn1")
        g["ml_best_knn"] = mlk
        ak = methods.get(AUTO_KNN)
        if ak is not None:
            refs = [(n, methods[n]["knn1"]) for n in ("Euclidean", mlk)
                    if n is not None and n in methods and methods[n]["knn1"] is not None]
            for n, v in refs:
                if ak["knn1"] is None:
                    g["knn"].append((AUTO_KNN, None, f"{AUTO_KNN}: no result vs {n} {v:.3f}"))
                    break
                if ak["knn1"] < v:
                    g["knn"].append((AUTO_KNN, ak["knn1"] - v,
                                     f"{AUTO_KNN} 1-NN {ak['knn1']:.3f} vs {n} {v:.3f} "
                                     f"({ak['knn1'] - v:+.3f})"))
        for m, s in methods.items():
            if s["family"] != ML_FAMILY and s["warnings"] and is_default(m):
                g["warns"].append((m, None, f"{m}: " + " / ".join(sorted(s["warnings"]))[:300]))
        res[name] = g
    return res


def _f(v, nd=3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def write_markdown(rows: dict, summary: dict, gl: dict, prov: dict, path: Path) -> None:
    sets = sorted(summary, key=_set_order)
    shapes = prov.get("shapes", {})
    L = ["# Defaults benchmark over every kind of data (issue 27, item 5)", "",
         "Every registered tripletml learner at its defaults (`NAME`) and with "
         "`preprocessing=None` (`NAME[None]`), Euclidean, AutoSimilarity (defaults; "
         f"`{AUTO_KNN}` = `scoring=\"knn_accuracy\"`) and metric-learn "
         f"{bp.METRIC_LEARN_VERSION} at defaults. Stratified 70/30 split per seed; test-vs-test "
         "(leave-one-out) scores from `tripletml.metrics.validation_score`: mAP, precision@1 "
         "(P@1), 1-NN accuracy; fit seconds (mean over the seeds that finished). Sets with > "
         f"{MAX_ROWS} rows are subsampled (stratified, seed 0) to {MAX_ROWS}. `SET*1e-3` / "
         "`SET*1e3`: X multiplied by 1e-3 / 1e3. Timings: one run on a shared 2-core machine. "
         "See `bench/bench_defaults_all.py`.", "", "## Goal misses", ""]
    names = {"below_eucl": f"1. learner mAP < Euclidean - {TOL} (auto and None)",
             "auto_map": "2. AutoSimilarity mAP < metric-learn's best",
             "knn": f"3. {AUTO_KNN} 1-NN accuracy < Euclidean's or metric-learn's best",
             "warns": "4. default runs that warned (during fit)"}
    for key, title in names.items():
        misses = [(s, t) for s in sets for (_, _, t) in gl[s][key]]
        checked = [s for s in sets if key != "auto_map" or gl[s]["ml_best"]]
        L += [f"### {title}: {len(misses)} miss(es) on {len(checked)} set(s)", ""]
        L += [f"* {s}: {t}" for s, t in misses] or ["* none"]
        L.append("")
    by_method: dict = {}
    for s in sets:
        for m, d, _ in gl[s]["below_eucl"]:
            by_method.setdefault(m, []).append((s, d))
    if by_method:
        L += ["Goal 1 by learner (sets missed; worst gap; no result = timeout / error):", "",
              "| learner | sets missed | worst | no result on |", "|---|---|---|---|"]
        order = {m: i for i, m in enumerate(all_methods())}
        for m in sorted(by_method, key=lambda m: order.get(m, 99)):
            v = by_method[m]
            gaps = [(d, s) for s, d in v if d is not None]
            worst = f"{min(gaps)[0]:+.3f} ({min(gaps)[1]})" if gaps else "-"
            L.append(f"| {m} | {len(v)} | {worst} | "
                     f"{', '.join(s for s, d in v if d is None) or '-'} |")
        L.append("")
    ml_missing = [s for s in sets if not gl[s]["ml_best"]]
    if ml_missing:
        L += ["Sets without metric-learn rows (goals 2 and 3 only against Euclidean): "
              + ", ".join(ml_missing), ""]
    L += ["## Per set", "",
          "mean over the seeds Euclidean was run on (extra seeds of a method are only in "
          "the CSV); `seeds` = ok / run; `!` in *below* = mAP < Euclidean - "
          f"{TOL} (a goal miss for a learner).", ""]
    for s in sets:
        methods = summary[s]
        eu = methods.get("Euclidean", {}).get("map")
        L += [f"### {s}" + (f" ({shapes[s]})" if s in shapes else ""), "",
              "| method | family | mAP | sd | P@1 | 1-NN acc | fit s | seeds | below | "
              "warnings | status / note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        order = {m: i for i, m in enumerate(all_methods())}
        for m in sorted(methods, key=lambda m: order.get(m, 99)):
            st = methods[m]
            below = ""
            if (st["family"] == TML_FAMILY and base_method(m) not in bp.BASELINES
                    and eu is not None and (st["map"] is None or st["map"] < eu - TOL)):
                below = "!"
            notes = sorted(set(st["bad"]))
            msgs = sorted({r["message"] for k, r in rows.items() if k[0] == s and k[1] == m
                           and r["message"]})
            L.append(f"| {m} | {st['family']} | {_f(st['map'])} | {_f(st['map_sd'])} | "
                     f"{_f(st['p1'])} | {_f(st['knn1'])} | "
                     f"{bp._fmt_s(st['fit_s']) if st['fit_s'] is not None else '-'} | "
                     f"{st['n_ok']}/{st['n']} | {below} | "
                     f"{' / '.join(sorted(st['warnings']))[:200].replace('|', '/')} | "
                     f"{', '.join(notes + msgs)[:200].replace('|', '/')} |")
        L.append("")
    L += ["## PROVENANCE", "", "```", json.dumps(
        {k: v for k, v in prov.items() if k != "shapes"}, indent=2), "```", ""]
    path.write_text("\n".join(L))


def report(out: Path, prov: dict) -> dict:
    rows = read_rows(out)
    if not rows:
        raise SystemExit(f"bench_defaults_all: no rows in {out}")
    write_csv(rows.values(), out / "defaults_all.csv")
    # compare like with like: per set, only the seeds Euclidean was run on
    # (a partial run may hold extra seeds of some methods; they stay in the CSV)
    ref = {}
    for (s, m, sd) in rows:
        if m == "Euclidean":
            ref.setdefault(s, set()).add(sd)
    summary = summarize(r for (s, m, sd), r in rows.items() if sd in ref.get(s, {sd}))
    shapes = {}
    for r in rows.values():
        if r["n_train"] is not None:
            shapes[r["set"]] = (f"{r['n_train'] + r['n_test']} rows / {r['n_features']} "
                                f"features / {r['n_classes']} classes")
    gl = goals(summary)
    write_markdown(rows, summary, gl, {**prov, "shapes": shapes}, out / "defaults_all.md")
    # rows/*.jsonl stay (the raw log; later lines win): another run may be
    # appending to them (e.g. the rescaled copies run beside the unscaled sets)
    return gl


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS),
                    help="comma-separated base sets (run in this order)")
    ap.add_argument("--scales", default="1,1e-3,1e3",
                    help="comma-separated X multipliers among 1, 1e-3, 1e3 (default all; "
                         "the unscaled sets first)")
    ap.add_argument("--methods", default="all", help="comma-separated row names or 'all'")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per fit (120)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mem-limit", type=float, default=4.0, help="GiB per fit (4; 0: none)")
    ap.add_argument("--max-rows", type=int, default=MAX_ROWS)
    ap.add_argument("--jobs", type=int, default=1, help="workers (sets) run at once")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--venv", type=Path, default=bp.DEFAULT_VENV)
    ap.add_argument("--rebuild-venv", action="store_true")
    ap.add_argument("--no-peers", action="store_true",
                    help="skip metric-learn (no virtual environment; workers use this Python)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--worker", metavar="SET", help=argparse.SUPPRESS)
    ap.add_argument("--rows-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--skip-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sets = bp._csv_list(args.sets)
    if args.worker:
        args.sets = [args.worker]
    else:
        unknown = [s for s in args.sets if s not in SETS]
        if unknown:
            ap.error(f"unknown data set(s) {unknown}; known: {', '.join(SETS)}")
    try:
        args.scales = [float(s) for s in bp._csv_list(args.scales)]
    except ValueError:
        ap.error("--scales takes numbers")
    if any(s not in SCALES for s in args.scales):
        ap.error(f"--scales: each of {', '.join(map(str, SCALES))}")
    known = all_methods(peers=not args.no_peers)
    args.methods = known if args.methods == "all" else bp._csv_list(args.methods)
    unknown = [m for m in args.methods if m not in all_methods()]
    if unknown:
        ap.error(f"unknown method(s) {unknown}; known: {', '.join(all_methods())}")
    if args.no_peers:
        args.methods = [m for m in args.methods if family_of(m) != ML_FAMILY]
    args.seeds = [int(s) for s in bp._csv_list(args.seeds)]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    if args.worker:
        skip = (json.loads(args.skip_file.read_text())
                if args.skip_file and args.skip_file.exists() else [])
        skip, timed_out = (skip, {}) if isinstance(skip, list) else (skip["done"],
                                                                     skip["timed_out"])
        worker(args.worker, args.methods, args.seeds, args.timeout, args.rows_file,
               [tuple(k) for k in skip], args.mem_limit, args.max_rows,
               check_checkout=not args.no_peers, timed_out=timed_out)
        return 0
    command = "python -m bench.bench_defaults_all " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    prov_file = out / "provenance.json"
    if args.report_only:
        report(out, json.loads(prov_file.read_text()) if prov_file.exists() else {})
        log(f"report rebuilt in {out}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if args.no_peers:
        py, venv_v = Path(sys.executable), bp.env_versions(sys.executable)
    else:
        py = bp.ensure_venv(args.venv, REPO, args.rebuild_venv)
        venv_v = bp.env_versions(py)
        tf = venv_v.get("tripletml_file") or ""
        if not tf or REPO.resolve() not in Path(tf).resolve().parents:
            raise SystemExit(f"bench_defaults_all: the environment's tripletml is "
                             f"{tf or venv_v}, not this checkout ({REPO}); --rebuild-venv.")
    names = [set_name(b, sc) for sc in args.scales for b in args.sets]   # unscaled first
    existing = read_rows(out)
    grid = {(s, m, sd) for s in names for m in args.methods for sd in args.seeds}
    done = {k for k, r in existing.items() if k in grid and r["status"] != "error"} \
        if args.resume else set()
    log(f"{len(grid) - len(done)} fits to run ({len(done)} already done): {len(names)} "
        f"set(s), {len(args.methods)} method(s), seeds {args.seeds}, timeout "
        f"{args.timeout:g} s, {args.jobs} job(s)")
    env = dict(os.environ)
    for v in bp.THREAD_VARS:
        env[v] = str(args.threads)
    # the workers fork after Numba ran (the warm-up): GNU OpenMP's threading
    # layer aborts on that; with one thread the layer changes nothing else
    env.setdefault("NUMBA_THREADING_LAYER", "workqueue")
    if not args.no_peers:
        env.pop("PYTHONPATH", None)        # `-m` in cwd=REPO puts the checkout first
    rows_dir = out / "rows"
    rows_dir.mkdir(exist_ok=True)
    t_start = time.perf_counter()
    queue = [s for s in names if any(k[0] == s and k not in done for k in grid)]
    running: list = []
    failures = []

    def start(s):
        safe = s.replace("*", "x")
        skip_file = rows_dir / f"{safe}.skip.json"
        skip_file.write_text(json.dumps({
            "done": [list(k) for k in done if k[0] == s],
            "timed_out": {k[1]: k[2] for k, r in existing.items()
                          if k[0] == s and r["status"] == "timeout"
                          and args.resume and k[1] in args.methods}}))
        cmd = [str(py), "-m", "bench.bench_defaults_all", "--worker", s,
               "--methods", ",".join(args.methods), "--seeds", ",".join(map(str, args.seeds)),
               "--timeout", str(args.timeout), "--mem-limit", str(args.mem_limit),
               "--max-rows", str(args.max_rows), "--rows-file", str(rows_dir / f"{safe}.jsonl"),
               "--skip-file", str(skip_file)] + (["--no-peers"] if args.no_peers else [])
        log(f"{s}: starting worker")
        return s, skip_file, subprocess.Popen(cmd, env=env, cwd=str(REPO))

    while queue or running:
        while queue and len(running) < max(1, args.jobs):
            running.append(start(queue.pop(0)))
        time.sleep(0.2)
        for item in list(running):
            s, skip_file, proc = item
            if proc.poll() is not None:
                running.remove(item)
                skip_file.unlink(missing_ok=True)
                if proc.returncode != 0:
                    failures.append(s)
                    log(f"{s}: worker exited with code {proc.returncode}")
    elapsed = time.perf_counter() - t_start
    prev = json.loads(prov_file.read_text()) if prov_file.exists() else {}
    runs = prev.get("runs", []) + [{
        "command": command, "date": _dt.datetime.now(_dt.timezone.utc)
        .strftime("%Y-%m-%d %H:%M:%S UTC"), "sets": names, "seeds": args.seeds,
        "n_methods": len(args.methods), "timeout_s": args.timeout, "jobs": args.jobs,
        "mem_limit_gib": args.mem_limit, "resume": args.resume, "wall_s": round(elapsed, 1),
        "git": bp.git_revision(REPO)}]
    prov = {"runs": runs, "machine": bp.machine_info(), "benchmark_env": venv_v,
            "max_rows": args.max_rows, "tolerance": TOL}
    prov_file.write_text(json.dumps(prov, indent=2))
    report(out, prov)
    log(f"done in {elapsed:.0f} s; wrote {out / 'defaults_all.csv'} and defaults_all.md")
    if failures:
        log(f"workers failed for: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
