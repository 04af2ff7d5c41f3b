"""The ``index build`` and ``search`` subcommands of the command line.

``tripletml index build MODEL DATA -o INDEX [--kind flat|ivf|hnsw]`` embeds
the rows of DATA with a saved model and writes an index directory
(:mod:`tripletml.search.index`); ``tripletml search INDEX QUERIES -k 10`` prints the
k most similar database rows of each query (or writes them with ``-o``).
:func:`add_subcommands` registers both on the main parser's subparsers.

Errors are raised as ValueError / FileNotFoundError (a missing faiss too), so
the main command line reports them in one line with exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tripletml.cli.data import load_data, positive_int
from tripletml.cli.output import RESULTS_HEADER, check_output
from tripletml.core.files import write_atomically
from tripletml.persistence import load_model

__all__ = ["add_subcommands", "cmd_index_build", "cmd_search"]


def _verbosity(args) -> int:
    """-v: always a progress bar (2); otherwise only on a terminal (1)."""
    return 2 if getattr(args, "verbose", False) else 1


def _load(source: str, args, n_features: int):
    X, _ = load_data(source, args.data_home, args.subset, n_features=n_features,
                     zero_based=args.zero_based, pad_features=args.pad_features)
    return X


def cmd_index_build(args: argparse.Namespace) -> None:
    """Handler of ``tripletml index build``."""
    # lazy (here and in cmd_search): the index module loads the Numba kernels
    from tripletml.search.index import build

    check_output(args.output, "index", args.force)
    model = load_model(args.model)
    if not callable(getattr(model, "embed_queries", None)):
        raise ValueError(f"{args.model} holds a {type(model).__name__}, which ranks labels, "
                         "not samples; an index needs a triplet learner.")
    X = _load(args.data, args, model.n_features_in_)
    params = {k: v for k, v in (("nlist", args.nlist), ("nprobe", args.nprobe),
                                ("hnsw_m", args.hnsw_m), ("ef_search", args.ef_search),
                                ("ef_construction", args.ef_construction),
                                ("random_state", args.seed)) if v is not None}
    if args.ip_to_l2 is not None:
        params["ip_to_l2"] = args.ip_to_l2
    try:
        index = build(model, X, kind=args.kind, backend=args.backend,
                      batch_size=args.batch_size, verbose=_verbosity(args), **params)
    except ImportError as exc:
        raise ValueError(str(exc)) from None
    check_output(args.output, "index", args.force)    # again, after the build
    index.save(args.output)
    print(f"indexed {index.ntotal} rows ({index.kind}, {index.backend}, {index.metric}, "
          f"{index.dim} dims) in {args.output}")


def cmd_search(args: argparse.Namespace) -> None:
    """Handler of ``tripletml search``."""
    from tripletml.search.index import load_index

    out = args.output
    if out is not None:
        check_output(out, "results", args.force)
    try:
        index = load_index(args.index)
    except ImportError as exc:
        raise ValueError(str(exc)) from None
    if args.nprobe is not None:
        index.nprobe = args.nprobe
    if args.ef_search is not None:
        index.ef_search = args.ef_search
    k = args.k
    if not 1 <= k <= index.ntotal:
        # as SimilarityIndex.search: no silent clamp to the index size
        raise ValueError(f"-k must satisfy 1 <= k <= {index.ntotal} (the rows of index "
                         f"{args.index}), got {k}.")
    Q = _load(args.queries, args, index.model.n_features_in_)
    scores, ids = index.search(Q, k, verbose=_verbosity(args))
    if out is not None:
        check_output(out, "results", args.force)
    if out is not None and Path(out).suffix == ".npz":
        _save_npz(Path(out), ids=ids, scores=scores)
        print(f"wrote ids and scores of {ids.shape[0]} queries (k={k}) to {out}")
        return
    fh = open(out, "w") if out is not None else sys.stdout
    try:
        fh.write(RESULTS_HEADER + "\n")
        for i in range(ids.shape[0]):
            for r in range(k):
                fh.write(f"{i}\t{r + 1}\t{ids[i, r]}\t{scores[i, r]:.6g}\n")
    finally:
        if out is not None:
            fh.close()
    if out is not None:
        print(f"wrote ids and scores of {ids.shape[0]} queries (k={k}) to {out}")


def _save_npz(path: Path, **arrays) -> None:
    """``np.savez`` to a new temporary file beside ``path``, renamed over it
    (np.savez would also append ``.npz`` to a name without it)."""
    write_atomically(path, lambda fh: np.savez(fh, **arrays))


def _force(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--force", action="store_true",
                   help=f"replace an existing {what} at -o (any other existing file or "
                        "directory is refused)")


def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pad-features", action="store_true",
                   help="accept a LIBSVM file whose largest feature index is below the "
                        "model's feature count (trailing features all zero); refused "
                        "otherwise")
    p.add_argument("--subset", default="all",
                   help="data-set subset of a registered data set: train, test or all")
    p.add_argument("--data-home", help="data folder (default: $TRIPLETML_DATA)")
    p.add_argument("--zero-based", action="store_true",
                   help="a LIBSVM file with 0-based feature indices")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="always show a progress bar (default: only on a terminal)")


def add_subcommands(subparsers) -> None:
    """Register ``index`` (with ``index build``) and ``search`` on the
    ``add_subparsers()`` object of the main parser."""
    ix = subparsers.add_parser("index", help="build a nearest-neighbor index with a model")
    ix_sub = ix.add_subparsers(dest="index_command", title="index commands", metavar="ACTION")
    ix.set_defaults(func=lambda args: ix.print_help())
    b = ix_sub.add_parser("build", help="embed DATA with MODEL and write an index directory")
    b.add_argument("model", metavar="MODEL", help="model file written by 'tripletml fit'")
    b.add_argument("data", metavar="DATA",
                   help="database rows: registered data-set name or LIBSVM file")
    b.add_argument("-o", "--output", required=True, metavar="INDEX",
                   help="index directory to write (model, metadata and vectors); an "
                        "existing path is refused unless it is an index and --force is given")
    _force(b, "index directory")
    b.add_argument("--kind", choices=("flat", "ivf", "hnsw"), default="flat",
                   help="flat: exact; ivf: inverted file; hnsw: graph (ivf/hnsw need "
                        "faiss: pip install tripletml[index]); default flat")
    b.add_argument("--backend", choices=("auto", "faiss", "numpy"), default="auto",
                   help="auto: faiss when installed, else the exact numpy scan")
    b.add_argument("--nlist", type=positive_int, help="IVF: number of cells (default ~4 sqrt(n))")
    b.add_argument("--nprobe", type=positive_int, help="IVF: cells visited per query "
                                              "(default nlist/16)")
    b.add_argument("--hnsw-m", type=positive_int, help="HNSW: links per node (default 32)")
    b.add_argument("--ef-construction", type=positive_int,
                   help="HNSW: build beam width (default 200)")
    b.add_argument("--ef-search", type=positive_int, help="HNSW: search beam width (default 128)")
    b.add_argument("--ip-to-l2", action=argparse.BooleanOptionalAction, default=None,
                   help="faiss, inner-product models: search as L2 after appending "
                        "sqrt(M^2 - |x|^2) to the database vectors (default: on for "
                        "ivf; for hnsw when the embeddings lie in a narrow cone; check "
                        "recall on your data)")
    b.add_argument("--batch-size", type=positive_int, default=65536,
                   help="rows embedded at a time (default 65536)")
    b.add_argument("--seed", type=int, help="random seed of the IVF training sample")
    _data_options(b)
    b.set_defaults(func=cmd_index_build)
    s = subparsers.add_parser("search", help="k most similar indexed rows of each query")
    s.add_argument("index", metavar="INDEX", help="index directory written by "
                                                  "'tripletml index build'")
    s.add_argument("queries", metavar="QUERIES",
                   help="query rows: registered data-set name or LIBSVM file")
    s.add_argument("-k", type=int, default=10,
                   help="neighbors per query (default 10; 1 <= k <= the index size, "
                        "else an error)")
    s.add_argument("-o", "--output",
                   help="write the results here instead of printing them: .npz (arrays ids "
                        "and scores) or a tab-separated text file; an existing file is "
                        "refused unless it holds search results and --force is given")
    _force(s, "search-results file")
    s.add_argument("--nprobe", type=positive_int, help="IVF: cells visited per query (override)")
    s.add_argument("--ef-search", type=positive_int, help="HNSW: search beam width (override)")
    _data_options(s)
    s.set_defaults(func=cmd_search)
