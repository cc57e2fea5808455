"""The `pause` crash model in subprocess mode (issue 55): the incarnation is frozen by
SIGSTOP of its process group at a kill point, not killed; the next incarnation, a real
process of its own, starts on the same directory and the same world (after the profile's
downtime) and runs; the frozen one is woken by SIGCONT at a wake point of the new one's
course and runs on to its end; then the new one goes on. The schedules and their verdicts
are the in-process model's (`faultsim.pipeline.pause`): the same pause points (the clean
run's boundary kill points but the start), the same wake points (the new incarnation's
first model request, after each of its checkpoint saves, its end), the same rules.

Each schedule is one job of a fork server, which runs both incarnations as two children
(`faultsim.real.pause_server`: how each stop is proven at its point, and how the world is
handed from the one that stops to the one that goes on). Here: the jobs, the proofs read
from their reports, and the runs handed to `judge_pause`.

Why no stop is placed by timing: each incarnation stops itself in the thread that traced
the point's event (`child._pausing`), before that call returns: the place is the event's
index, as a kill in this mode is (`child.RealKill`). The server proves the stop
(WUNTRACED; every process of the group `T`); here the paused incarnation's report is
proven to end exactly at the point (its last event is the point's), and each incarnation's
own check after its wake (`late`) to have traced nothing between its report and its stop.
Failing any, the schedule is never judged: StopCameLate (the agent's process went on past
its point: a thread of its own) or KillDidNotLand (the point never came). Nothing is
retried: no hold is timed, so a second try would meet the same thing.

Not done here: a second crash (`--crashes 2` with pause), and the downtime's expiry of a
Redis store's keys between the two incarnations (both meet the one Redis server as it is:
its TTLs run in real time).

Part of the subprocess backend: may import `pipeline/`, the oracle, `pool` and `jobs`.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.tree import regular
from ..errors import KillDidNotLand, StopCameLate, WorkerDied
from ..judge.oracle import Golden
from ..killpoints import KillPoint
from ..pipeline.incarnation import Incarnation
from ..pipeline.pause import PAUSE, Explored, Wake, pause_points, verdict_of
from ..core.trace import Event
from .jobs import new_job, with_refused
from .pool import ForkServers, JobResult


@dataclass
class Turn:
    """One incarnation of a schedule, as `judge_pause` reads it."""

    name: str
    result: Incarnation = field(default_factory=Incarnation)
    events: list[Event] = field(default_factory=list)


@dataclass
class PauseRun:
    """One pause schedule run in a fork server (the fields `pipeline.pause` reads)."""

    point: KillPoint
    wake: Wake
    paused: Turn
    new: Turn
    world: Any
    final: dict
    rollbacks: list[str]
    saves: int  # the new incarnation's checkpoint saves (all of them, when it ran to its end)
    woke: bool
    held_at: int | None
    hung: str | None = None
    stops: int = 0  # SIGSTOPs proven landed at their points
    left: int = 0  # groups alive after the server closed them (never expected)


def pause_job(point: KillPoint, wake: Wake, downtime: float) -> dict:
    job = new_job(("pause", point.index, wake.kind, wake.n), downtime=downtime)
    job["pause"] = {"point": point.index, "wake": (wake.kind, wake.n)}
    return job


def run_of(point: KillPoint, wake: Wake, result: JobResult, scenario: Any) -> PauseRun:
    """The schedule's run from the server's report, every proof checked first."""
    out = result.report
    if out is None or out.get("kind") != "pause":
        raise WorkerDied(f"{point.id} ~ {wake.label}: the fork server sent no pause report "
                         f"(its child ended by {result.how} {result.code})")
    reports = out.get("reports", {})
    mine = reports.get("paused", [])
    error = out.get("error")
    if error is not None:
        kind, said = error
        if any(m.get("kind") == "crashed" for ms in reports.values() for m in ms):
            raise WorkerDied(f"{point.id} ~ {wake.label}: {said}")
        if kind == "never-reached":
            raise KillDidNotLand(f"{point.id} never came: {said}; the agent is not "
                                 "deterministic across runs")
        if kind == "not-stopped":
            raise StopCameLate(f"{point.id} ~ {wake.label}: {said}")
        if "hung" not in said:
            raise WorkerDied(f"{point.id} ~ {wake.label}: {said}")
    held = mine[0]
    if not held["events"] or held["events"][-1].index != point.index or \
            len(held["events"]) != point.index:
        raise StopCameLate(f"{point.id}: the paused incarnation stopped after "
                           f"{len(held['events'])} events, not at the point's")
    for ms in reports.values():
        for m in ms:
            if m.get("late"):
                raise StopCameLate(f"{point.id} ~ {wake.label}: {m['late']}")
    theirs = reports.get("new", [])
    paused, new = _turn("paused", mine), _turn("new", theirs)
    hung = None
    if error is not None:  # an incarnation outran its limit without a report
        hung = error[1]
    mid = theirs[0] if theirs else None
    # the world as the last to run left it: the new one's rest after a wake point, else
    # the woken one (woken at the new one's end)
    order = (theirs, mine) if mid is None or mid.get("kind") != "held" else (mine, theirs)
    last = next((m for ms in reversed(order) for m in reversed(ms)
                 if m.get("kind") == "done"), held)
    world = pickle.loads(last["world"])
    return PauseRun(point, wake, paused, new, with_refused(world, result),
                    regular(result.files), _rollbacks(mine, theirs, mid),
                    len((theirs[-1] if theirs else {}).get("saves", [])) if mid is not None
                    else 0, bool(out.get("woke")), out.get("held_at"), hung,
                    stops=out.get("stops", 0), left=out.get("left", 0))


def _turn(name: str, messages: list[dict]) -> Turn:
    turn = Turn(name)
    done = next((m for m in messages if m.get("kind") == "done"), None)
    last = messages[-1] if messages else None
    if last is not None:
        turn.events = list(last.get("events", []))
    if done is not None:
        r = turn.result
        r.outcome, r.error = done.get("outcome"), done.get("error")
        r.timed_out, r.details = done.get("timed_out", False), done.get("details", "")
        r.contract = done.get("contract")
    elif messages:
        turn.result.error = f"the {name} incarnation did not end"
    turn.result.events = turn.events
    return turn


def _rollbacks(paused: list[dict], new: list[dict], mid: dict | None) -> list[str]:
    """Lost updates, as in process (`inprocess.pause.Saves`): the saves of the new
    incarnation and of the woken one, in the order they ran (the new one's up to its wake
    point, the woken one's, the new one's rest); a save of the woken one that leaves a
    checkpoint holding a shorter history than the new one's last save of it."""
    before = len(paused[0].get("saves", [])) if paused else 0  # its saves before the pause
    woken = paused[-1].get("saves", [])[before:] if len(paused) > 1 else []
    first = mid.get("saves", []) if mid is not None else []
    rest = new[-1].get("saves", [])[len(first):] if mid is not None and len(new) > 1 else []
    lengths: dict[str, tuple[int, str]] = {}
    found = []
    for who, saves in (("new", first), ("woken", woken), ("new", rest)):
        for index, path, n in saves:
            if n is None:
                continue
            old = lengths.get(path)
            if old is not None and n < old[0] and who == "woken" and old[1] == "new":
                found.append(f"#{index} of the woken incarnation: {path} went back from "
                             f"{old[0]} to {n} messages (the new incarnation's save lost)")
            lengths[path] = (n, who)
    return found


