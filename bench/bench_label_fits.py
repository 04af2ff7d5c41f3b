"""Fitted similarities of some learners at defaults with class labels on every
shared set, for comparing two trees of the code (a change that should keep the
models: the same to rounding).

Each set (all of ``bench_defaults_all``'s but dexter, letter and mnist-test) is
split 70/30 (stratified, seed 0); each learner is fitted on the 70 % with
``random_state=0`` under a 90 s alarm and its similarity over the first 200
test rows saved as ``OUT/SET_LEARNER.npy``; a line per fit goes to stdout.

Run in each tree (copy this file into the other tree's ``bench/``):
``python -m bench.bench_label_fits --out DIR [--learners SDCA OASIS ...]``, then
``python -m bench.bench_label_fits --compare DIR_A DIR_B`` prints the largest
relative difference per fit and the test mAP of both where they differ.
"""
from __future__ import annotations

import argparse
import signal
import time
import warnings
from pathlib import Path

import numpy as np

LEARNERS = ("SDCA", "OASIS", "LowRankDML", "SparseCOMET", "SCML")
SKIP = ("dexter", "letter", "mnist-test")


def _split(base):
    from sklearn.model_selection import train_test_split
    from .bench_defaults_all import load
    X, y, _ = load(base)
    tr, te = train_test_split(np.arange(X.shape[0]), test_size=0.3, stratify=y, random_state=0)
    return X, y, tr, te[:200]


def fit_all(out: Path, learners) -> None:
    import tripletml as tm
    from .bench_defaults_all import SETS
    warnings.simplefilter("ignore")
    out.mkdir(parents=True, exist_ok=True)
    for base in SETS:
        if base in SKIP:
            continue
        X, y, tr, te = _split(base)
        for name in learners:
            signal.alarm(90)
            try:
                t0 = time.perf_counter()
                m = getattr(tm, name)(random_state=0).fit(X[tr], y[tr])
                np.save(out / f"{base}_{name}.npy", m.similarity(X[te]))
                print(base, name, round(time.perf_counter() - t0, 2), getattr(m, "n_iter_", None),
                      flush=True)
            except BaseException as e:  # noqa: BLE001 - reported per fit
                print(base, name, "ERR", type(e).__name__, str(e)[:80], flush=True)
            finally:
                signal.alarm(0)


def compare(a: Path, b: Path, tol: float = 1e-9) -> None:
    from tripletml.metrics import mean_average_precision
    n, worst = 0, 0.0
    for f in sorted(a.glob("*.npy")):
        g = b / f.name
        if not g.exists():
            print("missing in", b, f.name)
            continue
        A, B = np.load(f), np.load(g)
        r = float(np.abs(A - B).max() / max(np.abs(B).max(), 1e-300))
        n, worst = n + 1, max(worst, r)
        if r > tol:
            base = f.stem.rsplit("_", 1)[0]
            _, y, _, te = _split(base)
            print(f.stem, f"{r:.2g}", "mAP", round(float(mean_average_precision(A, y[te])), 4),
                  round(float(mean_average_precision(B, y[te])), 4))
    print(n, "fits compared; largest relative difference", f"{worst:.2g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for this tree's similarities")
    ap.add_argument("--learners", nargs="+", default=list(LEARNERS))
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"))
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
    elif args.out:
        fit_all(args.out, args.learners)
    else:
        ap.error("give --out or --compare")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
