"""The `pause` crash model, in process: the incarnation that was not dead (issue 55).

At a kill point the incarnation is *frozen*, not killed; the next incarnation starts on the
same workdir and world (after the profile's downtime) and runs; the frozen one is woken at
a chosen point of the new one's course and runs on until it ends. A *pause schedule* is
(the pause point, the wake point). Wake points enumerated, for each pause point:

- `request`: right before the new incarnation's first model request is answered;
- `save N`: right after the new incarnation's N-th checkpoint save (an `fs.rename`,
  `fs.write` or `fs.truncate` of a file the scenario's `[checkpoint]` names), every N;
- `end`: after the new incarnation's run() ended.

Not enumerated: any other instant (between two effects of the new incarnation, inside a
model request, a wake before the new incarnation made any request or save), more than one
pause per schedule, a pause of the new incarnation, and saves to a Redis or SQLite store
(their writes are no file events here). Pause points are the clean run's boundary kill
points; a torn point (inside a write) is none: a process stopped by SIGSTOP is stopped
between two system calls, and a write to a regular file is one.

How both incarnations live in one process: each runs in a thread of its own, and the two
never run at the same moment. The driver (the calling thread) hands a baton: the first
incarnation runs alone into the pause point and blocks there; the second runs alone into
its wake point and blocks there; the first runs alone to its end; then the second runs on
alone. A frozen process executes nothing, and a blocked thread executes nothing either, so
each instant of this run is an instant of the two real processes under SIGSTOP/SIGCONT,
and the interleaving is fixed by the schedule alone: the same schedule gives the same run
on any machine (no scheduler choice is left: exactly one thread is runnable). What is
shared is what two real processes on one host share: the files (one pyfakefs tree) and the
world (its services, ledger, model, clock). What is not the same as two processes: the
process-wide random stream and the standard streams are one (an incarnation's draws after
waking come from the new incarnation's seeded stream: any values are legal draws, and the
schedule still fixes them), and no per-incarnation time limit can be armed in a thread
(SIGALRM is the main thread's): a turn that does not hand the baton back within the
explorer's limit is interrupted by an exception raised in its thread, and reported hung.
"""
from __future__ import annotations

import ctypes
import gc
import os
import posix  # the real OS: pyfakefs patches every module's `os`, not `posix`
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import freezegun.api as real_time  # time is frozen while incarnations run; these are not
import pyfakefs

from ..interpose import finality
from ..agent import contract_broken, outcome_of, run_incarnation
from ..core.checkpoints import history_length
from ..interpose.determinism import seeded
from ..killpoints import KillPoint
from ..judge.oracle import Golden, Violation
from ..pipeline.incarnation import (Incarnation, IncarnationTimeout, captured_output,
                                    failure_details, traced_world)
from ..pipeline.pause import (PAUSE, SAVE_KINDS, SUPERSEDED, Wake, judge_pause,  # noqa: F401
                              pause_points, side_by_side, verdict_of)
from ..pipeline.runner import make_env
from ..core.trace import Event, Tracer
from ..world import World
from .sandbox import SANDBOX, Explorer



@dataclass
class Turn:
    """One incarnation run in a thread of its own, by handoffs (`run`, `go_on`)."""

    name: str  # "paused" or "new"
    result: Incarnation = field(default_factory=Incarnation)
    events: list[Event] = field(default_factory=list)
    policy: Any = None
    life: Any = None
    done: bool = False
    holding: bool = False  # blocked at its pause or wake point
    thread: threading.Thread | None = None
    _go: threading.Event = field(default_factory=threading.Event)
    _back: threading.Event = field(default_factory=threading.Event)

    def hold(self) -> None:
        """In its thread: hand the baton back and wait for it."""
        self.holding = True
        self._back.set()
        self._go.wait()
        self._go.clear()
        self.holding = False


_OURS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
         os.path.dirname(os.path.abspath(pyfakefs.__file__)) + os.sep)


