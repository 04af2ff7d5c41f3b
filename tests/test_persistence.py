"""Model files (``tripletml.persistence``), crafted ones included: load_model checks every
declared array and the parameters before returning, refuses undeclared
arrays before reading them, refuses abstract classes, turns odd-file errors
into one ValueError; save never writes through a planted symlink.

Cases that could crash the interpreter (a Numba kernel indexing a bad array)
run in a subprocess, so a segfault fails the test instead of the suite.
"""
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator

import tripletml as tm
from tripletml.core.arrayspec import ArraySpec
from tripletml.registry import entries

import _fork_each
from _estimators import toy_data, toy_item_triplets, toy_multilabel
from _model_files import read_model_file as _read, write_model_file as _write

REPO = Path(__file__).resolve().parents[1]


def _fitted_perceptron():
    X, Y = toy_multilabel()
    return tm.MatrixPerceptron(random_state=0).fit(X, Y), X, Y





def _craft(tmp_path, edit, name="bad.npz"):
    est, X, Y = _fitted_perceptron()
    est.save(tmp_path / "good.npz")
    meta, arrays = _read(tmp_path / "good.npz")
    edit(meta, arrays)
    _write(tmp_path / name, meta, arrays)
    return tmp_path / name


def _run_isolated(code: str, timeout=120):
    """Run ``code`` in a fresh interpreter (the tree under test first on the
    path); returns the CompletedProcess.  A crash gives a negative returncode."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _run_each(prelude: str, cases: dict[str, str], timeout=300) -> dict[str, tuple]:
    """Run ``prelude`` (imports) once in a fresh interpreter, then every
    ``{name: code}`` of ``cases`` in a forked copy of it (tests/_fork_each.py);
    ``{name: (exit status, output)}``, every case present (a case that
    never ended -- the interpreter itself died -- has status None)."""
    res = _run_isolated(_fork_each.script(prelude, cases), timeout=timeout)
    tail = f"interpreter exit status {res.returncode}; stderr:\n{res.stderr[-2000:]}"
    return {n: (status, "\n".join(lines) + "\n" + tail)
            for n, (status, lines) in _fork_each.parse(res.stdout, cases).items()}


# ------------------------------------------------------------- arrays
CRAFTED = [
    ("missing", lambda m, a: a.pop("W_"), "W_.*missing"),
    ("shape", lambda m, a: a.update(W_=np.zeros((2, 2))), "W_ has shape"),
    ("transposed", lambda m, a: a.update(W_=np.ascontiguousarray(a["W_"].T)), "W_ has shape"),
    ("dtype32", lambda m, a: a.update(W_=a["W_"].astype(np.float32)), "W_ has dtype"),
    ("dtype_int", lambda m, a: a.update(W_=a["W_"].astype(np.int64)), "W_ has dtype"),
    ("big_endian", lambda m, a: a.update(W_=a["W_"].astype(">f8")), "W_ has dtype"),
    ("nan", lambda m, a: a["W_"].__setitem__((0, 0), np.nan), "W_ contains NaN"),
    ("inf", lambda m, a: a["W_"].__setitem__((1, 2), -np.inf), "W_ contains NaN or inf"),
    ("3d", lambda m, a: a.update(W_=a["W_"][None]), "W_ has shape"),
    ("n_labels", lambda m, a: m["attributes"].update(n_labels_=-1), "n_labels_"),
    ("n_labels_bool", lambda m, a: m["attributes"].update(n_labels_=True), "W_ has shape"),
    ("extra", lambda m, a: a.update(evil_=np.zeros(3)), "does not declare"),
    ("foreign_array", lambda m, a: a.update(A_=np.zeros((4, 2))), "A_|rank"),
    ("array_as_meta", lambda m, a: m["attributes"].update(W_=[[0.0]]), "array W_ as metadata"),
    ("bad_param", lambda m, a: m["params"].update(fit_intercept="yes"), "invalid .*param"),
    ("bad_param_type", lambda m, a: m["params"].update(random_state="x"), "random_state"),
    ("n_features", lambda m, a: m["attributes"].update(n_features_in_=0), "n_features_in_"),
]


@pytest.mark.parametrize("edit, msg", [c[1:] for c in CRAFTED], ids=[c[0] for c in CRAFTED])
def test_crafted_file_is_refused(tmp_path, edit, msg):
    path = _craft(tmp_path, edit)
    with pytest.raises(ValueError, match=f"load_model: .*{msg}"):
        tm.load_model(path)


def test_crafted_file_refused_in_a_subprocess_before_any_kernel(tmp_path):
    """A file whose array a kernel would index out of bounds: loading must
    refuse it; were it accepted, partial_fit would write out of bounds.
    Each case in its own forked copy of one fresh interpreter (_run_each),
    so a crash fails that case and names it."""
    edits = dict((c[0], c[1]) for c in CRAFTED)
    cases = {}
    for case in ("missing", "shape", "transposed", "dtype32"):
        path = _craft(tmp_path, edits[case], name=f"{case}.npz")
        cases[case] = f"""
            try:
                m = tm.load_model({str(path)!r})
            except ValueError as exc:
                print("REFUSED", exc)
            else:
                rng = np.random.default_rng(0)
                m.partial_fit(rng.normal(size=(50, 5)), np.eye(4, dtype=int)[np.arange(50) % 4])
                print("ACCEPTED")
        """
    # imported once, before the forks: what load_model would import (no kernel runs)
    results = _run_each("import numpy as np, tripletml as tm, tripletml.persistence\n"
                        "tm.MatrixPerceptron\n", cases)
    bad = [f"{case}: exit status {status}\n{out}" for case, (status, out) in results.items()
           if status != 0 or "REFUSED" not in out]
    assert not bad, "\n\n".join(bad)


def test_int_arrays_bounds_checked(tmp_path, monkeypatch):
    """Integer ids are checked against [low, high) (high may name an attribute)."""
    specs = {**tm.MatrixPerceptron._fitted_arrays,
             "ids_": ArraySpec(("=m",), dtype="i", low=0, high="n_labels_"),
             "w_": ArraySpec(("=m",))}
    monkeypatch.setattr(tm.MatrixPerceptron, "_fitted_arrays", specs)
    for ids, ok in [([0, 3, 1], True), ([0, 4, 1], False), ([-1, 0, 0], False)]:
        path = _craft(tmp_path, lambda m, a: a.update(ids_=np.array(ids, dtype=np.int64),
                                                      w_=np.zeros(3)))
        if ok:
            m = tm.load_model(path)
            assert m.ids_.dtype == np.int64 and list(m.ids_) == ids
        else:
            with pytest.raises(ValueError, match="ids_ holds"):
                tm.load_model(path)
    path = _craft(tmp_path, lambda m, a: a.update(ids_=np.array([0, 1], dtype=np.int64),
                                                  w_=np.zeros(3)))
    with pytest.raises(ValueError, match="both '=m'"):
        tm.load_model(path)
    path = _craft(tmp_path, lambda m, a: a.update(ids_=np.array([0, 1, 2], dtype=np.int32),
                                                  w_=np.zeros(3)))
    with pytest.raises(ValueError, match="ids_ has dtype"):
        tm.load_model(path)


def test_undeclared_array_refused_before_it_is_read(tmp_path, monkeypatch):
    path = _craft(tmp_path, lambda m, a: a.update(evil_=np.zeros(10)))
    opened = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    with pytest.raises(ValueError, match=r"\['evil_'\].*does not declare.*without reading"):
        tm.load_model(path)
    assert "evil_.npy" not in opened


def _deflated(head: bytes, n_zeros: int = 0) -> tuple[bytes, int, int]:
    """``(raw deflate stream, CRC-32, size)`` of ``head`` followed by
    ``n_zeros`` zero bytes, in well under a second for a gigabyte: the
    compressor is fully flushed after the head and after each MiB of zeros
    (a full flush empties its window), so every whole MiB deflates to the
    same ~1 kB, computed once and repeated.  It inflates to exactly that
    content, at deflate's usual ~1000:1 for zeros."""
    chunk = bytes(2**20)
    whole, rest = divmod(n_zeros, len(chunk))
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [z.compress(head) + z.flush(zlib.Z_FULL_FLUSH)]
    if whole:
        parts.append((z.compress(chunk) + z.flush(zlib.Z_FULL_FLUSH)) * whole)
    parts.append(z.compress(bytes(rest)) + z.flush())
    crc = zlib.crc32(head)
    for _ in range(whole):
        crc = zlib.crc32(chunk, crc)
    return b"".join(parts), zlib.crc32(bytes(rest), crc), len(head) + n_zeros


