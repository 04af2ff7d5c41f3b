"""Few rows, many features (issue 38 section 3), the pair/closed-form
learners: fit seconds of ITML, MMC, LowRankDML and KISSME at defaults on
57 x 4,096 zappos rows and 70 x 1,088 synthetic rows, and KISSME's
``shrinkage="auto"`` against the fixed 0.01 on zappos unseen shoes.

Reuses :mod:`bench.bench_span_route` (data, forked capped fits, CPU seconds)
and :mod:`bench.bench_zappos_unseen` (the unseen-items protocol); nothing
copied.  Run with one BLAS thread per process (the fits' matrices are 57-70
wide, where threads only contend on a loaded machine)::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 TRIPLETML_DATA=/work/shared/data \\
        python -m bench.bench_span_routes [times] [kissme] [--seeds 0 1 2] [--out DIR]

``times``: one line per (data, learner): wall and CPU seconds (the fit's
process, all threads), status.  ``kissme``: per seed, test-test and
test-head accuracy minus the cosine's for ``shrinkage="auto"`` and 0.01, and
the chosen ``shrinkage_``.  Lines go to stdout and ``OUT/span_routes.txt``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "span_routes"
LEARNERS = ("ITML", "MMC", "LowRankDML", "KISSME")


def section_times(emit, timeout: float) -> None:
    from bench.bench_span_route import fit_capped, synth_rows, zappos_rows

    for data, (Xtr, T, Xall) in (("zappos-l2 57x4096", zappos_rows(True)),
                                 ("synth 70x1088", synth_rows())):
        for name in LEARNERS:
            status, dt, _, note = fit_capped(name, "span", Xtr, T, Xall, timeout)
            emit(f"times  {data:18s} {name:11s} {status:8s} wall {dt:7.2f} s  {note}")


def section_kissme(emit, seeds, out: Path) -> None:
    from bench.bench_zappos_unseen import SETS, Runner, item_similarity, score_sets
    from tripletml import KISSME, Euclidean

    R = Runner(out, 300.0, 20000)        # the 20,000 train triplets per seed
    for seed in seeds:
        sp = R.split(seed)
        tr, _ = sp["items"]
        sets = {k: sp[k] for k in SETS}
        cos = score_sets(item_similarity(Euclidean(preprocessing="normalize")
                                         .fit(R.X[tr], triplets=sp["train"]), R.X), R.X, sets)
        for sh in ("auto", 0.01):
            est = KISSME(shrinkage=sh, random_state=seed).fit(R.X[tr], triplets=sp["train"])
            acc = score_sets(item_similarity(est, R.X), R.X, sets)
            emit(f"kissme seed {seed} shrinkage={sh!s:5s} shrinkage_={est.shrinkage_:.4g} "
                 + " ".join(f"{k} {acc[k]:.4f} ({acc[k] - cos[k]:+.4f} vs cosine)" for k in SETS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sections", nargs="*", default=["times", "kissme"],
                    choices=["times", "kissme"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fh = open(args.out / "span_routes.txt", "a")

    def emit(line: str) -> None:
        print(line, flush=True)
        fh.write(line + "\n")
        fh.flush()

    emit(f"# load {tuple(round(v, 1) for v in os.getloadavg())} "
         f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    if "times" in args.sections:
        section_times(emit, args.timeout)
    if "kissme" in args.sections:
        section_kissme(emit, args.seeds, args.out)
    fh.close()
    return 0


if __name__ == "__main__":      # pragma: no cover
    raise SystemExit(main())
