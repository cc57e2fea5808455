"""The `pause` crash model for an agent run as a command (issue 55): the incarnation is
frozen by SIGSTOP of its process group at a kill point, not killed; the next incarnation
starts on the same sandbox and world (after the profile's downtime) and runs; the frozen
one is woken by SIGCONT at a wake point of the new one's course and runs on to its end;
then the new one goes on. The schedules and their verdicts are the in-process model's
(`faultsim.pipeline.pause`): the same pause points (the clean run's boundary kill points
but the start), the same wake points (the new incarnation's first model request, after
each of its checkpoint saves, its end), the same rules.

How a hold lands. A pause point is met at the boundary a kill would be met at
(`control.Controller`): the entry of the agent's next changing call (held at its entry by
strace for `sweep.HOLD` seconds), of its next model request or service call, of its exit,
or a model answer or an effect's answer not yet sent. There the group is SIGSTOPped and
proven stopped (`groups.stop_groups`: every process `T`, or `t` under strace stopped
itself) before the new incarnation starts; a request or answer the stop met is held by its
handler until the wake, then served. That it stopped at its point, not past it, is proven
once it stopped (`Live.proof`: exactly the point's events traced, the held call not
returned, the workdir what the traced calls wrote), and again at the wake (nothing traced
meanwhile); a stop that cannot be proven so is KillDidNotLand, run again with longer
holds (`Driver.attempt`), never judged. The new incarnation is held the same way at its wake
point: after its N-th save (the boundary after that event, as for a kill), or at its first
model request (its handler waits, the group stopped). Exactly one of the two runs at any
instant, as in process; the world's events go to the trace of the one running.

What differs from in process: the two are real processes of their own (their memory,
their random streams, their clocks are their own); a held syscall's entry is where strace
holds it, not between two Python bytecodes. Not done here (refused in one line by the
backend): a second crash, --shard and representative coverage.

Every exit path (an error, a hang, Ctrl-C) SIGCONTs each group it stopped and SIGKILLs it,
proven gone (`Live.close`): no stopped process is left behind.
"""
from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core.checkpoints import history_length
from ..errors import KillDidNotLand, StopCameLate, StopNotPlaced
from ..host.groups import continue_groups, group_alive, members, stop_groups
from ..killpoints import KillPoint
from ..model.endpoint import ModelEndpoint
from ..pipeline.incarnation import Incarnation, traced_world
from ..pipeline.pause import (PAUSE, SAVE_KINDS, Explored, Wake, judge_pause, pause_points,
                              verdict_of)
from ..reports.report import ModelRun
from ..scenario import Scenario
from ..core.trace import Event, Tracer
from ..core.tree import Files, read_tree, regular, under, write_tree
from ..world import World
from .control import Controller, Door
from .disk import DiskModel
from .launch import Jailed, environment, kill_group, outcome, start
from .syscalls import Hold, command_line

SLACKS = (1.0, 3.0, 10.0)  # a held call's hold, times sweep.HOLD, try after try
STOP_SECONDS = 10.0  # how long a group may take to show every process stopped
WORLD_EVENTS = ("model.response", "model.stream")  # held in place, as control.py kills


class Baton:
    """Which incarnation may run now; the world's events go to its trace only."""

    def __init__(self) -> None:
        self.running: "Live | None" = None


