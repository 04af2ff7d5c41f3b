"""The classic learners head to head: tripletml vs metric-learn 0.7.0 (issue 29, item 4).

Usage
-----
From the repository root, with the data home set (``TRIPLETML_DATA``)::

    python -m bench.bench_classic                        # all sets -> results/classic/
    python -m bench.bench_classic --sets iris,wine --seeds 0 --out /tmp/classic
    python -m bench.bench_classic --learners LMNN,NCA --resume
    python -m bench.bench_classic --report-only          # rebuild classic.md from classic.csv

A separate script rather than a mode of ``bench.bench_peers``: it pairs each
tripletml learner with its metric-learn counterpart, adds k-NN accuracy and
judges the issue's per-pair goals; the environment, workers, per-fit child
process (timeout, memory cap), thread pinning, data loading, mAP scoring and
provenance are bench_peers' own (through ``bench._headtohead``).

Protocol (bench_peers' protocol, identical for both libraries)
---------------------------------------------------------------
* Data: bench_peers' ``SETS`` through ``tripletml.datasets.load`` (all stored
  rows, densified, unscaled as stored); ``train_test_split(test_size=0.3,
  stratify=y, random_state=seed)``; seeds ``--seeds`` (default 0,1,2; sets over
  ``--large`` = 5000 rows, i.e. letter: ``--large-seeds``, default 0).
* Fit on the training rows with the class labels and DEFAULT parameters, only
  ``random_state=seed`` where the class has one.  metric-learn's
  ``RCA_Supervised`` gets bench_peers' adjustment (``n_chunks`` lowered to the
  largest possible number where its default 100 is impossible, said in the
  row's message).
* Scores on the test rows: leave-one-out retrieval mAP among the test rows
  (``tripletml.metrics.evaluate_retrieval``; metric-learn: Euclidean on
  ``transform``, as bench_peers), and k-NN accuracy for k = 1 and 3:
  ``KNeighborsClassifier(k)`` fitted on ``transform(X_train)``, scored on
  ``transform(X_test)``.
* Fit seconds: ``fit`` alone (a fit under 0.2 s: median of 5 runs); tripletml's Numba kernels compiled beforehand by
  an untimed fit on 50 training rows (bench_peers' warm-up).
* Per-fit timeout ``--timeout`` (default 300 s, covers warm-up, fit and
  scoring) and address-space cap ``--mem-limit`` (default 8 GiB); BLAS /
  OpenMP / Numba threads pinned to ``--threads`` (default 1).

Pairs and goals
---------------
LMNN - LMNN, NCA - NCA, LFDA - LFDA, MMC - MMC_Supervised, SCML -
SCML_Supervised, RCA - RCA_Supervised (rows "LMNN (metric-learn)", ... for
metric-learn's).  Goals (issue 29): quality the same or better (mean mAP,
1-NN and 3-NN accuracy each at least metric-learn's minus ``TOL`` = 0.005);
time: for the iterative learners (LMNN, NCA, MMC, SCML) at most 1/5 of
metric-learn's mean fit time where metric-learn takes over a second (n/a
below a second; when metric-learn timed out: met within 1/5 of the timeout,
undecided beyond), for the
closed forms (RCA, LFDA) no slower than metric-learn.

Output (``--out``, default ``results/classic/``)
------------------------------------------------
``classic.csv`` (one row per set x method x seed), ``classic.md`` (per pair
and set: both sides' mAP / k-NN / fit time, deltas, time ratio, goals; a
summary of the goals per pair), ``provenance.json``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

try:
    from . import _headtohead as hh
except ImportError:          # loaded as a file: beside it
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location("_headtohead", Path(__file__).with_name("_headtohead.py"))
    hh = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(hh)

bp = hh.bp
REPO = hh.REPO
DEFAULT_OUT = REPO / "results" / "classic"
SETS = bp.SETS
CSV_NAME = "classic.csv"
CSV_FIELDS = ("set", "method", "family", "seed", "status", "map", "knn1", "knn3", "fit_s",
              "n_components", "n_train", "n_test", "n_features", "n_classes", "message")
FLOATS = ("map", "knn1", "knn3", "fit_s")
INTS = ("n_components", "n_train", "n_test", "n_features", "n_classes")
METRICS = ("map", "knn1", "knn3")

#: tripletml learner -> metric-learn class
PAIRS = {"LMNN": "LMNN", "NCA": "NCA", "LFDA": "LFDA", "MMC": "MMC_Supervised",
         "SCML": "SCML_Supervised", "RCA": "RCA_Supervised"}
ITERATIVE = ("LMNN", "NCA", "MMC", "SCML")
CLOSED = ("RCA", "LFDA")
TOL = 0.005
SLOW_S = 1.0
FIFTH = 5.0

log = hh.logger("bench_classic")


def ml_method(learner: str) -> str:
    return hh.ml_row(PAIRS[learner])


def all_methods() -> list[str]:
    out = []
    for t in PAIRS:
        out += [ml_method(t), t]
    return out


def methods_for(learners) -> list[str]:
    return [m for t in learners for m in (ml_method(t), t)]


def learner_of(method: str) -> str:
    """The pair (tripletml learner name) a row belongs to."""
    if hh.family_of(method) == hh.TML_FAMILY:
        return method
    cls = method[: -len(hh.ML_SUFFIX)]
    return next(t for t, c in PAIRS.items() if c == cls)


# --------------------------------------------------------------------------------------
# fitting and scoring one method (in the forked child)
# --------------------------------------------------------------------------------------
def make_estimator(method: str, seed: int):
    if hh.family_of(method) == hh.ML_FAMILY:
        import metric_learn
        cls = getattr(metric_learn, method[: -len(hh.ML_SUFFIX)])
    else:
        import tripletml
        cls = getattr(tripletml, method, None)
        if cls is None:
            raise LookupError(f"tripletml has no public {method!r}")
    est = cls()
    if "random_state" in est.get_params():
        est.set_params(random_state=seed)
    return est


def knn_accuracy(Ztr, ytr, Zte, yte, k: int) -> float:
    from sklearn.neighbors import KNeighborsClassifier
    return float(KNeighborsClassifier(n_neighbors=k).fit(Ztr, ytr).score(Zte, yte))


def score(est, Xtr, ytr, Xte, yte) -> dict:
    """mAP (tripletml's evaluate_retrieval on the embedded rows) and k-NN
    accuracy (k = 1, 3) of a fitted transformer, from either library."""
    import numpy as np
    from tripletml import Euclidean
    from tripletml.metrics import evaluate_retrieval
    Ztr, Zte = np.asarray(est.transform(Xtr)), np.asarray(est.transform(Xte))
    if Ztr.ndim != 2 or Ztr.shape[1] == 0:
        raise ValueError(f"{type(est).__name__} learned a zero metric: transform gives "
                         f"{Ztr.shape[-1]} components")
    if not (np.all(np.isfinite(Ztr)) and np.all(np.isfinite(Zte))):
        raise ValueError(f"{type(est).__name__}.transform gave NaN or infinite values")
    m = float(evaluate_retrieval(Euclidean().fit(Ztr), Zte, yte, k=())["map"])
    return {"map": m, "knn1": knn_accuracy(Ztr, ytr, Zte, yte, 1),
            "knn3": knn_accuracy(Ztr, ytr, Zte, yte, 3), "n_components": int(Ztr.shape[1])}


def evaluate(est, Xtr, ytr, Xte, yte, warm_up: bool = False) -> dict:
    """Fit ``est`` on the training rows (timed), then :func:`score`."""
    if warm_up:                                   # Numba JIT compile, untimed
        try:
            from sklearn.base import clone
            w = bp._warmup_rows(ytr)
            clone(est).fit(Xtr[w], ytr[w])
        except Exception:                         # noqa: BLE001 - the timed fit reports it
            pass
    fit_s = hh.timed_fit(est, lambda e: e.fit(Xtr, ytr))
    return {**score(est, Xtr, ytr, Xte, yte), "fit_s": fit_s}


def fit_and_score(method: str, seed: int, Xtr, ytr, Xte, yte) -> dict:
    import warnings
    warnings.simplefilter("ignore")
    est = make_estimator(method, seed)
    msg = bp.adjust_rca(est, ytr) if method == ml_method("RCA") else ""
    res = evaluate(est, Xtr, ytr, Xte, yte, warm_up=hh.family_of(method) == hh.TML_FAMILY)
    res["message"] = msg
    return res


# --------------------------------------------------------------------------------------
# the worker
# --------------------------------------------------------------------------------------
def worker(args) -> None:
    import json
    import numpy as np
    tripletml = bp._import_checkout_tripletml(REPO)
    set_name = args.worker
    skip = set()
    if args.skip_file and args.skip_file.exists():
        skip = {(s, m, int(sd)) for s, m, sd in json.loads(args.skip_file.read_text())}
    args.rows_file.parent.mkdir(parents=True, exist_ok=True)
    X, y = bp.load_set(set_name)
    log(f"{set_name}: {X.shape[0]} rows, {X.shape[1]} features, {len(np.unique(y))} classes")
    for seed in args.seeds:
        Xtr, Xte, ytr, yte = bp.split(X, y, seed)
        base = {"set": set_name, "seed": int(seed), "n_train": int(len(ytr)),
                "n_test": int(len(yte)), "n_features": int(X.shape[1]),
                "n_classes": int(len(np.unique(y)))}
        for method in args.methods:
            if (set_name, method, int(seed)) in skip:
                continue
            fam = hh.family_of(method)
            row = {**base, "method": method, "family": fam, "map": None, "knn1": None,
                   "knn3": None, "fit_s": None, "n_components": None, "message": ""}
            if fam == hh.TML_FAMILY and getattr(tripletml, method, None) is None:
                row.update(status="absent", message=f"tripletml.{method} does not exist in "
                                                    "this checkout")
            else:
                res = bp.run_one_with_timeout(method, seed, (Xtr, ytr, Xte, yte), args.timeout,
                                              args.mem_limit, fit=fit_and_score)
                tb = res.pop("traceback", None)
                if tb:
                    print(tb, file=sys.stderr, flush=True)
                row.update(res)
            hh.append_row(args.rows_file, row)
            vals = " ".join("-" if row[k] is None else f"{k} {row[k]:.3f}"
                            for k in ("map", "knn1", "knn3"))
            f = "-" if row["fit_s"] is None else f"{row['fit_s']:.3f} s"
            extra = f" {row['message']}" if row.get("message") else ""
            log(f"{set_name} seed {seed} {method:30s} {row['status']:7s} {vals} fit {f}{extra}")


# --------------------------------------------------------------------------------------
# rows, goals, report
# --------------------------------------------------------------------------------------
def normalize(r: dict) -> dict:
    return hh.normalize(r, CSV_FIELDS, FLOATS, INTS)


def read_rows(out: Path) -> dict:
    return hh.read_rows(out, CSV_NAME, normalize)


def write_csv(rows, path: Path) -> None:
    hh.write_csv(rows, path, CSV_FIELDS, all_methods(), SETS,
                 {"map": 6, "knn1": 6, "knn3": 6, "fit_s": 5})


def summarize(rows) -> dict:
    return hh.summarize(rows, METRICS)


def compare(ml: Optional[dict], tm: Optional[dict], learner: str,
            timeout: Optional[float] = None) -> dict:
    """One pair on one set: deltas, time ratio and the two goals.

    ``quality``: True when every mean metric of tripletml is at least
    metric-learn's minus TOL; ``time``: the issue's time goal (None = n/a).
    ``ml``/``tm`` are :func:`summarize` stats (or None when absent)."""
    out = {"learner": learner, "quality": None, "time": None, "ratio": None,
           "deltas": {m: None for m in METRICS}, "time_text": "", "quality_text": ""}
    ml_ok = ml is not None and ml["map"] is not None
    tm_ok = tm is not None and tm["map"] is not None
    if not tm_ok:
        why = "/".join(tm["bad"]) if tm else "absent"
        out["quality_text"] = out["time_text"] = f"tripletml: {why or 'no result'}"
        absent = tm is None or tm["bad"] == ["absent"]
        out["quality"] = out["time"] = None if absent else False
        return out
    if ml_ok:
        for m in METRICS:
            out["deltas"][m] = tm[m] - ml[m]
        worst = min(out["deltas"].values())
        out["quality"] = worst >= -TOL
        out["quality_text"] = ", ".join(f"Δ{m} {d:+.3f}" for m, d in out["deltas"].items())
        out["ratio"] = tm["fit_s"] / ml["fit_s"] if ml["fit_s"] else None
        if learner in ITERATIVE:
            if ml["fit_s"] > SLOW_S:
                out["time"] = tm["fit_s"] <= ml["fit_s"] / FIFTH
                out["time_text"] = (f"{hh.fmt_s(tm['fit_s'])} vs limit "
                                    f"{hh.fmt_s(ml['fit_s'] / FIFTH)}")
            else:
                out["time"] = None
                out["time_text"] = f"metric-learn {hh.fmt_s(ml['fit_s'])} (< 1 s): n/a"
        else:
            out["time"] = tm["fit_s"] <= ml["fit_s"]
            out["time_text"] = f"{hh.fmt_s(tm['fit_s'])} vs {hh.fmt_s(ml['fit_s'])}"
    else:
        bad = "/".join(ml["bad"]) if ml else "absent"
        out["quality_text"] = f"metric-learn: {bad}; tripletml alone"
        if ml is not None and "timeout" in ml["bad"] and timeout:
            if learner in ITERATIVE:
                # met when within 1/5 of the timeout; otherwise unknown (n/a), since
                # metric-learn's own time is only known to exceed the timeout
                out["time"] = True if tm["fit_s"] <= timeout / FIFTH else None
                out["time_text"] = (f"metric-learn > {timeout:g} s (timeout); tripletml "
                                    f"{hh.fmt_s(tm['fit_s'])}" +
                                    ("" if out["time"] else
                                     f", more than 1/{FIFTH:g} of the timeout: not decided"))
            else:
                out["time"] = True
                out["time_text"] = f"metric-learn > {timeout:g} s (timeout)"
        else:
            out["time_text"] = f"metric-learn: {bad}"
    return out


def comparisons(summary: dict, timeouts: Optional[dict] = None) -> dict:
    """``{learner: {set: compare(...)}}`` for every pair with a row on the set."""
    timeouts = timeouts or {}
    res: dict = {}
    for s, methods in summary.items():
        for t in PAIRS:
            ml, tm = methods.get(ml_method(t)), methods.get(t)
            if ml is None and tm is None:
                continue
            res.setdefault(t, {})[s] = compare(ml, tm, t, timeouts.get(s))
    return res


def _v(st: Optional[dict], k: str) -> str:
    if st is None:
        return "-"
    if st[k] is None:
        return "/".join(st["bad"]) or "-"
    return f"{st[k]:.3f}"


def write_markdown(summary: dict, comp: dict, prov: dict, path: Path) -> None:
    sets_all = hh.ordered_sets(summary, SETS)
    L = ["# The classic learners: tripletml vs metric-learn " + bp.METRIC_LEARN_VERSION +
         " (issue 29)", "",
         "Protocol: bench_peers' (stratified 70/30 split per seed, unscaled data, defaults with "
         "`random_state` only), test-vs-test retrieval mAP (Euclidean on `transform`), k-NN "
         "accuracy (k = 1, 3) of `KNeighborsClassifier` fitted on the embedded training rows and "
         "scored on the embedded test rows; fit seconds of `fit` alone. See "
         "`bench/bench_classic.py`. Timings are from one run on a shared machine: compare "
         "within the run.", "",
         f"Goals: quality = mean mAP, 1-NN and 3-NN accuracy each ≥ metric-learn's − {TOL}; "
         f"time = ≤ 1/{FIFTH:g} of metric-learn's fit time for LMNN, NCA, MMC, SCML where "
         f"metric-learn takes over {SLOW_S:g} s (n/a otherwise), ≤ metric-learn's time for RCA "
         "and LFDA.", "", "## Summary per learner", "",
         "| learner | metric-learn class | sets | quality met | time met | mean Δ mAP / 1-NN / "
         "3-NN | time ratio tripletml / metric-learn (median, range) | misses |",
         "|---|---|---|---|---|---|---|---|"]
    for t in PAIRS:
        if t not in comp:
            continue
        cs = comp[t]
        q = [s for s in cs if cs[s]["quality"] is True]
        qn = [s for s in cs if cs[s]["quality"] is not None]
        tt = [s for s in cs if cs[s]["time"] is True]
        tn = [s for s in cs if cs[s]["time"] is not None]
        ratios = sorted(c["ratio"] for c in cs.values() if c["ratio"] is not None)
        rt = "-"
        if ratios:
            med = ratios[len(ratios) // 2] if len(ratios) % 2 else \
                (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
            rt = f"{med:.3g} ({ratios[0]:.3g} – {ratios[-1]:.3g})"
        order = [s for s in sets_all if s in cs]
        qm = [s for s in order if cs[s]["quality"] is False]
        tm_ = [s for s in order if cs[s]["time"] is False]
        misses = ([f"quality: {', '.join(qm)}"] if qm else []) + \
            ([f"time: {', '.join(tm_)}"] if tm_ else [])
        dl = []
        for m in METRICS:
            v = [c["deltas"][m] for c in cs.values() if c["deltas"][m] is not None]
            dl.append(f"{sum(v) / len(v):+.3f}" if v else "-")
        L.append(f"| {t} | {PAIRS[t]} | {len(cs)} | {len(q)}/{len(qn)} | {len(tt)}/{len(tn)} | "
                 f"{' / '.join(dl)} | {rt} | {'; '.join(misses) or 'none'} |")
    for t in PAIRS:
        if t not in comp:
            continue
        cs = comp[t]
        sets = [s for s in sets_all if s in cs]
        L += ["", f"## {t} vs metric-learn's {PAIRS[t]}", "",
              "| set | mAP ml / tml | 1-NN ml / tml | 3-NN ml / tml | fit ml / tml | ratio | "
              "quality | time |", "|---|---|---|---|---|---|---|---|"]
        for s in sets:
            ml, tm = summary[s].get(ml_method(t)), summary[s].get(t)
            c = cs[s]
            fit = (f"{hh.fmt_s(ml['fit_s']) if ml and ml['fit_s'] is not None else _v(ml, 'map')}"
                   f" / {hh.fmt_s(tm['fit_s']) if tm and tm['fit_s'] is not None else _v(tm, 'map')}")
            ratio = "-" if c["ratio"] is None else f"{c['ratio']:.3g}"
            L.append(f"| {s} | {_v(ml, 'map')} / {_v(tm, 'map')} | {_v(ml, 'knn1')} / "
                     f"{_v(tm, 'knn1')} | {_v(ml, 'knn3')} / {_v(tm, 'knn3')} | {fit} | {ratio} | "
                     f"{bp._yn(c['quality'])}{': ' + c['quality_text'] if c['quality'] is False else ''} | "
                     f"{bp._yn(c['time'])} ({c['time_text']}) |")
    methods = [m for m in all_methods() if any(m in summary[s] for s in sets_all)]
    L += ["", "## All rows: mAP ± sd (mean fit seconds)", "",
          "| method | " + " | ".join(sets_all) + " |", "|---|" + "---|" * len(sets_all)]
    for m in methods:
        L.append(f"| {m} | " + " | ".join(hh.fmt_stat(summary[s].get(m), "map")
                                          for s in sets_all) + " |")
    fails = [(s, m, summary[s][m]) for s in sets_all for m in methods
             if m in summary[s] and summary[s][m]["messages"]]
    if fails:
        L += ["", "## Failures and notes", "", "| set | method | status | message |",
              "|---|---|---|---|"]
        for s, m, st in fails:
            msg = " / ".join(st["messages"])[:400].replace("|", "\\|")
            L.append(f"| {s} | {m} | {', '.join(st['bad']) or 'ok'} | {msg} |")
    L += [""] + hh.provenance_block(prov)
    path.write_text("\n".join(L))


def _timeouts(prov: dict) -> dict:
    """The per-fit timeout of the latest run that covered each set."""
    out = {}
    for r in prov.get("runs", []):
        for s in r.get("sets", []):
            out[s] = r.get("timeout_s")
    return out


def report(out: Path, prov: dict) -> dict:
    rows = read_rows(out)
    if not rows:
        raise SystemExit(f"bench_classic: no rows in {out}")
    write_csv(rows.values(), out / CSV_NAME)
    summary = summarize(rows.values())
    write_markdown(summary, comparisons(summary, _timeouts(prov)), prov, out / "classic.md")
    hh.finish_rows(out)
    return summary


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------
PROTOCOL = ("bench_peers' protocol: train_test_split(test_size=0.3, stratify=y, "
            "random_state=seed), unscaled, defaults; test-vs-test evaluate_retrieval mAP of "
            "Euclidean on transform; KNeighborsClassifier(k=1, 3) on transform; per-fit child "
            "process (fork) with timeout")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.bench_classic",
                                 description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:10]))
    hh.common_args(ap, SETS, DEFAULT_OUT, 300.0)
    ap.add_argument("--learners", default=None,
                    help=f"comma-separated pairs to run, by tripletml name ({', '.join(PAIRS)}); "
                         "both sides of each (overrides --methods)")
    args = ap.parse_args(argv)
    if args.learners:
        ls = bp._csv_list(args.learners)
        bad = [t for t in ls if t not in PAIRS]
        if bad:
            ap.error(f"unknown learner(s) {bad}; known: {', '.join(PAIRS)}")
        args.methods = ",".join(methods_for(ls))
    hh.check_common(ap, args, SETS, all_methods())
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return hh.run_parent(args, module="bench.bench_classic", csv_name=CSV_NAME, read=read_rows,
                         write=write_csv, report=report, protocol=PROTOCOL, log=log, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
