"""One pause schedule in a fork server (subprocess mode's `pause` model, issue 55): two
children of the server, two real incarnations of the agent on the one sandbox directory,
exactly one of them running at any instant.

    paused  forked on the start state; runs into the pause point; reports its events and
            the world as it left it, and SIGSTOPs its own process group (`child._pausing`)
    new     forked once the stop is proven, on the same directory and that world (after
            the profile's downtime); runs into its wake point (its first model request,
            after its N-th checkpoint save) and stops itself the same way, or to its end
    woken   the paused one, sent the world the new one left and SIGCONTed; runs to its end
    rest    the new one, sent the world the woken one left and SIGCONTed; runs to its end

The world travels with the turn. Each child holds the world in its memory (the fake model,
the services, the ledger, the clock); since only one runs at a time, the one that stops
hands its world to the server and the one that goes on takes it in place
(`World.adopt`) before any code of its runs: every call either makes meets the world
exactly as the other left it, as two processes talking to one server would. (The command
backend serves one world over loopback to both; for a Python agent in a fork-server child
the world is in-process, and handing it over at each turn is the same world.)

Proof that each stop landed at its point, never timing: the child stops itself in the
thread that traced the point's event, by `killpg(0, SIGSTOP)`, delivered before that call
returns (so none of its code runs past the point); the server proves the leader stopped by
SIGSTOP (`waitpid`, WUNTRACED) and every process of its group stopped (`stop_groups`), and
that the events it reported end at the point (the paused one: exactly the clean run's
events up to the point's index, compared by faultsim; `Stop.proof`). A thread of the
agent's that traced an event between the report and the stop is seen after the wake
(`late`). A stop not proven so is never judged: faultsim raises StopCameLate
(`faultsim.real.pause`).

Every exit path SIGCONTs each child's group before SIGKILLing it, reaps it and reports a
process of either group still alive (`left`).

Part of the subprocess backend's fork server: may import `wire` and `host/`; the server's
own pieces (fork a child, put the start state in place, read what is left) come as `Ops`
(the server imports this module, not the other way round).
"""
from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import freezegun.api as _real_time

from ..host import jail as _jail
from ..host.groups import continue_groups, group_alive, stop_groups
from . import wire

STOP_SECONDS = 10.0  # how long a group may take to show every process stopped


@dataclass
class Ops:
    """What the fork server lends a pause schedule (`faultsim.real.server`)."""

    spawn: Any  # (ctx, job, out_fd, me, close) -> pid: a child of the job, its group's leader
    prepare: Any  # (ctx, job): the job's start state in place
    left_behind: Any  # (ctx) -> files: the directory (and Redis) as the children left it
    others: set  # the children alive: killed (continued first) if faultsim dies


@dataclass
class Kid:
    """One incarnation of the schedule: a child of the server with a pipe each way."""

    name: str
    pid: int
    reports: int  # the server's end of the child's reports
    feed: int  # the server's end of the pipe the child reads the world from at its wake
    others: set = field(default_factory=set)
    messages: list = field(default_factory=list)
    status: int | None = None  # its wait status once reaped

    def next(self, limit: float | None) -> dict | None:
        """Its next report, or None when it exited without one or outran `limit`."""
        ready, _, _ = select.select([self.reports], [], [], limit)
        if not ready:
            return None
        try:
            message = wire.receive(self.reports)
        except EOFError:
            return None
        self.messages.append(message)
        return message

    def stopped(self) -> str | None:
        """Why it is not proven stopped by its own SIGSTOP (one line), or None."""
        deadline = time.monotonic() + STOP_SECONDS
        while True:
            pid, status = os.waitpid(self.pid, os.WUNTRACED | os.WNOHANG)
            if pid:
                if os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP:
                    break
                self.status = status
                return f"it ended (wait status {status}) instead of stopping"
            if time.monotonic() > deadline:
                return f"it did not stop within {STOP_SECONDS:g} s"
            time.sleep(0.001)
        if not stop_groups([self.pid], STOP_SECONDS):
            return "a process of its group did not stop"
        return None

    def wake(self, world: bytes) -> None:
        wire.send(self.feed, {"world": world})
        continue_groups([self.pid])

    def reap(self, limit: float | None) -> None:
        """After its last report: wait for it to exit (killed past `limit`)."""
        if self.status is not None:
            return
        fd = os.pidfd_open(self.pid)
        try:
            if not select.select([fd], [], [], limit)[0]:
                os.killpg(self.pid, signal.SIGKILL)
        finally:
            os.close(fd)
        self.status = os.waitpid(self.pid, 0)[1]

    def close(self) -> bool:
        """On every path: SIGCONT its group (a stopped process runs nothing, its death
        included, until continued), SIGKILL it, reap it. True when a process of its group
        was still alive after that (never expected)."""
        if self.status is None:
            continue_groups([self.pid])
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                pass
        else:
            try:
                os.killpg(self.pid, signal.SIGCONT)
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.others.discard(self.pid)
        for fd in (self.reports, self.feed):
            try:
                os.close(fd)
            except OSError:
                pass
        return group_alive(self.pid)


def _spawn(ops: Ops, ctx: Any, job: dict, name: str, me: int, kids: list[Kid],
           **pause: Any) -> Kid:
    reports_r, reports_w = os.pipe()
    feed_r, feed_w = os.pipe()
    child_job = {**job, "pause": {"id": job["id"], "role": name, "in_fd": feed_r, **pause}}
    # the child keeps only its own ends (not the other incarnation's pipes either)
    close = (reports_r, feed_w) + tuple(fd for k in kids for fd in (k.reports, k.feed))
    pid = ops.spawn(ctx, child_job, reports_w, me, close=close)
    ops.others.add(pid)
    os.close(reports_w)
    os.close(feed_r)
    return Kid(name, pid, reports_r, feed_w, ops.others)


def run_pause(ops: Ops, ctx: Any, job: dict, out_fd: int, me: int,
              deadline: float | None) -> None:
    """The schedule `job["pause"]` asks for (`point`: the event index to pause after;
    `wake`: ("request", 0), ("save", N) or ("end", 0)); sends one "pause" message (each
    incarnation's reports, the stops proven, what went wrong) and the "exit" message with
    the files both left."""
    started = _real_time.real_perf_counter()
    spec = job["pause"]
    limit = job.get("deadline", deadline)
    out: dict[str, Any] = {"job": job["id"], "kind": "pause", "stops": 0, "error": None,
                           "woke": False, "where": None, "held_at": None}
    kids: list[Kid] = []
    ops.prepare(ctx, {**job, "downtime": 0.0})
    first = {k: v for k, v in job.items() if k != "pause"}
    try:
        paused = _spawn(ops, ctx, {**first, "world": None, "downtime": 0.0}, "paused", me,
                        kids, target=spec["point"])
        kids.append(paused)
        got = paused.next(limit)
        if got is None or got["kind"] != "held":
            out["error"] = ("never-reached", _said(got, paused))
            return
        why = paused.stopped()
        if why is not None:
            out["error"] = ("not-stopped", f"the paused incarnation's stop {got['where']}: "
                                           f"{why}")
            return
        out["stops"] += 1
        kind, n = spec["wake"]
        new = _spawn(ops, ctx, {**first, "world": got["world"]}, "new", me, kids,
                     wake=(kind, n) if kind != "end" else None)
        kids.append(new)
        mid = new.next(limit)
        if mid is None or mid["kind"] not in ("held", "done"):
            out["error"] = ("new-failed", _said(mid, new))
            return
        if mid["kind"] == "held":
            why = new.stopped()
            if why is not None:
                out["error"] = ("not-stopped", f"the new incarnation's hold {mid['where']}: "
                                               f"{why}")
                return
            out["stops"] += 1
            out["held_at"] = mid["events"][-1].index if mid["events"] else 0
        else:
            new.reap(limit)
        out["woke"] = mid["kind"] == "held" or kind == "end"
        if not out["woke"]:
            return  # its wake point never came: the `end` schedule is this one (not judged)
        paused.wake(mid["world"])
        last = paused.next(limit)
        if last is None or last["kind"] != "done":
            out["error"] = ("woken-failed", _said(last, paused))
            return
        paused.reap(limit)
        if mid["kind"] == "held":
            new.wake(last["world"])
            rest = new.next(limit)
            if rest is None or rest["kind"] != "done":
                out["error"] = ("new-failed", _said(rest, new))
                return
            new.reap(limit)
    finally:
        out["left"] = sum(kid.close() for kid in kids)
        out["reports"] = {kid.name: kid.messages for kid in kids}
        left = _jail.left_behind(me, ctx.jail.helpers if ctx.jail else set(),
                                 kids[0].pid if kids else 0, True)
        wire.send(out_fd, out)
        wire.send(out_fd, {"job": job["id"], "kind": "exit", "how": "exit", "code": 0,
                           "files": ops.left_behind(ctx), "left_behind": left,
                           "refused": _jail.refused(ctx.jail),
                           "seconds": _real_time.real_perf_counter() - started})


def _said(message: dict | None, kid: Kid) -> str:
    if message is None:
        return f"the {kid.name} incarnation ended or hung without a report"
    if message.get("kind") == "crashed":
        return f"the {kid.name} incarnation's process failed: {message.get('error', '')[-800:]}"
    if message.get("kind") == "done":
        o = message.get("outcome")
        return (f"the {kid.name} incarnation ended with "
                f"{message.get('error') or (o.status if o is not None else 'an outcome')} "
                f"after {len(message.get('events', []))} events")
    return f"the {kid.name} incarnation sent {message.get('kind')!r}"

