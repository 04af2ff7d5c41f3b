"""Peer benchmark: tripletml's learners beside metric-learn 0.7.0 (issue #14, item 4).

Usage
-----
From the repository root, with the data home set (``TRIPLETML_DATA``)::

    python -m bench.bench_peers                                  # ten sets, 3 seeds -> results/peers/
    python -m bench.bench_peers --sets vehicle,vowel,svmguide4,segment --out results/peers/before
    python -m bench.bench_peers --resume                         # skip rows already written
    python -m bench.bench_peers --report-only                    # rebuild peers.md / .png from peers.csv
    python -m bench.bench_peers --methods ITML,LMNN,Euclidean,SML --seeds 0 --timeout 60

Environment
-----------
metric-learn 0.7.0 needs ``scikit-learn<1.8``, so the fits run in a virtual
environment of their own, created once and then reused: ``--venv`` (default
``~/.cache/tripletml/peers-venv``, outside the repository).  It holds
metric-learn 0.7.0, ``scikit-learn<1.8``, tripletml's other dependencies and
tripletml installed editable (``pip install -e``) from this checkout; every
worker runs as ``python -m bench.bench_peers`` from the checkout (so the
checkout comes first on the import path) and refuses to run if the
``tripletml`` it imports is not the checkout's.  A recorded stamp (the
requirements) decides whether the environment is up to date;
``--rebuild-venv`` recreates it.  The parent process (this script, run with any
Python that has numpy and matplotlib) only creates the environment, starts the
workers and writes the report.

Protocol (identical for every method)
-------------------------------------
* One worker process per data set, inside the environment above
  (``--worker SET``); it appends one JSON row per (method, seed) to
  ``OUT/rows/SET.jsonl`` and the parent aggregates.
* Data: ``tripletml.datasets.load(name)`` (subset ``"all"``: the stored train
  and test files together; svmguide4 unscaled, as stored), densified.
* ``train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)``,
  seeds ``--seeds`` (default 0,1,2).
* Fit on the train part with the method's DEFAULT parameters, only
  ``random_state=seed`` set where the method has one.
* Score: test-vs-test (leave-one-out) retrieval mAP from
  :func:`tripletml.metrics.evaluate_retrieval`.  A metric-learn transformer is
  scored by fitting :class:`tripletml.Euclidean` on ``model.transform(X_train)``
  and evaluating it on ``model.transform(X_test)``, so the mAP code is the same
  for everyone.
* Fit seconds: wall clock of ``fit`` alone (not the scoring).  For tripletml
  learners Numba's one-off JIT compilation is excluded: the child first fits
  the same method on 50 training rows (untimed).
* Per-fit timeout (``--timeout``, default 300 s): each fit runs in a child
  process forked from the worker (``multiprocessing`` "fork" context, result
  sent back through a pipe); a child that has not answered in time is
  terminated (SIGTERM, then SIGKILL) and the row gets status ``timeout``.  The
  timeout covers the warm-up, the fit and the scoring.  Each child's address
  space is capped (``--mem-limit``, default 8 GiB) so that a method building
  n x n matrices on letter fails with MemoryError instead of starving the
  machine.  A
  child that raises gives ``error`` (with the message); one that dies
  (e.g. killed for memory) gives ``error`` with its exit code.
* BLAS / OpenMP / Numba threads are pinned to ``--threads`` (default 1) in the
  workers, for every method alike.

Methods
-------
metric-learn: ITML_Supervised, LMNN, NCA, RCA_Supervised, SCML_Supervised,
LSML_Supervised, all with their defaults (none needs an argument without a
default in 0.7.0).  One exception: RCA_Supervised's default ``n_chunks=100``
needs 100 disjoint same-class pairs in the training part; where fewer exist
(iris, wine: metric-learn raises) the largest possible number is used and the
row's message says so.  tripletml: every public :class:`tripletml.TripletLearner`
subclass in ``tripletml.__all__`` (Euclidean, DotProduct, OASIS, SDCA, COMET,
SparseCOMET, LORETA, IterativePA, NaivePA, FactoredGD, LowRankDML, SML, KISSME), with
defaults; and ``tripletml.AutoSimilarity`` with defaults when it exists
(skipped with a note otherwise).

Output (``--out``, default ``results/peers/``)
-----------------------------------------------
``peers.csv`` (one row per set x method x seed: mAP, fit seconds, status),
``peers.md`` (per set mean +- sd mAP and mean fit seconds, the issue's goals
as yes/no with the numbers, a PROVENANCE block), ``peers.png`` (mAP against
fit seconds, log x, one panel per set), ``provenance.json``.

``--resume`` keeps the rows already in ``peers.csv`` / ``rows/*.jsonl`` and
runs only the missing (set, method, seed) rows (rows with status ``error`` are
run again).  Without it the requested rows are recomputed; rows of other sets
or methods already in the folder are kept, so a folder can be filled set by
set.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

try:
    from . import _provenance
except ImportError:          # loaded as a file (the peers venv's worker, tests): beside it
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location("_provenance",
                                         Path(__file__).with_name("_provenance.py"))
    _provenance = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(_provenance)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path("~/.cache/tripletml/peers-venv").expanduser()
DEFAULT_OUT = REPO / "results" / "peers"

SETS = ("vehicle", "vowel", "svmguide4", "segment", "letter",
        "balance-scale", "ionosphere", "iris", "wine", "digits")

#: short name -> metric-learn class name (all with their defaults)
ML_METHODS = {
    "ITML": "ITML_Supervised",
    "LMNN": "LMNN",
    "NCA": "NCA",
    "RCA": "RCA_Supervised",
    "SCML": "SCML_Supervised",
    "LSML": "LSML_Supervised",
}
#: tripletml learners whose class name is also a metric-learn method's short name
#: get a distinct method name here (the table's row) -> class name
#: tripletml's row of a learner metric-learn also has (a row name is one
#: implementation; LMNN, NCA and SCML once ran as metric-learn's rows here)
TML_RENAMED = {f"{name} (tripletml)": name for name in ML_METHODS}


def _tml_methods() -> tuple[str, ...]:
    """Every triplet learner of tripletml's registry (the checkout's, when run
    as ``python -m bench.bench_peers`` from it), by row name."""
    import tripletml
    rename = {cls: row for row, cls in TML_RENAMED.items()}
    return tuple(rename.get(n, n) for n in tripletml.learner_names("triplet"))


TML_METHODS = _tml_methods()
AUTO = "AutoSimilarity"
#: no-learning baselines: not "learners" for the goal "no default learner below Euclidean"
BASELINES = ("Euclidean", "DotProduct")
ML_FAMILY, TML_FAMILY, AUTO_FAMILY = "metric-learn", "tripletml", "auto"

METRIC_LEARN_VERSION = "0.7.0"
REQUIREMENTS = (f"metric-learn=={METRIC_LEARN_VERSION}", "scikit-learn<1.8")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
CSV_FIELDS = ("set", "method", "family", "seed", "status", "map", "fit_s", "n_train",
              "n_test", "n_features", "n_classes", "message")
WARMUP_ROWS = 50


def family_of(method: str) -> str:
    if method in ML_METHODS:
        return ML_FAMILY
    if method == AUTO:
        return AUTO_FAMILY
    return TML_FAMILY


def all_methods() -> list[str]:
    return [*ML_METHODS, *TML_METHODS, AUTO]


def log(msg: str) -> None:
    print(f"[bench_peers {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# the virtual environment
# --------------------------------------------------------------------------------------
def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _stamp(repo: Path) -> dict:
    return {"requirements": list(REQUIREMENTS), "repo": str(repo),
            "pyproject": (repo / "pyproject.toml").read_text()}


def _pip(py: Path, args: Sequence[str]) -> None:
    cmd = [str(py), "-m", "pip", "install", "--progress-bar", "off", *args]
    log("running: " + " ".join(shlex.quote(c) for c in cmd))
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"bench_peers: pip failed (exit code {res.returncode}) while setting "
                         f"up the benchmark environment; command: {' '.join(cmd)}.  Fix the "
                         f"problem (network, versions) and run again, or use --rebuild-venv.")


def ensure_venv(venv: Path, repo: Path = REPO, rebuild: bool = False) -> Path:
    """Create (once) the environment with metric-learn and this checkout's tripletml.

    Returns the environment's python.  A stamp file records what was installed;
    a different stamp (requirements, checkout path, pyproject) reinstalls.
    """
    venv = Path(venv).expanduser().resolve()
    py = venv_python(venv)
    stamp_file = venv / "tripletml-peers-stamp.json"
    want = _stamp(repo)
    if rebuild and venv.exists():
        import shutil
        log(f"removing {venv} (--rebuild-venv)")
        shutil.rmtree(venv)
    if py.exists() and stamp_file.exists():
        try:
            if json.loads(stamp_file.read_text()) == want:
                return py
        except ValueError:
            pass
        log(f"environment {venv} is out of date (requirements or checkout changed): updating it")
    if not py.exists():
        log(f"creating the benchmark environment {venv} (once; reused afterwards)")
        venv.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-m", "venv", str(venv)])
        if res.returncode != 0 or not py.exists():
            raise SystemExit(f"bench_peers: could not create a virtual environment at {venv} "
                             f"with {sys.executable} -m venv (exit code {res.returncode}).")
    log(f"installing {', '.join(REQUIREMENTS)} and tripletml (editable, from {repo}) "
        f"into {venv}; this takes a minute or two the first time")
    _pip(py, [*REQUIREMENTS, "-e", str(repo)])
    stamp_file.write_text(json.dumps(want))
    log("benchmark environment ready")
    return py


_VERSIONS_SNIPPET = r"""
import json, sys, platform
out = {"python": platform.python_version(), "executable": sys.executable}
from importlib import metadata
for dist in ("numpy", "scipy", "scikit-learn", "numba", "metric-learn", "matplotlib"):
    try:
        out[dist] = metadata.version(dist)
    except Exception:
        out[dist] = None
