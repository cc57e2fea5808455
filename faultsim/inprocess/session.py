"""`Session`: runs any crash schedule of one agent on one scenario, in the in-process
sandbox; hypothesis tests, the built-in search and replays all go through it. The schedules
themselves (data) are in `schedule`."""
from __future__ import annotations

import copy
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core.crashmodel import CRASH_MODELS, CrashState
from ..killpoints import KillPoint
from ..reports.report import ModelRun, Verdict
from ..schedule import Crash, Schedule, ScheduleResult, pick


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
                 seed: str = "0", timeout: float | str | None = "auto",
                 agent_name: str | None = None, after_convergence: bool = True) -> None:
        from ..scenario import Scenario, load_scenario

        if crash_model not in CRASH_MODELS:
            raise ValueError(f"a session runs one crash model, process or power, not "
                             f"{crash_model!r}")
        self.scenario = scenario if isinstance(scenario, Scenario) else \
            load_scenario(Path(scenario))
        self.make_agent, self.crash_model, self.seed = make_agent, crash_model, str(seed)
        self.timeout = timeout
        self.agent_name = agent_name or getattr(make_agent, "__module__", "agent")
        self._ex = None
        self._traces: dict[tuple, tuple] = {}  # crash state + world -> (course, meets)
        self._judged: dict[tuple, Any] = {}  # crash state + world + crashes -> result
        self.runs = 0  # schedules run
        # Longer schedules after convergence (faultsim.inprocess.search_after_convergence):
        # a last crash after an earlier crash's resumed run met the clean run is composed
        # from a known resumed run, not resumed; False: every one is resumed, every course
        # learned to its end (for comparing).
        self.after_convergence = after_convergence
        self.composed = 0  # schedules whose last crash was composed, not resumed
        self._known: Any = None

    def __enter__(self) -> "Session":
        from .sandbox import Explorer
        from .. import strategies

        # Modules first imported under the fake filesystem are unloaded when it is torn
        # down; hypothesis imports its flatmap strategy lazily, and a copy imported again
        # by a later session draws outside hypothesis's build context (a second search in
        # one process failed with "No build context registered"). So import it here.
        strategies.st.integers().flatmap(strategies.st.just)

        self._ex = Explorer(self.make_agent, self.scenario, agent_name=self.agent_name,
                            timeout=self.timeout, seed=self.seed)
        self._ex.__enter__()
        try:
            self.golden = self._ex.golden()
        except BaseException:
            self._ex.__exit__(None, None, None)
            raise
        self.trace = self.golden.trace
        self.kill_points = self.golden.kill_points()
        from .search_after_convergence import Known

        self._known = Known(self.golden)
        self.model_run = ModelRun(scenario=self.scenario, agent=self.agent_name,
                                  crash_model=self.crash_model, kill_points=self.kill_points,
                                  explored=[], seed=self.seed, timeout=self.timeout)
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

        from .. import strategies as fst

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
        from .sandbox import resume_and_judge
        from ..pipeline.incarnation import world_signature
        from ..pipeline.sweep import Earlier, schedule_violations

        if self._ex is None:
            raise RuntimeError("use the session inside `with`: it holds the fake filesystem")
        ex, model = self._ex, self.crash_model
        trace, points = self.trace, self.kill_points
        earlier: list[Earlier] = []
        start = None
        meets = None  # where the run the next crash kills met the clean run (None: not)
        met = False  # a crash so far fell after its run met the clean run
        for n in range(count):
            point = choose(n, points, trace)
            met = met or (meets is not None and point.index > meets[0])
            crashed = ex.crash(point, model, start)
            world, states, after_kill = crashed.world, crashed.states, crashed.after_kill
            order = choose_state(n, len(states))
            state = states[order]
            watch = ex.interposer.last_touched
            signature = world_signature(world)
            if n == count - 1:
                break
            trace, meets = self._course(world, state, signature)
            points = self.golden.kill_points(trace)
            earlier.append(Earlier(point, order, state.persisted, tuple(trace)))

            def start(world=world, state=state):
                ex.prepare(world, state)
                return world
        schedule = [e.point for e in earlier] + [point]
        key = (state.digest(), signature, len(schedule))
        result = self._judged.get(key)
        if result is None:
            known = self._known.key(state, world) if self.after_convergence else None
            if met:
                result = self._known.compose(known, schedule, state, world)
                self.composed += result is not None
            if result is None:
                result = resume_and_judge(ex, self.golden, world, state, schedule, watch,
                                          keep_tail=known is not None)
                if known is not None:
                    self._known.learn(known, result)
            self._judged[key] = result
        violations = schedule_violations(self.golden, schedule, state, result, after_kill)
        self.runs += 1
        return ScheduleResult(Verdict(point, model, state.persisted, violations, state,
                                      result.summary, self.golden, order,
                                      earlier=tuple(earlier)), self.model_run)

    def _course(self, world, state: CrashState, signature: str) -> tuple[list, Any]:
        """The clean course of the run resumed from `state` (learned once, on a copy), and
        where it met the clean run (None: it did not, or `after_convergence` is off: then
        it is learned to its end)."""
        key = (state.digest(), signature)
        if key not in self._traces:
            if self.after_convergence:
                from .search_after_convergence import converged_course

                self._traces[key] = converged_course(self._ex, world, state)
            else:
                w = copy.deepcopy(world)
                self._ex.prepare(w, state)
                self._traces[key] = (tuple(self._ex.incarnation(w).events), None)
        course, meets = self._traces[key]
        return list(course), meets
