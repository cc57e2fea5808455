"""The explorer: golden run, kill points, one crash run per kill point and crash model,
verdicts. `explore(make_agent, scenario)` is the public entry point."""
from __future__ import annotations

import copy
import hashlib
import importlib
import json
import posixpath
import posix as _os  # the real OS: pyfakefs patches every module's `os`, not `posix`
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import freezegun
import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not
from pyfakefs.fake_filesystem_unittest import Patcher

from .agent import AgentEnv, Outcome, outcome_of
from .crashmodel import CRASH_MODELS, CrashState, power_states, process_state
from .errors import (AgentFailedCleanly, KillDidNotLand, NonDeterminismError,
                     StoreNeedsSubprocess, WorkerDied)
from .interpose.determinism import seeded
from .interpose.fs import FsInterposer, install
from .killpoints import KillPoint, kill_points
from .oracle import (OUTPUTS, RESUME_GUARDS, STATE_GUARDS, CrashRun, Golden, Violation,
                     judge, no_write_after_kill)
from .report import ModelRun, Report, ResumeSummary, Verdict
from .runner import make_env
from .scenario import Scenario
from .trace import Event, Killed, Tracer, WorldSealed, digest
from .world import World
from .world.ledger import canonical

SANDBOX = "/faultsim/sandbox"


class IncarnationTimeout(BaseException):
    """An incarnation ran past its time limit (an agent that hangs)."""


class _WorkerDiedSignal(BaseException):
    # Raised inside the driver incarnation, where an agent's `except Exception` must not
    # swallow it; `_drive` turns it into WorkerDied.
    pass


# -- the pieces a crash run is made of ---------------------------------------------------
class KillAt:
    """Tracer policy: kill at one kill point."""

    def __init__(self, point: KillPoint, seal: Callable[[], None]) -> None:
        self.point, self._seal = point, seal
        self.landed = False

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.point.offset is None and event.index == self.point.index:
            self.landed = True
            self._seal()
            raise Killed(self.point.id)

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        if self.point.offset is not None and tracer.next_index == self.point.index:
            self.landed = True
            self._seal()
            return write.torn(self.point.offset)
        return None


@dataclass
class Incarnation:
    outcome: Outcome | None = None
    error: str | None = None
    killed: bool = False
    timed_out: bool = False
    events: list[Event] = field(default_factory=list)
    first_position: int | None = None


