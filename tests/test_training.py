"""The training driver (tripletml.engine): one loop for every iterative
learner.  Toy solvers check each rule of the driver; registry-driven tests
check that every iterative learner goes through it and that the old loops
are gone."""
import ast
import pathlib
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import tripletml
from tripletml.engine import DivergenceWatch, History, StepReport, apply_result, run
from tripletml.engine.online import OnlinePasses

PKG = pathlib.Path(tripletml.__file__).parent


class Geometric:
    """Toy solver: the criterion halves each iteration (1, 1/2, 1/4, ...),
    the loss is constant; records every iteration."""

    def __init__(self, per_step=1, losses=None):
        self.k = 0
        self.per_step = per_step
        self.losses = losses
        self.finished = None

    def step(self, budget):
        n = min(self.per_step, budget)
        self.k += n
        loss = 1.0 if self.losses is None else self.losses[self.k - 1]
        return StepReport(iterations=n, units=n, t=self.k, criterion=0.5 ** (self.k - 1),
                          record={"loss": loss}, watch=[(loss, f"iteration {self.k}")])

    def finish(self, result, history):
        self.finished = (result.n_iter, result.stop_reason, len(history))


def test_stops_at_tol_with_reason_and_history():
    s = Geometric()
    res = run(s, name="Toy", max_iter=100, tol=0.1)
    # criteria 1, .5, .25, .125, .0625 <= .1 at the 5th iteration
    assert (res.n_iter, res.stop_reason) == (5, "tol")
    assert res.criterion == pytest.approx(0.0625)
    assert res.history["step"] == [1, 2, 3, 4, 5]
    assert res.history["loss"] == [1.0] * 5
    assert s.finished == (5, "tol", 5)


def test_max_iter_and_no_tol():
    res = run(Geometric(), name="Toy", max_iter=7, tol=None)
    assert (res.n_iter, res.stop_reason) == (7, "max_iter")
    res = run(Geometric(), name="Toy", max_iter=3, tol=1e-9)
    assert (res.n_iter, res.stop_reason) == (3, "max_iter")


def test_budget_is_passed_and_respected():
    """A solver running several iterations per call (ITML's compiled sweeps)
    gets the iterations left and may not exceed them."""
    s = Geometric(per_step=4)
    res = run(s, name="Toy", max_iter=10)
    assert res.n_iter == 10 and res.history["step"] == [4, 8, 10]

    class Greedy(Geometric):
        def step(self, budget):
            return StepReport(iterations=budget + 1)

    with pytest.raises(RuntimeError, match="Toy: the solver reported"):
        run(Greedy(), name="Toy", max_iter=3)


def test_a_step_without_progress_is_refused():
    class Stuck:
        def step(self, budget):
            return StepReport(iterations=0, units=0)

    with pytest.raises(RuntimeError, match="no progress"):
        run(Stuck(), name="Toy", max_iter=3)


def test_max_time_counts_reported_seconds():
    class Slow(Geometric):
        def step(self, budget):
            rep = super().step(budget)
            rep.seconds = 1.0          # one (reported) second per iteration
            rep.criterion = 1.0
            return rep

    res = run(Slow(), name="Toy", max_iter=100, tol=1e-3, max_time=3.5)
    assert (res.n_iter, res.stop_reason) == (4, "max_time")
    assert res.seconds == pytest.approx(4.0)
    # reaching max_iter and max_time together is max_iter
    res = run(Slow(), name="Toy", max_iter=4, max_time=3.5)
    assert res.stop_reason == "max_iter"


def test_divergence_watch_stops_with_the_learners_message():
    losses = [1.0, 0.9, 0.8, 5e3]
    w = DivergenceWatch("Toy", advice="lower eta0")
    with pytest.raises(FloatingPointError, match=r"Toy: training diverged \(loss 5000 at "
                                                 r"iteration 4.*lower eta0"):
        run(Geometric(losses=losses), name="Toy", max_iter=4, watch=w)
    w = DivergenceWatch("Toy", advice="lower eta0")
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        run(Geometric(losses=[1.0, np.nan]), name="Toy", max_iter=4, watch=w)


def test_watch_channels_are_independent():
    w = DivergenceWatch("Toy", advice="a")
    w.update(1e-3, "x", "small")
    w.update(1e3, "y", "large")                  # another channel: no comparison across
    with pytest.raises(FloatingPointError):
        w.update(1e5, "z", "small")


