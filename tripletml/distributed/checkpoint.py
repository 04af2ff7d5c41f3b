"""Per-round checkpoints of a partitioned fit, so that a driver crash resumes.

A checkpoint directory holds ``state.json`` (the format, the run's settings,
the fingerprint of the data, the last completed round and two SHA-256
digests) and ``round-<12 digits>.npz``: the arrays the strategy needs to
continue (the model and, for CoCoA+, the partitions' dual variables; for the
gradient sums, the driver's solver state, :mod:`tripletml.engine.resume`) plus a
``tripletml_checkpoint`` marker member, written with ``np.savez`` and read
back with ``allow_pickle=False``.  The arrays file is written first under a
temporary name and renamed; ``state.json`` is then replaced atomically; the
previous round's file is removed last.  A crash at any moment therefore
leaves a consistent checkpoint (the layout of
:func:`tripletml.distributed.streaming.fit_stream`).

A checkpoint belongs to its run and its data: the settings (learner class and
parameters, partition sizes, strategy) and the data's fingerprint (per
partition: the shape, the column sums, a hash of its first, last and evenly
spaced rows -- at most :data:`FINGERPRINT_ROWS` -- with their labels, the
label counts and the explicit triplets; cheap for 100M rows) must match the
run's, or the run refuses to resume and says which differs.

Every file is untrusted on resume: ``state.json`` must be a regular file of at
most 1 MiB with the expected fields and its own digest; the arrays file must
be the bare name the library writes for the recorded round, a regular file
inside the directory (no symbolic link) whose SHA-256 is the one recorded, a
zip of plain ``.npy`` members whose declared shapes match the stored bytes
(checked from the headers, before anything is allocated; compressed members
may expand at most :data:`tripletml.persistence.MAX_COMPRESSION_RATIO` times)
and whose total is bounded like a model file's (``TRIPLETML_LOAD_MAX_BYTES``,
else half the available memory).  The strategies then check what they can
recompute: CoCoA+ the primal ``M`` (and the averaged one) from the dual
variables, parameter mixing the step count and the step size, and the
sampling seed against an integer ``random_state``.  The digests catch
accidental edits; someone who can write the folder can also rewrite the
digests, and edits that keep every recomputable invariant (e.g. a changed
history or generator state with matching digests) are out of scope.

Files: only files whose *content* shows that this library wrote them are
ever removed (round files holding the marker member, temporaries of a
killed save that start like one); a ``state.json`` or round file the library
did not write makes the folder refused, and any other file is left alone.
Temporaries left by a killed save are removed when the next checkpoint is
opened or saved.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tripletml.core.arrayspec import expected_nbytes
from tripletml.core.files import is_regular_file, open_regular, read_json, write_atomically
from tripletml.persistence import _check_members, _max_bytes

__all__ = ["RoundCheckpoint", "FINGERPRINT_ROWS"]

_FORMAT = "tripletml-partitioned-checkpoint"
_VERSION = 2
_ROUND_RE = re.compile(r"round-(\d{12})\.npz\Z")
_TMP_RE = re.compile(r"\.(round-\d{12}\.npz|state\.json)\.[A-Za-z0-9_]+\.tmp\Z")
_MEMBER_RE = re.compile(r"[A-Za-z0-9_]{1,64}\.npy\Z")
_STATE_MAX_BYTES = 1 << 20
_HEADER_MAX = 10000
_READ_CHUNK = 1 << 24
#: the member every arrays file the library writes holds (its content proves it)
_MARK = "tripletml_checkpoint"
_MARK_BYTES = _FORMAT.encode("ascii")
#: rows hashed per partition for the data fingerprint
FINGERPRINT_ROWS = 1024
_WHO = "fit_partitioned"


def _regular(path: Path) -> bool:
    return is_regular_file(path)


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True).encode("utf-8")


def _state_prefix() -> bytes:
    return b'{"format": "' + _MARK_BYTES + b'"'


def _head(path: Path, n: int) -> bytes | None:
    """The first ``n`` bytes of a regular file (no link), or None."""
    if not _regular(path):
        return None
    try:
        with open_regular(path, _WHO) as fh:
            return fh.read(n)
    except (OSError, ValueError):
        return None


def _is_our_arrays(path: Path) -> bool:
    """Whether ``path`` is a regular zip holding the library's marker member
    (read from the zip directory and one tiny member, bounded)."""
    if not _regular(path):
        return False
    try:
        with open_regular(path, _WHO) as fh, zipfile.ZipFile(fh) as zf:
            try:
                info = zf.getinfo(_MARK + ".npy")
            except KeyError:
                return False
            if info.file_size > 4096 or info.compress_size > 4096:
                return False
            with zf.open(info) as f:
                arr = np.lib.format.read_array(f, allow_pickle=False)
            return arr.dtype == np.uint8 and arr.tobytes() == _MARK_BYTES
    except Exception:                           # noqa: BLE001 - anything else is foreign
        return False


def _is_our_state(path: Path) -> bool:
    head = _head(path, len(_state_prefix()))
    return head is not None and head == _state_prefix()


def _is_our_temporary(path: Path, name: str) -> bool:
    """A temporary of a killed save: empty, or starting as the library
    writes that file (a zip whose first member is the marker, or the state's
    JSON opening)."""
    head = _head(path, 128)
    if head is None:
        return False
    if head == b"":
        return True
    if name.startswith(".state.json."):
        return head.startswith(_state_prefix()[:len(head)])
    return head.startswith(b"PK\x03\x04") and (_MARK + ".npy").encode() in head


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """What differs between two JSON objects (at most a few keys)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(k, "<absent>"), new.get(k, "<absent>"),
                                f"{prefix}{k}.")
        return out
    if old != new:
        return [f"{prefix[:-1]}: {str(old)[:60]} (checkpoint) vs {str(new)[:60]} (this run)"]
    return []


