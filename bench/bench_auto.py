"""AutoSimilarity against metric-learn's best learner per set (issue 14).

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_auto [--sets iris,wine]
        [--seeds 0,1,2] [--floor] [-o results/auto/auto.md]

Protocol (``bench/_protocol.py``, as ``bench/bench_peers.py``): per data set
and seed a stratified 70/30 split, an untimed warm-up fit on 50 rows (Numba
compiles its kernels), ``AutoSimilarity(random_state=seed).fit`` on the
training part (wall seconds and CPU seconds of the process), the
test-vs-test retrieval mAP.  letter runs seed 0 only (as the peer benchmark).
The peer columns are copied from results/peers/peers.md (metric-learn 0.7.0,
one BLAS thread); "before" is AutoSimilarity before KISSME joined its race
(the peer run of commit d5bfdc6).  Run it with
``OPENBLAS_NUM_THREADS=1`` (the peers ran single-threaded).

``--scoring knn_accuracy`` races with ``scoring="knn_accuracy"`` and
reports the test 1-NN accuracy (each test row labeled by its most similar
training row under the winner's ``similarity``) against the Euclidean
distance's, for the default race (``DEFAULT_CANDIDATES``, "before") and
the k-NN race (``tripletml.auto.KNN_CANDIDATES``, the neighbourhood
learners added).

``--floor`` measures the cheapest search that still validates,
``tripletml.auto.FAST_CANDIDATES``: Euclidean raw / standardized / whitened
and OASIS (sphere, whitened) on one fit/validation split, with the
refit of the winner.
The same script measures an older checkout (``PYTHONPATH=<old tree>``; its
AutoSimilarity has no ``stage``): results/auto/auto_before.md is the tree
before the cost-aware schedule (commit 660bdce) in this harness.
Public names only.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import Counter

import numpy as np

import tripletml

try:
    from ._protocol import DEFAULT_SETS, load_set, retrieval_map, split, warm_up
except ImportError:          # run as a file: python bench/bench_auto.py
    from _protocol import DEFAULT_SETS, load_set, retrieval_map, split, warm_up

#: metric-learn's best learner per set (mAP, fit seconds) from
#: results/peers/peers.md (the run with tripletml's ITML, commit 4a6aa5a), and AutoSimilarity before
#: KISSME joined its race (mAP, fit seconds; the peer run of commit d5bfdc6)
PEERS = {
    "vehicle": ("ITML", .558, 3.00, .685, .342),
    "vowel": ("ITML", .370, 24.3, .429, .429),
    "svmguide4": ("RCA", .456, .00997, .576, .430),
    "segment": ("ITML", .804, 10.9, .811, .944),
    "letter": ("RCA", .325, .0288, .357, 2.27),
    "balance-scale": ("NCA", .740, .517, .875, .200),
    "ionosphere": ("ITML", .738, .0455, .873, .467),
    "iris": ("ITML", .977, 1.37, .967, .352),
    "wine": ("ITML", .946, 1.91, .962, .273),
    "digits": ("ITML", .792, 19.0, .796, 1.52),
}

def _make(floor: bool):
    def make(seed):
        if floor:
            from tripletml.auto import FAST_CANDIDATES
            return tripletml.AutoSimilarity(candidates=FAST_CANDIDATES, random_state=seed)
        return tripletml.AutoSimilarity(random_state=seed)
    return make


def knn1_accuracy(model, Xtr, ytr, Xte, yte) -> float:
    """Test 1-NN accuracy: each test row takes the label of its most similar
    training row under ``model.similarity`` (None: the Euclidean distance)."""
    if model is None:
        from sklearn.neighbors import KNeighborsClassifier
        return float(KNeighborsClassifier(1).fit(Xtr, ytr).score(Xte, yte))
    S = np.asarray(model.similarity(Xte, Xtr))
    return float(np.mean(np.asarray(ytr)[np.argmax(S, axis=1)] == np.asarray(yte)))


def run_knn(X, y, seed: int, candidates) -> dict:
    """One seed of the k-NN race: fit seconds, test 1-NN accuracy, winner."""
    Xtr, Xte, ytr, yte = split(X, y, seed)
    make = (lambda s: tripletml.AutoSimilarity(candidates=candidates, scoring="knn_accuracy",
                                               random_state=s))
    warm_up(make, Xtr, ytr, seed)
    model = make(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model.fit(Xtr, ytr)
        wall = time.perf_counter() - t0
    bp = model.best_params_
    win = bp["learner"] + (f"/{bp['preprocessing']}" if "preprocessing" in bp else "")
    return {"acc": knn1_accuracy(model, Xtr, ytr, Xte, yte), "wall": wall, "win": win,
            "euclid": knn1_accuracy(None, Xtr, ytr, Xte, yte), "stop": model.stop_reason_}


def main_knn(sets, seeds, output, argv) -> int:
    from tripletml.auto import DEFAULT_CANDIDATES
    from tripletml.auto.candidates import KNN_CANDIDATES
    head = ("| set | Euclidean 1-NN | default race 1-NN (wall s) | k-NN race 1-NN (wall s) "
            "| k-NN race >= Euclidean | winners of the k-NN race (seeds) |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    print(lines[0], flush=True)
    for ds in sets:
        X, y = load_set(ds)
        sd = seeds[:1] if ds == "letter" else seeds
        before = [run_knn(X, y, s, DEFAULT_CANDIDATES) for s in sd]
        after = [run_knn(X, y, s, KNN_CANDIDATES) for s in sd]
        e = np.mean([r["euclid"] for r in after])
        b, bw = np.mean([r["acc"] for r in before]), np.mean([r["wall"] for r in before])
        a, aw = np.mean([r["acc"] for r in after]), np.mean([r["wall"] for r in after])
        line = (f"| {ds}{' (1 seed)' if len(sd) == 1 else ''} | {e:.4f} | {b:.4f} ({bw:.2f}) "
                f"| {a:.4f} ({aw:.2f}) | {'yes' if a >= e - 1e-12 else 'no'} | "
                f"{', '.join(r['win'] + ('' if r['stop'] == 'max_iter' else ' [' + r['stop'] + ']') for r in after)} |")
        lines.append(line)
        print(line, flush=True)
    if output:
        with open(output, "a") as fh:
            fh.write(f"\n`{' '.join(['python', '-m', 'bench.bench_auto', *(argv or sys.argv[1:])])}`"
                     f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                     f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
                     f"load average at the end {os.getloadavg()[0]:.1f} on "
                     f"{os.cpu_count()} cores, tripletml {tripletml.__file__})\n\n")
            fh.write("\n".join(lines) + "\n")
    return 0


def run(make, X, y, seed: int) -> dict:
    Xtr, Xte, ytr, yte = split(X, y, seed)
    warm_up(make, Xtr, ytr, seed)
    model = make(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0, t0 = time.process_time(), time.perf_counter()
        model.fit(Xtr, ytr)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = model.cv_results_
    stage = res.get("stage", np.zeros(len(res["candidate"]), dtype=int))  # older trees: none
    stages = Counter(int(s) for s, sc in zip(stage, res["mean_validation_score"])
                     if np.isfinite(sc))
    bp = model.best_params_
    win = bp["learner"] + (f"/{bp['preprocessing']}" if "preprocessing" in bp else "")
    return {"map": retrieval_map(model, Xte, yte), "wall": wall, "cpu": cpu, "win": win,
            "fits_by_stage": dict(sorted(stages.items())), "refit": model.refit_time_}


def _fmt_t(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(DEFAULT_SETS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--floor", action="store_true",
                    help="the cheapest validated search (Euclidean x3 + OASIS x2)")
    ap.add_argument("--scoring", default="map", choices=["map", "knn_accuracy"],
                    help="knn_accuracy: the k-NN race against Euclidean's test 1-NN accuracy")
    ap.add_argument("-o", "--output", default=None, help="append the table (markdown) here")
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.scoring == "knn_accuracy":
        return main_knn(sets, seeds, args.output, argv)
    head = ("| set | peer (mAP, fit) | auto before (mAP, fit) | auto now mAP | wall s "
            "| CPU s | mAP >= peer | time <= peer | winners (seeds) | fits per stage |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    print(lines[0], flush=True)
    for ds in sets:
        X, y = load_set(ds)
        sd = seeds[:1] if ds == "letter" else seeds
        runs = [run(_make(args.floor), X, y, s) for s in sd]
        m = np.mean([r["map"] for r in runs])
        wall = np.mean([r["wall"] for r in runs])
        cpu = np.mean([r["cpu"] for r in runs])
        peer, pm, pt, bm, bt = PEERS.get(ds, ("?", np.nan, np.nan, np.nan, np.nan))
        line = (f"| {ds} | {peer} {pm:.3f} ({_fmt_t(pt)}) | {bm:.3f} ({_fmt_t(bt)}) | "
                f"{m:.4f}{' (1 seed)' if len(sd) == 1 else ''} | {wall:.3f} | {cpu:.3f} | "
                f"{'yes' if m >= pm else 'no'} | {'yes' if wall <= pt else 'no'} | "
                f"{', '.join(r['win'] for r in runs)} | "
                f"{'; '.join(str(r['fits_by_stage']) for r in runs)} |")
        lines.append(line)
        print(line, flush=True)
    if args.output:
        with open(args.output, "a") as fh:
            fh.write(f"\n`{' '.join(['python', '-m', 'bench.bench_auto', *(argv or sys.argv[1:])])}`"
                     f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                     f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
                     f"load average at the end {os.getloadavg()[0]:.1f} on "
                     f"{os.cpu_count()} cores, "
                     f"tripletml {tripletml.__file__})\n\n")
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
