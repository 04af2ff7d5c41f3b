"""Zappos held-out triplets: tripletml's feature-free ordinal embeddings beside
cblearn 0.4.0's, on the same splits (issue 30).

Run
---
From the repository root, with the data home set (``TRIPLETML_DATA``)::

    python -m bench.bench_zappos_cblearn                 # 5 folds, dims 2 5 10 -> results/zappos/
    python -m bench.bench_zappos_cblearn --quick         # 1 fold, 2 seeds (smoke test)
    python -m bench.bench_zappos_cblearn --report-only   # table + verdict from heldout.csv

Environment
-----------
cblearn pins ``numpy~=1.26``, so its fits run in a virtual environment of
their own, created once and reused (``--venv``, default
``~/.cache/tripletml/cblearn-venv``, outside the repository): ``cblearn==0.4.0``
and ``torch==2.13.0`` (for cblearn's torch backends; pip is pointed at local
wheel folders first, ``--find-links`` / ``TRIPLETML_WHEELS``, so that a CPU
wheel is used where one is on disk).  A stamp file records the requirements;
``--rebuild-venv`` recreates the environment.  The cblearn worker
(``bench/_cblearn_worker.py``) never imports tripletml: data go to it as
``.npy`` files in a temporary folder, embeddings come back as JSON.
tripletml's fits run in a worker process too (this module, ``--worker``,
this checkout first on the import path), so that both libraries run under the
same thread settings: ``OMP/MKL/OPENBLAS/NUMBA_NUM_THREADS=1`` and
``torch.set_num_threads(1)``.

Protocol (identical for both libraries)
---------------------------------------
* Splits exactly as ``bench/bench_zappos.py``: ``KFold(5, shuffle=True,
  random_state=0)`` over the 283,770 triplets; from fold ``f``'s training
  part 20,000 triplets, ``np.random.default_rng(f).choice(tr_i, 20000,
  replace=False)``; tested on the whole test fold (56,754 triplets).  The
  parent computes the split once and hands the same arrays to both workers;
  folds are interleaved (fold f: tripletml, then cblearn).
* Methods: every ordinal embedding in ``tripletml.embedding.__all__`` (the
  subclasses of ``OrdinalEmbeddingBase``: SOE, STE, t-STE); every ordinal
  embedding of ``cblearn.embedding`` (SOE, STE, TSTE, CKL, GNMDS, FORTE, LORE,
  OENN, MLDS) at its default backend and, where it has a ``backend`` parameter
  whose default is not torch, also ``backend="torch"``.  All at their defaults
  except ``n_components`` and ``random_state``.  MLDS only supports one
  dimension and is run at 1.
* Accuracy: computed here, from each returned embedding, with one formula for
  both libraries: the fraction of test triplets with
  ``|Y[head]-Y[close]|^2 < |Y[head]-Y[far]|^2`` (ties count as wrong).  Each
  library's own ``score`` is recorded beside it (``lib_accuracy``) as a check.
  A fold's accuracy is the mean over the seeds' fits; the table gives mean +-
  sd over the folds.
* Fit seconds: one untimed warm-up fit per estimator and dimension (tripletml:
  the first 2,000 training triplets; cblearn: 300 triplets, ``max_iter=3``),
  then one timed fit per seed (0, 1, 2); a fold's time is the median over the
  seeds, the table's the median over the folds.
* A cblearn fit longer than ``--timeout`` (120 s) is interrupted and recorded
  as ``timeout``; that estimator variant is then not run again in this run
  (rows ``skipped``), to keep the benchmark within an afternoon.
* cblearn's added torch backends (SOE/STE/TSTE/CKL/GNMDS with
  ``backend="torch"``: Adam over a sample-wise ``DataLoader``, about 0.15 s
  per epoch of 20,000 triplets on one thread, 1,000 epochs by default, SOE
  times its 10 starts) take one to several minutes per fit, so by default
  they are measured on fold 0 only, at one dimension and one seed
  (``--torch-folds 1 --torch-dims 5 --torch-seeds 0``; ``--torch-folds 5
  --torch-dims 2 5 10 --torch-seeds 0 1 2`` gives them the full protocol).
  Estimators whose only / default backend is torch (FORTE, LORE, OENN) get the
  full protocol.  Only (method, dim) entries measured on every fold of the run
  compete for "best".

Goal (issue 30): the library's best feature-free embedding at or above
cblearn's best estimator's triplet accuracy (best over methods and dims), in
at most 1/5 of its fit time.

Output (``--out``, default ``results/zappos/``): ``heldout.csv`` (one row per
method, dim, fold, seed), ``README.md`` (command, table, verdict, versions,
provenance); the table and the verdict are printed.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

try:
    from . import _provenance
except ImportError:          # loaded as a file: beside it
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location("_provenance",
                                         Path(__file__).with_name("_provenance.py"))
    _provenance = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(_provenance)

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("_cblearn_worker.py")
DEFAULT_VENV = Path("~/.cache/tripletml/cblearn-venv").expanduser()
DEFAULT_OUT = REPO / "results" / "zappos"
REQUIREMENTS = ("cblearn==0.4.0", "torch==2.13.0")
DEFAULT_WHEEL_DIRS = ("/opt/wheels",)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
N_FOLDS, N_TRAIN = 5, 20000
TML, CBL = "tripletml", "cblearn"
GOAL_RATIO = 0.2
CSV_FIELDS = ("library", "method", "backend", "dim", "fold", "seed", "status", "accuracy",
              "lib_accuracy", "fit_s", "n_train", "n_test", "versions", "message")


def log(msg: str) -> None:
    print(f"[bench_zappos_cblearn {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# splits and scoring (shared by both libraries)
# --------------------------------------------------------------------------------------
def splits(n_triplets: int, n_folds: int = N_FOLDS, n_train: int = N_TRAIN
           ) -> Iterable[tuple[int, np.ndarray, np.ndarray]]:
    """bench_zappos' splits: ``(fold, train rows, test rows)`` for the first
    ``n_folds`` of ``KFold(5, shuffle=True, random_state=0)``; the training
    rows are ``n_train`` drawn with ``default_rng(fold)`` from the fold's
    training part.

    Parameters
    ----------
    n_triplets : int
        Number of triplets (283,770 for zappos).
    n_folds : int
        How many of the 5 folds to yield (the first ones).
    n_train : int
        Training triplets drawn per fold.
    """
    from sklearn.model_selection import KFold
    kf = KFold(N_FOLDS, shuffle=True, random_state=0)
    for f, (tr_i, te_i) in enumerate(kf.split(np.empty((n_triplets, 1)))):
        if f >= n_folds:
            break
        yield f, np.random.default_rng(f).choice(tr_i, n_train, replace=False), te_i


def triplet_accuracy(Y: np.ndarray, triplets: np.ndarray) -> float:
    """Fraction of triplets ``(head, close, far)`` with
    ``|Y[head] - Y[close]|^2 < |Y[head] - Y[far]|^2`` (ties count as wrong).

    Parameters
    ----------
    Y : ndarray of shape (n_items, n_components)
        Embedding, row ``i`` = item ``i``.
    triplets : ndarray of shape (n, 3)
        Item ids.
    """
    Y = np.asarray(Y, dtype=float)
    if Y.ndim == 1:
        Y = Y[:, None]
    t = np.asarray(triplets)
    d_close = ((Y[t[:, 0]] - Y[t[:, 1]]) ** 2).sum(1)
    d_far = ((Y[t[:, 0]] - Y[t[:, 2]]) ** 2).sum(1)
    return float(np.mean(d_close < d_far))


# --------------------------------------------------------------------------------------
# the cblearn environment
# --------------------------------------------------------------------------------------
def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _wheel_dirs(extra: Sequence[str] = ()) -> list[str]:
    env = [p for p in os.environ.get("TRIPLETML_WHEELS", "").split(os.pathsep) if p]
    return [d for d in (*extra, *env, *DEFAULT_WHEEL_DIRS) if Path(d).is_dir()]


def ensure_venv(venv: Path, rebuild: bool = False, find_links: Sequence[str] = ()) -> Path:
    """Create (once) the virtual environment with cblearn and torch; return its python.

    A stamp file (the requirements) decides whether an existing environment is
    reused; ``rebuild`` recreates it.
    """
    venv = Path(venv).expanduser().resolve()
    py = venv_python(venv)
    stamp = venv / "tripletml-cblearn-stamp.json"
    want = {"requirements": list(REQUIREMENTS)}
    if rebuild and venv.exists():
        log(f"removing {venv} (--rebuild-venv)")
        shutil.rmtree(venv)
    if py.exists() and stamp.exists():
        try:
            if json.loads(stamp.read_text()) == want:
                return py
        except ValueError:
            pass
    if not py.exists():
        log(f"creating the cblearn environment {venv} (once; reused afterwards)")
        venv.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-m", "venv", str(venv)])
        if res.returncode != 0 or not py.exists():
            raise SystemExit(f"bench_zappos_cblearn: could not create a virtual environment at "
                             f"{venv} with {sys.executable} -m venv (exit code "
                             f"{res.returncode}); is the python venv module installed?")
    links = [a for d in _wheel_dirs(find_links) for a in ("--find-links", d)]
    cmd = [str(py), "-m", "pip", "install", "--progress-bar", "off", *links, *REQUIREMENTS]
    log("running: " + " ".join(shlex.quote(c) for c in cmd))
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"bench_zappos_cblearn: pip failed (exit code {res.returncode}) while "
                         f"installing {', '.join(REQUIREMENTS)} into {venv}; command: "
                         f"{' '.join(cmd)}.  torch==2.13.0 needs a wheel for this Python "
                         f"(a CPU wheel in a --find-links folder avoids the CUDA download). "
                         f"Fix the problem and run again, or use --rebuild-venv.")
    stamp.write_text(json.dumps(want))
    log("cblearn environment ready")
    return py


def worker_env() -> dict:
    env = dict(os.environ)
    for v in THREAD_VARS:
        env[v] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def cblearn_versions(py: Path) -> dict:
    res = subprocess.run([str(py), str(WORKER), "--versions"], capture_output=True, text=True,
                         env=worker_env(), cwd=tempfile.gettempdir())
    if res.returncode != 0:
        raise SystemExit(f"bench_zappos_cblearn: the cblearn environment does not work "
                         f"({res.stderr.strip()[-500:]}); run with --rebuild-venv.")
    return json.loads(res.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# the tripletml worker (this module, --worker)
# --------------------------------------------------------------------------------------
def tml_versions() -> dict:
    from importlib import metadata

    import tripletml
    out = {"tripletml": getattr(tripletml, "__version__", None),
           "tripletml_file": tripletml.__file__}
    for dist in ("numpy", "scipy", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except Exception:       # noqa: BLE001
            out[dist] = None
    return out


def tml_worker(data: str, fold: int, dims: Sequence[int], seeds: Sequence[int]) -> list[dict]:
    """Fit every class of ``tripletml.embedding.__all__`` (defaults except
    ``n_components`` / ``random_state``) on fold ``fold``'s training triplets."""
    import inspect

    import tripletml.embedding as te
    warnings.simplefilter("ignore", UserWarning)
    tr = np.load(os.path.join(data, f"train_{fold}.npy"))
    test = np.load(os.path.join(data, f"test_{fold}.npy"))
    rows = []
    from tripletml.embedding._base import OrdinalEmbeddingBase
    for name in te.__all__:
        E = getattr(te, name)
        # the ordinal embeddings (answers by distances in embedding_; not the
        # helpers, nor BilinearEmbedding, which answers by its learner's W)
        if not (inspect.isclass(E) and issubclass(E, OrdinalEmbeddingBase)):
            continue
        for d in dims:
            E(n_components=d, random_state=0).fit(tr[:2000])        # warm-up (compilation)
            for s in seeds:
                row = {"method": f"{name} (tripletml)", "backend": "numba", "dim": d,
                       "fold": fold, "seed": s}
                t0 = time.perf_counter()
                try:
                    e = E(n_components=d, random_state=s).fit(tr)
                    row["fit_s"] = time.perf_counter() - t0
                    row["embedding"] = np.asarray(e.embedding_, dtype=float).tolist()
                    row["lib_accuracy"] = float(e.score(test))
                    row["status"] = "ok"
                except Exception as exc:     # noqa: BLE001
                    row.update(status="error", fit_s=time.perf_counter() - t0,
                               message=repr(exc)[:400])
                rows.append(row)
    return rows


