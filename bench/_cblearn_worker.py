"""cblearn side of ``bench.bench_zappos_cblearn``: run inside cblearn's own
virtual environment (``~/.cache/tripletml/cblearn-venv``), never imports
tripletml or anything else from this repository.

Usage (by the parent only)::

    CBLEARN_PYTHON bench/_cblearn_worker.py --data DIR --fold F --dims 2 5 10 \
        --seeds 0 1 2 --timeout 120 --skip '["SOE|torch"]' --out FILE.json
    CBLEARN_PYTHON bench/_cblearn_worker.py --versions

``DIR`` holds ``train_F.npy`` and ``test_F.npy`` (int64 triplets
``(head, close, far)``, ``close`` judged nearer to ``head``: cblearn's
``list-order`` format).  For every ordinal-embedding estimator of
``cblearn.embedding`` (the subclasses of its ``TripletEmbeddingMixin``), the
default backend and, where the estimator has a ``backend`` parameter whose
default is not ``"torch"``, also ``backend="torch"``; each at its defaults
except ``n_components`` and ``random_state`` (``fit`` gets ``n_objects`` where
it takes it: data, not a hyperparameter).  MLDS only supports
``n_components=1`` and runs at 1 only.

Per (variant, dim): one untimed warm-up fit on the first 300 training
triplets with ``max_iter=3`` (Numba / torch first-call costs), then one timed
fit per seed.  A fit longer than ``--timeout`` seconds is interrupted
(``SIGALRM``) and recorded as ``timeout``; variants named in ``--skip`` (they
timed out before) are not run.  The output JSON holds one record per fit with
the embedding (the parent scores it, the same formula for both libraries),
cblearn's own ``score`` on the test triplets (a cross-check), the fit seconds
and a status.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import sys
import time
import traceback
import warnings

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

N_ITEMS = 85
WARMUP_ROWS = 300
WARMUP_ITER = 3


def versions() -> dict:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for dist in ("cblearn", "numpy", "scipy", "torch", "scikit-learn", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except Exception:       # noqa: BLE001 - reported as missing
            out[dist] = None
    return out


def variants() -> list[tuple[str, str, type, dict]]:
    """(class name, backend label, class, extra kwargs) for every CPU-runnable
    ordinal embedding in cblearn.embedding."""
    import cblearn.embedding as E
    from cblearn.embedding._base import TripletEmbeddingMixin
    out = []
    for name in sorted(dir(E)):
        cls = getattr(E, name)
        if not (inspect.isclass(cls) and issubclass(cls, TripletEmbeddingMixin)):
            continue
        params = inspect.signature(cls).parameters
        if "backend" in params:
            default = params["backend"].default
            out.append((name, default, cls, {}))
            if default != "torch":
                out.append((name, "torch", cls, {"backend": "torch"}))
        else:
            src = inspect.getsource(inspect.getmodule(cls))
            out.append((name, "torch" if "torch" in src else "default", cls, {}))
    return out


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _fit(cls, kw: dict, T: np.ndarray):
    est = cls(**kw)
    if "n_objects" in inspect.signature(est.fit).parameters:
        return est.fit(T, n_objects=N_ITEMS)
    return est.fit(T)


def run(data: str, fold: int, dims: list[int], seeds: list[int], timeout: float,
        skip: set[str], torch_dims: list[int] | None = None,
        torch_seeds: list[int] | None = None) -> list[dict]:
    """Fit every variant on fold ``fold``; the added torch backends (not the
    estimators whose default is torch) at ``torch_dims`` x ``torch_seeds``
    (default: ``dims`` x ``seeds``; an empty list runs none)."""
    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    tr = np.load(os.path.join(data, f"train_{fold}.npy"))
    te = np.load(os.path.join(data, f"test_{fold}.npy"))
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    for name, backend, cls, extra in variants():
        key = f"{name}|{backend}"
        v_dims = dims if not extra or torch_dims is None else torch_dims
        v_seeds = seeds if not extra or torch_seeds is None else torch_seeds
        for d in ([1] if name == "MLDS" else v_dims):
            label = f"{name} (cblearn, torch)" if extra else f"{name} (cblearn)"
            base = {"method": label, "backend": backend, "dim": d, "fold": fold}
            if key in skip:
                rows += [{**base, "seed": s, "status": "skipped",
                          "message": f"timed out (> {timeout:g} s) earlier in this run"}
                         for s in v_seeds]
                continue
            try:        # warm-up, untimed
                _fit(cls, {**extra, "n_components": d, "random_state": 0,
                           "max_iter": WARMUP_ITER}, tr[:WARMUP_ROWS])
            except Exception:   # noqa: BLE001 - the timed fit reports errors
                pass
            for s in v_seeds:
                row = {**base, "seed": s}
                t0 = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, timeout)
                try:
                    est = _fit(cls, {**extra, "n_components": d, "random_state": s}, tr)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    row["fit_s"] = time.perf_counter() - t0
                    Y = np.asarray(est.embedding_, dtype=float)
                    row["embedding"] = Y.tolist()
                    try:
                        row["lib_accuracy"] = float(est.score(te))
                    except Exception as exc:     # noqa: BLE001
                        row["lib_accuracy"] = None
                        row["message"] = f"score failed: {exc!r}"[:300]
                    row["status"] = "ok"
                except _Timeout:
                    row.update(status="timeout", fit_s=time.perf_counter() - t0,
                               message=f"fit interrupted after {timeout:g} s")
                except Exception as exc:         # noqa: BLE001
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    row.update(status="error", fit_s=time.perf_counter() - t0,
                               message=(repr(exc) + " | "
                                        + traceback.format_exc().splitlines()[-2])[:400])
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                rows.append(row)
                print(f"[cblearn worker] fold {fold} {name} ({backend}) {d}-D seed {s}: "
                      f"{row['status']} {row.get('fit_s', 0):.2f} s", file=sys.stderr, flush=True)
                if row["status"] == "timeout":
                    skip.add(key)
                    rows += [{**base, "seed": s2, "status": "skipped",
                              "message": f"timed out (> {timeout:g} s) earlier in this run"}
                             for s2 in v_seeds if s2 > s]
                    break
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", action="store_true")
    ap.add_argument("--data")
    ap.add_argument("--fold", type=int)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--skip", default="[]")
    ap.add_argument("--torch-dims", type=int, nargs="*", default=None)
    ap.add_argument("--torch-seeds", type=int, nargs="*", default=None)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.versions:
        print(json.dumps(versions()))
        return 0
    rows = run(a.data, a.fold, a.dims, a.seeds, a.timeout, set(json.loads(a.skip)),
               a.torch_dims, a.torch_seeds)
    with open(a.out, "w") as fh:
        json.dump({"versions": versions(), "rows": rows}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