def explore_pause(pool: ForkServers, scenario: Any, golden: Golden, points: list[KillPoint],
                  progress: Callable[[str], None] | None = None) -> Explored:
    """Every pause schedule of `points`, as in process (`inprocess.pause.explore_pause`):
    for each point the `end` schedule first (it counts the new incarnation's saves), then
    woken at the new one's first request and after each of its saves; a schedule whose
    wake point never came is the `end` one, not judged twice. The schedules are jobs of
    the fork servers, run in parallel: each depends on its point and wake alone."""
    downtime = scenario.profile.downtime
    chosen = pause_points(points)
    ends = pool.run([pause_job(p, Wake("end"), downtime) for p in chosen])
    last = {p.index: run_of(p, Wake("end"), ends[("pause", p.index, "end", 0)], scenario)
            for p in chosen}
    wakes = {p.index: [Wake("request")] + [Wake("save", k)
                                           for k in range(1, last[p.index].saves + 1)]
             for p in chosen}
    rest = pool.run([pause_job(p, w, downtime) for p in chosen for w in wakes[p.index]])
    found = Explored([])
    for p in chosen:
        runs = [run_of(p, w, rest[("pause", p.index, w.kind, w.n)], scenario)
                for w in wakes[p.index]] + [last[p.index]]
        found.judge(p, runs, golden, progress)
    return found


def pause_stage(pool: ForkServers, scenario: Any, golden: Golden, points: list[KillPoint],
                chosen: list[KillPoint], run: Any,
                progress: Callable[..., None] | None = None) -> Explored:
    """The pause model's verdicts on `run` (a ModelRun of model `pause`), with its note."""
    said = (lambda line: progress(0, 1, stage=f"pause: {line}")) \
        if progress is not None else None
    found = explore_pause(pool, scenario, golden, chosen, said)
    for r, violations in found.runs:
        run.verdicts.append(verdict_of(r, violations, golden))
        run.judged += 1
    run.notes.append(
        f"  pauses        {found.stops} SIGSTOPs landed (each incarnation stopped itself at "
        f"its point, proven stopped, its trace ending there) in {found.schedules} pause "
        f"schedules; {found.left} groups left behind")
    return found


__all__ = ["PAUSE", "explore_pause", "pause_stage", "run_of"]
