"""Benchmark scripts (speed and quality measurements; not part of the package).

Run them from the repository root as modules, so that the checkout's
``tripletml`` and the shared protocol (:mod:`bench._protocol`) are imported
without any ``sys.path`` manipulation::

    python -m bench.bench_defaults --help
    python -m bench.sphere_radius iris OASIS,SDCA

``python bench/NAME.py`` works too (the scripts fall back to importing
``_protocol`` beside them), but then ``tripletml`` is whichever one Python
finds first: prefer ``python -m``.
"""
