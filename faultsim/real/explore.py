"""The sweep in subprocess mode: every incarnation is a real process on a real directory.

The pipeline is the in-process one (golden run, kill points, crash, resume, judge with the
same oracle); what differs is who does the work. A golden run and each crash run are
children of a fork server; a crash run's child SIGKILLs itself at its kill point and the
server reads what is left on disk (and in Redis). Every kill is counted: a crash run whose
child did not die by SIGKILL at its point is an error, never a pass. Equal crash states
(same files, same world) are resumed once.

Single crashes under the process model: a power loss cannot be staged on a real file
system from user space (faultsim's own model of it runs in-process).
"""
from __future__ import annotations

import pickle
from contextlib import ExitStack
from typing import Any, Callable

import freezegun.api as _real_time

from ..crashmodel import process_state
from ..errors import KillDidNotLand, UsageError, WorkerDied
from ..killpoints import KillPoint, kill_points
from ..options import select
from ..oracle import RESUME_GUARDS, CrashRun, Golden, judge
from ..pipeline.golden import CleanRun, compare_traces, golden_checked
from ..pipeline.incarnation import world_signature
from ..pipeline.sweep import Plan, ResumeResult, Sweep, masked_digest
from ..report import ModelRun, Report, ResumeSummary
from ..scenario import Scenario
from .pool import ForkServers, JobResult, ServerFailed


class SubprocessModeError(UsageError, ValueError):
    """A request subprocess mode cannot honour (named in words)."""


def _job(job_id: Any, *, files: dict | None = None, world: bytes | None = None,
         kill: KillPoint | None = None, downtime: float = 0.0, timed: bool = True) -> dict:
    return {"id": job_id, "files": files, "world": world, "downtime": downtime,
            "kill": None if kill is None else (kill.index, kill.offset), "timed": timed}


def _report_of(result: JobResult, what: str) -> dict:
    report = result.report
    if report is None or report.get("kind") == "crashed":
        detail = report["error"] if report else f"it ended by {result.how} {result.code}"
        raise WorkerDied(f"{what}: the child process died without reporting: {detail}")
    return report


def explore_subprocess(agent: str, scenario: Scenario, *, agent_name: str | None = None,
                       only: Callable[[KillPoint], bool] | None = None,
                       timeout: float | None = 30.0, seed: str = "0", workers: int = 1,
                       shard: tuple[int, int] | None = None, fork_server: bool = True,
                       crash_model: Any = None, crashes: int | None = None,
                       progress: Callable[..., None] | None = None,
                       plan: Callable[[Plan], None] | None = None,
                       equivalences: bool = True, stats: dict | None = None) -> Report:
    """`agent` is an importable spec (MODULE[:ATTR] or FILE.py[:ATTR]): the fork servers
    import it themselves. `stats`, when given, receives counts (kills landed, resumes,
    seconds) for benchmarks and tests."""
    models = [crash_model] if isinstance(crash_model, str) else list(crash_model or
                                                                   ["process"])
    if models != ["process"]:
        raise SubprocessModeError(
            f"subprocess mode crashes processes (SIGKILL) only, not {', '.join(models)}: a "
            "power loss cannot be staged on a real file system; use the in-process mode")
    report = Report()
    started = _real_time.real_perf_counter()
    with ExitStack() as stack:
        redis_url = _redis_for(stack, scenario)
        try:
            pool = stack.enter_context(ForkServers(agent, scenario.path, workers=workers,
                                                   seed=seed, timeout=timeout,
                                                   fork_server=fork_server,
                                                   redis_url=redis_url))
        except ServerFailed as exc:
            raise WorkerDied(f"{scenario.path}: {exc}") from None
        golden = _golden(pool, scenario)
        points = kill_points(golden.trace)
        chosen = select(points, only, shard)
        name = agent_name or agent
        run = ModelRun(scenario=scenario, agent=name, crash_model="process",
                       kill_points=points, explored=chosen, seed=seed, crashes=1,
                       mode="subprocess", timeout=timeout)
        sweep = Sweep(golden, {"process": run}, equivalences=False)
        if plan is not None:
            plan(Plan(scenario.id, len(points), len(chosen), {"process": len(chosen)}, 1))
        golden_seconds = _real_time.real_perf_counter() - started
        landed = _sweep(pool, scenario, sweep, chosen, progress, drive=fork_server,
                        equivalences=equivalences)
        position = {p.id: n for n, p in enumerate(chosen)}
        run.verdicts.sort(key=lambda v: position[v.kill_point.id])
        run.seconds = _real_time.real_perf_counter() - started
        report.runs.append(run)
        report.golden_seconds += golden_seconds
        report.sweep_seconds += run.seconds - golden_seconds
        if stats is not None:
            stats.update(kills_landed=landed, crash_states=len(run.verdicts),
                         resumed=run.judged, seconds=run.seconds - golden_seconds)
    return report


