"""The semeion, car, optdigits, mnist-test and wine-quality loaders: values on the
real data (``data_home`` fixture) and malformed copies, which must be refused
with a ValueError naming the file (and line), never a NumPy traceback."""
from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tripletml.datasets import _base, info, load

NEW = ["semeion", "car", "optdigits", "mnist-test", "wine-quality"]
MNIST_X, MNIST_Y = (f.path for f in info("mnist-test").files)


def _counts(b) -> dict[str, int]:
    return dict(zip(b.target_names, np.bincount(b.target, minlength=len(b.target_names)).tolist()))


# --------------------------------------------------------------------------- real data
@pytest.mark.data
def test_semeion_values(data_home):
    b = load("semeion", data_home)
    assert b.data.shape == (1593, 256) and b.data.dtype == np.float64
    assert set(np.unique(b.data)) == {0.0, 1.0}
    assert list(_counts(b).values()) == [161, 162, 159, 159, 161, 159, 161, 158, 155, 158]
    assert b.target_names == [str(d) for d in range(10)]
    assert b.feature_names[0] == "pixel_0" and b.feature_names[-1] == "pixel_255"


@pytest.mark.data
def test_car_values(data_home):
    b = load("car", data_home)
    assert b.data.shape == (1728, 21) and set(np.unique(b.data)) == {0.0, 1.0}
    np.testing.assert_array_equal(b.data.sum(axis=1), 6)
    assert _counts(b) == {"unacc": 1210, "acc": 384, "good": 69, "vgood": 65}
    assert b.feature_names[:4] == ["buying=vhigh", "buying=high", "buying=med", "buying=low"]
    assert b.feature_names[-1] == "safety=high"
    # the first row, "vhigh,vhigh,2,2,small,low,unacc"
    on = [b.feature_names[j] for j in np.flatnonzero(b.data[0])]
    assert on == ["buying=vhigh", "maint=vhigh", "doors=2", "persons=2", "lug_boot=small",
                  "safety=low"]
    assert b.target_names[b.target[0]] == "unacc"
    # every attribute combination occurs once (4*4*4*3*3*3 = 1728)
    assert len({row.tobytes() for row in b.data}) == 1728


@pytest.mark.data
def test_optdigits_values(data_home):
    b = load("optdigits", data_home)
    assert b.data.shape == (3823, 64) and b.data.min() == 0 and b.data.max() == 16
    assert (b.data == np.round(b.data)).all()
    assert list(_counts(b).values()) == [376, 389, 380, 389, 387, 376, 377, 387, 380, 382]
    assert not b.data[:, [0, 39]].any()        # MANIFEST [S10]: columns 1 and 40 always 0
    assert b.feature_names == [f"pixel_{i}" for i in range(64)]


@pytest.mark.data
def test_mnist_test_values(data_home):
    b = load("mnist-test", data_home)
    assert b.data.shape == (10000, 784) and b.data.dtype == np.float64
    assert b.data.min() == 0 and b.data.max() == 255 and (b.data == np.round(b.data)).all()
    assert list(_counts(b).values()) == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert b.target[:3].tolist() == [7, 2, 1]  # the well-known first test digits
    assert len(b.feature_names) == 784


@pytest.mark.data
def test_wine_quality_values(data_home):
    red, white, both = (load("wine-quality", data_home, subset=s) for s in ("red", "white", "all"))
    names = ["fixed acidity", "volatile acidity", "citric acid", "residual sugar", "chlorides",
             "free sulfur dioxide", "total sulfur dioxide", "density", "pH", "sulphates",
             "alcohol"]
    assert red.feature_names == white.feature_names == both.feature_names == names
    assert red.target_names == [str(q) for q in range(3, 10)]
    assert _counts(red) == {"3": 10, "4": 53, "5": 681, "6": 638, "7": 199, "8": 18, "9": 0}
    assert _counts(white) == {"3": 20, "4": 163, "5": 1457, "6": 2198, "7": 880, "8": 175,
                              "9": 5}
    np.testing.assert_array_equal(both.data, np.vstack([red.data, white.data]))
    np.testing.assert_array_equal(both.target, np.concatenate([red.target, white.target]))
    np.testing.assert_array_equal(red.data[0], [7.4, 0.7, 0, 1.9, 0.076, 11, 34, 0.9978, 3.51,
                                                0.56, 9.4])
    assert int(red.target_names[red.target[0]]) == 5 == red.target[0] + 3
    assert both.data.shape == (6497, 11) and np.isfinite(both.data).all()