def hold_on_return(turn: Turn) -> None:
    """Hold `turn` once the faultsim or pyfakefs call that emitted the current event has
    returned to code of neither (the agent's, its framework's, the standard library's).

    An event is emitted inside faultsim's hook of the operation, before its bookkeeping is
    done (pyfakefs's lookup caches, an open file's descriptor): a thread held there would
    leave the file system half-changed for the other incarnation. A process under SIGSTOP
    stops between two system calls, so the hold waits for the call to finish: from the
    agent's side that is the same instant (no code of its runs in between)."""
    # No collection while the profile function is installed: on CPython 3.11 a collection
    # run from inside a profile function's "return" event can crash the interpreter
    # (reproduced: the no_ownership mutant's pause sweep of tests/data/pause_ref_small.toml
    # segfaulted under pytest in this function, and never with the collector off). The
    # window is the few returns up to the agent's code; the collector is back on before the
    # hold, so the other incarnation runs as before. Nothing the agent sees changes: only
    # when unreachable cycles are freed, which no run may depend on.
    collecting = gc.isenabled()
    gc.disable()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code.co_filename.startswith(_OURS):
            back = frame.f_back
            if back is None or not back.f_code.co_filename.startswith(_OURS):
                sys.setprofile(None)
                if collecting:
                    gc.enable()
                turn.hold()

    sys.setprofile(profile)


class PauseAt:
    """The paused incarnation's policy: hold at `point` (once); until then, the clean
    course."""

    def __init__(self, turn: Turn, point: KillPoint) -> None:
        self.turn, self.point, self.reached = turn, point, False
        # Only the incarnation's own thread is held: holding a thread the agent started
        # would leave its main thread running beside the new incarnation.
        self.elsewhere = False

    def after(self, tracer: Tracer, event: Event) -> None:
        if not self.reached and event.index == self.point.index:
            self.reached = True
            if threading.current_thread() is not self.turn.thread:
                self.elsewhere = True  # met in a thread the agent started: not held
                return
            hold_on_return(self.turn)

    def before_write(self, tracer: Tracer, write) -> None:
        return None


class Saves:
    """Watches checkpoint saves of both incarnations: counts the new one's, holds it at
    its wake point, and notes a lost update (a save of the woken incarnation that leaves
    the checkpoint holding a shorter history than the one it replaced)."""

    def __init__(self, ex: Explorer, golden: Golden, watch_rollback: bool) -> None:
        self.ex, self.spec, self.watch_rollback = ex, golden.checkpoint, watch_rollback
        self.lengths: dict[str, tuple[int, str]] = {}  # path -> (history length, who)
        self.rollbacks: list[str] = []

    def saved(self, event: Event, who: str) -> bool:
        """Whether `event` saved a checkpoint; notes its history length."""
        if event.kind not in SAVE_KINDS or not self.spec.matches(event.subject):
            return False
        if self.watch_rollback:
            data = self.ex.interposer.snapshot().get(event.subject)
            n = history_length(self.spec, event.subject, data) if data is not None else None
            if n is not None:
                before = self.lengths.get(event.subject)
                if before is not None and n < before[0] and who == "woken" \
                        and before[1] == "new":
                    self.rollbacks.append(
                        f"#{event.index} of the woken incarnation: {event.subject} went back "
                        f"from {before[0]} to {n} messages (the new incarnation's save lost)")
                self.lengths[event.subject] = (n, who)
        return True


class Watching:
    """A running incarnation's policy after the pause: note its saves; for the new
    incarnation, hold at its wake point."""

    def __init__(self, turn: Turn, saves: Saves, who: str, wake: Wake | None) -> None:
        self.turn, self.saves, self.who, self.wake = turn, saves, who, wake
        self.count, self.woke = 0, False

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.saves.saved(event, self.who):
            self.count += 1
            if self.wake is not None and self.wake.kind == "save" and \
                    self.count == self.wake.n and not self.woke and \
                    threading.current_thread() is self.turn.thread:
                self.woke = True
                hold_on_return(self.turn)

    def before_write(self, tracer: Tracer, write) -> None:
        return None

    def before_request(self, request: Any) -> None:
        if self.wake is not None and self.wake.kind == "request" and not self.woke and \
                threading.current_thread() is self.turn.thread:
            self.woke = True
            self.turn.hold()


