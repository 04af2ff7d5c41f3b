"""What checkpoints cost a partitioned fit (issue 41 section 4).

For each learner of the gradient-sum strategy (LowRankDML, SML) and of
parameter mixing (OASIS, for comparison), the wall seconds of
``fit_partitioned`` on an in-process collection without a checkpoint
directory and with one written every ``--every`` rounds, alternated
``--repeats`` times, and the size of the checkpoint folder.  A ratio of 1.00
means checkpoints are free.

    python -m bench.bench_checkpoint_cost [--rows 20000] [--d 32] [--every 1 10]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings

import numpy as np


def _collection(rows: int, d: int, parts: int, seed: int = 0):
    from tripletml.distributed.sharded import ShardedCollection
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, d)) * np.linspace(0.5, 2.0, d)
    y = rng.integers(0, 10, rows)
    return ShardedCollection.from_arrays(X, y, n_partitions=parts)


def _learners(d: int) -> dict:
    import tripletml as tm
    return {
        "LowRankDML": lambda: tm.LowRankDML(max_iter=300, tol=None, n_triplets=20000,
                                            random_state=0),
        "SML": lambda: tm.SML(max_iter=60, tol=None, n_triplets=5000, random_state=0),
        "OASIS": lambda: tm.OASIS(max_iter=5, tol=None, n_triplets=20000, random_state=0),
    }


def _size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--every", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--learners", nargs="+", default=None)
    args = ap.parse_args(argv)
    from tripletml.distributed.partitioned import fit_partitioned
    warnings.simplefilter("ignore")
    coll = _collection(args.rows, args.d, args.partitions)
    makers = _learners(args.d)
    names = args.learners or list(makers)
    print(f"# {args.rows} rows x {args.d}, {args.partitions} partitions, in process; "
          f"load {os.getloadavg()[0]:.2f}")
    print("learner,every,rounds,seconds_plain,seconds_checkpoints,ratio,checkpoint_bytes")
    for name in names:
        make = makers[name]
        fit_partitioned(make(), coll)                 # compile and warm up
        for every in args.every:
            plain, ck, size, rounds = [], [], 0, 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                est = fit_partitioned(make(), coll)
                plain.append(time.perf_counter() - t0)
                rounds = est.n_iter_
                tmp = tempfile.mkdtemp(prefix="tripletml-ckpt-")
                try:
                    t0 = time.perf_counter()
                    fit_partitioned(make(), coll, checkpoint_dir=tmp, checkpoint_every=every)
                    ck.append(time.perf_counter() - t0)
                    size = _size(tmp)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            a, b = float(np.median(plain)), float(np.median(ck))
            print(f"{name},{every},{rounds},{a:.3f},{b:.3f},{b / a:.3f},{size}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
