"""Registered paper reproductions (``tripletml reproduce NAME``).

Each algorithm module registers its own reproduction with :func:`register`.
A reproduction is a function ``run(out_dir, *, quick, seeds, data_home,
verbose) -> list[dict]`` that writes CSV, Markdown and PNG files to
``out_dir`` and prints the paper's numbers beside ours.  Run them through
:func:`run`, which picks the output folder (quick runs apart from full ones)
and records in every output the command that made it.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import numbers
import os
import platform
import shlex
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tripletml._version import __version__

__all__ = ["register", "REPRODUCTIONS", "run", "available", "default_out_dir",
           "reproduce_command", "PROVENANCE"]

#: Manifest written beside every run's outputs.
PROVENANCE = "PROVENANCE.json"


@dataclass(frozen=True)
class Reproduction:
    name: str
    description: str
    func: Callable


REPRODUCTIONS: dict[str, Reproduction] = {}

# modules that register reproductions when imported
_MODULES = ("tripletml.reproduce.euclidean", "tripletml.reproduce.sdca_table2",
            "tripletml.reproduce.loreta_20ng", "tripletml.reproduce.loreta_multilabel",
            "tripletml.reproduce.comet_sparse", "tripletml.reproduce.lowrank_dml",
            "tripletml.reproduce.sml_uci")


def register(name: str, description: str) -> Callable:
    """Decorator registering ``func`` as reproduction ``name``."""
    def deco(func: Callable) -> Callable:
        REPRODUCTIONS[name] = Reproduction(name, description, func)
        return func
    return deco


def available() -> dict[str, Reproduction]:
    for mod in _MODULES:
        importlib.import_module(mod)
    return dict(REPRODUCTIONS)


def default_out_dir(name: str, quick: bool = False) -> Path:
    """Where ``tripletml reproduce NAME`` writes by default: ``results/NAME`` for a
    full run, ``results/quick/NAME`` for a ``--quick`` one (relative to the current
    folder; ``results/quick`` is kept out of git by a ``.gitignore`` written there),
    so a quick run never replaces the committed full results."""
    return Path("results") / "quick" / name if quick else Path("results") / name


def reproduce_command(name: str, out_dir, *, quick: bool = False, seeds: int | None = None,
                      only=None, data_home=None) -> str:
    """The ``tripletml reproduce`` command line equivalent to these arguments."""
    args = ["tripletml", "reproduce", name, "--out", str(out_dir)]
    if quick:
        args.append("--quick")
    if seeds is not None:
        args += ["--seeds", str(seeds)]
    if only:
        args += ["--only", ",".join(only)]
    if data_home is not None:
        args += ["--data-home", str(data_home)]
    return shlex.join(args)


def _snapshot(folder: Path) -> dict[Path, tuple[int, int]]:
    if not folder.is_dir():
        return {}
    return {p: (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _guard_quick(out: Path, name: str, overwrite: bool) -> None:
    """Refuse a quick run into a folder holding anything but an earlier quick run."""
    if overwrite or not out.is_dir() or not any(out.iterdir()):
        return
    prov = out / PROVENANCE
    try:
        if json.loads(prov.read_text()).get("quick") is True:
            return
    except (OSError, ValueError, AttributeError):
        pass
    raise ValueError(
        f"reproduce {name} --quick: {out} already holds outputs that no quick run made "
        f"(the committed full results?); a quick run would overwrite them. Quick runs "
        f"write to {default_out_dir(name, quick=True)} by default: leave out --out, pass "
        "another folder, or overwrite=True to replace them on purpose.")


def _png_with_text(data: bytes, key: str, text: str) -> bytes:
    """Insert a PNG ``tEXt`` chunk right after IHDR (first chunk, 33 bytes in)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return data
    body = b"tEXt" + key.encode("latin-1") + b"\0" + text.encode("latin-1", "replace")
    chunk = (struct.pack(">I", len(body) - 4) + body
             + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF))
    return data[:33] + chunk + data[33:]


def _git_commit() -> tuple[str | None, bool | None]:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if head.returncode != 0:
        return None, None
    return head.stdout.strip(), bool(dirty.stdout.strip()) if dirty.returncode == 0 else None


