"""tripletml.distributed.streaming.fit_stream: a tampered checkpoint is refused (model
names outside the directory, a model of another class, malformed or special
state files) and the leftovers of killed saves are removed (issue 26, item 4).
"""
import json
import os

import numpy as np
import pytest

from tripletml import KISSME, OASIS, SDCA
from tripletml.distributed.streaming import fit_stream

KW = dict(n_triplets_per_shard=100, batch_size=50, checkpoint_every=100, random_state=0)


def _shards():
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(60, 5)), rng.integers(0, 3, 60)) for _ in range(2)]


def _run(tmp_path, **kw):
    ckpt = tmp_path / "ckpt"
    model = fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt,
                       **dict(KW, **kw))
    return ckpt, model


def _state(ckpt):
    return json.loads((ckpt / "state.json").read_text())


def _write_state(ckpt, data):
    (ckpt / "state.json").write_text(json.dumps(data))


def test_model_name_outside_the_checkpoint_is_refused(tmp_path):
    ckpt, _ = _run(tmp_path)
    data = _state(ckpt)
    outside = tmp_path / "outside_model.npz"
    KISSME().fit(*_shards()[0]).save(outside)
    for name in ("../outside_model.npz", str(outside), "sub/model-000000000400.npz",
                 "model-000000000400.npz/..", "other.npz", 3, "model-000000000399.npz"):
        data["state"]["model"] = name
        _write_state(ckpt, data)
        with pytest.raises(ValueError, match="model name"):
            fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    assert outside.is_file()                       # never touched


def test_model_of_another_class_is_refused(tmp_path):
    ckpt, _ = _run(tmp_path)
    name = _state(ckpt)["state"]["model"]
    KISSME().fit(*_shards()[0]).save(ckpt / name)   # same name, another learner
    with pytest.raises(ValueError, match="is a KISSME, the stream trains a OASIS"):
        fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)


def test_symlinked_or_missing_model_is_refused(tmp_path):
    ckpt, _ = _run(tmp_path)
    name = _state(ckpt)["state"]["model"]
    outside = tmp_path / "outside_model.npz"
    os.replace(ckpt / name, outside)
    with pytest.raises(ValueError, match="missing or not a regular file"):
        fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    os.symlink(outside, ckpt / name)
    with pytest.raises(ValueError, match="missing or not a regular file"):
        fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    assert outside.is_file()


def test_malformed_state_is_refused(tmp_path):
    ckpt, _ = _run(tmp_path)
    good = _state(ckpt)
    bad_states = [
        ("[1, 2]", "not a tripletml stream checkpoint"),
        ("{not json", "not valid JSON"),
        (json.dumps(dict(good, state=dict(good["state"], epoch=-1))), "epoch"),
        (json.dumps(dict(good, state=dict(good["state"], steps="12"))), "steps"),
        (json.dumps(dict(good, state=dict(good["state"], done="yes"))), "done"),
        (json.dumps(dict(good, state=dict(good["state"], extra=1))), "malformed state"),
        (json.dumps(dict(good, state=dict(good["state"], epoch=99))), "outside the stream"),
        (json.dumps(dict(good, state=dict(good["state"], model=None))), "names no model"),
        (" " * (2 << 20), "larger than"),
    ]
    for text, match in bad_states:
        (ckpt / "state.json").write_text(text)
        with pytest.raises(ValueError, match=match):
            fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    # the settings are checked, the learner's class among them
    _write_state(ckpt, good)
    with pytest.raises(ValueError, match="other stream settings"):
        fit_stream(SDCA(alpha=0.1), _shards(), checkpoint_dir=ckpt, **KW)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_state_json_fifo_is_refused_without_blocking(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.mkfifo(ckpt / "state.json")
    with pytest.raises(ValueError, match="FIFO"):
        fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path):
    ckpt, full = _run(tmp_path)
    current = _state(ckpt)["state"]["model"]
    # what killed saves leave: model and state temporaries, an unrecorded model
    stale = [".model-000000000100.npz.ab_3x9zq.tmp", ".model-000000000300.npz.k2j4h5g6.tmp",
             ".state-q1w2e3r4.json", "model-000000000100.npz"]
    # look-alikes the library never writes, and a directory of a stale name
    kept = ["notes.txt", ".model-000000000100.npz.tmp", "x.model-000000000100.npz.ab_3x9zq.tmp",
            ".model-000000000100.npz.ABCDEFGH.tmp", ".state-q1w2e3r4.json.bak",
            "model-1.npz", "data.npz", ".model-000000000100.npz.ab_3x9zq.tmp.keep"]
    for name in stale + kept:
        (ckpt / name).write_bytes(b"x" * 1000)
    (ckpt / ".model-000000000200.npz.dirdirdi.tmp").mkdir()
    outside = tmp_path / ".model-000000000100.npz.zzzzzzzz.tmp"
    outside.write_bytes(b"keep")
    (ckpt / ".model-000000000500.npz.linklink.tmp").symlink_to(outside)
    again = fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    np.testing.assert_array_equal(again.W_, full.W_)
    names = set(os.listdir(ckpt))
    assert not names & set(stale), names & set(stale)
    assert set(kept) <= names
    assert current in names and "state.json" in names
    assert (ckpt / ".model-000000000200.npz.dirdirdi.tmp").is_dir()
    # the library never writes a symbolic link: one is left alone, its target too
    assert (ckpt / ".model-000000000500.npz.linklink.tmp").is_symlink()
    assert outside.read_bytes() == b"keep"


def test_killed_save_leftovers_then_resume_equals_uninterrupted(tmp_path, monkeypatch):
    """A save killed before its rename leaves a temporary; the resumed run
    removes it and still ends with the uninterrupted model."""
    import tripletml.core.model_writer as writer

    full = fit_stream(OASIS(C=0.1, random_state=0), _shards(), **KW)
    ckpt = tmp_path / "ckpt"
    real_replace, calls = os.replace, {"n": 0}

    def replace(src, dst):
        if str(src).endswith(".tmp"):
            calls["n"] += 1
            if calls["n"] == 2:           # the second model save dies before its rename
                raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", replace)
    # the writer's own cleanup would remove the temporary: simulate SIGKILL
    monkeypatch.setattr(writer.os, "unlink", lambda p: None)
    with pytest.raises(KeyboardInterrupt):
        fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    monkeypatch.undo()
    assert any(n.endswith(".tmp") for n in os.listdir(ckpt))
    resumed = fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, **KW)
    assert not any(n.endswith(".tmp") for n in os.listdir(ckpt))
    np.testing.assert_array_equal(resumed.W_, full.W_)


def test_resume_false_keeps_the_recorded_model(tmp_path):
    ckpt, _ = _run(tmp_path)
    recorded = _state(ckpt)["state"]["model"]
    (ckpt / ".state-abcdefgh.json").write_text("{}")
    fit_stream(OASIS(C=0.1, random_state=0), _shards(), checkpoint_dir=ckpt, resume=False,
               **dict(KW, max_iter=1))
    assert not (ckpt / ".state-abcdefgh.json").exists()
    assert (ckpt / _state(ckpt)["state"]["model"]).is_file()
    assert _state(ckpt)["state"]["model"] == recorded     # same stream, same last step
