"""The sweep in subprocess mode: every incarnation is a real process on a real directory.

The pipeline is the in-process one (golden run, kill points, crash, resume, judge with the
same oracle); what differs is who does the work. A golden run and each crash run are
children of a fork server; a crash run's child SIGKILLs itself at its kill point and the
server reads what is left on disk (and in Redis). Every kill is counted: a crash run whose
child did not die by SIGKILL at its point is an error, never a pass. Equal crash states
(same files, same world) are resumed once.

Schedules of one or two crashes (each resumed run killed again at every kill point of its
own course) under the process model, and the version probe (P4): a power loss cannot be
staged on a real file system from user space (faultsim's own model of it runs in-process).
"""
from __future__ import annotations

import pickle
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

import freezegun.api as _real_time

from ..crashmodel import CrashState, process_state
from ..errors import KillDidNotLand, SubprocessModeError, WorkerDied  # noqa: F401
from ..killpoints import KillPoint, register_phases
from ..options import FIXED_TIMEOUT, ExploreOptions, select
from ..oracle import RESUME_GUARDS, CrashRun, Golden, judge, unknown_version_refused
from ..pipeline.golden import CleanRun, compare_traces, golden_checked, routed_only
from ..pipeline.incarnation import resumed_limit
from ..pipeline.incarnation import world_signature
from ..pipeline.probes import PROBE_VERSION, tamper_versions
from ..pipeline.sweep import (Earlier, Plan, ResumeResult, Sweep, first_crashes,
                              masked_digest)
from ..report import ModelRun, Report, ResumeSummary, Verdict
from ..scenario import Scenario
from .pool import ForkServers, JobResult, ServerFailed


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
                       timeout: float | str | None = "auto", seed: str = "0",
                       workers: int = 1,
                       shard: tuple[int, int] | None = None, fork_server: bool = True,
                       crash_model: Any = None, crashes: int | None = None,
                       progress: Callable[..., None] | None = None,
                       plan: Callable[[Plan], None] | None = None,
                       equivalences: bool = True, stats: dict | None = None) -> Report:
    """`agent` is an importable spec (MODULE[:ATTR] or FILE.py[:ATTR]): the fork servers
    import it themselves. `crashes=2` also kills each resumed run at every kill point of
    its own course (crashes during recovery; None or 1: single crashes). The version probe
    (P4) runs with every full run (no `only`, shard 1). `stats`, when given, receives
    counts (kills landed, resumes, pairs, seconds) for benchmarks and tests."""
    options = ExploreOptions(crash_model=crash_model or "process",
                             crashes=1 if crashes is None else crashes, seed=seed,
                             timeout=timeout, workers=workers, shard=shard, only=only,
                             equivalences=equivalences, mode="subprocess")
    return explore_resolved(agent, scenario, options.resolve(scenario),
                            agent_name=agent_name, progress=progress, plan=plan,
                            fork_server=fork_server, stats=stats)


