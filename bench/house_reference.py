"""Fitted results of every registry learner along every fit path, to check a
restructuring changes nothing (issue 37).

``python -m bench.house_reference write DIR`` fits every case and writes
``DIR/reference.npz`` (the arrays) and ``DIR/reference.json`` (``n_iter_``,
``stop_reason_``, ``history_`` without its wall-clock column, the model
file's members and a SHA-256 of every array's bytes);
``python -m bench.house_reference compare DIR`` fits again and prints every
difference (bit for bit), exit status 1 when there is one;
``python -m bench.house_reference add DIR`` records the cases the reference
lacks (a new learner's) and keeps the recorded ones as they were.

``tests/test_house_reference.py`` compares the committed reference in
``tests/data/`` to a tolerance and factors up to their rotation (another
machine's BLAS or LAPACK rounds differently and picks other bases for equal
singular values); this script is the bit-for-bit check.
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np

from tripletml.registry import entries

#: learners whose fit is a pure function of pairs
PAIR_LEARNERS = ("ITML", "KISSME", "MMC", "RCA", "OASIS")


def toy(seed: int = 0, n: int = 36, d: int = 6):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, d)) + y[:, None]
    return X, y


def toy_multilabel(seed: int = 0, n: int = 36, d: int = 6, n_labels: int = 4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = (X[:, :1] + rng.normal(size=(n, n_labels)) > 0).astype(int)
    Y[np.arange(n), np.arange(n) % n_labels] = 1
    return X, Y


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray) and v.dtype == object:
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, np.ndarray):
        return {"array": v.dtype.str, "shape": list(v.shape),
                "sha": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v).hex()
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    return repr(type(v).__name__)


def _model_members(est) -> dict:
    """The members of the model file: JSON meta as text, arrays by hash."""
    from tripletml.persistence import save_model
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.npz"
        try:
            save_model(est, path)
        except (TypeError, ValueError, NotImplementedError) as exc:
            return {"unsaved": type(exc).__name__}
        out = {}
        with zipfile.ZipFile(path) as zf:
            for name in sorted(zf.namelist()):
                data = zf.read(name)
                if name.startswith("__meta__"):
                    meta = json.loads(np.load(io.BytesIO(data), allow_pickle=False).tobytes()
                                      .decode("utf-8").rstrip("\x00")) \
                        if name.endswith(".npy") else data.decode("utf-8", "replace")
                    if isinstance(meta, dict):
                        _drop_clock(meta.get("attributes", {}))
                    out[name] = json.dumps(meta, sort_keys=True, default=str)
                else:
                    out[name] = hashlib.sha256(data).hexdigest()[:16]
        return out


def _drop_clock(attrs: dict) -> None:
    """Wall-clock values out of model-file attributes (they differ per run)."""
    for name in list(attrs):
        if _is_clock(name):
            del attrs[name]
        elif isinstance(attrs[name], dict):
            _drop_clock(attrs[name])


def _is_clock(name: str) -> bool:
    return any(w in name for w in ("seconds", "time"))


def record(est) -> tuple[dict, dict]:
    """(arrays, meta) of a fitted estimator."""
    arrays, meta = {}, {}
    for name in sorted(vars(est)):
        if not name.endswith("_") or name.startswith("_") or _is_clock(name):
            continue
        value = getattr(est, name)
        if isinstance(value, dict):
            value = dict(value)
            _drop_clock(value)
            meta[name] = _jsonable(value)
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            arrays[name] = value
            meta[name] = _jsonable(value)
        elif hasattr(value, "toarray"):
            arrays[name] = value.toarray()
            meta[name] = _jsonable(arrays[name])
        else:
            meta[name] = _jsonable(value)
    meta["__model__"] = _model_members(est)
    return arrays, meta


def _cases():
    """(case name, zero-argument function returning a fitted estimator)."""
    from tripletml.distributed.sharded import ShardedCollection
    X, y = toy()
    for e in entries("triplet"):
        for i, tid in enumerate(e.test_ids()):
            yield f"{tid}/labels", lambda e=e, i=i: e.make(i).fit(X, y)
            est0 = e.make(i)
            if "preprocessing" in est0.get_params():
                yield f"{tid}/raw", lambda e=e, i=i: e.make(i, preprocessing=None).fit(X, y)
        rng = np.random.default_rng(1)
        T = _class_triplets(y, rng, 150)
        yield f"{e.name}/triplets", lambda e=e, T=T: e.make(0).fit(X, triplets=T)
        if e.name in PAIR_LEARNERS:
            P, s = _pairs(y, np.random.default_rng(2), 120)
            yield f"{e.name}/pairs", lambda e=e, P=P, s=s: e.make(0).fit(X[P], s)
        # every triplet learner trains on partitions (its own strategy or a sample)
        yield f"{e.name}/partitioned", lambda e=e: e.make(0).fit(
            ShardedCollection.from_arrays(X, y, n_partitions=3))
        if hasattr(e.cls, "partial_fit"):
            def stream(e=e):
                from tripletml.distributed.streaming import fit_stream
                shards = [(X[:18], y[:18]), (X[18:], y[18:])]
                return fit_stream(e.make(0), shards, n_triplets_per_shard=60, batch_size=20)
            yield f"{e.name}/stream", stream
    Xm, Ym = toy_multilabel()
    for e in entries("multilabel"):
        yield f"{e.name}/labels", lambda e=e: e.make(0).fit(Xm, Ym)
    yield from _embedding_cases()
    yield from _auto_cases(X, y)


def _embedding_cases():
    from tripletml import embedding
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(20, 2))
    T = []
    for _ in range(300):
        a, b, c = rng.choice(20, 3, replace=False)
        da, db = np.sum((pts[a] - pts[b]) ** 2), np.sum((pts[a] - pts[c]) ** 2)
        T.append((a, b, c) if da < db else (a, c, b))
    T = np.asarray(T)
    for name in ("SOE", "STE", "TSTE"):
        cls = getattr(embedding, name)
        yield f"{name}/triplets", lambda cls=cls: cls(n_components=2, random_state=0).fit(T)


def _auto_cases(X, y):
    from tripletml import AutoSimilarity
    yield "AutoSimilarity/labels", lambda: AutoSimilarity(random_state=0, time_budget=3600).fit(X, y)
    rng = np.random.default_rng(4)
    T = _class_triplets(y, rng, 400)
    yield "AutoSimilarity/triplets", lambda: AutoSimilarity(random_state=0, time_budget=3600).fit(X, triplets=T)
    P, s = _pairs(y, np.random.default_rng(5), 300)
    yield "AutoSimilarity/pairs", lambda: AutoSimilarity(random_state=0, time_budget=3600).fit(X, pairs=P, y=s)


def _class_triplets(y, rng, m):
    out = []
    while len(out) < m:
        a, b, c = rng.choice(len(y), 3, replace=False)
        if y[a] == y[b] != y[c]:
            out.append((a, b, c))
    return np.asarray(out, dtype=np.int64)


def _pairs(y, rng, m):
    P = rng.choice(len(y), size=(m, 2))
    P = P[P[:, 0] != P[:, 1]]
    s = np.where(y[P[:, 0]] == y[P[:, 1]], 1, -1)
    return P, s


def run(skip=()) -> tuple[dict, dict]:
    """(arrays, metas) of every case not in ``skip``."""
    arrays, metas = {}, {}
    for name, make in _cases():
        if name in skip:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                est = make()
            except Exception as exc:     # a refusal is a result too
                metas[name] = {"__error__": f"{type(exc).__name__}: {exc}"}
                continue
        a, m = record(est)
        metas[name] = m
        for k, v in a.items():
            arrays[f"{name}::{k}"] = v
    return arrays, metas


def _diff(old: dict, new: dict, path: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        p = f"{path}/{k}"
        if k not in old or k not in new:
            out.append(f"{p}: only in {'new' if k not in old else 'reference'}")
        elif isinstance(old[k], dict) and isinstance(new[k], dict):
            out += _diff(old[k], new[k], p)
        elif old[k] != new[k]:
            out.append(f"{p}: {str(old[k])[:120]} != {str(new[k])[:120]}")
    return out


def _add(out: Path, redo: tuple[str, ...] = ()) -> int:
    """Record the cases the reference lacks, and re-record the cases named
    in ``redo`` (an intended change of a learner's model)."""
    old = json.loads((out / "reference.json").read_text())
    with np.load(out / "reference.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    unknown = set(redo) - set(old)
    if unknown:
        raise SystemExit(f"no such recorded case: {', '.join(sorted(unknown))}")
    for name in redo:
        old.pop(name)
        arrays = {k: v for k, v in arrays.items() if not k.startswith(f"{name}::")}
    new_arrays, new_metas = run(skip=set(old))
    arrays.update(new_arrays)
    old.update(new_metas)
    np.savez_compressed(out / "reference.npz", **arrays)
    (out / "reference.json").write_text(json.dumps(old, indent=1, sort_keys=True))
    print(f"{len(new_metas)} cases added: {', '.join(sorted(new_metas))}")
    return 0


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m bench.house_reference",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("write", "compare", "add"),
                        help="add: record only the cases the reference in DIRECTORY lacks "
                             "(a new learner), keeping the recorded ones as they are")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--redo", nargs="*", default=(), metavar="CASE",
                        help="with add: also re-record these cases (an intended change of "
                             "their models, named in the commit)")
    args = parser.parse_args(argv)
    out = args.directory
    if args.action == "add":
        return _add(out, tuple(args.redo))
    arrays, metas = run()
    if args.action == "write":
        out.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out / "reference.npz", **arrays)
        (out / "reference.json").write_text(json.dumps(metas, indent=1, sort_keys=True))
        print(f"{len(metas)} cases, {len(arrays)} arrays written to {out}")
        return 0
    ref = json.loads((out / "reference.json").read_text())
    diffs = _diff(ref, json.loads(json.dumps(metas, sort_keys=True)))
    for line in diffs:
        print(line)
    print(f"{len(metas)} cases compared bit for bit: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