class PauseController(Controller):
    """A controller whose target is a pause: at the target boundary the incarnation is
    held (`Live.hold`: its group SIGSTOPped, proven, until the wake); nothing is killed,
    nothing raised, the request or answer met there is served after the wake. The hold
    happens once the controller's lock is released (`_leave`), so the driver can read the
    log of a held incarnation while it is stopped."""

    def __init__(self, tracer: Tracer, model: DiskModel, target: int | None,
                 live: "Live", first_request: bool = False) -> None:
        super().__init__(tracer, model, target, kill=lambda: False)
        self.live, self.first_request = live, first_request
        self.pending: str | None = None
        self._depth = threading.local()

    def _enter(self) -> None:
        self._depth.n = getattr(self._depth, "n", 0) + 1

    def _leave(self) -> None:
        self._depth.n -= 1
        if self._depth.n == 0 and self.pending is not None:
            where, self.pending = self.pending, None
            self.live.hold(where)

    def _at_boundary(self, where: str) -> bool:
        """The target boundary's entry: the hold is pending (it comes in `_leave`). True
        when it is met, so that `Controller.drain` notes a held call's entry (`held`): the
        stop's proof (`Live.proof`) then shows that call never returned."""
        if self.target is None or len(self.tracer.events) != self.target:
            return False
        last = self.tracer.events[-1] if self.tracer.events else None
        if last is not None and (last.kind in WORLD_EVENTS or last.kind.startswith("effect.")):
            return False  # held at the world's event already, or at its answer
        self.target, self.pending = None, where
        return True

    def drain(self) -> None:
        self._enter()
        try:
            super().drain()
        finally:
            self._leave()

    def model_request(self) -> None:
        self._enter()
        try:
            with self._lock:  # `Controller.model_request`, holding where it kills
                self.drain()
                self.entries.append("a model request received")
                self._at_boundary("at the entry of a model request")
            if self.first_request:
                self.first_request = False
                self.pending = "at its first model request"
        finally:
            self._leave()

    def service(self, phase: str, service: str, n: int) -> None:
        self._enter()
        try:
            with self._lock:
                self.drain()
                if phase == "received":
                    self.entries.append(f"call {n} of service {service} received")
                    self._at_boundary(f"at the entry of call {n} of service {service}")
                elif phase == "answered" and self._after_effect:
                    self._after_effect = False
                    self.pending = (f"after call {n} of service {service} applied, before "
                                    "its answer")
        finally:
            self._leave()

    def world_event(self, kind: str) -> None:
        with self._lock:
            if self.target is None or len(self.tracer.events) != self.target:
                return
            if kind.startswith("effect."):
                self.target, self._after_effect = None, True  # held at that call's answer
            elif kind in WORLD_EVENTS:
                self.target = None
                self.pending = f"after {kind} (not yet sent to the agent)"
        # the listener that called this is inside the fake's or the service's handler:
        # the hold comes when that handler's controller call ends (`_leave`), or here
        if getattr(self._depth, "n", 0) == 0 and self.pending is not None:
            where, self.pending = self.pending, None
            self.live.hold(where)


class Saves:
    """Checkpoint saves of both incarnations, in the order they were traced: the new one's
    counted, and a lost update noted (a save of the woken incarnation that leaves the
    checkpoint holding a shorter history than the new one's last save), as in process
    (`inprocess.pause.Saves`), from the bytes the traced calls wrote (`DiskModel`)."""

    def __init__(self, scenario: Scenario) -> None:
        self.spec = scenario.checkpoint
        self.lengths: dict[str, tuple[int, str]] = {}
        self.rollbacks: list[str] = []

    def policy(self, live: "Live") -> Any:
        saves = self

        class Watch:
            def after(self, tracer: Tracer, event: Event) -> None:
                if live.who is not None:
                    saves.saved(event, live)

            def before_write(self, tracer: Tracer, write: Any) -> None:
                return None

        return Watch()

    def saved(self, event: Event, live: "Live") -> None:
        if event.kind not in SAVE_KINDS or not self.spec.matches(event.subject):
            return
        data = live.controller.model.snapshot().get(event.subject)
        n = history_length(self.spec, event.subject, data) if data else None
        if n is None:
            return
        before = self.lengths.get(event.subject)
        if before is not None and n < before[0] and live.who == "woken" \
                and before[1] == "new":
            self.rollbacks.append(
                f"#{event.index} of the woken incarnation: {event.subject} went back from "
                f"{before[0]} to {n} messages (the new incarnation's save lost)")
        self.lengths[event.subject] = (n, live.who or "")


