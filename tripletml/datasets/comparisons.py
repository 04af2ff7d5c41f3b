"""Comparison data sets: triplets answered by people about a fixed set of items.

A *triplet* ``(head, close, far)`` of item ids says that item ``close`` was
judged more like item ``head`` than item ``far`` is.  This module loads the
registered comparison sets with checksums (:func:`load_comparisons`) and
converts the common answer formats of similarity studies into such triplets
(:func:`read_triplets`):

``"head_close_far"``
    one triplet per row, as above;
``"odd_one_out"``
    each row lists ``k >= 3`` items, the first being the one judged the odd one
    out ``o``; every other two items ``x != y`` are taken to be closer to each
    other than to ``o``: the triplets ``(x, y, o)`` for every ordered pair,
    ``(k - 1)(k - 2)`` per row (for ``k = 3``: ``(x, y, o)`` and ``(y, x, o)``);
``"most_central"``
    each row lists ``k >= 3`` items, the first being the one judged the most
    central ``c`` (most like all others); every other item ``x`` is taken to be
    closer to ``c`` than to any other non-central item ``y``: the triplets
    ``(x, c, y)`` for every ordered pair ``x != y``, ``(k - 1)(k - 2)`` per row.

The last two are the conversions of cblearn (``triplets_from_oddoneout`` and
``triplets_from_mostcentral``, which assume the triangle inequality); the
triplets of one row are consecutive here, in the order of the pairs
``(x, y)`` in :func:`itertools.permutations` of the other items.

>>> from tripletml.datasets import load_comparisons      # doctest: +SKIP
>>> z = load_comparisons("zappos")                       # doctest: +SKIP
>>> z.triplets.shape, z.features.shape                   # doctest: +SKIP
((283770, 3), (85, 4096))
"""
from __future__ import annotations

import itertools
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils import Bunch

from tripletml.core.files import check_regular_file, open_regular
from tripletml.core.validation import as_generator, check_dense_memory
from tripletml.datasets._base import _locate, _resolve_data_home, _verify
from tripletml.datasets._registry import DataFile

__all__ = ["ComparisonRecord", "COMPARISONS", "load_comparisons", "read_triplets",
           "check_item_triplets", "count_answers", "split_items", "ItemSplit", "FORMATS",
           "COMPARISON_MAX_BYTES", "MAX_TEXT_RATIO", "check_n_items_bound"]

#: answer formats understood by :func:`read_triplets`
FORMATS = ("head_close_far", "odd_one_out", "most_central")

#: Largest uncompressed text a comparison file (or zip member) may hold; the
#: largest registered one, the Zappos triplets, has 2.5 MB.
COMPARISON_MAX_BYTES = 256 << 20

#: Largest number of choices per row of an odd-one-out / most-central file.
MAX_CHOICES = 64

#: Largest expansion (text bytes / stored bytes) of a ``.gz`` or ``.zip``
#: comparison file beyond :data:`SMALL_TEXT_BYTES` of text: real answer files
#: compress 3 to 5 times (Zappos: 3.2), a decompression bomb 1000 times.
MAX_TEXT_RATIO = 100
#: Text up to this size is exempt from :data:`MAX_TEXT_RATIO`.
SMALL_TEXT_BYTES = 1 << 20
#: Longest line of a comparison file (MAX_CHOICES ids of 18 digits and
#: separators fit many times over); a longer one is refused, which bounds the
#: memory of parsing one line.
MAX_LINE_BYTES = 1 << 16
#: Text parsed at a time (the Python objects of one chunk are freed before the
#: next): parsing costs the text, the ids (8 bytes each) and one chunk.
_PARSE_CHUNK = 1 << 16

#: Items in ``0..n_items - 1`` that no triplet names are accepted up to
#: ``UNNAMED_FACTOR * (items named) + UNNAMED_SLACK`` items in all.
UNNAMED_FACTOR = 10
UNNAMED_SLACK = 10 ** 5


def check_n_items_bound(t: np.ndarray, n_items: int, who: str, given: bool, *,
                        factor: int = UNNAMED_FACTOR, slack: int = UNNAMED_SLACK,
                        why: str = "items in no triplet learn nothing and each costs "
                                   "memory") -> None:
    """Refuse an ``n_items`` (given, or the largest id + 1) far above the items
    the triplets ``t`` name, before anything of size ``n_items`` is allocated.

    The bound is ``factor * named + slack`` (by default 10 x the named
    items + 100,000): items in no triplet are legitimate (a held-out fold, items
    not yet asked about), but each costs memory and learns nothing, and an id
    or an ``n_items`` of 10**8 for a dozen items is a mistake that would
    otherwise allocate gigabytes.  Costs a sort of the ids, ``O(m log m)``.
    """
    if n_items <= slack:
        return
    named = int(np.unique(t).size)
    bound = factor * named + slack
    if n_items <= bound:
        return
    if given:
        raise ValueError(f"{who}: n_items={n_items} but the triplets name only {named} items; "
                         f"at most {factor} x {named} + {slack} = {bound} items are accepted "
                         f"({why}). Pass the number of items the data has, or relabel "
                         "the ids to the items named (ids, t = np.unique(triplets, "
                         "return_inverse=True)).")
    raise ValueError(f"{who}: the largest item id is {n_items - 1} but the triplets name only "
                     f"{named} items (at most {bound} ids accepted); ids must be "
                     "0..n_items - 1. Relabel them (ids, t = np.unique(triplets, "
                     "return_inverse=True)) or pass n_items.")


