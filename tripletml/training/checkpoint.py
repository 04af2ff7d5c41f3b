"""Per-round checkpoints of a partitioned fit, so that a driver crash resumes.

A checkpoint directory holds ``state.json`` (the format, the run's settings
and the last completed round) and ``round-<12 digits>.npz``: the arrays the
strategy needs to continue (the model and, for CoCoA+, the partitions' dual
variables), written with ``np.savez`` and read back with
``allow_pickle=False``.  The arrays file is written first under a temporary
name and renamed; ``state.json`` is then replaced atomically; the previous
round's file is removed last.  A crash at any moment therefore leaves a
consistent checkpoint (the layout of :func:`tripletml.streaming.fit_stream`).

Every file is untrusted on resume: ``state.json`` must be a regular file of at
most 1 MiB with the expected fields; the arrays file must be the bare name the
library writes for the recorded round, a regular file inside the directory
(no symbolic link), a zip of ``.npy`` members whose declared sizes match the
stored bytes (compressed members may expand at most
:data:`tripletml.persistence.MAX_COMPRESSION_RATIO` times) and whose total is
bounded like a model file's (``TRIPLETML_LOAD_MAX_BYTES``, else half the
available memory).  The settings (learner class and parameters, partition
sizes, strategy) must match the run's, or the run refuses to resume.
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RoundCheckpoint"]

_FORMAT = "tripletml-partitioned-checkpoint"
_VERSION = 1
_ROUND_RE = re.compile(r"round-(\d{12})\.npz\Z")
_TMP_RE = re.compile(r"\.(round-\d{12}\.npz|state\.json)\.[A-Za-z0-9_]+\.tmp\Z")
_MEMBER_RE = re.compile(r"[A-Za-z0-9_]{1,64}\.npy\Z")
_STATE_MAX_BYTES = 1 << 20


def _regular(path: Path) -> bool:
    from .._files import is_regular_file
    return is_regular_file(path)


class RoundCheckpoint:
    """The checkpoint directory of one partitioned fit.

    Parameters
    ----------
    directory : path
        Created when missing; must be a directory.
    settings : dict
        JSON-able description of the run; a checkpoint written with other
        settings is refused on resume.
    resume : bool, default=True
        Continue from the checkpoint there (False: start again; the old
        checkpoint is replaced at the first round).
    every : int, default=1
        Rounds between checkpoints (the last round is always written).
    """

    def __init__(self, directory: Any, settings: dict, *, resume: bool = True, every: int = 1):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.dir.is_dir() or self.dir.is_symlink():
            raise ValueError(f"fit_partitioned: checkpoint_dir {self.dir} is not a directory")
        self.settings = json.loads(json.dumps(settings))
        self.resume = bool(resume)
        self.every = int(every)
        self._clean()

    # ------------------------------------------------------------------ read
    def load(self) -> tuple[int, dict[str, np.ndarray], dict] | None:
        """``(round, arrays, meta)`` of the last checkpoint, or None (no
        checkpoint, or ``resume=False``)."""
        from .._files import read_json
        sfile = self.dir / "state.json"
        if not self.resume or not (sfile.exists() or sfile.is_symlink()):
            return None
        who = "fit_partitioned"
        if not _regular(sfile):
            raise ValueError(f"{who}: {sfile} is not a regular file")
        data = read_json(sfile, who, _STATE_MAX_BYTES, "a partitioned-fit checkpoint state")
        if not isinstance(data, dict) or data.get("format") != _FORMAT \
                or data.get("format_version") != _VERSION:
            raise ValueError(f"{who}: {sfile} is not a tripletml partitioned-fit checkpoint")
        if data.get("settings") != self.settings:
            raise ValueError(f"{who}: the checkpoint in {self.dir} was written by another run "
                             f"({data.get('settings')} != {self.settings}); use another "
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
        return r, self._read_arrays(path), meta

    @staticmethod
    def _read_arrays(path: Path) -> dict[str, np.ndarray]:
        from .._files import open_regular
        from ..persistence import _check_members, _max_bytes
        who = "fit_partitioned"
        limit, source = _max_bytes(None)
        out: dict[str, np.ndarray] = {}
        with open_regular(path, who) as fh:
            size = os.fstat(fh.fileno()).st_size
            try:
                zf = zipfile.ZipFile(fh)
            except zipfile.BadZipFile:
                raise ValueError(f"{who}: {path} is not a checkpoint arrays file") from None
            with zf:
                _check_members(zf, size, path)
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
                    with zf.open(info) as f:
                        arr = np.lib.format.read_array(f, allow_pickle=False)
                    out[info.filename[:-4]] = arr
        return out

    # ----------------------------------------------------------------- write
    def due(self, round_: int, last: bool) -> bool:
        """Whether round ``round_`` (1-based count of completed rounds) is
        checkpointed."""
        return last or round_ % self.every == 0

    def save(self, round_: int, arrays: dict[str, np.ndarray], meta: dict | None = None) -> None:
        """Write the checkpoint of ``round_`` completed rounds."""
        from .._files import write_atomically
        name = f"round-{int(round_):012d}.npz"
        for key in arrays:
            if not _MEMBER_RE.match(key + ".npy"):
                raise ValueError(f"fit_partitioned: checkpoint array name {key!r} is invalid")
        old = self._recorded()

        def write(fh):
            buf = io.BytesIO()
            np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
            fh.write(buf.getvalue())

        write_atomically(self.dir / name, write)
        state = {"format": _FORMAT, "format_version": _VERSION, "settings": self.settings,
                 "state": {"round": int(round_), "file": name, "meta": meta or {}}}
        write_atomically(self.dir / "state.json",
                         lambda fh: fh.write(json.dumps(state).encode("utf-8")))
        if old and old != name and _regular(self.dir / old):
            os.unlink(self.dir / old)

    def _recorded(self) -> str | None:
        try:
            data = json.loads((self.dir / "state.json").read_text())
            return data["state"]["file"]
        except Exception:                       # noqa: BLE001 - absent or foreign
            return None

    def _clean(self) -> None:
        """Remove the temporaries of killed writes, and round files no state
        records (only names of the library's exact patterns, regular files)."""
        keep = self._recorded() if self.resume else None
        # round files are removed only beside a state that records a valid one
        sane = isinstance(keep, str) and _ROUND_RE.match(keep) is not None
        for entry in os.scandir(self.dir):
            name = entry.name
            stale = _TMP_RE.match(name) or (sane and _ROUND_RE.match(name) and name != keep)
            if stale and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass
