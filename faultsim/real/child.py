"""One incarnation in a forked child: run the agent on the real sandbox directory, trace
it, and at the kill point report to faultsim and SIGKILL itself.

What dies is the agent's process: its memory, its open files, Python's unflushed buffers,
its SQLite connection with an open transaction, its Redis connection in the middle of a
MULTI. What survives is what a real crash leaves: the directory as the kernel has it, the
database files, the Redis server's data, and the world (the external services), whose
state the child hands over just before it dies, as the services would have kept it.
"""
from __future__ import annotations

import os
import pickle
import posix  # fork: faultsim's own, never refused by the process guard
import signal
from pathlib import Path
from typing import Any

import freezegun.api as _real_time  # perf_counter is frozen in here; this is not

from ..interpose import finality, procguard
from ..agent import contract_broken, outcome_of, run_incarnation
from ..interpose.determinism import seeded
from ..killpoints import registered_phases
from ..pipeline.incarnation import (Incarnation, IncarnationTimeout, captured_output,
                                    failure_details, time_limit, traced_world)
from ..pipeline.runner import make_env
from ..core.trace import Event, Tracer
from ..world.clock import faithful_copies
from . import fstrace, helpers, wire


class RealKill:
    """Tracer policy: at the kill point, report and die by SIGKILL."""

    def __init__(self, index: int, offset: int | None, die) -> None:
        self.index, self.offset, self.die = index, offset, die

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.offset is None and event.index == self.index:
            self.die()

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        if self.offset is not None and tracer.next_index == self.index:
            write.apply(write.torn(self.offset))  # part of the write reached the kernel
            self.die()
        return None


class ForkAtEach:
    """Tracer policy of a crash driver: the agent runs clean, and at each of its kill
    points it forks; the copy dies there by SIGKILL (inside a write, after the part of it
    that landed), the driver waits for that death, reads what is on disk and in the world
    at that instant, sends it, and goes on. One clean run instead of a replayed prefix per
    kill point; the copy is the process at the kill point, memory, buffers and open
    connections included."""

    def __init__(self, points: list, ctx: Any, capture) -> None:
        self.boundary = {i for i, off in points if off is None}
        self.torn: dict[int, list[int]] = {}
        for i, off in points:
            if off is not None:
                self.torn.setdefault(i, []).append(off)
        self.ctx, self.capture = ctx, capture

    def _fork_and_kill(self, point: tuple, before_death=None) -> None:
        pid = posix.fork()
        if pid == 0:
            if before_death is not None:
                before_death()
            os.kill(os.getpid(), signal.SIGKILL)
            os._exit(99)  # never reached
        status = os.waitpid(pid, 0)[1]
        died = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        self.capture(point, died)

    def after(self, tracer: Tracer, event: Event) -> None:
        if event.index in self.boundary:
            self._fork_and_kill((event.index, None))

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        # The copies share the driver's disk (an in-process fork copies its fake one): each
        # copy's torn bytes are put back to what the file held before the next copy, and
        # before the driver writes for real. Left there, the next torn part would land
        # after them (an append) and the driver's own course would part from the clean run.
        for offset in sorted(self.torn.get(tracer.next_index, ())):
            self._fork_and_kill((tracer.next_index, offset),
                                lambda: write.apply(write.torn(offset)))
            write.apply(write.old)
        return None


class RealHold:
    """Tracer policy of an incarnation in a pause schedule (`faultsim.real.pause`): note
    each checkpoint save (its history length, read from the file it left); hold at the
    paused incarnation's point (after event `target`, where `RealKill` would SIGKILL it),
    or at the new incarnation's wake point after its N-th save (`hold(where)`)."""

    def __init__(self, target: int | None, after_save: int | None, spec: Any, root: str,
                 hold) -> None:
        self.target, self.after_save, self.spec, self.root = target, after_save, spec, root
        self.hold = hold
        self.saves: list[tuple[int, str, int | None]] = []  # (event, path, history length)

    def after(self, tracer: Tracer, event: Event) -> None:
        from ..core.checkpoints import history_length
        from ..pipeline.pause import SAVE_KINDS

        if event.kind in SAVE_KINDS and self.spec.matches(event.subject):
            data = fstrace._read(os.path.join(self.root, event.subject))
            n = history_length(self.spec, event.subject, data) if data else None
            self.saves.append((event.index, event.subject, n))
            if self.after_save is not None and len(self.saves) == self.after_save:
                self.after_save = None
                self.hold(f"after its save {len(self.saves)} (event #{event.index})")
                return
        if self.target is not None and event.index == self.target:
            self.target = None
            self.hold(f"after event #{event.index}")

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        return None


