"""Registered paper reproductions (``tripletml reproduce NAME``).

Each algorithm module registers its own reproduction with :func:`register`.
A reproduction is a function ``run(out_dir, *, quick, seeds, data_home,
verbose) -> list[dict]`` that writes CSV, Markdown and PNG files to
``out_dir`` and prints the paper's numbers beside ours.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["register", "REPRODUCTIONS", "run", "available"]


@dataclass(frozen=True)
class Reproduction:
    name: str
    description: str
    func: Callable


REPRODUCTIONS: dict[str, Reproduction] = {}

# modules that register reproductions when imported
_MODULES = ("tripletml.reproduce.euclidean", "tripletml.reproduce.sdca_table2",
            "tripletml.reproduce.loreta_20ng", "tripletml.reproduce.loreta_multilabel",
            "tripletml.reproduce.comet_sparse", "tripletml.reproduce.lowrank_dml",
            "tripletml.reproduce.sml_uci")


def register(name: str, description: str) -> Callable:
    """Decorator registering ``func`` as reproduction ``name``."""
    def deco(func: Callable) -> Callable:
        REPRODUCTIONS[name] = Reproduction(name, description, func)
        return func
    return deco


def available() -> dict[str, Reproduction]:
    for mod in _MODULES:
        importlib.import_module(mod)
    return dict(REPRODUCTIONS)


def run(name: str, out_dir, *, quick: bool = False, seeds: int | None = None,
        data_home=None, verbose: int = 1, only=None):
    """Run reproduction ``name``, writing its outputs to ``out_dir``.

    ``only`` (a sequence of data-set names) restricts the run to some of its
    data sets, for reproductions that take an ``only`` argument.
    """
    repros = available()
    if name not in repros:
        raise ValueError(f"unknown reproduction {name!r}; available: "
                         f"{', '.join(sorted(repros))}")
    kwargs = {}
    if only:
        if "only" not in inspect.signature(repros[name].func).parameters:
            raise ValueError(f"reproduction {name!r} cannot be restricted to some data sets")
        kwargs["only"] = tuple(only)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return repros[name].func(out, quick=quick, seeds=seeds, data_home=data_home,
                             verbose=verbose, **kwargs)