def _write_zip(path, members: dict) -> None:
    """A zip archive of deflated ``{name: _deflated(...)}`` members (every
    size under 2 GiB: no zip64 fields needed)."""
    out, central = bytearray(), bytearray()
    for name, (data, crc, size) in members.items():
        n = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc,
                               len(data), size, len(n), 0, 0, 0, 0, 0, len(out)) + n
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(data), size,
                           len(n), 0) + n + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                      len(out), 0)
    Path(path).write_bytes(bytes(out + central + end))


def _bomb(path, meta, member, header_shape, n_bytes, descr="<f8"):
    """A zip whose ``member`` declares ``header_shape`` but inflates to
    ``n_bytes`` of zeros (deflated: the file stays small)."""
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": descr, "fortran_order": False,
                                               "shape": header_shape})
    blob = io.BytesIO()
    np.lib.format.write_array(blob, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    _write_zip(path, {"__meta__.npy": _deflated(blob.getvalue()),
                      member + ".npy": _deflated(hdr.getvalue(), n_bytes)})
    # a genuine bomb: a zip reader inflates the member's start to the header and zeros
    with zipfile.ZipFile(path) as zf, zf.open(member + ".npy") as fh:
        assert zf.getinfo(member + ".npy").file_size == len(hdr.getvalue()) + n_bytes
        assert fh.read(len(hdr.getvalue())) == hdr.getvalue()
        assert fh.read(min(n_bytes, 2**21)) == bytes(min(n_bytes, 2**21))


def test_zip_bomb_member_refused_without_inflating(tmp_path):
    """Each member in its own forked copy of one fresh interpreter
    (_run_each): a forked child's peak RSS starts at its current RSS, so
    the growth is that case's alone."""
    est, X, Y = _fitted_perceptron()
    est.save(tmp_path / "good.npz")
    meta, _ = _read(tmp_path / "good.npz")
    cases = {}
    for member, shape in [("W_", (4, 6)), ("evil_", (10**8,)), ("W_", (4 * 10**7, 6))]:
        name = f"{member}-{'x'.join(map(str, shape))}"
        path = tmp_path / f"bomb-{name}.npz"
        _bomb(path, meta, member, shape, 128 * 2**20)
        assert path.stat().st_size < 2 * 2**20
        cases[name] = f"""
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            try:
                tm.load_model({str(path)!r})
            except ValueError as exc:
                print("REFUSED", exc)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print("GROWTH_MB", peak - base)
        """
    results = _run_each("import resource, tripletml as tm\nimport tripletml.persistence\n", cases)
    bad = []
    for name, (status, out) in results.items():
        if status != 0 or "REFUSED" not in out or "GROWTH_MB" not in out:
            bad.append(f"{name}: exit status {status}\n{out}")
        elif not float(out.split("GROWTH_MB")[1].split()[0]) < 50:   # not the 128 MB member
            bad.append(f"{name}: grew by more than 50 MB\n{out}")
    assert not bad, "\n\n".join(bad)


@pytest.mark.parametrize("cls", ["OnlineTripletLearner", "TripletLearner", "LearnerBase",
                                 "_MultilabelRanker", "FactoredBilinearMixin", "BaseEstimator",
                                 "_FactoredBaseline", "History", "os.system", 3, None, ["x"]])
def test_abstract_and_foreign_classes_refused(tmp_path, cls):
    path = _craft(tmp_path, lambda m, a: m.update({"class": cls}))
    with pytest.raises(ValueError, match="unknown or abstract model class"):
        tm.load_model(path)


def test_odd_files_give_one_value_error(tmp_path):
    # deep JSON nesting: RecursionError inside the decoder
    est, X, Y = _fitted_perceptron()
    est.save(tmp_path / "good.npz")
    meta, arrays = _read(tmp_path / "good.npz")
    deep = "[" * 200000 + "]" * 200000
    raw = json.dumps(meta).replace('"history_": {', f'"deep_": {deep}, "history_": {{', 1)
    np.savez(tmp_path / "deep.npz", __meta__=np.frombuffer(raw.encode(), np.uint8), **arrays)
    with pytest.raises(ValueError, match="load_model: .*not a readable"):
        tm.load_model(tmp_path / "deep.npz")
    # setting a read-only property (AttributeError)
    tm.Euclidean().fit(*toy_data()).save(tmp_path / "e.npz")
    meta, arrays = _read(tmp_path / "e.npz")
    meta["attributes"]["components_"] = 1
    _write(tmp_path / "e2.npz", meta, arrays)
    with pytest.raises(ValueError, match="load_model: "):
        tm.load_model(tmp_path / "e2.npz")
    # not a zip at all, an empty file, a directory entry, a pickle in disguise
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04" + os.urandom(200))
    (tmp_path / "empty.npz").write_bytes(b"")
    for p in ("junk.npz", "empty.npz"):
        with pytest.raises(ValueError, match="load_model: "):
            tm.load_model(tmp_path / p)
    with zipfile.ZipFile(tmp_path / "dir.npz", "w") as zf:
        zf.writestr("sub/W_.npy", b"")
    with pytest.raises(ValueError, match="not a tripletml model file"):
        tm.load_model(tmp_path / "dir.npz")


# ------------------------------------------------------------- save
def test_save_never_follows_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    est, X, Y = _fitted_perceptron()
    target = tmp_path / "model.npz"
    os.symlink(victim, tmp_path / "model.npz.tmp")     # the old fixed temp name
    est.save(target)
    assert victim.read_text() == "precious"
    assert target.is_file() and not target.is_symlink()
    np.testing.assert_array_equal(tm.load_model(target).W_, est.W_)
    # a symlink at the target itself is replaced, not written through
    os.symlink(victim, tmp_path / "link.npz")
    est.save(tmp_path / "link.npz")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "link.npz").is_symlink()
    # no temporary file is left behind; normal permissions (not 0600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.npz", "model.npz",
                                                          "model.npz.tmp", "victim.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_save_leaves_no_temporary_file(tmp_path):
    est, X, Y = _fitted_perceptron()
    est.history_ = {"step": [object()]}      # not JSON-storable
    with pytest.raises(TypeError):
        est.save(tmp_path / "m.npz")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------ property: round trip
