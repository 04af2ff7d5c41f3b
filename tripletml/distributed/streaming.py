"""Train an online learner (OASIS, SDCA, LORETA, ...) by ``partial_fit`` over
triplets streamed from shards, with checkpoints that make an interrupted run
resume where it stopped and end with the same model as an uninterrupted one.

The stream is deterministic given ``random_state``:

* the triplets of shard ``s`` are the shard's own ``triplets`` member, or
  ``n_triplets_per_shard`` class triplets sampled from its labels with the
  seed ``(random_state, s)`` (:func:`tripletml.triplets.random_class_triplets`);
  they are the same in every pass, so SDCA's dual variables (``triplet_ids``
  ``s * 2**32 + i``) are revisited;
* pass ``e`` visits the shards in the order drawn with the seed
  ``(random_state, e)`` and each shard's triplets in the order drawn with
  ``(random_state, e, s)``;
* ``partial_fit`` is called on consecutive chunks of ``batch_size``
  triplets; a checkpoint is written after every ``checkpoint_every`` steps
  (a multiple of ``batch_size``) and at the end.

The learner's ``preprocessing`` statistics (mean, scale, the ``"sphere"``
radius) are fitted by the first ``partial_fit``, that is on the first shard
of pass 0: for features whose scale varies between shards, make that shard
representative or pass ``preprocessing=None`` and scale the shards yourself.

A checkpoint is a directory: the model, saved with the library's own
``save`` (``.npz`` + JSON, no pickle), and ``state.json`` (the position in
the stream and the stream's settings, checked on resume).  The model is
written first under a new name, then ``state.json`` is replaced atomically,
so a crash at any moment leaves a consistent checkpoint.  Resuming loads the
model (``tripletml.load_model``) and replays the stream from the position.

Every file of a checkpoint is untrusted on resume: ``state.json`` must be a
regular file of at most 1 MiB with the expected fields; its model name must
be a bare name the library writes (``model-<12 digits>.npz``, matching the
recorded step count) of a regular file inside the checkpoint directory (no
path, no ``..``, no symbolic link); the loaded model must be of the class
the stream was started with, and the stream settings must match.  The
temporary files of a save killed midway (``.model-*.npz.XXXXXXXX.tmp``,
``.state-XXXXXXXX.json``) and model files a killed checkpoint wrote but never
recorded are removed when a run opens its checkpoint directory: only names
of exactly those patterns, only regular files, only in that directory (a
checkpoint directory belongs to one run at a time).

Exactness: ``partial_fit`` makes exactly one step per triplet, the chunk
boundaries do not depend on where a run was interrupted, and ``save`` keeps
every array the steps use, so the resumed model equals the uninterrupted one.
Two learner states are not saved by ``save``: LORETA's steps since its last
pseudo-inverse check (a checkpoint is therefore written only when ``t_`` is a
multiple of ``pinv_check_every``, where that count is 0); and SDCA's
random generator for ``output="random"`` (refused with checkpoints).  The
divergence watch restarts its window after a resume (it only decides when to
raise).
"""
from __future__ import annotations

import inspect
import json
import numbers
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tripletml.core.files import is_regular_file, read_json
from tripletml.core.model_writer import temp_file_pattern
from tripletml.core.validation import check_triplets
from tripletml.distributed.sharded import ShardedCollection, _materialize
from tripletml.persistence import load_model
from tripletml.triplets import random_class_triplets

__all__ = ["fit_stream", "StreamState"]

_FORMAT = "tripletml-stream-checkpoint"
_VERSION = 1
_ID_STRIDE = 2 ** 32


class StreamState(dict):
    """The position of a stream (``state.json``): ``epoch``, ``shard_pos``
    (index in the pass's shard order), ``offset`` (triplets of that shard
    done), ``steps`` (triplets done in all), ``done`` and ``model``."""


def _shard_triplets(shard, s: int, n_per_shard, random_state: int) -> tuple[Any, np.ndarray]:
    X, y = _materialize(shard)
    T = None
    if isinstance(shard, tuple) and len(shard) == 3:
        T = np.asarray(shard[2])
    if T is None and y is not None and y.ndim == 2 and y.shape[1] == 3 and n_per_shard is None:
        T = y
    if T is None:
        if y is None:
            raise ValueError(f"fit_stream: shard {s} has neither labels nor triplets")
        if n_per_shard is None:
            raise ValueError("fit_stream: n_triplets_per_shard is needed to sample triplets "
                             "from labels")
        rng = np.random.default_rng([int(random_state), int(s)])
        T = random_class_triplets(y, int(n_per_shard), random_state=rng)
    return X, np.asarray(T, dtype=np.int64)