# --------------------------------------------------------------------------- malformed copies
def _tampered(data_home: Path, home: Path, rel: str, edit: Callable[[bytes], bytes],
              gz: bool = False) -> Path:
    """Write ``edit(original bytes)`` to ``home / rel`` (gunzipped first and gzip'd
    again when ``gz``)."""
    raw = (data_home / rel).read_bytes()
    out = home / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(edit(gzip.decompress(raw)), compresslevel=1) if gz
                    else edit(raw))
    return out


def _line_edit(lineno: int, edit: Callable[[bytes], bytes], sep: bytes = b"\n"):
    def apply(raw: bytes) -> bytes:
        lines = raw.split(sep)
        lines[lineno - 1] = edit(lines[lineno - 1])
        return sep.join(lines)
    return apply


def _load_bad(name: str, home: Path, match: str, subset: str = "all"):
    with pytest.raises(ValueError, match=match) as exc:
        load(name, home, subset=subset, verify=False)
    return str(exc.value)


@pytest.mark.data
def test_tampered_copy_fails_the_checksum_first(data_home, tmp_path):
    _tampered(data_home, tmp_path, "car/car.data", _line_edit(5, lambda ln: ln.replace(b"vhigh", b"vvhigh", 1)))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load("car", tmp_path)


@pytest.mark.data
def test_car_unknown_category_or_class(data_home, tmp_path):
    p = _tampered(data_home, tmp_path, "car/car.data",
                  _line_edit(5, lambda ln: ln.replace(b"vhigh", b"vvhigh", 1)))
    msg = _load_bad("car", tmp_path, r"line 5: unknown value 'vvhigh' of attribute 'buying'")
    assert str(p) in msg and "'vhigh', 'high', 'med', 'low'" in msg
    _tampered(data_home, tmp_path, "car/car.data", _line_edit(7, lambda ln: ln.replace(b",2,", b",9,", 1)))
    _load_bad("car", tmp_path, r"line 7: unknown value '9' of attribute 'doors'")
    _tampered(data_home, tmp_path, "car/car.data", _line_edit(9, lambda ln: ln.replace(b"unacc", b"bad")))
    _load_bad("car", tmp_path, r"car.data, line 9: unexpected class label 'bad'")
    _tampered(data_home, tmp_path, "car/car.data", _line_edit(3, lambda ln: ln + b",extra"))
    _load_bad("car", tmp_path, r"line 3: expected 7 fields separated by ','")


@pytest.mark.data
def test_semeion_bad_label_rows_and_pixels(data_home, tmp_path):
    rel = "semeion/semeion.data"

    def two_ones(ln: bytes) -> bytes:  # the label columns are the last 10 fields
        f = ln.split()
        f[-10:] = [b"1", b"1"] + [b"0"] * 8
        return b" ".join(f) + b" "
    p = _tampered(data_home, tmp_path, rel, _line_edit(4, two_ones, b"\r\n"))
    msg = _load_bad("semeion", tmp_path, r"line 4: the 10 label columns must be one-hot")
    assert str(p) in msg
    _tampered(data_home, tmp_path, rel,
              _line_edit(6, lambda ln: ln.rsplit(b" 1", 1)[0] + b" 0" + ln.rsplit(b" 1", 1)[1], b"\r\n"))
    _load_bad("semeion", tmp_path, r"line 6: the 10 label columns must be one-hot")
    _tampered(data_home, tmp_path, rel, _line_edit(2, lambda ln: b"0.5000" + ln[6:], b"\r\n"))
    _load_bad("semeion", tmp_path, r"line 2: holds a feature value that is not an integer")
    _tampered(data_home, tmp_path, rel, _line_edit(2, lambda ln: b"2.0000" + ln[6:], b"\r\n"))
    _load_bad("semeion", tmp_path, r"line 2: holds a feature value outside \[0, 1\]")
    _tampered(data_home, tmp_path, rel, _line_edit(8, lambda ln: b"x" + ln[1:], b"\r\n"))
    _load_bad("semeion", tmp_path, r"line 8: feature 1 is not a number: 'x.0000'")
    _tampered(data_home, tmp_path, rel, _line_edit(9, lambda ln: ln[7:], b"\r\n"))
    _load_bad("semeion", tmp_path, r"line 9: expected 266 fields white-space separated, found 265")