def _fit_entry(entry, seed, n, d):
    if entry.kind == "embedding":       # items without features: triplets alone
        return entry.make(0).fit(toy_item_triplets(seed, n, 20 * n))
    if entry.kind == "multilabel":
        X, Y = toy_multilabel(seed=seed, n=n, d=d, n_labels=3)
        return entry.make(0).fit(X, Y)
    X, y = toy_data(seed=seed, n=n, d=d)
    return entry.make(0).fit(X, y)


def _same(a, b):
    if isinstance(a, BaseEstimator):    # a nested model (BilinearEmbedding.learner_)
        return type(a) is type(b) and _same(_public(a), _public(b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and np.isnan(b)
    return type(a) is type(b) and a == b


def _public(est):
    """Parameters and public fitted attributes."""
    return {**est.get_params(deep=False),
            **{k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}}


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.name)
@settings(max_examples=10, deadline=None, database=None,
          phases=(Phase.explicit, Phase.generate),   # a failure is reported unshrunk: fast
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), n=st.integers(12, 24), d=st.integers(3, 6))
def test_save_load_round_trip_is_bit_identical(tmp_path, entry, seed, n, d):
    est = _fit_entry(entry, seed, n, d)
    est.save(tmp_path / "m.npz")
    back = tm.load_model(tmp_path / "m.npz")
    assert type(back) is type(est)
    assert _same(back.get_params(), est.get_params())
    public = {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}
    loaded = {k: v for k, v in vars(back).items() if k.endswith("_") and not k.startswith("_")}
    assert loaded.keys() == public.keys()
    for k in public:
        assert _same(loaded[k], public[k]), k


