"""Machinery shared by the metric-learn head-to-head benchmarks of issue 29
(``bench.bench_pairs``, ``bench.bench_classic``), built on ``bench.bench_peers``.

What comes from bench_peers unchanged: the environment (``ensure_venv``,
``env_versions``), data loading (``load_set``), the per-fit child process
with timeout and memory cap (``run_one_with_timeout``), thread pinning
(``THREAD_VARS``), provenance (``git_revision``, ``machine_info``).  What is
here: the parent's loop (one worker process per data set inside the peers
environment, rows appended to ``OUT/rows/SET.jsonl``, ``--resume``), rows
I/O with a benchmark's own CSV columns, and small formatting helpers.

The environment is reused as it is when it already holds metric-learn
0.7.0 (its stamp may name another checkout: the workers run
``python -m bench.<module>`` with this checkout as working directory, so
this checkout's tripletml is imported first, and every worker checks that);
``ensure_venv`` (install / update) runs only when it does not, or with
``--rebuild-venv``.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

try:
    from . import bench_peers as bp
except ImportError:          # loaded as a file: beside it
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location("bench_peers",
                                         Path(__file__).with_name("bench_peers.py"))
    bp = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(bp)

REPO = bp.REPO
ML_FAMILY, TML_FAMILY = "metric-learn", "tripletml"
ML_SUFFIX = " (metric-learn)"


def ml_row(cls_name: str) -> str:
    """Row name of a metric-learn class (``"ITML"`` -> ``"ITML (metric-learn)"``)."""
    return cls_name + ML_SUFFIX


def family_of(method: str) -> str:
    return ML_FAMILY if method.endswith(ML_SUFFIX) else TML_FAMILY


def logger(prefix: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"[{prefix} {time.strftime('%H:%M:%S')}] {msg}", flush=True)
    return log


# --------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------
_PROBE = ("import metric_learn, sklearn, sys; "
          "sys.exit(0 if metric_learn.__version__ == '%s' else 3)" % bp.METRIC_LEARN_VERSION)


def venv_ready(venv: Path, rebuild: bool = False) -> Path:
    """The peers environment's python; reused when it imports metric-learn
    0.7.0, otherwise (or with ``rebuild``) created / updated by
    :func:`bench_peers.ensure_venv`."""
    venv = Path(venv).expanduser().resolve()
    py = bp.venv_python(venv)
    if not rebuild and py.exists():
        res = subprocess.run([str(py), "-c", _PROBE], capture_output=True, cwd=str(REPO))
        if res.returncode == 0:
            return py
    return bp.ensure_venv(venv, REPO, rebuild)


def check_env(py: Path, log) -> dict:
    v = bp.env_versions(py)
    tf = v.get("tripletml_file") or ""
    if not tf or REPO.resolve() not in Path(tf).resolve().parents:
        raise SystemExit(f"the environment's tripletml is {tf or v}, not this checkout "
                         f"({REPO}); run with --rebuild-venv.")
    log(f"environment: python {v['python']}, metric-learn {v['metric-learn']}, scikit-learn "
        f"{v['scikit-learn']}, numpy {v['numpy']}, tripletml from {tf}")
    return v


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------
#: a CSV cell as a finite float or None (bench_peers' rule, once)
num = bp._num


def normalize(r: dict, fields: Sequence[str], floats: Sequence[str],
              ints: Sequence[str]) -> dict:
    out = {k: r.get(k, "") for k in fields}
    out["seed"] = int(out["seed"])
    for k in floats:
        out[k] = num(out[k])
    for k in ints:
        out[k] = int(out[k]) if out[k] not in ("", None) else None
    out["family"] = out["family"] or family_of(out["method"])
    out["message"] = (out.get("message") or "").replace("\n", " ")
    return out


def row_key(r: dict) -> tuple[str, str, int]:
    return (r["set"], r["method"], int(r["seed"]))


def read_rows(out: Path, csv_name: str, norm: Callable[[dict], dict]) -> dict:
    """Rows of ``out/csv_name`` then ``out/rows/*.jsonl`` (later rows win), by key."""
    rows: dict = {}
    path = out / csv_name
    if path.exists():
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                r = norm(r)
                rows[row_key(r)] = r
    rows_dir = out / "rows"
    for jl in sorted(rows_dir.glob("*.jsonl")) if rows_dir.exists() else []:
        for line in jl.read_text().splitlines():
            if not line.strip():
                continue
            try:
                r = norm(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue                     # a line cut by an interrupted run
            rows[row_key(r)] = r
    return rows


def write_csv(rows: Iterable[dict], path: Path, fields: Sequence[str], methods: Sequence[str],
              sets: Sequence[str], digits: dict) -> None:
    order = {m: i for i, m in enumerate(methods)}
    so = {s: i for i, s in enumerate(sets)}
    rows = sorted(rows, key=lambda r: (so.get(r["set"], 99), r["set"], order.get(r["method"], 99),
                                       r["method"], r["seed"]))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r = dict(r)
            for k, nd in digits.items():
                r[k] = "" if r.get(k) is None else f"{r[k]:.{nd}f}"
            w.writerow(r)


def append_row(rows_file: Path, row: dict) -> None:
    with open(rows_file, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def mean_sd(v: Sequence[float]) -> tuple[float, float]:
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd


def summarize(rows: Iterable[dict], metrics: Sequence[str]) -> dict:
    """``{set: {method: stats}}`` over the rows with status ok.

    stats: ``family``, ``n`` (rows), ``n_ok``, ``bad`` (sorted non-ok statuses),
    ``messages`` (distinct non-ok messages), and for each metric ``m``: ``m``
    (mean, None without an ok row) and ``m_sd``; ``fit_s`` (mean)."""
    out: dict = {}
    for r in rows:
        s = out.setdefault(r["set"], {}).setdefault(
            r["method"], {"family": r["family"], "vals": {m: [] for m in (*metrics, "fit_s")},
                          "n": 0, "bad": [], "messages": []})
        s["n"] += 1
        if r["status"] == "ok" and r.get(metrics[0]) is not None:
            for m in (*metrics, "fit_s"):
                s["vals"][m].append(r[m] if r.get(m) is not None else float("nan"))
        else:
            s["bad"].append(r["status"])
            if r.get("message") and r["message"] not in s["messages"]:
                s["messages"].append(r["message"])
    for methods in out.values():
        for s in methods.values():
            s["n_ok"] = len(s["vals"][metrics[0]])
            for m in (*metrics, "fit_s"):
                v = s["vals"][m]
                if v:
                    s[m], s[m + "_sd"] = mean_sd(v)
                else:
                    s[m] = s[m + "_sd"] = None
            s["bad"] = sorted(set(s["bad"]))
    return out


fmt_s = bp._fmt_s


def fmt_stat(s: Optional[dict], metric: str, with_time: bool = True) -> str:
    if s is None:
        return "-"
    if s[metric] is None:
        return "/".join(s["bad"]) or "-"
    txt = f"{s[metric]:.3f}" + (f" ± {s[metric + '_sd']:.3f}" if s["n_ok"] > 1 else "")
    if with_time:
        txt += f" ({fmt_s(s['fit_s'])})"
    if s["n_ok"] < s["n"]:
        txt += f" [{s['n_ok']}/{s['n']} ok: {', '.join(s['bad'])}]"
    return txt


def ordered_sets(summary: dict, sets: Sequence[str]) -> list[str]:
    return [s for s in sets if s in summary] + sorted(s for s in summary if s not in sets)


# --------------------------------------------------------------------------------------
# the parent: arguments, workers, provenance
# --------------------------------------------------------------------------------------
def common_args(ap: argparse.ArgumentParser, sets: Sequence[str], default_out: Path,
                timeout: float) -> None:
    ap.add_argument("--sets", default=",".join(sets), help="comma-separated data sets "
                    f"(default: {','.join(sets)})")
    ap.add_argument("--methods", default="all", help="comma-separated row names or 'all'")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated split seeds")
    ap.add_argument("--large-seeds", default="0",
                    help="seeds for sets of more than --large rows (default 0)")
    ap.add_argument("--large", type=int, default=5000,
                    help="a set with more rows is 'large' (default 5000)")
    ap.add_argument("--timeout", type=float, default=timeout,
                    help=f"seconds per fit, incl. scoring (default {timeout:g})")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS/OpenMP/Numba threads in the workers (default 1)")
    ap.add_argument("--mem-limit", type=float, default=8.0,
                    help="address-space cap per fit in GiB (default 8; 0: none)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="data-set workers run at once (default 1; >1 shares the cores and "
                         "slows every fit)")
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--venv", type=Path, default=bp.DEFAULT_VENV)
    ap.add_argument("--rebuild-venv", action="store_true")
    ap.add_argument("--resume", action="store_true",
                    help="keep rows already in OUT and run only the missing ones (and errors)")
    ap.add_argument("--report-only", action="store_true",
                    help="only rebuild the report from OUT's CSV")
    ap.add_argument("--worker", metavar="SET", help=argparse.SUPPRESS)
    ap.add_argument("--rows-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--skip-file", type=Path, help=argparse.SUPPRESS)


def check_common(ap, args, sets: Sequence[str], methods: Sequence[str]) -> None:
    cl = bp._csv_list
    args.sets = cl(args.sets)
    unknown = [s for s in args.sets if s not in sets]
    if unknown:
        ap.error(f"unknown data set(s) {unknown}; known: {', '.join(sets)}")
    args.methods = list(methods) if args.methods == "all" else cl(args.methods)
    unknown = [m for m in args.methods if m not in methods]
    if unknown:
        ap.error(f"unknown method(s) {unknown}; known: {', '.join(methods)}")
    try:
        args.seeds = [int(s) for s in cl(args.seeds)]
        args.large_seeds = [int(s) for s in cl(args.large_seeds)]
    except ValueError:
        ap.error("--seeds / --large-seeds take comma-separated integers")
    if args.timeout <= 0:
        ap.error("--timeout must be > 0")
    if args.threads < 1 or args.jobs < 1:
        ap.error("--threads and --jobs must be >= 1")


def set_sizes(names: Sequence[str]) -> dict:
    """Rows per data set (loads each once, in this process)."""
    out = {}
    for s in names:
        try:
            out[s] = int(bp.load_set(s)[0].shape[0])
        except Exception:                 # noqa: BLE001 - the worker reports it
            out[s] = 0
    return out


def seeds_for(n_rows: int, args) -> list[int]:
    return list(args.large_seeds) if n_rows > args.large else list(args.seeds)


def run_parent(args, *, module: str, csv_name: str, read: Callable[[Path], dict],
               write: Callable[[Iterable[dict], Path], None], report: Callable[[Path, dict], None],
               protocol: str, log, argv=None, extra_worker_args: Sequence[str] = ()) -> int:
    """Create / reuse the environment, run one worker per set, write provenance
    and the report.  Returns the exit code."""
    out = args.out.resolve()
    prov_file = out / "provenance.json"
    command = "python -m " + module + " " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    if args.report_only:
        prov = json.loads(prov_file.read_text()) if prov_file.exists() else {}
        report(out, prov)
        log(f"report rebuilt in {out}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    py = venv_ready(args.venv, args.rebuild_venv)
    venv_v = check_env(py, log)
    sizes = set_sizes(args.sets)
    existing = read(out)
    grid = {(s, m, sd) for s in args.sets for m in args.methods
            for sd in seeds_for(sizes[s], args)}
    rows_dir = out / "rows"
    if args.resume:
        done = {k for k, r in existing.items() if k in grid and r["status"] != "error"}
    else:
        done = set()
        if rows_dir.exists():
            for jl in rows_dir.glob("*.jsonl"):
                jl.unlink()
        if existing:
            write([r for k, r in existing.items() if k not in grid], out / csv_name)
    log(f"{len(grid) - len(done)} fits to run ({len(done)} already done) on {len(args.sets)} "
        f"set(s), {len(args.methods)} method(s); timeout {args.timeout:g} s per fit; "
        f"{args.jobs} worker(s) at once")
    env = dict(os.environ)
    for v in bp.THREAD_VARS:
        env[v] = str(args.threads)
    env.pop("PYTHONPATH", None)            # `-m` in cwd=REPO puts the checkout first
    rows_dir.mkdir(exist_ok=True)
    t0 = time.perf_counter()

    def one(s: str) -> Optional[str]:
        todo = [k for k in grid if k[0] == s and k not in done]
        if not todo:
            log(f"{s}: nothing to do")
            return None
        skip_file = rows_dir / f"{s}.skip.json"
        skip_file.write_text(json.dumps([list(k) for k in done if k[0] == s]))
        seeds = seeds_for(sizes[s], args)
        cmd = [str(py), "-m", module, "--worker", s, "--sets", s,
               "--methods", ",".join(args.methods), "--seeds", ",".join(map(str, seeds)),
               "--timeout", str(args.timeout), "--mem-limit", str(args.mem_limit),
               "--rows-file", str(rows_dir / f"{s}.jsonl"), "--skip-file", str(skip_file),
               *extra_worker_args]
        log(f"{s}: starting worker ({len(todo)} fits, seeds {seeds})")
        res = subprocess.run(cmd, env=env, cwd=str(REPO))
        skip_file.unlink(missing_ok=True)
        if res.returncode != 0:
            log(f"{s}: worker exited with code {res.returncode}; its finished rows are kept")
            return s
        return None

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        failures = [f for f in pool.map(one, args.sets) if f]
    elapsed = time.perf_counter() - t0
    prev = json.loads(prov_file.read_text()) if prov_file.exists() else {}
    runs = prev.get("runs", [])
    runs.append({"command": command, "date": _dt.datetime.now(_dt.timezone.utc)
                 .strftime("%Y-%m-%d %H:%M:%S UTC"), "sets": args.sets, "seeds": args.seeds,
                 "large_seeds": args.large_seeds, "methods": args.methods,
                 "timeout_s": args.timeout, "threads": args.threads, "jobs": args.jobs,
                 "mem_limit_gib": args.mem_limit, "resume": args.resume,
                 "wall_s": round(elapsed, 1), "git": bp.git_revision(REPO),
                 "load_average": _loadavg()})
    prov = {"runs": runs, "machine": bp.machine_info(), "benchmark_env": venv_v,
            "report_env": bp.env_versions(sys.executable), "protocol": protocol}
    prov_file.write_text(json.dumps(prov, indent=2))
    report(out, prov)
    log(f"done in {elapsed:.0f} s; wrote {out}")
    if failures:
        log(f"workers failed for: {', '.join(failures)}")
        return 1
    return 0


#: a fit faster than this is repeated (on clones) and its median time reported
REPEAT_BELOW_S = 0.2
REPEATS = 5


def timed_fit(est, fit: Callable) -> float:
    """Seconds of ``fit(est)``; a fit under ``REPEAT_BELOW_S`` is repeated on
    fresh clones (``REPEATS`` runs in all, ``est`` itself fitted first) and
    the median run reported, so that millisecond fits are not one noisy
    sample.  Same rule for both libraries."""
    from sklearn.base import clone
    t0 = time.perf_counter()
    fit(est)
    times = [time.perf_counter() - t0]
    if times[0] < REPEAT_BELOW_S:
        for _ in range(REPEATS - 1):
            c = clone(est)
            t0 = time.perf_counter()
            fit(c)
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _loadavg() -> Optional[list]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def finish_rows(out: Path) -> None:
    """Remove ``out/rows`` once its rows live in the CSV."""
    rows_dir = out / "rows"
    if rows_dir.exists():
        for jl in rows_dir.glob("*.jsonl"):
            jl.unlink()
        try:
            rows_dir.rmdir()
        except OSError:
            pass


def provenance_block(prov: dict) -> list[str]:
    return ["## Provenance", "", "```", json.dumps(
        {k: v for k, v in prov.items() if k not in ("notes", "shapes")}, indent=2), "```", ""]


def short_error(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return msg.replace("\n", " ")[:300]
