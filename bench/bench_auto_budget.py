"""Wall time of ``AutoSimilarity`` against its ``time_budget`` on wide sparse data.

Issue 26, item 7: ``AutoSimilarity(time_budget=20)`` on a 300 x 20,000 sparse
matrix (density 0.002, five classes) must stay within its budget.  This
script fits the default race on that matrix (the shape, density and budget
are options), prints the wall time, the stop reason, the winner and every
candidate skipped for its dense d x d work (``skipped_``), and exits 1 when
the wall time exceeds the budget.

    python -m bench.bench_auto_budget [--n 300] [--d 20000] [--density 0.002]
                                      [--classes 5] [--time-budget 20] [--seed 0]

``--data dexter`` races on the shared dexter set instead (300 x 20,000
sparse counts; any set of ``bench.bench_defaults_all`` by its name: 70 % of
its rows, a stratified split at ``--split-seed``;
``TRIPLETML_DATA`` or ``../shared/data``), ``--scoring knn_accuracy`` races
for 1-NN accuracy (three validation splits).  Each fit of a candidate is
logged with its start and duration.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp

from tripletml import AutoSimilarity


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="rows (default 300)")
    ap.add_argument("--d", type=int, default=20_000, help="features (default 20000)")
    ap.add_argument("--density", type=float, default=0.002, help="default 0.002")
    ap.add_argument("--classes", type=int, default=5, help="default 5")
    ap.add_argument("--time-budget", type=float, default=20.0, help="seconds (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="random_state (default 0)")
    ap.add_argument("--data", default="synthetic",
                    help="synthetic (default) or a shared set of bench_defaults_all (dexter, ...)")
    ap.add_argument("--split-seed", type=int, default=0, help="dexter's split (default 0)")
    ap.add_argument("--scoring", default="map", help="the race's scoring (default map)")
    a = ap.parse_args(argv)
    if a.data != "synthetic":
        from sklearn.model_selection import train_test_split
        from bench.bench_defaults_all import load
        X, y, _ = load(a.data)
        X, _, y, _ = train_test_split(X, y, test_size=0.3, random_state=a.split_seed,
                                      stratify=y)
        what = (f"{a.data}: {X.shape[0]} x {X.shape[1]} {'CSR' if sp.issparse(X) else 'dense'} "
                f"(70 %, split seed {a.split_seed})")
    else:
        X = sp.random(a.n, a.d, density=a.density, format="csr", random_state=a.seed)
        y = np.arange(a.n) % a.classes
        what = f"X: {a.n} x {a.d} CSR, density {a.density}, {a.classes} classes"
    import tripletml.auto.race as race
    real, t0 = race._run_job, time.perf_counter()

    def logged(cand, *args, **kw):
        t = time.perf_counter()
        res = real(cand, *args, **kw)
        if res is not None:
            print(f"  fit of {cand.name} {cand.describe(args[4])}: started at "
                  f"{t - t0:.1f} s, took {time.perf_counter() - t:.1f} s", flush=True)
        return res

    race._run_job = logged
    try:
        auto = AutoSimilarity(time_budget=a.time_budget, random_state=a.seed,
                              scoring=a.scoring).fit(X, y)
    finally:
        race._run_job = real
    wall = time.perf_counter() - t0
    print(f"{what}; time_budget={a.time_budget:g} s, scoring {a.scoring}")
    print(f"wall time {wall:.2f} s (refit {auto.refit_time_:.3f} s), stop_reason_ "
          f"{auto.stop_reason_!r}, winner {auto.best_params_}, validation score "
          f"{auto.best_score_:.4f}")
    print(f"{len(auto.cv_results_['candidate'])} rows in cv_results_, "
          f"{len(auto.skipped_)} fit(s) skipped:")
    for s in auto.skipped_:
        print(f"  round {s.get('round', '-')}: {s['params']}: {s['reason']}")
    return 0 if wall <= a.time_budget else 1


if __name__ == "__main__":
    sys.exit(main())