@dataclass(frozen=True)
class ComparisonRecord:
    """Description of one comparison data set.

    Attributes
    ----------
    name, description, origin : str
        Registry name, what the triplets mean, citation and provenance.
    triplets_file, features_file : DataFile
        The zipped triplets (one ``head,close,far`` line each) and features
        (``features_file`` may be None for a set without features).
    member_triplets, member_features : str
        The only member each zip may hold.
    n_items, n_triplets, n_features : int
        Expected counts (checked exactly).
    """

    name: str
    description: str
    origin: str
    triplets_file: DataFile
    member_triplets: str
    n_items: int
    n_triplets: int
    features_file: DataFile | None = None
    member_features: str = ""
    n_features: int = 0


_SALMON = "https://raw.githubusercontent.com/stsievert/salmon/" \
          "3e92c9c6c364c0a15a6f344607324b8f83d914eb/examples/zappos/_raw/"

COMPARISONS: dict[str, ComparisonRecord] = {
    "zappos": ComparisonRecord(
        name="zappos",
        description=(
            "Zappos shoes: 283,770 relative comparisons answered by Amazon Mechanical "
            "Turk workers about 85 shoe images, deconflicted by their collectors (answers "
            "forming cycles removed). Each triplet (head, close, far) of item ids 0-84 "
            "says that shoe 'close' was judged more like shoe 'head' than shoe 'far' is. "
            "No question (a head and its pair of candidates) appears twice, so no two "
            "answers conflict; the triplets cover 98,753 distinct sets of three shoes (the "
            "same three asked with different heads). features[i] is the 4096-dimensional "
            "AlexNet CNN feature vector of shoe i (non-negative, about 26 % non-zero). "
            "On all triplets the Euclidean distance on the features agrees with the "
            "people on 69.2 % of the triplets, the cosine on 71.8 %."),
        origin=("E. Heim, M. Berger, L. Seversky and M. Hauskrecht, Active perceptual "
                "similarity modeling with auxiliary information, arXiv:1511.02254, 2015; "
                "files as published in the GitHub repository stsievert/salmon "
                "(examples/zappos/_raw) from the authors' zappos.zip."),
        triplets_file=DataFile(
            "zappos/deconflicted_triplets.csv.zip", _SALMON + "deconflicted_triplets.csv.zip",
            "c36e790fbea1f992e44237be15a90781ff7e1d7bb827170bcd7603eb9dcbd02f",
            "c36e790fbea1f992e44237be15a90781ff7e1d7bb827170bcd7603eb9dcbd02f"),
        member_triplets="deconflicted_triplets.csv",
        n_items=85, n_triplets=283770,
        features_file=DataFile(
            "zappos/cnn_feats.csv.zip", _SALMON + "cnn_feats.csv.zip",
            "f35803c0c85e8bc7b28299d3f3c56d1a6f76160fbe9fc0e7f84504a8544c14a4",
            "f35803c0c85e8bc7b28299d3f3c56d1a6f76160fbe9fc0e7f84504a8544c14a4"),
        member_features="cnn_feats.csv",
        n_features=4096,
    ),
}


