"""Quality of the partitioned fit against the in-memory fit, per K (issue 41, item 2).

    OPENBLAS_NUM_THREADS=1 nice -n 10 python -m bench.bench_mixing_quality [options]

For each set (optdigits, letter), seed (0, 1, 2) and learner (SDCA, OASIS,
LORETA at their defaults): the in-memory ``fit(Xtr, ytr)`` and the
partitioned ``fit(ShardedCollection.from_arrays(Xtr, ytr, n_partitions=K))``
(local backend: in process, the same code path as on a cluster) for K in
1, 2, 4, 8, 16, all with the same parameters, hence the same number of
passes over the triplets (``max_iter``).  Split: the stratified 70/30 split
of ``bench/_protocol.py``; test mAP: test-vs-test retrieval mAP.  The table
is the mean over the seeds of (test mAP of the partitioned fit) - (test mAP
of the in-memory fit); K = 1 differs from in-memory only by the triplets
sampled (the partitioned fit draws a partition's triplets from the seed
``(seed, p)``), so it is the sampling noise floor.  ``--max-rows`` caps the
training rows (a stratified subsample, printed).  ``--set-param`` sets a
module constant of :mod:`tripletml.distributed.mixing` (an A/B switch).

Prints one line per fit, then the efficiency table (markdown) and the command.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import warnings

import numpy as np

import tripletml
from tripletml import datasets
from tripletml.distributed.sharded import ShardedCollection
from tripletml.metrics import evaluate_retrieval

try:
    from ._protocol import split
except ImportError:          # run as a file
    from _protocol import split

GOAL_TOL = 0.01


def load(name: str, max_rows: int | None, seed: int):
    b = datasets.load(name)
    X, y = b.data, np.asarray(b.target)
    if max_rows is not None and X.shape[0] > max_rows:
        from sklearn.model_selection import train_test_split
        X, _, y, _ = train_test_split(X, y, train_size=max_rows, stratify=y, random_state=seed)
    return X, y


def fit_one(name, seed, params, Xtr, ytr, Xte, yte, K):
    est = getattr(tripletml, name)(random_state=seed, **params.get(name, {}))
    tic = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if K == 0:
            est.fit(Xtr, ytr)
        else:
            est.fit(ShardedCollection.from_arrays(Xtr, ytr, n_partitions=K))
    secs = time.perf_counter() - tic
    mp = float(evaluate_retrieval(est, Xte, yte, k=())["map"])
    rep = getattr(est, "partitioned_", None) or {}
    extra = rep.get("report", rep)
    steps = extra.get("mix_steps") if isinstance(extra, dict) else None
    gap = None
    h = getattr(est, "history_", None) or {}
    if "gap" in h and len(h["gap"]):
        gap = float(h["gap"][-1])
    return mp, secs, steps, gap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="optdigits,letter")
    ap.add_argument("--learners", default="SDCA,OASIS,LORETA")
    ap.add_argument("--ks", default="1,2,4,8,16")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-rows", type=int, default=None,
                    help="cap on the rows of a set before the split (stratified subsample)")
    ap.add_argument("--param", action="append", default=[],
                    help="LEARNER.name=value (a learner parameter, e.g. SDCA.max_iter=20)")
    ap.add_argument("--set-param", action="append", default=[],
                    help="NAME=value: a constant of tripletml.distributed.mixing")
    args = ap.parse_args(argv)
    params: dict = {}
    for p in args.param:
        key, val = p.split("=", 1)
        ln, pn = key.split(".", 1)
        try:
            v = eval(val, {}, {})          # numbers, None, strings in quotes
        except Exception:                  # noqa: BLE001
            v = val
        params.setdefault(ln, {})[pn] = v
    from tripletml.distributed import mixing
    for p in args.set_param:
        key, val = p.split("=", 1)
        setattr(mixing, key, eval(val, {}, {}))
    ks = [int(k) for k in args.ks.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    learners = args.learners.split(",")
    rows = {}
    refs = {}
    for set_name in args.sets.split(","):
        for seed in seeds:
            X, y = load(set_name, args.max_rows, seed)
            Xtr, Xte, ytr, yte = split(X, y, seed)
            print(f"# {set_name} seed {seed}: train {Xtr.shape}, test {Xte.shape[0]}"
                  + (f" (subsampled to {args.max_rows} rows)" if args.max_rows and
                     X.shape[0] == args.max_rows else ""), flush=True)
            for name in learners:
                ref, secs, _, gap = fit_one(name, seed, params, Xtr, ytr, Xte, yte, 0)
                refs[(set_name, name, seed)] = ref
                print(f"{set_name:9s} s{seed} {name:7s} in-memory mAP={ref:.4f} "
                      f"({secs:.2f} s)" + (f" gap={gap:.3g}" if gap is not None else ""),
                      flush=True)
                for K in ks:
                    mp, secs, steps, gap = fit_one(name, seed, params, Xtr, ytr, Xte, yte, K)
                    rows.setdefault((set_name, name, K), []).append(mp - ref)
                    st = "" if not steps else " steps=" + ",".join(f"{s:.3g}" for s in steps[:6])
                    print(f"{set_name:9s} s{seed} {name:7s} K={K:<3d} mAP={mp:.4f} "
                          f"diff={mp - ref:+.4f} ({secs:.2f} s)"
                          + (f" gap={gap:.3g}" if gap is not None else "") + st, flush=True)
    # the table: mean over seeds of partitioned - in-memory
    print()
    print("| set | learner | in-memory mAP | " + " | ".join(f"K = {k}" for k in ks)
          + f" | goal (>= -{GOAL_TOL} for K >= 2) |")
    print("|---|---|---|" + "---|" * len(ks) + "---|")
    for set_name in args.sets.split(","):
        for name in learners:
            ref = np.mean([refs[(set_name, name, s)] for s in seeds])
            means = [float(np.mean(rows[(set_name, name, k)])) for k in ks]
            ok = all(m >= -GOAL_TOL for k, m in zip(ks, means) if k >= 2)
            print(f"| {set_name} | {name} | {ref:.3f} | "
                  + " | ".join(f"{m:+.3f}" for m in means)
                  + f" | {'pass' if ok else 'miss'} |")
    print()
    print("command: OPENBLAS_NUM_THREADS=" + os.environ.get("OPENBLAS_NUM_THREADS", "?")
          + " python -m bench.bench_mixing_quality " + " ".join(shlex.quote(a) for a in
                                                                 (argv or sys.argv[1:])))
    print(f"seeds {seeds}; learner parameters: defaults"
          + (f" except {params}" if params else "")
          + (f"; mixing constants {args.set_param}" if args.set_param else "")
          + (f"; rows capped at {args.max_rows}" if args.max_rows else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
