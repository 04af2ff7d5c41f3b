"""Data loading shared by the command-line modules (:mod:`tripletml.cli`,
:mod:`tripletml.cli.search`): a DATA argument is a registered data-set name
or a LIBSVM/svmlight file.  Both command modules import it; it imports
neither, so the command line has no import circle.
"""
from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

from tripletml import datasets
from tripletml.cli.output import is_model_file
from tripletml.core.files import open_regular

__all__ = ["load_data", "looks_like_path", "positive_int"]


#: suffixes that mark a DATA argument as a file path rather than a data-set name
_FILE_SUFFIXES = (".svm", ".libsvm", ".svmlight", ".txt", ".dat", ".data", ".gz", ".scale",
                  ".csv", ".t", ".tr", ".train", ".test")


def positive_int(value: str) -> int:
    """argparse type of a count (``--partitions``, ``--seeds``, ``--nprobe``,
    ...): an integer >= 1; 0 or a negative number is a usage error, never
    clamped to 1 in silence."""
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") \
            from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {v}")
    return v


def looks_like_path(source: str) -> bool:
    """True when ``source`` is meant as a file (a separator, a leading dot or
    tilde, or a data-file suffix), not as a registered data-set name."""
    return (os.sep in source or "/" in source or source.startswith((".", "~"))
            or source.lower().endswith(_FILE_SUFFIXES))


def _read_svmlight(p: Path, source: str, n_features, zero_based: bool, multilabel: bool,
                   pad_features: bool):
    from sklearn.datasets import load_svmlight_file   # ~0.1 s: not for `tripletml --help`

    with open_regular(p, "tripletml") as raw:
        fh = gzip.open(raw, "rb") if p.suffix == ".gz" else raw
        try:
            X, y = load_svmlight_file(fh, zero_based=zero_based, multilabel=multilabel)
        except OverflowError as exc:
            raise ValueError(f"{source} is not a readable LIBSVM file: a feature index or "
                             f"label is too large ({exc}).") from None
        except (ValueError, UnicodeDecodeError, EOFError, OSError) as exc:
            if isinstance(exc, ValueError) and not zero_based and "Invalid index 0" in str(exc):
                raise ValueError(f"{source} has a feature index 0, but LIBSVM feature indices "
                                 "start at 1; if this file's start at 0, pass --zero-based.") \
                    from None
            # e.g. a binary file: "could not convert string to float: b'PK...'"
            detail = " ".join(str(exc).split())
            detail = detail[:100] + ("..." if len(detail) > 100 else "")
            raise ValueError(f"{source} is not a readable LIBSVM file ({detail}); DATA is a "
                             "LIBSVM/svmlight text file or a registered data-set name.") \
                from None
        finally:
            if fh is not raw:
                fh.close()
    if n_features is not None and X.shape[1] != n_features:
        if X.shape[1] > n_features:
            raise ValueError(f"{source} has {X.shape[1]} features (its largest feature index), "
                             f"the model expects {n_features}.")
        if not pad_features:
            raise ValueError(f"{source} has {X.shape[1]} features (its largest feature "
                             f"index), the model expects {n_features}; LIBSVM files do not "
                             "record trailing all-zero features: pass --pad-features if the "
                             f"missing features {X.shape[1] + 1}..{n_features} are zero, "
                             "else check the file (and --zero-based).")
        import scipy.sparse as sp
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    return X, y


def load_data(source: str, data_home, subset: str = "all", *, n_features=None,
              zero_based: bool = False, multilabel: bool = False,
              pad_features: bool = False):
    """A registered data-set name or a LIBSVM/svmlight file path (1-based
    feature indices as LIBSVM writes them, unless ``zero_based``).  With
    ``multilabel`` the target is a binary indicator matrix.

    A path that does not exist raises FileNotFoundError ("file not found"),
    a name that is neither a file nor a registered set a ValueError listing
    the registered names.  With ``n_features`` (the model's), a LIBSVM file
    with more features is refused, and one with fewer (its largest feature
    index is smaller) is refused unless ``pad_features`` (then the missing
    trailing features are zero).  An index or label too large for an int is
    a ValueError, as is a path that is not a regular file."""
    p = Path(source).expanduser()
    if p.is_dir():
        raise ValueError(f"{source} is a folder; give a LIBSVM file or a registered data-set "
                         "name (tripletml datasets lists them).")
    if p.exists():
        if is_model_file(p):
            raise ValueError(f"{source} is a tripletml model file, not data: give a LIBSVM "
                             "file or a registered data-set name here (the model goes in "
                             "the MODEL argument; see the command's --help).")
        X, y = _read_svmlight(p, source, n_features, zero_based, multilabel, pad_features)
        if multilabel:
            from sklearn.preprocessing import MultiLabelBinarizer
            y = MultiLabelBinarizer().fit_transform(y)
        return X.tocsr(), y
    names = datasets.list_datasets()
    if source not in names:
        if looks_like_path(source):
            raise FileNotFoundError(f"file not found: {source} (and it is not a registered "
                                    "data set; 'tripletml datasets' lists them)")
        raise ValueError(f"unknown data set {source!r} and no file of that name; known data "
                         f"sets: {', '.join(names)}")
    b = datasets.load(source, data_home=data_home, subset=subset)
    if isinstance(b.data, list):
        raise ValueError(f"{source} is raw text; vectorize it first (tripletml.datasets.text).")
    if multilabel and getattr(b.target, "ndim", 1) != 2:
        raise ValueError(f"{source} has one class label per sample; a multi-label learner "
                         "needs a multi-label data set (e.g. yeast, scene).")
    return b.data, b.target