def explore_resolved(agent: str, scenario: Scenario, options: ExploreOptions, *,
                     agent_name: str | None = None,
                     progress: Callable[..., None] | None = None,
                     plan: Callable[[Plan], None] | None = None, fork_server: bool = True,
                     stats: dict | None = None) -> Report:
    """The subprocess-mode exploration, with resolved `options`."""
    workers, seed, timeout = options.workers or 1, options.seed, options.timeout
    only, shard, equivalences = options.only, options.shard, options.equivalences
    crashes = options.crashes
    if crashes > 2:
        raise SubprocessModeError(
            f"{scenario.path}: subprocess mode enumerates schedules of at most 2 crashes, "
            f"not {crashes}: the search of longer schedules runs in-process")
    report = Report()
    started = _real_time.real_perf_counter()
    with ExitStack() as stack:
        redis_url = redis_for(stack, scenario)
        try:
            pool = stack.enter_context(ForkServers(agent, scenario.path, workers=workers,
                                                   seed=seed, timeout=timeout,
                                                   fork_server=fork_server,
                                                   redis_url=redis_url))
        except ServerFailed as exc:
            raise WorkerDied(f"{scenario.path}: {exc}") from None
        golden = golden_of(pool, scenario)
        points = golden.kill_points()
        chosen = select(points, only, shard)
        name = agent_name or agent
        run = ModelRun(scenario=scenario, agent=name, crash_model="process",
                       kill_points=points, explored=chosen, seed=seed, crashes=crashes,
                       mode="subprocess", timeout=timeout, shard=shard,
                       shard_by="kill point")  # its crash states are known only by killing
        sweep = Sweep(golden, {"process": run}, equivalences=False, keep_traces=crashes >= 2)
        if plan is not None:
            plan(Plan(scenario.id, len(points), len(chosen), {"process": len(chosen)},
                      crashes))
        golden_seconds = _real_time.real_perf_counter() - started
        first = _Target((), sweep, chosen)
        landed = _sweep(pool, scenario, [first], progress, drive=fork_server,
                        equivalences=equivalences)
        position = {p.id: n for n, p in enumerate(chosen)}
        run.verdicts.sort(key=lambda v: position[v.kill_point.id])
        pairs_landed = 0
        if crashes >= 2:
            pairs_landed = _pairs(pool, scenario, first, chosen, progress, fork_server,
                                  equivalences)
        if only is None and (shard is None or shard[0] == 1):
            probe = _version_probe(pool, scenario, golden)
            if probe is not None:
                run.probes.append(probe)
        run.seconds = _real_time.real_perf_counter() - started
        report.runs.append(run)
        report.golden_seconds += golden_seconds
        report.sweep_seconds += run.seconds - golden_seconds
        if stats is not None:
            stats.update(kills_landed=landed, crash_states=len(run.verdicts),
                         resumed=run.judged, seconds=run.seconds - golden_seconds,
                         pair_kills_landed=pairs_landed,
                         pairs_explored=run.depth(2).explored if crashes >= 2 else 0,
                         pairs_resumed=run.depth(2).resumed if crashes >= 2 else 0)
    return report


def redis_for(stack: ExitStack, scenario: Scenario) -> Callable[[int], str] | None:
    """For a Redis store: a server of faultsim's own on a free loopback port, and one
    database per fork server (each judges its crash states in its own)."""
    if scenario.store.kind != "redis":
        return None
    from .redis_server import RedisServer

    server = stack.enter_context(RedisServer())
    return lambda slot: f"redis://127.0.0.1:{server.port}/{slot % 16}"


def survey_subprocess(agent: str, scenario: Scenario, *, timeout: float | None = FIXED_TIMEOUT,
                      seed: str = "0") -> list[KillPoint]:
    """The clean run's kill points, from real processes (`faultsim list`)."""
    with ExitStack() as stack:
        redis_url = redis_for(stack, scenario)
        pool = stack.enter_context(ForkServers(agent, scenario.path, workers=1, seed=seed,
                                               timeout=timeout, redis_url=redis_url))
        return golden_of(pool, scenario).kill_points()


def golden_of(pool: ForkServers, scenario: Scenario) -> Golden:
    results = pool.run([_job(("golden", 1), timed=True), _job(("golden", 2), timed=True)])

    def clean_run(n: int) -> CleanRun:
        result = results[("golden", n)]
        report = _report_of(result, "the clean run")
        register_phases(report.get("phases", {}))  # read its trace as the agent's process would
        outcome = report["outcome"] if report["kind"] == "done" else None  # else killed
        return CleanRun(outcome, report.get("error"), report["events"],
                        (report["world"], result.files), details=report.get("details", ""),
                        world=_with_refused(pickle.loads(report["world"]), result),
                        files=result.files, left_behind=tuple(result.left_behind),
                        escapes=report.get("escapes", []))

    first = golden_checked(scenario, clean_run, pool.workdir)
    pool.timeout = resumed_limit(pool.asked_timeout,
                                 [results[("golden", n)].report.get("seconds", 0.0)
                                  for n in (1, 2)])
    world, files = first.kept
    world = pickle.loads(world)
    routed_only(scenario, world, first.outcome)
    return Golden.of(first.outcome, world, files, first.events, scenario.checkpoint)