@pytest.mark.data
def test_optdigits_bad_values(data_home, tmp_path):
    rel = "optdigits/optdigits.tra"
    for edit, match in ((lambda ln: b"17" + ln[1:], r"line 3: holds a feature value outside \[0, 16\]"),
                        (lambda ln: b"0.5" + ln[1:], r"line 3: holds a feature value that is not an integer"),
                        (lambda ln: b"nan" + ln[1:], r"line 3: holds NaN or infinity"),
                        (lambda ln: b"1e" + ln[1:], r"line 3: feature 1 is not a number: '1e'"),
                        (lambda ln: ln[2:], r"line 3: expected 65 fields separated by ','"),
                        (lambda ln: ln[:-1] + b"X", r"line 3: unexpected class label 'X'")):
        p = _tampered(data_home, tmp_path, rel, _line_edit(3, edit))
        assert str(p) in _load_bad("optdigits", tmp_path, match)


@pytest.mark.data
def test_wine_bad_header_and_rows(data_home, tmp_path):
    rel = "wine-quality/winequality-red.csv"
    p = _tampered(data_home, tmp_path, rel, _line_edit(1, lambda ln: ln.replace(b"pH", b"ph")))
    msg = _load_bad("wine-quality", tmp_path, r"winequality-red.csv, line 1: unexpected header",
                    subset="red")
    assert str(p) in msg and "'pH'" in msg
    _tampered(data_home, tmp_path, rel, _line_edit(1, lambda ln: ln.replace(b";", b",")))
    _load_bad("wine-quality", tmp_path, r"line 1: expected 12 fields separated by ';', found 1",
              subset="red")
    _tampered(data_home, tmp_path, rel, lambda raw: raw.split(b"\n", 1)[1])  # header missing
    _load_bad("wine-quality", tmp_path, "line 1: unexpected header", subset="red")
    _tampered(data_home, tmp_path, rel, _line_edit(3, lambda ln: ln.replace(b"0.88", b"0,88")))
    _load_bad("wine-quality", tmp_path, r"line 3: feature 2 is not a number: '0,88'", subset="red")
    _tampered(data_home, tmp_path, rel, _line_edit(4, lambda ln: ln.rsplit(b";", 1)[0] + b";5.5"))
    _load_bad("wine-quality", tmp_path, r"line 4: unexpected class label '5.5'", subset="red")
    _tampered(data_home, tmp_path, rel, _line_edit(5, lambda ln: b"inf" + ln[ln.index(b";"):]))
    _load_bad("wine-quality", tmp_path, r"line 5: holds NaN or infinity", subset="red")
    # "all" reads red then white: a fault in the white file names that file
    (tmp_path / rel).write_bytes((data_home / rel).read_bytes())
    _tampered(data_home, tmp_path, "wine-quality/winequality-white.csv",
              _line_edit(10, lambda ln: ln + b";1"))
    _load_bad("wine-quality", tmp_path, r"winequality-white.csv, line 10: expected 12 fields")


def _idx(magic: int, dims: tuple[int, ...], body: bytes) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + body


@pytest.mark.data
@pytest.mark.parametrize("edit,match", [
    (lambda raw: raw[:16 + 784 * 5000 + 17], r"truncated IDX file: the header declares 10000 "
                                              r"items \(7840000 bytes of data\), only 3920017"),
    (lambda raw: raw[:10], r"truncated IDX header \(10 of 16 bytes\)"),
    (lambda raw: b"\x00\x00\x08\x04" + raw[4:], r"bad IDX magic number 0x00000804; expected 0x00000803"),
    (lambda raw: b"\x00\x00\x0d\x03" + raw[4:], r"bad IDX magic number 0x00000d03"),
    (lambda raw: b"PK\x03\x04" + raw[4:], r"bad IDX magic number"),
    (lambda raw: raw[:8] + (29).to_bytes(4, "big") + raw[12:], r"items of shape \(29, 28\); expected \(28, 28\)"),
    (lambda raw: raw[:4] + (2**31).to_bytes(4, "big") + raw[8:], r"declares 2147483648 items .*refusing"),
    (lambda raw: raw + b"\x00", r"trailing bytes after the 10000 items"),
    (lambda raw: raw[:4] + (9999).to_bytes(4, "big") + raw[8:-784], "9999 images but .* 10000 labels"),
])
def test_mnist_bad_image_files(data_home, tmp_path, edit, match):
    p = _tampered(data_home, tmp_path, MNIST_X, edit, gz=True)
    _tampered(data_home, tmp_path, MNIST_Y, lambda raw: raw)
    assert str(p) in _load_bad("mnist-test", tmp_path, match)