@dataclass
class Live:
    """One incarnation of the command in a pause schedule: started on the shared sandbox
    and world, held once at most (`hold`), woken (`wake`), run to its end (`wait`), and
    closed on every path (`close`: SIGCONT, SIGKILL, proven gone)."""

    name: str  # "paused" or "new"
    argv: list[str]
    scenario: Scenario
    world: World
    base: Path
    baton: Baton
    seed: str
    services: Any
    target: int | None = None
    hold_call: Hold | None = None
    first_request: bool = False
    who: str | None = None  # whose saves `Saves` watches: "new", "woken", None (not yet)
    result: Incarnation = field(default_factory=Incarnation)
    events: list[Event] = field(default_factory=list)
    reached: bool = False  # it met its hold (the stop may have failed, or come late)
    late: str | None = None  # why the stop, proven, is not at the point (`proof`)
    held: bool = False  # it met its hold and its group was proven stopped
    stopped: bool = False
    where: str = ""
    events_at_stop: int = 0
    ended: bool = False
    left: bool = False  # a process of its group was alive after `close` (never expected)
    calls: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)  # pid -> /proc state letter, at the stop

    def __post_init__(self) -> None:
        self._held, self._go = threading.Event(), threading.Event()
        self.process: subprocess.Popen | None = None
        self._closers: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._follower: threading.Thread | None = None

    # -- run --------------------------------------------------------------------------
    def start(self, saves: Saves, fresh: bool) -> None:
        root = self.base / "sandbox"
        logs = self.base / "trace"
        logs.mkdir(parents=True, exist_ok=True)
        if fresh:
            write_tree(root / "work", {})
            for d in ("home", "tmp"):
                write_tree(root / d, under({}, d))
        self.number = self.world.begin_incarnation()
        self.tracer = Tracer()
        self.tracer.events = self.events
        self.tracer.policy = saves.policy(self)
        model = DiskModel.of(str(root / "work"), read_tree(root / "work"))
        self.controller = PauseController(self.tracer, model, self.target, self,
                                          self.first_request)
        on_world, _mark = traced_world(self.tracer, self.scenario, self.world, self.result)
        controller = self.controller

        def listener(kind: str, **info: Any) -> None:
            if self.baton.running is not self:
                return  # the other incarnation's event
            if kind in ("model.response", "model.stream") or kind.startswith("effect."):
                controller.drain()
                on_world(kind, **info)
                controller.world_event(kind)

        self._closers.append(self.world.subscribe(listener))
        self.log = logs / f"strace-{self.number}.log"
        self.log.unlink(missing_ok=True)
        self.out, self.err = logs / f"stdout-{self.number}", logs / f"stderr-{self.number}"
        endpoint = ModelEndpoint(Door(self.world.model, controller)).start()
        self._closers.append(endpoint.close)
        env = {"ANTHROPIC_BASE_URL": endpoint.base_url, "ANTHROPIC_API_KEY": endpoint.api_key,
               "FAULTSIM_TASK": self.scenario.task}
        if self.scenario.services and self.services is not None:
            wire = self.services(self.world, self.scenario, hook=controller.service)
            self._closers.append(wire.close)
            env.update(wire.env)
        from .incarnation import addresses

        jailed = Jailed.build(self.base, addresses(list(env.values())))
        self._closers.append(jailed.close)
        self.jail_why = jailed.jail.why
        self.log.touch()
        controller.log = self.log
        self.baton.running = self
        self.process = start(command_line(str(self.log), self.argv, self.hold_call),
                             root / "work", environment(root, env, seed=self.seed,
                                                        incarnation=self.number),
                             jailed, self.out, self.err)
        self._follower = controller.follow(self._stop)

    def hold(self, where: str) -> None:
        """In the thread that met the hold: SIGSTOP the group, prove it stopped, prove it
        stopped at its point (`proof`), hand the baton back and wait for the wake."""
        self.where, self.reached = where, True
        assert self.process is not None
        self.stopped = stop_groups([self.process.pid], STOP_SECONDS)
        self.states = _states(self.process.pid)  # what /proc showed once stopped
        if self.stopped:
            self.controller.drain()  # all strace logged before it stopped
            self.late = self.proof()
        self.events_at_stop = len(self.events)
        self.held = True
        self._held.set()
        self._go.wait()

    def wait(self, limit: float | None) -> str:
        """Until it holds ("held"), ends ("ended") or runs `limit` seconds ("timeout").
        Under strace the command's end is its own exit_group (`incarnation._wait`)."""
        assert self.process is not None
        deadline = None if limit is None else time.monotonic() + limit
        exited_at = None
        while True:
            if self._held.is_set():
                return "held"
            try:
                self.process.wait(0.02)
                self._ended()
                return "ended"
            except subprocess.TimeoutExpired:
                pass
            # its exit's entry seen: what it left running is killed after 0.5 s, but
            # never while its hold is under way (held at its exit, the stop comes first)
            if self.controller.main_exit is not None and not (self.reached
                                                               and not self.held):
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 0.5:  # what it left running: killed
                    kill_group(self.process)
                    self._ended()
                    return "ended"
            if deadline is not None and time.monotonic() > deadline:
                return "timeout"

    def proof(self) -> str | None:
        """Why the group, proven stopped, is not stopped at its point (one line), or None.

        The point is fixed by the schedule (after event `target` of this incarnation's
        trace; or its first model request), never by timing, when all three hold:
          1. exactly `target` events were traced once the group stopped and the log was
             read to its end: nothing past the point ran and was logged. (Before this
             check, a follower thread that read strace's log late read the held call's
             entry, its return and the calls after it in one read, traced them all, and
             only then stopped the group: the trace then stood past the point and the
             check at the wake, which compares the trace at the stop with the trace at the
             wake, saw nothing move; the schedule was judged on another state.)
          2. the call held at its entry (`controller.held`) has not returned in the log;
          3. the workdir holds exactly what the traced calls wrote (`DiskModel.mismatch`),
             so the held call did not run: strace, stopped with the group, may not have
             logged the return of a call that ran just before the stop; its change to
             the workdir shows. The one change a held call makes that no file shows is
             an fsync's durability, which the pause model does not judge (no power is
             lost in a pause schedule): run before the stop or after the wake, the disk
             and the process's course are the same.
        A tracee can pass a traced call only when strace lets it on after logging the
        call's return (1, 2), and the world's boundaries (a model request, an answer, a
        service call) hold the agent inside faultsim's own handler, where it waits: so
        no other run reaches this state. Failing any, the run raises KillDidNotLand
        (`Driver.run`) and `attempt` runs the schedule again with longer holds."""
        c = self.controller
        if self.target is not None and len(self.events) != self.target:
            return (f"{len(self.events) - self.target} of its events past the point were "
                    "traced before its group stopped")
        if c.held is not None and c.held.returned:
            return f"the held call {c.held.n} ({c.held.name}) returned before the stop"
        return c.model.mismatch(read_tree(self.base / "sandbox" / "work"))

    def wake(self) -> None:
        """SIGCONT the group and let the held thread go on. First the proof that the stop
        came in time: nothing of it was traced while it was stopped."""
        assert self.process is not None
        self.controller.drain()
        if len(self.events) != self.events_at_stop:
            raise StopCameLate(
                f"the {self.name} incarnation's stop {self.where} came late: "
                f"{len(self.events) - self.events_at_stop} of its events were traced after "
                "it was proven stopped")
        self._held.clear()
        self.refresh()
        self.baton.running = self
        continue_groups([self.process.pid])
        self._go.set()

    def refresh(self) -> None:
        """Its model of the workdir is what its own traced calls left: while it was held
        the other incarnation changed the disk. At its wake (the other stopped or ended)
        the disk is what it will see: the model is rebuilt from it, its open
        descriptors kept (on the same path, else on their old bytes: an unlinked temp
        file), so its next calls are read against the files it meets."""
        old = self.controller.model
        new = DiskModel.of(old.root, read_tree(self.base / "sandbox" / "work"))
        new.cwd = old.cwd
        for key, fd in old._fds.items():
            path = old._path_of(fd.ino)
            ino = new._lookup(path) if path is not None else None
            if ino is None or ino in new.names:
                ino = new._new_file(bytes(old.data.get(fd.ino, b"")))
            new._fds[key] = dataclasses.replace(fd, ino=ino)
        self.controller.model = new

    def _ended(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._stop.set()
        if self._follower is not None:
            self._follower.join(5)
        self.controller.drain()  # the calls of its last moments
        assert self.process is not None
        code = self.process.returncode
        if self.controller.main_exit is not None:
            code = self.controller.main_exit
        stdout = self.out.read_text(errors="replace") if self.out.exists() else ""
        stderr = self.err.read_text(errors="replace") if self.err.exists() else ""
        self.result.outcome, self.result.error = outcome(code if code is not None else -9,
                                                         stdout, stderr)
        self.calls = dict(self.controller.calls)

    def hung(self, limit: float | None) -> None:
        self.result.timed_out = True
        self.result.error = f"no end within {limit:g} s (the {self.name} incarnation)"

    def close(self) -> None:
        """On every path: SIGCONT first (a stopped process cannot die until it runs),
        SIGKILL the group, prove it gone; then release a held handler and close the
        endpoint, the services, the jail."""
        self._stop.set()
        if self.process is not None:
            continue_groups([self.process.pid])
            kill_group(self.process)
            self.left = group_alive(self.process.pid)
        self._go.set()
        if self._follower is not None:
            self._follower.join(5)
        for close in reversed(self._closers):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                pass
        self._closers.clear()
        self.result.events = self.events


def _states(pgid: int) -> dict[int, str]:
    """Each live process of the group and its scheduler state (`T` stopped, `t` held by
    its tracer), as /proc shows it: the stop's evidence, kept for the tests."""
    found = {}
    for pid, _command in members(pgid):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                found[pid] = f.read().rsplit(b")", 1)[1].split()[0].decode()
        except OSError:
            continue
    return found


@dataclass
class PauseRun:
    """One pause schedule of the command, as `pipeline.pause.judge_pause` reads it."""

    point: KillPoint
    wake: Wake
    paused: Live
    new: Live
    world: World
    final: Files
    rollbacks: list[str]
    saves: list[int]  # the new incarnation's checkpoint save events (their indices)
    woke: bool
    held_at: int | None
    hung: str | None = None
    stops: int = 0  # SIGSTOPs proven landed (the pause, and the new one's wake hold)
    left: int = 0  # groups found alive after closing (never expected)


@dataclass
class Driver:
    """Runs pause schedules of the command `argv` on `scenario` under `base`."""

    argv: list[str]
    scenario: Scenario
    base: Path
    first: Any  # the clean run (`incarnation.Run`): its calls hold the pause point
    limit: float | None
    seed: str
    services: Any
    ends: dict = field(default_factory=dict)  # point index -> the `end` schedule's run
    again: int = 0  # schedules run again by `attempt` (a stop not proven at its point)

    def run(self, point: KillPoint, wake: Wake, slack: float = 1.0) -> PauseRun:
        from .sweep import hold_for

        world = self.scenario.build_world()
        baton, saves = Baton(), Saves(self.scenario)
        paused = Live("paused", self.argv, self.scenario, world, self.base, baton,
                      self.seed, self.services, target=point.index,
                      hold_call=_longer(hold_for(point, self.first, self.first.calls), slack))
        target, hold, first_request = None, None, False
        if wake.kind == "request":
            first_request = True
        elif wake.kind == "save":
            end = self.ends[point.index]
            if wake.n <= len(end.saves):
                t = end.saves[wake.n - 1]
                target = t
                hold = _longer(hold_for(KillPoint(t, None, "", "", ""), end.new,
                                        end.new.calls), slack)
        new = Live("new", self.argv, self.scenario, world, self.base, baton, self.seed,
                   self.services, target=target, hold_call=hold,
                   first_request=first_request, who="new")
        hung = None
        try:
            paused.start(saves, fresh=True)
            got = paused.wait(self.limit)
            if got != "held" and paused.reached:
                raise StopCameLate(f"{point.id}: the SIGSTOP {paused.where} came late: the "
                                     f"incarnation {got} before its group stopped")
            if got != "held":
                if got == "timeout":
                    raise KillDidNotLand(f"{point.id} never came: the first incarnation ran "
                                         f"past {self.limit:g} s")
                raise KillDidNotLand(
                    f"{point.id} never came: the first incarnation ended with "
                    f"{paused.result.error or 'an outcome'} after {len(paused.events)} "
                    "events; the agent is not deterministic across runs")
            if not paused.stopped:
                raise StopCameLate(f"{point.id}: the SIGSTOP {paused.where} did not land: "
                                     "a process of the group did not stop")
            if paused.late:
                raise StopCameLate(f"{point.id}: the SIGSTOP {paused.where} came late: "
                                     f"{paused.late}")
            if self.scenario.profile.downtime:
                world.clock.advance(self.scenario.profile.downtime)
            new.start(saves, fresh=False)
            got = new.wait(self.limit)
            if got != "held" and new.reached:
                raise StopCameLate(f"the new incarnation's hold {new.where} came late: it "
                                     f"{got} before its group stopped")
            if got == "ended" and target is not None:  # the `end` schedule's run met it
                raise KillDidNotLand(f"the new incarnation's {wake.label} (after its event "
                                     f"#{target}) never came: it ended after "
                                     f"{len(new.events)} events; the agent is not "
                                     "deterministic across runs")
            woke = got == "held" or wake.kind == "end"
            if got == "held" and not new.stopped:
                raise StopCameLate(f"the new incarnation's hold {new.where} did not land: "
                                     "a process of its group did not stop")
            if got == "held" and new.late:
                raise StopCameLate(f"the new incarnation's hold {new.where} came late: "
                                     f"{new.late}")
            if got == "timeout":
                new.hung(self.limit)
                hung = new.result.error
            held_at = (new.events[-1].index if new.events else 0) if got == "held" \
                else None
            paused.who = "woken"
            if hung is None:
                paused.wake()
                if paused.wait(self.limit) == "timeout":
                    paused.hung(self.limit)
                    hung = paused.result.error
                elif got == "held":
                    new.wake()
                    if new.wait(self.limit) == "timeout":
                        new.hung(self.limit)
                        hung = new.result.error
        finally:
            for live in (paused, new):
                live.close()
        final = regular(read_tree(self.base / "sandbox" / "work"))
        run = PauseRun(point, wake, paused, new, world, final, saves.rollbacks,
                       [e.index for e in new.events if e.kind in SAVE_KINDS
                        and self.scenario.checkpoint.matches(e.subject)],
                       woke, held_at, hung,
                       stops=paused.stopped + (new.stopped and got == "held"),
                       left=paused.left + new.left)
        return run

    def attempt(self, point: KillPoint, wake: Wake) -> PauseRun:
        """`run`, again when its stop did not land or came late (a held call's window
        missed on a loaded machine: `Live.proof`), holding calls 3 and then 10 times as
        long (0.9 s, 3 s): the schedule is the same run, so a later try judges the same
        thing (a try that fails is never judged); the last failure is raised, naming
        every try's: StopNotPlaced (a harness error) when every try failed only in the
        stop's timing, KillDidNotLand (the agent's) when a run went elsewhere."""
        failed: list[KillDidNotLand] = []
        for slack in SLACKS:
            try:
                return self.run(point, wake, slack=slack)
            except KillDidNotLand as why:
                failed.append(why)
                self.again += 1
        before = [str(why) for why in failed[:-1] if str(why) != str(failed[-1])]
        said = f"{failed[-1]} (tries: {len(failed)}" + \
            (f"; before: {'; '.join(before)})" if before else ", each so)")
        if all(isinstance(why, StopCameLate) for why in failed):
            # every try ran as the clean run did up to the point: only the stop's timing
            # failed, which is this machine's load, not the agent (a harness error, exit 3)
            raise StopNotPlaced(f"{said}; no hold was long enough on this machine: run "
                                "again when it is less loaded")
        raise KillDidNotLand(said)


def _longer(hold: Hold | None, slack: float) -> Hold | None:
    return hold if hold is None or slack == 1.0 else \
        dataclasses.replace(hold, seconds=hold.seconds * slack)


def explore_pause(driver: Driver, golden: Any, points: list[KillPoint],
                  progress: Callable[[str], None] | None = None) -> Explored:
    """Every pause schedule of `points`, as in process (`inprocess.pause.explore_pause`):
    for each point the `end` schedule first (it finds the new incarnation's saves), then
    woken at the new one's first request and after each of its saves; a schedule whose
    wake point never came is the `end` one, not judged twice."""
    found = Explored([])
    for point in pause_points(points):
        last = driver.attempt(point, Wake("end"))
        driver.ends[point.index] = last
        runs = [driver.attempt(point, w) for w in
                [Wake("request")] + [Wake("save", k) for k in range(1, len(last.saves) + 1)]]
        found.judge(point, runs + [last], golden, progress)
    return found


def pause_run(command: str, scenario: Scenario, *, only: Callable[[KillPoint], bool] | None,
              timeout: Any, seed: str, services: Any = None, agent: str | None = None,
              progress: Callable[[str], None] | None = None,
              base: Path | None = None) -> tuple[ModelRun, Explored]:
    """The pause model's run of the command on `scenario`: the two clean runs (checked as
    every backend checks them), then every pause schedule of the points `only` keeps."""
    import tempfile

    from ..pipeline.incarnation import resumed_limit
    from .launch import split
    from .sweep import MODE, clean_runs, default_services, kill_points

    argv = split(command)
    agent = agent or (command if command.startswith("cmd:") else "cmd:" + command)
    services = services if services is not None else default_services()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"faultsim-{scenario.id}-") as tmp:
        base = base or Path(tmp)
        golden, clean = clean_runs(argv, scenario, base, timeout=timeout, seed=seed,
                                   services=services)
        points = kill_points(golden)
        chosen = [p for p in points if only is None or only(p)]
        limit = resumed_limit(timeout, [r.seconds for r in clean])
        driver = Driver(argv, scenario, base, clean[0], limit, seed, services)
        found = explore_pause(driver, golden, chosen, progress)
    run = ModelRun(scenario=scenario, agent=agent, crash_model=PAUSE, kill_points=points,
                   explored=pause_points(chosen), seed=seed, crashes=1, mode=MODE,
                   timeout=timeout, timeout_seconds=limit,
                   convergence="not tried for an agent in processes of its own: its memory "
                               "is in another process")
    for r, violations in found.runs:
        run.verdicts.append(verdict_of(r, violations, golden))
        run.judged += 1
    run.seconds = time.monotonic() - started
    run.notes.append(
        f"  pauses        {found.stops} SIGSTOPs landed (each group proven stopped at its "
        f"point, its trace unmoved until SIGCONT) in {found.schedules} pause schedules "
        f"({driver.again} run again: a stop not proven at its point, never judged); "
        f"{found.left} groups left behind")
    return run, found