# --------------------------------------------------------------------------- checks
def check_item_triplets(triplets: Any, n_items: int | None = None, *,
                        who: str = "triplets", width: int = 3,
                        allow_repeats: bool = False) -> np.ndarray:
    """Validate an ``(m, width)`` array of item ids; return it as int64.

    Parameters
    ----------
    triplets : array-like of shape (m, width)
        Integer item ids (an integral float array such as ``np.loadtxt`` returns
        is accepted).
    n_items : int, optional
        Ids must lie in ``0..n_items - 1``; None: any id >= 0.
    who : str
        Named first in the error messages.
    width : int, default 3
    allow_repeats : bool, default False
        Whether a row may name the same item twice.

    Raises
    ------
    ValueError
        Not a rectangular numeric array of that width, empty, a non-integer,
        negative or out-of-range id, a row repeating an id; the message names
        the first offending row.
    """
    if triplets is None:
        raise ValueError(f"{who}: got None; expected an integer array of item ids of "
                         f"shape (m, {width}).")
    try:
        t = np.asarray(triplets)
    except (ValueError, TypeError):
        raise ValueError(f"{who}: expected a rectangular integer array of shape (m, {width}); "
                         "got rows of different lengths.") from None
    if t.dtype == object or t.ndim != 2 or t.shape[1] != width:
        shape = t.shape if t.dtype != object else "ragged or non-numeric"
        raise ValueError(f"{who}: expected an integer array of item ids of shape "
                         f"(m, {width}); got {shape}.")
    if t.shape[0] == 0:
        raise ValueError(f"{who}: no rows; at least one is required.")
    if t.dtype == bool or not (np.issubdtype(t.dtype, np.integer)
                               or np.issubdtype(t.dtype, np.floating)):
        raise ValueError(f"{who}: item ids must be integers; got dtype {t.dtype}.")
    if np.issubdtype(t.dtype, np.floating):
        bad = ~np.isfinite(t) | (t != np.round(t))
        if bad.any():
            r = int(np.argmax(bad.any(axis=1)))
            raise ValueError(f"{who}: item ids must be integers; row {r} is "
                             f"{t[r].tolist()}.")
        if np.abs(t).max() > 2 ** 53:
            raise ValueError(f"{who}: an item id is too large ({np.abs(t).max():g}).")
    if t.dtype.kind == "u" and t.size and t.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{who}: an item id is too large ({t.max()}).")
    t = np.ascontiguousarray(t, dtype=np.int64)
    neg = (t < 0).any(axis=1)
    if neg.any():
        r = int(np.argmax(neg))
        raise ValueError(f"{who}: item ids must be >= 0; row {r} is {t[r].tolist()}.")
    if n_items is not None:
        out = (t >= n_items).any(axis=1)
        if out.any():
            r = int(np.argmax(out))
            raise ValueError(f"{who}: item id {int(t[r].max())} in row {r} "
                             f"({t[r].tolist()}) is out of range for {n_items} items "
                             f"(valid: 0..{n_items - 1}).")
    if not allow_repeats:
        s = np.sort(t, axis=1)
        rep = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if rep.any():
            r = int(np.argmax(rep))
            raise ValueError(f"{who}: row {r} ({t[r].tolist()}) repeats an item id; each "
                             "comparison needs distinct items.")
    return t


# --------------------------------------------------------------------------- conversions
def _pairs_of_others(k: int) -> np.ndarray:
    """(k-1)(k-2) ordered pairs of the columns 1..k-1."""
    return np.array(list(itertools.permutations(range(1, k), 2)), dtype=np.int64)


def _convert(rows: np.ndarray, fmt: str) -> np.ndarray:
    """Rows of item ids in ``fmt`` -> (head, close, far) triplets."""
    if fmt == "head_close_far":
        return rows
    m, k = rows.shape
    pairs = _pairs_of_others(k)                        # (p, 2)
    x = rows[:, pairs[:, 0]]                           # (m, p)
    y = rows[:, pairs[:, 1]]
    first = np.broadcast_to(rows[:, :1], x.shape)
    if fmt == "odd_one_out":                           # (x, y, odd)
        out = np.stack([x, y, first], axis=2)
    else:                                              # most central: (x, central, y)
        out = np.stack([x, first, y], axis=2)
    return np.ascontiguousarray(out.reshape(m * len(pairs), 3))


# --------------------------------------------------------------------------- text files
def _read_bounded(fh, n: int) -> bytearray:
    """At most ``n`` bytes of ``fh``, read 1 MiB at a time (a single
    ``read(n)`` reserves ``n`` bytes however short the stream is)."""
    out = bytearray()
    while len(out) < n:
        chunk = fh.read(min(1 << 20, n - len(out)))
        if not chunk:
            break
        out += chunk
    return out


def _allowed_text(limit: int, stored: int, max_ratio: int | None) -> int:
    """The text a compressed file of ``stored`` bytes may expand to."""
    if max_ratio is None:
        return limit
    return min(limit, max(SMALL_TEXT_BYTES, max_ratio * stored))


def _too_large(where: str, limit: int, allowed: int, max_ratio: int | None) -> str:
    if allowed < limit:
        return (f"{where} expands to more than {allowed} bytes, over {max_ratio} times its "
                "stored size (a decompression bomb?); refusing to read it.")
    return f"{where} holds more than {limit} bytes; refusing to read it."


