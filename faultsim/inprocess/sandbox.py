"""The in-process sandbox: incarnations of one agent on one scenario inside one pyfakefs
file system, with the interposer that traces it and kills it at a kill point, and one
resumed run judged by the oracle."""
from __future__ import annotations

import os
import site
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not
from pyfakefs.fake_filesystem_unittest import Patcher

from ..agent import AgentEnv, contract_broken, outcome_of, run_incarnation
from ..interpose import finality
from ..core.crashmodel import CrashState, power_states, process_state
from ..errors import KillDidNotLand, StoreNeedsSubprocess
from ..interpose.determinism import seeded
from ..model import sdk
from . import diagnose
from .after_convergence import tail_of
from .convergence import Course, Recorder, Watch, complete, course_events, tracked
from . import cpython, leads, unwind
from .fs import FsInterposer, install
from ..killpoints import KillPoint
from ..judge.oracle import RESUME_GUARDS, CrashRun, Golden, judge
from ..pipeline.golden import CleanRun, golden_checked, routed_only
from ..pipeline.incarnation import (AUTO, Incarnation, IncarnationTimeout, captured_output,
                                    clean_hang, clean_limit, failure_details, held_seconds,
                                    marks, not_unwound, resumed_limit, time_limit,
                                    traced_world)
from ..pipeline.sweep import ResumeResult
from ..reports.report import ResumeSummary
from ..pipeline.runner import make_env
from ..reports.shortcuts import KEPT, NO_CLEAN_STATE, NO_LEAD_STATE
from ..scenario import Scenario
from ..core.trace import Event, Killed, Tracer, WorldSealed
from ..world import World
from ..world.clock import freeze


SANDBOX = "/faultsim/sandbox"


class KillAt:
    """Tracer policy: kill at one kill point."""

    def __init__(self, point: KillPoint, seal: Callable[[], None], read: bool = False
                 ) -> None:
        self.point, self._seal = point, seal
        self.landed = False
        # `read` (a first crash): why the kill's aftermath is not read from the code (None:
        # it is), from the frame the forking executor reads (ForkAt): `shortcuts`' unwind.
        # Not read for a kill during recovery: the report counts first crashes only.
        self.read, self.loud = read, unwind.NO_FRAME

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.point.offset is None and event.index == self.point.index:
            self.landed = True
            if self.read:
                self.loud = unwind.refusal_here(sys._getframe(1))  # emit's call
            self._seal()
            raise finality.killed(Killed(self.point.id))

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        if self.point.offset is not None and tracer.next_index == self.point.index:
            self.landed = True
            if self.read:
                self.loud = unwind.refusal_here(sys._getframe(2))  # the write's hook (fs.py)
            self._seal()
            return write.torn(self.point.offset)
        return None


@dataclass(frozen=True)
class Crashed:
    """One incarnation run into a kill point (`Explorer.crash`)."""

    world: World  # sealed at the kill; unsealed again for the resumed run
    states: list[CrashState]  # the crash states the crash model allows, in order
    after_kill: list[str]  # how the killed incarnation went on working (finality.py)
    # why the kill's aftermath is not read from the code (None: it is, unwind.py); at a
    # point before the first event no kill is raised, and the sweep counts none
    loud: str | None = unwind.NO_FRAME


