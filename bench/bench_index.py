"""Search with a learned model: exact scan vs GEMM, approximate indexes, memory.

A LORETA model (rank 25 by default) is fitted on a synthetic sparse mixture
with 50,000 features (50,000 triplets; the queries' mAP among themselves is printed: the
index is measured on embeddings that learned the classes.  ``--n-triplets
5000`` leaves the model near its random start (mAP 0.03, chance 0.02), whose
embeddings have no cluster structure: the hardest case for an approximate
index); a database of ``--n-db`` rows (default 1,000,000) from
the same mixture is embedded by the model (25 dimensions: ``x -> B^T x``) and
indexed.  Printed, all ratios measured in this one run:

* exact NumPy index (blockwise GEMM + running top k): queries per second, and
  its time over a bare GEMM of the same shape (``E_q @ E_db^T`` in blocks of
  256 queries, no selection) -- goal <= 2;
* faiss flat (exact), IVF and (``--hnsw``) HNSW: build time, QPS, recall@10
  against the exact top 10, speed-up over the faster exact search -- goal
  recall >= 0.95 at >= 20x.  IVF is run on the raw inner product and with
  ``ip_to_l2=True`` (the inner-product-to-L2 augmentation); HNSW on the raw
  inner product, or augmented with ``--ip-to-l2``;
* memory of building the exact index and searching it (tracemalloc peak of
  the NumPy allocations and the process's peak RSS) against
  ``(n_db + d) * rank * 8`` bytes and a d x d float64 matrix (20 GB).

Run: ``python -m bench.bench_index`` (``--quick``: 200,000 rows).
"""
from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp

from tripletml import LORETA
from tripletml.search.index import SimilarityIndex, build, faiss_available
from tripletml.metrics import evaluate_retrieval


def mixture(n, d, n_classes, rng, nnz_topic=20, nnz_noise=10, topic_size=300):
    """Sparse rows: ``nnz_topic`` features from the class's topic set plus
    ``nnz_noise`` uniform ones, positive weights, rows l2-normalized."""
    topics = np.random.default_rng(12345).choice(d, size=(n_classes, topic_size))
    y = rng.integers(0, n_classes, size=n)
    cols = np.concatenate([topics[y][np.arange(n)[:, None],
                                     rng.integers(0, topic_size, size=(n, nnz_topic))],
                           rng.integers(0, d, size=(n, nnz_noise))], axis=1)
    vals = rng.exponential(size=cols.shape)
    X = sp.csr_matrix((vals.ravel(), cols.ravel(),
                       np.arange(0, cols.size + 1, cols.shape[1])), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / norms) @ X
    return X.tocsr(), y


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t


