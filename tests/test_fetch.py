"""fetch() against local HTTP servers (a mirror of the data home, and stand-ins
for the official URLs)."""
from __future__ import annotations

import dataclasses
import gzip
import io
import os
import shutil
import stat
import tarfile
import threading
import tracemalloc
import urllib.error
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tripletml.datasets import (DownloadError, _base, _fetch, _registry, fetch, info,
                                list_datasets, load, sha256sum)


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def serve():
    """``serve(directory) -> (base_url, list of request paths)``; servers stop at teardown."""
    servers = []

    def start(directory: Path):
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(directory)))
        httpd.requests = []
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/", httpd.requests

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def _with_urls(monkeypatch, name: str, base: str) -> None:
    """Point the registry's official URLs of ``name`` at ``base`` + file name."""
    r = info(name)
    files = tuple(dataclasses.replace(f, url=base + f.url.rsplit("/", 1)[1]) for f in r.files)
    monkeypatch.setitem(_registry.REGISTRY, name, dataclasses.replace(r, files=files))


# --------------------------------------------------------------------------- mirror
@pytest.mark.parametrize("name", ["vehicle", "vowel", "letter", "balance-scale", "ionosphere",
                                  "car", "mnist-test", "wine-quality", "dexter", "yeast"])
@pytest.mark.data
def test_fetch_from_mirror_then_load(data_home, tmp_path, serve, name):
    url, requests = serve(data_home)
    home = tmp_path / "home"
    assert fetch(name, data_home=home, mirror=url) == home
    r = info(name)
    assert _files(home) == sorted(home / f.path for f in r.files)
    assert len(requests) == len(r.files)
    for subset in r.subset_names:
        got, ref = load(name, home, subset=subset), load(name, data_home, subset=subset)
        np.testing.assert_array_equal(got.target, ref.target)
        assert abs(got.data - ref.data).max() == 0


@pytest.mark.data
def test_fetch_newsgroups_from_mirror(data_home, tmp_path, serve):
    url, _ = serve(data_home)
    fetch("20newsgroups", tmp_path, mirror=url.rstrip("/"))  # no trailing slash is fine too
    (f,) = info("20newsgroups").files
    assert (tmp_path / f.path).read_bytes() == (data_home / f.path).read_bytes()


@pytest.mark.data
def test_corrupted_mirror_leaves_nothing(data_home, tmp_path, serve):
    mirror = tmp_path / "mirror"
    (mirror / "vehicle").mkdir(parents=True)
    raw = bytearray((data_home / "vehicle/vehicle.scale.gz").read_bytes())
    raw[1000] ^= 0xFF
    (mirror / "vehicle/vehicle.scale.gz").write_bytes(bytes(raw))
    url, _ = serve(mirror)
    home = tmp_path / "home"
    with pytest.raises(ValueError, match="checksum mismatch") as exc:
        fetch("vehicle", home, mirror=url)
    msg = str(exc.value)
    assert url + "vehicle/vehicle.scale.gz" in msg and info("vehicle").files[0].sha256 in msg
    assert _files(home) == [] and not (home / "vehicle").exists()


def test_http_404_leaves_nothing(tmp_path, serve):
    (tmp_path / "empty").mkdir()
    url, requests = serve(tmp_path / "empty")
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(DownloadError, match="HTTP 404") as exc:
        fetch("ionosphere", home, mirror=url)
    assert url + "ionosphere/ionosphere.data.gz" in str(exc.value)
    assert isinstance(exc.value, OSError)
    assert requests == ["/ionosphere/ionosphere.data.gz"]
    assert list(home.iterdir()) == []


def test_unreachable_server(tmp_path):
    with pytest.raises(DownloadError, match="could not download"):
        fetch("vehicle", tmp_path, mirror="http://127.0.0.1:9/", timeout=5)
    assert _files(tmp_path) == []


