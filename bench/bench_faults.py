"""Faults during a partitioned fit (issue 28, item 7): a worker killed mid-fit,
and a driver that crashes and resumes from its checkpoint.

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_faults [--learners SDCA,OASIS]
        [--partitions 8] [--n-triplets 400000] [--rounds 6] [--kill-after 2.0]

1. *Worker lost.*  A ``LocalCluster`` of two worker processes (one thread
   each, nannies on) fits the learner on digits cut into ``--partitions``
   partitions: once undisturbed, once while a timer kills worker 0's process
   (``os._exit`` inside the worker; its nanny starts a new one) after
   ``--kill-after`` seconds.  The tasks whose results were on the lost
   worker are rerun by the scheduler; they are pure functions of their
   inputs, so the model must be bit-identical to the undisturbed one.
2. *Driver crash.*  In-process: ``fit_partitioned(..., checkpoint_dir=)``
   is interrupted after round ``--rounds // 2`` (an exception raised by a
   hook standing in for a crash), then run again with the same arguments:
   it resumes from the checkpoint and must end with the uninterrupted model.

Prints whether the models are identical and the seconds of each run; writes
``results/faults/README.md``.  Public API only (plus the round hook of the
crash simulation).
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

import tripletml
from tripletml.distributed.sharded import ShardedCollection
from tripletml.distributed.partitioned import fit_partitioned

ROOT = Path(__file__).resolve().parents[1]


def _model_arrays(model) -> dict:
    return {k: v for k, v in vars(model).items()
            if k.endswith("_") and isinstance(v, np.ndarray)}


def _same(a, b) -> bool:
    A, B = _model_arrays(a), _model_arrays(b)
    return A.keys() == B.keys() and all(np.array_equal(A[k], B[k]) for k in A)


def _make(args):
    cls = getattr(tripletml, args.learner)
    params = dict(max_iter=args.rounds, random_state=0)
    if "n_triplets" in cls().get_params():
        params["n_triplets"] = args.n_triplets
    if "tol" in cls().get_params():
        params["tol"] = None
    return cls(**params)


def worker_lost(args, coll) -> dict:
    from distributed import Client, LocalCluster

    from tripletml.distributed.dask_search import use_cluster
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        with use_cluster(client):
            t0 = time.perf_counter()
            ref = _make(args).fit(coll)
            out["undisturbed_s"] = time.perf_counter() - t0
            victim = sorted(client.scheduler_info()["workers"])[0]
            killed = {}

            def kill():
                killed["at"] = time.perf_counter() - t1
                try:
                    client.run(_die_soon, workers=[victim])
                except Exception as e:        # noqa: BLE001 - report, do not crash
                    killed["error"] = repr(e)

            timer = threading.Timer(args.kill_after, kill)
            t1 = time.perf_counter()
            timer.start()
            model = _make(args).fit(coll)
            out["disturbed_s"] = time.perf_counter() - t1
            timer.cancel()
        out["killed_at_s"] = killed.get("at")
        out["kill_error"] = killed.get("error")
        out["workers_after"] = len(client.scheduler_info()["workers"])
    out["identical"] = _same(ref, model)
    out["strategy"] = model.partitioned_["strategy"]
    out["restarts"] = model.partitioned_.get("restarts", 0)
    return out


def _die_soon() -> str:
    """Run on a worker: end its process abruptly 0.1 s later (a lost
    machine; the nanny starts a fresh worker)."""
    def die():
        time.sleep(0.1)
        os._exit(1)
    threading.Thread(target=die, daemon=True).start()
    return "dying"


class _Crash(RuntimeError):
    pass


def driver_crash(args, coll) -> dict:
    out = {}
    ref = _make(args).fit(coll)
    with tempfile.TemporaryDirectory() as d:
        from tripletml.distributed import partitioned
        real = partitioned.PartitionedFit.save_round
        stop = max(1, args.rounds // 2)

        def crashing(self, round_, arrays, **kw):
            real(self, round_, arrays, **kw)
            if round_ == stop:
                raise _Crash(f"simulated driver crash after round {round_}")

        partitioned.PartitionedFit.save_round = crashing
        try:
            fit_partitioned(_make(args), coll, checkpoint_dir=d)
            out["crashed"] = False
        except _Crash:
            out["crashed"] = True
        finally:
            partitioned.PartitionedFit.save_round = real
        files = sorted(p.name for p in Path(d).iterdir())
        t0 = time.perf_counter()
        resumed = fit_partitioned(_make(args), coll, checkpoint_dir=d)
        out["resume_s"] = time.perf_counter() - t0
        out["checkpoint_files"] = files
    out["identical"] = _same(ref, resumed)
    out["strategy"] = resumed.partitioned_["strategy"]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", default="SDCA,OASIS")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--n-triplets", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--kill-after", type=float, default=2.0)
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "results" / "faults"))
    args = ap.parse_args(argv)
    X, y = load_digits(return_X_y=True)
    coll = ShardedCollection.from_arrays(X, y, n_partitions=args.partitions)
    warnings.simplefilter("ignore")
    lines = []
    for learner in args.learners.split(","):
        args.learner = learner
        if not args.skip_dask:
            w = worker_lost(args, coll)
            print(learner, "worker lost:", w)
            lines.append(f"| {learner} | worker 0 killed mid-fit | {w['strategy']} | "
                         f"{w['identical']} | undisturbed {w['undisturbed_s']:.1f} s, disturbed "
                         f"{w['disturbed_s']:.1f} s (kill at {w['killed_at_s']:.1f} s; fit "
                         f"restarts: {w['restarts']}; workers after: {w['workers_after']}) |")
        c = driver_crash(args, coll)
        print(learner, "driver crash:", c)
        lines.append(f"| {learner} | driver crash after round {max(1, args.rounds // 2)}, "
                     f"resumed | {c['strategy']} | {c['identical']} | crashed={c['crashed']}, "
                     f"resume {c['resume_s']:.1f} s, files {c['checkpoint_files']} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        from . import _provenance
    except ImportError:          # run as a file
        import _provenance
    commit = _provenance.git_revision(ROOT)
    cmd = "OPENBLAS_NUM_THREADS=1 python -m bench.bench_faults " + " ".join(argv or [])
    (out / "README.md").write_text(
        "# Faults during a partitioned fit\n\n"
        f"`{cmd.strip()}` (commit {commit}, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, {platform.platform()}); "
        f"{args.partitions} partitions of digits, {args.rounds} rounds, "
        f"{args.n_triplets} triplets.\n\n"
        "| learner | fault | strategy | model identical to the undisturbed run | notes |\n"
        "|---|---|---|---|---|\n" + "\n".join(lines) + "\n")
    print(f"wrote {out / 'README.md'}")


if __name__ == "__main__":
    main()
