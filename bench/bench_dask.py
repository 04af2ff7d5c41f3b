"""Embed and evaluate a big synthetic collection through Dask, 1 vs 2 workers.

The collection (``--rows`` rows, ``--dim`` features, ``--classes`` labels) is
generated partition by partition *on the workers* (a loader per partition:
seeded Gaussian class means plus noise); it never exists whole in one
process.  A model (OASIS) is fitted on a small sample, then for 1 and 2
worker processes (one thread each, a memory limit per worker):

* embedding: ``tripletml.distributed.sharded.embed`` reduced on the workers (sum of
  squares of every partition's embeddings, so nothing is gathered);
* evaluation: ``tripletml.distributed.sharded.evaluate_retrieval`` of ``--queries``
  queries drawn from the collection (leave-one-out), full-ranking mAP and
  P@10.

Printed: seconds, rows/s, and the peak RSS of every worker process (sampled
by a thread on each worker), and the 2-vs-1 worker speed ratio.

    python -m bench.bench_dask --rows 10000000          # the issue's size
    python -m bench.bench_dask --rows 1000000 --queries 100   # quicker
"""
from __future__ import annotations

import argparse
import functools
import threading
import time

import numpy as np


def make_partition(seed: int, part: int, rows: int, dim: int, classes: int):
    """Partition ``part`` of the synthetic collection: (X, y)."""
    means = np.random.default_rng([seed, 10**9]).normal(size=(classes, dim))
    rng = np.random.default_rng([seed, part])
    y = rng.integers(0, classes, rows)
    X = means[y] + rng.normal(size=(rows, dim))
    return X, y


def _sumsq(E):
    return float(np.einsum("ij,ij->", E, E))


def _start_sampler(dask_worker):
    """Sample this worker process's RSS every 50 ms (peak kept on the worker)."""
    import psutil
    dask_worker.tml_peak = [0]

    def loop():
        p = psutil.Process()
        for _ in range(10**7):                       # bounded (~6 days)
            dask_worker.tml_peak[0] = max(dask_worker.tml_peak[0], p.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=loop, daemon=True).start()
    return True


def _peak(dask_worker):
    return dask_worker.tml_peak[0]


def run(n_workers: int, args, model, coll, Xq, yq, qids):
    import dask
    import dask.array as da  # noqa: F401
    from distributed import Client, LocalCluster

    from tripletml.distributed import sharded
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           memory_limit=args.memory_limit, dashboard_address=None)
    client = Client(cluster)
    try:
        client.run(_start_sampler)
        with dask.config.set(scheduler=client.get):
            t0 = time.perf_counter()
            E = sharded.embed(model, coll)
            total = E.map_blocks(lambda b: np.array([[_sumsq(b)]]), chunks=(1, 1),
                                 dtype=float).sum().compute()
            t_embed = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = sharded.evaluate_retrieval(model, coll, Xq, yq, k=(10,), query_ids=qids,
                                             query_block=args.queries)
            t_eval = time.perf_counter() - t0
        peaks = client.run(_peak)
    finally:
        client.close()
        cluster.close()
    return {"workers": n_workers, "embed_s": t_embed, "embed_rows_s": args.rows / t_embed,
            "eval_s": t_eval, "eval_query_rows_s": args.rows * len(yq) / t_eval,
            "peak_rss_mb": sorted(v / 2**20 for v in peaks.values()), "sumsq": total, **res}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partition-rows", type=int, default=250_000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--classes", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--memory-limit", default="1GiB", help="per worker")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from tripletml import OASIS
    from tripletml.distributed.sharded import ShardedCollection
    sizes = [min(args.partition_rows, args.rows - s) for s in range(0, args.rows,
                                                                     args.partition_rows)]
    loaders = [functools.partial(make_partition, args.seed, i, n, args.dim, args.classes)
               for i, n in enumerate(sizes)]
    coll = ShardedCollection.from_loaders(loaders, sizes)
    Xs, ys = make_partition(args.seed, 0, min(20000, sizes[0]), args.dim, min(args.classes, 50))
    model = OASIS(C=0.1, n_triplets=20000, random_state=0).fit(Xs, ys)
    # queries: the first rows of the first partition (leave-one-out)
    X0, y0 = loaders[0]()
    Xq, yq, qids = X0[:args.queries], y0[:args.queries], np.arange(args.queries)
    del X0, y0
    print(f"{args.rows} rows x {args.dim} in {len(sizes)} partitions of <= "
          f"{args.partition_rows}; {args.classes} classes; {args.queries} queries; "
          f"memory limit {args.memory_limit}/worker", flush=True)
    out = []
    for w in (1, 2):
        r = run(w, args, model, coll, Xq, yq, qids)
        out.append(r)
        print(f"workers {w}: embed {r['embed_s']:.1f} s ({r['embed_rows_s']:.3g} rows/s), "
              f"evaluate {r['eval_s']:.1f} s ({r['eval_query_rows_s']:.3g} query-rows/s), "
              f"peak RSS per worker {[round(v) for v in r['peak_rss_mb']]} MB, "
              f"mAP {r['map']:.4f}, P@10 {r['precision_at_10']:.4f}", flush=True)
    assert out[0]["map"] == out[1]["map"] and out[0]["sumsq"] == out[1]["sumsq"]
    print(f"speed ratio 2 vs 1 worker: embed {out[0]['embed_s'] / out[1]['embed_s']:.2f}x, "
          f"evaluate {out[0]['eval_s'] / out[1]['eval_s']:.2f}x (results identical)")


if __name__ == "__main__":
    main()