def run_job(job: dict, ctx: Any, out_fd: int) -> None:
    """Runs in the child; never returns (the process dies or exits)."""
    scenario = ctx.scenario
    world = pickle.loads(job["world"]) if job["world"] is not None else scenario.build_world()
    world.clock.attach(ctx.clock_factory)
    if job["downtime"]:
        world.clock.advance(job["downtime"])
    tracer = Tracer()
    sandbox = fstrace.activate(ctx.root, tracer)
    sandbox.watch = job.get("watch")
    if procguard.contained():  # the programs it starts: their writes outside, reported
        helpers.watch()
    result = Incarnation()  # what the world listener notes: the first main turn asked

    def report(kind: str, **extra: Any) -> None:
        world.clock.detach()
        world._listeners = []
        escapes = sandbox.escapes + helpers.escapes()
        helpers.stop()
        wire.send(out_fd, {"job": job["id"], "kind": kind, "events": tracer.events,
                           "world": _pickled(world),
                           "escapes": escapes,
                           "unwatched": helpers.unwatched(),
                           "first_position": result.first_position,
                           "first_touch": sandbox.first_touch,
                           # the phases the agent's adapter declared (this process imported it)
                           "phases": registered_phases(), **extra})

    def die() -> None:
        fstrace.deactivate()
        report("killed")
        # the incarnation leads its process group (faultsim.host.jail): the processes it
        # started die with it, at the same instant
        os.killpg(0, signal.SIGKILL)

    if job["kill"] is not None:
        tracer.policy = RealKill(job["kill"][0], job["kill"][1], die)
    elif job.get("drive"):
        def capture(point: tuple, died: bool) -> None:
            saved = fstrace.deactivate()  # faultsim's own reads are not the agent's events
            try:
                listeners, world._listeners = world._listeners, []
                wire.send(out_fd, {"job": job["id"], "kind": "crash", "point": point,
                                   "sigkilled": died, "files": ctx.left_behind(ctx),
                                   "world": _pickled(world), "after": len(tracer.events)})
                world._listeners = listeners
            finally:
                fstrace.reactivate(saved)

        tracer.policy = ForkAtEach(job["drive"], ctx, capture)
    elif job.get("pause"):
        tracer.policy = _pausing(job["pause"], ctx, tracer, world, out_fd)

    on_world, mark = traced_world(tracer, scenario, world, result)
    world.begin_incarnation()
    env = make_env(scenario, world, Path(ctx.root), mark)
    env.store = ctx.store
    world.subscribe(on_world)
    outcome = error = contract = None
    timed_out, details = False, ""
    with seeded(f"{ctx.seed}:{world.incarnation}"), world.model.serving_new_clients(), \
            captured_output() as output, \
            time_limit(job.get("timeout", ctx.timeout) if job["timed"] else None):
        if job["kill"] is not None and job["kill"][0] == 0:
            die()
        started = _real_time.real_perf_counter()
        life = finality.begin()  # its threads, stopped and reported as in-process
        ended: BaseException | None = None
        try:
            outcome = outcome_of(run_incarnation(ctx.make_agent, env))
        except IncarnationTimeout as exc:
            ended, timed_out, error = exc, True, str(exc)
            details = failure_details(exc, output.getvalue())
        except Exception as exc:
            ended, error = exc, f"{type(exc).__name__}: {exc}"
            contract = contract_broken(exc)
            details = failure_details(exc, output.getvalue())
    seconds = _real_time.real_perf_counter() - started  # the bare run: what limits derive from
    finality.end(life, False, ended)  # outside the time limit: faultsim's own wait
    fstrace.deactivate()
    if job.get("pause"):
        world.model.before_request = None  # a lambda: not sent
        extra = {"saves": tracer.policy.saves, "late": tracer.policy.late}
    else:
        extra = {}
    report("done", outcome=outcome, error=error, timed_out=timed_out, details=details,
           seconds=seconds, strays=life.strays, contract=contract, **extra)
    os._exit(0)


def _pausing(pause: dict, ctx: Any, tracer: Tracer, world: Any, out_fd: int) -> RealHold:
    """The policy of an incarnation in a pause schedule, and its hold.

    The hold, in the thread that met its point: the incarnation's events so far and the
    world as it left it go to the fork server, then the incarnation SIGSTOPs its own
    process group (`os.killpg(0, SIGSTOP)`: the signal is delivered before the call
    returns, so no code of the agent's runs between the point and the stop; the processes
    it started stop with it). The server proves the stop (`waitpid` shows it stopped by
    SIGSTOP) and that the report's events end at the point. Woken by SIGCONT, it reads
    the world the other incarnation left (exactly one runs at any instant: the world is
    handed over with the turn, as one server would hold it) and takes it in place
    (`World.adopt`). A thread of the agent's that traced an event between the report and
    the stop would stand past the point unseen by the server: the count is compared after
    the wake, and a difference is reported (`late`: the schedule is never judged). Bound:
    such a thread runs again from the SIGCONT, while this one takes the world in (a few
    microseconds); one that traces an event then is reported `late` too (an error, never
    a verdict), one that calls the world then, without a traced event, meets it as its
    own incarnation left it."""
    from ..pipeline.incarnation import held

    policy: RealHold

    def hold(where: str) -> None:
        count = len(tracer.events)
        with held():  # its time limit does not run while it is stopped
            listeners, world._listeners = world._listeners, []
            before, world.model.before_request = world.model.before_request, None
            try:
                wire.send(out_fd, {"job": pause["id"], "kind": "held", "where": where,
                                   "events": list(tracer.events), "world": _pickled(world),
                                   "saves": list(policy.saves)})
            finally:
                world._listeners, world.model.before_request = listeners, before
            os.killpg(0, signal.SIGSTOP)
            message = wire.receive(pause["in_fd"])
            if len(tracer.events) != count:
                policy.late = (f"{len(tracer.events) - count} events traced after its hold "
                               f"{where} was reported")
            world.adopt(pickle.loads(message["world"]))

    wake = pause.get("wake")
    policy = RealHold(pause.get("target"), wake[1] if wake and wake[0] == "save" else None,
                      ctx.scenario.checkpoint, ctx.root, hold)
    policy.late = None
    if wake and wake[0] == "request":
        def first_request(request: Any) -> None:
            world.model.before_request = None
            hold("at its first model request")

        world.model.before_request = first_request
    return policy


def _pickled(world: Any) -> bytes:
    """The world as sent to faultsim: its datetimes as they were (world/clock.py)."""
    with faithful_copies():
        return pickle.dumps(world)
