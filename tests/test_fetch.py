"""fetch() against local HTTP servers (a mirror of the data home, and stand-ins
for the official URLs)."""
from __future__ import annotations

import dataclasses
import gzip
import io
import shutil
import tarfile
import threading
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tripletml.datasets import DownloadError, _registry, fetch, info, load


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
                                  "dexter", "yeast"])
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


def test_official_newsgroups_checked_by_structure(tmp_path, serve, monkeypatch):
    # the official tarball's hash is unknown: a copy that differs from the stored
    # one is accepted when its layout matches the registry (shrunk here)
    r = info("20newsgroups")
    small = dataclasses.replace(
        r, classes=("alt.a", "sci.b"), n_classes=2, shape=(5, 0),
        subsets=(_registry.Subset("train", r.subsets[0].files, 3),
                 _registry.Subset("test", r.subsets[0].files, 2),
                 _registry.Subset("all", r.subsets[0].files, 5)))
    monkeypatch.setitem(_registry.REGISTRY, "20newsgroups", small)
    served = tmp_path / "official"
    served.mkdir()
    _tiny_bydate(served / "20news-bydate.tar.gz", {"train": {"alt.a": 2, "sci.b": 1},
                                                   "test": {"alt.a": 1, "sci.b": 1}})
    url, requests = serve(served)
    _with_urls(monkeypatch, "20newsgroups", url)
    home = tmp_path / "home"
    fetch("20newsgroups", home)
    b = load("20newsgroups", home)
    assert b.target.tolist() == [0, 0, 1, 0, 1] and b.data[0].endswith("caf\xe9\n")
    fetch("20newsgroups", home)  # present (checked by structure): no new request
    assert len(requests) == 1

    # a wrong layout is rejected and leaves nothing
    _tiny_bydate(served / "20news-bydate.tar.gz", {"train": {"alt.a": 2, "sci.b": 1},
                                                   "test": {"alt.a": 1}})
    with pytest.raises(ValueError, match="20news-bydate layout"):
        fetch("20newsgroups", tmp_path / "home2")
    assert _files(tmp_path / "home2") == []