def _read_zip_member(path: Path, member: str, limit: int,
                     max_ratio: int | None = None) -> bytes:
    """The bytes of the only member ``member`` of the zip at ``path`` (at most
    ``limit``, and at most ``max_ratio`` times its compressed size beyond
    :data:`SMALL_TEXT_BYTES`)."""
    with open_regular(path, "tripletml.datasets") as raw:
        try:
            with zipfile.ZipFile(raw) as zf:
                infos = zf.infolist()
                names = [i.filename for i in infos]
                if names != [member]:
                    raise ValueError(f"{path}: expected a zip archive holding only "
                                     f"{member!r}; it holds {names[:5]}"
                                     f"{' ...' if len(names) > 5 else ''}.")
                info = infos[0]
                if info.flag_bits & 0x1:
                    raise ValueError(f"{path}: {member} is encrypted.")
                if info.file_size > limit:
                    raise ValueError(f"{path}: {member} declares {info.file_size} bytes, more "
                                     f"than the {limit} bytes a comparison file may have.")
                allowed = _allowed_text(limit, info.compress_size, max_ratio)
                if info.file_size > allowed:
                    raise ValueError(f"{path}: {member} declares {info.file_size} bytes, "
                                     f"{info.file_size / max(info.compress_size, 1):.0f} times "
                                     f"its compressed size (at most {max_ratio} times "
                                     "accepted: a decompression bomb?).")
                with zf.open(info) as fh:
                    data = _read_bounded(fh, allowed + 1)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path}: not a valid zip archive ({exc}).") from None
        except (OSError, EOFError, NotImplementedError) as exc:
            raise ValueError(f"{path}: cannot read {member} from the zip archive "
                             f"({exc}).") from None
    if len(data) > allowed:
        if allowed < limit:
            raise ValueError(_too_large(f"{path}: {member}", limit, allowed, max_ratio))
        raise ValueError(f"{path}: {member} inflates to more than {limit} bytes; "
                         "refusing to read it.")
    return data


def _read_text(path: Path, limit: int) -> bytes:
    """A plain, ``.gz`` or single-member ``.zip`` file's bytes, bounded: at
    most ``limit`` bytes of text, and a compressed file at most
    :data:`MAX_TEXT_RATIO` times its stored size (beyond
    :data:`SMALL_TEXT_BYTES`), read as a stream that stops there."""
    if path.suffix == ".zip":
        with open_regular(path, "read_triplets") as raw:
            try:
                names = zipfile.ZipFile(raw).namelist()
            except zipfile.BadZipFile as exc:
                raise ValueError(f"read_triplets: {path}: not a valid zip archive "
                                 f"({exc}).") from None
        if len(names) != 1:
            raise ValueError(f"read_triplets: {path}: a zip archive must hold exactly one "
                             f"file; it holds {len(names)}.")
        return _read_zip_member(path, names[0], limit, MAX_TEXT_RATIO)
    import gzip
    import zlib
    with open_regular(path, "read_triplets") as raw:
        gz = path.suffix == ".gz"
        allowed = _allowed_text(limit, os.fstat(raw.fileno()).st_size,
                                MAX_TEXT_RATIO if gz else None)
        fh = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        try:
            data = _read_bounded(fh, allowed + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"read_triplets: {path}: cannot read the file ({exc}).") from None
    if len(data) > allowed:
        raise ValueError(_too_large(f"read_triplets: {path}", limit, allowed,
                                    MAX_TEXT_RATIO if gz else None))
    return data


_DIGITS_COMMAS_NL = bytes(range(48, 58)) + b",\n"
_FIELD_SEPARATORS = re.compile(r"[,;\t]")


def _fast_id_rows(data: bytes, width: int | None) -> np.ndarray | None:
    """The common case at NumPy speed: only digits, commas and LF line ends,
    every line ``width`` ids, no blank line.  None: use the general parser."""
    if width is None or not data or data.translate(None, _DIGITS_COMMAS_NL):
        return None
    body = data[:-1] if data.endswith(b"\n") else data
    b = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(b == 10)
    commas = np.cumsum(b == 44)
    ends = np.append(nl, len(b)) if len(b) else nl
    per_line = np.diff(np.concatenate([[0], commas[ends - 1]])) if len(b) else ends
    starts = np.concatenate([[0], nl + 1])
    if (len(b) == 0 or (per_line != width - 1).any() or (starts >= ends).any()
            or np.any(b[np.concatenate([starts, ends - 1])] == 44)
            or np.any((b[1:] == 44) & (b[:-1] == 44))):
        return None
    tokens = bytes(body).replace(b"\n", b",").split(b",")
    if any(len(t) > 18 for t in tokens):
        return None
    return np.array(tokens, dtype=np.int64).reshape(-1, width)


def _fields(line: str) -> tuple[list[str], bool]:
    """The fields of a stripped line and whether one of them is empty (two
    commas, semicolons or tabs in a row, or one at the start or end)."""
    parts = _FIELD_SEPARATORS.split(line)
    if len(parts) == 1:
        return line.split(), False
    return [f for part in parts for f in part.split()], any(not p.strip() for p in parts)