def test_pickles_of_0_1_online_learners_still_load():
    """0.1 pickled an online learner with its windowed watch (_BlockWatch) and
    SDCA with M_: both unpickle, and the model goes on with partial_fit."""
    import pickle

    from tripletml import OASIS, SDCA, LORETAMultilabel
    from tripletml.engine.stopping import LossWatch
    from tripletml.core import online as _online
    from tripletml.engine import DivergenceWatch
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    y = np.repeat(np.arange(4), 10)
    T = np.array([[0, 1, 12], [10, 11, 30], [20, 21, 5]])
    for est in (OASIS(n_triplets=100, random_state=0).fit(X, y),
                LORETAMultilabel(rank=2, max_iter=1, random_state=0).fit(
                    X, np.eye(4, dtype=int)[y])):
        old = _online._BlockWatch()
        old.watch, old.block, old.total, old.count, old.start = (
            LossWatch(est, factor=10, floor=0.5), 1000, 3.0, 3, 41)
        old.watch.best = 0.25
        est._watch = old
        back = pickle.loads(pickle.dumps(est))
        assert isinstance(back._watch, DivergenceWatch) and back._watch.window == 1000
        assert (back._watch.total, back._watch.count, back._watch.start) == (3.0, 3, 41)
        assert back._watch._channels["steps"].best == 0.25
        if isinstance(back, OASIS):
            back.partial_fit(X, T)
            assert back.t_ == est.t_ + 3
    m = SDCA(n_triplets=100, max_iter=2, random_state=0).fit(X, y)
    state = dict(m.__getstate__())
    state["M_"] = state.pop("W_")                 # as 0.1 pickled it
    old = SDCA.__new__(SDCA)
    old.__setstate__(state)
    np.testing.assert_array_equal(old.W_, m.W_)
    np.testing.assert_array_equal(old.similarity(X[:4]), m.similarity(X[:4]))
    old.partial_fit(X, T)


