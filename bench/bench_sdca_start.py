"""SDCA's start on the three simulated crowd sets of bench_simulated_answers
(issue 38): ``start="zero"`` (Wu et al.) against ``start="identity"`` (the
default on answers), five ``random_state`` draws each, margins over the
cosine on held-out answers (seen items) and among unseen items.

    python -m bench.bench_sdca_start --starts zero,identity

The sets are generated as in :mod:`bench.bench_simulated_answers` (the sizes
and seeds of its three documented runs).
"""
from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

from .bench_simulated_answers import simulated_set

#: label -> (items, features, answers, flipped share, hidden dimension, seed)
SETS = {"100x1088 f15": (100, 1088, 22800, 0.15, 5, 0),
        "60x512 f25": (60, 512, 8000, 0.25, 3, 1),
        "200x2048 f10": (200, 2048, 20000, 0.10, 8, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_sdca_start",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--starts", default="zero,identity")
    ap.add_argument("--draws", type=int, default=5, help="random_state 0..draws-1")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import tripletml as t
    from tripletml.metrics import triplet_accuracy
    for label, cfg in SETS.items():
        F, T, tr, te, a, where, in_a, in_b = simulated_set(*cfg)
        base = t.Euclidean(preprocessing="normalize").fit(F, triplets=T[tr])
        cos = (triplet_accuracy(base, F, T[te]), triplet_accuracy(base, F, T[in_b]))
        for start in args.starts.split(","):
            r = []
            for rs in range(args.draws):
                seen = t.SDCA(start=start, random_state=rs).fit(F, triplets=T[tr])
                unseen = t.SDCA(start=start, random_state=rs).fit(F[a], triplets=where[T[in_a]])
                r.append((triplet_accuracy(seen, F, T[te]) - cos[0],
                          triplet_accuracy(unseen, F, T[in_b]) - cos[1]))
            r = np.array(r)
            print(f"{label:14s} start={start:8s} seen {r[:, 0].mean():+.3f} (min "
                  f"{r[:, 0].min():+.3f})  unseen {r[:, 1].mean():+.3f} (min {r[:, 1].min():+.3f})"
                  "  per draw " + " ".join(f"{x:+.3f}/{y:+.3f}" for x, y in r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