def _redis_for(stack: ExitStack, scenario: Scenario) -> Callable[[int], str] | None:
    """For a Redis store: a server of faultsim's own on a free loopback port, and one
    database per fork server (each judges its crash states in its own)."""
    if scenario.store.kind != "redis":
        return None
    from ..world.redis_server import RedisServer

    server = stack.enter_context(RedisServer())
    return lambda slot: f"redis://127.0.0.1:{server.port}/{slot % 16}"


def survey_subprocess(agent: str, scenario: Scenario, *, timeout: float | None = 30.0,
                      seed: str = "0") -> list[KillPoint]:
    """The clean run's kill points, from real processes (`faultsim list`)."""
    with ExitStack() as stack:
        redis_url = _redis_for(stack, scenario)
        pool = stack.enter_context(ForkServers(agent, scenario.path, workers=1, seed=seed,
                                               timeout=timeout, redis_url=redis_url))
        return kill_points(_golden(pool, scenario).trace)


def _golden(pool: ForkServers, scenario: Scenario) -> Golden:
    results = pool.run([_job(("golden", 1), timed=True), _job(("golden", 2), timed=True)])

    def clean_run(n: int) -> CleanRun:
        result = results[("golden", n)]
        report = _report_of(result, "the clean run")
        outcome = report["outcome"] if report["kind"] == "done" else None  # else killed
        return CleanRun(outcome, report.get("error"), report["events"],
                        (report["world"], result.files), result.files)

    first = golden_checked(scenario, clean_run, pool.workdir)
    world, files = first.kept
    return Golden.of(first.outcome, pickle.loads(world), files, first.events)


def _sweep(pool: ForkServers, scenario: Scenario, sweep: Sweep, chosen: list[KillPoint],
           progress, drive: bool = True, equivalences: bool = True) -> int:
    """Crash at every chosen point, then resume each distinct crash state once."""
    crashed = _crash_by_driving(pool, sweep, chosen) if drive else \
        _crash_by_replaying(pool, chosen)
    landed = len(crashed)

    # Resume each distinct crash state once. States that differ only in the content of
    # the file being written at the kill (a torn temp file, mostly) share the verdict of
    # the first of them when its resumed run destroyed that file before reading it.
    watch_of = _last_written(sweep.trace)
    entries = []
    for point in chosen:
        world_bytes, files = crashed[point.id]
        state = process_state(files)[0]
        signature = world_signature(pickle.loads(world_bytes))
        watch = sweep.trace[point.index - 1].subject if point.torn \
            else watch_of.get(point.index)
        masked = masked_digest(state, watch) if equivalences else None
        entries.append((point, state, world_bytes, (state.digest(), signature),
                        (masked, watch, signature) if masked is not None else None, watch))
    results: dict[tuple, ResumeResult] = {}
    fresh_for: dict[tuple, str] = {}  # exact key -> the point whose state was resumed
    entry_of: dict[tuple, tuple] = {}  # job id -> its entry (kept here, not sent)
    golden = sweep.golden
    settled = [0]

    def resume_done(job: dict, result: JobResult) -> None:
        point, state, _, exact, _, watch = entry_of.pop(job["id"])
        report = _report_of(result, f"the resumed run after {point.id}")
        world = pickle.loads(report["world"])
        crash_run = CrashRun([point], state, world, outcome=report.get("outcome"),
                             error=report.get("error"),
                             timed_out=report.get("timed_out", False),
                             final=result.files, escapes=report["escapes"],
                             resume_positions=[report["first_position"]]
                             if report["first_position"] is not None else [],
                             events=report["events"])
        if report["kind"] != "done":
            crash_run.error = f"the resumed process died ({result.how} {result.code})"
        violations = judge(golden, crash_run, RESUME_GUARDS)
        outcome = crash_run.outcome
        results[exact] = ResumeResult(
            violations, ResumeSummary.of(crash_run) if violations else None,
            crash_run.resume_positions[0] if crash_run.resume_positions else None,
            result.seconds, first_content={watch: report["first_touch"]} if watch else {},
            escalated=outcome is not None and outcome.status == "escalated")
        settled[0] += 1
        if progress is not None:
            progress(min(settled[0], len(chosen)), len(chosen))

    def resume_jobs(batch: list) -> list[dict]:
        jobs = []
        for entry in batch:
            exact = entry[3]
            if exact in fresh_for:
                continue
            fresh_for[exact] = entry[0].id
            job = _job(("resume", exact), files=entry[1].as_dict(), world=entry[2],
                       downtime=scenario.profile.downtime)
            job["watch"] = entry[5]
            entry_of[job["id"]] = entry
            jobs.append(job)
        return jobs

    first_wave, deferred, classes = [], [], {}
    for entry in entries:
        cls = entry[4]
        if cls is not None and cls in classes:  # wait for its class's first verdict
            deferred.append(entry)
            continue
        if cls is not None:
            classes.setdefault(cls, entry[3])
        first_wave.append(entry)
    pool.run(resume_jobs(first_wave), resume_done)
    blind = {cls: results[exact] for cls, exact in classes.items()
             if results[exact].blind_to_content(cls[1])}
    second_wave = [e for e in deferred if e[3] not in results and e[4] not in blind]
    pool.run(resume_jobs(second_wave), resume_done)

    for point, state, _, exact, cls, _ in entries:
        result = results.get(exact) or blind[cls]
        fresh = fresh_for.get(exact) == point.id
        sweep.record("process", point, 0, state, result, [], fresh, exact)
    if progress is not None:
        progress(len(chosen), len(chosen))
    return landed