class Explorer:
    """Runs incarnations of one agent on one scenario inside one pyfakefs sandbox."""

    def __init__(self, make_agent: Callable[[AgentEnv], Any], scenario: Scenario, *,
                 agent_name: str = "agent", timeout: float | str | None = AUTO,
                 seed: str = "0") -> None:
        self.make_agent = make_agent
        self.scenario = scenario
        self.agent_name = agent_name
        self.asked_timeout = timeout
        self.timeout = clean_limit(timeout)  # derived from the clean runs by golden()
        self.seed = seed
        self.clean_seconds: float | None = None  # the slower clean incarnation (golden())
        # its CPU: what the forecast weighs, as wall time stretches on a busy machine
        self.clean_cpu_seconds: float | None = None
        self._patcher: Patcher | None = None
        self._freezer = None
        # Convergence (faultsim.inprocess.convergence): the clean run's course, recorded by
        # golden(), that resumed runs are cut against; `convergence_off` says why none is.
        self.convergence = True
        self.course: Course | None = None
        self.convergence_off: str | None = None
        # --horizon (convergence.py, "The horizon"): resumed runs cut past their `horizon`-th
        # model request against the clean run's course (`horizon_course`, recorded by
        # golden() on any interpreter); None: no horizon
        self.horizon: int | None = None
        self.horizon_course: Course | None = None
        # the runs kept for a second crash (the pair stage's first crashes) are cut at the
        # horizon too (representative pairs only: explore.py; convergence.py, "The horizon")
        self.horizon_kept = False
        self.last_cut: tuple | None = None  # (Course, Cut) of the last resume, if it was cut
        self.last_blind = False  # the last resume drew no random number, read no incarnation
        # Convergence with earlier resumed runs (faultsim.inprocess.leads): their
        # remainders after their first model request, by the state there; the lead the last
        # resume made (None: it made none) and the one it was cut against.
        self.leads: dict = {}
        self.lead_contents: dict = {}  # their final files' bytes, one object per content
        self.last_lead: Any = None
        self.last_met: Any = None
        # why the last resume was not cut (clean run, lead), each None where it was
        self.last_refused: tuple = (None, None)
        self.board: Any = None  # in a forked child: leads shared while they run (board.py)
        # kill point id -> how its kill did not unwind in time (pipeline.incarnation's
        # `not_unwound`): its states were judged all the same, as the kill left them
        self.unwound: dict[str, str] = {}

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
        sdk.load()  # and refuses an SDK the fake Claude does not serve

        install()  # before the Patcher, so `from os import fsync` gets the hooked one
        readable = readable_real_dirs()  # on the real disk, before pyfakefs replaces os
        self._patcher = Patcher()
        self._patcher.setUp()
        # pyfakefs lets its own modules reach the real disk by inspecting the call stack
        # (traceback.extract_stack) on every open(): a third of an agent's open() cost.
        # Nothing here asks pyfakefs to read real files, so that check is switched off.
        for module in self._patcher.fake_modules.values():
            if isinstance(getattr(module, "skip_names", None), set):
                module.skip_names = set()
        fs = self._patcher.fs
        for path in readable:
            fs.add_real_directory(path, read_only=True, lazy_read=True)
        fs.create_dir(SANDBOX)
        self._open0 = (list(fs.open_files), list(fs._free_fd_heap))
        self.tracer = Tracer()
        self.interposer = FsInterposer(fs, SANDBOX, self.tracer)
        self._freezer = freeze(self.scenario.start_time.replace("+00:00", ""))
        try:
            self._factory = self._freezer.start()
        except BaseException:  # half started (world/clock.py says how): undo all of it
            self._freezer.stop()
            self._freezer = None
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._freezer is not None:
                self._freezer.stop()
        finally:  # whatever the clock's stop raised, the fake file system comes down
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
                    timed: bool = True, watcher: Any = None) -> Incarnation:
        tracer, ip = self.tracer, self.interposer
        tracer.events, tracer.policy = [], policy
        result = Incarnation()
        world.begin_incarnation()
        on_world, mark = traced_world(tracer, self.scenario, world, result)
        env = make_env(self.scenario, world, Path(SANDBOX), mark)
        unsubscribe = world.subscribe(on_world)
        if watcher is not None:  # sees each model request first (convergence)
            watcher.result = result
            world.model.before_request = watcher
        life = finality.begin()
        ended: BaseException | None = None  # what run() raised (None: it returned)
        try:
            with ip, seeded(f"{self.seed}:{world.incarnation}"), \
                    world.model.serving_new_clients(), captured_output() as output, \
                    time_limit(self.timeout if timed else None, world):
                result.began = marks()
                try:
                    result.outcome = outcome_of(run_incarnation(self.make_agent, env))
                    if watcher is not None and hasattr(watcher, "end"):
                        watcher.end()  # still inside the seeded streams
                except (Killed, WorldSealed) as exc:
                    ended = exc
                except BaseExceptionGroup as exc:  # a task group the kill ended
                    if not finality.handling_kill(exc):
                        raise
                    ended = exc
                except IncarnationTimeout as exc:
                    ended = exc
                    result.timed_out, result.error = True, str(exc)
                    result.details = failure_details(exc, output.getvalue())
                except Exception as exc:
                    ended = exc
                    result.error = f"{type(exc).__name__}: {exc}"
                    result.contract = contract_broken(exc)
                    result.details = failure_details(exc, output.getvalue())
                result.ended = marks()  # equal to `began`: it is blind (Incarnation.blind)
            # outside the time limit: the grace for its threads is faultsim's own wait
            finality.end(life, ip.killed or world.sealed, ended)
        finally:
            if not life.over:  # left by an exception of faultsim's own
                finality.end(life, True, None)
            unsubscribe()
            world.model.before_request = None  # never copied with the world
            tracer.policy = None
            fs = self.interposer.fs
            fs.open_files[:], fs._free_fd_heap[:] = self._open0[0], self._open0[1]
        result.killed = ip.killed or world.sealed
        result.went_on, result.strays = life.went_on, life.strays
        if result.killed and isinstance(ended, IncarnationTimeout):  # the kill held up
            result.unwound = not_unwound(life.kill, ended.seconds, ended.stuck)
        if result.killed:
            result.outcome = None
            result.error = None
        result.events = tracer.events
        return result

    def reset_sandbox(self, state: dict | None = None) -> None:
        self.interposer.restore(state or {})
        self.interposer.escapes = []

    # -- the golden run -------------------------------------------------------------------
    def golden(self, every_service: bool = True) -> Golden:
        took: list[float] = []
        cpu: list[float] = []
        recorders: list[Recorder] = []
        strays: list[str] = []

        def clean_run(n: int) -> CleanRun:
            self.reset_sandbox()
            world = self.new_world()
            self.timeout = clean_limit(self.asked_timeout)
            started, cpu_started = _real_time.real_perf_counter(), time.process_time()
            diagnose.install()  # FAULTSIM_CONVERGENCE_DIAG: why runs do not converge
            recorder = Recorder(self, world, memory=self.convergence,
                                horizon=self.horizon is not None) \
                if self.convergence or self.horizon is not None else None
            if recorder is not None:
                recorders.append(recorder)
                self.interposer.start_tracking(None)
            try:
                held_before = held_seconds()
                inc = self.incarnation(world, watcher=recorder)
                if inc.timed_out:  # whose time it was (faultsim's own work is not counted)
                    inc.error = clean_hang(inc.error, held_seconds() - held_before)
            finally:
                self.interposer.stop_tracking()
            strays.extend(inc.strays)
            took.append(_real_time.real_perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            files = self.interposer.snapshot()
            return CleanRun(inc.outcome, inc.error, inc.events, (world, files),
                            details=inc.details, world=world, files=files,
                            escapes=list(self.interposer.escapes), contract=inc.contract)

        first = golden_checked(self.scenario, clean_run, SANDBOX)
        self.timeout = resumed_limit(self.asked_timeout, took)
        self.clean_seconds = max(took)  # the slower clean incarnation (the plan's line)
        self.clean_cpu_seconds = max(cpu)  # and its CPU (the forecast)
        world, final = first.kept
        self.course, self.convergence_off, self.horizon_course = None, None, None
        if recorders and len(recorders[0].keys) == len(recorders[1].keys):
            course = recorders[0].course  # the clean run's course, whatever cuts it serves
            course.world, course.final, course.outcome = world, dict(final), first.outcome
            course.trace = list(first.events)
            # a horizon cut takes the remainder as given: it needs the course, not equal
            # memories (the two clean runs made the same requests, the golden guard says)
            self.horizon_course = course if self.horizon is not None else None
        if not self.convergence:
            self.convergence_off = "switched off (convergence=False)"
        elif unread := cpython.unknown():  # frames and bytecode not read here: no cut
            self.convergence_off = unread
        elif strays:
            self.convergence_off = "the clean run left threads working after run() returned"
        elif recorders[0].keys != recorders[1].keys:
            n = next(i for i, (a, b) in enumerate(zip(recorders[0].keys, recorders[1].keys))
                     if a != b) if len(recorders[0].keys) == len(recorders[1].keys) else None
            self.convergence_off = (
                "the two clean runs were in different states at model request "
                f"{n + 1} (the agent's memory or files vary between runs)" if n is not None
                else "the two clean runs made different numbers of model requests")
        else:
            self.course = recorders[0].course
        if every_service:
            routed_only(self.scenario, world, first.outcome)
        return Golden.of(first.outcome, world, final, first.events, self.scenario.checkpoint,
                         self.scenario.profile.torn_cuts)

    # -- one crash run --------------------------------------------------------------------
    def crash(self, point: KillPoint, model: str, start: Callable[[], World] | None = None
              ) -> Crashed:
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
                                                 setattr(world, "sealed", True)),
                            read=start is None)
            inc = self.incarnation(world, policy)
            if not policy.landed:
                raise KillDidNotLand(f"{point.id} never came: the "
                                     f"{'first' if start is None else 'resumed'} incarnation "
                                     f"{'ended with ' + (inc.error or 'an outcome')}; the "
                                     "agent is not deterministic across runs")
        elif start is not None:
            world.begin_incarnation()  # a restart killed before its first event still began
        if point.index > 0 and inc.unwound:
            self.unwound.setdefault(point.id, inc.unwound)
        states = crash_states(self, model, self.interposer.snapshot())
        world.sealed = False
        return Crashed(world, states, [inc.went_on] if point.index > 0 and inc.went_on
                       else [], policy.loud if point.index > 0 else unwind.NO_FRAME)

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
        self.use_world(world)
        if self.scenario.profile.downtime:
            world.clock.advance(self.scenario.profile.downtime)

    def resume(self, world: World, state: CrashState, points: list[KillPoint],
               converge: bool = False, lead: bool = False, horizon: bool = False
               ) -> CrashRun:
        """The resumed run from `state`, judged as a CrashRun. `converge`: stop it where it
        reaches the clean run's state and complete it from the clean run's remainder
        (faultsim.inprocess.convergence; its soundness is argued there). `lead`: also where
        it reaches an earlier resumed run's state at that run's first request, and let it
        lead later ones (faultsim.inprocess.leads). `horizon`: also past the explorer's
        horizon (--horizon), at its first request equal to one the clean run made."""
        self.prepare(world, state)
        self.last_cut, self.last_lead, self.last_met = None, None, None
        course = self.course if converge and self.convergence_off is None else None
        beyond = self.horizon if horizon and self.horizon_course is not None else None
        watch = Watch(self, world, course or self.horizon_course, None,
                      self.leads if lead and course is not None else None,
                      exact=course is not None, horizon=beyond) \
            if course is not None or beyond is not None else None
        course = course or (self.horizon_course if beyond is not None else None)
        try:
            return self._resumed(world, state, points, course, watch)
        finally:
            self.last_refused = refused(self, converge, lead, watch)
            if watch is not None and watch.claimed is not None:
                # whichever way the run ended: the runs waiting on its state go on
                self.board.publish(watch.claimed, self.last_lead)

    def _resumed(self, world: World, state: CrashState, points: list[KillPoint],
                 course: Any, watch: Any) -> CrashRun:
        inc = self.incarnation(world, watcher=watch)
        self.last_blind = inc.blind
        if watch is not None and watch.lead is not None:
            cut, met = watch.cut, watch.lead
            first = leads.complete(met, cut, world, self.scenario.script.tag)
            world.sealed = False
            self.last_met = (met, cut)
            return CrashRun(points, state, world, outcome=met.outcome, error=None,
                            timed_out=False, final=dict(met.final),
                            escapes=list(cut.escapes), strays=[],
                            resume_positions=[first] if first is not None else [],
                            events=inc.events)
        if watch is not None and watch.start and watch.cut is None:
            # its first touches, split at its first request to be a lead's, made whole
            content, presence, listed = watch.tracking()
            after = (self.interposer.first_content, self.interposer.first_presence,
                     self.interposer.listed)
            self.interposer.first_content, self.interposer.first_presence = content, presence
            self.interposer.listed = listed
            self.last_lead = leads.lead_of(watch.start, world, after,
                                           self.interposer.snapshot(), inc,
                                           list(self.interposer.escapes), watch.clean_why)
        if watch is not None and watch.cut is not None:
            cut = watch.cut
            first = complete(course, cut, world, self.scenario.script.tag)
            world.sealed = False
            self.last_cut = (course, cut)
            return CrashRun(points, state, world, outcome=course.outcome, error=None,
                            timed_out=False, final=dict(course.final),
                            escapes=list(cut.escapes), strays=[],
                            resume_positions=[first] if first is not None else [],
                            events=inc.events)
        return CrashRun(points, state, world, outcome=inc.outcome, error=inc.error,
                        timed_out=inc.timed_out, final=self.interposer.snapshot(),
                        escapes=list(self.interposer.escapes), strays=list(inc.strays),
                        resume_positions=[inc.first_position] if inc.first_position is not None
                        else [], events=inc.events)


