"""Killing real processes: each `Target` incarnation SIGKILLed at each of its kill
points, by crash drivers (one clean run forking a copy that dies at each point) or by
replaying the prefix per point. Every kill is checked to have landed (`KillDidNotLand`); a
point whose kill did not land, or whose child died without reporting, is crashed once more
by a replay, and one whose second try fails too is that point's finding
(`pipeline.unjudged`, `Target.unjudged`): the sweep goes on.

Part of the subprocess backend: may import `pipeline/`, `pool` and `jobs`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import KillDidNotLand, WorkerDied
from ..killpoints import KillPoint
from ..pipeline.golden import compare_traces
from ..pipeline.sweep import Sweep
from ..pipeline.unjudged import twice
from .jobs import new_job, report_of
from .pool import ForkServers, JobResult


@dataclass
class Target:
    """One incarnation to crash at each of `points`: the first (no `start`), or the one
    resumed from a crash state (`start`: its files and its world, pickled). Its verdicts go
    to `sweep`, whose trace is the incarnation's clean course."""

    tag: tuple
    sweep: Sweep
    points: list[KillPoint]
    start: tuple | None = None
    crashed: dict = field(default_factory=dict)  # point id -> (world bytes, files)
    unjudged: dict = field(default_factory=dict)  # point id -> why its kill failed twice


def _start_job(job_id: Any, target: Target, downtime: float, **kw: Any) -> dict:
    if target.start is None:
        return new_job(job_id, **kw)
    files, world = target.start
    return new_job(job_id, files=files, world=world, downtime=downtime, **kw)


def one_crash(pool: ForkServers, sweep: Sweep, point: KillPoint, start: tuple | None,
              downtime: float, tag: tuple = ()) -> tuple[bytes, dict]:
    """One child killed at `point` of the incarnation `start` describes (None: the first;
    else its files and pickled world): the world and files it left (a replay)."""
    target = Target(tag, sweep, [point], start)
    crash_targets(pool, [target], False, downtime)
    if point.id in target.unjudged:
        raise KillDidNotLand(target.unjudged[point.id])
    return target.crashed[point.id]


def crash_targets(pool: ForkServers, targets: list[Target], drive: bool, downtime: float
                  ) -> int:
    """Kill each target at each of its points; what is left goes to `target.crashed`.

    Driving (fork servers): one clean driver run of the incarnation per share, forking a
    copy that dies by SIGKILL at every kill point of its share; points before the first
    event are replayed. Replaying: one child per kill point that runs the prefix and
    SIGKILLs itself there. A point whose kill was not proven landed (or whose child died
    without reporting) is replayed once more, alone; twice: `target.unjudged`. Returns the
    kills landed (each one checked)."""
    jobs, replayed, driven = [], {}, {}
    for target in targets:
        rest = [p for p in target.points if p.index > 0] if drive else []
        for point in (p for p in target.points if not drive or p.index == 0):
            job = _start_job(("crash", *target.tag, point.id), target, downtime, kill=point)
            replayed[job["id"]] = (target, point)
            jobs.append(job)
        if not rest:
            continue
        # many incarnations to drive (pairs): one driver each; else the points are shared
        shares = 1 if len(targets) >= pool.workers else max(1, min(pool.workers, len(rest)))
        for k in range(shares):
            job = _start_job(("drive", *target.tag, k), target, downtime, timed=False)
            job["drive"] = [(p.index, p.offset) for p in rest[k::shares]]
            # a clean run (already known to finish) plus a fork, a death and a look at the
            # disk per kill point: bounded, but not by one incarnation's limit
            if pool.timeout:
                job["deadline"] = 3 * pool.timeout + 5 + 0.5 * len(job["drive"])
            driven[job["id"]] = (target, {(p.index, p.offset): p for p in rest[k::shares]})
            jobs.append(job)
    trouble: dict = {}  # (target's place, point id) -> (target, point, the first try's why)

    def replay_done(target: Target, point: KillPoint, result: JobResult) -> None:
        report = report_of(result, f"the crash run for {point.id}")
        if report["kind"] != "killed" or not result.sigkilled:
            raise KillDidNotLand(
                f"{point.id} never came: the "
                f"{'first' if target.start is None else 'resumed'} incarnation "
                f"{'ended with ' + (report.get('error') or 'an outcome')}"
                if report["kind"] == "done" else
                f"{point.id}: the child reported a kill but ended by {result.how} "
                f"{result.code}, not SIGKILL")
        target.crashed[point.id] = (report["world"], result.files)

    def in_trouble(target: Target, points: list[KillPoint], why: str) -> None:
        for point in points:
            if point.id not in target.crashed:
                trouble.setdefault((id(target), point.id), (target, point, why))

    def driven_done(target: Target, by_place: dict, result: JobResult) -> None:
        report = report_of(result, "a crash driver")
        if report["kind"] != "done" or report["error"] is not None:
            raise KillDidNotLand(f"a crash driver's clean run ended with "
                                 f"{report.get('error') or report['kind']}")
        compare_traces(target.sweep.trace, report["events"])  # the clean run's: the scenario's
        for message in result.crashes:
            point = by_place[tuple(message["point"])]
            if message["sigkilled"]:
                target.crashed[point.id] = (message["world"], message["files"])
            else:
                in_trouble(target, [point], f"{point.id}: the copy forked there did not die "
                           "by SIGKILL")
        missing = [p for p in by_place.values() if p.id not in target.crashed]
        for point in missing:
            in_trouble(target, [point], f"{point.id} never came in the driver's run")

    def done(job: dict, result: JobResult) -> None:
        if job["id"] in replayed:
            target, point = replayed[job["id"]]
            try:
                replay_done(target, point, result)
            except (KillDidNotLand, WorkerDied) as exc:
                in_trouble(target, [point], str(exc))
            return
        target, by_place = driven[job["id"]]
        try:
            driven_done(target, by_place, result)
        except (KillDidNotLand, WorkerDied) as exc:  # the driver's own: each of its points
            in_trouble(target, list(by_place.values()), str(exc))

    pool.run(jobs, done)
    # each point in trouble crashed once more, alone, by a replay: the same on any worker
    # count (a driver's share of points depends on it, a replay does not)
    for target, point, why in trouble.values():
        def again(target: Target = target, point: KillPoint = point) -> None:
            job = _start_job(("again", *target.tag, point.id), target, downtime, kill=point)
            replay_done(target, point, pool.run([job])[job["id"]])

        failed = twice(again, why)[1]
        if failed is not None:
            target.unjudged[point.id] = failed
    return sum(len(t.crashed) for t in targets)