@dataclass
class _Target:
    """One incarnation to crash at each of `points`: the first (no `start`), or the one
    resumed from a crash state (`start`: its files and its world, pickled). Its verdicts go
    to `sweep`, whose trace is the incarnation's clean course."""

    tag: tuple
    sweep: Sweep
    points: list[KillPoint]
    start: tuple | None = None
    crashed: dict = field(default_factory=dict)  # point id -> (world bytes, files)


@dataclass
class _Entry:
    """One crash state to judge, and the keys it shares a verdict by."""

    target: _Target
    point: KillPoint
    state: Any
    world: bytes
    exact: tuple  # (state digest, world signature): equal states
    cls: tuple | None  # (masked digest, watched file, world signature): equivalent states
    watch: str | None


@dataclass
class _Memo:
    """Verdicts of crash states already judged, shared by every state equal (or equivalent)
    to one of them."""

    results: dict = field(default_factory=dict)  # exact key -> ResumeResult
    classes: dict = field(default_factory=dict)  # masked class -> exact key of its first
    fresh_for: dict = field(default_factory=dict)  # exact key -> (target tag, point id)
    ran_for: dict = field(default_factory=dict)  # id(result) -> the exact key it ran for

    def blind(self, cls: tuple | None) -> ResumeResult | None:
        """The class's verdict, if its first state's resumed run destroyed the watched file
        before reading it (so its content cannot matter)."""
        result = self.results.get(self.classes.get(cls)) if cls is not None else None
        return result if result is not None and result.blind_to_content(cls[1]) else None


def _start_job(job_id: Any, target: _Target, downtime: float, **kw: Any) -> dict:
    if target.start is None:
        return _job(job_id, **kw)
    files, world = target.start
    return _job(job_id, files=files, world=world, downtime=downtime, **kw)


def _sweep(pool: ForkServers, scenario: Scenario, targets: list[_Target], progress,
           drive: bool = True, equivalences: bool = True, stage: str | None = None) -> int:
    """Crash each target at every one of its points, then resume each distinct crash state
    once (over all targets: a state equal to one judged shares its verdict). Returns the
    kills landed."""
    landed = _crash(pool, targets, drive, scenario.profile.downtime)
    _judge(pool, scenario, targets, progress, equivalences, stage)
    return landed