def refused(ex: Explorer, converge: bool, lead: bool, watch: Any) -> tuple:
    """Why the last resumed run was not cut against the clean run, and why not against an
    earlier resumed run: its first reason each (None where it was cut so), for the
    report's `shortcuts` block (faultsim.reports.shortcuts)."""
    if watch is None or not watch.exact:  # none, or a horizon's only: no exact cut tried
        off = ex.convergence_off or "not asked for this resumed run"
        return off, off
    # a run cut at the horizon (--horizon) did not meet the clean run's state
    at_horizon = watch.cut is not None and watch.cut.horizon
    clean = None if watch.cut is not None and watch.lead is None and not at_horizon else \
        watch.clean_why or NO_CLEAN_STATE
    if watch.cut is not None:  # cut (against the clean run or a lead): no lead refused
        return clean, None
    if not lead:
        return clean, KEPT
    return clean, watch.lead_why or NO_LEAD_STATE


def unwound_notes(unwound: dict[str, str], limit: float | None) -> list[str]:
    """The summary's lines for the kill points whose kill did not unwind within the time
    limit (`Explorer.unwound`): each cost the limit, and was judged as the kill left it."""
    if not unwound:
        return []
    first = min(unwound)  # the same line on any worker count
    return [f"{len(unwound)} kill point(s) waited out the time limit ({limit or 0:g} s) "
            f"after their kill, e.g. {first}: {unwound[first]}; their states were judged as "
            "the kill left them"]