def _parse_chunk(chunk: bytes, where: str, width: int | None, first_line: int,
                 header_done: bool) -> tuple[np.ndarray, int | None, bool]:
    """One chunk of whole lines (starting at line ``first_line``) as an int64
    array of rows; returns ``(rows, width, header_done)``."""
    fast = _fast_id_rows(chunk, width)     # digits and commas only: no header line
    if fast is not None:
        return fast, width, True
    try:
        text = chunk.decode("ascii")
    except UnicodeDecodeError as exc:
        line = first_line + chunk.count(b"\n", 0, exc.start)
        raise ValueError(f"{where}, line {line}: not ASCII text; is this a comparison "
                         "file?") from None
    rows, linenos = [], []
    for lineno, line in enumerate(text.split("\n"), first_line):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE_BYTES:
            raise ValueError(f"{where}, line {lineno}: longer than {MAX_LINE_BYTES} bytes; is "
                             "this a comparison file?")
        fields, empty = _fields(line)
        if not header_done:
            header_done = True
            if not all(f.lstrip("+-").isdigit() for f in fields):
                continue  # a header line such as "head, b, c"
        if empty:
            raise ValueError(f"{where}, line {lineno}: an empty field in {line[:80]!r} (two "
                             "separators in a row, or one at the start or end of the line); "
                             "every field must be an item id.")
        if width is None:
            width = len(fields)
        if len(fields) != width:
            raise ValueError(f"{where}, line {lineno}: expected {width} item ids, found "
                             f"{len(fields)}.")
        rows.append(fields)
        linenos.append(lineno)
    for fields, lineno in zip(rows, linenos):
        for f in fields:
            if not f.lstrip("+-").isdigit() or len(f) > 18:
                raise ValueError(f"{where}, line {lineno}: item id {f[:40]!r} is not an "
                                 "integer (or too long).")
    if not rows:
        return np.empty((0, width or 0), dtype=np.int64), width, header_done
    return np.array(rows, dtype=np.int64).reshape(len(rows), width), width, header_done


def _parse_id_rows(data: bytes, where: str, width: int | None) -> np.ndarray:
    """Rows of integer ids separated by commas, tabs or blanks.  Blank lines and
    lines starting with ``#`` are skipped; a first line that is not all integers
    is taken as a header.  ``width=None``: the first data row's width.  An
    empty field (``0,,1,2``) is refused naming its line.

    Memory: the text, the ids (8 bytes each, at most one per separator or
    line end: counted and checked against the memory available before
    parsing) and one chunk of :data:`_PARSE_CHUNK` bytes of lines at a time;
    a line longer than :data:`MAX_LINE_BYTES` is refused.
    """
    n = len(data)
    bound = sum(data.count(c) for c in (b",", b";", b"\t", b" ", b"\n")) + 1
    check_dense_memory(8 * bound, where, f"the item ids of {n} bytes of text (at most "
                                         f"{bound}) do not fit")
    out = np.empty(bound, dtype=np.int64)
    filled, line, pos, header_done = 0, 1, 0, False
    while pos < n:
        end = min(pos + _PARSE_CHUNK, n)
        if end < n:
            nl = data.find(b"\n", end - 1, end + MAX_LINE_BYTES + 1)
            if nl < 0 and n <= end + MAX_LINE_BYTES:
                nl = n - 1                      # the last line, without a line end
            if nl < 0:
                start = data.rfind(b"\n", pos, end) + 1 or pos
                at = line + data.count(b"\n", pos, start)
                raise ValueError(f"{where}, line {at}: longer than {MAX_LINE_BYTES} bytes; "
                                 "is this a comparison file?")
            end = nl + 1
        chunk = bytes(data[pos:end])
        rows, width, header_done = _parse_chunk(chunk, where, width, line, header_done)
        out[filled:filled + rows.size] = rows.ravel()
        filled += rows.size
        line += chunk.count(b"\n")
        pos = end
    if filled == 0:
        raise ValueError(f"{where}: no comparisons in the file.")
    out = out[:filled] if 2 * filled > bound else out[:filled].copy()
    return out.reshape(-1, width)


