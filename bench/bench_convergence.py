"""Do the learners converge at their DEFAULTS? (issue 27, "Converged defaults")

    TRIPLETML_DATA=/work/shared/data OPENBLAS_NUM_THREADS=1 \\
        python -m bench.bench_convergence [--sets ionosphere,wine] [--seeds 0,1,2]
        [--learners COMET,SML] [-o results/convergence/convergence.md]

For every registered triplet learner (``tripletml.learner_names("triplet")``;
the multilabel learners take a label matrix and are not part of the retrieval
protocol) at its defaults -- only ``random_state=seed`` set -- on every shared
data set, per seed: the stratified 70/30 split of ``bench/_protocol.py``,
``fit`` on the training part with the warnings recorded, the test-vs-test
retrieval mAP (``tripletml.metrics.evaluate_retrieval``).  One row per
(set, learner): how many of the seeds raised a ``ConvergenceWarning``, the
``stop_reason_`` values, the mean ``n_iter_``, the mean fit seconds (after an
untimed warm-up fit, so Numba compilation is not timed) and the mean mAP.

Data sets: the registered ones (``tripletml.datasets.load`` with
``TRIPLETML_DATA``; ``letter`` stratified-subsampled to 3000 rows for speed;
``iris``, ``wine``, ``digits`` from scikit-learn) and the raw-typed sets of
the shared data folder read here with numpy: ``semeion`` (256 binary pixels,
one-hot label), ``optdigits`` (``optdigits.tra``, 64 counts + label),
``wine-quality`` (the red wines, label = quality), ``mnist-test`` (gzipped
IDX, stratified-subsampled to 2000 rows) and ``car`` (six categorical
columns one-hot encoded with ``sklearn.preprocessing.OneHotEncoder``).
Public names only.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

import tripletml

try:
    from ._protocol import DEFAULT_SETS, load_set, retrieval_map, split, warm_up
except ImportError:          # run as a file: python bench/bench_convergence.py
    from _protocol import DEFAULT_SETS, load_set, retrieval_map, split, warm_up

RAW_SETS = ("semeion", "optdigits", "wine-quality", "mnist-test", "car")
ALL_SETS = DEFAULT_SETS + RAW_SETS
#: row caps (stratified subsample with a fixed seed) for speed
ROW_CAPS = {"letter": 3000, "mnist-test": 2000}


def _data_home() -> Path:
    env = os.environ.get("TRIPLETML_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_raw(name: str):
    """``(X, y)`` of one raw-typed shared set, read with numpy."""
    home = _data_home()
    if name == "semeion":
        a = np.loadtxt(home / "semeion" / "semeion.data")
        return a[:, :256].astype(float), a[:, 256:].argmax(1)
    if name == "optdigits":
        a = np.loadtxt(home / "optdigits" / "optdigits.tra", delimiter=",")
        return a[:, :-1].astype(float), a[:, -1].astype(int)
    if name == "wine-quality":
        a = np.loadtxt(home / "wine-quality" / "winequality-red.csv", delimiter=";", skiprows=1)
        return a[:, :-1], a[:, -1].astype(int)
    if name == "mnist-test":
        X = _read_idx(home / "mnist-test" / "t10k-images-idx3-ubyte.gz").reshape(-1, 784)
        y = _read_idx(home / "mnist-test" / "t10k-labels-idx1-ubyte.gz").astype(int)
        return X.astype(float), y
    if name == "car":
        from sklearn.preprocessing import OneHotEncoder
        rows = [ln.strip().split(",") for ln in open(home / "car" / "car.data") if ln.strip()]
        a = np.array(rows, dtype=object)
        X = OneHotEncoder(sparse_output=False).fit_transform(a[:, :-1])
        _, y = np.unique(a[:, -1].astype(str), return_inverse=True)
        return X.astype(float), y
    raise ValueError(f"unknown raw set {name!r}")


def get_set(name: str):
    """``(X, y)`` of any set of :data:`ALL_SETS` (row caps applied)."""
    X, y = load_raw(name) if name in RAW_SETS else load_set(name)
    cap = ROW_CAPS.get(name)
    if cap is not None and X.shape[0] > cap:
        idx, _ = train_test_split(np.arange(X.shape[0]), train_size=cap, stratify=y,
                                  random_state=0)
        X, y = X[np.sort(idx)], y[np.sort(idx)]
    return X, y


def _mean(values) -> float:
    """Mean of the finite values (NaN when there is none, without a warning)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def _make(cls):
    def make(seed):
        return cls(random_state=seed) if "random_state" in cls().get_params() else cls()
    return make


def run_recorded(make, X, y, seed: int) -> dict:
    """One seed: split, warm up, fit with the warnings recorded, score."""
    Xtr, Xte, ytr, yte = split(X, y, seed)
    warm_up(make, Xtr, ytr, seed)
    model = make(seed)
    out = {"warned": False, "stop": "-", "n_iter": np.nan, "seconds": np.nan,
           "map": np.nan, "error": None}
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            t0 = time.perf_counter()
            model.fit(Xtr, ytr)
            out["seconds"] = time.perf_counter() - t0
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:120]
            return out
    out["warned"] = any(issubclass(w.category, ConvergenceWarning) for w in rec)
    out["stop"] = getattr(model, "stop_reason_", "-")
    out["n_iter"] = getattr(model, "n_iter_", np.nan)
    out["map"] = retrieval_map(model, Xte, yte)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(ALL_SETS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--learners", default=None, help="comma-separated class names")
    ap.add_argument("-o", "--output", default=None, help="write the table (markdown) here")
    args = ap.parse_args(argv)
    names = tripletml.learner_names("triplet")
    if args.learners:
        wanted = [n for n in args.learners.split(",") if n]
        unknown = set(wanted) - set(names)
        if unknown:
            ap.error(f"unknown learners {sorted(unknown)}; known: {names}")
        names = wanted
    sets = [s for s in args.sets.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    lines = ["| set | learner | warned | stop_reason_ | n_iter_ | fit s | mAP |",
             "|---|---|---|---|---|---|---|"]
    print(lines[0])
    print(lines[1])
    n_warn = n_runs = 0
    for ds in sets:
        X, y = get_set(ds)
        for name in names:
            make = _make(getattr(tripletml, name))
            res = [run_recorded(make, X, y, s) for s in seeds]
            errs = [r["error"] for r in res if r["error"]]
            w = sum(r["warned"] for r in res)
            n_warn += w
            n_runs += len(res)
            stops = ",".join(sorted({str(r["stop"]) for r in res}))
            row = (f"| {ds} | {name} | {w}/{len(res)} | {stops} | "
                   f"{_mean([r['n_iter'] for r in res]):.1f} | "
                   f"{_mean([r['seconds'] for r in res]):.2f} | "
                   f"{_mean([r['map'] for r in res]):.4f} |")
            if errs:
                row += f" error: {errs[0]}"
            lines.append(row)
            print(row, flush=True)
    summary = f"ConvergenceWarnings: {n_warn} of {n_runs} default fits"
    print(summary)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(
            "Default fits (issue 27): ConvergenceWarning per seed, stop reason, mean n_iter_, "
            f"mean fit seconds, mean test mAP; seeds {seeds}; letter subsampled to 3000 rows, "
            "mnist-test to 2000.\n\n" + "\n".join(lines) + f"\n\n{summary}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