def test_windowed_watch_spans_calls_and_flushes():
    w = DivergenceWatch("Toy", advice="a", factor=10, floor=0.5, window=4, initial=1.0)
    w.add(np.ones(3), 0)
    w.add(np.ones(3), 3)                        # closes steps 1-4 (mean 1), opens 5-6
    assert w.count == 2 and w.start == 5
    w.add(np.array([100.0]), 6)
    with pytest.raises(FloatingPointError, match="steps 5-7"):
        w.flush(min_count=1)
    w = DivergenceWatch("Toy", advice="a")
    with pytest.raises(ValueError, match="no window"):
        w.add(np.ones(2), 0)


def test_history_extends_previous_records():
    h = History(keys=("loss",))
    h.record(3, loss=1.0)
    h2 = History(h.data, keys=("loss",))
    h2.record(6, loss=0.5, extra=2)
    assert h2.data["step"] == [3, 6]
    assert h2.data["extra"] == [None, 2.0]
    assert h2.data["seconds"][1] >= h2.data["seconds"][0]
    h2.set_last(loss=0.25)
    assert h2.last("loss") == 0.25


class _Est:
    pass


def test_run_changes_no_estimator_and_apply_result_records_and_warns():
    est = _Est()
    res = run(Geometric(), name="Toy", max_iter=3, tol=1e-6)
    assert vars(est) == {}
    with pytest.warns(ConvergenceWarning, match=r"_Est: stopped at max_iter=3 .*tol=1e-06"):
        apply_result(est, res, tol=1e-6, what="relative change", advice="raise max_iter")
    assert (est.n_iter_, est.stop_reason_) == (3, "max_iter")
    assert est.history_ is res.history
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_result(est, res, tol=None, what="", advice="")      # a fixed budget


class _Stepper:
    """A toy online learner for OnlinePasses: loss 1 per step, margin -1 for
    odd items."""

    _advice = "a"

    def __init__(self):
        self.t_ = 0
        self.seen = []

    def _run_block(self, Xc, data, idx, pos):
        self.seen.append(idx.copy())
        return np.ones(idx.shape[0]), np.where(idx % 2, -1.0, 1.0), {"sq": np.full(idx.shape, 2.0)}

    def _model_finite(self):
        return True

    def _diverged(self, t):
        return FloatingPointError(f"diverged at {t}")

    def _epoch_indices(self, rng, m):
        return rng.permutation(m)

    def _begin_epoch(self, rng, m):
        pass

    def _end_epoch(self, Xc, data, loss, prev):
        return (None if prev is None else 0.0), {"pass_extra": 7}

    def _record_extra(self):
        return {}


def test_online_passes_blocks_records_and_running_means():
    st = _Stepper()
    data = np.zeros((10, 3), dtype=np.int64)
    h = History(keys=("loss", "avg_loss", "mistake_rate"))
    res = run(OnlinePasses(st, None, data, block=4, rng=np.random.default_rng(0)), name="Toy",
              max_iter=3, tol=None, history=h)
    assert res.n_iter == 3 and st.t_ == 30
    assert [len(s) for s in st.seen] == [4, 4, 2] * 3       # blocks within each pass
    for p in range(3):
        assert sorted(np.concatenate(st.seen[3 * p:3 * p + 3])) == list(range(10))
    assert res.history["step"] == [10, 20, 30]
    assert res.history["mistake_rate"] == [0.5, 0.5, 0.5]
    assert res.history["sq"] == [2.0, 2.0, 2.0]
    assert res.history["pass_extra"] == [7.0, 7.0, 7.0]
    # partial_fit-like continuation: the given order, running means continue
    h2 = History(res.history)
    run(OnlinePasses(st, None, data[:4], block=100, previous=h2.data), name="Toy",
        max_iter=1, history=h2)
    assert list(st.seen[-1]) == [0, 1, 2, 3]
    assert h2.data["step"][-1] == 34
    assert h2.data["mistake_rate"][-1] == pytest.approx((15 + 2) / 34)


# ---------------------------------------------------------------- structure
_ALGORITHM_FILES = sorted((PKG / "algorithms").glob("*/*.py"))


def test_the_structure_tests_see_every_algorithm():
    assert len({p.parent.name for p in _ALGORITHM_FILES}) >= 17


