"""A driver crash in the middle of a partitioned fit, for the checkpoint tests."""
from __future__ import annotations

import pytest

from tripletml.distributed import partitioned
from tripletml.distributed.partitioned import fit_partitioned


class Crash(Exception):
    """Stands in for the driver process dying."""


def crash_after(make, collection, directory, *, after_round: int) -> None:
    """Fit ``make()`` with ``checkpoint_dir=directory`` and crash right
    after the checkpoint of round ``after_round`` (it stays there)."""
    real = partitioned.PartitionedFit.save_round

    def crashing(self, r, arrays, **kw):
        real(self, r, arrays, **kw)
        if r == after_round:
            raise Crash

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(partitioned.PartitionedFit, "save_round", crashing)
        with pytest.raises(Crash):
            fit_partitioned(make(), collection, checkpoint_dir=directory)


def crash_then_resume(make, collection, directory, *, after_round: int):
    """:func:`crash_after`, then run the same call again and return the
    resumed model."""
    crash_after(make, collection, directory, after_round=after_round)
    return fit_partitioned(make(), collection, checkpoint_dir=directory)


def refuse_edited(make, collection, directory, state: dict, arrays: dict, match: str,
                  edit=None) -> None:
    """Write ``arrays`` as the checkpoint's arrays file of ``state`` (its
    ``state.json`` as read, ``edit`` applied to its meta), reseal the digests
    and check that resuming is refused with a ValueError matching
    ``match``."""
    import json
    from pathlib import Path

    import numpy as np

    d = Path(directory)
    np.savez(d / state["state"]["file"], **arrays)
    st = json.loads(json.dumps(state))
    if edit is not None:
        edit(st["state"]["meta"])
    (d / "state.json").write_text(json.dumps(st))
    reseal(d)
    with pytest.raises(ValueError, match=match):
        fit_partitioned(make(), collection, checkpoint_dir=directory)


def reseal(directory):
    """Rewrite the digests of the checkpoint in ``directory`` after an edit
    (what someone who can write the folder can do), so that the checks
    behind the digests are reached."""
    import hashlib
    import json
    from pathlib import Path

    from tripletml.core.files import is_regular_file

    d = Path(directory)
    state = json.loads((d / "state.json").read_text())
    state.pop("sha256", None)
    name = state.get("state", {}).get("file")
    if isinstance(name, str) and "/" not in name and is_regular_file(d / name):
        state["arrays_sha256"] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    state["sha256"] = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
    (d / "state.json").write_text(json.dumps(state))
