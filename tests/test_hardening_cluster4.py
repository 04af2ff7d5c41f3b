"""Hardening, round 4 (issue 42): checkpoints tied to their data (section 4),
scheduler addresses that fail fast (section 2)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from sklearn.datasets import load_digits

import tripletml
from tripletml.sharded import ShardedCollection
from tripletml.training.partitioned import fit_partitioned

from _crash import reseal


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:400], y[:400]


def _coll(X, y):
    return ShardedCollection.from_arrays(X, y, n_partitions=2)


def _make(name, **kw):
    params = dict(n_triplets=600, max_iter=2, tol=None, random_state=0)
    params.update(kw)
    return getattr(tripletml, name)(**params)


def _state(d):
    return json.loads((d / "state.json").read_text())


def _arrays_path(d):
    return d / _state(d)["state"]["file"]


# ---------------------------------------------------------------------------
# section 4: checkpoints belong to their data
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["OASIS", "SDCA"])
def test_checkpoint_of_other_data_with_the_same_sizes_is_refused(tmp_path, digits, name):
    X, y = digits
    fit_partitioned(_make(name), _coll(X, y), checkpoint_dir=tmp_path)
    other = np.array(X)
    other[300] += 1.0                    # one row of partition 1
    with pytest.raises(ValueError, match=r"made from other data .*partition 1 differ"):
        fit_partitioned(_make(name), _coll(other, y), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"made from other data .*partitions 0, 1 differ"):
        fit_partitioned(_make(name), _coll(X[::-1], y[::-1]), checkpoint_dir=tmp_path)
    # resume=False starts again on the new data
    fit_partitioned(_make(name), _coll(other, y), checkpoint_dir=tmp_path, resume=False)


def test_fingerprint_sees_a_swap_of_rows_or_labels_outside_the_hashed_rows():
    from tripletml.training.partitioned import Partition, _fingerprint
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(5000, 3)), rng.integers(0, 3, 5000)
    fp = _fingerprint(Partition(0, X, y), np.unique(y, return_counts=True))
    X2 = X.copy()
    X2[[2501, 2502]] = X2[[2502, 2501]]
    y2 = y.copy()
    i, j = 2501, 2501 + int(np.flatnonzero(y[2502:] != y[2501])[0]) + 1
    y2[[i, j]] = y2[[j, i]]
    assert _fingerprint(Partition(0, X2, y), np.unique(y, return_counts=True)) != fp
    assert _fingerprint(Partition(0, X, y2), np.unique(y2, return_counts=True)) != fp
    assert _fingerprint(Partition(0, X.copy(), y.copy()),
                        np.unique(y, return_counts=True)) == fp


def test_checkpoint_of_other_settings_names_the_setting(tmp_path, digits):
    X, y = digits
    fit_partitioned(_make("OASIS"), _coll(X, y), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"other settings \(params\.C: "):
        fit_partitioned(_make("OASIS", C=0.5), _coll(X, y), checkpoint_dir=tmp_path)


def test_edited_checkpoint_files_are_refused_by_their_digests(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    arrays = dict(np.load(path))
    raw = path.read_bytes()
    arrays["W"] = arrays["W"] * 1000
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="round-.*npz was modified after tripletml wrote it"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    path.write_bytes(raw)
    state = _state(tmp_path)
    state["state"]["meta"]["hist"]["loss"][0] *= 2       # an edited history
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="state.json was modified after tripletml wrote it"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)


def test_sdca_edits_with_rewritten_digests_fail_the_primal_from_the_duals(tmp_path, digits):
    """Duals x5 or the model x1000, digests rewritten: M(alpha) recomputed
    from the data disagrees."""
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    good = dict(np.load(path))
    for key, factor in (("alpha", 5.0), ("M", 1000.0), ("alpha_sum", 5.0)):
        arrays = {k: v.copy() for k, v in good.items()}
        arrays[key] = arrays[key] * factor
        np.savez(path, **arrays)
        reseal(tmp_path)
        with pytest.raises(ValueError, match="not the model of its dual variables"):
            fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)
    np.savez(path, **good)
    reseal(tmp_path)                      # the untouched arrays are accepted
    fit_partitioned(_make("SDCA", output="average"), coll, checkpoint_dir=tmp_path)


def test_changed_seed_or_step_count_with_rewritten_digests_is_refused(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    good = _state(tmp_path)
    state = json.loads(json.dumps(good))
    state["state"]["meta"]["seed"] = str(int(good["state"]["meta"]["seed"]) + 1)
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="sampling seed .* random_state=0"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    state = json.loads(json.dumps(good))
    state["state"]["meta"]["model"]["t"] += 7
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="step count t="):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)


@pytest.mark.parametrize("kind", ["file", "devnull", "below_a_file"])
def test_checkpoint_dir_that_is_not_a_directory_is_refused(tmp_path, digits, kind):
    X, y = digits
    f = tmp_path / "f"
    f.write_text("mine")
    target = {"file": f, "devnull": "/dev/null", "below_a_file": f / "ck"}[kind]
    if kind == "devnull" and not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    with pytest.raises(ValueError, match="checkpoint_dir .*(not a directory|cannot be)"):
        fit_partitioned(_make("OASIS"), _coll(X, y), checkpoint_dir=target)
    assert f.read_text() == "mine"


def test_huge_declared_shape_and_tampered_counters_name_the_file(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)
    path = _arrays_path(tmp_path)
    good = path.read_bytes()
    arrays = dict(np.load(path))
    np.savez(path, **arrays)
    # rewrite the header of M to declare a (10**6, 10**6) array (7.3 TiB)
    raw = path.read_bytes()
    d = arrays["M"].shape[0]
    old = f"'shape': ({d}, {d}), }}".encode()
    new = b"'shape': (1000000, 1000000), }"
    assert raw.count(old) >= 1
    forged = raw.replace(old, new[:len(old)] if len(new) > len(old) else new.ljust(len(old)))
    if len(new) > len(old):              # keep the header length: shorten the padding
        i = raw.index(old)
        end = raw.index(b"\n", i)
        pad = end - i - len(old)
        assert pad >= len(new) - len(old)
        forged = raw[:i] + new + b" " * (pad - (len(new) - len(old))) + raw[end:]
    path.write_bytes(forged)
    reseal(tmp_path)
    with pytest.raises(ValueError, match=r"round-\d+\.npz: member 'M' declares shape"):
        fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)
    path.write_bytes(good)
    state = _state(tmp_path)
    state["state"]["meta"]["n_window"] = 10 ** 18
    (tmp_path / "state.json").write_text(json.dumps(state))
    reseal(tmp_path)
    with pytest.raises(ValueError, match="averaging window is malformed"):
        fit_partitioned(_make("SDCA"), coll, checkpoint_dir=tmp_path)


def test_foreign_files_in_the_checkpoint_folder_are_never_deleted(tmp_path, digits):
    X, y = digits
    coll = _coll(X, y)
    mine = tmp_path / "round-000000000001.npz"
    np.savez(mine, a=np.arange(3))
    before = mine.read_bytes()
    with pytest.raises(ValueError, match="did not write .*round-000000000001.npz"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    assert mine.read_bytes() == before
    mine.unlink()
    (tmp_path / "state.json").write_text('{"my": "settings"}')
    with pytest.raises(ValueError, match="did not write .*state.json"):
        fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path, resume=False)
    assert (tmp_path / "state.json").read_text() == '{"my": "settings"}'
    (tmp_path / "state.json").unlink()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    tmpname = tmp_path / ".round-000000000001.npz.abcd1234.tmp"    # a look-alike name
    tmpname.write_text("mine too")
    fit_partitioned(_make("OASIS", max_iter=3), coll, checkpoint_dir=tmp_path)
    assert notes.read_text() == "mine" and tmpname.read_text() == "mine too"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".round-000000000001.npz.abcd1234.tmp", "notes.txt", "round-000000000003.npz",
        "state.json"]


def test_temporaries_of_a_killed_save_are_removed_at_the_next_save(tmp_path, digits):
    from tripletml.training.checkpoint import RoundCheckpoint
    X, y = digits
    coll = _coll(X, y)
    fit_partitioned(_make("OASIS"), coll, checkpoint_dir=tmp_path)
    raw = _arrays_path(tmp_path).read_bytes()
    killed = [tmp_path / ".round-000000000003.npz.k1ll3d_1.tmp",
              tmp_path / ".state.json.k1ll3d_2.tmp"]
    killed[0].write_bytes(raw[:len(raw) // 2])       # a half-written arrays file
    killed[1].write_bytes(b"")                       # killed before writing
    ck = RoundCheckpoint.__new__(RoundCheckpoint)    # a save without a new open
    ck.dir, ck.resume = tmp_path, True
    ck.settings, ck.data = _state(tmp_path)["settings"], _state(tmp_path)["data"]
    ck.save(3, {"W": np.eye(2)}, {"seed": "1"})
    assert not any(p.exists() for p in killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round-000000000003.npz",
                                                          "state.json"]