def _traced_world(tracer: Tracer, scenario: Scenario, world: World, result: Incarnation
                  ) -> tuple[Callable[..., None], Callable[..., None]]:
    """What of an incarnation reaches its trace besides files, in both modes: a listener
    for the world's events (model answers, effects on services) and the agent's `mark`.
    The listener also notes in `result` the first turn of the main task that was asked."""

    def on_world(kind: str, **info: Any) -> None:
        if kind == "model.response":
            rec = info["record"]
            # the main task's first turn asked (a sub-agent starting its own turn 1 while
            # the parent resumes is no restart of the parent)
            if result.first_position is None and rec.position is not None \
                    and rec.script == scenario.script.tag:
                result.first_position = rec.position
            tracer.emit("model.response", f"{rec.script}@{rec.position}",
                        f"{rec.status} {rec.error or ''}".strip())
        elif kind.startswith("effect."):
            e = info["entry"]
            tracer.emit(kind, f"{e.service}.{e.op}",
                        f"{digest(canonical(e.params).encode())}"
                        + (f" key={e.key}" if e.key else ""))

    def mark(name: str, **info: Any) -> None:
        if not world.sealed:  # a killed incarnation marks nothing more
            tracer.emit("mark." + name, str(info.get("tool") or ""))

    return on_world, mark


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Stop a hanging incarnation (main thread only; elsewhere no limit can be set)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise IncarnationTimeout(f"no answer within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def world_signature(world: World) -> str:
    """What of the world a resumed run can observe, plus what the oracle counts."""
    parts = [str(len(world.ledger.entries)), str(len(world.model.requests)),
             world.clock.now().isoformat(), canonical(sorted(world.model._answered.items())),
             canonical(sorted(world.model._faulted.items()))]
    for name, service in sorted(world.services.items()):
        state = {k: v for k, v in vars(service).items() if not k.startswith("_world")}
        parts.append(name + repr(sorted((k, repr(v)) for k, v in state.items())))
    for name, value in sorted(world.durable.items()):
        sign = getattr(value, "faultsim_signature", None)
        parts.append(name + (sign() if callable(sign) else repr(value)))
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


class Explorer:
    """Runs incarnations of one agent on one scenario inside one pyfakefs sandbox."""

    def __init__(self, make_agent: Callable[[AgentEnv], Any], scenario: Scenario, *,
                 agent_name: str = "agent", timeout: float | None = 30.0,
                 seed: str = "0") -> None:
        self.make_agent = make_agent
        self.scenario = scenario
        self.agent_name = agent_name
        self.timeout = timeout
        self.seed = seed
        self._patcher: Patcher | None = None
        self._freezer = None

    # -- set-up ---------------------------------------------------------------------------
    def __enter__(self) -> "Explorer":
        if self.scenario.store.needs_subprocess:
            raise StoreNeedsSubprocess(
                f"{self.scenario.path}: store.kind = {self.scenario.store.kind!r} writes below "
                "Python's file layer, where the in-process mode cannot see or kill it: run "
                "it in subprocess mode (faultsim run --mode subprocess, or "
                "faultsim.real.explore_subprocess)")
        # The SDK is imported before the fake filesystem: pyfakefs unloads at tear-down the
        # modules first imported under it, so every Explorer would import anthropic again
        # (over 2 s, and pydantic's models built anew each time).
        importlib.import_module("anthropic")

        install()  # before the Patcher, so `from os import fsync` gets the hooked one
        self._patcher = Patcher()
        self._patcher.setUp()
        # pyfakefs lets its own modules reach the real disk by inspecting the call stack
        # (traceback.extract_stack) on every open(): a third of an agent's open() cost.
        # Nothing here asks pyfakefs to read real files, so that check is switched off.
        for module in self._patcher.fake_modules.values():
            if isinstance(getattr(module, "skip_names", None), set):
                module.skip_names = set()
        fs = self._patcher.fs
        fs.create_dir(SANDBOX)
        self._open0 = (list(fs.open_files), list(fs._free_fd_heap))
        self.tracer = Tracer()
        self.interposer = FsInterposer(fs, SANDBOX, self.tracer)
        self._freezer = freezegun.freeze_time(self.scenario.start_time.replace("+00:00", ""))
        self._factory = self._freezer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._freezer is not None:
            self._freezer.stop()
        if self._patcher is not None:
            self._patcher.tearDown()

    # -- one incarnation ------------------------------------------------------------------
    def new_world(self) -> World:
        world = self.scenario.build_world()
        world.clock.attach(self._factory)
        return world

    def use_world(self, world: World) -> None:
        world.clock.attach(self._factory)

    def incarnation(self, world: World, policy: Any = None, *,
                    timed: bool = True) -> Incarnation:
        tracer, ip = self.tracer, self.interposer
        tracer.events, tracer.policy = [], policy
        result = Incarnation()
        world.begin_incarnation()
        on_world, mark = _traced_world(tracer, self.scenario, world, result)
        env = make_env(self.scenario, world, Path(SANDBOX), mark)
        unsubscribe = world.subscribe(on_world)
        try:
            with ip, seeded(f"{self.seed}:{world.incarnation}"), \
                    world.model.serving_new_clients(), \
                    _time_limit(self.timeout if timed else None):
                try:
                    result.outcome = outcome_of(self.make_agent(env).run())
                except (Killed, WorldSealed):
                    pass
                except IncarnationTimeout as exc:
                    result.timed_out, result.error = True, str(exc)
                except Exception as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
        finally:
            unsubscribe()
            tracer.policy = None
            fs = self.interposer.fs
            fs.open_files[:], fs._free_fd_heap[:] = self._open0[0], self._open0[1]
        result.killed = ip.killed or world.sealed
        if result.killed:
            result.outcome = None
            result.error = None
        result.events = tracer.events
        return result

    def reset_sandbox(self, state: dict | None = None) -> None:
        self.interposer.undo_escapes()
        self.interposer.restore(state or {})
        self.interposer.after_kill, self.interposer.escapes = [], []

    # -- the golden run -------------------------------------------------------------------
    def golden(self) -> Golden:
        def clean_run(n: int) -> tuple:
            self.reset_sandbox()
            world = self.new_world()
            inc = self.incarnation(world)
            return inc.outcome, inc.error, inc.events, (world, self.interposer.snapshot())

        outcome, events, (world, final) = _golden_checked(self.scenario, clean_run)
        return Golden.of(outcome, world, final, events)

    # -- one crash run --------------------------------------------------------------------
    def crash(self, point: KillPoint, model: str, start: Callable[[], World] | None = None
              ) -> tuple[World, list[CrashState], list[str]]:
        """Run one incarnation into `point`; return the sealed world and the crash states the
        model allows. `start` prepares a resumed incarnation (a crash during recovery);
        without it the incarnation is the first, on an empty sandbox."""
        if start is None:
            self.reset_sandbox()
            world = self.new_world()
        else:
            world = start()
        if point.index > 0:
            policy = KillAt(point, seal=lambda: (self.interposer.kill(),
                                                 setattr(world, "sealed", True)))
            inc = self.incarnation(world, policy)
            if not policy.landed:
                raise KillDidNotLand(f"{point.id} never came: the "
                                     f"{'first' if start is None else 'resumed'} incarnation "
                                     f"{'ended with ' + (inc.error or 'an outcome')}; the "
                                     "agent is not deterministic across runs")
        elif start is not None:
            world.begin_incarnation()  # a restart killed before its first event still began
        states = _states(self, model, self.interposer.snapshot())
        world.sealed = False
        return world, states, list(self.interposer.after_kill)

    def prepare(self, world: World, state: CrashState) -> None:
        """Put `state` on disk for the next incarnation, as a restart would find it, after
        the scenario's downtime (the world's clock moves on: keys and checkpoints may
        expire in between)."""
        current = self.interposer.snapshot()
        if current != state.as_dict():
            self.interposer.restore(state.as_dict())
        else:
            self.interposer.killed = False
            self.interposer.mark_all_durable()
        self.interposer.escapes = []
        self.interposer.after_kill = []
        self.use_world(world)
        if self.scenario.profile.downtime:
            world.clock.advance(self.scenario.profile.downtime)

    def resume(self, world: World, state: CrashState, points: list[KillPoint]) -> CrashRun:
        self.prepare(world, state)
        inc = self.incarnation(world)
        return CrashRun(points, state, world, outcome=inc.outcome, error=inc.error,
                        timed_out=inc.timed_out, final=self.interposer.snapshot(),
                        escapes=list(self.interposer.escapes),
                        resume_positions=[inc.first_position] if inc.first_position is not None
                        else [], events=inc.events)


def _short(text: str, limit: int = 70) -> str:
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def _golden_checked(scenario: Scenario, clean_run: Callable[[int], tuple]) -> tuple:
    """The flake guard of a golden run, in both modes. `clean_run(n)` gives clean run n
    (1, then 2) as (outcome, error, events, kept): each must end with an outcome and no
    error, the two must do the same things, and a completed run must give the scenario's
    expected final answer. Returns the first run's (outcome, events, kept)."""
    runs = []
    for n in (1, 2):
        outcome, error, events, kept = clean_run(n)
        if error is not None or outcome is None:
            raise AgentFailedCleanly(scenario, error or "no outcome")
        runs.append((outcome, events, kept))
    (outcome, events, kept), (_, other_events, _) = runs
    _compare_traces(events, other_events)
    expected = scenario.expected_final_answer.strip()
    got = (outcome.final_answer or "").strip()
    if outcome.status == "completed" and got != expected:
        raise AgentFailedCleanly(scenario, f"its final answer {_short(got)} is not the "
                                 f"scenario's expected_final_answer {_short(expected)}")
    return outcome, events, kept


def _compare_traces(a: Sequence[Event], b: Sequence[Event]) -> None:
    for x, y in zip(a, b):
        if x.signature() != y.signature():
            raise NonDeterminismError(
                f"two clean runs part at event #{x.index}: the first did {x.describe()!r}, "
                f"the second {y.describe()!r}. faultsim needs a deterministic agent (the "
                "model, the services, time, uuid4, random and tempfile names are already "
                "made deterministic; look for iteration over sets, os.urandom, threads)")
    if len(a) != len(b):
        longer = a if len(a) > len(b) else b
        raise NonDeterminismError(
            f"two clean runs part after event #{min(len(a), len(b))}: one goes on with "
            f"{longer[min(len(a), len(b))].describe()!r}, the other stops")


# -- the sweep -----------------------------------------------------------------------------
def _models(crash_model: str | Iterable[str]) -> list[str]:
    if isinstance(crash_model, str):
        names = list(CRASH_MODELS) if crash_model == "all" else [crash_model]
    else:
        names = list(crash_model)
    for name in names:
        if name not in CRASH_MODELS:
            raise ValueError(f"unknown crash model {name!r}; expected process, power or all")
    return names


def _states(ex: Explorer, model: str, snapshot: dict) -> list[CrashState]:
    if model == "process":
        return process_state(snapshot)
    return power_states(snapshot, ex.interposer.inodes(), ex.interposer.durability)


@dataclass
class ResumeResult:
    """What one resumed run showed: the resume guards' violations, and what the state
    guards need to know of it."""

    violations: list[Violation]
    summary: ResumeSummary | None
    first_position: int | None
    seconds: float = 0.0  # how long the bare resumed run took
    first_content: dict = field(default_factory=dict)  # path -> observed | destroyed
    first_presence: dict = field(default_factory=dict)
    listed: frozenset = frozenset()
    events: list | None = None  # its trace, kept where a further crash will be tried in it
    escalated: bool = False  # it stopped with an explicit escalation to a person (P11)

    def blind_to_content(self, path: str) -> bool:
        """The run's course could not depend on this file's old content, nor its outputs."""
        first = self.first_content.get(path)
        return first == "destroyed" or (first is None and not path.startswith(OUTPUTS))

    def blind_to_presence(self, path: str) -> bool:
        """... nor on whether the file existed at all."""
        if posixpath.dirname(path) in self.listed or (path.count("/") == 0 and "." in
                                                      self.listed):
            return False
        first = self.first_presence.get(path)
        return self.blind_to_content(path) and (
            first == "destroyed" or (first is None and not path.startswith(OUTPUTS)))


def _masked(state: CrashState, path: str | None) -> str | None:
    """The state's digest with one file's content blanked out (its name kept)."""
    files = state.as_dict()
    if path is None or not isinstance(files.get(path), bytes):
        return None
    files[path] = b"\0faultsim:masked"
    return CrashState.of(state.model, "", files).digest()


def _absent(state: CrashState, path: str | None) -> str | None:
    """The digest of the state without one file (its directory kept)."""
    files = state.as_dict()
    if path is None or not isinstance(files.get(path), bytes):
        return None
    del files[path]
    return CrashState.of(state.model, "", files).digest()


def _resume_and_judge(ex: Explorer, golden: Golden, world: World, state: CrashState,
                      schedule: list[KillPoint], watch: str | None,
                      keep_trace: bool = False) -> ResumeResult:
    ip = ex.interposer
    started = _real_time.real_perf_counter()
    ip.start_tracking(watch)
    try:
        crash_run = ex.resume(world, state, schedule)
    finally:
        ip.stop_tracking()
    violations = judge(golden, crash_run, RESUME_GUARDS)
    first = crash_run.resume_positions[0] if crash_run.resume_positions else None
    return ResumeResult(violations, ResumeSummary.of(crash_run) if violations else None,
                        first, _real_time.real_perf_counter() - started,
                        dict(ip.first_content), dict(ip.first_presence), frozenset(ip.listed),
                        crash_run.events if keep_trace else None,
                        crash_run.outcome is not None
                        and crash_run.outcome.status == "escalated")


def schedule_violations(golden: Golden, schedule: list[KillPoint], state: CrashState,
                        result: ResumeResult, after_kill: list[str]) -> list[Violation]:
    """All of a crash state's violations: the state guards (checked for every state), what
    the resumed run showed, and writes after the last kill."""
    probe = CrashRun(schedule, state, None, after_kill=after_kill,
                     resume_positions=[result.first_position]
                     if result.first_position is not None else [])
    return (judge(golden, probe, STATE_GUARDS) + result.violations +
            judge(golden, probe, (no_write_after_kill,)))


@dataclass(frozen=True)
class Earlier:
    """A crash of a schedule before its last one: where, and which crash state it left."""

    point: KillPoint
    order: int  # among the crash states the model allows there
    persisted: str
    next_trace: tuple  # the clean course of the incarnation resumed after it


@dataclass
class _Sweep:
    """Bookkeeping shared by both executors: verdicts per model, and what is known of
    crash states already judged.

    Memos make a sweep cheap without making it less exact. Equal crash states (same
    files, same world) give the same resumed run. States that differ only in the content
    of one file F give the same resumed run when that run destroyed F (truncated, replaced
    or removed it) before reading it: a torn temp file is the common case. And a state
    that has one more file F than a judged one gives the same run when that run never
    looked for F (no exists, stat, read, listing of its folder) before creating it over.

    A sweep with `earlier` crashes explores the last crash of longer schedules: the kill
    points of one resumed incarnation. Its verdicts are counted, and kept when they fail.
    """

    golden: Golden
    runs: dict[str, ModelRun]
    memo: dict[tuple, ResumeResult] = field(default_factory=dict)
    insensitive: dict[tuple, ResumeResult] = field(default_factory=dict)
    recorded: set[tuple] = field(default_factory=set)
    done_points: int = 0
    equivalences: bool = True  # False: only equal states share a verdict (for checking)
    earlier: tuple[Earlier, ...] = ()
    keep_traces: bool = False  # results keep their trace: a further crash will be tried
    instances: list = field(default_factory=list)  # (model, point, order, state, result, ok,
    #                                                  key)
    resumed_from: dict = field(default_factory=dict)  # id(result) -> the key it was run for

    @property
    def trace(self) -> list:
        """The clean course of the incarnation this sweep kills."""
        return list(self.earlier[-1].next_trace) if self.earlier else self.golden.trace

    def schedule(self, point: KillPoint) -> list[KillPoint]:
        return [e.point for e in self.earlier] + [point]

    def known(self, state: CrashState, signature: str, watch: str | None):
        """(exact key, result or None, masked digest, absent digest); the two digests are
        None when not needed or not applicable."""
        key = (state.digest(), signature)
        if key in self.memo or not self.equivalences:
            return key, self.memo.get(key), None, None
        masked = _masked(state, watch)
        if masked is not None and (masked, watch, signature) in self.insensitive:
            result = self.insensitive[(masked, watch, signature)]
            self.memo[key] = result
            return key, result, masked, None
        absent = _absent(state, watch)
        without = self.memo.get((absent, signature)) if absent is not None else None
        if without is not None and without.blind_to_presence(watch):
            self.memo[key] = without
            return key, without, masked, absent
        return key, None, masked, absent

    def learn(self, key: tuple, state: CrashState, signature: str, watch: str | None,
              result: ResumeResult) -> None:
        self.memo[key] = result
        self.resumed_from.setdefault(id(result), key)
        masked = _masked(state, watch)
        if masked is not None and result.blind_to_content(watch):
            self.insensitive[(masked, watch, signature)] = result

    def record(self, model: str, point: KillPoint, order: int, state: CrashState,
               result: ResumeResult, after_kill: list[str], fresh: bool,
               key: tuple | None = None) -> None:
        if (model, point.id, order) in self.recorded:
            return  # a second driver pass meets states the first one settled
        self.recorded.add((model, point.id, order))
        violations = schedule_violations(self.golden, self.schedule(point), state, result,
                                         after_kill)
        run = self.runs[model]
        verdict = Verdict(point, model, state.persisted, violations, state, result.summary,
                          self.golden, order, earlier=self.earlier,
                          resumed_at=result.first_position)
        if self.earlier:
            depth = run.depth(len(self.earlier) + 1)
            depth.explored += 1
            depth.resumed += fresh
            depth.resume_seconds += result.seconds if fresh else 0.0
            if violations:
                run.deep_failures.append(verdict)
            return
        run.verdicts.append(verdict)
        run.escalated += result.escalated
        self.instances.append((model, point, order, state, result, not violations, key))
        if fresh:
            run.judged += 1
            run.resume_seconds += result.seconds
        else:
            run.reused += 1


def _sweep_replaying(ex: Explorer, sweep: _Sweep, chosen: list[KillPoint], models: list[str],
                     progress, start: Callable[[], World] | None = None) -> None:
    """The plain executor: for each kill point, run the prefix again, kill, resume."""
    for n, point in enumerate(chosen):
        for model in models:
            world, states, after_kill = ex.crash(point, model, start)
            signature, watch = world_signature(world), ex.interposer.last_touched
            for i, state in enumerate(states):
                key, result, _, _ = sweep.known(state, signature, watch)
                fresh = result is None
                if fresh:
                    w = copy.deepcopy(world) if i < len(states) - 1 else world
                    result = _resume_and_judge(ex, sweep.golden, w, state,
                                               sweep.schedule(point), watch, sweep.keep_traces)
                    sweep.learn(key, state, signature, watch, result)
                sweep.record(model, point, i, state, result, after_kill, fresh, key)
        sweep.done_points += 1
        if progress is not None:
            progress(sweep.done_points, len(chosen))


class ForkAt:
    """Tracer policy for the forking executor: at each chosen kill point the driver forks;
    the child dies there (and resumes), the parent goes on to the next point."""

    def __init__(self, pool: "_Pool", boundary: dict[int, KillPoint],
                 torn: dict[int, list[KillPoint]], seal: Callable[[], None]) -> None:
        self.pool, self.boundary, self.torn, self._seal = pool, boundary, torn, seal

    def after(self, tracer: Tracer, event: Event) -> None:
        point = self.boundary.get(event.index)
        if point is not None and self.pool.fork_for([point], None):
            self._seal()
            raise Killed(point.id)

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        points = self.torn.get(tracer.next_index)
        if points and self.pool.fork_for(points, write):
            self._seal()
            return write.torn(self.pool.job[0][1].offset)
        return None


@dataclass(frozen=True)
class Plan:
    """What a run is about to explore (told before its sweep starts)."""

    scenario: str
    kill_points: int  # in the clean run
    explored: int  # of those, the ones this run crashes at (all, or a shard, or --kill-point)
    crash_states: dict[str, int]  # first crash states, per crash model
    crashes: int  # the most crashes in one schedule


class _CountAt:
    """Tracer policy of the counting pass: the crash states each chosen kill point leaves,
    per crash model, without killing anything."""

    def __init__(self, ex: Explorer, boundary: dict[int, KillPoint],
                 torn: dict[int, list[KillPoint]], models: list[str]) -> None:
        self.ex, self.boundary, self.torn, self.models = ex, boundary, torn, models
        self.counts = {m: 0 for m in models}

    def _count(self, snapshot: dict) -> None:
        for model in self.models:
            self.counts[model] += len(_states(self.ex, model, snapshot))

    def after(self, tracer: Tracer, event: Event) -> None:
        if event.index in self.boundary:
            self._count(self.ex.interposer.snapshot())

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        for point in self.torn.get(tracer.next_index, ()):
            self._count({**self.ex.interposer.snapshot(), write.path: write.torn(point.offset)})
        return None


def count_crash_states(ex: Explorer, chosen: list[KillPoint], models: list[str]
                       ) -> dict[str, int]:
    """How many crash states the first crashes at `chosen` leave, per crash model: one clean
    run that computes them at each kill point (so a long run can say up front what it will
    explore)."""
    ex.reset_sandbox()
    policy = _CountAt(ex, *_by_event(chosen), models)
    if any(p.index == 0 for p in chosen):
        policy._count(ex.interposer.snapshot())
    ex.incarnation(ex.new_world(), policy)
    return policy.counts


def _by_event(points: Sequence[KillPoint]) -> tuple[dict[int, KillPoint],
                                                    dict[int, list[KillPoint]]]:
    """Kill points after an event, by its index; kill points inside a write, by the index
    of that write (a driver acts on both as the run goes)."""
    boundary = {p.index: p for p in points if not p.torn and p.index > 0}
    torn: dict[int, list[KillPoint]] = {}
    for p in points:
        if p.torn:
            torn.setdefault(p.index, []).append(p)
    return boundary, torn


def _sweep_forking(ex: Explorer, sweep: _Sweep, chosen: list[KillPoint], models: list[str],
                   workers: int, progress, start: Callable[[], World] | None = None) -> None:
    boundary, torn = _by_event(chosen)
    if any(p.index == 0 for p in chosen):  # before the first event: nothing to fork from
        _sweep_replaying(ex, sweep, [p for p in chosen if p.index == 0], models, None, start)
    revisit = _drive(ex, sweep, models, workers, progress, len(chosen), boundary, torn, False,
                     start)
    if revisit:  # second pass: only the states whose class turned out to read the file
        sweep.done_points -= len(revisit)
        boundary_again, torn_again = _by_event(revisit)
        _drive(ex, sweep, models, workers, progress, len(chosen), boundary_again, torn_again,
               True, start)


def _drive(ex: Explorer, sweep: _Sweep, models, workers, progress, total, boundary, torn,
           no_parking: bool, start: Callable[[], World] | None = None) -> list[KillPoint]:
    """One driver run: the agent runs clean while children fork off at the kill points."""
    import gc

    if start is None:
        ex.reset_sandbox()
        world = ex.new_world()
    else:
        world = start()
    pool = _Pool(ex, sweep, models, world, workers, ex.timeout, total, progress)
    pool.no_parking = no_parking
    # Children share the parent's memory copy-on-write; a garbage collection in a child
    # would touch (and so copy) every page. Freeze what exists now out of the collector
    # (no collection first: with the memos of a pair sweep it costs more than it saves).
    gc.freeze()
    policy = ForkAt(pool, boundary, torn, seal=lambda: (ex.interposer.kill(),
                                                        setattr(world, "sealed", True)))
    try:
        inc = ex.incarnation(world, policy, timed=False)  # the driver: children have limits
        if pool.in_child:  # only a child gets here: it died at its kill point
            pool.child_main(list(ex.interposer.after_kill))
        _compare_traces(sweep.trace, inc.events)
        return pool.wait_all()
    except _WorkerDiedSignal as exc:
        raise WorkerDied(f"{ex.scenario.path}: {exc}") from None
    finally:
        pool.kill_all()
        gc.unfreeze()


class _Pool:
    """Forked children, at most `workers` at a time. Each dies at one kill point (a torn
    write's points go to one child together), resumes each new crash state there and sends
    the results back through a pipe. Deterministic: verdicts are sorted at the end, however
    the children interleave."""

    def __init__(self, ex, sweep, models, world, workers, timeout, total, progress) -> None:
        self.ex, self.sweep, self.models, self.world = ex, sweep, models, world
        self.workers, self.total, self.progress = max(1, workers), total, progress
        self.deadline = None if not timeout else 3 * timeout + 5
        self.children: dict[int, dict] = {}
        self.waiting: dict[tuple, int] = {}  # masked class or exact key -> child pid
        self.in_child = False
        self.job: list = []
        self.parked: list = []  # (entry, signature) waiting for another child's answer
        self.no_parking = False

    # -- parent ---------------------------------------------------------------------------
    def fork_for(self, points: list[KillPoint], write) -> bool:
        """Decide in the parent; fork if some crash state here is new. True in the child."""
        signature = world_signature(self.world)
        watch = write.path if write is not None else self.ex.interposer.last_touched
        base = self.ex.interposer.snapshot()
        job = []
        for point in points:
            snapshot = base if write is None else {**base, write.path: write.torn(point.offset)}
            for model in self.models:
                for i, state in enumerate(_states(self.ex, model, snapshot)):
                    key, result, masked, absent = self.sweep.known(state, signature, watch)
                    entry = (model, point, i, state, key, watch, masked)
                    busy = self.waiting.get(key) or (masked and self.waiting.get(
                        (masked, watch, signature))) or (absent and self.waiting.get(
                            (absent, signature)))
                    if result is not None:
                        self.sweep.record(model, point, i, state, result, [], False, key)
                    elif busy and not self.no_parking:
                        # A child is judging this state or its class: settle it when that
                        # answer is in (or in a second pass, if the class proves sensitive).
                        self.parked.append((entry, signature))
                    else:
                        job.append(entry)
        if not job:
            for _ in points:
                self._done_point()
            return False
        while len(self.children) >= self.workers:
            self._collect(block=True)
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        read_fd, write_fd = _os.pipe()
        pid = _os.fork()
        if pid == 0:  # the child: die here, then resume from what is left
            _os.close(read_fd)
            self.in_child, self.job, self.fd, self.children = True, job, write_fd, {}
            return True
        _os.close(write_fd)
        self.children[pid] = {"fd": read_fd, "buf": bytearray(), "job": job,
                              "points": len(points), "signature": signature,
                              "started": _real_time.real_perf_counter()}
        for entry in job:
            self.waiting[entry[4]] = pid
            if entry[6] is not None:
                self.waiting[(entry[6], entry[5], signature)] = pid
        return False

    def _done_point(self) -> None:
        self.sweep.done_points += 1
        if self.progress is not None:
            self.progress(self.sweep.done_points, self.total)

    def _wait_for(self, pid: int) -> None:
        while pid in self.children:
            self._collect(block=True)

    def _collect(self, block: bool) -> None:
        import pickle
        import select

        while self.children:
            fds = {c["fd"]: pid for pid, c in self.children.items()}
            ready, _, _ = select.select(list(fds), [], [], 0.5 if block else 0)
            now = _real_time.real_perf_counter()
            for pid, child in list(self.children.items()):
                if self.deadline and now - child["started"] > self.deadline \
                        and child["fd"] not in ready:
                    _os.kill(pid, 9)
                    self._finish(pid, None, f"the crash run did not finish within "
                                 f"{self.deadline:g} s and was killed")
            for fd in ready:
                pid = fds[fd]
                if pid not in self.children:
                    continue
                chunk = _os.read(fd, 1 << 16)
                if chunk:
                    self.children[pid]["buf"] += chunk
                    continue
                buf = bytes(self.children[pid]["buf"])
                try:
                    result = pickle.loads(buf) if buf else None
                except Exception:
                    result = None
                self._finish(pid, result, None if result is not None else _DIED)
            if ready or not block:
                return

    def _finish(self, pid: int, result, problem: str | None) -> None:
        child = self.children.pop(pid)
        _os.close(child["fd"])
        try:
            _, status = _os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        if problem is _DIED:
            raise _WorkerDiedSignal(_death(status, child["job"]))
        for key in [k for k, p in self.waiting.items() if p == pid]:
            del self.waiting[key]
        if result is None:
            failure = ResumeResult([Violation("completes_or_escalates", "P5",
                                              problem or "no verdict")], None, None)
            result = {"after_kill": [], "results": [failure] * len(child["job"])}
        for entry, outcome in zip(child["job"], result["results"]):
            model, point, i, state, key, watch, masked = entry
            self.sweep.learn(key, state, child["signature"], watch, outcome)
            self.sweep.record(model, point, i, state, outcome, result["after_kill"], True,
                              key)
        for _ in range(child["points"]):
            self._done_point()

    def wait_all(self) -> list[KillPoint]:
        """Wait for every child; settle parked states; return the kill points whose states
        still need a run of their own (their class turned out to read the file)."""
        while self.children:
            self._collect(block=True)
        again = []
        for entry, signature in self.parked:
            model, point, i, state, key, watch, masked = entry
            _, result, _, _ = self.sweep.known(state, signature, watch)
            if result is not None:
                self.sweep.record(model, point, i, state, result, [], False)
            elif point not in again:
                again.append(point)
        self.parked = []
        return again

    def kill_all(self) -> None:
        if self.in_child:
            return
        for pid, child in list(self.children.items()):
            try:
                _os.kill(pid, 9)
                _os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            _os.close(child["fd"])
        self.children.clear()

    # -- child ----------------------------------------------------------------------------
    def child_main(self, after_kill: list[str]) -> None:
        import pickle

        status = 0
        try:
            self.world.sealed = False
            results, by_class = [], {}
            for n, (model, point, i, state, key, watch, masked) in enumerate(self.job):
                known = by_class.get((masked, watch)) if masked is not None else None
                if known is not None:
                    results.append(known)
                    continue
                w = copy.deepcopy(self.world) if n < len(self.job) - 1 else self.world
                result = _resume_and_judge(self.ex, self.sweep.golden, w, state,
                                           self.sweep.schedule(point), watch,
                                           self.sweep.keep_traces)
                if masked is not None and result.blind_to_content(watch):
                    by_class[(masked, watch)] = result
                results.append(result)
            data = pickle.dumps({"after_kill": after_kill, "results": results})
            view = memoryview(data)
            while view:
                written = _os.write(self.fd, view)
                view = view[written:]
        except BaseException:
            status = 70
        finally:
            _os._exit(status)


_DIED = "the crash run's process died without a verdict"


def _death(status: int, job: list) -> str:
    model, point = job[0][0], job[0][1]
    if _os.WIFSIGNALED(status):
        sig = _os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        how = f"was killed by {name}" + (" (out of memory?)" if sig == signal.SIGKILL
                                         else "")
    elif _os.WIFEXITED(status) and _os.WEXITSTATUS(status) != 70:
        how = f"exited with status {_os.WEXITSTATUS(status)} (did the agent end the process?)"
    else:
        how = "failed inside faultsim before sending its verdicts"
    return (f"the worker judging kill point {point.id} ({model}) {how}; its verdict is "
            "unknown. `--workers 0` runs that kill point in this process "
            f"(add --kill-point {point.id})")


PROBE_VERSION = 999


def version_probe(ex: Explorer, golden: Golden) -> Verdict | None:
    """P4: a checkpoint whose version this code cannot know (a newer release wrote it, then
    a rollback) must be refused loudly and left untouched. Taken from the crash state after
    the second completed turn; skipped when the agent keeps no versioned checkpoint.json."""
    marks = [e.index for e in golden.trace if e.kind == "mark.checkpoint.B"]
    index = marks[min(1, len(marks) - 1)] if marks else len(golden.trace) // 2
    point = KillPoint(index, None, "version-probe", "probe-unknown-version",
                      f"#{index}, every checkpoint.json rewritten with version "
                      f"{PROBE_VERSION}")
    world, states, _ = ex.crash(point, "process")
    files = states[0].as_dict()
    changed = {}
    for path, data in files.items():
        if path.endswith("checkpoint.json") and data:
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            if isinstance(doc, dict) and "version" in doc:
                doc["version"] = PROBE_VERSION
                changed[path] = json.dumps(doc).encode()
    if not changed:
        return None
    state = CrashState.of("process", f"checkpoint version set to {PROBE_VERSION}",
                          {**files, **changed})
    effects_before = len(world.ledger.applied())
    asked_before = sum(1 for q in world.model.requests if q.ok)
    run = ex.resume(world, state, [point])
    problems = []
    if run.error is None:
        problems.append(f"the agent resumed from a checkpoint of unknown version "
                        f"{PROBE_VERSION} instead of refusing it (it ended "
                        f"{run.outcome.status if run.outcome else 'without an outcome'})")
    overwritten = [p for p, d in changed.items() if run.final.get(p) != d]
    if overwritten:
        problems.append(f"{overwritten[0]} was overwritten while being refused or parsed")
    applied = len(world.ledger.applied()) - effects_before
    asked = sum(1 for q in world.model.requests if q.ok) - asked_before
    if problems and (applied or asked):
        problems.append(f"{applied} effect(s) applied and {asked} model turn(s) asked on "
                        "the strength of it")
    violations = [Violation("unknown_version_refused", "P4", "; ".join(problems))] \
        if problems else []
    return Verdict(point, "process", "a checkpoint from a future release", violations, state,
                   ResumeSummary.of(run) if violations else None, golden, 0)


def _first_crashes(sweep: _Sweep, model: str, position: dict[str, int]) -> list[tuple]:
    """The first crashes to explore further: one per class of equal (or equivalent) crash
    states that passed, with how many first crashes the class stands for. The class is
    represented by the earliest state equal to the one actually resumed (its trace is the
    resumed run's course), else by its earliest state (whose course is then run afresh)."""
    classes: dict[int, list] = {}
    for model_, point, order, state, result, ok, key in sweep.instances:
        if model_ == model and ok:
            exact = key is not None and key == sweep.resumed_from.get(id(result))
            classes.setdefault(id(result), []).append(
                (not exact, position[point.id], order, point, state, result))
    reps = []
    for members in classes.values():
        members.sort(key=lambda m: m[:3])
        inexact, _, order, point, state, result = members[0]
        reps.append((point, order, state, result if not inexact else None, len(members)))
    reps.sort(key=lambda r: (position[r[0].id], r[1]))
    return reps


def _sweep_after_first(ex: Explorer, golden: Golden, runs: dict[str, ModelRun], model: str,
                      point: KillPoint, order: int, state: CrashState,
                      result: ResumeResult | None, workers: int, memo: dict,
                      insensitive: dict, equivalences: bool) -> tuple:
    """Crash at `point` again, then kill the run resumed from `state` at every kill point of
    its own course; the verdicts go to `runs[model]` (its depth-2 figures and failures).
    `result` is this very state's resumed run (its trace is the course), or None: then the
    course is learned afresh (an equivalent state was resumed, not this one). Returns the
    course. `memo`/`insensitive` share second crash states' verdicts between calls."""
    import os

    world, states, _ = ex.crash(point, model)
    if order >= len(states) or states[order].digest() != state.digest():
        raise NonDeterminismError(f"{point.id}: the crash state differs from the one "
                                  "judged before; the agent is not deterministic")
    pristine = copy.deepcopy(world)
    if result is not None and result.events is not None:
        course = tuple(result.events)
    else:
        w = copy.deepcopy(pristine)
        ex.prepare(w, state)
        course = tuple(ex.incarnation(w).events)

    def start() -> World:
        w = copy.deepcopy(pristine)
        ex.prepare(w, state)
        return w

    sub = _Sweep(golden, runs, memo=memo, insensitive=insensitive, equivalences=equivalences,
                 earlier=(Earlier(point, order, state.persisted, course),))
    points = kill_points(course)
    if workers > 0 and hasattr(os, "fork"):
        _sweep_forking(ex, sub, points, [model], workers, None, start)
    else:
        _sweep_replaying(ex, sub, points, [model], None, start)
    return course


def _sweep_pairs(ex: Explorer, top: _Sweep, models: list[str], position: dict[str, int],
                 workers: int, progress) -> None:
    """Every schedule of two crashes: for each first crash state (one per class), the
    resumed run is killed at every kill point of its own course (its reconciliation, its
    checkpoint writes ...), and each crash state that leaves is resumed and judged.

    Pruning: a first crash whose state equals (or is equivalent to) one already explored
    gives the same resumed run, so its pairs are counted, not run again; a second crash
    state equal to one already judged (after any first crash) shares its verdict.
    """
    memo: dict = {}
    insensitive: dict = {}
    for model in models:
        run = top.runs[model]
        stats = run.depth(2)
        started = _real_time.real_perf_counter()
        reps = _first_crashes(top, model, position)
        if progress is not None:
            progress(0, len(reps), stage=f"pairs ({model})")
        for n, (point, order, state, result, count) in enumerate(reps):
            before = stats.explored
            _sweep_after_first(ex, top.golden, top.runs, model, point, order, state, result,
                              workers, memo, insensitive, top.equivalences)
            stats.total += count * (stats.explored - before)
            if progress is not None:
                progress(n + 1, len(reps), stage=f"pairs ({model})")
        stats.seconds += _real_time.real_perf_counter() - started
        order_of = {id(v): i for i, v in enumerate(run.deep_failures)}
        run.deep_failures.sort(key=lambda v: (
            [(position.get(e.point.id, -1) if k == 0 else e.point.index, e.order)
             for k, e in enumerate(v.earlier)],
            v.kill_point.index, v.kill_point.offset or 0, v.order, order_of[id(v)]))


def explore(make_agent: Callable[[AgentEnv], Any], scenario: Scenario, *,
            crash_model: str | Iterable[str] | None = None, agent_name: str | None = None,
            only: Callable[[KillPoint], bool] | None = None, timeout: float | None = 30.0,
            seed: str = "0", workers: int | None = None, equivalences: bool = True,
            crashes: int | None = None, search: int | None = None,
            search_seconds: float | None = None,
            database: Any = None, shard: tuple[int, int] | None = None,
            progress: Callable[..., None] | None = None,
            plan: Callable[["Plan"], None] | None = None) -> Report:
    """Crash `make_agent`'s agent at every kill point of `scenario`, resume it, judge it.

    `crash_model` ("process", "power", "all" or a list) and `crashes` default to the
    scenario's fault profile (process and 2 when it has none). `crashes=2` also kills each resumed run at every kill point of its own
    course (crashes during recovery), exhaustively, with pruning of equal crash states;
    `crashes=1` explores single crashes only. Longer schedules
    (`crashes` > 2) are searched with hypothesis: `search` examples per crash model
    (default 200), at most `search_seconds`, shrunk to the fewest crashes and earliest
    points. `search=N` with `crashes=2` searches the pairs instead of enumerating them
    (for scenarios too long to enumerate). `database` is a hypothesis example database
    for the search. `only` narrows the first crash's kill points (a replay);
    `shard=(i, n)` keeps the kill points whose position is i - 1 modulo n (a deterministic
    split for CI matrices: the n shards partition the kill points; the version probe and
    the search run in shard 1). `workers` is how many crash runs go at once (default: one
    per core; 0 runs them one after another in this process, replaying the prefix each
    time); `equivalences=False` resumes every distinct crash state instead of sharing
    verdicts between states a resumed run could not tell apart (slower; the verdicts are
    the same, which a test checks); `progress(done, total, stage=...)` is
    called as kill points are judged. `plan(Plan)`, when given, is told before the sweep
    how many kill points and first crash states there are (one extra clean run counts
    them).
    """
    import os

    if crash_model is None:
        crash_model = list(scenario.profile.crash_models)
    if crashes is None:
        crashes = scenario.profile.crashes
    if crashes < 1:
        raise ValueError(f"crashes must be at least 1, not {crashes}")
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"shard {shard[0]}/{shard[1]}: expected 1 <= i <= n")
    name = agent_name or getattr(make_agent, "__module__", "agent")
    models = _models(crash_model)
    if workers is None:
        workers = os.cpu_count() or 1
    report = Report()
    started = _real_time.real_perf_counter()
    with Explorer(make_agent, scenario, agent_name=name, timeout=timeout, seed=seed) as ex:
        golden = ex.golden()
        points = kill_points(golden.trace)
        chosen = [p for n, p in enumerate(points) if (only is None or only(p)) and
                  (shard is None or n % shard[1] == shard[0] - 1)]
        runs = {m: ModelRun(scenario=scenario, agent=name, crash_model=m, kill_points=points,
                            explored=chosen, seed=seed, crashes=crashes) for m in models}
        sweep = _Sweep(golden, runs, equivalences=equivalences, keep_traces=crashes >= 2)
        if plan is not None:
            plan(Plan(scenario.id, len(points), len(chosen),
                      count_crash_states(ex, chosen, models), crashes))
        golden_seconds = _real_time.real_perf_counter() - started
        sweep_started = _real_time.real_perf_counter()
        if workers > 0 and hasattr(os, "fork"):
            _sweep_forking(ex, sweep, chosen, models, workers, progress)
        else:
            _sweep_replaying(ex, sweep, chosen, models, progress)
        report.sweep_seconds += _real_time.real_perf_counter() - sweep_started
        report.golden_seconds += golden_seconds
        position = {p.id: n for n, p in enumerate(chosen)}
        if crashes >= 2 and not (search and crashes == 2):
            _sweep_pairs(ex, sweep, models, position, workers, progress)
        probe = version_probe(ex, golden) if only is None and (shard is None or
                                                               shard[0] == 1) else None
        seconds = _real_time.real_perf_counter() - started
        first = runs[models[0]]
        if probe is not None:
            first.probes.append(probe)
        for run in runs.values():
            run.verdicts.sort(key=lambda v: (position[v.kill_point.id], v.order))
            run.seconds = seconds * len(run.verdicts) / max(1, sum(len(r.verdicts)
                                                                  for r in runs.values()))
            report.runs.append(run)
    exhaustive = 1 if search and crashes == 2 else min(crashes, 2)
    if crashes > exhaustive and only is None and (shard is None or shard[0] == 1):
        _search(make_agent, scenario, report, name, timeout, seed, exhaustive + 1, crashes,
                search or 200, search_seconds, database, progress)
    return report


