"""Training on a cluster: speed-up, statistical efficiency, beyond one machine's
memory, and a communication cost model (issue 28, "Measure").

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_distributed SECTION [options]

SECTION is ``speedup``, ``efficiency``, ``bigdata``, ``costmodel`` or ``all``.
Each section prints its table and the ratios measured in this run and writes
``<out>/<section>.md`` (a markdown table, the exact command, provenance: git
commit, date, ``nproc``, platform) and ``<out>/<section>.json`` (the raw rows);
``--plot`` adds ``efficiency.png`` (test mAP against K) and ``speedup.png``.
``--quick`` runs every section tiny (the smoke test); ``--local`` skips the
LocalClusters (in-process fits only).

Public API only: ``learner.fit(ShardedCollection)``,
``tripletml.distributed.dask_search.use_cluster``, ``learner.partitioned_``, ``history_``,
``tripletml.distributed.streaming.fit_stream``; the script measures whatever partitioned
strategy each learner has when it runs (``partitioned_["strategy"]`` is
printed with every row).

speedup
    1 against 2 worker processes (LocalCluster, one thread each, BLAS one
    thread) on a Gaussian class mixture generated *inside the workers*
    (``ShardedCollection.from_delayed`` of seeded ``dask.delayed`` generator
    calls, persisted on the workers before the timed fits; the generation
    time is reported apart).  SDCA, OASIS and LORETA on ``--triplets``
    triplets in total, KISSME on ``--kissme-rows`` rows; the same partitions
    (``--partitions``) on 1 and 2 workers, so the model must be the same
    (max abs difference of similarities printed).  Side by side: the
    in-process fit of the same collection (local backend), ``fit_stream``
    (sequential ``partial_fit``, same learner and triplet total) and dask-ml's
    ``Incremental`` (skipped with the reason when dask-ml is not importable;
    it feeds ``partial_fit(X, y)`` with labels, which the triplet learners'
    ``partial_fit(X, triplets)`` does not take).
efficiency
    K = 1, 2, 4, ..., 64 partitions simulated in one process
    (``ShardedCollection.from_arrays`` on the shuffled training rows, local
    backend), same parameters (hence equal passes over the data) for every K,
    against the in-memory ``fit`` (reference row): rounds, SDCA's final
    duality gap (``history_["gap"]``), test mAP (stratified 70/30 split of
    ``bench/_protocol.py``, test-vs-test retrieval mAP).  Goal: test mAP
    within .01 of the in-memory fit for every K <= 16 (pass/miss per learner
    and set).
bigdata
    ``--big-rows`` rows x ``--big-d`` float32 features (default 100 million x
    64 = 25.6 GB) generated inside the workers, never persisted (every pass
    regenerates its partitions), fitted by KISSME and by SDCA on
    ``--big-triplets`` triplets.  Reports the passes over the data (generator
    calls per partition, counted in the workers), peak RSS per worker
    (``ru_maxrss`` via ``client.run``) and of the driver, rows/s and
    triplets/s per worker.
costmodel
    On paper: bytes shipped per round per partition and in total for each
    strategy against d and K, the seconds per round of communication
    (``--bandwidth``, default 1 GB/s) and of computation (triplets/s per core
    measured here for OASIS at ``--d``, scaled by d^2 for dense models and by
    d k for factors), when communication dominates, and the largest d at
    which a dense W is still worth shipping.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import resource
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import tripletml
from tripletml.distributed.sharded import ShardedCollection

try:
    from . import _provenance
    from ._protocol import split
except ImportError:          # run as a file: python bench/bench_distributed.py
    import _provenance
    from _protocol import split

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("speedup", "efficiency", "bigdata", "costmodel")
ITERATIVE = ("SDCA", "OASIS", "LORETA")
KS = (1, 2, 4, 8, 16, 32, 64)
GOAL_K, GOAL_TOL = 16, 0.01

#: generator calls made in this process (read on the workers by client.run)
_GENERATED = {"calls": 0, "rows": 0}


# ---------------------------------------------------------------------------
# provenance and output
# ---------------------------------------------------------------------------
def provenance(argv) -> dict:
    machine = _provenance.machine_info()
    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "tripletml": getattr(tripletml, "__version__", "?")}
    for mod in ("dask", "distributed", "dask_ml"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = "not installed"
    return {"command": "OPENBLAS_NUM_THREADS=1 python -m bench.bench_distributed "
                       + " ".join(shlex.quote(a) for a in argv),
            "git": _provenance.git_revision(REPO),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "nproc": machine["cpu_count"], "platform": machine["platform"],
            "memory": machine["memory"], "cpu": machine["cpu"],
            "blas_env": os.environ.get("OPENBLAS_NUM_THREADS"), "versions": versions}


def md_table(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            return f"{v:.4g}"
        return "-" if v is None else str(v)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def write_section(out: Path, name: str, title: str, body: str, rows, prov: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = (f"# {title}\n\n{body}\n\n## Provenance\n\n"
            f"- command: `{prov['command']}`\n- git: {prov['git']}\n- date: {prov['date']}\n"
            f"- machine: nproc={prov['nproc']}, {prov['platform']}, memory {prov['memory']}\n"
            f"- OPENBLAS_NUM_THREADS={prov['blas_env']}\n"
            f"- versions: {', '.join(f'{k} {v}' for k, v in prov['versions'].items())}\n")
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps({"rows": rows, "provenance": prov},
                                                 indent=1, default=str))
    print(f"wrote {out / (name + '.md')}", flush=True)


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# synthetic data, generated where it is used
# ---------------------------------------------------------------------------
def class_means(seed: int, n_classes: int, d: int, sep: float) -> np.ndarray:
    """The mixture's class means (the same in every partition)."""
    return np.random.default_rng([seed, 0xC1A55]).standard_normal((n_classes, d)) * sep