def readable_real_dirs() -> list[str]:
    """The real directories an agent reads as it would outside faultsim: the standard
    library, site-packages and every folder on `sys.path` (the agent's own project, an
    editable install). A framework imported inside `run()` lists and reads its own data
    files there (jsonschema its bundled schemas). Passed through read-only and listed only
    when first used (pyfakefs `add_real_directory(lazy_read=True)`); a write there is
    refused as any write outside the sandbox is, so a crash state is still only the
    sandbox. The outermost of nested folders is enough; `/` is never passed through.

    Also the folder of every package already imported: an editable install (faultsim's
    own, a user's library) is found by an import hook, not through `sys.path`, and a lazy
    attribute of such a package (PEP 562: faultsim's public names, 3.13's unittest) may
    import a module of it under the fake file system (freezegun reads every attribute of
    every module as it starts)."""
    paths = sysconfig.get_paths()
    found = [paths[n] for n in ("stdlib", "platstdlib", "purelib", "platlib")
             if paths.get(n)] + site.getsitepackages() + [site.getusersitepackages()]
    found += [p or os.getcwd() for p in sys.path if isinstance(p, str)]
    found += [p for name, module in list(sys.modules.items()) if "." not in name
              for p in (getattr(module, "__path__", None) or ()) if isinstance(p, str)]
    dirs: list[str] = []
    for path in sorted({os.path.realpath(p) for p in found}, key=len):
        if path != "/" and os.path.isdir(path) and not any(
                path.startswith(d + "/") for d in dirs):
            dirs.append(path)
    return dirs