try:
    import tripletml
    out["tripletml"] = getattr(tripletml, "__version__", None)
    out["tripletml_file"] = tripletml.__file__
except Exception as exc:
    out["tripletml"] = f"import failed: {exc!r}"
print(json.dumps(out))
"""


def env_versions(py: str | Path, repo: Path = REPO) -> dict:
    """Versions of the relevant packages as seen by interpreter ``py``."""
    # run in the checkout: `python -c` puts the working directory first on sys.path
    res = subprocess.run([str(py), "-c", _VERSIONS_SNIPPET], capture_output=True,
                         text=True, cwd=str(repo))
    if res.returncode != 0:
        return {"error": res.stderr.strip()[-500:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def git_revision(repo: Path = REPO) -> str:
    """:func:`bench._provenance.git_revision` of the checkout."""
    return _provenance.git_revision(repo)


machine_info = _provenance.machine_info


# --------------------------------------------------------------------------------------
# the worker (runs inside the environment, one process per data set)
# --------------------------------------------------------------------------------------
def _import_checkout_tripletml(repo: Path):
    import tripletml
    where = Path(tripletml.__file__).resolve()
    if repo.resolve() not in where.parents:
        raise SystemExit(f"bench_peers worker: imported tripletml from {where}, not from the "
                         f"checkout {repo}; refusing to benchmark the wrong code.")
    return tripletml


def load_set(name: str):
    """Dense float64 X, int labels y of a shipped data set (all stored rows)."""
    import numpy as np
    from tripletml import datasets
    b = datasets.load(name)
    X = b.data.toarray() if hasattr(b.data, "toarray") else np.asarray(b.data)
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(b.target)


def split(X, y, seed: int):
    from sklearn.model_selection import train_test_split
    return train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)


def make_estimator(method: str, seed: int):
    """The method with its defaults; only ``random_state`` set (where it has one)."""
    if method in ML_METHODS:
        import metric_learn
        cls = getattr(metric_learn, ML_METHODS[method])
    else:
        import tripletml
        cls = getattr(tripletml, TML_RENAMED.get(method, method), None)
        if cls is None:
            raise LookupError(f"tripletml has no public {method!r}")
    est = cls()
    if "random_state" in est.get_params():
        est.set_params(random_state=seed)
    return est


def score_map(est, method: str, Xtr, Xte, yte) -> float:
    """Test-vs-test retrieval mAP with tripletml's evaluate_retrieval."""
    from tripletml.metrics import evaluate_retrieval
    if method in ML_METHODS:
        est, Xte = ml_as_euclidean(est, Xtr, Xte)
    return float(evaluate_retrieval(est, Xte, yte, k=())["map"])


