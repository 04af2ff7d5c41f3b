"""``use_cluster`` leaves the caller's thread variables as it found them
(issue 40): Dask's nanny writes ``OMP/OPENBLAS/MKL_NUM_THREADS`` into the
driver's ``os.environ`` when it starts a local worker, which switched off
:mod:`tripletml.engine.threads` for every later fit of the process."""
import os

import pytest

pytest.importorskip("distributed")

from tripletml.distributed.dask_search import use_cluster  # noqa: E402
from tripletml.engine.threads import kept_thread_environment  # noqa: E402

VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def test_kept_thread_environment_restores_set_and_unset(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with kept_thread_environment():
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["MKL_NUM_THREADS"] = "1"
    assert os.environ["OMP_NUM_THREADS"] == "3" and "MKL_NUM_THREADS" not in os.environ


def test_a_local_cluster_leaves_no_thread_variables(monkeypatch):
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    # the nanny writes the variables here when it starts its worker, whatever
    # the worker then imports: no preload of tripletml in the worker (about
    # 2 s of its start, nothing of this process's environment)
    with use_cluster({"n_workers": 1, "threads_per_worker": 1, "processes": True,
                      "dashboard_address": None, "preload": []}):
        pass
    assert not [k for k in VARS if k in os.environ]
