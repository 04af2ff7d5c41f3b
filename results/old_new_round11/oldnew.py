"""Fit the changed learners at defaults on every shared set (labels, 70/30 split, seed 0) with the
code of one tree; save the test similarities.  usage: oldnew.py ROOT OUTDIR"""
import sys, os, time, warnings, signal
import numpy as np
root, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, root); os.chdir(root)
warnings.simplefilter("ignore")
from bench.bench_defaults_all import load, SETS
from sklearn.model_selection import train_test_split
import tripletml as tm
os.makedirs(out, exist_ok=True)
for base in SETS:
    if base in ("dexter", "mnist-test", "letter"):
        continue
    X, y, _ = load(base)
    tr, te = train_test_split(np.arange(X.shape[0]), test_size=0.3, stratify=y, random_state=0)
    for name in ("SDCA", "OASIS", "LowRankDML", "SparseCOMET", "SCML"):
        signal.alarm(90)
        try:
            t0 = time.perf_counter()
            m = getattr(tm, name)(random_state=0).fit(X[tr], y[tr])
            S = m.similarity(X[te][:200])
            np.save(f"{out}/{base}_{name}.npy", S)
            print(base, name, round(time.perf_counter() - t0, 2), getattr(m, "n_iter_", None), flush=True)
        except BaseException as e:
            print(base, name, "ERR", type(e).__name__, str(e)[:80], flush=True)
        finally:
            signal.alarm(0)