def ml_as_euclidean(est, Xtr, Xte):
    """A fitted metric-learn transformer as ``(Euclidean fitted on
    transform(Xtr), transform(Xte))``, so that it is scored by tripletml's code."""
    import numpy as np
    from tripletml import Euclidean
    ztr, zte = est.transform(Xtr), est.transform(Xte)
    if ztr.ndim != 2 or ztr.shape[1] == 0:
        raise ValueError(f"{type(est).__name__} learned a zero metric: transform gives "
                         f"{ztr.shape[-1]} components (no ranking to score)")
    if not (np.all(np.isfinite(ztr)) and np.all(np.isfinite(zte))):
        raise ValueError(f"{type(est).__name__}.transform gave NaN or infinite values")
    return Euclidean().fit(ztr), zte


def _warmup_rows(y, n: int = WARMUP_ROWS, seed: int = 0):
    """Indices of about ``n`` training rows covering every class (at least 2 each)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    idx = []
    classes = np.unique(y)
    per = max(2, n // max(len(classes), 1))
    for c in classes:
        rows = np.flatnonzero(y == c)
        idx.extend(rng.choice(rows, size=min(per, rows.size), replace=False))
    return np.sort(np.asarray(idx))


def fit_and_score(method: str, seed: int, Xtr, ytr, Xte, yte) -> dict:
    """Fit (timed) and score one method; runs in the forked child."""
    import warnings
    warnings.simplefilter("ignore")
    if family_of(method) != ML_FAMILY:          # Numba JIT compile, untimed
        try:
            w = _warmup_rows(ytr)
            make_estimator(method, seed).fit(Xtr[w], ytr[w])
        except Exception:
            pass
    est = make_estimator(method, seed)
    message = adjust_rca(est, ytr) if method == "RCA" else ""
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    return {"map": score_map(est, method, Xtr, Xte, yte), "fit_s": fit_s, "message": message}


def adjust_rca(est, ytr) -> str:
    """RCA_Supervised's default n_chunks=100 (pairs of same-class rows) needs at
    least 200 training rows; on a smaller set metric-learn raises.  Use the
    largest possible number instead; the message for the row ("" if unchanged)."""
    import numpy as np
    size = est.get_params()["chunk_size"]
    most = int(sum(c // size for c in np.unique(ytr, return_counts=True)[1]))
    if est.get_params()["n_chunks"] > most:
        est.set_params(n_chunks=most)
        return f"n_chunks={most} (the default 100 exceeds the {most} possible)"
    return ""


def _limit_memory(gib: float) -> None:
    """Cap the child's address space (RLIMIT_AS) so that a method that builds
    n x n matrices on a large set fails with MemoryError instead of starving
    the machine."""
    if gib and gib > 0:
        try:
            import resource
            cap = int(gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        except (ImportError, ValueError, OSError):
            pass


def _child(conn, method, seed, Xtr, ytr, Xte, yte, mem_gib=0.0, fit=None):
    _limit_memory(mem_gib)
    try:
        res = {"status": "ok", **(fit or fit_and_score)(method, seed, Xtr, ytr, Xte, yte)}
        if not math.isfinite(res["map"]):
            res["status"] = "error"
            res["message"] = "non-finite mAP"
    except BaseException as exc:            # noqa: BLE001 - reported as a row
        msg = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, MemoryError) and mem_gib:
            msg += f" (address space capped at {mem_gib:g} GiB, --mem-limit)"
        res = {"status": "error", "message": msg[:300],
               "traceback": traceback.format_exc()[-2000:]}
    try:
        conn.send(res)
    finally:
        conn.close()


def run_one_with_timeout(method: str, seed: int, data: tuple, timeout: float,
                         mem_gib: float = 0.0, fit=None) -> dict:
    """Fit in a forked child; a child silent after ``timeout`` s is killed ("timeout").

    ``fit(method, seed, Xtr, ytr, Xte, yte) -> dict`` (with a finite ``"map"``)
    runs in the child; default :func:`fit_and_score`."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, method, seed, *data, mem_gib, fit),
                       daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    res = None
    try:
        if recv.poll(timeout):
            try:
                res = recv.recv()
            except EOFError:
                res = None
        else:
            res = {"status": "timeout", "fit_s": None, "map": None,
                   "message": f"no result after {timeout:g} s (child killed)"}
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
        proc.join(5)
        recv.close()
    if res is None:
        res = {"status": "error", "message": f"child died (exit code {proc.exitcode}) after "
                                             f"{time.perf_counter() - t0:.1f} s"}
    return res