def survey(make_agent: Callable[[AgentEnv], Any], scenario: Scenario, *,
           agent_name: str = "agent", timeout: float | None = 30.0, seed: str = "0"
           ) -> tuple[list[KillPoint], dict[str, int]]:
    """The clean run's kill points and the first crash states they leave under each crash
    model, without crashing anything (`faultsim list`)."""
    with Explorer(make_agent, scenario, agent_name=agent_name, timeout=timeout,
                  seed=seed) as ex:
        points = kill_points(ex.golden().trace)
        return points, count_crash_states(ex, points, list(CRASH_MODELS))


def _search(make_agent, scenario, report: Report, name: str, timeout, seed: str,
            min_crashes: int, max_crashes: int, examples: int, seconds, database,
            progress) -> None:
    """Schedules beyond the exhaustive sweep, searched with hypothesis, per crash model."""
    from .schedule import Session
    from .schedule_search import search

    for run in report.runs:
        if progress is not None:
            progress(0, 1, stage=f"search ({run.crash_model})")
        with Session(make_agent, scenario, crash_model=run.crash_model, seed=seed,
                     timeout=timeout, agent_name=name) as session:
            found = search(session, max_crashes=max_crashes, min_crashes=min_crashes,
                           examples=examples, seconds=seconds, seed=seed, database=database)
        stats = run.depth(max_crashes)
        stats.searched += found.tried
        stats.seconds += found.seconds
        if found.failure is not None:
            verdict = found.failure.verdict
            (run.deep_failures if verdict.earlier else run.verdicts).append(verdict)
        if progress is not None:
            progress(1, 1, stage=f"search ({run.crash_model})")