def _record_provenance(out: Path, name: str, command: str, quick: bool,
                       before: dict, started: float) -> dict:
    """Stamp every file the run wrote with ``command`` and list them in PROVENANCE.json:
    Markdown gets a closing line, PNG a ``tEXt`` chunk (key ``tripletml-command``);
    CSV stays plain (readers need no comment syntax) and is covered by the manifest."""

    footer = f"\n---\nMade by `{command}` (tripletml {__version__}); see {PROVENANCE}.\n"
    files = {}
    for p, sig in _snapshot(out).items():
        if p.name == PROVENANCE or before.get(p) == sig:
            continue
        if p.suffix == ".md":
            text = p.read_text()
            if not text.endswith(footer):
                p.write_text(text + footer)
        elif p.suffix == ".png":
            p.write_bytes(_png_with_text(p.read_bytes(), "tripletml-command", command))
        files[str(p.relative_to(out))] = hashlib.sha256(p.read_bytes()).hexdigest()
    commit, dirty = _git_commit()
    import numpy
    import scipy
    import sklearn
    record = {
        "reproduction": name, "command": command, "quick": quick,
        "argv": [sys.executable, *sys.argv], "cwd": os.getcwd(),
        "tripletml": __version__, "git_commit": commit, "git_dirty": dirty,
        "python": platform.python_version(), "numpy": numpy.__version__,
        "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
        "platform": platform.platform(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "files": files,
    }
    (out / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def run(name: str, out_dir=None, *, quick: bool = False, seeds: int | None = None,
        data_home=None, verbose: int = 1, only=None, overwrite: bool = False,
        command: str | None = None):
    """Run reproduction ``name``, writing its outputs to ``out_dir``.

    Parameters
    ----------
    name : str
        A registered reproduction (see :func:`available`).
    out_dir : path-like, optional
        Output folder; default :func:`default_out_dir` (``results/quick/NAME`` for
        quick runs, so they never replace the committed full results).
    quick, seeds, data_home, verbose
        Passed to the reproduction.
    only : sequence of str, optional
        Restrict the run to some of its data sets, for reproductions that take an
        ``only`` argument.
    overwrite : bool, default False
        Let a quick run write into a folder that holds outputs it did not make
        (refused otherwise, with a ValueError).
    command : str, optional
        The command line that started the run, recorded in the outputs (the CLI
        passes its own); by default the equivalent ``tripletml reproduce`` line.

    Notes
    -----
    Every file the run writes is recorded with the command that made it: a
    closing line in each Markdown file, a ``tEXt`` chunk in each PNG, and
    ``PROVENANCE.json`` listing every file with its SHA-256, the command,
    ``sys.argv``, the package / library versions and the git commit.
    """
    repros = available()
    if name not in repros:
        raise ValueError(f"unknown reproduction {name!r}; available: "
                         f"{', '.join(sorted(repros))}")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, numbers.Integral)
                              or seeds < 1):
        raise ValueError(f"reproduce {name}: seeds={seeds!r} must be a positive integer (the "
                         "number of random splits / seeds to average over), or None for the "
                         "paper's.")
    kwargs = {}
    if only:
        if "only" not in inspect.signature(repros[name].func).parameters:
            raise ValueError(f"reproduction {name!r} cannot be restricted to some data sets")
        kwargs["only"] = tuple(only)
    out = Path(out_dir) if out_dir is not None else default_out_dir(name, quick)
    folder = out
    while not (folder.exists() or folder.is_symlink()) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"reproduce {name}: the output folder {out} cannot be made: "
                         f"{folder} is a file, not a folder.")
    if quick:
        _guard_quick(out, name, overwrite)
    if quick and out.resolve().parent == default_out_dir(name, True).resolve().parent:
        out.parent.mkdir(parents=True, exist_ok=True)
        ignore = out.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# quick reproduction runs (tripletml reproduce --quick)\n*\n")
    out.mkdir(parents=True, exist_ok=True)
    cmd = command or reproduce_command(name, out, quick=quick, seeds=seeds, only=only,
                                       data_home=data_home)
    before, started = _snapshot(out), time.time()
    rows = repros[name].func(out, quick=quick, seeds=seeds, data_home=data_home,
                             verbose=verbose, **kwargs)
    _record_provenance(out, name, cmd, quick, before, started)
    return rows