# ------------------------------------------------------------- special files, bombs, caps
def _alarm(seconds, what):
    def hung(signum, frame):
        raise TimeoutError(f"{what} blocked")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    return old


@pytest.mark.parametrize("kind", ["fifo", "dev", "dir", "fifo_no_suffix"])
def test_special_files_refused_without_blocking(tmp_path, kind):
    if kind == "dev":
        p, what = "/dev/zero", "a character device"
    elif kind == "dir":
        p, what = tmp_path / "d.npz", "a directory"
        p.mkdir()
    else:
        p, what = tmp_path / "model.npz", r"a FIFO \(named pipe\)"
        os.mkfifo(p)
        if kind == "fifo_no_suffix":      # found through the .npz fallback
            p = tmp_path / "model"
    old = _alarm(20, f"load_model({kind})")
    try:
        with pytest.raises(ValueError, match=f"load_model: .* is {what}, not a regular file"):
            tm.load_model(p)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _zero_bomb(path, d):
    """The issue-26 bomb: an OASIS file declaring ``n_features_in_ = d`` and a
    ``(d, d)`` all-zero ``W_`` deflated (d = 11,585: 1.07 GB in a 1 MB file)."""
    est = tm.OASIS(random_state=0, preprocessing=None).fit(*toy_data())
    est.save(path.with_name("oasis_good.npz"))
    meta, _ = _read(path.with_name("oasis_good.npz"))
    meta["attributes"]["n_features_in_"] = d
    _bomb(path, meta, "W_", (d, d), d * d * 8)


def test_one_megabyte_bomb_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "bomb.npz"
    d = 11585
    _zero_bomb(path, d)
    assert path.stat().st_size < 2 * 2**20
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("W_.npy").file_size >= d * d * 8    # 1.07 GB declared
    res = _run_isolated(f"""
        import resource, tripletml as tm
        import tripletml.persistence, tripletml.algorithms.oasis.estimator
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        try:
            tm.load_model({str(path)!r}, max_bytes=2**40)    # the ratio cap alone
        except ValueError as exc:
            print("REFUSED", exc)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("GROWTH_MB", peak - base)
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "REFUSED" in res.stdout and "more than 100 times" in res.stdout, res.stdout
    assert "W_.npy" in res.stdout
    assert float(res.stdout.split("GROWTH_MB")[1]) < 100, res.stdout


def _oasis_file(path, d, compressed=False, fortran=False, W=None):
    est = tm.OASIS(random_state=0, preprocessing=None).fit(*toy_data())
    est.save(path)
    meta, arrays = _read(path)
    meta["attributes"]["n_features_in_"] = d
    W = np.eye(d) if W is None else W
    arrays["W_"] = np.asfortranarray(W) if fortran else W
    save = np.savez_compressed if compressed else np.savez
    save(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    return path


def test_compression_ratio_cap(tmp_path, monkeypatch):
    from tripletml import persistence

    # a legitimately compressed file of real (dense, random) weights loads
    rng = np.random.default_rng(0)
    W = rng.normal(size=(400, 400))
    W = W @ W.T / 400 + np.eye(400)
    path = _oasis_file(tmp_path / "dense.npz", 400, compressed=True, W=W)
    np.testing.assert_array_equal(tm.load_model(path).W_, W)
    # a small zero-heavy member is exempt from the ratio cap
    path = _oasis_file(tmp_path / "small.npz", 300, compressed=True)   # 720 kB identity
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("W_.npy")
        assert info.file_size > persistence.MAX_COMPRESSION_RATIO * info.compress_size
    assert tm.load_model(path).W_.shape == (300, 300)
    # a large one is refused naming the member, before it is decompressed
    path = _oasis_file(tmp_path / "big.npz", 600, compressed=True)     # 2.9 MB identity
    with pytest.raises(ValueError, match=r"load_model: .*big.npz: member 'W_.npy' would "
                                         r"expand .* more than 100 times"):
        tm.load_model(path)
    monkeypatch.setattr(persistence, "MAX_COMPRESSION_RATIO", 10**6)   # documented knob
    assert tm.load_model(path).W_.shape == (600, 600)


def test_max_bytes_argument_and_environment_variable(tmp_path, monkeypatch):
    from tripletml import persistence

    path = _oasis_file(tmp_path / "m.npz", 100)        # 80,000 bytes of W_
    monkeypatch.delenv(persistence.LOAD_MAX_BYTES_ENV, raising=False)
    assert tm.load_model(path, max_bytes=10**6).W_.shape == (100, 100)
    with pytest.raises(ValueError, match=r"declares \d+ bytes of arrays, more than the 50000 "
                                         r"bytes allowed \(max_bytes\)"):
        tm.load_model(path, max_bytes=50000)
    monkeypatch.setenv(persistence.LOAD_MAX_BYTES_ENV, "50000")
    with pytest.raises(ValueError, match="TRIPLETML_LOAD_MAX_BYTES environment variable"):
        tm.load_model(path)
    assert tm.load_model(path, max_bytes=10**6).W_.shape == (100, 100)   # argument wins
    monkeypatch.setenv(persistence.LOAD_MAX_BYTES_ENV, "1_000_000")
    assert tm.load_model(path).W_.shape == (100, 100)
    for bad in ("lots", "-5", "0"):
        monkeypatch.setenv(persistence.LOAD_MAX_BYTES_ENV, bad)
        with pytest.raises(ValueError, match="TRIPLETML_LOAD_MAX_BYTES .* positive integer"):
            tm.load_model(path)
    monkeypatch.delenv(persistence.LOAD_MAX_BYTES_ENV)
    for bad, exc in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError),
                     ("10", TypeError)):
        with pytest.raises(exc, match="load_model: max_bytes"):
            tm.load_model(path, max_bytes=bad)


def test_arrays_read_into_one_writeable_c_contiguous_buffer(tmp_path):
    rng = np.random.default_rng(1)
    W = rng.normal(size=(7, 7))
    W = W @ W.T + np.eye(7)
    for fortran in (False, True):
        path = _oasis_file(tmp_path / f"f{fortran}.npz", 7, fortran=fortran, W=W)
        if fortran:
            with np.load(path) as z, z.zip.open("W_.npy") as fh:
                np.lib.format.read_magic(fh)
                assert np.lib.format.read_array_header_1_0(fh)[1]     # fortran_order
        back = tm.load_model(path).W_
        np.testing.assert_array_equal(back, W)
        assert back.flags.c_contiguous and back.flags.writeable


def test_truncated_and_forged_archives(tmp_path):
    path = _oasis_file(tmp_path / "m.npz", 50)
    raw = path.read_bytes()
    # truncated anywhere: one ValueError naming the file
    for cut in (10, len(raw) // 2, len(raw) - 30):
        (tmp_path / "cut.npz").write_bytes(raw[:cut])
        with pytest.raises(ValueError, match="load_model: .*cut.npz"):
            tm.load_model(tmp_path / "cut.npz")
    # an encrypted member, an unknown compression method
    meta, arrays = _read(path)
    blob = io.BytesIO()
    np.lib.format.write_array(blob, np.frombuffer(json.dumps(meta).encode(), np.uint8))
    for flag, method, msg in ((0x1, zipfile.ZIP_STORED, "encrypted"),
                              (0, 99, "unsupported compression method 99")):
        with zipfile.ZipFile(tmp_path / "odd.npz", "w") as zf:
            zf.writestr("__meta__.npy", blob.getvalue())
            info = zipfile.ZipInfo("W_.npy")
            zf.writestr(info, b"\x93NUMPY")
        data = bytearray((tmp_path / "odd.npz").read_bytes())
        cd = data.rfind(b"PK\x01\x02")           # W_'s central directory entry
        data[cd + 8:cd + 10] = flag.to_bytes(2, "little")
        data[cd + 10:cd + 12] = method.to_bytes(2, "little")
        (tmp_path / "odd.npz").write_bytes(bytes(data))
        with pytest.raises(ValueError, match=f"load_model: .*odd.npz: member 'W_.npy' .*{msg}"):
            tm.load_model(tmp_path / "odd.npz")
    # a stored member whose directory entry claims more bytes than the file holds
    data = bytearray(raw)
    cd = data.rfind(b"PK\x01\x02")
    while data[cd + 46:cd + 46 + 6] != b"W_.npy":
        cd = data.rfind(b"PK\x01\x02", 0, cd)
    for off in (20, 24):                          # compressed and uncompressed sizes
        data[cd + off:cd + off + 4] = (2**31).to_bytes(4, "little")
    (tmp_path / "long.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"load_model: .*long.npz: member 'W_.npy' claims "
                                         r"\d+ stored bytes beyond the end"):
        tm.load_model(tmp_path / "long.npz")


@pytest.mark.parametrize("prep", ["auto", "standardize", None])
def test_public_save_model_writes_a_preprocessed_model(tmp_path, prep):
    """tripletml.save_model(model) and model.save() write the same file: the
    fitted scaler is flattened to plain attributes either way (a default fit
    used to fail with "cannot store attribute scaler_ as JSON")."""
    from tripletml import OASIS, load_model, save_model
    X, y = toy_data()
    est = OASIS(n_triplets=100, preprocessing=prep, random_state=0).fit(X, y)
    save_model(est, tmp_path / "a.npz")
    est.save(tmp_path / "b.npz")
    for name in ("a.npz", "b.npz"):
        back = load_model(tmp_path / name)
        np.testing.assert_array_equal(back.W_, est.W_)
        np.testing.assert_array_equal(back.pair_score(np.stack([X[:5], X[5:10]], axis=1)),
                                      est.pair_score(np.stack([X[:5], X[5:10]], axis=1)))