def _judge(pool: ForkServers, scenario: Scenario, targets: list[_Target], progress,
           equivalences: bool, stage: str | None, memo: "_Memo | None" = None,
           done_before: int = 0, units: int | None = None) -> None:
    """Judge every crash state the targets left; the verdicts go to each target's sweep.
    `memo` carries what earlier calls judged (the pairs go in shares)."""
    # Resume each distinct crash state once. States that differ only in the content of
    # the file being written at the kill (a torn temp file, mostly) share the verdict of
    # the first of them when its resumed run destroyed that file before reading it.
    entries = []
    for target in targets:
        trace = target.sweep.trace
        watch_of = _last_written(trace)
        for point in target.points:
            world_bytes, files = target.crashed[point.id]
            state = process_state(files)[0]
            signature = world_signature(pickle.loads(world_bytes))
            watch = trace[point.index - 1].subject if point.torn else watch_of.get(point.index)
            masked = masked_digest(state, watch) if equivalences else None
            entries.append(_Entry(target, point, state, world_bytes,
                                  (state.digest(), signature),
                                  (masked, watch, signature) if masked is not None else None,
                                  watch))
    memo = memo if memo is not None else _Memo()
    results, fresh_for, ran_for = memo.results, memo.fresh_for, memo.ran_for
    entry_of: dict[Any, _Entry] = {}  # job id -> its entry (kept here, not sent)
    golden = targets[0].sweep.golden
    total, settled = len(entries), [0]
    units = units or len(targets)

    def tell(done: int) -> None:  # in kill points, or (pairs) in first crash states
        if progress is not None:
            if stage is None:
                progress(done, total)
            else:
                progress(done_before + done * len(targets) // max(1, total), units,
                         stage=stage)

    def resume_done(job: dict, result: JobResult) -> None:
        entry = entry_of.pop(job["id"])
        sweep = entry.target.sweep
        resumed = _resumed(golden, sweep.schedule(entry.point), entry.state, result,
                           entry.watch, sweep.keep_traces)
        results[entry.exact] = resumed
        ran_for[id(resumed)] = entry.exact
        settled[0] += 1
        tell(min(settled[0], total))

    def resume_jobs(batch: list[_Entry]) -> list[dict]:
        jobs = []
        for entry in batch:
            if entry.exact in fresh_for:
                continue
            fresh_for[entry.exact] = (entry.target.tag, entry.point.id)
            job = _job(("resume", entry.exact), files=entry.state.as_dict(),
                       world=entry.world, downtime=scenario.profile.downtime)
            job["watch"] = entry.watch
            entry_of[job["id"]] = entry
            jobs.append(job)
        return jobs

    first_wave, deferred = [], []
    for entry in entries:
        if entry.exact in results:  # judged before (an earlier share of the pairs)
            continue
        if entry.cls is not None and entry.cls in memo.classes:  # wait for its class
            deferred.append(entry)
            continue
        if entry.cls is not None:
            memo.classes[entry.cls] = entry.exact
        first_wave.append(entry)
    pool.run(resume_jobs(first_wave), resume_done)
    second_wave = [e for e in deferred if e.exact not in results and memo.blind(e.cls) is None]
    pool.run(resume_jobs(second_wave), resume_done)

    for entry in entries:
        result = results.get(entry.exact) or memo.blind(entry.cls)
        fresh = fresh_for.get(entry.exact) == (entry.target.tag, entry.point.id)
        sweep = entry.target.sweep
        sweep.resumed_from.setdefault(id(result), ran_for[id(result)])
        sweep.record("process", entry.point, 0, entry.state, result, [], fresh, entry.exact)
    tell(total)


def _with_refused(world: Any, result: JobResult) -> Any:
    """The connections the jail refused to the incarnation's process tree
    (faultsim.real.jail), noted as the network guard notes its own: the same finding."""
    for address in result.refused:
        world.unrouted.append(f"{address} from a process the agent started, or code below "
                              f"Python's sockets (incarnation {world.incarnation})")
    return world


def _crash_run(schedule: list[KillPoint], state: Any, report: dict,
               result: JobResult) -> CrashRun:
    """A resumed child's report as the oracle judges it (a sweep's state, or the probe's)."""
    crash_run = CrashRun(schedule, state, _with_refused(pickle.loads(report["world"]), result),
                         outcome=report.get("outcome"), error=report.get("error"),
                         timed_out=report.get("timed_out", False), final=result.files,
                         escapes=report["escapes"], left_behind=list(result.left_behind),
                         strays=report.get("strays", []),
                         resume_positions=[report["first_position"]]
                         if report["first_position"] is not None else [],
                         events=report["events"])
    if report["kind"] != "done":
        crash_run.error = f"the resumed process died ({result.how} {result.code})"
    return crash_run


def _resumed(golden: Golden, schedule: list[KillPoint], state: Any, result: JobResult,
             watch: str | None, keep_trace: bool) -> ResumeResult:
    """What a resumed child showed, judged by the resume guards (as in-process)."""
    report = _report_of(result, f"the resumed run after {schedule[-1].id}")
    crash_run = _crash_run(schedule, state, report, result)
    violations = judge(golden, crash_run, RESUME_GUARDS)
    outcome = crash_run.outcome
    return ResumeResult(
        violations, ResumeSummary.of(crash_run) if violations else None,
        crash_run.resume_positions[0] if crash_run.resume_positions else None,
        result.seconds, first_content={watch: report["first_touch"]} if watch else {},
        events=report["events"] if keep_trace else None,
        escalated=outcome is not None and outcome.status == "escalated")


