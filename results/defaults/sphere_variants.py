"""Variants of the lift (results/defaults/sphere_variants.md, columns unit k / const / W=I).

    PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 python results/defaults/sphere_variants.py OUT.jsonl iris wine ...
"""
import sys, json, numpy as np, warnings, time
import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from _protocol import load_set, split
import tripletml
from tripletml.metrics import evaluate_retrieval
warnings.simplefilter("ignore")
def stereo(Z, s):
    U = Z / s
    n2 = (U**2).sum(1, keepdims=True)
    return np.hstack([2*U, n2 - 1]) / (n2 + 1)
def const(Z, s):
    return np.hstack([Z, np.full((Z.shape[0], 1), s)]) / np.sqrt((Z**2).sum(1, keepdims=True) + s*s)
VARIANTS = [("st0.5", stereo, .5), ("st1", stereo, 1.), ("st2", stereo, 2.), ("c1", const, 1.)]
LEARNERS = ["OASIS", "SDCA", "COMET", "SparseCOMET", "LORETA", "IterativePA", "NaivePA", "FactoredGD"]
out = sys.argv[1]
for name in sys.argv[2:]:
    X, y = load_set(name)
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, float)
    res = {}
    t0 = time.time()
    for seed in range(3):
        Xtr, Xte, ytr, yte = split(X, y, seed)
        mu = Xtr.mean(0); sd = Xtr.std(0); sd[sd == 0] = 1
        Ztr, Zte = (Xtr-mu)/sd, (Xte-mu)/sd
        s0 = np.median(np.linalg.norm(Ztr, axis=1))
        for vn, f, k in VARIANTS:
            Ltr, Lte = f(Ztr, k*s0), f(Zte, k*s0)
            res.setdefault(f"W=I|{vn}", []).append(evaluate_retrieval(tripletml.DotProduct().fit(Ltr, ytr), Lte, yte)["map"])
            for cls in LEARNERS:
                try:
                    m = getattr(tripletml, cls)(random_state=seed, preprocessing=None).fit(Ltr, ytr)
                    v = evaluate_retrieval(m, Lte, yte)["map"]
                except Exception as e:
                    v = float("nan")
                res.setdefault(f"{cls}|{vn}", []).append(v)
    r = {k: float(np.mean(v)) for k, v in res.items()}
    with open(out, "a") as fh:
        fh.write(json.dumps({"set": name, "res": r, "secs": time.time()-t0}) + "\n")
    print(name, round(time.time()-t0), flush=True)