def make_part(seed: int, p: int, n: int, d: int, n_classes: int = 10,
              dtype: str = "float32", sep: float = 0.5, noise_dims: int | None = None):
    """Partition ``p`` of a seeded Gaussian class mixture: ``(X, y)``.

    Rows are ``mean[y] + N(0, I)``, only the first ``d - noise_dims`` columns
    carry the class signal (default: half of them), so a learned metric helps.
    The generator seed is ``(seed, p)``: the partition is the same wherever
    and however often it is generated.
    """
    rng = np.random.default_rng([seed, p + 1])
    y = rng.integers(0, n_classes, size=n)
    X = rng.standard_normal((n, d), dtype=np.float32 if dtype == "float32" else np.float64)
    k = d - (d // 2 if noise_dims is None else noise_dims)
    X[:, :k] += class_means(seed, n_classes, k, sep)[y].astype(X.dtype)
    _GENERATED["calls"] += 1
    _GENERATED["rows"] += n
    return X, y


def generated_counts() -> dict:
    return dict(_GENERATED)


def reset_counts() -> None:
    _GENERATED["calls"] = _GENERATED["rows"] = 0


def peak_rss_mb() -> float:
    """Peak resident set size of this process (MiB; Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def shares(total: int, k: int) -> list[int]:
    return [int(v) for v in np.diff(np.linspace(0, total, k + 1).round().astype(np.int64))]


def delayed_collection(seed, n_rows, d, k, dtype, n_classes=10) -> ShardedCollection:
    import dask
    sizes = shares(n_rows, k)
    parts = [dask.delayed(make_part, pure=True)(seed, p, n, d, n_classes, dtype)
             for p, n in enumerate(sizes)]
    return ShardedCollection.from_delayed(parts, n_rows=sizes)


def memory_collection(seed, n_rows, d, k, dtype, n_classes=10) -> ShardedCollection:
    sizes = shares(n_rows, k)
    XY = [make_part(seed, p, n, d, n_classes, dtype) for p, n in enumerate(sizes)]
    return ShardedCollection([x for x, _ in XY], sizes, [y for _, y in XY])


# ---------------------------------------------------------------------------
# learners
# ---------------------------------------------------------------------------
def make_learner(name: str, *, n_triplets=None, passes=1, seed=0, preprocessing="auto",
                 rank=None, keep_duals="auto"):
    cls = getattr(tripletml, name)
    kw = {"random_state": seed, "preprocessing": preprocessing}
    if name == "SDCA":
        kw["keep_duals"] = keep_duals
    if name == "KISSME":
        return cls(**kw)
    if n_triplets is not None:
        kw["n_triplets"] = int(n_triplets)
    kw["max_iter"] = int(passes)
    if name == "LORETA" and rank is not None:
        kw["rank"] = int(rank)
    return cls(**kw)


def _prep(v: str):
    return None if v in ("none", "None") else v


def warm_learners(names, d: int) -> None:
    """An untimed in-memory fit of each learner on tiny data (Numba compiles
    its kernels on a process's first fit; cache files make it quick later)."""
    X, y = make_part(12345, 0, 200, d, 4, "float64")
    reset_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in names:
            try:
                make_learner(n, n_triplets=200, passes=1, preprocessing=None,
                             rank=min(4, d)).fit(X, y)
            except Exception:   # noqa: BLE001 - the timed fit reports errors
                pass


def timed_fit(model, X, y=None) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        if y is None:
            model.fit(X)
        else:
            model.fit(X, y)
        return time.perf_counter() - t0


def strategy_of(model) -> str:
    rep = getattr(model, "partitioned_", None) or {}
    return str(rep.get("strategy", "in-memory"))


def rounds_of(model):
    rep = getattr(model, "partitioned_", None) or {}
    for k in ("rounds", "n_rounds", "passes"):
        if k in rep:
            return rep[k]
    return getattr(model, "n_iter_", None)


def max_sim_diff(a, b, P) -> float:
    if a is None or b is None:
        return float("nan")
    return float(np.max(np.abs(a.similarity(P) - b.similarity(P))))


# ---------------------------------------------------------------------------
# 1. speed-up
# ---------------------------------------------------------------------------
def _cluster_spec(w: int, memory_limit=None) -> dict:
    spec = {"n_workers": w, "threads_per_worker": 1, "processes": True,
            "dashboard_address": None}
    if memory_limit is not None:      # Dask's per-worker limit (the memo takes a quarter)
        spec["memory_limit"] = memory_limit
    return spec


def _fit_stream_time(name, coll_mem, args, n_triplets):
    from tripletml.distributed.streaming import fit_stream
    model = make_learner(name, n_triplets=n_triplets, passes=args.passes, seed=args.seed,
                         preprocessing=_prep(args.preprocessing), rank=args.rank)
    shards = [(x, y) for x, y in zip(coll_mem.parts, coll_mem.labels)]
    per = max(1, n_triplets // len(shards))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        fit_stream(model, shards, n_triplets_per_shard=per, max_iter=args.passes,
                   batch_size=1000, random_state=args.seed)
        return time.perf_counter() - t0, model


def _dask_ml_incremental(name):
    try:
        import dask_ml  # noqa: F401
    except ImportError as exc:
        return None, (f"skipped: dask-ml is not importable here ({exc}); run this script "
                      "with a Python that has it (e.g. a venv with --system-site-packages "
                      "and `pip install dask-ml`)")
    return True, (f"dask-ml {dask_ml.__version__} `Incremental` over the same partitions "
                  f"(one block per partition, blocks visited one after another, as "
                  "Incremental does by design), through `TripletsFromLabels`: its "
                  "partial_fit(X_block, y_block) samples the block's share of class "
                  f"triplets and calls {name}.partial_fit(X_block, triplets)")


class TripletsFromLabels:
    """A ``partial_fit(X, y)`` adapter for dask-ml's ``Incremental``: each
    block's class labels become ``per_block`` class triplets (seed
    ``(random_state, call)``) for the wrapped learner's
    ``partial_fit(X, triplets)``."""

    def __init__(self, learner=None, per_block=1000, random_state=0):
        self.learner = learner
        self.per_block = per_block
        self.random_state = random_state

    def get_params(self, deep=True):
        return {"learner": self.learner, "per_block": self.per_block,
                "random_state": self.random_state}

    def set_params(self, **params):
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def partial_fit(self, X, y, **kwargs):
        from sklearn.base import clone

        from tripletml.triplets import random_class_triplets
        if not hasattr(self, "learner_"):
            self.learner_ = clone(self.learner)
            self.calls_ = 0
        rng = np.random.default_rng([int(self.random_state), self.calls_])
        self.calls_ += 1
        T = random_class_triplets(np.asarray(y), int(self.per_block), random_state=rng)
        self.learner_.partial_fit(np.asarray(X, dtype=np.float64), T)
        return self

    def fit(self, X, y):
        return self.partial_fit(X, y)

    def score(self, X, y):
        return self.learner_.score(np.asarray(X, dtype=np.float64), np.asarray(y))


def _incremental_time(name, parts, sizes, args, n_triplets, d, client):
    """Seconds of dask-ml ``Incremental(TripletsFromLabels(learner)).fit`` over
    the persisted partitions (``args.passes`` passes)."""
    import dask.array as da
    from dask_ml.wrappers import Incremental
    import operator

    futs = client.compute(parts)                 # already in memory: no recomputation
    Xs = [da.from_delayed(client.submit(operator.itemgetter(0), f), shape=(n, d),
                          dtype=args.dtype) for f, n in zip(futs, sizes)]
    ys = [da.from_delayed(client.submit(operator.itemgetter(1), f), shape=(n,),
                          dtype=np.int64) for f, n in zip(futs, sizes)]
    X, y = da.concatenate(Xs), da.concatenate(ys)
    model = make_learner(name, n_triplets=n_triplets, passes=1, seed=args.seed,
                         preprocessing=_prep(args.preprocessing), rank=args.rank)
    per = max(1, n_triplets // len(parts))
    inc = Incremental(TripletsFromLabels(model, per_block=per, random_state=args.seed),
                      shuffle_blocks=False, random_state=args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with client.as_current():
            t0 = time.perf_counter()
            for _ in range(args.passes):
                inc.partial_fit(X, y)
            return time.perf_counter() - t0


def section_speedup(args, prov) -> list[dict]:
    jobs = [(n, args.triplets) for n in ITERATIVE if n in args.learners]
    if "KISSME" in args.learners:
        jobs.append(("KISSME", None))
    workers = [] if args.local else [int(w) for w in args.workers.split(",")]
    P = make_part(args.seed, 10 ** 6, 50, args.d, 10, "float64")[0]   # probe rows
    rows = {n: {"learner": n} for n, _ in jobs}
    models = {}
    inc_ok, inc_note = _dask_ml_incremental("OASIS")
    log(f"speedup: d={args.d} {args.dtype}, {args.partitions} partitions, passes="
        f"{args.passes}, triplets={args.triplets}, KISSME rows={args.kissme_rows}, "
        f"rows for the triplet learners={args.rows}, workers={workers or 'none (--local)'}")
    warm_learners([n for n, _ in jobs], args.d)

    def n_rows_of(name):
        return args.kissme_rows if name == "KISSME" else args.rows

    # in-process baselines (data generated in this process, untimed)
    for name, m in jobs:
        n = n_rows_of(name)
        if n * args.d * 8 > args.max_driver_bytes:
            rows[name]["in-process s"] = float("nan")
            rows[name]["fit_stream s"] = float("nan")
            rows[name]["note"] = "in-process and fit_stream skipped (--max-driver-bytes)"
            continue
        coll = memory_collection(args.seed, n, args.d, args.partitions, args.dtype)
        # plain in-memory fit on the concatenated rows (the same triplet total)
        Xc = np.concatenate([np.asarray(x) for x in coll.parts])
        yc = np.concatenate([np.asarray(v) for v in coll.labels])
        plain = make_learner(name, n_triplets=m, passes=args.passes, seed=args.seed,
                             preprocessing=_prep(args.preprocessing), rank=args.rank)
        rows[name]["plain fit s"] = timed_fit(plain, Xc, yc)
        del Xc, yc, plain
        model = make_learner(name, n_triplets=m, passes=args.passes, seed=args.seed,
                             preprocessing=_prep(args.preprocessing), rank=args.rank)
        rows[name]["in-process s"] = timed_fit(model, coll)
        rows[name]["strategy"] = strategy_of(model)
        models[(name, 0)] = model
        if name == "KISSME":
            rows[name]["fit_stream s"] = float("nan")
            rows[name]["note"] = "fit_stream: KISSME has no partial_fit"
        else:
            ts, _ = _fit_stream_time(name, coll, args, m)
            rows[name]["fit_stream s"] = ts
        del coll
        log(f"  {name:7s} in-process {rows[name]['in-process s']:.2f} s, fit_stream "
            f"{rows[name]['fit_stream s']:.2f} s")
    # the cluster columns time the cluster: no cost model sending the fit home
    os.environ["TRIPLETML_PARTITIONED_BACKEND"] = "cluster"
    for w in workers:
        from tripletml.distributed.dask_search import use_cluster
        with use_cluster(_cluster_spec(w)) as client:
            client.run(warm_learners, [n for n, _ in jobs], args.d)
            for name, m in jobs:
                coll = delayed_collection(args.seed, n_rows_of(name), args.d,
                                          args.partitions, args.dtype)
                t0 = time.perf_counter()
                persisted = client.persist(coll.parts)
                from distributed import futures_of, wait
                with client.as_current():
                    wait(futures_of(persisted))
                gen = time.perf_counter() - t0
                coll = ShardedCollection(list(persisted), coll.n_rows)
                model = make_learner(name, n_triplets=m, passes=args.passes, seed=args.seed,
                                     preprocessing=_prep(args.preprocessing), rank=args.rank)
                t = timed_fit(model, coll)
                if w == max(workers) and name != "KISSME" and inc_ok:
                    try:
                        rows[name][f"Incremental {w}w s"] = _incremental_time(
                            name, list(persisted), coll.n_rows, args, m, args.d, client)
                    except Exception as e:      # noqa: BLE001 - reported, not fatal
                        rows[name][f"Incremental {w}w s"] = float("nan")
                        rows[name]["note"] = f"Incremental failed: {e!r}"[:200]
                rows[name][f"{w}w s"] = t
                rows[name][f"{w}w gen s"] = gen
                rows[name]["strategy"] = strategy_of(model)
                rows[name]["rounds"] = rounds_of(model)
                models[(name, w)] = model
                del persisted, coll
                log(f"  {name:7s} {w} worker(s): fit {t:.2f} s (generation {gen:.2f} s, "
                    f"strategy {strategy_of(model)})")
            rows_rss = client.run(peak_rss_mb)
            for name, _ in jobs:
                rows[name][f"{w}w peak RSS MiB"] = max(rows_rss.values())
    out = []
    for name, m in jobs:
        r = rows[name]
        r["triplets"] = m
        r["rows"] = n_rows_of(name)
        if 1 in workers and 2 in workers:
            r["t1/t2"] = r["1w s"] / r["2w s"]
            r["goal t1/t2 >= 1.7"] = "pass" if r["t1/t2"] >= 1.7 else "miss"
        singles = [r.get(k, float("nan")) for k in ("plain fit s", "in-process s",
                                                      "fit_stream s")]
        singles = [v for v in singles if v == v]
        r["best single s"] = min(singles) if singles else float("nan")
        if 2 in workers:
            r["best single/t2"] = r["best single s"] / r["2w s"]
            r["goal best/t2 >= 1.7"] = "pass" if r["best single/t2"] >= 1.7 else "miss"
            r["in-process/t2"] = r.get("in-process s", float("nan")) / r["2w s"]
            r["fit_stream/t2"] = r.get("fit_stream s", float("nan")) / r["2w s"]
            base = models.get((name, 0)) or models.get((name, 1))
            r["max |sim diff| vs 2w"] = max_sim_diff(base, models.get((name, 2)), P)
        r["dask-ml Incremental"] = inc_note if name != "KISSME" else "-"
        if workers and f"Incremental {max(workers)}w s" in r and f"{max(workers)}w s" in r:
            r["Incremental/t2"] = r[f"Incremental {max(workers)}w s"] / r[f"{max(workers)}w s"]
        out.append(r)
    cols = ["learner", "strategy", "rows", "triplets", "rounds", "plain fit s", "in-process s",
            "fit_stream s", "best single s"] + [f"{w}w s" for w in workers] + \
        (["t1/t2", "goal t1/t2 >= 1.7"] if {1, 2} <= set(workers) else []) + \
        (["best single/t2", "goal best/t2 >= 1.7", "in-process/t2", "fit_stream/t2",
          "max |sim diff| vs 2w"] if 2 in workers else []) + \
        ([f"Incremental {max(workers)}w s", "Incremental/t2"] if workers and inc_ok else [])
    table = md_table(out, cols)
    log(table)
    log(f"dask-ml Incremental: {inc_note}")
    gens = md_table(out, ["learner"] + [f"{w}w gen s" for w in workers]
                    + [f"{w}w peak RSS MiB" for w in workers])
    notes = [r["learner"] + ": " + r["note"] for r in out if r.get("note")]
    body = (f"d = {args.d} ({args.dtype}), {args.partitions} partitions (the same on 1 and 2 "
            f"workers), passes (max_iter) = {args.passes}, preprocessing = "
            f"{args.preprocessing}, seed {args.seed}.  Times are wall seconds of `fit` only; "
            "the partitions were generated on the workers and persisted there first "
            "(generation seconds below).  plain fit: `fit(X, y)` on the concatenated rows "
            "with the same triplet total; best single: the fastest of plain fit, in-process "
            "and fit_stream (the reference of issue 41).  in-process: the same partitions "
            "held in this process, `fit(collection)` without a cluster; fit_stream: sequential "
            "`partial_fit` over the same partitions, same triplet total (`n_triplets_per_"
            "shard` = total / partitions), batch 1000.\n\n" + table
            + "\n\n### Generation and memory\n\n" + gens
            + f"\n\ndask-ml Incremental: {inc_note}\n"
            + ("\n" + "\n".join(f"- {n}" for n in notes) if notes else ""))
    write_section(args.out, "speedup", "Speed-up from 1 to 2 worker processes", body, out, prov)
    if args.plot and workers:
        plot_speedup(out, workers, args.out / "speedup.png")
    return out


def section_smalldata(args, prov) -> list[dict]:
    """Issue 41.3: in-memory collections inside ``use_cluster`` (2 workers):
    in-process fit, the default (the cost model decides) and the cluster
    forced (``TRIPLETML_PARTITIONED_BACKEND=cluster``), with the cost model's
    prediction."""
    from tripletml.distributed.dask_search import use_cluster
    rows_out = []
    sizes = [int(v) for v in args.small_rows.split(",")]
    jobs = [(n, r) for n in args.learners for r in sizes]
    local = {}
    for name, n in jobs:
        coll = memory_collection(args.seed, n, args.d, args.partitions, "float64")
        model = make_learner(name, n_triplets=n, passes=args.passes, seed=args.seed,
                             preprocessing=_prep(args.preprocessing), rank=args.rank)
        local[(name, n)] = timed_fit(model, coll)
    with use_cluster(_cluster_spec(2)) as client:
        client.run(warm_learners, list(args.learners), args.d)
        for name, n in jobs:
            coll = memory_collection(args.seed, n, args.d, args.partitions, "float64")
            row = {"learner": name, "rows": n, "triplets": n, "in-process s": local[(name, n)]}
            for mode in ("auto", "cluster"):
                os.environ["TRIPLETML_PARTITIONED_BACKEND"] = mode
                model = make_learner(name, n_triplets=n, passes=args.passes, seed=args.seed,
                                     preprocessing=_prep(args.preprocessing), rank=args.rank)
                row[f"{mode} s"] = timed_fit(model, coll)
                if mode == "auto":
                    cm = model.partitioned_.get("cost_model", {})
                    row["auto ran on"] = model.partitioned_["backend"]
                    row["predicted local s/round"] = cm.get("local_s")
                    row["predicted 2w s/round"] = cm.get("cluster_s")
                    row["round trip s"] = cm.get("round_trip_s")
            os.environ.pop("TRIPLETML_PARTITIONED_BACKEND", None)
            row["auto/in-process"] = row["auto s"] / row["in-process s"]
            log(f"  {name} {n} rows: in-process {row['in-process s']:.2f} s, auto "
                f"{row['auto s']:.2f} s on {row['auto ran on']}, cluster {row['cluster s']:.2f} s")
            rows_out.append(row)
    cols = ["learner", "rows", "triplets", "in-process s", "auto s", "auto ran on",
            "cluster s", "auto/in-process", "predicted local s/round",
            "predicted 2w s/round", "round trip s"]
    table = md_table(rows_out, cols)
    log(table)
    body = (f"In-memory collections (`ShardedCollection` of arrays, {args.partitions} "
            f"partitions, d = {args.d}, {args.passes} passes) fitted in process, and inside "
            "`use_cluster` with 2 worker processes: `auto` (the cost model of "
            "`tripletml.distributed.cost` decides) and `cluster` (forced).\n\n" + table)
    write_section(args.out, "smalldata", "Small data stays small", body, rows_out, prov)
    return rows_out


# ---------------------------------------------------------------------------
# 2. statistical efficiency
# ---------------------------------------------------------------------------
def load_efficiency_set(name: str, data_home, max_rows: int | None, seed: int):
    if name == "synthetic":
        X, y = make_part(seed, 0, max_rows or 3000, 32, 10, "float64")
    else:
        from tripletml import datasets
        b = datasets.load(name, data_home=None if name in ("digits", "iris", "wine")
                          else data_home)
        X, y = b.data, np.asarray(b.target)
    if max_rows is not None and X.shape[0] > max_rows:
        from sklearn.model_selection import train_test_split
        X, _, y, _ = train_test_split(X, y, train_size=max_rows, stratify=y,
                                      random_state=seed)
    return X, y


def section_efficiency(args, prov) -> list[dict]:
    from tripletml.metrics import evaluate_retrieval
    learners = [n for n in ITERATIVE if n in args.learners]
    ks = [int(k) for k in args.ks.split(",")]
    seeds = [int(v) for v in str(args.eff_seeds).split(",")] if args.eff_seeds else [args.seed]
    out, goals = [], []
    warm_learners(learners, 16)
    for set_name in args.sets.split(","):
      for seed in seeds:
        X, y = load_efficiency_set(set_name, args.data_home, args.max_rows, seed)
        Xtr, Xte, ytr, yte = split(X, y, seed)     # shuffled, stratified
        log(f"efficiency: {set_name} seed {seed} train {Xtr.shape}, test {Xte.shape[0]}")
        for name in learners:
            def one(K):
                model = make_learner(name, n_triplets=args.eff_triplets, passes=args.eff_passes,
                                     seed=seed)
                if K == 0:
                    secs = timed_fit(model, Xtr, ytr)
                else:
                    coll = ShardedCollection.from_arrays(Xtr, ytr, n_partitions=K)
                    secs = timed_fit(model, coll)
                h = getattr(model, "history_", None) or {}
                gap = h.get("gap")
                rep = getattr(model, "partitioned_", None) or {}
                return {"set": set_name, "seed": seed, "learner": name,
                        "K": "in-memory" if K == 0 else K,
                        "strategy": strategy_of(model), "rounds": rounds_of(model),
                        "gap": float(rep.get("gap", gap[-1] if gap is not None and len(gap)
                                             else float("nan"))),
                        "test mAP": float(evaluate_retrieval(model, Xte, yte, k=())["map"]),
                        "seconds": secs}
            ref = one(0)
            rows = [ref]
            for K in ks:
                if K > Xtr.shape[0] // 3:
                    continue
                try:
                    r = one(K)
                except ValueError as exc:
                    r = {"set": set_name, "seed": seed, "learner": name, "K": K,
                         "strategy": "error", "note": str(exc)[:120], "test mAP": float("nan")}
                r["mAP - ref"] = r["test mAP"] - ref["test mAP"]
                rows.append(r)
            for r in rows:
                log(f"  {name:7s} K={str(r['K']):9s} {r.get('strategy', ''):10s} rounds="
                    f"{r.get('rounds')} gap={r.get('gap', float('nan')):.3g} mAP="
                    f"{r['test mAP']:.4f} ({r.get('seconds', float('nan')):.2f} s)")
            out += rows
    # the goal on the mean over seeds: the shortfall below the in-memory fit
    for set_name in args.sets.split(","):
        for name in learners:
            mine = [r for r in out if r["set"] == set_name and r["learner"] == name]
            refs = [r["test mAP"] for r in mine if r["K"] == "in-memory"]
            diffs = {}
            for r in mine:
                if r["K"] != "in-memory" and r["K"] <= GOAL_K:
                    diffs.setdefault(r["K"], []).append(r["mAP - ref"])
            mean = {K: float(np.mean(v)) for K, v in diffs.items()}
            short = max((-v for v in mean.values()), default=float("nan"))
            spread = float(np.std(refs)) if len(refs) > 1 else float("nan")
            ok = bool(mean) and short <= GOAL_TOL
            goals.append({"set": set_name, "learner": name, "seeds": len(refs),
                          "ref mAP (mean)": float(np.mean(refs)),
                          "ref std over seeds": spread,
                          "mean mAP - ref, K = 2/4/8/16": " / ".join(
                              f"{mean[K]:+.3f}" for K in sorted(mean) if K > 1),
                          "worst shortfall (K <= 16)": short,
                          "goal": "pass" if ok else "miss"})
            log(f"  goal {name} on {set_name}: mean test mAP no more than {GOAL_TOL} below "
                f"in-memory up to K = {GOAL_K}: {'pass' if ok else 'miss'} (worst shortfall "
                f"{short:.4f})")
    table = md_table(out, ["set", "seed", "learner", "K", "strategy", "rounds", "gap",
                           "test mAP", "mAP - ref", "seconds"])
    gtable = md_table(goals, ["set", "learner", "seeds", "ref mAP (mean)", "ref std over seeds",
                              "mean mAP - ref, K = 2/4/8/16", "worst shortfall (K <= 16)",
                              "goal"])
    log(gtable)
    body = (f"Every fit: the learner's defaults except n_triplets = {args.eff_triplets} (the "
            f"total over all partitions), max_iter = {args.eff_passes} (equal passes for every "
            f"K), random_state = {args.seed}.  Split: stratified 70/30 (`bench/_protocol.py`), "
            "K partitions = consecutive blocks of the shuffled training rows "
            "(`ShardedCollection.from_arrays`, local backend: one process, the same code path "
            "as on a cluster).  Reference row: the in-memory `fit(Xtr, ytr)`.  gap: SDCA's "
            "final duality gap (`partitioned_['gap']` or `history_['gap'][-1]`).\n\n"
            f"## Goal: test mAP (mean over seeds {seeds}) no more than {GOAL_TOL} below the "
            f"in-memory fit's, up to K = {GOAL_K}\n\n"
            + gtable + "\n\n## All rows\n\n" + table)
    write_section(args.out, "efficiency", "Statistical efficiency against the number of "
                  "partitions K", body, out + goals, prov)
    if args.plot:
        plot_efficiency(out, args.out / "efficiency.png")
    return out


# ---------------------------------------------------------------------------
# 3. beyond one machine's memory
# ---------------------------------------------------------------------------
def section_bigdata(args, prov) -> list[dict]:
    n, d, K = args.big_rows, args.big_d, args.big_partitions
    jobs = [("KISSME", None), ("SDCA", args.big_triplets)]
    jobs = [j for j in jobs if j[0] in args.learners]
    log(f"bigdata: {n} rows x {d} {args.dtype} ({n * d * 4 / 1e9:.2f} GB as float32) in "
        f"{K} partitions of ~{n // K} rows, generated in the workers, never persisted")
    out = []
    workers = 1 if args.local else int(args.big_workers)
    for name, m in jobs:
        strat = getattr(getattr(tripletml, name), "_partitioned_strategy", None)
        strat = getattr(strat, "name", strat or "sample")
        gathered = (min(n, 3 * (m or 0)) * d * 8) if strat == "sample" and m else 0
        if gathered > args.max_driver_bytes and not args.force:
            msg = (f"skipped: {name}'s strategy is 'sample' (gathers the rows of all its "
                   f"triplets on the driver: ~{gathered / 1e9:.1f} GB > --max-driver-bytes); "
                   "rerun with --force to try anyway")
            log(f"  {name}: {msg}")
            out.append({"learner": name, "strategy": strat, "note": msg})
            continue
        model = make_learner(name, n_triplets=m, passes=args.big_passes, seed=args.seed,
                             preprocessing=_prep(args.preprocessing), rank=args.rank,
                             keep_duals=args.keep_duals)
        if args.local:
            import dask
            with dask.config.set(scheduler="sync"):
                coll = delayed_collection(args.seed, n, d, K, args.dtype)
                reset_counts()
                t = timed_fit(model, coll)
            calls, rss = generated_counts()["calls"], {"driver": peak_rss_mb()}
        else:
            from tripletml.distributed.dask_search import use_cluster
            with use_cluster(_cluster_spec(workers, args.big_memory_limit)) as client:
                client.run(warm_learners, [name], d)
                client.run(reset_counts)
                coll = delayed_collection(args.seed, n, d, K, args.dtype)
                t = timed_fit(model, coll)
                calls = sum(c["calls"] for c in client.run(generated_counts).values())
                rss = client.run(peak_rss_mb)
        per_w = max(v for k, v in rss.items() if k != "driver") if not args.local \
            else rss["driver"]
        r = {"learner": name, "strategy": strategy_of(model), "rows": n, "d": d, "partitions": K, "workers": workers,
             "triplets": m, "seconds": t, "passes": calls / K,
             "rows/s per worker": calls / K * n / t / workers,
             "triplets/s per worker": (m * args.big_passes / t / workers) if m else None,
             "peak RSS per worker MiB": per_w, "driver peak RSS MiB": peak_rss_mb(),
             "rounds": rounds_of(model),
             "goal RSS <= 1 GB": "pass" if per_w <= 1024 else "miss"}
        out.append(r)
        log(f"  {name}: {t:.1f} s, {r['passes']:.2f} passes, peak RSS/worker {per_w:.0f} MiB, "
            f"{r['rows/s per worker']:.3g} rows/s/worker"
            + (f", {r['triplets/s per worker']:.3g} triplets/s/worker" if m else ""))
    cols = ["learner", "strategy", "rows", "d", "partitions", "workers", "triplets", "rounds",
            "passes", "seconds", "rows/s per worker", "triplets/s per worker",
            "peak RSS per worker MiB", "driver peak RSS MiB", "goal RSS <= 1 GB", "note"]
    table = md_table(out, cols)
    log(table)
    body = (f"{n} rows x {d} features ({args.dtype}) from the seeded Gaussian class mixture, "
            f"{K} partitions generated inside {workers} worker process(es) "
            f"({'in-process, --local' if args.local else 'LocalCluster, one thread each'}) "
            "and never persisted: each pass regenerates its partitions.  passes = generator "
            "calls / partitions (counted in the workers); peak RSS = `ru_maxrss` of each "
            f"worker process (the largest shown); preprocessing = {args.preprocessing}; "
            f"SDCA max_iter = {args.big_passes}, keep_duals = {args.keep_duals!r}; worker "
            f"memory_limit = {args.big_memory_limit or 'Dask default'}.\n\n" + table)
    write_section(args.out, "bigdata", "Beyond one machine's memory", body, out, prov)
    return out


# ---------------------------------------------------------------------------
# 4. cost model
# ---------------------------------------------------------------------------
def measure_triplets_per_second(d: int, seed: int, m: int) -> float:
    """OASIS in-memory triplets/s on one core at dimension d (after a warm-up)."""
    X, y = make_part(seed, 0, 4000, d, 10, "float64")
    warm_learners(["OASIS"], d)
    model = make_learner("OASIS", n_triplets=m, passes=1, seed=seed, preprocessing=None)
    return m / timed_fit(model, X, y)


def section_costmodel(args, prov) -> list[dict]:
    K, bw, k_rank = args.machines, args.bandwidth, args.cost_rank
    tps = measure_triplets_per_second(args.cost_d, args.seed, args.cost_triplets)
    c0 = 1.0 / (tps * args.cost_d ** 2)           # seconds per triplet per d^2 (dense models)
    per_round = args.round_triplets / K      # triplets per machine per round
    depth = max(1, math.ceil(math.log(K, 8)))

    def models(d):
        dense = 8 * d * d
        return {  # strategy: (bytes up per partition, bytes down per partition, compute/triplet)
            "cocoa (SDCA: dW up, W down)": (dense, dense, c0 * d * d),
            "mixing (OASIS: W up, W down)": (dense, dense, c0 * d * d),
            f"mixing (LORETA: factors (d+d)k, k={k_rank})": (16 * d * k_rank, 16 * d * k_rank,
                                                              c0 * d * k_rank * 4),
            "gradients (SML: dense gradient up, W down)": (dense, dense, c0 * d * d),
            f"gradients (LowRankDML: d x d gradient up, factors d k down, k={k_rank})":
                (dense, 8 * d * k_rank, c0 * d * d),
            "statistics (KISSME: 2 scatters + means, once)": (2 * dense + 8 * d * 10, 0,
                                                              c0 * d * d),
        }
    rows = []
    for d in [int(v) for v in args.cost_ds.split(",")]:
        for strat, (up, down, ct) in models(d).items():
            # the driver sends the model to K machines (broadcast) and receives
            # the tree-reduced updates (fan-in 8: 8 messages per level)
            comm = (K * down + 8 * up * depth) / bw
            comp = per_round * ct
            rows.append({"d": d, "strategy": strat, "bytes up / partition": up,
                         "bytes down / partition": down, "bytes / round (all K)": K * (up + down),
                         "comm s / round": comm, "compute s / round": comp,
                         "comm / compute": comm / comp if comp else float("inf"),
                         "dominates": "communication" if comm > comp else "computation"})
    # dense: comm / compute = (K + 8 depth) 8 / (bw c0 per_round), independent of d
    ratio_dense = (K + 8 * depth) * 8 / (bw * c0 * per_round)
    n_star = (K + 8 * depth) * 8 / (bw * c0)
    d_mem = int(math.sqrt(args.worker_memory / (8 * 3)))   # W, update, one spare copy
    d_time = int(math.sqrt(args.round_seconds * bw / (8 * (K + 8 * depth))))
    summary = [
        f"measured: OASIS {tps:.3g} triplets/s on one core at d = {args.cost_d} "
        f"(c0 = {c0:.3g} s per triplet per d^2)",
        f"K = {K} machines, bandwidth {bw:.3g} B/s at the driver, reduction tree depth {depth}, "
        f"{args.round_triplets:.3g} triplets per round in total ({per_round:.3g} per machine)",
        f"dense W (cocoa / mixing / SML): communication / computation = {ratio_dense:.3g} at "
        "every d (both grow as d^2); communication dominates when a machine processes fewer "
        f"than {n_star:.3g} triplets per round",
        f"largest d at which a dense W is worth shipping: {min(d_mem, d_time)} (memory: W, "
        f"its update and one copy in {args.worker_memory / 2 ** 30:.3g} GiB per worker -> "
        f"d <= {d_mem}; time: shipping it to and from {K} machines within "
        f"{args.round_seconds:g} s per round -> d <= {d_time}); beyond, ship factors "
        f"(LORETA, LowRankDML): 16 d k bytes",
    ]
    for s in summary:
        log(s)
    table = md_table(rows, ["d", "strategy", "bytes up / partition", "bytes down / partition",
                            "bytes / round (all K)", "comm s / round", "compute s / round",
                            "comm / compute", "dominates"])
    log(table)
    body = ("Model, per round: the driver broadcasts the model (bytes down) to every machine "
            "and receives the updates reduced in a tree of fan-in 8 (bytes up, 8 messages per "
            "level); float64 (8 bytes).  Computation: per-machine triplets per round times "
            "the measured seconds per triplet, scaled by d^2 for dense models and by 4 d k "
            "for LORETA's factored steps.  KISSME is one round of statistics (its computation "
            "column: as many rows per machine as the others have triplets, one d x d outer "
            "product each).\n\n"
            + "\n".join(f"- {s}" for s in summary) + "\n\n" + table)
    write_section(args.out, "costmodel", f"Cost model for {K} machines", body,
                  rows + [{"summary": summary}], prov)
    return rows


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------
def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def plot_efficiency(rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted({(r["set"], r["learner"]) for r in rows})
    fig, ax = plt.subplots(figsize=(6, 4))
    for s, n in keys:
        pts = [(r["K"], r["test mAP"]) for r in rows if (r["set"], r["learner"]) == (s, n)
               and isinstance(r["K"], int)]
        ref = [r["test mAP"] for r in rows if (r["set"], r["learner"]) == (s, n)
               and r["K"] == "in-memory"]
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{n} ({s})")
        if ref:
            ax.axhline(ref[0], color=line.get_color(), ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.axvline(GOAL_K, color="gray", lw=0.5)
    ax.set_xlabel("partitions K (dotted: in-memory fit)")
    ax.set_ylabel("test mAP")
    _save(fig, path)


def plot_speedup(rows, workers, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    cols = ["in-process s", "fit_stream s"] + [f"{w}w s" for w in workers]
    x = np.arange(len(rows))
    for i, c in enumerate(cols):
        ax.bar(x + i * 0.8 / len(cols), [r.get(c, np.nan) for r in rows], 0.8 / len(cols),
               label=c.replace(" s", ""))
    ax.set_xticks(x + 0.4 - 0.4 / len(cols), [r["learner"] for r in rows])
    ax.set_ylabel("fit wall seconds")
    _save(fig, path)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------
QUICK = {"triplets": 4000, "rows": 2000, "kissme_rows": 20000, "partitions": 4, "d": 16,
         "passes": 1, "sets": "digits", "ks": "1,2,4", "max_rows": 600, "eff_triplets": 2000,
         "eff_passes": 2, "big_rows": 40000, "big_d": 16, "big_partitions": 4,
         "big_triplets": 4000, "cost_triplets": 2000, "cost_d": 16, "cost_ds": "64,1024"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.bench_distributed",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("section", choices=SECTIONS + ("smalldata", "all"))
    ap.add_argument("--out", type=Path, default=REPO / "results" / "distributed")
    ap.add_argument("--quick", action="store_true", help="every size tiny (smoke test)")
    ap.add_argument("--local", action="store_true",
                    help="no LocalCluster: in-process fits only")
    ap.add_argument("--plot", action="store_true", help="write efficiency.png / speedup.png")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--learners", default="SDCA,OASIS,LORETA,KISSME")
    ap.add_argument("--preprocessing", default="none",
                    help="speedup/bigdata learners' preprocessing (default none: fewest "
                         "passes); efficiency uses the learners' defaults")
    ap.add_argument("--rank", type=int, default=None, help="LORETA rank (default: its own)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    g = ap.add_argument_group("speedup")
    g.add_argument("--workers", default="1,2")
    g.add_argument("--triplets", type=int, default=1_000_000)
    g.add_argument("--rows", type=int, default=200_000)
    g.add_argument("--kissme-rows", type=int, default=10_000_000)
    g.add_argument("--partitions", type=int, default=16)
    g.add_argument("--d", type=int, default=32)
    g.add_argument("--passes", type=int, default=2)
    g.add_argument("--scale", type=float, default=1.0,
                   help="multiply the speedup and bigdata sizes (rows, triplets) by this")
    g.add_argument("--max-driver-bytes", type=float, default=4e9,
                   help="skip in-process/fit_stream baselines and 'sample'-strategy big fits "
                        "whose data on the driver would exceed this")
    g.add_argument("--small-rows", default="20000,150000",
                   help="smalldata: rows (= triplets) of the in-memory collections")
    g = ap.add_argument_group("efficiency")
    g.add_argument("--sets", default="optdigits,letter")
    g.add_argument("--ks", default=",".join(map(str, KS)))
    g.add_argument("--max-rows", type=int, default=None)
    g.add_argument("--eff-triplets", type=int, default=30_000)
    g.add_argument("--eff-passes", type=int, default=3)
    g.add_argument("--eff-seeds", default="0,1,2",
                   help="seeds (splits and learners) averaged in the goal check")
    g.add_argument("--data-home", default=os.environ.get("TRIPLETML_DATA")
                   or str(REPO.parent / "shared" / "data"))
    g = ap.add_argument_group("bigdata")
    g.add_argument("--big-rows", type=int, default=100_000_000)
    g.add_argument("--big-d", type=int, default=64)
    g.add_argument("--big-partitions", type=int, default=400)
    g.add_argument("--big-triplets", type=int, default=100_000_000)
    g.add_argument("--big-passes", type=int, default=1, help="SDCA max_iter")
    g.add_argument("--big-workers", type=int, default=2)
    g.add_argument("--big-memory-limit", default=None,
                   help="each worker's Dask memory_limit (e.g. 1GB; default Dask's share of "
                        "the machine); the partition memo holds at most a quarter of it")
    g.add_argument("--keep-duals", type=lambda v: v if v == "auto" else v == "true",
                   default="auto", help="SDCA's keep_duals: auto (default) or true (the "
                                        "driver gathers the dual variables)")
    g.add_argument("--force", action="store_true")
    g = ap.add_argument_group("costmodel")
    g.add_argument("--machines", type=int, default=64)
    g.add_argument("--bandwidth", type=float, default=1e9, help="bytes/s (default 1 GB/s)")
    g.add_argument("--round-triplets", type=float, default=1e6,
                   help="triplets per round over all machines")
    g.add_argument("--cost-ds", default="64,256,1024,4096,16384,50000")
    g.add_argument("--cost-rank", type=int, default=50)
    g.add_argument("--cost-triplets", type=int, default=50_000)
    g.add_argument("--cost-d", type=int, default=256, help="d of the triplets/s measurement")
    g.add_argument("--worker-memory", type=float, default=2 ** 30)
    g.add_argument("--round-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    if args.scale != 1.0:
        for k in ("triplets", "rows", "kissme_rows", "big_rows", "big_triplets"):
            setattr(args, k, max(100, int(getattr(args, k) * args.scale)))
        args.big_partitions = max(2, min(args.big_partitions, args.big_rows // 1000))
    args.learners = [s.strip() for s in args.learners.split(",") if s.strip()]
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    prov = provenance(argv)
    sections = SECTIONS if args.section == "all" else (args.section,)
    funcs = {"speedup": section_speedup, "efficiency": section_efficiency,
             "bigdata": section_bigdata, "costmodel": section_costmodel,
             "smalldata": section_smalldata}
    for s in sections:
        t0 = time.perf_counter()
        funcs[s](args, prov)
        log(f"[{s} done in {time.perf_counter() - t0:.1f} s]")
    return 0


if __name__ == "__main__":
    # run the functions from the importable module (not __main__), so the
    # workers unpickle them by reference and share the module's counters
    try:
        from bench.bench_distributed import main as _main
    except ImportError:       # run as a file
        _main = main
    sys.exit(_main())