@dataclass
class PauseRun:
    """One pause schedule run: both incarnations' results, judged."""

    point: KillPoint
    wake: Wake
    paused: Turn
    new: Turn
    world: World
    final: dict
    rollbacks: list[str]
    saves: int  # the new incarnation's checkpoint saves before it was held (or in all)
    woke: bool  # the wake point came (else the paused one was woken at the new one's end)
    held_at: int | None  # the new incarnation's last event before it was held (None: none)
    hung: str | None = None


class Driver:
    """Runs pause schedules in one explorer's sandbox."""

    def __init__(self, ex: Explorer, golden: Golden, watch_rollback: bool = True) -> None:
        self.ex, self.golden, self.watch_rollback = ex, golden, watch_rollback
        self.limit = ex.timeout or 30.0

    def _thread(self, turn: Turn, world: World) -> None:
        ex, result = self.ex, turn.result

        def mark(name: str, **info: Any) -> None:
            ex.tracer.emit("mark." + name, str(info.get("tool") or ""))

        env = make_env(ex.scenario, world, Path(SANDBOX), mark)

        def body() -> None:
            turn.life = finality.begin()
            ended: BaseException | None = None
            try:
                result.outcome = outcome_of(run_incarnation(ex.make_agent, env))
            except IncarnationTimeout as exc:
                ended = exc
                result.timed_out, result.error = True, str(exc)
            except Exception as exc:  # noqa: BLE001 - the agent's own failure, judged
                ended = exc
                result.error = f"{type(exc).__name__}: {exc}"
                result.contract = contract_broken(exc)
                result.details = failure_details(exc, "")
            finally:
                finality.end(turn.life, False, ended)
                turn.done = True
                turn._back.set()

        turn.thread = threading.Thread(target=body, name=f"faultsim-pause-{turn.name}",
                                       daemon=True)

    def _run(self, turn: Turn, world: World) -> None:
        """Give `turn` the baton until it holds or ends."""
        ex = self.ex
        ex.tracer.events, ex.tracer.policy = turn.events, turn.policy
        world.model.before_request = getattr(turn.policy, "before_request", None)
        finality._live = turn.life  # the incarnation running now (threads it starts)
        turn._back.clear()
        if turn.thread is not None and not turn.thread.is_alive() and not turn.done:
            turn.thread.start()
        else:
            turn._go.set()
        if not self._wait(turn):
            _raise_in(turn.thread, IncarnationTimeout(
                f"no answer within {self.limit:g} s (the {turn.name} incarnation)"))
            self._wait(turn)
        ex.tracer.policy, world.model.before_request = None, None

    def _wait(self, turn: Turn) -> bool:
        """Wait for `turn` to hand the baton back: False once it has had `limit` seconds
        not counting time it waited for a CPU (as `time_limit` counts: on a loaded
        machine a starved turn is no hang; Linux's schedstat run_delay, else wall time)."""
        started, queued = real_time.real_monotonic(), _run_delay(turn.thread)
        while not turn._back.wait(min(self.limit, 1.0)):
            starved = max(0.0, _run_delay(turn.thread) - queued)
            if real_time.real_monotonic() - started - starved >= self.limit:
                return False
        return True

    def run(self, point: KillPoint, wake: Wake) -> PauseRun | None:
        """The schedule (point, wake); None when the point is met in a thread the agent
        started (it cannot be held there)."""
        ex = self.ex
        ex.reset_sandbox()
        world = ex.new_world()
        saves = Saves(ex, self.golden, self.watch_rollback)
        paused, new = Turn("paused"), Turn("new")
        paused.policy = PauseAt(paused, point)
        ip = ex.interposer
        with ip, world.model.serving_new_clients(), captured_output():
            # one listener for the world's events: they go to the running turn's trace
            on_world, _ = traced_world(ex.tracer, ex.scenario, world, Incarnation())
            unsubscribe = world.subscribe(on_world)
            try:
                world.begin_incarnation()
                with seeded(f"{ex.seed}:{world.incarnation}"):  # the clean run's stream
                    self._thread(paused, world)
                    self._run(paused, world)
                    if paused.policy.elsewhere:
                        return None  # not a schedule this driver can hold (PauseAt)
                    if paused.done:
                        raise_never_reached(point, paused)
                    if ex.scenario.profile.downtime:
                        world.clock.advance(ex.scenario.profile.downtime)
                    world.begin_incarnation()
                    with seeded(f"{ex.seed}:{world.incarnation}"):
                        new.policy = Watching(new, saves, "new", wake)
                        self._thread(new, world)
                        self._run(new, world)
                        woke = new.done is False or wake.kind == "end"
                        count = new.policy.count
                        held_at = None if new.done else \
                            (new.events[-1].index if new.events else 0)
                        paused.policy = Watching(paused, saves, "woken", None)
                        self._run(paused, world)  # the woken incarnation, to its end
                        if not new.done:
                            new.policy.wake = None
                            self._run(new, world)
            finally:
                unsubscribe()
                world.model.before_request = None
                ex.tracer.policy = None
                fs = ip.fs
                fs.open_files[:], fs._free_fd_heap[:] = ex._open0[0], ex._open0[1]
        hung = next((f"the {t.name} incarnation did not end within {self.limit:g} s"
                     for t in (paused, new) if not t.done), None)
        for t in (paused, new):
            t.result.events = t.events
        return PauseRun(point, wake, paused, new, world, ip.snapshot(), saves.rollbacks,
                        count, woke, held_at, hung)


