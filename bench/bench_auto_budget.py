"""Wall time of ``AutoSimilarity`` against its ``time_budget`` on wide sparse data.

Issue 26, item 7: ``AutoSimilarity(time_budget=20)`` on a 300 x 20,000 sparse
matrix (density 0.002, five classes) must stay within its budget.  This
script fits the default race on that matrix (the shape, density and budget
are options), prints the wall time, the stop reason, the winner and every
candidate skipped for its dense d x d work (``skipped_``), and exits 1 when
the wall time exceeds the budget.

    python -m bench.bench_auto_budget [--n 300] [--d 20000] [--density 0.002]
                                      [--classes 5] [--time-budget 20] [--seed 0]
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
    a = ap.parse_args(argv)
    X = sp.random(a.n, a.d, density=a.density, format="csr", random_state=a.seed)
    y = np.arange(a.n) % a.classes
    t0 = time.perf_counter()
    auto = AutoSimilarity(time_budget=a.time_budget, random_state=a.seed).fit(X, y)
    wall = time.perf_counter() - t0
    print(f"X: {a.n} x {a.d} CSR, density {a.density}, {a.classes} classes; "
          f"time_budget={a.time_budget:g} s")
    print(f"wall time {wall:.2f} s (refit {auto.refit_time_:.3f} s), stop_reason_ "
          f"{auto.stop_reason_!r}, winner {auto.best_params_}, validation mAP "
          f"{auto.best_score_:.4f}")
    print(f"{len(auto.cv_results_['candidate'])} rows in cv_results_, "
          f"{len(auto.skipped_)} fit(s) skipped:")
    for s in auto.skipped_:
        print(f"  round {s['round']}: {s['params']}: {s['reason']}")
    return 0 if wall <= a.time_budget else 1


if __name__ == "__main__":
    sys.exit(main())