# --------------------------------------------------------------------------------------
# rows and the report
# --------------------------------------------------------------------------------------
def _vstr(v: dict, keys: Sequence[str]) -> str:
    return " ".join(f"{k}={v.get(k)}" for k in keys)


def _num(x) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def finish_rows(raw: list[dict], library: str, test: np.ndarray, n_train: int,
                versions: str) -> list[dict]:
    """Score the returned embeddings (one formula) and shape the CSV rows."""
    out = []
    for r in raw:
        Y = r.pop("embedding", None)
        acc = triplet_accuracy(np.asarray(Y), test) if Y is not None else None
        out.append({"library": library, "method": r["method"], "backend": r["backend"],
                    "dim": int(r["dim"]), "fold": int(r["fold"]), "seed": int(r["seed"]),
                    "status": r.get("status", "error"), "accuracy": acc,
                    "lib_accuracy": r.get("lib_accuracy"), "fit_s": r.get("fit_s"),
                    "n_train": n_train, "n_test": len(test), "versions": versions,
                    "message": (r.get("message") or "").replace("\n", " ")})
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else
                            (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]))
                        for k in CSV_FIELDS})


def read_csv(path: Path) -> list[dict]:
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            r = dict(r)
            for k in ("dim", "fold", "seed", "n_train", "n_test"):
                r[k] = int(r[k]) if r[k] not in ("", None) else None
            for k in ("accuracy", "lib_accuracy", "fit_s"):
                r[k] = _num(r[k])
            rows.append(r)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per (library, method, dim): accuracy mean / sd over folds (a
    fold's accuracy = mean over its seeds' fits), median fit seconds (median
    over folds of each fold's median over seeds), fold count, status note."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["library"], r["method"], r["dim"]), []).append(r)
    out = []
    for (lib, method, dim), rs in groups.items():
        folds: dict = {}
        for r in rs:
            folds.setdefault(r["fold"], []).append(r)
        accs, times, bad = [], [], []
        for f, fr in sorted(folds.items()):
            ok = [r for r in fr if r["status"] == "ok" and r["accuracy"] is not None]
            if len(ok) == len(fr) and ok:
                accs.append(float(np.mean([r["accuracy"] for r in ok])))
                times.append(float(np.median([r["fit_s"] for r in ok])))
            else:
                bad.extend(r["status"] for r in fr if r["status"] != "ok")
        note = ""
        if bad:
            kinds = sorted(set(bad))
            note = ", ".join(f"{k} x{bad.count(k)}" for k in kinds)
        complete = bool(accs) and not bad
        out.append({"library": lib, "method": method, "dim": dim, "n_folds": len(accs),
                    "acc_mean": float(np.mean(accs)) if complete else None,
                    "acc_sd": float(np.std(accs)) if complete else None,
                    "fit_s": float(np.median(times)) if complete else None,
                    "backend": rs[0]["backend"], "note": note})
    out.sort(key=lambda s: (s["library"] != TML, s["method"], s["dim"]))
    return out


def best(summary: list[dict], library: str) -> Optional[dict]:
    """The (method, dim) of ``library`` with the highest mean accuracy among
    those complete on every fold of the run; ties go to the faster fit."""
    n = max((s["n_folds"] for s in summary), default=0)
    c = [s for s in summary if s["library"] == library and s["acc_mean"] is not None
         and s["n_folds"] == n]
    return max(c, key=lambda s: (s["acc_mean"], -s["fit_s"])) if c else None


def verdict(summary: list[dict]) -> tuple[bool, str]:
    """The issue's goal: tripletml's best accuracy >= cblearn's best and its
    fit time <= 1/5 of that cblearn estimator's."""
    ours, theirs = best(summary, TML), best(summary, CBL)
    if ours is None or theirs is None:
        return False, "VERDICT: not decidable (a library has no complete result)"
    ratio = ours["fit_s"] / theirs["fit_s"] if theirs["fit_s"] > 0 else math.inf
    ok = ours["acc_mean"] >= theirs["acc_mean"] and ratio <= GOAL_RATIO
    return ok, (f"VERDICT: {'MET' if ok else 'NOT MET'} -- ours: {ours['method']} "
                f"{ours['dim']}-D acc {ours['acc_mean']:.4f} +- {ours['acc_sd']:.4f}, fit "
                f"{ours['fit_s']:.3f} s; theirs (cblearn's best): {theirs['method']} "
                f"{theirs['dim']}-D acc {theirs['acc_mean']:.4f} +- {theirs['acc_sd']:.4f}, fit "
                f"{theirs['fit_s']:.3f} s; accuracy {'>=' if ours['acc_mean'] >= theirs['acc_mean'] else '<'} "
                f"theirs (difference {ours['acc_mean'] - theirs['acc_mean']:+.4f}); fit-time "
                f"ratio {ratio:.3f} ({'<=' if ratio <= GOAL_RATIO else '>'} {GOAL_RATIO})")


def paired(rows: list[dict], summary: list[dict]) -> str:
    """Per-fold accuracy difference between the two bests (each fold's mean
    over seeds): mean +- sd over folds and on how many folds ours >= theirs."""
    ours, theirs = best(summary, TML), best(summary, CBL)
    if ours is None or theirs is None:
        return ""

    def per_fold(b):
        acc: dict = {}
        for r in rows:
            if (r["library"], r["method"], r["dim"]) == (b["library"], b["method"], b["dim"]):
                acc.setdefault(r["fold"], []).append(r["accuracy"])
        return {f: float(np.mean(v)) for f, v in acc.items()}
    a, b = per_fold(ours), per_fold(theirs)
    d = np.array([a[f] - b[f] for f in sorted(a) if f in b])
    if not len(d):
        return ""
    return (f"Paired over folds (same splits): {ours['method']} {ours['dim']}-D minus "
            f"{theirs['method']} {theirs['dim']}-D accuracy {d.mean():+.4f} +- {d.std():.4f} "
            f"(ours >= theirs on {int((d >= 0).sum())} of {len(d)} folds)")


def table(summary: list[dict], timeout: float = 120.0) -> str:
    ref = best(summary, CBL)
    lines = ["| method | backend | dim | folds | accuracy mean ± sd | median fit s "
             "| fit s / cblearn best |",
             "|---|---|---:|---:|---|---:|---:|"]
    for s in summary:
        if s["acc_mean"] is None:
            acc = s["note"] or "no result"
            if "timeout" in acc or "skipped" in acc:
                acc = f"timeout (> {timeout:g} s): {acc}"
            fit, ratio = "–", "–"
        else:
            acc = f"{s['acc_mean']:.4f} ± {s['acc_sd']:.4f}"
            fit = f"{s['fit_s']:.3f}"
            ratio = f"{s['fit_s'] / ref['fit_s']:.3f}" if ref and ref["fit_s"] > 0 else "–"
        lines.append(f"| {s['method']} | {s['backend']} | {s['dim']} | {s['n_folds']} | {acc} "
                     f"| {fit} | {ratio} |")
    return "\n".join(lines)


def lib_agreement(rows: list[dict]) -> str:
    """Largest |own score - our formula| per library (the cross-check)."""
    parts = []
    for lib in (TML, CBL):
        d = [abs(r["accuracy"] - r["lib_accuracy"]) for r in rows if r["library"] == lib
             and r["accuracy"] is not None and r["lib_accuracy"] is not None]
        if d:
            parts.append(f"{lib} score() vs this formula: max |diff| {max(d):.2e} over {len(d)} fits")
    return "; ".join(parts)


def report(rows: list[dict], out: Path, command: str, versions: dict,
           timeout: float, folds_note: str = "") -> str:
    """Write ``out/README.md`` (command, table, verdict, checks, versions) and
    return the printed part."""
    summary = summarize(rows)
    tab = table(summary, timeout)
    _, v = verdict(summary)
    pair = paired(rows, summary)
    agree = lib_agreement(rows)
    errors = sorted({f"{r['method']} {r['dim']}-D: {r['message']}" for r in rows
                     if r["status"] == "error"})
    md = [f"# Zappos held-out triplets: tripletml beside cblearn {versions.get('cblearn', {}).get('cblearn')}",
          "", "Command (repository root, data home set):", "", f"    {command}", "",
          "Protocol: see the docstring of `bench/bench_zappos_cblearn.py` (bench_zappos' splits, "
          "20,000 training triplets per fold, the whole test fold; one thread; accuracy = a fold's "
          "mean over its seeds, mean ± sd over folds; fit s = median over folds of the median of the "
          "seeds' fits after an untimed warm-up).", ""]
    if folds_note:
        md += [folds_note, ""]
    md += [tab, "", v, ""]
    if pair:
        md += [pair + ".", ""]
    if agree:
        md += [f"Cross-check: {agree}.", ""]
    if errors:
        md += ["Errors:", ""] + [f"* {e}" for e in errors] + [""]
    md += ["## Versions", "", "```", json.dumps(versions, indent=1), "```", ""]
    (out / "README.md").write_text("\n".join(md))
    return "\n".join([tab, "", v, *filter(None, [pair, agree])])


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------
def _run_json(cmd: list[str], out_file: Path, what: str) -> dict:
    proc = subprocess.Popen(cmd, env=worker_env(), cwd=str(REPO))
    try:
        rc = proc.wait()
    except BaseException:           # interrupted (Ctrl-C, SIGTERM): take the worker along
        proc.kill()
        proc.wait()
        raise
    if rc != 0 or not out_file.exists():
        raise SystemExit(f"bench_zappos_cblearn: the {what} worker failed (exit code "
                         f"{rc}); command: {' '.join(map(shlex.quote, cmd))}")
    return json.loads(out_file.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--folds", type=int, default=N_FOLDS, help="how many of the 5 folds (first ones)")
    ap.add_argument("--quick", action="store_true", help="1 fold, 2 seeds (smoke test)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per cblearn fit, seconds")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--rebuild-venv", action="store_true")
    ap.add_argument("--find-links", action="append", default=[],
                    help="local wheel folder for pip (repeatable)")
    ap.add_argument("--torch-folds", type=int, default=1,
                    help="folds on which cblearn's added torch backends run (first ones)")
    ap.add_argument("--torch-dims", type=int, nargs="+", default=[5])
    ap.add_argument("--torch-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", default="", help="a paragraph for README.md (with --report-only)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--fold", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    seeds = a.seeds or ([0, 1] if a.quick else [0, 1, 2])
    if a.worker:
        rows = tml_worker(a.data, a.fold, a.dims, seeds)
        Path(a.worker_out).write_text(json.dumps({"versions": tml_versions(), "rows": rows}))
        return 0
    n_folds = 1 if a.quick else a.folds
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    argv_s = " ".join(map(shlex.quote, argv if argv is not None else sys.argv[1:]))
    command = f"python -m bench.bench_zappos_cblearn {argv_s}".strip()
    csv_path = out / "heldout.csv"
    if a.report_only:
        rows = read_csv(csv_path)
        vers = json.loads((out / "versions.json").read_text()) if (out / "versions.json").exists() else {}
        print(report(rows, out, vers.pop("command", command), vers, a.timeout, a.note))
        return 0

    import signal

    def _term(signum, frame):
        raise SystemExit(f"bench_zappos_cblearn: stopped by signal {signum}")
    signal.signal(signal.SIGTERM, _term)
    py = ensure_venv(a.venv, a.rebuild_venv, a.find_links)
    from tripletml.datasets import load_comparisons
    T = load_comparisons("zappos").triplets
    log(f"{len(T)} triplets; folds {n_folds}, dims {a.dims}, seeds {seeds}, cblearn timeout "
        f"{a.timeout:g} s")
    versions = {"cblearn": cblearn_versions(py), "git": _provenance.git_revision(),
                "machine": _provenance.machine_info()}
    vstr = {CBL: _vstr(versions["cblearn"], ("cblearn", "numpy", "scipy", "torch"))}
    rows: list[dict] = []
    skip: set[str] = set()
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="zappos-cblearn-") as tmp:
        for f, tr_i, te_i in splits(len(T), n_folds):
            tr, te = T[tr_i], T[te_i]
            np.save(os.path.join(tmp, f"train_{f}.npy"), tr)
            np.save(os.path.join(tmp, f"test_{f}.npy"), te)
            # tripletml
            wo = Path(tmp) / f"tml_{f}.json"
            res = _run_json([sys.executable, "-m", "bench.bench_zappos_cblearn", "--worker",
                             "--data", tmp, "--fold", str(f), "--dims", *map(str, a.dims),
                             "--seeds", *map(str, seeds), "--worker-out", str(wo)], wo,
                            "tripletml")
            versions["tripletml"] = res["versions"]
            vstr[TML] = _vstr(res["versions"], ("tripletml", "numpy", "scipy", "numba"))
            rows += finish_rows(res["rows"], TML, te, len(tr), vstr[TML])
            log(f"fold {f}: tripletml done ({time.time() - t_start:.0f} s so far)")
            # cblearn
            wo = Path(tmp) / f"cbl_{f}.json"
            res = _run_json([str(py), str(WORKER), "--data", tmp, "--fold", str(f),
                             "--dims", *map(str, a.dims), "--seeds", *map(str, seeds),
                             "--timeout", str(a.timeout), "--skip", json.dumps(sorted(skip)),
                             "--torch-dims", *(map(str, a.torch_dims) if f < a.torch_folds
                                               else ()),
                             "--torch-seeds", *map(str, a.torch_seeds),
                             "--out", str(wo)], wo, "cblearn")
            new = finish_rows(res["rows"], CBL, te, len(tr), vstr[CBL])
            for r in new:
                if r["status"] == "timeout":
                    skip.add(f"{r['method'].split(' ')[0]}|{r['backend']}")
            rows += new
            log(f"fold {f}: cblearn done ({time.time() - t_start:.0f} s so far)")
            write_csv(csv_path, rows)
    (out / "versions.json").write_text(json.dumps({**versions, "command": command}, indent=1))
    note = "" if n_folds == N_FOLDS else f"Folds run: {n_folds} of {N_FOLDS}."
    print(report(rows, out, command, versions, a.timeout, note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