#: the names the checkpoint writes: models, the temporaries of a killed save
#: (:func:`tripletml.core.model_writer.temp_file_pattern`) and of ``state.json``
_MODEL_RE = re.compile(r"model-(\d{12})\.npz\Z")
_STATE_TMP_RE = re.compile(r"\.state-[a-z0-9_]{8}\.json\Z")
_STATE_MAX_BYTES = 1 << 20


def _is_regular(path: Path) -> bool:
    """A regular file, not a symbolic link (lstat)."""
    return is_regular_file(path)


def _clean_stale(ckpt: Path, keep: str | None, models: bool = True) -> None:
    """Remove what killed checkpoints left in ``ckpt``: the temporaries of
    ``save`` and of ``state.json`` and, with ``models``, the models other
    than ``keep`` (the one ``state.json`` records; None: no state records
    any).  Only regular files whose names match the library's own patterns
    exactly."""
    model_tmp = temp_file_pattern(_MODEL_RE.pattern[:-2])
    for entry in os.scandir(ckpt):
        name = entry.name
        if not (model_tmp.match(name) or _STATE_TMP_RE.match(name)
                or (models and _MODEL_RE.match(name) and name != keep)):
            continue
        if entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def _read_state(sfile: Path, func: str) -> dict:
    """``state.json``, checked: a regular file of bounded size holding a
    stream checkpoint's fields with the right types."""
    data = read_json(sfile, func, _STATE_MAX_BYTES, "a tripletml stream checkpoint state")
    if not isinstance(data, dict) or data.get("format") != _FORMAT \
            or data.get("format_version") != _VERSION or not isinstance(data.get("state"), dict):
        raise ValueError(f"{func}: {sfile} is not a tripletml stream checkpoint")
    st = data["state"]
    if set(st) != {"epoch", "shard_pos", "offset", "steps", "done", "model"}:
        raise ValueError(f"{func}: {sfile} has malformed state fields {sorted(st)}")
    for key in ("epoch", "shard_pos", "offset", "steps"):
        v = st[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{func}: {sfile}: state {key}={v!r} is not an int >= 0")
    if not isinstance(st["done"], bool):
        raise ValueError(f"{func}: {sfile}: state done={st['done']!r} is not a bool")
    name = st["model"]
    if name is not None:
        m = _MODEL_RE.match(name) if isinstance(name, str) else None
        if m is None or int(m.group(1)) != st["steps"]:
            raise ValueError(f"{func}: {sfile}: the model name {name!r} is not one this "
                             f"library writes (a bare 'model-<12 digits>.npz' of the recorded "
                             f"step count {st['steps']}, inside the checkpoint directory)")
    elif st["done"] or st["steps"]:
        raise ValueError(f"{func}: {sfile}: a state with steps done names no model")
    return data


def _write_json(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_int(value, name, low=1, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"fit_stream: {name} must be an int >= {low}, got {value!r}")
    return int(value)


def fit_stream(learner, shards: Sequence | Any, *, n_triplets_per_shard: int | None = None,
               max_iter: int = 1, batch_size: int = 1000,
               checkpoint_dir: Any = None, checkpoint_every: int | None = None,
               resume: bool = True, random_state: int = 0,
               callback: Callable[[Any, StreamState], None] | None = None):
    """Train ``learner`` by ``partial_fit`` over triplets streamed from shards.

    Parameters
    ----------
    learner : online tripletml learner (with ``partial_fit``)
        A fresh estimator (or, with ``resume`` and a checkpoint, anything:
        the checkpoint's model is used).
    shards : ShardedCollection or sequence
        :func:`tripletml.distributed.sharded.read_npz_shards` (one shard in memory at a
        time), or a sequence of ``(X, y)`` / ``(X, y, triplets)`` tuples or
        loaders returning ``(X, y)``.  Triplets index the rows of their shard.
    n_triplets_per_shard : int, optional
        Class triplets sampled from each shard's labels (required unless the
        shards carry triplets).
    max_iter : int, default=1
        Passes over the shards.
    batch_size : int, default=1000
        Triplets per ``partial_fit`` call.
    checkpoint_dir : path, optional
        Where checkpoints go (created).  None: no checkpoints.
    checkpoint_every : int, optional
        Steps between checkpoints, a multiple of ``batch_size`` (default:
        ``10 * batch_size``).  A checkpoint is also written at the end of the
        run (LORETA: only at steps that are multiples of ``pinv_check_every``).
    resume : bool, default=True
        Continue from the checkpoint in ``checkpoint_dir`` when there is one
        (its stream settings must match).
    random_state : int, default=0
        Seed of the stream (triplet sampling and orders).
    callback : callable(model, state), optional
        Called after each checkpoint (e.g. to log progress).

    Returns
    -------
    learner
        The trained model (the loaded one when the run resumed).
    """
    func = "fit_stream"
    if not callable(getattr(learner, "partial_fit", None)):
        raise TypeError(f"{func}: {type(learner).__name__} has no partial_fit")
    max_iter = _check_int(max_iter, "max_iter")
    batch_size = _check_int(batch_size, "batch_size")
    n_triplets_per_shard = _check_int(n_triplets_per_shard, "n_triplets_per_shard",
                                      allow_none=True)
    random_state = _check_int(random_state, "random_state", low=0)
    parts = _shard_list(shards)
    if checkpoint_dir is not None:
        checkpoint_every = _check_checkpointing(learner, batch_size, checkpoint_every)
    settings = {"n_shards": len(parts), "n_triplets_per_shard": n_triplets_per_shard,
                "max_iter": max_iter, "batch_size": batch_size,
                "checkpoint_every": checkpoint_every, "random_state": random_state,
                "learner": type(learner).__name__}
    state = StreamState(epoch=0, shard_pos=0, offset=0, steps=0, done=False, model=None)
    model = learner
    ckpt = None if checkpoint_dir is None else Path(checkpoint_dir)
    if ckpt is not None:
        state, model = _open_checkpoint(ckpt, settings, resume, state, model)
        if state["done"]:
            return model
    stream = _Stream(model, parts, settings, state, ckpt, callback)
    stream.run()
    return stream.model


def _shard_list(shards) -> list:
    """The shards as a list: a collection's partitions (with their labels)
    or the items of a sequence."""
    if isinstance(shards, ShardedCollection):
        parts = [(p if lab is None else (p, lab)) for p, lab in
                 zip(shards.parts, shards.labels or [None] * shards.n_partitions)]
    else:
        parts = list(shards)
    if not parts:
        raise ValueError("fit_stream: no shard")
    return parts


def _check_checkpointing(learner, batch_size: int, checkpoint_every) -> int:
    """``checkpoint_every`` (default ``10 * batch_size``), a multiple of
    ``batch_size``; a learner whose state ``save`` does not keep is
    refused."""
    func = "fit_stream"
    checkpoint_every = 10 * batch_size if checkpoint_every is None else _check_int(
        checkpoint_every, "checkpoint_every")
    if checkpoint_every % batch_size:
        raise ValueError(f"{func}: checkpoint_every={checkpoint_every} must be a multiple "
                         f"of batch_size={batch_size}")
    if getattr(learner, "output", None) == "random":
        raise ValueError(f"{func}: {type(learner).__name__}(output='random') cannot be "
                         "checkpointed exactly (its random generator is not saved with "
                         "the model); use output='average' or 'last'")
    return checkpoint_every


def _open_checkpoint(ckpt: Path, settings: dict, resume: bool, state: StreamState, model):
    """Create the checkpoint directory and, with ``resume`` and a
    ``state.json`` there, the recorded position and model (every file
    checked); ``(state, model)``.  Leftovers of killed checkpoints are
    removed."""
    func = "fit_stream"
    ckpt.mkdir(parents=True, exist_ok=True)
    sfile = ckpt / "state.json"
    if not ckpt.is_dir():
        raise ValueError(f"{func}: checkpoint_dir {ckpt} is not a directory")
    if not (resume and (sfile.exists() or sfile.is_symlink())):
        # a fresh run: models without a state.json were never recorded;
        # resume=False keeps the recorded one until its first checkpoint
        _clean_stale(ckpt, None, models=not (sfile.exists() or sfile.is_symlink()))
        return state, model
    data = _read_state(sfile, func)
    if data.get("settings") != settings:
        raise ValueError(f"{func}: the checkpoint in {ckpt} was written with other "
                         f"stream settings ({data.get('settings')} != {settings}); "
                         "use another checkpoint_dir or resume=False")
    state = StreamState(data["state"])
    st_ = data["state"]
    max_iter, n_shards = settings["max_iter"], settings["n_shards"]
    if st_["epoch"] > max_iter or st_["shard_pos"] > n_shards:
        raise ValueError(f"{func}: {sfile}: position epoch={st_['epoch']}, shard_pos="
                         f"{st_['shard_pos']} lies outside the stream ({max_iter} "
                         f"passes over {n_shards} shards)")
    _clean_stale(ckpt, state["model"])
    if state["model"] is not None:
        mfile = ckpt / state["model"]
        if not _is_regular(mfile):
            raise ValueError(f"{func}: the checkpoint model {mfile} is missing or not "
                             "a regular file (a symbolic link or special file is "
                             "refused)")
        model = load_model(mfile)
        if type(model).__name__ != settings["learner"]:
            raise ValueError(f"{func}: the checkpoint model {mfile} is a "
                             f"{type(model).__name__}, the stream trains a "
                             f"{settings['learner']}; the checkpoint was tampered with")
    return state, model


class _Stream:
    """The passes over the shards from ``state``'s position: ``partial_fit``
    on consecutive chunks of ``batch_size`` triplets, a checkpoint every
    ``checkpoint_every`` steps (LORETA: at its pseudo-inverse checks) and
    at the end."""

    def __init__(self, model, parts: list, settings: dict, state: StreamState,
                 ckpt: Path | None, callback):
        self.model, self.parts, self.settings = model, parts, settings
        self.state, self.ckpt, self.callback = state, ckpt, callback
        self.takes_ids = "triplet_ids" in inspect.signature(type(model).partial_fit).parameters
        self.check = getattr(model, "pinv_check_every", None)   # LORETA: at its checks
        self.since = 0

    def checkpoint(self) -> None:
        ckpt, state, model = self.ckpt, self.state, self.model
        if ckpt is None:
            return
        name = f"model-{state['steps']:012d}.npz"
        old = state["model"]
        model.save(ckpt / name)
        state["model"] = name
        _write_json(ckpt / "state.json", {"format": _FORMAT, "format_version": _VERSION,
                                          "settings": self.settings, "state": dict(state)})
        if old and old != name and (ckpt / old).exists():
            os.unlink(ckpt / old)
        if self.callback is not None:
            self.callback(model, state)

    def run(self) -> None:
        state, cfg = self.state, self.settings
        n_shards, random_state = cfg["n_shards"], cfg["random_state"]
        for epoch in range(state["epoch"], cfg["max_iter"]):
            order = np.random.default_rng([random_state, epoch]).permutation(n_shards)
            for pos in range(state["shard_pos"] if epoch == state["epoch"] else 0, n_shards):
                self.shard(epoch, pos, int(order[pos]))
                state.update(epoch=epoch, shard_pos=pos + 1, offset=0)
            state.update(epoch=epoch + 1, shard_pos=0, offset=0)
        state["done"] = True
        self.checkpoint()

    def shard(self, epoch: int, pos: int, s: int) -> None:
        """Shard ``s`` (at ``pos`` in pass ``epoch``'s order) from the
        recorded offset when the run resumes there."""
        state, cfg, model = self.state, self.settings, self.model
        random_state, batch_size = cfg["random_state"], cfg["batch_size"]
        X, T = _shard_triplets(self.parts[s], s, cfg["n_triplets_per_shard"], random_state)
        if T.size:     # a shard without triplets is skipped, as before
            T = check_triplets(T, X.shape[0], f"fit_stream ({cfg['learner']}, shard {s})",
                               allow_degenerate=False)
        perm = np.random.default_rng([random_state, epoch, s]).permutation(T.shape[0])
        start = state["offset"] if (epoch, pos) == (state["epoch"], state["shard_pos"]) else 0
        every = cfg["checkpoint_every"]
        for b0 in range(start, T.shape[0], batch_size):
            sel = perm[b0:b0 + batch_size]
            if self.takes_ids:
                model.partial_fit(X, T[sel], triplet_ids=s * _ID_STRIDE + sel)
            else:
                model.partial_fit(X, T[sel])
            state.update(epoch=epoch, shard_pos=pos, offset=b0 + sel.shape[0],
                         steps=state["steps"] + sel.shape[0])
            self.since += sel.shape[0]
            if every is not None and self.since >= every and (
                    self.check is None or model.t_ % int(self.check) == 0):
                self.checkpoint()
                self.since = 0