def read_triplets(source: Any, format: str = "head_close_far", *,
                  n_items: int | None = None) -> np.ndarray:
    """Read comparisons and return them as ``(head, close, far)`` triplets.

    Parameters
    ----------
    source : path-like or array-like
        A text file (plain, ``.gz`` or a ``.zip`` holding one file) with one
        comparison per line, item ids separated by commas, tabs or blanks
        (blank lines and ``#`` comments skipped; a first line that is not all
        integers is a header), or an integer array of shape ``(m, k)``.
    format : {"head_close_far", "odd_one_out", "most_central"}
        ``"head_close_far"``: ``k = 3``, each row one triplet.
        ``"odd_one_out"``: the first id of a row is the odd one out ``o`` among
        ``k >= 3`` items; gives ``(x, y, o)`` for every ordered pair of the
        others.  ``"most_central"``: the first id is the most central item
        ``c``; gives ``(x, c, y)`` for every ordered pair of the others (see the
        module notes: cblearn's conversions).
    n_items : int, optional
        Ids must be below ``n_items`` (default: any id >= 0).

    Returns
    -------
    triplets : ndarray of int64, shape (n_triplets, 3)
        ``m`` rows for ``"head_close_far"``, ``m (k - 1)(k - 2)`` otherwise; the
        triplets of one row are consecutive.

    Raises
    ------
    ValueError
        Unknown format; a malformed file (not ASCII, a line with the wrong
        number of ids, a non-integer id: the message names the file and line);
        negative or out-of-range ids, a row repeating an id, fewer than 3 or
        more than ``MAX_CHOICES`` items per row.
    FileNotFoundError
        No such file.
    """
    if format not in FORMATS:
        raise ValueError(f"read_triplets: unknown format {format!r}; one of {FORMATS}.")
    if n_items is not None and (isinstance(n_items, bool) or not isinstance(
            n_items, (int, np.integer)) or n_items < 1):
        raise ValueError(f"read_triplets: n_items={n_items!r} must be a positive integer.")
    width = 3 if format == "head_close_far" else None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"read_triplets: no such file {path}")
        check_regular_file(path, "read_triplets")
        rows = _parse_id_rows(_read_text(path, COMPARISON_MAX_BYTES), f"read_triplets: {path}",
                              width)
        who = f"read_triplets: {path}"
    else:
        rows, who = source, "read_triplets"
    try:
        arr = np.asarray(rows)
        k = arr.shape[1] if arr.ndim == 2 and arr.dtype != object else 3
    except (ValueError, TypeError):
        k = 3                           # ragged: check_item_triplets says so
    if format != "head_close_far" and not 3 <= k <= MAX_CHOICES:
        raise ValueError(f"{who}: a {format} answer needs 3 to {MAX_CHOICES} items per row "
                         f"(the chosen one first); got {k}.")
    rows = check_item_triplets(rows, n_items, who=who, width=k if format != "head_close_far"
                               else 3)
    if format != "head_close_far":
        # (k - 1)(k - 2) triplets per answer: the expansion is checked before
        # it is allocated (the pair columns, the stacked triplets)
        n_out = rows.shape[0] * (k - 1) * (k - 2)
        check_dense_memory(5 * 8 * n_out, who, f"{rows.shape[0]} {format} answers of {k} "
                           f"items give {n_out} triplets, which do not fit")
    return _convert(rows, format)


def count_answers(triplets: Any, n_items: int | None = None) -> Bunch:
    """Count the answers given to each question and how much they agree.

    A question is a head with an unordered pair of candidates; the triplets
    ``(h, a, b)`` and ``(h, b, a)`` are its two possible answers.  Conflicting
    answers are allowed (people disagree); this counts them.

    Parameters
    ----------
    triplets : array-like of int, shape (m, 3)
        ``(head, close, far)`` rows (checked as in :func:`read_triplets`).
    n_items : int, optional

    Returns
    -------
    sklearn.utils.Bunch
        ``questions``: int64 ``(q, 3)`` rows ``(head, a, b)`` with ``a < b``;
        ``counts``: int64 ``(q, 2)``, the answers "a is closer" and "b is
        closer"; ``n_questions``, ``n_answers``; ``n_conflicting``: questions
        with both answers; ``majority_ceiling``: the largest fraction of the
        answers any fixed embedding can agree with (the majority answer of
        each question, ties counted once), the ceiling of a triplet accuracy
        measured on these same answers.
    """
    t = check_item_triplets(triplets, n_items, who="count_answers")
    swap = t[:, 1] > t[:, 2]
    key = t.copy()
    key[swap, 1], key[swap, 2] = t[swap, 2], t[swap, 1]
    questions, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    counts = np.zeros((len(questions), 2), dtype=np.int64)
    np.add.at(counts, (inverse, swap.astype(np.int64)), 1)
    return Bunch(questions=questions, counts=counts, n_questions=len(questions),
                 n_answers=len(t), n_conflicting=int((counts > 0).all(axis=1).sum()),
                 majority_ceiling=float(counts.max(axis=1).sum() / len(t)))


