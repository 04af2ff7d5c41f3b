"""Where the factored learners start (issue 43): the five-Gaussian-classes
case of the issue, each factored learner from ``init="identity"`` (the
paper's ``[I_k; 0]`` on the first live axes) and from ``init="pca"`` (the
top-k principal directions of the preprocessed rows, the default).

Usage (from the repository root)::

    python -m bench.bench_factored_start [--seeds 0,1,2]

Data: 5 classes, class means N(0, 0.35^2 I) in 200 features plus N(0, I)
noise, 800 rows, the first 500 for training, test-vs-test mAP
(:func:`tripletml.metrics.validation_score`).  Prints one line per
(seed, learner, setting, init) with mAP and fit seconds.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def gaussian_classes(seed: int):
    rng = np.random.default_rng(seed)
    y = np.arange(800) % 5
    rng.shuffle(y)
    X = rng.normal(size=(5, 200))[y] * 0.35 + rng.normal(size=(800, 200))
    return X[:500], y[:500], X[500:], y[500:]


def main(argv=None) -> None:
    import tripletml as tm
    from tripletml.metrics import validation_score
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args(argv)
    settings = [("LORETA", dict(rank=8, n_triplets=20000, preprocessing=None)),
                ("LORETA", {}), ("IterativePA", {}), ("NaivePA", {}), ("FactoredGD", {})]
    for seed in [int(s) for s in args.seeds.split(",")]:
        Xtr, ytr, Xte, yte = gaussian_classes(seed)
        for base in ("DotProduct", "Euclidean"):
            print(f"seed {seed} {base:12s} mAP {validation_score(getattr(tm, base)().fit(Xtr), Xte, yte):.3f}",
                  flush=True)
        for name, kw in settings:
            for init in ("identity", "pca"):
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = getattr(tm, name)(init=init, random_state=seed, **kw).fit(Xtr, ytr)
                secs = time.perf_counter() - t0
                print(f"seed {seed} {name:12s} {str(kw):55s} init={init:8s} rank {est.rank_:2d} "
                      f"mAP {validation_score(est, Xte, yte):.3f} fit {secs:.1f} s", flush=True)


if __name__ == "__main__":
    main()
