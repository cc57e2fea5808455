"""Exploring one first crash at a time: what the pytest plugin runs for each kill-point item.

`explore()` judges every kill point of a scenario in one go. Here each call judges one
kill point (every crash state each crash model leaves there and, with two crashes, every
schedule whose first crash it is), so that pytest can make one test item of each and
pytest-xdist can spread them. What one call learns stays for the next calls in the same
process: the golden run, and the verdicts of crash states already judged (equal states,
or equivalent ones, as in `explore`). Verdicts do not depend on which calls came before:
a cached class of pairs is re-told with this kill point as its first crash.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
from typing import Any, Callable

import freezegun.api as _real_time

from .pairs import sweep_after_first
from .replaying import sweep_replaying
from .sandbox import Explorer
from ..killpoints import KillPoint
from ..settings.options import ExploreOptions
from ..reports.outfile import OutputError, write_atomic
from ..pipeline.sweep import Earlier, Sweep
from ..reports.report import ModelRun, Report
from ..scenario import Scenario


@dataclasses.dataclass
class _Pairs:
    """Every second crash after one first crash state (by its exact key)."""

    course: tuple  # the resumed run's clean course, where the second crash lands
    failures: list  # deep verdicts that fail, told with the first crash that found them
    explored: int  # second crash states judged (equal ones shared)
    resumed: int  # of those, resumed afresh
    seconds: float


class PointwiseExplorer:
    """One agent × scenario × settings, explored one first-crash kill point per call."""

    def __init__(self, make_agent: Callable, scenario: Scenario, *, agent_name: str,
                 crash_model: str = "process", crashes: int = 2, seed: str = "0",
                 timeout: float | str | None = "auto", workers: int = 1,
                 equivalences: bool = True) -> None:
        options = ExploreOptions(crash_model=crash_model, crashes=crashes, seed=seed,
                                 timeout=timeout, mode="in-process")
        self.make_agent, self.scenario, self.agent_name = make_agent, scenario, agent_name
        self.models = options.models
        self.crashes, self.seed = min(crashes, 2), options.seed
        # under "auto" the resumed runs' limit derives from the clean runs (record_golden)
        self.asked_timeout = self.timeout = timeout
        self.workers = workers if hasattr(os, "fork") else 0
        self.equivalences = equivalences
        self.golden = None
        self.kill_points: list[KillPoint] = []
        self._memo: dict = {}
        self._insensitive: dict = {}
        self._resumed_from: dict = {}
        self._pair_memo: dict = {}
        self._pair_insensitive: dict = {}
        self._pairs: dict[tuple, _Pairs] = {}

    def _explorer(self) -> Explorer:
        return Explorer(self.make_agent, self.scenario, agent_name=self.agent_name,
                        timeout=self.timeout, seed=self.seed)

    golden_cache = None  # a file the xdist workers of one run share the clean runs in

    def record_golden(self) -> list[KillPoint]:
        """The clean runs (twice, as a flake guard) and their kill points; once per
        process, and once per run under xdist (the first worker's, read by the others)."""
        if self.golden is None:
            with self._turn():  # one worker runs them; the others wait, then read
                shared = self._shared_golden()
                if shared is None:
                    with self._explorer() as ex:
                        self.golden = ex.golden()
                        self.timeout = ex.timeout  # derived from the clean runs ("auto")
                    self._share_golden()
                else:
                    self.golden, self.timeout = shared
            self.kill_points = self.golden.kill_points()
        return self.kill_points

    @contextlib.contextmanager
    def _turn(self):
        if self.golden_cache is None:
            yield
            return
        import fcntl

        with open(f"{self.golden_cache}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _shared_golden(self):
        if self.golden_cache is None:
            return None
        try:
            with open(self.golden_cache, "rb") as f:
                return pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            return None

    def _share_golden(self) -> None:
        if self.golden_cache is None:
            return
        try:  # whole or absent for the other workers, as every file faultsim writes
            write_atomic(self.golden_cache, pickle.dumps((self.golden, self.timeout)))
        except (OutputError, pickle.PicklingError, TypeError, AttributeError):
            pass  # a cache: the other workers run the clean runs themselves

    def point(self, point_id: str) -> KillPoint:
        for point in self.record_golden():
            if point.id == point_id:
                return point
        raise LookupError(f"{self.scenario.id} has no kill point {point_id!r} (it has "
                          f"{len(self.kill_points)}, k0-start to {self.kill_points[-1].id})")

    def check(self, point: KillPoint | str) -> Report:
        """Judge every crash state at `point`, under each crash model, and (two crashes)
        every schedule that starts there."""
        if isinstance(point, str):
            point = self.point(point)
        self.record_golden()
        started = _real_time.real_perf_counter()
        runs = {m: ModelRun(scenario=self.scenario, agent=self.agent_name, crash_model=m,
                            kill_points=self.kill_points, explored=[point], seed=self.seed,
                            crashes=self.crashes, timeout=self.asked_timeout)
                for m in self.models}
        with self._explorer() as ex:
            sweep = Sweep(self.golden, runs, memo=self._memo, insensitive=self._insensitive,
                          resumed_from=self._resumed_from, equivalences=self.equivalences, keep_traces=self.crashes >= 2)
            sweep_replaying(ex, sweep, [point], self.models, None)
            if self.crashes >= 2:
                for model in self.models:
                    self._explore_pairs(ex, sweep, model, point)
        report = Report()
        seconds = _real_time.real_perf_counter() - started
        for run in runs.values():
            run.verdicts.sort(key=lambda v: v.order)
            run.seconds = seconds / len(runs)
            report.runs.append(run)
        report.sweep_seconds = seconds
        return report

    def _explore_pairs(self, ex: Explorer, sweep: Sweep, model: str, point: KillPoint) -> None:
        run = sweep.runs[model]
        stats = run.depth(2)
        for judged in sweep.instances:
            if judged.model != model or not judged.ok:
                continue  # a first crash that already fails has its counterexample
            order, state, result, key = judged.order, judged.state, judged.result, judged.key
            pairs = self._pairs.get((model, key))
            fresh = pairs is None
            if fresh:
                pairs = self._sweep_after(ex, sweep, model, point, order, state, result, key)
                self._pairs[(model, key)] = pairs
            stats.total += pairs.explored
            if fresh:
                stats.explored += pairs.explored
                stats.resumed += pairs.resumed
                stats.seconds += pairs.seconds
            earlier = (Earlier(point, order, state.persisted, pairs.course),)
            run.deep_failures += [dataclasses.replace(v, earlier=earlier)
                                  for v in pairs.failures]

    def _sweep_after(self, ex: Explorer, sweep: Sweep, model: str, point: KillPoint,
                     order: int, state: Any, result: Any, key: tuple) -> _Pairs:
        """Kill the run resumed from `state` at every kill point of its own course."""
        started = _real_time.real_perf_counter()
        exact = key == sweep.resumed_from.get(id(result))
        scratch = ModelRun(scenario=self.scenario, agent=self.agent_name, crash_model=model,
                           kill_points=[], explored=[], seed=self.seed, crashes=2)
        course, _ = sweep_after_first(ex, self.golden, {model: scratch}, model, point, order,
                                   state, result if exact else None, self.workers,
                                   self._pair_memo, self._pair_insensitive, self.equivalences)
        depth = scratch.depth(2)
        failures = sorted(scratch.deep_failures,
                          key=lambda v: (v.kill_point.index, v.kill_point.offset or 0, v.order))
        return _Pairs(course, failures, depth.explored, depth.resumed,
                      _real_time.real_perf_counter() - started)