@pytest.mark.data
def test_mnist_bad_label_files_and_gzip(data_home, tmp_path):
    _tampered(data_home, tmp_path, MNIST_X, lambda raw: raw)
    p = _tampered(data_home, tmp_path, MNIST_Y, lambda raw: raw[:8 + 7] + b"\x0a" + raw[16:], gz=True)
    msg = _load_bad("mnist-test", tmp_path, r"label 10 of item 7 is not one of 0..9")
    assert str(p) in msg
    _tampered(data_home, tmp_path, MNIST_Y, lambda raw: b"\x00\x00\x08\x03" + raw[4:], gz=True)
    _load_bad("mnist-test", tmp_path, r"bad IDX magic number 0x00000803; expected 0x00000801")
    # the stored gzip stream cut short, or not gzip at all
    _tampered(data_home, tmp_path, MNIST_Y, lambda raw: raw[:len(raw) // 2])
    _load_bad("mnist-test", tmp_path, r"t10k-labels-idx1-ubyte.gz: cannot read the file "
                                      r"\(corrupt or truncated gzip stream\?\)")
    _tampered(data_home, tmp_path, MNIST_Y, lambda raw: b"not gzip" + raw)
    _load_bad("mnist-test", tmp_path, r"cannot read the file")


def test_idx_header_is_checked_before_the_body(tmp_path):
    p = tmp_path / "x-idx3-ubyte"
    p.write_bytes(_idx(0x803, (3, 2, 2), bytes(range(12))))
    np.testing.assert_array_equal(_base._read_idx(p, (2, 2)), np.arange(12).reshape(3, 2, 2))
    # a header promising 4 billion items is refused without reading (or allocating) them
    p.write_bytes(_idx(0x803, (2**32 - 1, 28, 28), b""))
    with pytest.raises(ValueError, match=r"more than 67108864 bytes; refusing"):
        _base._read_idx(p, (28, 28))
    p.write_bytes(_idx(0x801, (3,), b"\x01\x02"))
    with pytest.raises(ValueError, match=r"declares 3 items \(3 bytes of data\), only 2"):
        _base._read_idx(p, ())


def test_table_reading_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(_base, "TABLE_MAX_BYTES", 1000)
    row = b",".join([b"0"] * 64) + b",1\n"
    plain = tmp_path / "o.tra"
    plain.write_bytes(row * 20)
    with pytest.raises(ValueError, match=r"o.tra: more than 1000 bytes of data; refusing"):
        _base._read_uci_csv(plain, info("optdigits"))
    bomb = tmp_path / "o.tra.gz"  # small on disk, large once inflated
    bomb.write_bytes(gzip.compress(row * 100_000))
    assert bomb.stat().st_size * 100 < len(row) * 100_000
    with pytest.raises(ValueError, match="refusing"):
        _base._read_uci_csv(bomb, info("optdigits"))
    p = tmp_path / "big-idx1"
    p.write_bytes(_idx(0x801, (2000,), bytes(2000)))
    with pytest.raises(ValueError, match="refusing"):
        _base._read_idx(p, ())


def test_non_ascii_and_empty_files(tmp_path):
    p = tmp_path / "car.data"
    p.write_bytes(b"vhigh,vhigh,2,2,small,low,unacc\nvhigh,vhigh,2,2,sm\xe4ll,med,unacc\n")
    with pytest.raises(ValueError, match=r"car.data, line 2: not ASCII text \(byte 0xe4\)"):
        _base._read_uci_onehot(p, info("car"))
    p.write_bytes(b"")
    with pytest.raises(ValueError, match="car.data: empty file"):
        _base._read_csv_header(p, info("wine-quality"))
    X, y = _base._read_uci_onehot(p, info("car"))
    assert X.shape == (0, 21) and y.shape == (0,)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_new_readers_refuse_a_fifo(tmp_path):
    p = tmp_path / "x.data"
    os.mkfifo(p)
    match = r"tripletml.datasets.load: .*x.data is a FIFO"
    for read in (_base._read_semeion, _base._read_uci_onehot, _base._read_csv_header):
        with pytest.raises(ValueError, match=match):
            read(p, info("semeion" if read is _base._read_semeion else "car"))
    with pytest.raises(ValueError, match=match):
        _base._read_idx(p, (28, 28))
