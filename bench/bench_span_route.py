"""Few rows, many features (issue 38 section 3): fit times of the span route
(:mod:`tripletml.linalg.span`) against the plain route, and the agreement of
the two models.

Data: (a) ``zappos`` — the 57 train shoes of seed 0 of the unseen-items
protocol (:mod:`bench.bench_zappos_unseen`: ``split_items(0)``, the train
triplets among them, 57 x 4,096 AlexNet rows), raw or l2-normalized rows;
(b) ``synth`` — 70 x 1,088 standard normal rows with 20,000 random
triplets labeled by a planted metric (``default_rng(0)``), the shape of the
second data set of issue 38 that the project does not have.

Every triplet learner of the registry at its defaults
(``random_state=0``), each fit in a forked child with a wall-clock cap
(``--timeout``, the plain route's cap ``--plain-timeout``).  ``route`` is
``span`` (the default, the route the library takes) or ``plain``
(``_span_route = False``: every step at width d).  Where both routes finish,
``cpu_s`` is the child's CPU time during the fit (all its threads), the
better measure on a loaded machine; ``workers_cpu_s`` the part of it spent
by threads other than the main one (the BLAS workers, working or spinning
after a threaded call: a fit that makes no threaded call shows 0.00).  ``max_rel_diff`` is
``max |S_span - S_plain| / max |S_plain|`` over the
similarity table of all 85 shoes (train and unseen: the complement of the
span is compared too).  Learners that do not declare the span route run
the plain route either way (``span_route`` = no).

Run: ``python -m bench.bench_span_route [--plain] [--only OASIS SDCA ...]``
(needs ``TRIPLETML_DATA`` with ``zappos/``); rows go to
``results/span_route/times.csv`` and to stdout.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "span_route"
FIELDS = ["data", "input", "learner", "route", "span_route", "status", "fit_s", "cpu_s",
          "workers_cpu_s", "n_rows", "n_features", "n_triplets", "max_rel_diff", "note"]


def other_threads_cpu() -> Optional[float]:
    """CPU seconds of this process's threads other than the main one (the
    BLAS workers: busy or spinning, OpenMathLib/OpenBLAS#5171), from
    ``/proc/self/task/*/schedstat``; None where that is not readable."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    total = 0
    for t in tasks:
        if int(t) == os.getpid():
            continue
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def settle_blas_workers(wait: float = 0.5) -> None:
    """Start the BLAS workers of a freshly forked child (one threaded
    product, and one limit of the thread rule: the first thread count set
    on a BLAS library whose pool is not running yet, SciPy's own OpenBLAS,
    starts that pool, whose workers spin once, about 0.1 s of CPU) and wait
    out their spin, so that ``workers_cpu_s`` counts what the fit itself
    starts."""
    from tripletml.engine.threads import limit_threads

    A = np.ones((512, 512))
    A @ A
    with limit_threads(1.0):
        pass
    time.sleep(wait)


def zappos_rows(l2: bool):
    from bench.bench_zappos_unseen import l2_rows, split_items, split_triplets
    from tripletml.datasets import load_comparisons

    B = load_comparisons("zappos")
    X = np.asarray(B.features, dtype=np.float64)
    tr, te = split_items(0)
    sp = split_triplets(B.triplets, tr, te)
    Xall = l2_rows(X) if l2 else X
    return Xall[tr], sp["train"], Xall


def synth_rows(n: int = 70, d: int = 1088, m: int = 20000, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    L = rng.standard_normal((16, d))
    T = rng.integers(0, n, size=(3 * m, 3))
    T = T[(T[:, 0] != T[:, 1]) & (T[:, 0] != T[:, 2]) & (T[:, 1] != T[:, 2])][:m]
    Z = X @ L.T
    dp = np.sum((Z[T[:, 0]] - Z[T[:, 1]]) ** 2, axis=1)
    dn = np.sum((Z[T[:, 0]] - Z[T[:, 2]]) ** 2, axis=1)
    T[dp > dn] = T[dp > dn][:, [0, 2, 1]]
    Xnew = rng.standard_normal((15, d))
    return X, T, np.vstack([X, Xnew])


def declares_span(est, Xtr, T) -> bool:
    """Whether the learner has a span route (its own, or declared)."""
    from tripletml import KISSME
    from tripletml.core.base import TripletLearner

    if isinstance(est, KISSME):
        return True
    return type(est)._span_lift_spec is not TripletLearner._span_lift_spec


def _child(conn, name, route, Xtr, T, Xall):
    try:
        warnings.simplefilter("ignore")
        from tripletml.registry import get_entry

        cls = get_entry(name).cls
        m = cls(random_state=0) if "random_state" in cls().get_params() else cls()
        if route == "plain":
            m._span_route = False
        settle_blas_workers()
        w0 = other_threads_cpu()
        t0, c0 = time.perf_counter(), time.process_time()
        m.fit(Xtr, triplets=T)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        w1 = other_threads_cpu()
        workers = "" if w0 is None or w1 is None else f"{w1 - w0:.2f}"
        conn.send(("ok", dt, np.asarray(m.similarity(Xall), dtype=np.float64),
                   f"cpu={cpu:.2f} workers={workers}"))
    except BaseException as e:  # noqa: BLE001 - reported in the table
        conn.send(("error", float("nan"), None,
                   f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"))
        traceback.print_exc(file=sys.stderr)
    finally:
        conn.close()


def fit_capped(name, route, Xtr, T, Xall, timeout):
    from .bench_zappos_unseen import run_forked

    return run_forked(_child, (name, route, Xtr, T, Xall), timeout)


def learner_names(only: Optional[list[str]] = None) -> list[str]:
    from tripletml.registry import REGISTRY

    names = [e.name for e in REGISTRY if e.kind == "triplet"
             and e.name not in ("Euclidean", "DotProduct")]
    return names if not only else [n for n in only if n in names]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["zappos-raw", "zappos-l2", "synth"],
                    choices=["zappos-raw", "zappos-l2", "synth"])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--plain", action="store_true", help="also fit the plain route")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--plain-timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from tripletml.registry import get_entry

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "times.csv"
    new = not path.exists()
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        if new:
            w.writeheader()
        print(f"# load {os.getloadavg()}", flush=True)
        for data in args.data:
            if data == "synth":
                Xtr, T, Xall = synth_rows()
                ds, inp = "synth", "normal"
            else:
                Xtr, T, Xall = zappos_rows(data.endswith("l2"))
                ds, inp = "zappos", data.split("-")[1]
            for name in learner_names(args.only):
                cls = get_entry(name).cls
                has = declares_span(cls(), Xtr, T)
                sims = {}
                for route in (["span", "plain"] if args.plain and has else ["span"]):
                    cap = args.timeout if route == "span" else args.plain_timeout
                    status, dt, S, note = fit_capped(name, route, Xtr, T, Xall, cap)
                    cpu = workers = ""
                    if note.startswith("cpu="):
                        cpu, workers = (v.split("=", 1)[1] for v in note.split())
                        note = ""
                    sims[route] = S
                    diff = ""
                    if route == "plain" and S is not None and sims.get("span") is not None:
                        diff = f"{np.max(np.abs(sims['span'] - S)) / np.max(np.abs(S)):.2e}"
                    row = {"data": ds, "input": inp, "learner": name,
                           "route": route if has else "plain", "span_route": "yes" if has else "no",
                           "status": status, "fit_s": f"{dt:.2f}", "cpu_s": cpu,
                           "workers_cpu_s": workers, "n_rows": Xtr.shape[0],
                           "n_features": Xtr.shape[1], "n_triplets": len(T),
                           "max_rel_diff": diff, "note": note}
                    w.writerow(row)
                    fh.flush()
                    print(f"{ds:6s} {inp:6s} {name:12s} {row['route']:5s} {status:7s} "
                          f"{dt:7.2f}s cpu {cpu:>6s} workers {workers:>5s} {diff} {note}", flush=True)
        print(f"# load {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
