"""SML: iterations and seconds to reach 1% of the optimum, smooth (SMLsm,
Nesterov on the smoothed saddle form) vs projected subgradient (SMLgd).

    OPENBLAS_NUM_THREADS=1 python -m bench.bench_sml [--alpha 0.01] [--iters 2000]

Per data set (standardized features, 1,500 random class triplets): the
optimum is estimated by the lowest objective any run reaches (a 3x longer
smooth run with mu = 1e-2 included); SMLsm with mu = 1 (``--mu``); SMLgd gets the best of three step sizes
(the one that reaches the 1% level first).  Also: how many iterations SMLsm
needs to reach the best objective SMLgd has after all of its iterations.
Ratios come from one run.
"""
from __future__ import annotations

import argparse

import numpy as np
from sklearn.preprocessing import StandardScaler

from tripletml import SML, datasets
from tripletml.triplets import random_class_triplets


def first_hit(obj, secs, level):
    for i, (o, s) in enumerate(zip(obj, secs)):
        if o <= level:
            return i + 1, s
    return None, None


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha", type=float, default=1e-2, help="SML's alpha (gamma in the paper)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--mu", type=float, default=1.0)
    args = ap.parse_args(argv)
    g = args.alpha
    print(f"{'data set':12s} {'method':22s} {'iters to 1%':>12s} {'seconds':>8s} {'final obj':>10s}")
    for name in ("iris", "wine"):
        b = datasets.load(name)
        X = StandardScaler().fit_transform(np.asarray(b.data, float))
        t = random_class_triplets(np.asarray(b.target), 1500, random_state=0)
        ref = SML(alpha=g, mu=1e-2, max_iter=3 * args.iters, tol=None).fit(X, triplets=t)
        sm = SML(alpha=g, mu=args.mu, max_iter=args.iters, tol=None).fit(X, triplets=t)
        xn = np.sqrt(np.sum([np.sum(
            (np.outer(X[q] - X[n], X[q] - X[n]) - np.outer(X[q] - X[p], X[q] - X[p])) ** 2)
            for q, p, n in t]))
        gds = {e: SML(alpha=g, solver="subgradient", eta0=e / xn, max_iter=args.iters,
                      tol=None).fit(X, triplets=t) for e in (0.3, 1.0, 3.0)}
        best = min(min(m.history_["objective"]) for m in [ref, sm, *gds.values()])
        level = best + 0.01 * abs(best)
        res = {}
        it, s = first_hit(sm.history_["objective"], sm.history_["seconds"], level)
        res["SMLsm"] = (it, s, sm.history_["objective"][-1])
        hits = []
        for e, m in gds.items():
            obj = np.minimum.accumulate(m.history_["objective"])
            it_e, s_e = first_hit(obj, m.history_["seconds"], level)
            hits.append((it_e if it_e else np.inf, s_e, obj[-1], e))
        it_g, s_g, f_g, e = min(hits, key=lambda h: h[0])
        res[f"SMLgd (eta0 {e:g}/||A||)"] = (None if it_g == np.inf else it_g, s_g, f_g)
        for method, (it, s, f) in res.items():
            its = f"{it}" if it else f">{args.iters}"
            secs = f"{s:.2f}" if s is not None else "-"
            print(f"{name:12s} {method:22s} {its:>12s} {secs:>8s} {f:10.3f}")
        a, b_ = res["SMLsm"][0], it_g
        ratio = (f"{b_ / a:.1f}x" if b_ != np.inf else f">{args.iters / a:.1f}x") if a else "n/a"
        print(f"{name:12s} best known objective {best:.3f}; subgradient / smooth "
              f"iterations to 1%: {ratio}")
        # the same objective as the best subgradient run after all its iterations
        target = min(min(m.history_["objective"]) for m in gds.values())
        it_s, s_s = first_hit(sm.history_["objective"], sm.history_["seconds"], target)
        if it_s:
            print(f"{name:12s} SMLsm reaches SMLgd's best after {args.iters} iterations "
                  f"({target:.3f}) in {it_s} iterations, {s_s:.2f} s: "
                  f"{args.iters / it_s:.1f}x fewer")
        else:
            print(f"{name:12s} SMLsm does not reach SMLgd's best ({target:.3f})")


if __name__ == "__main__":
    main()
