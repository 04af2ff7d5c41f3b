"""Data loading shared by the command-line modules (:mod:`tripletml.cli`,
:mod:`tripletml._cli_search`): a DATA argument is a registered data-set name
or a LIBSVM/svmlight file.  Both command modules import it; it imports
neither, so the command line has no import circle.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["load_data", "looks_like_path"]


#: suffixes that mark a DATA argument as a file path rather than a data-set name
_FILE_SUFFIXES = (".svm", ".libsvm", ".svmlight", ".txt", ".dat", ".data", ".gz", ".scale",
                  ".csv", ".t", ".tr", ".train", ".test")


def looks_like_path(source: str) -> bool:
    """True when ``source`` is meant as a file (a separator, a leading dot or
    tilde, or a data-file suffix), not as a registered data-set name."""
    return (os.sep in source or "/" in source or source.startswith((".", "~"))
            or source.lower().endswith(_FILE_SUFFIXES))


def load_data(source: str, data_home, subset: str = "all", *, n_features=None,
              zero_based: bool = False, multilabel: bool = False):
    """A registered data-set name or a LIBSVM/svmlight file path (1-based
    feature indices as LIBSVM writes them, unless ``zero_based``).  With
    ``multilabel`` the target is a binary indicator matrix.

    A path that does not exist raises FileNotFoundError ("file not found"),
    a name that is neither a file nor a registered set a ValueError listing
    the registered names."""
    from . import datasets

    p = Path(source).expanduser()
    if p.is_dir():
        raise ValueError(f"{source} is a folder; give a LIBSVM file or a registered data-set "
                         "name (tripletml datasets lists them).")
    if p.exists():
        import gzip

        from sklearn.datasets import load_svmlight_file
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            X, y = load_svmlight_file(fh, n_features=n_features, zero_based=zero_based,
                                      multilabel=multilabel)
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
        raise ValueError(f"{source} is raw text; vectorise it first (tripletml.datasets.text).")
    if multilabel and getattr(b.target, "ndim", 1) != 2:
        raise ValueError(f"{source} has one class label per sample; a multi-label learner "
                         "needs a multi-label data set (e.g. yeast, scene).")
    return b.data, b.target
