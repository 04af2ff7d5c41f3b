"""Every triplet learner with its DEFAULTS against no learning (issue 14).

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_defaults [--sets vehicle,iris]
        [--seeds 0,1,2] [--learners OASIS,SML] [-o results/defaults/defaults.md]
        [--before results/defaults/defaults_standardize.md]

Protocol (``bench/_protocol.py``): per data set and seed, a stratified 70/30
split, ``fit`` on the training part with only ``random_state=seed`` set, the
test-vs-test retrieval mAP (``tripletml.metrics.evaluate_retrieval``) and the
fit seconds.  The table gives the mean over the seeds; a learner is flagged
(``*``) when its mean mAP is below Euclidean's, or below DotProduct's for a
bilinear learner (``tripletml.BilinearMixin``).  ``--before TABLE`` (a
table this script wrote earlier) adds its mAP as a column, the change, and
the number of flagged pairs before and after.  The
``preprocessing_`` each learner fits (what its default resolves to on the
set, ``tripletml.core.preprocessing.resolve_preprocessing``) is a column.  Public names only.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import tripletml
from tripletml.core.preprocessing import resolve_preprocessing

try:
    from ._protocol import BASELINES, DEFAULT_SETS, load_set, run_one, triplet_learners
except ImportError:          # run as a file: python bench/bench_defaults.py
    from _protocol import BASELINES, DEFAULT_SETS, load_set, run_one, triplet_learners


def _make(cls):
    def make(seed):
        params = cls().get_params()
        return cls(random_state=seed) if "random_state" in params else cls()
    return make


def read_table(path: str) -> dict:
    """``{(set, learner): (mAP, flagged)}`` of a table written by this script."""
    out = {}
    with open(path) as fh:
        for line in fh:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 8 and cells[0] not in ("set", "---"):
                try:
                    out[(cells[0], cells[1])] = (float(cells[2]), cells[7] == "*")
                except ValueError:
                    continue
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(DEFAULT_SETS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--learners", default=None,
                    help="comma-separated class names (baselines always run)")
    ap.add_argument("-o", "--output", default=None, help="write the table (markdown) here")
    ap.add_argument("--before", default=None,
                    help="an earlier table of this script: add its mAP and flag count")
    args = ap.parse_args(argv)
    before = read_table(args.before) if args.before else {}
    sets = [s for s in args.sets.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    learners = triplet_learners()
    names = list(learners)
    if args.learners:
        wanted = [n for n in args.learners.split(",") if n]
        unknown = set(wanted) - set(names)
        if unknown:
            ap.error(f"unknown learners {sorted(unknown)}; known: {names}")
        names = list(BASELINES) + [n for n in wanted if n not in BASELINES]
    rows, flags = [], []
    for ds in sets:
        X, y = load_set(ds)
        res = {}
        for name in names:
            runs = [run_one(_make(learners[name]), X, y, seed) for seed in seeds]
            model = _make(learners[name])(seeds[0])
            prep = str(resolve_preprocessing(model.get_params()["preprocessing"], X, model))
            maps = np.array([r["map"] for r in runs])
            secs = np.array([r["seconds"] for r in runs])
            errs = [r["error"] for r in runs if r["error"]]
            res[name] = (float(np.mean(maps)), float(np.std(maps)), float(np.mean(secs)), errs,
                         prep)
            print(f"{ds:14s} {name:12s} mAP {res[name][0]:.3f} +- {res[name][1]:.3f}  "
                  f"fit {res[name][2]:7.2f} s" + (f"  ERROR {errs[0]}" if errs else ""),
                  flush=True)
        eu, dp = res["Euclidean"][0], res["DotProduct"][0]
        for name in names:
            m, s, t, errs, prep = res[name]
            bilinear = issubclass(learners[name], tripletml.BilinearMixin)
            below = [b for b, v in (("Euclidean", eu), ("DotProduct", dp))
                     if name not in BASELINES and (b == "Euclidean" or bilinear)
                     and not (m >= v)]
            if below:
                flags.append(f"{ds}: {name} {m:.3f} below {' and '.join(below)}")
            rows.append((ds, name, m, s, t, eu, dp, "*" if below else "",
                         "error" if errs else "", prep))
    cmd = "python -m bench.bench_defaults " + " ".join(argv if argv is not None
                                                        else sys.argv[1:])
    lines = [f"Command: `{cmd.strip()}`  ",
             f"tripletml {tripletml.__version__}, seeds {seeds}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}; mAP = test-vs-test retrieval mAP, mean "
             "(s.d.) over the seeds; fit seconds mean; `*` = below Euclidean (or below "
             "DotProduct for a bilinear learner).", "",
             "| set | learner | mAP | s.d. | fit s | Euclidean | DotProduct | below | note "
             "| preprocessing_ | before | change |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ds, name, m, s, t, eu, dp, flag, note, prep in rows:
        b = before.get((ds, name))
        old = f"{b[0]:.3f}{' *' if b[1] else ''}" if b else ""
        change = f"{m - b[0]:+.3f}" if b else ""
        lines.append(f"| {ds} | {name} | {m:.3f} | {s:.3f} | {t:.2f} | {eu:.3f} | {dp:.3f} | "
                     f"{flag} | {note} | {prep} | {old} | {change} |")
    lines += ["", f"Below no learning: {len(flags)}"] + [f"- {f}" for f in flags]
    if before:
        n_before = sum(1 for (ds, name), (_, f) in before.items() if f and ds in sets
                       and name in names)
        lines += ["", f"Before ({args.before}): {n_before} flagged pairs on these sets and "
                  f"learners; now {len(flags)}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
