"""Benchmark data sets: registry, verified loading and downloading.

The data live in a *data home* (:func:`get_data_home`: argument, then the
``TRIPLETML_DATA`` environment variable, then ``~/tripletml_data``) with one
folder per set, e.g. ``vehicle/vehicle.scale.gz``.  Files may be stored gzip'd
or plain; both are accepted and checked by SHA-256.

>>> from tripletml.datasets import load, list_datasets
>>> b = load("vowel", subset="train")          # doctest: +SKIP
>>> b.data.shape, b.target.max()               # doctest: +SKIP
((528, 10), 10)

Comparison data (triplets answered by people, e.g. the Zappos shoes) are loaded
by :func:`load_comparisons`; :func:`read_triplets` converts answer formats
(see :mod:`tripletml.datasets.comparisons`).

Text features for 20 Newsgroups are in :mod:`tripletml.datasets.text`.
"""
from tripletml.datasets._base import get_data_home, info, list_datasets, read_libsvm, sha256sum
from tripletml.datasets._load import load
from tripletml.datasets._fetch import DownloadError, fetch
from tripletml.datasets._registry import DataFile, DatasetRecord, Subset
from tripletml.datasets.comparisons import ItemSplit, count_answers, load_comparisons, read_triplets, split_items

__all__ = ["get_data_home", "list_datasets", "info", "load", "fetch", "sha256sum", "read_libsvm",
           "DownloadError", "DataFile", "DatasetRecord", "Subset", "load_comparisons",
           "read_triplets", "count_answers", "split_items", "ItemSplit"]