# --------------------------------------------------------------------------- loaders
def _parse_features(data: bytes, path: Path, n_rows: int, n_cols: int) -> np.ndarray:
    """The features table: ``n_rows`` lines of ``n_cols`` comma-separated values,
    or the same values written on one line with each row's last value run into
    the next row's first (the Zappos quirk, e.g. ``0.08834980.0``: split one
    character before the second ``.``)."""
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: the features are not ASCII text.") from None
    lines = [ln for ln in text.replace("\r", "").split("\n") if ln.strip()]
    if len(lines) == n_rows:          # a well-formed table
        tokens = ",".join(lines).split(",")
    elif len(lines) == 1:             # the run-together form
        raw = lines[0].split(",")
        expected = n_rows * n_cols - (n_rows - 1)
        if len(raw) != expected:
            raise ValueError(f"{path}: expected {expected} comma-separated fields on one "
                             f"line ({n_rows} rows of {n_cols} values, each row's last value "
                             f"run into the next row's first); found {len(raw)}.")
        merged = [j for j, tok in enumerate(raw) if tok.count(".") >= 2]
        where = [n_cols - 1 + r * (n_cols - 1) for r in range(n_rows - 1)]
        if merged != where:
            raise ValueError(f"{path}: the run-together values are not where {n_rows} rows "
                             f"of {n_cols} values put them (expected {len(where)} fields "
                             f"with two '.', found {len(merged)}).")
        tokens = []
        start = 0
        for j in where:
            tok = raw[j]
            second = tok.index(".", tok.index(".") + 1)
            if second < 2:
                raise ValueError(f"{path}: cannot split the run-together field {tok!r}.")
            tokens.extend(raw[start:j])
            tokens.append(tok[:second - 1])
            tokens.append(tok[second - 1:])
            start = j + 1
        tokens.extend(raw[start:])
    else:
        raise ValueError(f"{path}: expected {n_rows} lines of features (or all on one "
                         f"line); found {len(lines)}.")
    if len(tokens) != n_rows * n_cols:
        raise ValueError(f"{path}: expected {n_rows} x {n_cols} = {n_rows * n_cols} values, "
                         f"found {len(tokens)}.")
    try:
        X = np.array(tokens, dtype=np.float64).reshape(n_rows, n_cols)
    except ValueError:
        bad = next(t for t in tokens if not _is_float(t))
        raise ValueError(f"{path}: feature value {bad[:40]!r} is not a number.") from None
    if not np.isfinite(X).all():
        r = int(np.argmax(~np.isfinite(X).all(axis=1)))
        raise ValueError(f"{path}: the features of item {r} hold NaN or infinity.")
    return X


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def load_comparisons(name: str, data_home: str | os.PathLike | None = None, *,
                     verify: bool = True) -> Bunch:
    """Load a registered comparison data set (crowd-sourced triplets).

    Parameters
    ----------
    name : str
        ``"zappos"`` (see ``COMPARISONS``).
    data_home : str or path-like, optional
        Folder holding the data (see :func:`tripletml.datasets.get_data_home`:
        argument, ``TRIPLETML_DATA``, ``~/tripletml_data``).
    verify : bool, default True
        Check each file's SHA-256 (given in ``COMPARISONS``) before reading it;
        a mismatch is refused.  ``verify=False`` reads unverified files at the
        caller's risk (reading stays bounded and the contents are checked).

    Returns
    -------
    sklearn.utils.Bunch
        ``triplets``: int64 ``(n_triplets, 3)``, rows ``(head, close, far)``:
        ``close`` was judged more like ``head`` than ``far`` is.
        ``features``: float64 ``(n_items, n_features)``, row ``i`` = item ``i``
        (None for a set without features).  ``n_items``; ``name``;
        ``description`` (the meaning of the triplets and features); ``DESCR``
        (description and origin); ``files`` (the paths read).

    Raises
    ------
    ValueError
        Unknown name; a checksum mismatch; a zip holding anything but the
        expected file, or inflating beyond ``COMPARISON_MAX_BYTES``; malformed
        contents (wrong counts, non-integer or out-of-range ids, a triplet
        repeating an item, non-finite features).
    FileNotFoundError
        A file is missing; the message lists the path searched.
    """
    try:
        rec = COMPARISONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown comparison data set {name!r}; known: "
                         f"{', '.join(sorted(COMPARISONS))}") from None
    home, how = _resolve_data_home(data_home)
    paths = []
    for f in (rec.triplets_file, rec.features_file):
        if f is None:
            continue
        try:
            path, accepted = _locate(f, home, how, name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"comparison data set {name!r}: file not found: {home / f.path} (data home "
                f"{home}, chosen by {how}). Download it from {f.url} into that folder or "
                "set TRIPLETML_DATA to a folder that holds it.") from None
        if verify:
            _verify(path, accepted)
        paths.append(path)
    tpath = paths[0]
    # the expansion bound too: verify=False reads files no checksum vouches for
    rows = _parse_id_rows(_read_zip_member(tpath, rec.member_triplets, COMPARISON_MAX_BYTES,
                                           MAX_TEXT_RATIO), str(tpath), 3)
    triplets = check_item_triplets(rows, rec.n_items, who=str(tpath))
    if len(triplets) != rec.n_triplets:
        raise ValueError(f"{tpath}: expected {rec.n_triplets} triplets, found {len(triplets)}.")
    features = None
    if rec.features_file is not None:
        fpath = paths[1]
        features = _parse_features(
            _read_zip_member(fpath, rec.member_features, COMPARISON_MAX_BYTES,
                             MAX_TEXT_RATIO), fpath,
            rec.n_items, rec.n_features)
    return Bunch(triplets=triplets, features=features, n_items=rec.n_items, name=name,
                 description=rec.description, DESCR=f"{rec.description}\n\nOrigin: {rec.origin}",
                 files=paths)


# ---------------------------------------------------------------- unseen items
@dataclass(frozen=True)
class ItemSplit:
    """Triplets split by *items*: what :func:`split_items` returns.

    Attributes
    ----------
    train_items, test_items : ndarray of int64
        Sorted item ids of the two parts (disjoint; together every item).
    train : ndarray of int64, shape (m_train, 3)
        The triplets whose three items are train items, as *row indices into
        ``train_items``*: ready for ``fit(X[train_items], triplets=train)``.
    test : ndarray of int64, shape (m_test, 3)
        The triplets whose three items are test items (item ids): questions
        about unseen items only.
    test_head : ndarray of int64, shape (m_head, 3)
        The triplets whose head is a test item (item ids; the other two may be
        train items): an unseen item compared with known ones.
    """

    train_items: np.ndarray
    test_items: np.ndarray
    train: np.ndarray
    test: np.ndarray
    test_head: np.ndarray