@pytest.mark.parametrize("path", [p for p in _ALGORITHM_FILES
                                  if p.name in ("estimator.py", "kernels.py")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_hand_written_training_loop(path):
    """Progress bars, divergence watches and stop reasons belong to the
    driver: no learner or solver makes its own (a solver may compute the
    criterion it reports, e.g. with relative_change)."""
    tree = ast.parse(path.read_text())
    bare = {n.func.id for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    banned = {"progress", "progress_bar", "LossWatch", "finish"} & bare
    assert not banned, f"{path.name} calls {sorted(banned)}"
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names if (n.module or "").endswith(("progress", "stopping"))}
    assert not imported & {"progress", "progress_bar", "LossWatch", "finish"}, path.name
    stores = {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Attribute)}
    assert not stores & {"stop_reason_", "n_iter_"}, path.name


def _iterative_entries():
    from tripletml.registry import FEATURE_KINDS, entries
    out = []
    for e in entries(FEATURE_KINDS):
        params = e.cls().get_params()
        if "max_iter" in params:
            out.append(e)
    return out


@pytest.mark.parametrize("entry", _iterative_entries(), ids=lambda e: e.name)
def test_every_iterative_learner_trains_through_the_driver(entry, monkeypatch):
    """Every learner with ``max_iter`` calls tripletml.engine.run during fit
    and its n_iter_ / stop_reason_ / history_ are the driver's."""
    import tripletml.engine.driver as drv
    calls = []
    real = drv.run

    def spy(solver, **kw):
        res = real(solver, **kw)
        calls.append(res)
        return res

    monkeypatch.setattr(drv, "run", spy)
    for mod in list(__import__("sys").modules.values()):
        if getattr(mod, "__name__", "").startswith("tripletml.") and getattr(mod, "run", None) is real:
            monkeypatch.setattr(mod, "run", spy)
    est = entry.make(0)
    X, y = _data(entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert calls, f"{entry.name}: fit did not go through tripletml.engine.run"
    res = calls[-1]
    assert est.n_iter_ == res.n_iter and est.stop_reason_ == res.stop_reason
    assert est.history_ is res.history


def _data(entry):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    if entry.kind == "multilabel":
        Y = np.zeros((40, 3), dtype=int)
        Y[np.arange(40), rng.integers(0, 3, 40)] = 1
        return X, Y
    y = np.repeat(np.arange(4), 10)
    X[:, 0] += 3 * y
    return X, y


def test_learner_constructors_are_keyword_only_after_the_first():
    import inspect

    from tripletml.registry import entries
    for e in entries():
        params = list(inspect.signature(e.cls.__init__).parameters.values())[1:]
        kinds = [p.kind for p in params]
        assert all(k == inspect.Parameter.KEYWORD_ONLY for k in kinds[1:]), e.name


def test_n_features_in_is_set_in_one_place():
    """Only LearnerBase._set_fitted / _reset_fitted write n_features_in_ (the
    one rule for fitted-ness); no learner assigns or deletes it."""
    offenders = []
    for path in [PKG / "core" / "base.py", *_ALGORITHM_FILES]:
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for n in ast.walk(fn):
                targets = (n.targets if isinstance(n, (ast.Assign, ast.Delete))
                           else [n.target] if isinstance(n, ast.AugAssign) else [])
                if any(isinstance(t, ast.Attribute) and t.attr == "n_features_in_"
                       for t in targets):
                    offenders.append(f"{path.name}:{fn.name}")
    assert sorted(offenders) == ["base.py:_reset_fitted", "base.py:_set_fitted"]


def test_no_learner_overrides_fit_to_skip_sampling():
    """ITML, KISSME and SML say what they make of labels through a sampling
    policy (_sampler), not by overriding fit / _prepare_fit."""
    from tripletml.registry import entries
    from tripletml.core.base import TripletLearner
    for e in entries():
        if issubclass(e.cls, TripletLearner):
            assert e.cls.fit is TripletLearner.fit, e.name
            assert e.cls._prepare_fit is TripletLearner._prepare_fit, e.name


@pytest.mark.parametrize("kw, exc, msg", [
    ({"max_iter": 0}, ValueError, "max_iter=0 must be >= 1"),
    ({"max_iter": 2.5}, TypeError, "max_iter=2.5 must be an integer"),
    ({"tol": -1.0}, ValueError, "tol=-1.0 must be >= 0"),
    ({"tol": float("nan")}, ValueError, "tol=nan must be finite"),
    ({"max_time": 0.0}, ValueError, "max_time=0.0 must be > 0"),
    ({"max_time": float("inf")}, ValueError, "max_time=inf must be finite"),
])
def test_run_refuses_bad_arguments_naming_the_learner(kw, exc, msg):
    args = {"max_iter": 3, **kw}
    with pytest.raises(exc, match=f"Toy: parameter {msg}"):
        run(Geometric(), name="Toy", **args)


def test_a_solver_that_never_ends_a_pass_hits_the_cap(monkeypatch):
    import tripletml.engine.driver as drv

    class Endless:
        def step(self, budget):
            return StepReport(iterations=0, units=1)

    monkeypatch.setattr(drv, "MAX_STEPS_PER_ITERATION", 5)
    with pytest.raises(RuntimeError, match="Toy: 6 steps in a row completed no iteration"):
        run(Endless(), name="Toy", max_iter=2)


def test_whole_run_is_one_driver_step():
    """A routine that runs all its iterations in one call (WholeRun): the
    driver reports its iterations and "tol" when it converged, the whole
    budget and "max_iter" when it did not, and takes its history."""
    from types import SimpleNamespace

    from tripletml.engine.whole import WholeRun

    calls = []

    def go(n_done, converged, crit):
        def f(budget):
            calls.append(budget)
            hist = {"step": list(range(n_done + 1)), "seconds": [0.0] * (n_done + 1)}
            return SimpleNamespace(n_iter=n_done, converged=converged, criterion=crit,
                                   history=hist)
        return f

    res = run(WholeRun(go(7, True, 1e-9)), name="Toy", max_iter=50, tol=1e-6)
    assert (res.n_iter, res.stop_reason, calls) == (7, "tol", [50])
    assert res.history["step"] == list(range(8)) and res.criterion == 1e-9
    res = run(WholeRun(go(50, False, 0.3)), name="Toy", max_iter=50, tol=1e-6)
    assert (res.n_iter, res.stop_reason) == (50, "max_iter") and res.criterion == 0.3
    # converged at the start: one iteration; tol=0.0 (the learner's None) still stops
    res = run(WholeRun(go(0, True, None)), name="Toy", max_iter=50, tol=0.0)
    assert (res.n_iter, res.stop_reason) == (1, "tol")


def test_training_deadline_stops_every_run_within_a_step():
    """``training_deadline`` (AutoSimilarity's time budget): a run stops
    with "max_time" after its first step that ends past the deadline, the
    earlier of two nested deadlines holds, and outside nothing changes."""
    import time as _time

    from tripletml.engine import deadline_passed, training_deadline

    class Slow:
        def __init__(self):
            self.steps = 0

        def step(self, budget):
            self.steps += 1
            _time.sleep(0.01)
            return StepReport()

    s = Slow()
    with training_deadline(_time.time() + 0.05):
        res = run(s, name="X", max_iter=10_000)
    assert res.stop_reason == "max_time" and 3 <= s.steps < 100
    with training_deadline(_time.time() - 1.0), training_deadline(_time.time() + 100.0):
        assert deadline_passed()                        # the earlier one holds
        assert run(Slow(), name="X", max_iter=50).n_iter == 1
    assert not deadline_passed()
    assert run(Slow(), name="X", max_iter=5).stop_reason == "max_iter"
    for bad in (float("nan"), float("inf"), "soon", True):
        with pytest.raises(ValueError, match="training_deadline: the deadline must be"):
            with training_deadline(bad):
                pass


def test_a_learner_fitted_under_a_deadline_stops_with_max_time():
    """A learner whose run would take thousands of steps stops at the
    deadline with ``stop_reason_ = "max_time"`` (no warning: the deadline is
    the caller's), its model finite."""
    import time as _time
    import warnings as _warnings

    from sklearn.datasets import load_iris

    from tripletml import LowRankDML
    from tripletml.engine import training_deadline
    X, y = load_iris(return_X_y=True)
    est = LowRankDML(max_iter=200_000, tol=None, random_state=0)
    with training_deadline(_time.time() + 0.3), _warnings.catch_warnings():
        _warnings.simplefilter("error")
        est.fit(X, y)
    assert est.stop_reason_ == "max_time" and est.n_iter_ < 200_000
    assert np.isfinite(est.components_).all()
