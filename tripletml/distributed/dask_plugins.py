"""Dask worker plugins of :mod:`tripletml.distributed.dask_search` (imports ``distributed``:
imported only once Dask is known to be installed)."""
from __future__ import annotations

from distributed import WorkerPlugin
from threadpoolctl import threadpool_limits

__all__ = ["BlasLimitPlugin"]


class BlasLimitPlugin(WorkerPlugin):
    """``threadpool_limits(limits)`` on setup (every worker, also those that
    join later), the worker's original limits back on teardown."""

    def __init__(self, limits: int):
        self.limits = int(limits)
        self._limiter = None

    def setup(self, worker=None) -> None:
        self._limiter = threadpool_limits(limits=self.limits)

    def teardown(self, worker=None) -> None:
        if self._limiter is not None:
            self._limiter.restore_original_limits()
            self._limiter = None
