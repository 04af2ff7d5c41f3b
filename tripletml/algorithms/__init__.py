"""One folder per algorithm: its estimator (``estimator.py``), its kernels
(``kernels.py``: the paper's equations, Numba/BLAS) and, where it trains on
partitions in a way of its own, its distributed strategy (``distributed.py``).

Algorithms use :mod:`tripletml.core`, :mod:`tripletml.engine`,
:mod:`tripletml.distributed` and :mod:`tripletml.linalg`; none of those
imports an algorithm.  The public list of learners is
:mod:`tripletml.registry`.
"""