def raise_never_reached(point: KillPoint, turn: Turn) -> None:
    from ..errors import KillDidNotLand

    raise KillDidNotLand(f"{point.id} never came: the first incarnation ended with "
                         f"{turn.result.error or 'an outcome'}; the agent is not "
                         "deterministic across runs")


def _run_delay(thread: threading.Thread | None) -> float:
    """Seconds `thread` has waited on a run queue (0.0 where that cannot be read)."""
    native = getattr(thread, "native_id", None)
    if native is None:
        return 0.0
    try:
        fd = posix.open(f"/proc/self/task/{native}/schedstat", posix.O_RDONLY)
        try:
            return int(posix.read(fd, 256).split()[1]) / 1e9
        finally:
            posix.close(fd)
    except (OSError, IndexError, ValueError):
        return 0.0


def _raise_in(thread: threading.Thread | None, exc: BaseException) -> None:
    """Raise `exc` in `thread` at its next bytecode (a turn past its time limit)."""
    if thread is None or thread.ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                               ctypes.py_object(type(exc)))


def explore_pause(ex: Explorer, golden: Golden, points: list[KillPoint],
                  progress: Callable[[str], None] | None = None,
                  watch_rollback: bool = True) -> list[tuple[PauseRun, list[Violation]]]:
    """Every pause schedule of `points`: for each, the new incarnation run to its end first
    (wake `end`: it counts the new incarnation's saves), then woken at its first request
    and after each of its saves."""
    driver = Driver(ex, golden, watch_rollback)
    out = []
    for point in pause_points(points):
        last = driver.run(point, Wake("end"))
        if last is None:
            if progress is not None:
                progress(f"{point.id}: met in a thread the agent started, not paused there")
            continue
        wakes = [Wake("request")] + [Wake("save", k) for k in range(1, last.saves + 1)]
        runs = [driver.run(point, w) for w in wakes] + [last]
        for r in runs:
            if r.wake.kind != "end" and not r.woke:
                continue  # its wake point never came: the same schedule as `end`
            v = judge_pause(golden, r)
            out.append((r, v))
            if progress is not None:
                progress(f"{point.id} ~ {r.wake.label}: "
                         + (", ".join(x.invariant for x in v) or "ok"))
    return out


