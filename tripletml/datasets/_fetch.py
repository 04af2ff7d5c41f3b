"""Download data sets into the data home (standard library ``urllib`` only)."""
from __future__ import annotations

import hashlib
import os
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ._base import _locate, _official_hash_unknown, _resolve_data_home, _verify
from ._registry import DataFile, DatasetRecord, get_record

__all__ = ["fetch", "DownloadError"]


class DownloadError(OSError):
    """A file could not be downloaded (HTTP error, unreachable host, timeout)."""


def _check_newsgroups_archive(path: Path, record: DatasetRecord) -> None:
    """Structural check of a bydate tarball whose hash is unknown."""
    counts: dict[str, int] = {}
    groups: set[str] = set()
    try:
        with tarfile.open(path, "r:*") as tf:
            for m in tf:
                parts = m.name.removeprefix("./").split("/")
                if m.isfile() and len(parts) == 3 and parts[0].startswith("20news-bydate-"):
                    counts[parts[0]] = counts.get(parts[0], 0) + 1
                    groups.add(parts[1])
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ValueError(f"{path}: not a readable tar archive: {exc}") from exc
    expected = {f"20news-bydate-{s.name}": s.n_samples for s in record.subsets if s.name != "all"}
    if counts != expected or groups != set(record.classes):
        raise ValueError(f"{path}: expected the 20news-bydate layout with {expected} messages in "
                         f"{len(record.classes)} groups, found {counts} in {len(groups)} groups")


def _structure_check(record: DatasetRecord, path: Path) -> None:
    if record.kind == "newsgroups":
        _check_newsgroups_archive(path, record)
    else:  # pragma: no cover - every other file has a known hash
        raise ValueError(f"{path}: no checksum known and no structural check for {record.kind!r}")


def _is_present(record: DatasetRecord, f: DataFile, home: Path) -> bool:
    try:
        path, expected = _locate(f, home, "", record.name)
    except FileNotFoundError:
        return False
    unknown_ok = _official_hash_unknown(f, path, home)
    try:
        if not _verify(path, expected, unknown_ok=unknown_ok):
            _structure_check(record, path)
    except ValueError as exc:
        raise ValueError(f"existing file {path} failed verification; delete it and fetch "
                         f"again. {exc}") from exc
    return True


def _makedirs(folder: Path) -> list[Path]:
    """Create ``folder`` and return the folders that were created, outermost first."""
    created = []
    for p in reversed((folder, *folder.parents)):
        if not p.exists():
            created.append(p)
    folder.mkdir(parents=True, exist_ok=True)
    return created


def _download(url: str, target: Path, expected: str | None, *, timeout: float,
              verbose: bool, check=None) -> None:
    """Download ``url`` to ``target`` atomically (temp file, verify, ``os.replace``)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": "tripletml"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as resp:
                    while chunk := resp.read(1 << 16):
                        out.write(chunk)
                        h.update(chunk)
            except urllib.error.HTTPError as exc:
                raise DownloadError(f"could not download {url}: HTTP {exc.code} {exc.reason}") from exc
            except urllib.error.URLError as exc:
                raise DownloadError(f"could not download {url}: {exc.reason}") from exc
            except (TimeoutError, ConnectionError, OSError) as exc:
                raise DownloadError(f"could not download {url}: {exc}") from exc
        actual = h.hexdigest()
        if expected is not None and actual != expected:
            raise ValueError(f"checksum mismatch for {url}: expected sha256 {expected}, got "
                             f"{actual}; the download was discarded")
        if expected is None:
            check(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if verbose:
        print(f"downloaded {url} -> {target} (sha256 {actual})", file=sys.stderr)


def fetch(name: str, data_home: str | os.PathLike | None = None, *, mirror: str | None = None,
          timeout: float = 60, verbose: bool = False) -> Path:
    """Download the files of data set ``name`` into the data home.

    Parameters
    ----------
    name : str
        Registry name (see :func:`~tripletml.datasets.list_datasets`).
    data_home : str or path-like, optional
        Target folder (see :func:`~tripletml.datasets.get_data_home`); files go to
        ``<data_home>/<relative path>``, folders are created as needed.
    mirror : str, optional
        Base URL of a mirror laid out like the data home (serving the stored,
        possibly gzip'd files): each file is fetched from ``mirror + path`` and
        checked against the stored-file SHA-256.  By default the official URL is
        used, the file is checked against the SHA-256 of the original and stored
        under its plain name.  The official 20 Newsgroups tarball has no known
        hash; it is checked by its structure (18846 messages, 20 groups).
    timeout : float, default 60
        Socket timeout in seconds, per request.
    verbose : bool, default False
        Report each download on stderr.

    Returns
    -------
    pathlib.Path
        The data home.

    Raises
    ------
    DownloadError
        HTTP error, unreachable server or timeout.
    ValueError
        Unknown name, checksum mismatch (message names the URL and both hashes), or a
        file already present that fails verification.

    Notes
    -----
    Files already present (stored or plain form) and verified are skipped.  Each
    download goes to a temporary file in the target folder and is moved into place
    with :func:`os.replace` only once verified; on any error (including
    ``KeyboardInterrupt``) the temporary file, and any folder this call created and
    left empty, are removed.  Files of the set completed before the error stay.
    """
    record = get_record(name)
    home, _ = _resolve_data_home(data_home)
    for f in record.files:
        if _is_present(record, f, home):
            if verbose:
                print(f"{f.path}: present and verified, skipped", file=sys.stderr)
            continue
        if mirror is not None:
            url = mirror.rstrip("/") + "/" + urllib.parse.quote(f.path)
            target, expected = home / f.path, f.sha256
        else:
            if f.url is None:  # pragma: no cover - every registered file has a URL
                raise ValueError(f"{f.path} has no official URL; use mirror=")
            url, target, expected = f.url, home / f.original_path, f.sha256_original
        created = _makedirs(target.parent)
        try:
            _download(url, target, expected, timeout=timeout, verbose=verbose,
                      check=lambda p: _structure_check(record, p))
        except BaseException:
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break
            raise
    return home
