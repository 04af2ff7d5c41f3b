"""A training run that can stop and continue where it stopped: the state of
a solver (and of the objects its steps read) after a completed iteration,
saved through a strategy's checkpoints, and a run that restores it.

The gradient-sum strategy of a partitioned fit
(:mod:`tripletml.distributed.gradient_sums`) runs the learner's own solver
on the driver; a driver that dies continues from its last checkpoint with
the iterates of an uninterrupted run, bit for bit: the solver's arrays and
counters, the minibatch order, the generator, the driver's iteration count,
training seconds and last criterion, and the history are all restored.  The
divergence watch starts afresh (as after a mixing checkpoint).

Each object of the state declares ``checkpoint_fields``, the names of its
attributes that change during training: a NumPy array (saved as an array)
or a JSON value (a number, None, or a list of numbers or of lists of
numbers); it may define ``check_restored(n_iter)``, False when the
restored values contradict each other or the ``n_iter`` iterations of the
checkpoint (a minibatch order that is no permutation, a step counter that is
not ``n_iter``), and ``checkpoint_variable``, the fields whose shape may
differ from the fresh object's (which ``check_restored`` checks).  The saved
values are untrusted on resume: an array must have the dtype and shape of
the fresh object's (the dimensions only for a variable field) and hold
finite values, a scalar must be of the fresh object's kind, a field must
appear once, and the counters must be finite, or the resume is refused with
a ValueError naming the learner (:func:`restore`).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tripletml.engine.driver import TrainingResult, run
from tripletml.engine.history import History

__all__ = ["Checkpoints", "snapshot", "restore", "run_resumable"]


@dataclass
class Checkpoints:
    """Where a resumable run finds and saves its state (a strategy's adapter).

    Attributes
    ----------
    resumed : tuple or None
        ``(iterations, arrays, meta)`` of the checkpoint to continue from.
    save : callable(iterations, arrays, meta, last)
        Save the state after ``iterations`` completed iterations (``last``:
        the run's end).
    every : int
        Rounds between checkpoints.
    unit : int
        Iterations per round: a solver whose iteration is a minibatch
        counts rounds in passes over its examples (a checkpoint per
        minibatch step would cost more than the step).
    """

    resumed: tuple | None
    save: Callable[[int, dict, dict, bool], None]
    every: int = 1
    unit: int = 1


def _field_key(part: str, name: str) -> str:
    return f"{part}__{name.lstrip('_')}"


def snapshot(parts: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, scalars)`` of every ``checkpoint_fields`` attribute of the
    objects ``parts`` (name -> object)."""
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for part, obj in parts.items():
        for name in obj.checkpoint_fields:
            value = getattr(obj, name)
            key = _field_key(part, name)
            if isinstance(value, np.ndarray):
                arrays[key] = value
            elif isinstance(value, (list, tuple)):     # a record that grows: an array
                arrays[key] = np.asarray(_plain(value), dtype=np.float64)
            else:
                scalars[key] = _plain(value)
    return arrays, scalars


def _plain(value: Any) -> Any:
    """A JSON value of a scalar or a (nested) list of numbers."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if value is None:
        return None
    raise TypeError(f"checkpoint field of type {type(value).__name__} is not saved")


def _same_kind(old: Any, new: Any) -> bool:
    """Whether the saved JSON value ``new`` has the kind of the fresh
    object's ``old`` (a finite number where a number was, None where a
    value may not be computed yet)."""
    if isinstance(new, bool) or isinstance(old, bool):
        return isinstance(new, bool) and isinstance(old, (bool, np.bool_))
    if not isinstance(new, (int, float)) and new is not None:
        return False
    if new is None:
        return True                 # an optional value (not yet evaluated)
    if isinstance(old, numbers.Integral):
        return isinstance(new, int)
    return _number(new) or (old is None and _number(new))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def restore(parts: dict[str, Any], arrays: dict[str, np.ndarray], scalars: dict[str, Any],
            who: str, n_iter: int = 0) -> None:
    """Set the ``checkpoint_fields`` of ``parts`` from a checkpoint of
    ``n_iter`` iterations (checked against the fresh objects: see the
    module's docstring).  An array has the fresh one's dtype and shape,
    except for the fields an object lists in ``checkpoint_variable`` (a rank
    that grows, a vector not computed yet: None in the fresh object), which
    its ``check_restored(n_iter)`` must check."""
    if not isinstance(scalars, dict):
        raise ValueError(f"{who}: the checkpoint's solver state is malformed")
    values, seen = {}, set()
    for part, obj in parts.items():
        for name in obj.checkpoint_fields:
            key = _field_key(part, name)
            fresh = getattr(obj, name)
            variable = name in getattr(obj, "checkpoint_variable", ())
            if key in arrays and key in scalars:
                raise ValueError(f"{who}: the checkpoint's solver state does not match this "
                                 f"run's ({key!r} twice); use another checkpoint_dir or "
                                 "resume=False")
            if key in arrays and isinstance(fresh, (list, tuple)):
                got = _checked_array(key, arrays[key], None, who)
                if got.ndim > 2 or got.dtype.kind != "f":
                    raise ValueError(f"{who}: the checkpoint's record {key!r} is malformed")
                values[(part, name)] = got.tolist()
            elif key in arrays and (isinstance(fresh, np.ndarray) or (fresh is None and variable)):
                values[(part, name)] = np.array(_checked_array(key, arrays[key], fresh, who,
                                                               variable))
            elif key in scalars and not isinstance(fresh, (np.ndarray, list, tuple)):
                if not _same_kind(fresh, scalars[key]):
                    raise ValueError(f"{who}: the checkpoint's value {key!r} is malformed "
                                     f"({str(scalars[key])[:40]}); use another checkpoint_dir "
                                     "or resume=False")
                value = scalars[key]
                values[(part, name)] = tuple(value) if isinstance(fresh, tuple) else value
            else:
                raise ValueError(f"{who}: the checkpoint's solver state does not match this "
                                 f"run's ({key!r}); use another checkpoint_dir or resume=False")
            seen.add(key)
    if set(arrays) - seen or set(scalars) - seen:
        raise ValueError(f"{who}: the checkpoint's solver state does not match this run's "
                         "(other fields); use another checkpoint_dir or resume=False")
    for (part, name), value in values.items():
        setattr(parts[part], name, value)
    for obj in parts.values():
        check = getattr(obj, "check_restored", None)
        if check is not None and not check(int(n_iter)):
            raise ValueError(f"{who}: the checkpoint's solver state is inconsistent (it was "
                             "edited or made by another run); use another checkpoint_dir or "
                             "resume=False")


def _checked_array(key: str, got: np.ndarray, fresh: np.ndarray | None, who: str,
                   variable: bool = False) -> np.ndarray:
    """A saved array of the fresh one's dtype and shape (``variable``: its
    dimensions only; the owner's ``check_restored`` checks the rest), finite."""
    if fresh is not None and (got.dtype != fresh.dtype or got.ndim != fresh.ndim or (
            not variable and got.shape != fresh.shape)):
        raise ValueError(f"{who}: the checkpoint's array {key!r} has shape {got.shape} "
                         f"and dtype {got.dtype}, this run's {fresh.shape} and "
                         f"{fresh.dtype}; use another checkpoint_dir or resume=False")
    if got.dtype.kind not in "fiub":
        raise ValueError(f"{who}: the checkpoint's array {key!r} has dtype {got.dtype}")
    if got.dtype.kind == "f" and not np.isfinite(got).all():
        raise ValueError(f"{who}: the checkpoint's array {key!r} holds NaN or infinity")
    return got


_HISTORY, _MISSING = "history__", "historynone__"


def _history_arrays(data: dict) -> dict[str, np.ndarray]:
    """``history_`` as arrays: each column's values (0 where None) and where
    it is None (the arrays file, not ``state.json``: a record per iteration
    grows with the run)."""
    out = {}
    for key, col in data.items():
        none = np.array([v is None for v in col], dtype=bool)
        out[_HISTORY + key] = np.array([0.0 if v is None else float(v) for v in col])
        out[_MISSING + key] = none
    return out


def _history(arrays: dict[str, np.ndarray], who: str) -> dict:
    """The saved ``history_`` (equal-length columns) from its arrays, which
    are removed from ``arrays``."""
    keys = [k[len(_HISTORY):] for k in arrays if k.startswith(_HISTORY)]
    data, lengths = {}, set()
    for key in keys:
        vals, none = arrays.pop(_HISTORY + key), arrays.pop(_MISSING + key, None)
        if none is None or vals.ndim != 1 or none.shape != vals.shape \
                or vals.dtype.kind != "f" or none.dtype != bool:
            raise ValueError(f"{who}: the checkpoint's history is malformed")
        data[key] = [None if n else float(v) for v, n in zip(vals, none)]
        lengths.add(vals.size)
    if len(lengths) > 1 or any(k.startswith(_MISSING) for k in arrays) \
            or "step" not in data:
        raise ValueError(f"{who}: the checkpoint's history is malformed")
    data["step"] = [int(v) for v in data["step"]]
    return data


def _json_state(value: Any) -> Any:
    """A bit generator's state as JSON (arrays as lists)."""
    if isinstance(value, dict):
        return {k: _json_state(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _generator_state(rng: np.random.Generator, state: Any, who: str) -> None:
    try:
        if not isinstance(state, dict) or state.get("bit_generator") != \
                rng.bit_generator.state["bit_generator"]:
            raise ValueError
        rng.bit_generator.state = state
    except (ValueError, TypeError, KeyError, OverflowError):
        raise ValueError(f"{who}: the checkpoint's random generator state is malformed; "
                         "use another checkpoint_dir or resume=False") from None


def run_resumable(solver, parts: dict[str, Any], *, checkpoints: Checkpoints | None,
                  rng: np.random.Generator | None, name: str, max_iter: int,
                  tol: float | None = None, max_time: float | None = None,
                  history: History, **run_kwargs) -> TrainingResult:
    """:func:`~tripletml.engine.driver.run` of ``solver`` that continues
    from ``checkpoints.resumed`` and saves its state (``parts``, the
    generator ``rng``, the iteration count, seconds, last criterion and
    ``history``) every ``checkpoints.every`` rounds of ``checkpoints.unit``
    iterations and at the end;
    without ``checkpoints`` it is ``run`` itself.  A continued run ends as
    the uninterrupted one: ``max_iter`` and ``max_time`` count the
    iterations and seconds before the checkpoint, and a checkpoint written
    where ``tol`` had stopped the run resumes to a finished run."""
    if checkpoints is None:
        return run(solver, name=name, max_iter=max_iter, tol=tol, max_time=max_time,
                   history=history, **run_kwargs)
    n0, seconds0, criterion0 = 0, 0.0, None
    if checkpoints.resumed is not None:
        n0, arrays, meta = checkpoints.resumed
        try:
            counters, scalars = meta["run"], meta["state"]
            n0 = int(n0)
            seconds0, criterion0 = float(counters["seconds"]), counters["criterion"]
            if criterion0 is not None:
                criterion0 = float(criterion0)
            arrays = dict(arrays)
            hist = _history(arrays, name)
            gen = meta["rng"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{name}: the checkpoint's state is malformed ({e!r}); use "
                             "another checkpoint_dir or resume=False") from None
        if not (0 < n0 <= max_iter) or len(hist.get("step", [])) != n0:
            raise ValueError(f"{name}: the checkpoint's iteration count {n0} does not match "
                             f"its history or max_iter={max_iter}; use another "
                             "checkpoint_dir or resume=False")
        if not (math.isfinite(seconds0) and seconds0 >= 0) or (
                criterion0 is not None and not math.isfinite(criterion0)):
            raise ValueError(f"{name}: the checkpoint's run counters are malformed (seconds "
                             f"{seconds0}, criterion {criterion0}); use another "
                             "checkpoint_dir or resume=False")
        restore(parts, arrays, scalars, name, n0)
        if rng is not None:
            _generator_state(rng, gen, name)
        history.continue_from(hist)
    state = {"seconds": seconds0, "criterion": criterion0}

    def save(n_iter: int, last: bool) -> None:
        arrays, scalars = snapshot(parts)
        meta = {"run": dict(state), "state": scalars,
                "rng": None if rng is None else _json_state(rng.bit_generator.state)}
        checkpoints.save(n_iter, {**arrays, **_history_arrays(history.data)}, meta, last)

    def on_iteration(n_iter: int, criterion: float | None, seconds: float) -> None:
        state["seconds"] = seconds0 + seconds
        state["criterion"] = criterion0 if criterion is None else criterion
        if (n0 + n_iter) % (checkpoints.every * checkpoints.unit) == 0:
            save(n0 + n_iter, False)

    done_by_tol = tol is not None and criterion0 is not None and criterion0 <= tol
    left = None if max_time is None else max_time - seconds0
    if n0 >= max_iter or done_by_tol or (left is not None and left <= 0):
        # the checkpoint of a run that had ended (its last record saved)
        reason = "tol" if done_by_tol else "max_iter" if n0 >= max_iter else "max_time"
        result = TrainingResult(n_iter=n0, stop_reason=reason, criterion=criterion0,
                                history=history.data, seconds=seconds0)
        finisher = getattr(solver, "finish", None)
        if finisher is not None:
            finisher(result, history)
            result.history = history.data
        return result
    result = run(solver, name=name, max_iter=max_iter - n0, tol=tol, max_time=left,
                 history=history, on_iteration=on_iteration, **run_kwargs)
    result.n_iter += n0
    result.seconds += seconds0
    if result.criterion is None:            # no evaluation since the checkpoint
        result.criterion = criterion0
    save(result.n_iter, True)
    return result