def judged_resume(pool: ForkServers, scenario: Scenario, sweep: Sweep, point: KillPoint,
                  state: Any, world: bytes, keep_trace: bool = False) -> ResumeResult:
    """Resume `state` (left by a crash at `point`) once, and judge the run (a replay)."""
    job = _job(("resume",), files=state.as_dict(), world=world,
               downtime=scenario.profile.downtime)
    result = pool.run([job])[job["id"]]
    return _resumed(sweep.golden, sweep.schedule(point), state, result, None, keep_trace)


def one_crash(pool: ForkServers, sweep: Sweep, point: KillPoint, start: tuple | None,
              downtime: float, tag: tuple = ()) -> tuple[bytes, dict]:
    """One child killed at `point` of the incarnation `start` describes (None: the first;
    else its files and pickled world): the world and files it left (a replay)."""
    target = _Target(tag, sweep, [point], start)
    _crash(pool, [target], False, downtime)
    return target.crashed[point.id]


def _pairs(pool: ForkServers, scenario: Scenario, first: _Target, chosen: list[KillPoint],
           progress, drive: bool, equivalences: bool) -> int:
    """Every schedule of two crashes: for each first crash state that passed (one per class
    of equal or equivalent states), the run resumed from it is killed at every kill point
    of its own course, and each crash state that leaves is resumed and judged. Returns the
    second kills landed.

    Pruning, as in-process: a first crash whose state equals (or is equivalent to) one
    already explored gives the same resumed run, so its pairs are counted, not run again;
    a second crash state equal to one already judged (after any first crash) shares its
    verdict, and so does one that differs only in a file its class's resumed run destroyed
    before reading it. What subprocess mode cannot prune: a state that has one more file
    than a judged one (the real directory does not tell which names a run looked up)."""
    top = first.sweep
    run = top.runs["process"]
    stats = run.depth(2)
    started = _real_time.real_perf_counter()
    position = {p.id: n for n, p in enumerate(chosen)}
    reps = first_crashes(top, "process", position)
    downtime = scenario.profile.downtime
    courses: dict[int, tuple] = {}

    def course_done(job: dict, result: JobResult) -> None:
        n = job["id"][1]
        report = _report_of(result, f"the resumed run after {reps[n].point.id}")
        if report["kind"] != "done":
            raise WorkerDied(f"the resumed run after {reps[n].point.id} ended by {result.how} "
                             f"{result.code} while its course was learned")
        courses[n] = tuple(report["events"])

    # an equivalent state was resumed, not this one: learn its own course afresh
    pool.run([_job(("course", n), files=rep.state.as_dict(),
                   world=first.crashed[rep.point.id][0], downtime=downtime)
              for n, rep in enumerate(reps)
              if rep.result is None or rep.result.events is None], course_done)
    targets = []
    for n, rep in enumerate(reps):
        point, order, state = rep.point, rep.order, rep.state
        course = courses[n] if n in courses else tuple(rep.result.events)
        sub = Sweep(top.golden, top.runs, equivalences=False,
                    earlier=(Earlier(point, order, state.persisted, course),))
        targets.append(_Target(("pair", n), sub, top.golden.kill_points(list(course)),
                               (state.as_dict(), first.crashed[point.id][0])))
    if progress is not None:
        progress(0, len(targets), stage="pairs (process)")
    # In shares of a few first crashes: the crash states of one share are held in memory
    # (files and world of each) until judged; the verdicts carry over in `memo`.
    memo, landed, share = _Memo(), 0, max(4, 2 * pool.workers)
    for start in range(0, len(targets), share):
        part = targets[start:start + share]
        landed += _crash(pool, part, drive, downtime)
        _judge(pool, scenario, part, progress, equivalences, "pairs (process)", memo,
               done_before=start, units=len(targets))
        for target in part:
            target.crashed = {}  # judged: only failing verdicts keep their state
    for target, rep in zip(targets, reps):
        stats.total += rep.count * len(target.points)
    stats.seconds += _real_time.real_perf_counter() - started
    return landed


