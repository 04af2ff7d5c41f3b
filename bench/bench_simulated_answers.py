"""Every triplet learner at its defaults on simulated crowd answers about
items with network-like features: a check on data of another form than the
shared sets (issue 38: "judged on data you will never see").

100 items; a hidden 5-D configuration ``Z`` decides the answers; the items'
1,088 features are ``max(0, 0.5 Z A + noise)`` (non-negative, ReLU-like, so
``preprocessing="auto"`` takes them for a network's features and
normalizes them); 22,800 answers ``(head, close, far)`` by the hidden
distances with 15 % flipped (the size of the crowd set the issue quotes).
Seen protocol: the answers split 80/20, all items known.  Unseen: items
split 70/30, fit on the answers among the 70, scored on the answers among
the 30.  Baselines: the cosine and raw Euclidean.  Each learner runs in its
own process with a wall cap (two fits).

Run: ``python -m bench.bench_simulated_answers [LEARNER ...] [--cap 300]``
(default: every registry triplet learner and AutoSimilarity); prints one
JSON line per learner (kept in ``results/simulated_answers/``).  Other
sets of the same form: ``--items 60 --features 512 --answers 8000 --flip
0.25 --dims 3 --seed 1`` (the defaults are the set above: 100, 1088, 22800,
0.15, 5, 0); 80 % of the answers are seen, 70 % of the items known.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

def simulated_set(n: int, d: int, m: int, flip: float, k: int, seed: int):
    """The set: rows ``F``, answers ``T`` and the splits -- the seen
    protocol's answer indices ``tr``, ``te``; the known items ``a`` (sorted),
    ``where`` (an item's row among them, -1 for the others) and the masks of
    the answers among the known items ``in_a`` and among the others ``in_b``."""
    import numpy as np
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, k))
    F = np.maximum(0, Z @ rng.normal(size=(k, d)) * 0.5 + rng.normal(size=(n, d)))
    T = np.array([rng.choice(n, 3, replace=False) for _ in range(m)])
    closer = ((Z[T[:, 0]] - Z[T[:, 1]]) ** 2).sum(1) < ((Z[T[:, 0]] - Z[T[:, 2]]) ** 2).sum(1)
    keep = closer ^ (rng.random(len(T)) < flip)
    T[~keep] = T[~keep][:, [0, 2, 1]]
    perm = rng.permutation(len(T))
    tr, te = perm[:int(0.8 * m)], perm[int(0.8 * m):]
    items = rng.permutation(n)
    n_a = int(0.7 * n)
    a, b = np.sort(items[:n_a]), np.sort(items[n_a:])
    where = np.full(n, -1)
    where[a] = np.arange(n_a)
    return F, T, tr, te, a, where, np.isin(T, a).all(1), np.isin(T, b).all(1)


_ONE = r'''
import json, sys, time, warnings
warnings.simplefilter("ignore")
import tripletml as t
from tripletml.metrics import triplet_accuracy
from bench.bench_simulated_answers import simulated_set
name = sys.argv[1]
F, T, tr, te, a, where, in_a, in_b = simulated_set(*json.loads(sys.argv[2]))
make = (lambda: t.AutoSimilarity(random_state=0)) if name == "AutoSimilarity" else getattr(t, name)
out = {"learner": name}
for label, base in (("cosine", t.Euclidean(preprocessing="normalize")),
                    ("Euclidean", t.Euclidean())):
    base.fit(F, triplets=T[tr])
    out[label] = [round(triplet_accuracy(base, F, T[te]), 4),
                  round(triplet_accuracy(base, F, T[in_b]), 4)]
t0 = time.perf_counter()
seen = make().fit(F, triplets=T[tr])
out["fit_s"] = round(time.perf_counter() - t0, 2)
unseen = make().fit(F[a], triplets=where[T[in_a]])
out["seen, unseen"] = [round(triplet_accuracy(seen, F, T[te]), 4),
                       round(triplet_accuracy(unseen, F, T[in_b]), 4)]
print(json.dumps(out))
'''


def _learners() -> list[str]:
    from tripletml.registry import entries
    return [e.name for e in entries("triplet")] + ["AutoSimilarity"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("learners", nargs="*", help="registry names (default: all)")
    ap.add_argument("--cap", type=float, default=300.0, help="wall seconds per learner")
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--features", type=int, default=1088)
    ap.add_argument("--answers", type=int, default=22800)
    ap.add_argument("--flip", type=float, default=0.15, help="share of answers flipped")
    ap.add_argument("--dims", type=int, default=5, help="the hidden configuration's dimension")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cfg = json.dumps([args.items, args.features, args.answers, args.flip, args.dims, args.seed])
    for name in args.learners or _learners():
        t0 = time.time()
        try:
            r = subprocess.run([sys.executable, "-c", _ONE, name, cfg], cwd=REPO,
                               capture_output=True,
                               text=True, timeout=args.cap)
            lines = (r.stdout.strip() or r.stderr.strip() or "no output").splitlines()
            line = lines[-1]
        except subprocess.TimeoutExpired:
            line = f"{name}: over {args.cap:.0f} s (two fits)"
        print(f"{time.time() - t0:6.1f}s {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