@pytest.mark.data
def test_interrupted_download_leaves_nothing(data_home, tmp_path, serve, monkeypatch):
    url, _ = serve(data_home)
    real = urllib.request.urlopen

    class Broken:
        def __init__(self, resp):
            self.resp, self.n = resp, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.resp.close()

        def read(self, size):
            self.n += 1
            if self.n > 1:
                raise KeyboardInterrupt
            return self.resp.read(size)

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Broken(real(*a, **k)))
    with pytest.raises(KeyboardInterrupt):
        fetch("letter", tmp_path / "home", mirror=url)
    assert _files(tmp_path / "home") == []


@pytest.mark.data
def test_present_files_are_not_downloaded_again(data_home, tmp_path, serve):
    url, requests = serve(data_home)
    fetch("svmguide4", tmp_path, mirror=url)
    assert len(requests) == 2
    fetch("svmguide4", tmp_path, mirror=url)
    assert len(requests) == 2
    # a plain (gunzipped) copy counts as present too; only the missing file is fetched
    gz = tmp_path / "svmguide4/svmguide4.gz"
    gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
    gz.unlink()
    (tmp_path / "svmguide4/svmguide4.t.gz").unlink()
    fetch("svmguide4", tmp_path, mirror=url)
    assert requests[2:] == ["/svmguide4/svmguide4.t.gz"]
    assert load("svmguide4", tmp_path).data.shape == (612, 10)


@pytest.mark.data
def test_corrupt_present_file_is_reported(data_home, tmp_path, serve):
    url, requests = serve(data_home)
    (tmp_path / "vehicle").mkdir()
    (tmp_path / "vehicle/vehicle.scale").write_text("1 1:0.5\n")
    with pytest.raises(ValueError, match="delete it"):
        fetch("vehicle", tmp_path, mirror=url)
    assert requests == []


def test_sklearn_set_needs_no_download(tmp_path):
    assert fetch("iris", tmp_path) == tmp_path
    assert _files(tmp_path) == []


# --------------------------------------------------------------------------- official URLs
@pytest.mark.data
def test_official_url_uses_original_hash(data_home, tmp_path, serve, monkeypatch):
    originals = tmp_path / "official"
    originals.mkdir()
    for f in info("vowel").files:
        (originals / Path(f.original_path).name).write_bytes(
            gzip.decompress((data_home / f.path).read_bytes()))
    url, requests = serve(originals)
    _with_urls(monkeypatch, "vowel", url)
    home = tmp_path / "home"
    fetch("vowel", home)
    assert _files(home) == [home / "vowel/vowel.scale", home / "vowel/vowel.scale.t"]
    assert sorted(requests) == ["/vowel.scale", "/vowel.scale.t"]
    ref = load("vowel", data_home)
    got = load("vowel", home)
    assert abs(got.data - ref.data).max() == 0 and [str(p) for p in got.files] == [
        str(home / "vowel/vowel.scale"), str(home / "vowel/vowel.scale.t")]
    fetch("vowel", home)  # present: nothing downloaded again
    assert len(requests) == 2


@pytest.mark.data
def test_official_url_serving_gzip_is_rejected(data_home, tmp_path, serve, monkeypatch):
    # the gzip'd bytes do not match the hash of the uncompressed original
    served = tmp_path / "official"
    served.mkdir()
    shutil.copyfile(data_home / "vehicle/vehicle.scale.gz", served / "vehicle.scale")
    url, _ = serve(served)
    _with_urls(monkeypatch, "vehicle", url)
    with pytest.raises(ValueError, match=info("vehicle").files[0].sha256_original):
        fetch("vehicle", tmp_path / "home")
    assert _files(tmp_path / "home") == []