def _version_probe(pool: ForkServers, scenario: Scenario, golden: Golden) -> Verdict | None:
    """P4, as in-process: the crash state after the second completed turn with every
    checkpoint rewritten with a version no release can know (a file, an SQLite row, a Redis
    value) must be refused loudly and left untouched. None when there is none to rewrite."""
    marks = [e.index for e in golden.trace if e.kind == "mark.checkpoint.B"]
    index = marks[min(1, len(marks) - 1)] if marks else len(golden.trace) // 2
    point = KillPoint(index, None, "version-probe", "probe-unknown-version",
                      f"#{index}, every checkpoint rewritten with version {PROBE_VERSION}")
    target = _Target(("probe",), Sweep(golden, {}), [point])
    _crash(pool, [target], False, 0.0)
    world_bytes, files = target.crashed[point.id]
    changed = tamper_versions(files, golden.checkpoint)
    if not changed:
        return None
    state = CrashState.of("process", f"checkpoint version set to {PROBE_VERSION}",
                          {**files, **changed})
    result = pool.run([_job(("probe",), files=state.as_dict(), world=world_bytes,
                            downtime=scenario.profile.downtime)])[("probe",)]
    report = _report_of(result, "the version probe's resumed run")
    before = pickle.loads(world_bytes)
    crash_run = _crash_run([point], state, report, result)
    world = crash_run.world
    applied = len(world.ledger.applied()) - len(before.ledger.applied())
    asked = (sum(1 for q in world.model.requests if q.ok) -
             sum(1 for q in before.model.requests if q.ok))
    violation = unknown_version_refused(crash_run, PROBE_VERSION, changed, applied, asked)
    violations = [violation] if violation is not None else []
    return Verdict(point, "process", "a checkpoint from a future release", violations, state,
                   ResumeSummary.of(crash_run) if violations else None, golden, 0)

def _last_written(trace: list) -> dict[int, str]:
    """For each event index, the file most recently created or written at or before it."""
    out, last = {}, None
    for event in trace:
        if event.kind in ("fs.create", "fs.write"):
            last = event.subject
        if last is not None:
            out[event.index] = last
    return out


def _crash(pool: ForkServers, targets: list[_Target], drive: bool, downtime: float) -> int:
    """Kill each target at each of its points; what is left goes to `target.crashed`.

    Driving (fork servers): one clean driver run of the incarnation per share, forking a
    copy that dies by SIGKILL at every kill point of its share; points before the first
    event are replayed. Replaying: one child per kill point that runs the prefix and
    SIGKILLs itself there. Returns the kills landed (each one checked)."""
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

    def done(job: dict, result: JobResult) -> None:
        if job["id"] in replayed:
            target, point = replayed[job["id"]]
            report = _report_of(result, f"the crash run for {point.id}")
            if report["kind"] != "killed" or not result.sigkilled:
                raise KillDidNotLand(
                    f"{point.id} never came: the "
                    f"{'first' if target.start is None else 'resumed'} incarnation "
                    f"{'ended with ' + (report.get('error') or 'an outcome')}"
                    if report["kind"] == "done" else
                    f"{point.id}: the child reported a kill but ended by {result.how} "
                    f"{result.code}, not SIGKILL")
            target.crashed[point.id] = (report["world"], result.files)
            return
        target, by_place = driven[job["id"]]
        report = _report_of(result, "a crash driver")
        if report["kind"] != "done" or report["error"] is not None:
            raise KillDidNotLand(f"a crash driver's clean run ended with "
                                 f"{report.get('error') or report['kind']}")
        compare_traces(target.sweep.trace, report["events"])
        for message in result.crashes:
            point = by_place[tuple(message["point"])]
            if not message["sigkilled"]:
                raise KillDidNotLand(f"{point.id}: the copy forked there did not die by "
                                     "SIGKILL")
            target.crashed[point.id] = (message["world"], message["files"])
        missing = [p for p in by_place.values() if p.id not in target.crashed]
        if missing:
            raise KillDidNotLand(f"{missing[0].id} never came in the driver's run "
                                 f"({len(missing)} kill points missed)")

    pool.run(jobs, done)
    return sum(len(t.crashed) for t in targets)
