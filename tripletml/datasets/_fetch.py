"""Download data sets into the data home (standard library ``urllib`` only)."""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tripletml.datasets._base import _locate, _resolve_data_home, _verify
from tripletml.datasets._registry import DataFile, DatasetRecord, get_record

__all__ = ["fetch", "DownloadError", "MAX_DOWNLOAD_BYTES"]

#: Largest download accepted (the largest registered file is 14.4 MB); a server that
#: sends more is cut off and the partial file removed.
MAX_DOWNLOAD_BYTES = 1 << 30

_MIRROR_ADVICE = ("check the network connection (and proxy settings), or fetch from a "
                  "mirror of the data home: `tripletml fetch NAME --mirror URL` "
                  "(Python: fetch(name, mirror=URL)); every file is still checked "
                  "against its SHA-256")


class DownloadError(OSError):
    """A file could not be downloaded (HTTP error, unreachable host, timeout, too
    large).  Its message is one line naming the URL and suggesting a mirror."""


def _file_mode() -> int:
    """``0o666`` minus the process umask (what ``open()`` would give a new file)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no read-only query elsewhere; restored at once
    os.umask(mask)
    return 0o666 & ~mask


def _is_present(record: DatasetRecord, f: DataFile, home: Path) -> bool:
    """True when ``f`` is in the data home and matches a known SHA-256; ValueError
    when a file is there but fails (never reported as present)."""
    try:
        path, accepted = _locate(f, home, "", record.name)
    except FileNotFoundError:
        return False
    try:
        _verify(path, accepted)
    except ValueError as exc:
        raise ValueError(f"existing file {path} failed verification; delete it and fetch "
                         f"again. {exc}") from exc
    return True


def _check_home_folder(home: Path, how: str) -> None:
    """The data home (chosen by ``how``) is a folder or can be created as one:
    its nearest existing ancestor is a folder.  Checked before any download,
    so that a file named as the data home is not reported as a network error."""
    if not str(home).strip():
        raise ValueError(f"the data home (from {how}) is an empty path; name a folder.")
    folder = home
    while not (folder.exists() or folder.is_symlink()) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        what = "is" if folder == home else f"would be inside {folder}, which is"
        raise ValueError(f"the data home {home} (from {how}) {what} a file, not a folder; "
                         "give a folder (--data-home DIR or TRIPLETML_DATA).")


def _makedirs(folder: Path) -> list[Path]:
    """Create ``folder`` and return the folders that were created, outermost first."""
    created = []
    for p in reversed((folder, *folder.parents)):
        if not p.exists():
            created.append(p)
    folder.mkdir(parents=True, exist_ok=True)
    return created


def _download(url: str, target: Path, accepted: tuple[str, ...], *, timeout: float,
              verbose: bool) -> None:
    """Download ``url`` to ``target`` atomically (temp file, verify, ``os.replace``).

    Fails closed: without a known SHA-256 nothing is downloaded; a file whose hash
    is not in ``accepted`` is discarded.  The file gets the permissions ``open()``
    would give it (``0o666`` minus the umask), not ``mkstemp``'s ``0o600``."""
    if not accepted:
        raise ValueError(f"no SHA-256 is known for {url}, so a download could not be "
                         "verified; nothing was downloaded. Use a mirror of the data home "
                         "(mirror=URL), whose files have known hashes.")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": "tripletml"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as resp:
                    size = 0
                    while chunk := resp.read(1 << 16):  # bounded by MAX_DOWNLOAD_BYTES
                        size += len(chunk)
                        if size > MAX_DOWNLOAD_BYTES:
                            raise DownloadError(
                                f"could not download {url}: the server sent more than "
                                f"{MAX_DOWNLOAD_BYTES >> 20} MiB; download discarded")
                        out.write(chunk)
                        h.update(chunk)
            except DownloadError:
                raise
            except urllib.error.HTTPError as exc:
                raise DownloadError(f"could not download {url}: HTTP {exc.code} {exc.reason}; "
                                    f"{_MIRROR_ADVICE}") from None
            except urllib.error.URLError as exc:
                raise DownloadError(f"could not download {url}: {exc.reason}; "
                                    f"{_MIRROR_ADVICE}") from None
            except (TimeoutError, ConnectionError, OSError) as exc:
                raise DownloadError(f"could not download {url}: {exc}; "
                                    f"{_MIRROR_ADVICE}") from None
        actual = h.hexdigest()
        if actual not in accepted:
            raise ValueError(f"checksum mismatch for {url}: expected sha256 "
                             f"{' or '.join(accepted)}, got {actual}; the download was "
                             "discarded")
        os.chmod(tmp, _file_mode())
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
        used (https for every registered file), the file is checked against the
        SHA-256 of the original and stored under its plain name.  A file without a
        known hash is never downloaded or accepted (fail closed).
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
        HTTP error, unreachable server, timeout, or a response above
        ``MAX_DOWNLOAD_BYTES``; one-line message suggesting ``mirror=``.
        A subclass of OSError.
    ValueError
        Unknown name, checksum mismatch (message names the URL and both hashes), or a
        file already present that fails verification.

    Notes
    -----
    Files already present (stored or plain form) and verified are skipped.  Each
    download goes to a temporary file in the target folder and is moved into place
    with :func:`os.replace` only once verified, with the permissions a new file
    gets from ``open()`` (``0o666`` minus the umask); on any error (including
    ``KeyboardInterrupt``) the temporary file, and any folder this call created and
    left empty, are removed.  Files of the set completed before the error stay.
    """
    record = get_record(name)
    home, how = _resolve_data_home(data_home)
    _check_home_folder(home, how)
    for f in record.files:
        if _is_present(record, f, home):
            if verbose:
                print(f"{f.path}: present and verified, skipped", file=sys.stderr)
            continue
        if mirror is not None:
            url = mirror.rstrip("/") + "/" + urllib.parse.quote(f.path)
            target, accepted = home / f.path, (f.sha256,) if f.sha256 else ()
        else:
            if f.url is None:  # pragma: no cover - every registered file has a URL
                raise ValueError(f"{f.path} has no official URL; use mirror=")
            url, target = f.url, home / f.original_path
            accepted = (f.sha256_original,) if f.sha256_original else ()
        created = _makedirs(target.parent)
        try:
            _download(url, target, accepted, timeout=timeout, verbose=verbose)
        except BaseException:
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break
            raise
    return home