def worker(set_name: str, methods: Sequence[str], seeds: Sequence[int], timeout: float,
           rows_file: Path, skip: Iterable[tuple[str, str, int]] = (),
           mem_gib: float = 0.0) -> None:
    tripletml = _import_checkout_tripletml(REPO)
    import numpy as np
    skip = {(s, m, int(sd)) for s, m, sd in skip}
    rows_file.parent.mkdir(parents=True, exist_ok=True)
    X, y = load_set(set_name)
    log(f"{set_name}: {X.shape[0]} rows, {X.shape[1]} features, {len(np.unique(y))} classes")
    for seed in seeds:
        Xtr, Xte, ytr, yte = split(X, y, seed)
        base = {"set": set_name, "seed": int(seed), "n_train": int(len(ytr)),
                "n_test": int(len(yte)), "n_features": int(X.shape[1]),
                "n_classes": int(len(np.unique(y)))}
        for method in methods:
            if (set_name, method, int(seed)) in skip:
                continue
            row = {**base, "method": method, "family": family_of(method), "map": None,
                   "fit_s": None, "message": ""}
            if method == AUTO and getattr(tripletml, AUTO, None) is None:
                row.update(status="absent", message="tripletml.AutoSimilarity does not exist "
                                                    "in this checkout")
            else:
                res = run_one_with_timeout(method, seed, (Xtr, ytr, Xte, yte), timeout,
                                           mem_gib)
                tb = res.pop("traceback", None)
                if tb:
                    print(tb, file=sys.stderr, flush=True)
                row.update(res)
            with open(rows_file, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            extra = f" {row['message']}" if row.get("message") else ""
            mp_ = "-" if row["map"] is None else f"{row['map']:.3f}"
            fs = "-" if row["fit_s"] is None else f"{row['fit_s']:.2f} s"
            log(f"{set_name} seed {seed} {method:14s} {row['status']:7s} mAP {mp_} fit {fs}"
                f"{extra}")


# --------------------------------------------------------------------------------------
# rows, aggregation, report
# --------------------------------------------------------------------------------------
def _num(v) -> Optional[float]:
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def normalize_row(r: dict) -> dict:
    out = {k: r.get(k, "") for k in CSV_FIELDS}
    out["seed"] = int(out["seed"])
    out["map"], out["fit_s"] = _num(out["map"]), _num(out["fit_s"])
    for k in ("n_train", "n_test", "n_features", "n_classes"):
        out[k] = int(out[k]) if out[k] not in ("", None) else None
    out["family"] = out["family"] or family_of(out["method"])
    out["message"] = (out["message"] or "").replace("\n", " ")
    return out


def row_key(r: dict) -> tuple[str, str, int]:
    return (r["set"], r["method"], int(r["seed"]))


def read_rows(out: Path) -> dict:
    """Rows in ``out/peers.csv`` then ``out/rows/*.jsonl`` (later rows win), by key."""
    rows: dict = {}
    csv_path = out / "peers.csv"
    if csv_path.exists():
        with open(csv_path, newline="") as fh:
            for r in csv.DictReader(fh):
                r = normalize_row(r)
                rows[row_key(r)] = r
    for jl in sorted((out / "rows").glob("*.jsonl")) if (out / "rows").exists() else []:
        for line in jl.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                r = normalize_row(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue                     # a line cut by an interrupted run
            rows[row_key(r)] = r
    return rows


def write_csv(rows: Iterable[dict], path: Path) -> None:
    order = {m: i for i, m in enumerate(all_methods())}
    sets = {s: i for i, s in enumerate(SETS)}
    rows = sorted(rows, key=lambda r: (sets.get(r["set"], 99), r["set"],
                                       order.get(r["method"], 99), r["method"], r["seed"]))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            r = dict(r)
            r["map"] = "" if r["map"] is None else f"{r['map']:.6f}"
            r["fit_s"] = "" if r["fit_s"] is None else f"{r['fit_s']:.4f}"
            w.writerow(r)


def _mean_sd(v: list[float]) -> tuple[float, float]:
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd


def summarize(rows: Iterable[dict]) -> dict:
    """``{set: {method: stats}}``; stats over the rows with status ok.

    stats: family, map, map_sd, fit_s, n_ok, n (rows), statuses (set of non-ok)."""
    out: dict = {}
    for r in rows:
        s = out.setdefault(r["set"], {}).setdefault(
            r["method"], {"family": r["family"], "maps": [], "fits": [], "n": 0, "bad": []})
        s["n"] += 1
        if r["status"] == "ok" and r["map"] is not None:
            s["maps"].append(r["map"])
            s["fits"].append(r["fit_s"] if r["fit_s"] is not None else float("nan"))
        else:
            s["bad"].append(r["status"])
    for methods in out.values():
        for s in methods.values():
            s["n_ok"] = len(s["maps"])
            if s["maps"]:
                s["map"], s["map_sd"] = _mean_sd(s["maps"])
                s["fit_s"] = sum(s["fits"]) / len(s["fits"])
            else:
                s["map"] = s["map_sd"] = s["fit_s"] = None
    return out


def _best(methods: dict, family: str, exclude: Sequence[str] = ()) -> Optional[str]:
    cands = [(s["map"], -s["fit_s"], m) for m, s in methods.items()
             if s["family"] == family and s["map"] is not None and m not in exclude]
    return max(cands)[2] if cands else None


def goals(summary: dict, bilinear: Sequence[str] = ()) -> dict:
    """The issue's goals per set: each a dict with ``ok`` (True/False/None) and ``text``."""
    res = {}
    for set_name, methods in summary.items():
        g = {}
        mlb = _best(methods, ML_FAMILY)
        tb = _best(methods, TML_FAMILY)
        auto = methods.get(AUTO)
        auto_ok = auto is not None and auto["map"] is not None
        eu = methods.get("Euclidean")
        dp = methods.get("DotProduct")
        g["ml_best"], g["tml_best"] = mlb, tb
        if mlb is None:
            for k in ("auto_map", "auto_time", "fifth"):
                g[k] = {"ok": None, "text": "no metric-learn result"}
        else:
            ml = methods[mlb]
            if auto_ok:
                g["auto_map"] = {"ok": auto["map"] >= ml["map"],
                                 "text": f"auto {auto['map']:.3f} vs {mlb} {ml['map']:.3f}"}
                g["auto_time"] = {"ok": auto["fit_s"] <= ml["fit_s"],
                                  "text": f"auto {_fmt_s(auto['fit_s'])} vs {mlb} "
                                          f"{_fmt_s(ml['fit_s'])}"}
            else:
                g["auto_map"] = g["auto_time"] = {"ok": None, "text": "no AutoSimilarity result"}
            reach = [(s["fit_s"], m) for m, s in methods.items()
                     if s["family"] == TML_FAMILY and s["map"] is not None
                     and s["map"] >= ml["map"]]
            limit = ml["fit_s"] / 5
            if reach:
                t, m = min(reach)
                g["fifth"] = {"ok": t <= limit,
                              "text": f"{m} {methods[m]['map']:.3f} in {_fmt_s(t)}; limit "
                                      f"{_fmt_s(limit)} ({mlb} {ml['map']:.3f} in "
                                      f"{_fmt_s(ml['fit_s'])})"}
            else:
                tbt = (f"best {tb} {methods[tb]['map']:.3f} ({_fmt_s(methods[tb]['fit_s'])})"
                       if tb else "no tripletml result")
                g["fifth"] = {"ok": False, "text": f"none reaches {mlb} {ml['map']:.3f}; {tbt}"}
        if eu is None or eu["map"] is None:
            g["below_eucl"] = {"ok": None, "text": "no Euclidean result"}
        else:
            below = sorted((s["map"], m) for m, s in methods.items()
                           if s["family"] in (TML_FAMILY, AUTO_FAMILY) and m not in BASELINES
                           and s["map"] is not None and s["map"] < eu["map"])
            # also failed default learners count as "below"
            failed = sorted(m for m, s in methods.items()
                            if s["family"] == TML_FAMILY and m not in BASELINES
                            and s["map"] is None)
            items = [f"{m} {v:.3f}" for v, m in below] + [f"{m} (no result)" for m in failed]
            g["below_eucl"] = {"ok": bool(items),
                               "text": (f"Euclidean {eu['map']:.3f}; below: " + ", ".join(items))
                               if items else f"none (Euclidean {eu['map']:.3f})"}
        if dp is None or dp["map"] is None or not bilinear:
            g["below_dot"] = {"ok": None, "text": "no DotProduct result"}
        else:
            below = sorted((s["map"], m) for m, s in methods.items()
                           if m in bilinear and m != "DotProduct" and s["map"] is not None
                           and s["map"] < dp["map"])
            items = [f"{m} {v:.3f}" for v, m in below]
            g["below_dot"] = {"ok": bool(items),
                              "text": (f"DotProduct {dp['map']:.3f}; below: " + ", ".join(items))
                              if items else f"none (DotProduct {dp['map']:.3f})"}
        res[set_name] = g
    return res


def _fmt_s(t: Optional[float]) -> str:
    """Seconds, readable from microseconds to minutes."""
    if t is None or not math.isfinite(t):
        return "-"
    if t < 1e-3:
        return "<1 ms"
    if t < 1:
        return f"{t * 1000:.3g} ms"
    return f"{t:.3g} s"


def _fmt_stats(s: Optional[dict]) -> str:
    if s is None:
        return "-"
    if s["map"] is None:
        return "/".join(sorted(set(s["bad"]))) or "-"
    if s["n_ok"] == 1:
        txt = f"{s['map']:.3f} (1 seed; {_fmt_s(s['fit_s'])})"
    else:
        txt = f"{s['map']:.3f} ± {s['map_sd']:.3f} ({_fmt_s(s['fit_s'])})"
    if s["n_ok"] < s["n"]:
        txt += f" [{s['n_ok']}/{s['n']} ok: {', '.join(sorted(set(s['bad'])))}]"
    return txt


def _yn(ok: Optional[bool], good_when: bool = True) -> str:
    if ok is None:
        return "n/a"
    return "**yes**" if ok == good_when else "no"


def _ordered_sets(summary: dict) -> list[str]:
    return [s for s in SETS if s in summary] + sorted(s for s in summary if s not in SETS)


def write_markdown(summary: dict, gl: dict, prov: dict, path: Path, png_name: str) -> None:
    L = ["# Peer benchmark: tripletml vs metric-learn " + METRIC_LEARN_VERSION, "",
         "Protocol: stratified 70/30 split per seed, every method fitted with its defaults "
         "(only `random_state` set), test-vs-test retrieval mAP from "
         "`tripletml.metrics.evaluate_retrieval` (metric-learn: Euclidean on `transform`), "
         "fit seconds exclude scoring (and Numba's JIT compile). Entries: mean ± sd mAP over "
         "the seeds, (mean fit seconds). See `bench/bench_peers.py`. Timings are from one "
         "run on a shared machine: compare ratios within this run.", "",
         f"![mAP against fit time]({png_name})", "", "## Per data set", "",
         "| set | n / d / classes | Euclidean | best metric-learn | best tripletml | "
         "AutoSimilarity |", "|---|---|---|---|---|---|"]
    for s in _ordered_sets(summary):
        m = summary[s]
        g = gl[s]
        any_row = next(iter(m.values()))
        shape = prov.get("shapes", {}).get(s, "")
        mlb, tb = g["ml_best"], g["tml_best"]
        L.append(f"| {s} | {shape} | {_fmt_stats(m.get('Euclidean'))} | "
                 f"{(mlb + ' ' + _fmt_stats(m[mlb])) if mlb else '-'} | "
                 f"{(tb + ' ' + _fmt_stats(m[tb])) if tb else '-'} | "
                 f"{_fmt_stats(m.get(AUTO)) if AUTO in m else '-'} |")
        del any_row
    L += ["", "## Goals of issue #14 (yes = goal met)", "",
          "| set | auto mAP ≥ metric-learn best | auto fit time ≤ that method's | "
          "a tripletml learner reaches it in ≤ 1/5 of its time | no default learner below "
          "Euclidean | no bilinear learner below DotProduct |", "|---|---|---|---|---|---|"]
    for s in _ordered_sets(summary):
        g = gl[s]
        L.append(f"| {s} | {_yn(g['auto_map']['ok'])}: {g['auto_map']['text']} | "
                 f"{_yn(g['auto_time']['ok'])}: {g['auto_time']['text']} | "
                 f"{_yn(g['fifth']['ok'])}: {g['fifth']['text']} | "
                 f"{_yn(g['below_eucl']['ok'], False)}: {g['below_eucl']['text']} | "
                 f"{_yn(g['below_dot']['ok'], False)}: {g['below_dot']['text']} |")
    methods = [m for m in all_methods() if any(m in summary[s] for s in summary)]
    L += ["", "## All methods", "", "mean ± sd mAP (mean fit seconds); `timeout` / `error` / "
          "`absent` where no seed finished.", "",
          "| method | family | " + " | ".join(_ordered_sets(summary)) + " |",
          "|---|---|" + "---|" * len(summary)]
    for meth in methods:
        L.append(f"| {meth} | {family_of(meth)} | " + " | ".join(
            _fmt_stats(summary[s].get(meth)) for s in _ordered_sets(summary)) + " |")
    notes = prov.get("notes") or []
    if notes:
        L += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    L += ["", "## PROVENANCE", "", "```", json.dumps(
        {k: v for k, v in prov.items() if k not in ("notes", "shapes")}, indent=2), "```", ""]
    path.write_text("\n".join(L))


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sets = _ordered_sets(summary)
    n = len(sets)
    ncols = min(n, 4) if n != 4 else 2
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.2 * nrows), squeeze=False)
    style = {ML_FAMILY: dict(marker="s", color="tab:orange"),
             TML_FAMILY: dict(marker="o", color="tab:blue"),
             AUTO_FAMILY: dict(marker="*", color="tab:red", markersize=14)}
    floor = 1e-4
    for ax, s in zip(axes.flat, sets):
        methods = summary[s]
        for m, st in methods.items():
            if st["map"] is None:
                continue
            x = max(st["fit_s"], floor)
            kw = dict(style[st["family"]])
            kw.setdefault("markersize", 7)
            ax.errorbar([x], [st["map"]], yerr=[st["map_sd"]], linestyle="none", capsize=2,
                        alpha=0.85, **kw)
            ax.annotate(m, (x, st["map"]), textcoords="offset points", xytext=(4, 3),
                        fontsize=7, color=kw["color"])
        eu = methods.get("Euclidean")
        if eu and eu["map"] is not None:
            ax.axhline(eu["map"], color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.margins(x=0.12, y=0.08)
        ax.set_title(s, fontsize=11)
        ax.set_xlabel("mean fit time (s, log scale)")
        ax.set_ylabel("test mAP")
        ax.grid(True, which="major", alpha=0.3)
        failed = [m for m, st in methods.items() if st["map"] is None]
        if failed:
            ax.text(0.01, 0.01, "no result: " + ", ".join(failed), transform=ax.transAxes,
                    fontsize=7, color="dimgray", va="bottom")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], linestyle="none", label=lab, **{**style[f], "markersize": 9})
               for f, lab in ((ML_FAMILY, f"metric-learn {METRIC_LEARN_VERSION}"),
                              (TML_FAMILY, "tripletml"), (AUTO_FAMILY, "AutoSimilarity"))]
    handles.append(Line2D([], [], color="gray", linestyle="--", label="Euclidean mAP"))
    fig.legend(handles=handles, loc="upper center", ncol=4, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle("Test mAP against fit time (defaults, mean ± sd over seeds; fit times "
                 f"below {floor:g} s drawn at {floor:g} s)", y=1.03, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def report(out: Path, prov: dict) -> dict:
    """Write peers.csv / peers.md / peers.png from the rows in ``out``."""
    rows = read_rows(out)
    if not rows:
        raise SystemExit(f"bench_peers: no rows in {out}")
    write_csv(rows.values(), out / "peers.csv")
    summary = summarize(rows.values())
    shapes = {}
    for r in rows.values():
        if r["n_train"] is not None:
            shapes[r["set"]] = (f"{r['n_train'] + r['n_test']} / {r['n_features']} / "
                                f"{r['n_classes']}")
    prov = {**prov, "shapes": shapes}
    if any(r["method"] == AUTO and r["status"] == "absent" for r in rows.values()):
        prov.setdefault("notes", []).append(
            "AutoSimilarity was absent from tripletml in this run: its rows are `absent` and "
            "its goals are n/a.")
    bilinear = prov.get("bilinear", [])
    gl = goals(summary, bilinear)
    write_markdown(summary, gl, prov, out / "peers.md", "peers.png")
    plot(summary, out / "peers.png")
    # the rows now live in peers.csv
    if (out / "rows").exists():
        for jl in (out / "rows").glob("*.jsonl"):
            jl.unlink()
        try:
            (out / "rows").rmdir()
        except OSError:
            pass
    return summary


def _bilinear_methods() -> list[str]:
    try:
        import tripletml
        classes = {m: getattr(tripletml, TML_RENAMED.get(m, m), None) for m in TML_METHODS}
        return [m for m, c in classes.items() if isinstance(c, type)
                and issubclass(c, tripletml.BilinearMixin)]
    except Exception:
        return []


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------
def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated data sets")
    ap.add_argument("--methods", default="all",
                    help="comma-separated methods (short metric-learn names "
                         f"{', '.join(ML_METHODS)}; tripletml class names, with "
                         "tripletml's ITML as 'ITML (tripletml)' (quote it in a shell); "
                         f"{AUTO}) or 'all'")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated split seeds")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per fit (default 300)")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS/OpenMP/Numba threads in the workers (default 1)")
    ap.add_argument("--mem-limit", type=float, default=8.0,
                    help="address-space cap per fit in GiB (default 8; 0: none)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--rebuild-venv", action="store_true")
    ap.add_argument("--resume", action="store_true",
                    help="keep rows already in OUT and run only the missing ones")
    ap.add_argument("--report-only", action="store_true",
                    help="only rebuild peers.md / peers.png from OUT/peers.csv")
    ap.add_argument("--worker", metavar="SET", help=argparse.SUPPRESS)
    ap.add_argument("--rows-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--skip-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sets = _csv_list(args.sets)
    unknown = [s for s in args.sets if s not in SETS]
    if unknown:
        ap.error(f"unknown data set(s) {unknown}; known: {', '.join(SETS)}")
    args.methods = all_methods() if args.methods == "all" else _csv_list(args.methods)
    unknown = [m for m in args.methods if m not in all_methods()]
    if unknown:
        ap.error(f"unknown method(s) {unknown}; known: {', '.join(all_methods())}")
    try:
        args.seeds = [int(s) for s in _csv_list(args.seeds)]
    except ValueError:
        ap.error("--seeds takes comma-separated integers")
    if args.timeout <= 0:
        ap.error("--timeout must be > 0")
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    if args.worker:
        skip = []
        if args.skip_file and args.skip_file.exists():
            skip = [tuple(k) for k in json.loads(args.skip_file.read_text())]
        worker(args.worker, args.methods, args.seeds, args.timeout, args.rows_file, skip,
               args.mem_limit)
        return 0

    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(__file__, Path.cwd()),
                                    *(sys.argv[1:] if argv is None else argv)])
    prov_file = out / "provenance.json"
    if args.report_only:
        prov = json.loads(prov_file.read_text()) if prov_file.exists() else {}
        report(out, prov)
        log(f"report rebuilt in {out}")
        return 0

    out.mkdir(parents=True, exist_ok=True)
    py = ensure_venv(args.venv, REPO, args.rebuild_venv)
    venv_v = env_versions(py)
    tf = venv_v.get("tripletml_file") or ""
    if not tf or REPO.resolve() not in Path(tf).resolve().parents:
        raise SystemExit(f"bench_peers: the environment's tripletml is {tf or venv_v}, not this "
                         f"checkout ({REPO}); run with --rebuild-venv.")
    log(f"environment: python {venv_v['python']}, metric-learn {venv_v['metric-learn']}, "
        f"scikit-learn {venv_v['scikit-learn']}, numpy {venv_v['numpy']}, tripletml from {tf}")

    existing = read_rows(out)
    grid = {(s, m, sd) for s in args.sets for m in args.methods for sd in args.seeds}
    if args.resume:
        done = [k for k, r in existing.items() if k in grid and r["status"] != "error"]
    else:
        done = []
        kept = {k: r for k, r in existing.items() if k not in grid}
        rows_dir = out / "rows"
        if rows_dir.exists():
            for jl in rows_dir.glob("*.jsonl"):
                jl.unlink()
        if existing:
            write_csv(kept.values(), out / "peers.csv")
    log(f"{len(grid) - len(done)} fits to run ({len(done)} already done) on "
        f"{len(args.sets)} set(s), {len(args.methods)} method(s), seeds {args.seeds}; "
        f"timeout {args.timeout:g} s per fit")

    env = dict(os.environ)
    for v in THREAD_VARS:
        env[v] = str(args.threads)
    env.pop("PYTHONPATH", None)            # `-m` in cwd=REPO puts the checkout first
    t_start = time.perf_counter()
    rows_dir = out / "rows"
    rows_dir.mkdir(exist_ok=True)
    failures = []
    for s in args.sets:
        todo = [k for k in grid if k[0] == s and k not in set(done)]
        if not todo:
            log(f"{s}: nothing to do")
            continue
        skip_file = rows_dir / f"{s}.skip.json"
        skip_file.write_text(json.dumps([list(k) for k in done if k[0] == s]))
        cmd = [str(py), "-m", "bench.bench_peers", "--worker", s,
               "--methods", ",".join(args.methods), "--seeds", ",".join(map(str, args.seeds)),
               "--timeout", str(args.timeout), "--mem-limit", str(args.mem_limit),
               "--rows-file", str(rows_dir / f"{s}.jsonl"),
               "--skip-file", str(skip_file), "--sets", s]
        log(f"{s}: starting worker ({len(todo)} fits)")
        res = subprocess.run(cmd, env=env, cwd=str(REPO))
        skip_file.unlink(missing_ok=True)
        if res.returncode != 0:
            failures.append(s)
            log(f"{s}: worker exited with code {res.returncode}; its finished rows are kept")
    elapsed = time.perf_counter() - t_start

    prev = json.loads(prov_file.read_text()) if prov_file.exists() else {}
    runs = prev.get("runs", [])
    runs.append({"command": command, "date": _dt.datetime.now(_dt.timezone.utc)
                 .strftime("%Y-%m-%d %H:%M:%S UTC"), "sets": args.sets, "seeds": args.seeds,
                 "methods": args.methods, "timeout_s": args.timeout, "threads": args.threads,
                 "mem_limit_gib": args.mem_limit,
                 "resume": args.resume, "wall_s": round(elapsed, 1),
                 "git": git_revision(REPO)})
    prov = {"runs": runs, "machine": machine_info(),
            "benchmark_env": venv_v,
            "report_env": env_versions(sys.executable),
            "bilinear": _bilinear_methods(),
            "protocol": "train_test_split(test_size=0.3, stratify=y, random_state=seed); "
                        "defaults; test-vs-test evaluate_retrieval mAP; per-fit child "
                        "process (fork) with timeout"}
    prov_file.write_text(json.dumps(prov, indent=2))
    report(out, prov)
    log(f"done in {elapsed:.0f} s; wrote {out / 'peers.csv'}, peers.md, peers.png")
    if failures:
        log(f"workers failed for: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