def split_items(triplets: Any, n_items: int | None = None, *, test_size: float | int = 1 / 3,
                random_state: Any = None, train_items: Any = None) -> ItemSplit:
    """Split triplets of item ids by their *items*, for scoring a learned
    similarity on items no one judged in training.

    A random ``test_size`` share of the items (``p = default_rng(random_state)
    .permutation(n_items)``: the last ``n_test`` of ``p``; or the complement of
    ``train_items`` when given) is held out.  Training uses only the triplets
    among the train items; the held-out triplets are those among the test
    items and those whose head is a test item.  Triplets mixing train and
    test items otherwise (a train head with a test item) are in neither.

    Parameters
    ----------
    triplets : array-like of int, shape (m, 3)
        ``(head, close, far)`` item ids, checked as everywhere
        (:func:`check_item_triplets`).
    n_items : int, optional
        Number of items (default: the largest id + 1).
    test_size : float in (0, 1) or int, default=1/3
        Share (rounded up, as scikit-learn's ``train_test_split``) or number
        of test items; at least one item stays on each side.
    random_state : int, Generator or None
        Seeds the permutation of the items.
    train_items : array-like of int, optional
        The train items, instead of a random split (``test_size`` and
        ``random_state`` are then not used).

    Returns
    -------
    ItemSplit

    Examples
    --------
    >>> import numpy as np
    >>> from tripletml.datasets import split_items
    >>> t = np.array([[0, 1, 2], [3, 4, 5], [3, 0, 1], [1, 4, 0]])
    >>> s = split_items(t, 6, train_items=[0, 1, 2])
    >>> s.train.tolist(), s.test.tolist(), s.test_head.tolist()
    ([[0, 1, 2]], [[3, 4, 5]], [[3, 4, 5], [3, 0, 1]])
    """
    who = "split_items"
    if n_items is not None and (isinstance(n_items, (bool, np.bool_))
                                or not isinstance(n_items, (int, np.integer)) or n_items < 2):
        raise ValueError(f"{who}: n_items={n_items!r} must be an integer >= 2 (or None: the "
                         "largest id + 1).")
    t = check_item_triplets(triplets, n_items, who=f"{who}: triplets")
    n = int(n_items) if n_items is not None else (int(t.max()) + 1 if t.size else 0)
    if n < 2:
        raise ValueError(f"{who}: need at least 2 items to split, got n_items={n}.")
    # every item is split (a permutation, masks and ids of n items): bounded
    # by the items the triplets name, before allocating
    check_n_items_bound(t, n, who, given=n_items is not None)
    if train_items is not None:
        if np.ndim(train_items) != 1:
            raise ValueError(f"{who}: train_items must be a 1-D array of item ids, got shape "
                             f"{np.shape(train_items)}.")
        tr = check_item_triplets(np.asarray(train_items).reshape(1, -1), n,
                                 who=f"{who}: train_items", width=np.size(train_items))[0] \
            if np.size(train_items) else np.empty(0, np.int64)
        is_tr = np.zeros(n, dtype=bool)
        is_tr[tr] = True
    else:
        if isinstance(test_size, bool) or not isinstance(test_size, (int, float, np.integer,
                                                                     np.floating)):
            raise TypeError(f"{who}: test_size must be a float in (0, 1) or an int, got "
                            f"{test_size!r}.")
        if isinstance(test_size, (float, np.floating)):
            if not 0.0 < test_size < 1.0:
                raise ValueError(f"{who}: test_size={test_size} must lie in (0, 1) as a share.")
            n_test = int(np.ceil(test_size * n))
        else:
            n_test = int(test_size)
        if not 1 <= n_test <= n - 1:
            raise ValueError(f"{who}: test_size={test_size} leaves {n_test} of {n} items for "
                             "testing; at least one item must stay on each side.")
        p = as_generator(random_state, who).permutation(n)
        is_tr = np.zeros(n, dtype=bool)
        is_tr[p[:n - n_test]] = True
    if is_tr.all() or not is_tr.any():
        raise ValueError(f"{who}: train_items must leave at least one item on each side.")
    local = np.full(n, -1, dtype=np.int64)
    tr_ids = np.flatnonzero(is_tr)
    local[tr_ids] = np.arange(len(tr_ids))
    in_tr = is_tr[t]
    return ItemSplit(train_items=tr_ids, test_items=np.flatnonzero(~is_tr),
                     train=local[t[in_tr.all(axis=1)]], test=t[(~in_tr).all(axis=1)],
                     test_head=t[~in_tr[:, 0]])