class RoundCheckpoint:
    """The checkpoint directory of one partitioned fit.

    Parameters
    ----------
    directory : path
        Created when missing; must be a directory (a file, a device such as
        ``/dev/null`` or a symbolic link is refused with a ValueError), and
        must not hold a ``state.json`` or ``round-*.npz`` this library did
        not write.
    settings : dict
        JSON-able description of the run; a checkpoint written with other
        settings is refused on resume.
    resume : bool, default=True
        Continue from the checkpoint there (False: start again; the old
        checkpoint is replaced at the first round).
    every : int, default=1
        Rounds between checkpoints (the last round is always written).
    data : dict, optional
        JSON-able fingerprint of the data (may be set later through the
        ``data`` attribute, before :meth:`load`); a checkpoint of other data
        is refused on resume.
    """

    def __init__(self, directory: Any, settings: dict, *, resume: bool = True, every: int = 1,
                 data: dict | None = None):
        self.dir = Path(directory)
        self._check_directory()
        self.settings = json.loads(json.dumps(settings))
        self.data = data
        self.resume = bool(resume)
        self.every = int(every)
        self._check_foreign()
        self._clean()

    def _check_directory(self) -> None:
        d = self.dir
        try:
            st = os.stat(d)
        except FileNotFoundError:
            try:
                d.mkdir(parents=True, exist_ok=True)
                st = os.stat(d)
            except OSError as e:
                raise ValueError(f"{_WHO}: checkpoint_dir {d} cannot be created "
                                 f"({e.strerror or e}); give a directory path") from None
        except OSError as e:
            raise ValueError(f"{_WHO}: checkpoint_dir {d} cannot be used "
                             f"({e.strerror or e}); give a directory path") from None
        if not stat.S_ISDIR(st.st_mode):
            kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a special file"
            raise ValueError(f"{_WHO}: checkpoint_dir {d} is {kind}, not a directory; give "
                             "a directory path (created when missing)")
        if d.is_symlink():
            raise ValueError(f"{_WHO}: checkpoint_dir {d} is a symbolic link, not a directory")

    def _check_foreign(self) -> None:
        """Refuse a folder holding a state or round file the library did not
        write (a later save would replace it)."""
        foreign = []
        for entry in os.scandir(self.dir):
            name = entry.name
            if name == "state.json":
                if not _is_our_state(self.dir / name):
                    foreign.append(name)
            elif _ROUND_RE.match(name) and not _is_our_arrays(self.dir / name):
                foreign.append(name)
        if foreign:
            raise ValueError(f"{_WHO}: checkpoint_dir {self.dir} holds files tripletml did not "
                             f"write ({', '.join(sorted(foreign)[:5])}); they would be "
                             "replaced, so the folder is refused: use an empty or a "
                             "tripletml checkpoint folder")

    # ------------------------------------------------------------------ read
    def load(self) -> tuple[int, dict[str, np.ndarray], dict] | None:
        """``(round, arrays, meta)`` of the last checkpoint, or None (no
        checkpoint, or ``resume=False``)."""
        sfile = self.dir / "state.json"
        if not self.resume or not (sfile.exists() or sfile.is_symlink()):
            return None
        who = _WHO
        if not _regular(sfile):
            raise ValueError(f"{who}: {sfile} is not a regular file")
        data = read_json(sfile, who, _STATE_MAX_BYTES, "a partitioned-fit checkpoint state")
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{who}: {sfile} is not a tripletml partitioned-fit checkpoint")
        if data.get("format_version") != _VERSION:
            raise ValueError(f"{who}: {sfile} has checkpoint format version "
                             f"{str(data.get('format_version'))[:20]}, this tripletml "
                             f"writes {_VERSION}; use another checkpoint_dir or resume=False")
        digest = data.pop("sha256", None)
        if digest != hashlib.sha256(_canonical(data)).hexdigest():
            raise ValueError(f"{who}: {sfile} was modified after tripletml wrote it (its "
                             "digest does not match); use another checkpoint_dir or "
                             "resume=False")
        if data.get("settings") != self.settings:
            diff = "; ".join(_differences(data.get("settings"), self.settings)[:4])
            raise ValueError(f"{who}: the checkpoint in {self.dir} was written by another run "
                             f"with other settings ({diff}); use another checkpoint_dir or "
                             "resume=False")
        if data.get("data") != self.data:
            raise ValueError(f"{who}: the checkpoint in {self.dir} was made from other data "
                             f"({self._data_difference(data.get('data'))}); use another "
                             "checkpoint_dir or resume=False")
        st = data.get("state")
        if not isinstance(st, dict) or set(st) != {"round", "file", "meta"}:
            raise ValueError(f"{who}: {sfile} has malformed state fields")
        r, name, meta = st["round"], st["file"], st["meta"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"{who}: {sfile}: round={r!r} is not an int >= 0")
        m = _ROUND_RE.match(name) if isinstance(name, str) else None
        if m is None or int(m.group(1)) != r:
            raise ValueError(f"{who}: {sfile}: the file name {name!r} is not one this library "
                             f"writes for round {r} (round-<12 digits>.npz)")
        if not isinstance(meta, dict):
            raise ValueError(f"{who}: {sfile}: meta is not an object")
        path = self.dir / name
        if not _regular(path):
            raise ValueError(f"{who}: the checkpoint file {path} is missing or not a regular "
                             "file (a symbolic link or special file is refused)")
        return r, self._read_arrays(path, data.get("arrays_sha256")), meta

    def _data_difference(self, old) -> str:
        new = self.data
        if not isinstance(old, dict) or not isinstance(new, dict):
            return "no fingerprint recorded"
        if old.get("n_features") != new.get("n_features"):
            return (f"{str(old.get('n_features'))[:20]} features in the checkpoint, "
                    f"{new.get('n_features')} now")
        a, b = old.get("partitions"), new.get("partitions")
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            bad = [i for i, (u, v) in enumerate(zip(a, b)) if u != v]
            if bad:
                return (f"the rows, labels or triplets of partition{'s' if len(bad) > 1 else ''}"
                        f" {', '.join(map(str, bad[:10]))} differ")
        return "its fingerprint differs"

    @staticmethod
    def _read_arrays(path: Path, digest: Any = None) -> dict[str, np.ndarray]:
        who = _WHO
        limit, source = _max_bytes(None)
        out: dict[str, np.ndarray] = {}
        with open_regular(path, who) as fh:
            size = os.fstat(fh.fileno()).st_size
            if limit is not None and size > limit:
                raise ValueError(f"{who}: {path} is {size} bytes, more than {limit} ({source})")
            if digest is not None:
                h = hashlib.sha256()
                while True:
                    chunk = fh.read(_READ_CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
                if h.hexdigest() != digest:
                    raise ValueError(f"{who}: {path} was modified after tripletml wrote it "
                                     "(its SHA-256 is not the one state.json records); use "
                                     "another checkpoint_dir or resume=False")
                fh.seek(0)
            try:
                zf = zipfile.ZipFile(fh)
            except (zipfile.BadZipFile, OSError, ValueError):
                raise ValueError(f"{who}: {path} is not a checkpoint arrays file") from None
            with zf:
                try:
                    _check_members(zf, size, path)
                except ValueError as e:
                    raise ValueError(str(e).replace("load_model:", f"{who}:", 1)) from None
                total = 0
                for info in zf.infolist():
                    if not _MEMBER_RE.match(info.filename):
                        raise ValueError(f"{who}: {path}: unexpected member "
                                         f"{info.filename[:80]!r}")
                    total += info.file_size
                if limit is not None and total > limit:
                    raise ValueError(f"{who}: {path} holds {total} bytes of arrays, more than "
                                     f"{limit} ({source})")
                for info in zf.infolist():
                    key = info.filename[:-4]
                    with zf.open(info) as f:
                        try:
                            version = np.lib.format.read_magic(f)
                            reader = {(1, 0): np.lib.format.read_array_header_1_0,
                                      (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                            if reader is None:
                                raise ValueError(f".npy version {version}")
                            shape, fortran, dtype = reader(f, max_header_size=_HEADER_MAX)
                        except ValueError as e:
                            raise ValueError(f"{who}: {path}: member {key!r} has no valid .npy "
                                             f"header ({str(e)[:80]})") from None
                        if dtype.hasobject:
                            raise ValueError(f"{who}: {path}: member {key!r} holds Python "
                                             "objects, refused (read with allow_pickle=False)")
                        if dtype.fields is not None or dtype.subdtype is not None:
                            raise ValueError(f"{who}: {path}: member {key!r} has dtype {dtype}, "
                                             "not a plain numeric dtype")
                        need = f.tell() + expected_nbytes(tuple(shape), dtype)
                        if need != info.file_size:
                            raise ValueError(f"{who}: {path}: member {key!r} declares shape "
                                             f"{tuple(shape)} ({need} bytes) but holds "
                                             f"{info.file_size} bytes (truncated or forged)")
                    with zf.open(info) as f:
                        arr = np.lib.format.read_array(f, allow_pickle=False)
                    out[key] = arr
        mark = out.pop(_MARK, None)
        if mark is None or mark.dtype != np.uint8 or mark.tobytes() != _MARK_BYTES:
            raise ValueError(f"{who}: {path} is not a checkpoint arrays file tripletml wrote "
                             "(no marker member)")
        return out

    # ----------------------------------------------------------------- write
    def due(self, round_: int, last: bool) -> bool:
        """Whether round ``round_`` (1-based count of completed rounds) is
        checkpointed."""
        return last or round_ % self.every == 0

    def save(self, round_: int, arrays: dict[str, np.ndarray], meta: dict | None = None) -> None:
        """Write the checkpoint of ``round_`` completed rounds."""
        name = f"round-{int(round_):012d}.npz"
        for key in arrays:
            if key == _MARK or not _MEMBER_RE.match(key + ".npy"):
                raise ValueError(f"{_WHO}: checkpoint array name {key!r} is invalid")
        self._clean()                       # temporaries of a killed save of this folder
        self._check_foreign()               # never replace a file the library did not write
        old = self._recorded()
        buf = io.BytesIO()
        np.savez(buf, **{_MARK: np.frombuffer(_MARK_BYTES, dtype=np.uint8)},
                 **{k: np.asarray(v) for k, v in arrays.items()})
        raw = buf.getvalue()
        write_atomically(self.dir / name, lambda fh: fh.write(raw))
        state = {"format": _FORMAT, "format_version": _VERSION, "settings": self.settings,
                 "data": self.data, "arrays_sha256": hashlib.sha256(raw).hexdigest(),
                 "state": {"round": int(round_), "file": name, "meta": meta or {}}}
        state = json.loads(json.dumps(state))
        state["sha256"] = hashlib.sha256(_canonical(state)).hexdigest()
        write_atomically(self.dir / "state.json",
                         lambda fh: fh.write(json.dumps(state).encode("utf-8")))
        if old and old != name and _ROUND_RE.match(old) and _is_our_arrays(self.dir / old):
            os.unlink(self.dir / old)

    def _recorded(self) -> str | None:
        try:
            data = read_json(self.dir / "state.json", _WHO, _STATE_MAX_BYTES, "a state")
            name = data["state"]["file"]
            return name if isinstance(name, str) else None
        except Exception:                       # noqa: BLE001 - absent or foreign
            return None

    def _clean(self) -> None:
        """Remove the temporaries of killed writes and round files no state
        records -- only files of the library's exact name patterns whose
        content shows the library wrote them."""
        keep = self._recorded() if self.resume else None
        # round files are removed only beside a state that records a valid one
        sane = isinstance(keep, str) and _ROUND_RE.match(keep) is not None
        for entry in os.scandir(self.dir):
            name = entry.name
            path = self.dir / name
            if _TMP_RE.match(name):
                stale = _is_our_temporary(path, name)
            elif sane and _ROUND_RE.match(name) and name != keep:
                stale = _is_our_arrays(path)
            else:
                stale = False
            if stale:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