def _tiny_bydate(path: Path, counts: dict[str, dict[str, int]]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for part, groups in counts.items():
            for group, n in groups.items():
                for i in range(n):
                    data = f"Subject: {group} {i}\n\nbody {group} caf\xe9\n".encode("latin-1")
                    ti = tarfile.TarInfo(f"20news-bydate-{part}/{group}/{100 + i}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))


def _small_newsgroups(monkeypatch, sha256_original=None):
    """Shrink the 20 Newsgroups record to 2 groups / 5 messages (hashes as given)."""
    r = info("20newsgroups")
    (f,) = r.files
    small = dataclasses.replace(
        r, classes=("alt.a", "sci.b"), n_classes=2, shape=(5, 0),
        files=(dataclasses.replace(f, sha256_original=sha256_original),),
        subsets=(_registry.Subset("train", r.subsets[0].files, 3),
                 _registry.Subset("test", r.subsets[0].files, 2),
                 _registry.Subset("all", r.subsets[0].files, 5)))
    monkeypatch.setitem(_registry.REGISTRY, "20newsgroups", small)
    return small


_SMALL = {"train": {"alt.a": 2, "sci.b": 1}, "test": {"alt.a": 1, "sci.b": 1}}


def _serve_official(tmp_path, serve, monkeypatch, counts=_SMALL):
    served = tmp_path / "official"
    served.mkdir(exist_ok=True)
    _tiny_bydate(served / "20news-bydate.tar.gz", counts)
    url, requests = serve(served)
    r = info("20newsgroups")
    (f,) = r.files
    monkeypatch.setitem(_registry.REGISTRY, "20newsgroups", dataclasses.replace(
        r, files=(dataclasses.replace(f, url=url + "20news-bydate.tar.gz"),)))
    return served / "20news-bydate.tar.gz", requests


def test_registry_urls_are_https_and_every_file_has_a_hash():
    for name in list_datasets():
        for f in info(name).files:
            assert f.url.startswith("https://"), f.url
            assert f.sha256 and f.sha256_original, f.path


def test_forged_newsgroups_download_is_refused(tmp_path, serve, monkeypatch):
    # issue 13 item 4: a tarball with the right layout but the wrong hash used to be
    # accepted ("checked by its structure"); now the registry's SHA-256 decides
    _small_newsgroups(monkeypatch, sha256_original=info("20newsgroups").files[0].sha256_original)
    _serve_official(tmp_path, serve, monkeypatch)
    with pytest.raises(ValueError, match="checksum mismatch"):
        fetch("20newsgroups", tmp_path / "home")
    assert _files(tmp_path / "home") == []


def test_newsgroups_download_with_its_hash_is_accepted(tmp_path, serve, monkeypatch):
    small = _small_newsgroups(monkeypatch)
    served = tmp_path / "official"
    served.mkdir()
    _tiny_bydate(served / "20news-bydate.tar.gz", _SMALL)
    digest = sha256sum(served / "20news-bydate.tar.gz")
    _small_newsgroups(monkeypatch, sha256_original=digest)
    path, requests = _serve_official(tmp_path, serve, monkeypatch)
    assert sha256sum(path) == digest and small.name == "20newsgroups"
    home = tmp_path / "home"
    old = os.umask(0o022)
    try:
        fetch("20newsgroups", home)
    finally:
        os.umask(old)
    got = home / "20newsgroups/20news-bydate.tar.gz"
    assert stat.S_IMODE(got.stat().st_mode) == 0o644   # not mkstemp's 0o600
    b = load("20newsgroups", home)
    assert b.target.tolist() == [0, 0, 1, 0, 1] and b.data[0].endswith("caf\xe9\n")
    fetch("20newsgroups", home)  # present and verified by hash: no new request
    assert len(requests) == 1


def test_no_known_hash_means_no_download(tmp_path, serve, monkeypatch):
    _small_newsgroups(monkeypatch, sha256_original=None)
    r = info("20newsgroups")
    (f,) = r.files
    monkeypatch.setitem(_registry.REGISTRY, "20newsgroups", dataclasses.replace(
        r, files=(dataclasses.replace(f, sha256=None),)))
    _, requests = _serve_official(tmp_path, serve, monkeypatch)
    with pytest.raises(ValueError, match="no SHA-256 is known"):
        fetch("20newsgroups", tmp_path / "home")
    assert requests == [] and _files(tmp_path / "home") == []


def test_forged_newsgroups_in_data_home_is_never_present_nor_read(tmp_path, serve,
                                                                    monkeypatch, capsys):
    _small_newsgroups(monkeypatch, sha256_original=info("20newsgroups").files[0].sha256_original)
    home = tmp_path / "home"
    (home / "20newsgroups").mkdir(parents=True)
    _tiny_bydate(home / "20newsgroups/20news-bydate.tar.gz", _SMALL)
    _, requests = _serve_official(tmp_path, serve, monkeypatch)
    with pytest.raises(ValueError, match="failed verification"):
        fetch("20newsgroups", home, verbose=True)
    assert "present and verified" not in capsys.readouterr().err and requests == []

    def must_not_read(*a, **k):
        raise AssertionError("the archive was read before its hash was checked")

    monkeypatch.setattr(_base, "_read_newsgroups", must_not_read)
    with pytest.raises(ValueError, match="checksum mismatch"):
        load("20newsgroups", home)


def test_download_size_is_bounded(data_home, tmp_path, serve, monkeypatch):
    url, _ = serve(data_home)
    monkeypatch.setattr(_fetch, "MAX_DOWNLOAD_BYTES", 1000)
    with pytest.raises(DownloadError, match="more than"):
        fetch("ionosphere", tmp_path / "home", mirror=url)
    assert _files(tmp_path / "home") == []


def test_offline_fetch_is_one_clear_line_suggesting_a_mirror(tmp_path, monkeypatch):
    def offline(*a, **k):
        raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError) as exc:
        fetch("vehicle", tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and "--mirror" in msg and info("vehicle").files[0].url in msg
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    assert _files(tmp_path) == []


# --------------------------------------------------------------------------- bounded tar reading
def _tar_with(path: Path, members: list[tuple[str, int]], *, fmt=tarfile.GNU_FORMAT) -> None:
    """Write a tar.gz whose members are (name, size) of zero bytes, streamed."""
    class Zeros(io.RawIOBase):
        def __init__(self, n):
            self.left = n

        def readable(self):
            return True

        def readinto(self, b):
            k = min(len(b), self.left)
            b[:k] = bytes(k)
            self.left -= k
            return k

    with tarfile.open(path, "w:gz", compresslevel=1, format=fmt) as tf:
        for name, size in members:
            ti = tarfile.TarInfo(name)
            ti.size = size
            tf.addfile(ti, io.BufferedReader(Zeros(size), 1 << 20))


def test_huge_member_is_refused_before_it_is_read(tmp_path):
    # issue 13: a 1 MB tarball with one 300 MB member reached 818 MB before the
    # refusal; 64 MB here (same code path, lighter on the test machine)
    path = tmp_path / "bomb.tar.gz"
    _tar_with(path, [("20news-bydate-train/alt.atheism/1", 64 << 20)])
    assert path.stat().st_size < 1 << 20
    record = info("20newsgroups")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="refusing to read it"):
            _base._read_newsgroups(path, record, "all")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_huge_pax_header_is_refused(tmp_path):
    path = tmp_path / "pax.tar.gz"
    _tar_with(path, [("20news-bydate-train/alt.atheism/" + "x" * (3 << 20), 10)],
              fmt=tarfile.PAX_FORMAT)
    with pytest.raises(ValueError, match="read of"):
        _base._read_newsgroups(path, info("20newsgroups"), "all")


def test_tar_entry_count_and_stream_length_are_bounded(tmp_path, monkeypatch):
    path = tmp_path / "many.tar.gz"
    _tar_with(path, [(f"junk/{i}", 10) for i in range(20)])
    monkeypatch.setattr(_base, "TAR_MAX_ENTRIES", 5)
    with pytest.raises(ValueError, match="more than 5 tar entries"):
        _base._read_newsgroups(path, info("20newsgroups"), "all")
    monkeypatch.setattr(_base, "TAR_MAX_ENTRIES", 10**6)
    _tar_with(path, [("junk/big", 4 << 20)])
    monkeypatch.setattr(_base, "TAR_MAX_STREAM_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="larger than 1 MiB"):
        _base._read_newsgroups(path, info("20newsgroups"), "all")


def test_real_newsgroups_within_the_bounds(data_home):
    b = load("20newsgroups", data_home, subset="test")
    assert len(b.data) == 7532
    assert max(len(t) for t in b.data) < _base.TAR_MAX_MEMBER_BYTES
