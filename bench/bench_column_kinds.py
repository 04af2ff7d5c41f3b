"""Type-aware preprocessing scale vs the current ``"auto"`` (issue 27, item 2).

For each data set: a stratified 70/30 split (seed 0; test rows capped at
1000), test-vs-test retrieval mAP (``tripletml.metrics.evaluate_retrieval``)
of OASIS, LORETA, IterativePA, LowRankDML, KISSME and the Euclidean baseline,
each with

* ``none``   -- ``preprocessing=None``;
* ``auto``   -- the current ``"auto"``: ``"sphere"`` for the bilinear learners,
  ``"standardize"`` for the Mahalanobis ones (and for Euclidean, whose
  ``"auto"`` would be None: the standardized Euclidean distance);
* ``typed``  -- the same mode with the per-column standard deviation replaced
  by :func:`tripletml.core.column_kinds.type_aware_scale` (and, on sets with
  binary indicators, also with ``binary="pooled"``).

Emulation of ``typed``: ``"standardize"`` and ``"sphere"`` take their divisor
from ``tripletml.core.preprocessing._mean_std(X)`` (``scale = 1 / std``, columns
constant to rounding kept at 1; the sphere radius is then the median norm of
the rows divided by that scale).  :func:`typed_scale` replaces that one
function, for the duration of a fit, by one returning the true column mean
and the type-aware divisor computed on the same training X: the learner then
runs exactly what an integrated type-aware "auto" would (same centering, same
radius rule, same lift), only the divisor differs.  ``transform`` at test time
uses the fitted statistics, so the patch is needed only during ``fit``.

Run: ``TRIPLETML_DATA=/work/shared/data python -m bench.bench_column_kinds
[SET ...] [--seed N]`` from the repository root (default: every set, seed 0).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder

import tripletml
import tripletml.core.preprocessing as tp
from tripletml.core.column_kinds import column_kinds, type_aware_scale
from tripletml.metrics import evaluate_retrieval

DATA = os.environ.get("TRIPLETML_DATA", "/work/shared/data")
SETS = ("semeion", "car", "optdigits", "mnist", "wine-red", "vehicle", "segment", "digits")
LEARNERS = ("Euclidean", "OASIS", "LORETA", "IterativePA", "LowRankDML", "KISSME")
BILINEAR = {"OASIS", "LORETA", "IterativePA"}
MAX_TEST = 1000


def load(name: str):
    """``(X, y)`` of one benchmark set as a dense float array."""
    if name == "semeion":
        D = np.loadtxt(os.path.join(DATA, "semeion/semeion.data"))
        return D[:, :256], D[:, 256:].argmax(axis=1)
    if name == "car":
        rows = [line.strip().split(",") for line in open(os.path.join(DATA, "car/car.data"))
                if line.strip()]
        A = np.array(rows, dtype=object)
        X = OneHotEncoder().fit_transform(A[:, :6]).toarray()
        return X, A[:, 6].astype(str)
    if name == "optdigits":
        D = np.loadtxt(os.path.join(DATA, "optdigits/optdigits.tra"), delimiter=",")
        return D[:, :-1], D[:, -1].astype(int)
    if name == "mnist":
        with gzip.open(os.path.join(DATA, "mnist-test/t10k-images-idx3-ubyte.gz")) as f:
            X = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
        with gzip.open(os.path.join(DATA, "mnist-test/t10k-labels-idx1-ubyte.gz")) as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)
        return X[:2000].astype(float), y[:2000].astype(int)
    if name == "wine-red":
        D = np.loadtxt(os.path.join(DATA, "wine-quality/winequality-red.csv"), delimiter=";",
                       skiprows=1)
        return D[:, :-1], D[:, -1].astype(int)
    if name == "digits":
        b = load_digits()
        return b.data.astype(float), b.target
    b = tripletml.datasets.load(name)
    X = b.data.toarray() if hasattr(b.data, "toarray") else np.asarray(b.data, float)
    return X, np.asarray(b.target)


@contextlib.contextmanager
def typed_scale(binary: str = "amplitude"):
    """Within the block, "standardize" / "sphere" divide by the type-aware
    scale instead of the column std (see the module docstring)."""
    original = tp._mean_std

    def patched(X):
        mean, _ = original(X)
        div, _ = type_aware_scale(X, column_kinds(X), binary=binary)
        return mean, div

    tp._mean_std = patched
    try:
        yield
    finally:
        tp._mean_std = original


def run(name: str, seed: int = 0) -> None:
    X, y = load(name)
    test = min(0.3, MAX_TEST / X.shape[0])
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test, stratify=y, random_state=seed)
    kinds = column_kinds(Xtr)
    _, summary = type_aware_scale(Xtr, kinds)
    print(f"\n## {name} (seed {seed}): {Xtr.shape[0]} train / {Xte.shape[0]} test rows, {X.shape[1]} columns")
    print(f"kinds: {kinds.counts()}")
    print(f"decision: {summary}")
    print("| learner | None | current auto | type-aware | typed - auto "
          "| type-aware, binary='pooled' |")
    print("|---|---|---|---|---|---|")
    has_ind = "binary" in summary
    for lname in LEARNERS:
        cls = getattr(tripletml, lname)
        mode = "sphere" if lname in BILINEAR else "standardize"
        out = {}
        variants = [("none", None), ("auto", mode), ("typed", mode)]
        if has_ind:
            variants.append(("pooled", mode))
        for variant, pre in variants:
            kw = {"random_state": seed} if "random_state" in cls().get_params() else {}
            model = cls(preprocessing=pre, **kw)
            ctx = (typed_scale() if variant == "typed" else typed_scale("pooled")
                   if variant == "pooled" else contextlib.nullcontext())
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings(), ctx:
                    warnings.simplefilter("ignore")
                    model.fit(Xtr, ytr)
                out[variant] = float(evaluate_retrieval(model, Xte, yte, k=())["map"])
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                print(f"<!-- {lname} {variant}: {type(exc).__name__}: {exc} -->")
                out[variant] = float("nan")
            out[variant + "_s"] = time.perf_counter() - t0
        print(f"| {lname} ({mode}) | {out['none']:.3f} | {out['auto']:.3f} | "
              f"{out['typed']:.3f} | {out['typed'] - out['auto']:+.3f} | "
              f"{out.get('pooled', float('nan')):.3f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_column_kinds",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("sets", nargs="*",
                        metavar="SET", help=f"data sets (default: all of {', '.join(SETS)})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.sets or SETS:
        if name not in SETS:
            parser.error(f"unknown set {name!r}; choose from {', '.join(SETS)}")
        run(name, args.seed)


if __name__ == "__main__":
    main()