def replay_pause(token: Any, command: str, timeout: Any) -> Any:
    """One pause schedule, as a replay token names it (paused after the clean run's event
    `index`, woken where its `order` says): the clean runs, the point's `end` schedule when
    the wake is a save (it finds the saves), then that schedule, judged as the sweep
    judges it."""
    import tempfile

    from ..errors import UsageError
    from ..pipeline.incarnation import resumed_limit
    from ..scenario import load_scenario
    from ..schedule import ScheduleResult
    from .launch import split
    from .sweep import MODE, clean_runs, default_services, kill_points

    scenario = load_scenario(token.scenario)
    step = token.steps[0]
    wake = Wake.of_order(step.order)
    argv, services = split(command), default_services()
    with tempfile.TemporaryDirectory(prefix=f"faultsim-{scenario.id}-") as tmp:
        base = Path(tmp)
        golden, clean = clean_runs(argv, scenario, base, timeout=timeout, seed=token.seed,
                                   services=services)
        points = kill_points(golden)
        point = next((p for p in pause_points(points) if p.index == step.index), None)
        if point is None:
            raise UsageError(f"{scenario.path}: the token pauses after event #{step.index}, "
                             "which is no boundary kill point of this clean run")
        limit = resumed_limit(timeout, [r.seconds for r in clean])
        driver = Driver(argv, scenario, base, clean[0], limit, token.seed, services)
        if wake.kind == "save":
            driver.ends[point.index] = driver.attempt(point, Wake("end"))
        r = driver.attempt(point, wake)
    verdict = verdict_of(r, judge_pause(golden, r), golden)
    run = ModelRun(scenario=scenario, agent=command, crash_model=PAUSE, kill_points=points,
                   explored=[point], seed=token.seed, crashes=1, mode=MODE,
                   timeout=timeout, timeout_seconds=limit)
    run.verdicts.append(verdict)
    run.judged = 1
    return ScheduleResult(verdict, run)
