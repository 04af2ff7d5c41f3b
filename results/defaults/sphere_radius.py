"""The chosen lift, the sphere of radius s0 (results/defaults/sphere_variants.md,
column radius s0), written out by hand: learners with preprocessing=None on
tripletml.preprocessing.sphere_lift(standardised rows, s0).

    PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 python results/defaults/sphere_radius.py iris \
        OASIS,SDCA,COMET,SparseCOMET,LORETA,IterativePA,NaivePA,FactoredGD
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import tripletml  # noqa: E402
from _protocol import load_set, split  # noqa: E402
from tripletml.metrics import evaluate_retrieval  # noqa: E402
from tripletml.preprocessing import sphere_lift  # noqa: E402

warnings.simplefilter("ignore")
name, learners = sys.argv[1], sys.argv[2].split(",")
X, y = load_set(name)
X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, float)
res = {}
for seed in range(3):
    Xtr, Xte, ytr, yte = split(X, y, seed)
    mu = Xtr.mean(0)
    sd = Xtr.std(0)
    sd[sd == 0] = 1
    Ztr, Zte = (Xtr - mu) / sd, (Xte - mu) / sd
    s0 = np.median(np.linalg.norm(Ztr, axis=1))
    Ltr, Lte = sphere_lift(Ztr, s0), sphere_lift(Zte, s0)      # rows of norm s0
    for cls in learners:
        m = getattr(tripletml, cls)(random_state=seed, preprocessing=None).fit(Ltr, ytr)
        res.setdefault(cls, []).append(evaluate_retrieval(m, Lte, yte)["map"])
for cls in learners:
    print(name, f"{cls:12s}", f"radius-s0:{np.mean(res[cls]):.3f}", flush=True)
