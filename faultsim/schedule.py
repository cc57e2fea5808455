"""Crash schedules: one kill point per killed incarnation, the last incarnation running to
the end. `Session` runs any schedule of one agent on one scenario; hypothesis tests, the
built-in search and replays all go through it.

A later incarnation's kill points exist only once it has run (its course depends on what
the earlier crashes left), so a schedule names them by position: `Crash(at)` is a place
along that incarnation's kill points, `at / RESOLUTION` of the way through. Smaller is
earlier, which is what shrinking towards 0 needs.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .crashmodel import CrashState
from .errors import UsageError
from .killpoints import KillPoint, kill_points
from .report import ModelRun, Verdict

RESOLUTION = 1 << 16
# Phases of a kill point in which a tool call is pending on disk: a crash there makes the
# next run reconcile (P5), the recovery path a second crash should probe.
PENDING = ("between-A-and-tool", "in-tool", "after-effect", "after-tool-before-B")


@dataclass(frozen=True)
class Crash:
    """One crash of a schedule. `at` picks the kill point: for the first incarnation it may
    be the `KillPoint` itself; otherwise a position in [0, RESOLUTION) along the
    incarnation's kill points (within its recovery, before it first asks the model, when
    `recovery` is set). `state` picks among the crash states the model allows there
    (modulo their number: one for a process kill, several after power loss)."""

    at: KillPoint | int = 0
    state: int = 0
    recovery: bool = False


@dataclass(frozen=True)
class Schedule:
    crashes: tuple[Crash, ...]

    def __post_init__(self) -> None:
        if not self.crashes:
            raise ValueError("a schedule has at least one crash")

    def __len__(self) -> int:
        return len(self.crashes)


def pending_windows(points: Sequence[KillPoint]) -> list[list[KillPoint]]:
    """The kill points at which a tool call is pending on disk, one list per stretch (one
    per tool turn): drawing a stretch first, then a point, gives every turn its chance,
    however long its window."""
    windows: list[list[KillPoint]] = []
    inside = False
    for n, point in enumerate(points):
        if point.category in PENDING:
            if not inside:
                # the stretch begins where save A's rename landed: the points after it
                # and before the agent's mark are still "after-model-response"
                start = n
                while start > 0 and points[start - 1].category == "after-model-response" \
                        and not points[start - 1].torn:
                    start -= 1
                windows.append(list(points[start:n]))
                inside = True
            windows[-1].append(point)
        elif inside and (point.torn or point.category == "checkpoint-rename"):
            windows[-1].append(point)  # inside a write of the same turn, or save B's
        else:
            inside = False
    return windows


def recovery_points(points: Sequence[KillPoint], trace: Sequence) -> list[KillPoint]:
    """The kill points of a resumed run before its first model answer: its reading of the
    files, its reconciliation of pending calls and the save that completes that turn."""
    first = next((e.index for e in trace if e.kind == "model.response"), None)
    if first is None:
        return list(points)
    return [p for p in points if p.index < first] or list(points)


class NoSuchKillPoint(UsageError, LookupError):
    """A schedule names a kill point its incarnation never reaches."""


def pick(crash: Crash, points: Sequence[KillPoint], trace: Sequence) -> KillPoint:
    if isinstance(crash.at, KillPoint):  # by place: the same event and offset in this run
        for point in points:
            if point.index == crash.at.index and point.offset == crash.at.offset:
                return point
        raise NoSuchKillPoint(f"this run has no kill point at event #{crash.at.index}"
                              + (f", offset {crash.at.offset}" if crash.at.torn else "")
                              + f" (it has {len(trace)} events)")
    pool = recovery_points(points, trace) if crash.recovery else list(points)
    at = min(max(int(crash.at), 0), RESOLUTION - 1)
    return pool[at * len(pool) // RESOLUTION]


@dataclass
class ScheduleResult:
    """What one schedule did: its verdict, and the run it belongs to (for the text)."""

    verdict: Verdict
    run: ModelRun

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def violations(self):
        return self.verdict.violations

    @property
    def schedule(self) -> list[KillPoint]:
        return self.verdict.schedule

    def as_schedule(self) -> Schedule:
        """The schedule, by place: replayable with `Session.run`."""
        v = self.verdict
        return Schedule(tuple(Crash(e.point, e.order) for e in v.earlier) +
                        (Crash(v.kill_point, v.order),))

    @property
    def token(self) -> str:
        return self.verdict.token(self.run)

    def counterexample(self) -> str:
        return self.run.counterexample(self.verdict)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError("faultsim: the schedule violates the protocol\n\n" +
                                 self.counterexample())


class Session:
    """One agent on one scenario under one crash model, ready to run crash schedules.

        with faultsim.Session(make_agent, "scenarios/support_tickets.toml") as session:
            session.run(Schedule((Crash(session.kill_points[40]), Crash(900)))).assert_ok()

    The clean run is recorded on entry (twice: a flake guard); `trace` and `kill_points`
    are the first incarnation's. Inside the `with` block the filesystem is the fake one and
    the clock is frozen, for all code (pausing and resuming pyfakefs for every run leaks
    memory): give hypothesis `session.example_database(...)`, which does its I/O on the
    real disk, or none.
    """

    def __init__(self, make_agent: Callable, scenario: Any, *, crash_model: str = "process",
                 seed: str = "0", timeout: float | None = 30.0,
                 agent_name: str | None = None) -> None:
        from .scenario import Scenario, load_scenario

        if crash_model not in ("process", "power"):
            raise ValueError(f"a session runs one crash model, process or power, not "
                             f"{crash_model!r}")
        self.scenario = scenario if isinstance(scenario, Scenario) else \
            load_scenario(Path(scenario))
        self.make_agent, self.crash_model, self.seed = make_agent, crash_model, str(seed)
        self.timeout = timeout
        self.agent_name = agent_name or getattr(make_agent, "__module__", "agent")
        self._ex = None
        self._traces: dict[tuple, tuple] = {}  # crash state + world -> the resumed course
        self._judged: dict[tuple, Any] = {}  # crash state + world + crashes -> result
        self.runs = 0  # schedules run

    def __enter__(self) -> "Session":
        from .inprocess.sandbox import Explorer

        self._ex = Explorer(self.make_agent, self.scenario, agent_name=self.agent_name,
                            timeout=self.timeout, seed=self.seed)
        self._ex.__enter__()
        try:
            self.golden = self._ex.golden()
        except BaseException:
            self._ex.__exit__(None, None, None)
            raise
        self.trace = self.golden.trace
        self.kill_points = kill_points(self.trace)
        self.model_run = ModelRun(scenario=self.scenario, agent=self.agent_name,
                                  crash_model=self.crash_model, kill_points=self.kill_points,
                                  explored=[], seed=self.seed)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._ex is not None:
            self._ex.__exit__(*exc)
            self._ex = None

    def example_database(self, database: Any = "default") -> Any:
        """A hypothesis example database usable inside the session: `database` (default:
        hypothesis's own, under .hypothesis/) with its I/O done on the real disk."""
        from hypothesis.database import ExampleDatabase

        if database == "default":
            from hypothesis import settings

            with self.real_disk():
                database = settings.default.database
        if database is None:
            return None

        session = self

        class RealDisk(ExampleDatabase):
            def save(self, key, value):
                with session.real_disk():
                    database.save(key, value)

            def fetch(self, key):
                with session.real_disk():
                    return list(database.fetch(key))

            def delete(self, key, value):
                with session.real_disk():
                    database.delete(key, value)

            def move(self, src, dest, value):
                with session.real_disk():
                    database.move(src, dest, value)

        return RealDisk()

    @contextmanager
    def real_disk(self):
        """The real filesystem for a moment (rarely: each pause leaks a little memory)."""
        patcher = self._ex._patcher if self._ex is not None else None
        if patcher is None:
            yield
            return
        patcher.pause()
        try:
            yield
        finally:
            patcher.resume()

    def run(self, schedule: Schedule | Sequence[Crash]) -> ScheduleResult:
        """Run `schedule`: kill the first incarnation at its first crash, resume, kill that
        run at the next ... and judge the last, unkilled, resume."""
        crashes = schedule.crashes if isinstance(schedule, Schedule) else tuple(schedule)
        if not crashes:
            raise ValueError("a schedule has at least one crash")
        return self._run(len(crashes),
                         lambda n, points, trace: pick(crashes[n], points, trace),
                         lambda n, count: crashes[n].state % count)

    def draw(self, data: Any, max_crashes: int = 2, min_crashes: int = 1) -> ScheduleResult:
        """Run a schedule drawn as it goes from hypothesis's `st.data()`: each later crash
        is drawn from the kill points of the run it kills, once that run's course is
        known (nine times in ten from its recovery; the first crash nine times in ten
        where a tool call is pending). The built-in search uses this."""
        from hypothesis import strategies as st

        from . import strategies as fst

        count = data.draw(st.integers(min_crashes, max_crashes), label="crashes")

        def choose(n: int, points: list[KillPoint], trace: Sequence) -> KillPoint:
            strategy = fst.pending_points(points) if n == 0 else \
                fst.recovery_points_of(points, trace)
            return data.draw(strategy, label=f"crash {n + 1}")

        def choose_state(n: int, states: int) -> int:
            return data.draw(st.integers(0, states - 1), label=f"crash {n + 1} state") \
                if states > 1 else 0

        return self._run(count, choose, choose_state)

    # -- the mechanism --------------------------------------------------------------------
    def _run(self, count: int, choose: Callable, choose_state: Callable) -> ScheduleResult:
        from .inprocess.sandbox import resume_and_judge
        from .pipeline.incarnation import world_signature
        from .pipeline.sweep import Earlier, schedule_violations

        if self._ex is None:
            raise RuntimeError("use the session inside `with`: it holds the fake filesystem")
        ex, model = self._ex, self.crash_model
        trace, points = self.trace, self.kill_points
        earlier: list[Earlier] = []
        start = None
        for n in range(count):
            point = choose(n, points, trace)
            world, states, after_kill = ex.crash(point, model, start)
            order = choose_state(n, len(states))
            state = states[order]
            watch = ex.interposer.last_touched
            signature = world_signature(world)
            if n == count - 1:
                break
            trace = self._course(world, state, signature)
            points = kill_points(trace)
            earlier.append(Earlier(point, order, state.persisted, tuple(trace)))

            def start(world=world, state=state):
                ex.prepare(world, state)
                return world
        schedule = [e.point for e in earlier] + [point]
        key = (state.digest(), signature, len(schedule))
        result = self._judged.get(key)
        if result is None:
            result = resume_and_judge(ex, self.golden, world, state, schedule, watch)
            self._judged[key] = result
        violations = schedule_violations(self.golden, schedule, state, result, after_kill)
        self.runs += 1
        return ScheduleResult(Verdict(point, model, state.persisted, violations, state,
                                      result.summary, self.golden, order,
                                      earlier=tuple(earlier)), self.model_run)

    def _course(self, world, state: CrashState, signature: str) -> list:
        """The clean course of the run resumed from `state` (learned once, on a copy)."""
        key = (state.digest(), signature)
        if key not in self._traces:
            w = copy.deepcopy(world)
            self._ex.prepare(w, state)
            self._traces[key] = tuple(self._ex.incarnation(w).events)
        return list(self._traces[key])