def recall_at(ids, ref):
    k = ref.shape[1]
    return float(np.mean([len(set(a[a >= 0]) & set(b)) / k for a, b in zip(ids, ref)]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-db", type=int, default=1_000_000, help="database rows")
    p.add_argument("--n-features", type=int, default=50_000, help="d")
    p.add_argument("--rank", type=int, default=25, help="LORETA rank k")
    p.add_argument("--n-queries", type=int, default=1000, help="queries")
    p.add_argument("--n-train", type=int, default=5000, help="rows to fit LORETA on")
    p.add_argument("--n-triplets", type=int, default=50_000, help="LORETA triplets")
    p.add_argument("--n-classes", type=int, default=50, help="mixture components")
    p.add_argument("--nlist", type=int, default=1024, help="IVF cells")
    p.add_argument("--nprobe", type=int, nargs="+", default=[16, 64], help="IVF nprobe")
    p.add_argument("--hnsw", action="store_true", help="also build an HNSW index")
    p.add_argument("--ef-search", type=int, nargs="+", default=[64, 128], help="HNSW ef")
    p.add_argument("--hnsw-m", type=int, default=32, help="HNSW links per node (M)")
    p.add_argument("--ef-construction", type=int, default=200, help="HNSW build beam")
    p.add_argument("--ip-to-l2", action="store_true",
                   help="HNSW on the inner-product-to-L2 augmentation (default: raw IP)")
    p.add_argument("--repeats", type=int, default=3,
                   help="HNSW / exact searches alternated per ef_search (median ratio)")
    p.add_argument("--quick", action="store_true", help="200,000 database rows")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    a = p.parse_args(argv)
    if a.quick:
        a.n_db = 200_000
    rng = np.random.default_rng(a.seed)
    d, k = a.n_features, a.rank

    Xtr, ytr = mixture(a.n_train, d, a.n_classes, rng)
    model, t_fit = timed(LORETA(rank=k, eta0=0.1, n_triplets=a.n_triplets, init="random",
                                random_state=a.seed).fit, Xtr, ytr)
    Xq, yq = mixture(a.n_queries, d, a.n_classes, rng)
    Xdb, _ = mixture(a.n_db, d, a.n_classes, rng)
    map_fit = evaluate_retrieval(model, Xq, yq)["map"]
    print(f"LORETA rank {k}, d={d}: fitted on {a.n_train} rows / {a.n_triplets} triplets in "
          f"{t_fit:.1f} s; mAP of the queries among themselves {map_fit:.3f} (chance "
          f"{1 / a.n_classes:.3f}); database {a.n_db} rows "
          f"({Xdb.nnz} non-zeros), {a.n_queries} queries")

    # ---- memory: exact index build + search, O((n + d) k)
    tracemalloc.start()
    exact, t_build = timed(build, model, Xdb, backend="numpy")
    build_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    (sc_exact, ids_exact), t_exact = timed(exact.search, Xq, 10)
    search_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    bound = (a.n_db + d) * k * 8
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"exact numpy index: build {t_build:.1f} s; traced peak build {build_peak / 2**20:.0f}"
          f" MiB, search {search_peak / 2**20:.0f} MiB; (n + d) k * 8 = {bound / 2**20:.0f} MiB;"
          f" d x d float64 = {d * d * 8 / 2**30:.1f} GiB; process peak RSS "
          f"{rss / 2**30:.2f} GiB")

    # ---- exact scan vs a bare GEMM of the same shape
    Eq = model.embed_queries(Xq)
    Edb = model.embed_database(Xdb)
    buf = np.empty((256, a.n_db))
    t0 = time.perf_counter()
    for s in range(0, a.n_queries, 256):
        e = Eq[s:s + 256]
        np.dot(e, Edb.T, out=buf[:e.shape[0]])
    t_gemm = time.perf_counter() - t0
    del buf
    (_, ids2), t_exact2 = timed(exact.search, Xq, 10)
    assert np.array_equal(ids2, ids_exact)
    t_exact = min(t_exact, t_exact2)
    print(f"exact numpy search: {t_exact:.2f} s ({a.n_queries / t_exact:.0f} q/s); bare GEMM "
          f"({a.n_queries} x {Eq.shape[1]}) @ ({Eq.shape[1]} x {a.n_db}): {t_gemm:.2f} s; "
          f"ratio exact / GEMM = {t_exact / t_gemm:.2f} (goal <= 2)")
    del Edb, exact
    if not faiss_available():
        print("faiss not installed: approximate indexes skipped (pip install tripletml[index])")
        return

    flat, t_b = timed(build, model, Xdb, kind="flat", backend="faiss")
    (_, ids_f), t_flat = timed(flat.search, Xq, 10)
    print(f"faiss flat: build {t_b:.1f} s, search {t_flat:.2f} s ({a.n_queries / t_flat:.0f} "
          f"q/s), recall@10 vs numpy exact {recall_at(ids_f, ids_exact):.4f}")
    t_best = min(t_exact, t_flat)
    for aug in (False, True):
        ivf, t_b = timed(build, model, Xdb, kind="ivf", nlist=a.nlist, random_state=a.seed,
                         ip_to_l2=aug)
        print(f"faiss IVF nlist={a.nlist} ip_to_l2={aug}: build {t_b:.1f} s")
        for nprobe in a.nprobe:
            ivf.nprobe = nprobe
            (_, ids), t = timed(ivf.search, Xq, 10)
            print(f"  nprobe={nprobe:4d}: {a.n_queries / t:8.0f} q/s, recall@10 "
                  f"{recall_at(ids, ids_exact):.4f}, speed-up over the best exact "
                  f"{t_best / t:.1f}x")
        del ivf
    if a.hnsw:
        hnsw, t_b = timed(build, model, Xdb, kind="hnsw", hnsw_m=a.hnsw_m,
                          ef_construction=a.ef_construction, ip_to_l2=a.ip_to_l2)
        print(f"faiss HNSW M={a.hnsw_m} efC={a.ef_construction} ip_to_l2={a.ip_to_l2}: "
              f"build {t_b:.1f} s")
        # the load of a shared machine changes within seconds: each HNSW
        # search is timed --repeats times, alternating with the exact faiss
        # flat search, and the ratio of the two medians is reported
        for ef in a.ef_search:
            hnsw.ef_search = ef
            t_h, t_f = [], []
            for _ in range(a.repeats):
                (_, ids), t = timed(hnsw.search, Xq, 10)
                t_h.append(t)
                t_f.append(timed(flat.search, Xq, 10)[1])
            th, tf = float(np.median(t_h)), float(np.median(t_f))
            print(f"  ef_search={ef:4d}: {a.n_queries / th:8.0f} q/s, recall@10 "
                  f"{recall_at(ids, ids_exact):.4f}; exact faiss flat alternated with it "
                  f"{a.n_queries / tf:.0f} q/s: speed-up {tf / th:.1f}x "
                  f"(over the run's best exact {t_best / th:.1f}x)")


if __name__ == "__main__":
    main()