def pause_run(make_agent: Callable, scenario: Any, options: Any, name: str,
              progress: Callable[..., None] | None = None) -> Any:
    """The `pause` crash model's run of `make_agent` on `scenario` (`explore` calls it
    when `--crash-model pause` is asked): every pause schedule of the clean run's boundary
    kill points (`explore_pause`), one verdict each. Every schedule runs in full: no
    verdict is shared between schedules, no run is cut short; `--kill-point` narrows it to
    that point's schedules, `--coverage representative` to the pause points of the kill
    points it covers, `--shard i/n` to the pause points of its share of those."""
    import freezegun.api as real_time

    from ..settings.options import select
    from ..reports.report import ModelRun

    started = real_time.real_perf_counter()
    with Explorer(make_agent, scenario, agent_name=name, timeout=options.timeout,
                  seed=options.seed) as ex:
        ex.convergence = False
        golden = ex.golden()
        points = golden.kill_points()
        only = getattr(options, "only", None)  # --kill-point: the schedules of that point
        # --coverage and --shard choose pause points as they choose kill points (the
        # process sweep's `select`): no verdict is shared between schedules and each
        # schedule's run depends on its point and wake alone, so a shard's schedules are
        # exactly the whole run's at its points, and the shards' union is the whole run
        # (test_pause.py compares them)
        coverage = options.cover(points, golden.trace)
        chosen = select(points, only, getattr(options, "shard", None), coverage)
        said = (lambda line: progress(0, 1, stage=f"pause: {line}")) \
            if progress is not None else None
        judged = explore_pause(ex, golden, chosen, said)
        run = ModelRun(scenario=scenario, agent=name, crash_model=PAUSE, kill_points=points,
                       explored=pause_points(chosen), seed=options.seed, crashes=1,
                       timeout=options.timeout, timeout_seconds=ex.timeout,
                       shard=getattr(options, "shard", None), shard_by="kill point",
                       coverage=coverage)
        for r, violations in judged:
            run.verdicts.append(_verdict(r, violations, golden))
            run.judged += 1
    run.seconds = real_time.real_perf_counter() - started
    return run


_verdict = verdict_of


def replay_pause(make_agent: Callable, scenario: Any, index: int, order: int, *,
                 seed: str, timeout: Any, name: str) -> Any:
    """One pause schedule, as a replay token names it: paused after the clean run's event
    `index`, woken where `order` says (`Wake.of_order`), judged as `pause_run` judges it.
    The same run as the sweep's: `Driver.run` starts each schedule from a fresh sandbox and
    world, both incarnations on their own seeded streams (test_pause.py compares them)."""
    from ..errors import UsageError
    from ..reports.report import ModelRun
    from ..schedule import ScheduleResult

    with Explorer(make_agent, scenario, agent_name=name, timeout=timeout, seed=seed) as ex:
        ex.convergence = False
        golden = ex.golden()
        points = golden.kill_points()
        point = next((p for p in pause_points(points) if p.index == index), None)
        if point is None:
            raise UsageError(f"{scenario.path}: the token pauses after event #{index}, which "
                             "is no boundary kill point of this clean run")
        wake = Wake.of_order(order)
        r = Driver(ex, golden).run(point, wake)
        if r is None:
            raise UsageError(f"{point.id}: met in a thread the agent started, not paused "
                             "there")
        verdict = _verdict(r, judge_pause(golden, r), golden)
        run = ModelRun(scenario=scenario, agent=name, crash_model=PAUSE, kill_points=points,
                       explored=[point], seed=seed, crashes=1, timeout=timeout,
                       timeout_seconds=ex.timeout)
        run.verdicts.append(verdict)
        run.judged = 1
    return ScheduleResult(verdict, run)
