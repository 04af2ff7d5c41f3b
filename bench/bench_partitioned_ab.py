"""Partitioned fits of two code trees, alternated in one run (issue 41).

    python -m bench.bench_partitioned_ab --before /tmp/before --after . \
        --learner OASIS --triplets 1000000 --reps 2

Checks out nothing itself: ``--before`` and ``--after`` are two checkouts
(``git worktree add /tmp/before REV``).  Each rep runs, for each tree in
turn, one fresh process that fits the learner on the speed-up benchmark's
in-memory collection (200,000 rows x 32, 8 partitions, 2 passes,
``preprocessing=None``, one BLAS thread) in process, on a 1-worker and on a
2-worker ``LocalCluster`` (the cluster forced), and prints the wall seconds
of ``fit``.  Alternating the trees within each rep keeps a shared machine's
changing load from favouring either; the table gives each rep's ratio
before / after and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COLUMNS = ("in-process", "1w", "2w")


def one(tree: str, learner: str, triplets: int) -> dict:
    """Time one tree in a fresh process (its own imports)."""
    code = f"""
import os, sys, time, json, warnings
warnings.simplefilter("ignore")
os.environ["TRIPLETML_PARTITIONED_BACKEND"] = "cluster"
from bench.bench_distributed import memory_collection, make_learner, warm_learners, _cluster_spec
from tripletml.distributed.dask_search import use_cluster
import tripletml
assert tripletml.__file__.startswith({tree!r}), tripletml.__file__
if __name__ == "__main__":
    coll = memory_collection(0, 200_000, 32, 8, "float32")
    warm_learners([{learner!r}], 32)
    out = {{}}
    m = make_learner({learner!r}, n_triplets={triplets}, passes=2, seed=0, preprocessing=None)
    t0 = time.perf_counter(); m.fit(coll); out["in-process"] = time.perf_counter() - t0
    for w in (1, 2):
        with use_cluster(_cluster_spec(w)) as client:
            client.run(warm_learners, [{learner!r}], 32)
            m = make_learner({learner!r}, n_triplets={triplets}, passes=2, seed=0,
                             preprocessing=None)
            t0 = time.perf_counter(); m.fit(coll); out[f"{{w}}w"] = time.perf_counter() - t0
    print("RESULT" + json.dumps(out))
"""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": tree}
    with open(os.devnull, "w") as null:
        res = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, text=True,
                             stdout=subprocess.PIPE, stderr=null, check=True)
    line = [s for s in res.stdout.splitlines() if s.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_partitioned_ab",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=".")
    ap.add_argument("--learner", default="OASIS")
    ap.add_argument("--triplets", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    print(f"{args.learner}, {args.triplets:,} triplets; load at start: {os.getloadavg()}")
    rows = []
    for rep in range(args.reps):
        got = {k: one(t, args.learner, args.triplets) for k, t in trees.items()}
        rows.append(got)
        print(f"rep {rep + 1}: " + "; ".join(
            f"{c} {got['before'][c]:.2f} -> {got['after'][c]:.2f} s "
            f"({got['before'][c] / got['after'][c]:.2f}x)" for c in COLUMNS), flush=True)
    print("| | " + " | ".join(f"{c} before s | {c} after s | ratio" for c in COLUMNS) + " |")
    print("|---" * (1 + 3 * len(COLUMNS)) + "|")
    med = {k: {c: statistics.median(r[k][c] for r in rows) for c in COLUMNS} for k in trees}
    print(f"| median of {len(rows)} | " + " | ".join(
        f"{med['before'][c]:.2f} | {med['after'][c]:.2f} | {med['before'][c] / med['after'][c]:.2f}"
        for c in COLUMNS) + " |")
    print(f"load at end: {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