def _last_written(trace: list) -> dict[int, str]:
    """For each event index, the file most recently created or written at or before it."""
    out, last = {}, None
    for event in trace:
        if event.kind in ("fs.create", "fs.write"):
            last = event.subject
        if last is not None:
            out[event.index] = last
    return out


def _crash_by_replaying(pool: ForkServers, chosen: list[KillPoint]) -> dict[str, tuple]:
    """One child per kill point: it runs the prefix and SIGKILLs itself there."""
    crashed: dict[str, tuple] = {}
    by_id = {p.id: p for p in chosen}

    def crash_done(job: dict, result: JobResult) -> None:
        point = by_id[job["id"][1]]
        report = _report_of(result, f"the crash run for {point.id}")
        if report["kind"] != "killed" or not result.sigkilled:
            raise KillDidNotLand(
                f"{point.id} never came: the first incarnation "
                f"{'ended with ' + (report.get('error') or 'an outcome')}"
                if report["kind"] == "done" else
                f"{point.id}: the child reported a kill but ended by {result.how} "
                f"{result.code}, not SIGKILL")
        crashed[point.id] = (report["world"], result.files)

    pool.run([_job(("crash", p.id), kill=p) for p in chosen], crash_done)
    return crashed


def _crash_by_driving(pool: ForkServers, sweep: Sweep, chosen: list[KillPoint]
                      ) -> dict[str, tuple]:
    """One clean driver run per worker, each forking a copy that dies by SIGKILL at every
    kill point of its share; points before the first event are replayed."""
    at_start = [p for p in chosen if p.index == 0]
    crashed = _crash_by_replaying(pool, at_start) if at_start else {}
    rest = [p for p in chosen if p.index > 0]
    if not rest:
        return crashed
    by_place = {(p.index, p.offset): p for p in rest}
    shares = max(1, min(pool.workers, len(rest)))
    jobs = []
    for k in range(shares):
        job = _job(("drive", k), timed=False)
        job["drive"] = [(p.index, p.offset) for p in rest[k::shares]]
        # a clean run (already known to finish) plus a fork, a death and a look at the
        # disk per kill point: bounded, but not by one incarnation's limit
        if pool.timeout:
            job["deadline"] = 3 * pool.timeout + 5 + 0.5 * len(job["drive"])
        jobs.append(job)

    def drive_done(job: dict, result: JobResult) -> None:
        report = _report_of(result, "a crash driver")
        if report["kind"] != "done" or report["error"] is not None:
            raise KillDidNotLand(f"a crash driver's clean run ended with "
                                 f"{report.get('error') or report['kind']}")
        compare_traces(sweep.trace, report["events"])
        for message in result.crashes:
            point = by_place[tuple(message["point"])]
            if not message["sigkilled"]:
                raise KillDidNotLand(f"{point.id}: the copy forked there did not die by "
                                     "SIGKILL")
            crashed[point.id] = (message["world"], message["files"])
        missing = [place for place in job["drive"] if by_place[place].id not in crashed]
        if missing:
            raise KillDidNotLand(f"{by_place[missing[0]].id} never came in the driver's run "
                                 f"({len(missing)} kill points missed)")

    pool.run(jobs, drive_done)
    return crashed