def crash_states(ex: Explorer, model: str, snapshot: dict) -> list[CrashState]:
    if model == "process":
        return process_state(snapshot)
    return power_states(snapshot, ex.interposer.inodes(), ex.interposer.durability,
                        powersafe=ex.scenario.profile.powersafe_overwrite)


def resume_and_judge(ex: Explorer, golden: Golden, world: World, state: CrashState,
                     schedule: list[KillPoint], watch: str | None,
                     keep_trace: bool = False, keep_tail: bool = False) -> ResumeResult:
    """Resume `state` in `world` and judge the run. `keep_trace`: a further crash will be
    tried in it (its course and tail are kept, it meets the clean run only); `keep_tail`:
    its tail is kept for composing later schedules' verdicts
    (faultsim.inprocess.search_after_convergence)."""
    ip = ex.interposer
    started = _real_time.real_perf_counter()
    before = (len(world.ledger.entries), len(world.model.requests), len(world.unrouted),
              len(world.processes))
    ip.start_tracking(watch)
    try:
        # a run whose trace is kept meets the clean run only (faultsim.inprocess.leads),
        # and is cut at the horizon only where that is carried to the pair stage
        crash_run = ex.resume(world, state, schedule, converge=True, lead=not keep_trace,
                              horizon=not keep_trace or ex.horizon_kept)
    finally:
        ip.stop_tracking()
    violations = judge(golden, crash_run, RESUME_GUARDS)
    first = crash_run.resume_positions[0] if crash_run.resume_positions else None
    events, meets, tail = None, None, None
    lead = ex.last_lead
    if lead is not None:  # later runs of this process may meet it; the parent learns it
        leads.learn(ex.leads, ex.lead_contents, lead)
    if ex.last_met is not None:
        content, presence, listed = leads.tracked(*ex.last_met)
    elif ex.last_cut is not None:
        content, presence, listed = tracked(*ex.last_cut)
    else:
        content, presence, listed = (dict(ip.first_content), dict(ip.first_presence),
                                     frozenset(ip.listed))
    if keep_trace:  # a further crash will be tried in this run: its course, and for the
        # pair stage where it met the clean run and what it added to the world
        events = crash_run.events
        if ex.last_cut is not None:
            course, cut = ex.last_cut
            # the course it would have had: the pair stage's driver runs it in full and
            # checks its trace against this
            events = course_events(course, cut, events)
            # the third item: cut at the horizon, not met (after_convergence.Shortcut)
            meets = (cut.events, course.points[cut.at].events, cut.horizon)
    if keep_trace or keep_tail:
        # blind only if its remainder is too. Cut against the clean run: the clean run's
        # draws nothing there (convergence.usable). Cut against an earlier resumed run (a
        # lead): what the run would have been had it gone on, its stretch up to the cut
        # then the lead's remainder (leads.py), not `last_blind` (the cut incarnation's):
        # whether a run is cut against a lead or goes on depends on which sibling got there
        # first, and a tail that is reusable one way and not the other made the pair
        # stage's composed and resumed counts depend on the load (issue 54)
        blind = ex.last_blind
        if ex.last_met is not None:
            met, cut = ex.last_met
            blind = cut.blind and met.blind
        tail = tail_of(crash_run, before, blind)
    return ResumeResult(violations, ResumeSummary.of(crash_run) if violations else None,
                        first, _real_time.real_perf_counter() - started,
                        content, presence, listed, events,
                        crash_run.outcome is not None
                        and crash_run.outcome.status == "escalated",
                        converged=ex.last_cut is not None and not ex.last_cut[1].horizon,
                        at_horizon=ex.last_cut is not None and ex.last_cut[1].horizon,
                        meets=meets, tail=tail,
                        met=ex.last_met is not None, lead=lead, refused=ex.last_refused)
