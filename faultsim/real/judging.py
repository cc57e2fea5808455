"""Judging crash states left by real processes: each distinct state resumed once in a
child and judged by the resume guards, states equal (or equivalent) to one judged
sharing its verdict (`Memo`), the verdicts recorded in each target's sweep. A resumed child
that dies without reporting is run once more; twice, and its point is that point's finding
(`pipeline.unjudged`), as is a point whose kill failed twice (`Target.unjudged`).

Part of the subprocess backend: may import `pipeline/`, the oracle, `pool`, `jobs` and
`crashes`."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from ..core.crashmodel import files_digest, process_state
from ..errors import WorkerDied
from ..killpoints import KillPoint
from ..judge.dbview import SIDE_FILES
from ..judge.oracle import RESUME_GUARDS, CrashRun, Golden, judge
from ..pipeline.incarnation import world_signature
from ..pipeline import unjudged
from ..pipeline.shards import Classes, shard_of
from ..pipeline.sweep import ResumeResult, Sweep, masked_digest
from ..pipeline.unjudged import twice
from ..reports.report import ResumeSummary
from ..scenario import Scenario
from .crashes import Target
from .jobs import new_job, report_of, with_refused
from .pool import ForkServers, JobResult


@dataclass
class _Entry:
    """One crash state to judge, and the keys it shares a verdict by."""

    target: Target
    point: KillPoint
    state: Any
    world: bytes
    exact: tuple  # (state digest, world signature): equal states
    cls: tuple | None  # (masked digest, watched file, world signature): equivalent states
    watch: str | None
    # (digest with SQLite's -journal/-wal blanked, world signature), for a state with one:
    # the same on every run, where the exact key is not (`stable_digest`)
    stable: tuple | None = None

    @property
    def met(self) -> tuple:
        """The key a second look at the same kill must find again (`stable`, or `exact`)."""
        return self.stable or self.exact


def stable_digest(state: Any) -> str | None:
    """The state's digest with the content of SQLite's side files (`-journal`, `-wal`)
    blanked (their names kept), or None without any. Why: a rollback journal's header
    carries a random nonce (and a WAL random salts), drawn by SQLite itself, so the same
    kill in two runs leaves states whose exact keys differ; the rest of the state is the
    same. Shards decide owners by keys, so they join each exact key with this one
    (`owner_of`): a larger class, never a wrong share (sharing stays by exact key)."""
    if not any(p.endswith(SIDE_FILES) and isinstance(d, bytes) for p, d in state.files):
        return None
    return files_digest(tuple((p, b"\0faultsim:side file" if p.endswith(SIDE_FILES) and
                               isinstance(d, bytes) else d) for p, d in state.files))


@dataclass
class Memo:
    """Verdicts of crash states already judged, shared by every state equal (or equivalent)
    to one of them."""

    results: dict = field(default_factory=dict)  # exact key -> ResumeResult
    classes: dict = field(default_factory=dict)  # masked class -> exact key of its first
    fresh_for: dict = field(default_factory=dict)  # exact key -> (target tag, point id)
    ran_for: dict = field(default_factory=dict)  # id(result) -> the exact key it ran for
    failed: dict = field(default_factory=dict)  # exact key -> why its resumed child died twice

    def blind(self, cls: tuple | None) -> ResumeResult | None:
        """The class's verdict, if its first state's resumed run destroyed the watched file
        before reading it (so its content cannot matter)."""
        result = self.results.get(self.classes.get(cls)) if cls is not None else None
        return result if result is not None and result.blind_to_content(cls[1]) else None


def owner_of(entries: list, n: int) -> dict:
    """Each entry's (an `_Entry`, or anything with its `exact` and `cls`) exact key -> the shard (0-based, of `n`) that owns its state. A state
    shares a verdict only by its exact key or its class key (`cls`), so each exact key is
    joined with its class key (union-find) and a shard takes whole classes: the states of a
    class are met in the same order as in the whole run, the same one is resumed and the
    others share its verdict, so the shards' resumed runs add up to the whole run's
    (tests/test_shards.py). A class goes to the shard its least key hashes to, as
    in-process (faultsim.inprocess.sharding)."""
    # a state with SQLite side files is also joined by its `stable` key: its exact key is
    # drawn afresh in each shard, so only a class named by a stable key (the least: "j"
    # sorts first) has one owner in every shard
    classes = Classes()
    for e in entries:
        classes.find(("k", *e.exact))
        if e.cls is not None:
            classes.union(("k", *e.exact), ("m", *e.cls))
        if e.stable is not None:
            classes.union(("k", *e.exact), ("j", *e.stable))
    return {e.exact: shard_of(classes.find(("k", *e.exact)), n) for e in entries}


def owned(entries: list[_Entry], shard: tuple[int, int]) -> list[_Entry]:
    """Shard i/n's crash states (`--shard` in subprocess mode), in their order: whole
    classes (`owner_of`)."""
    i, n = shard
    owner = owner_of(entries, n)
    return [e for e in entries if owner[e.exact] == i - 1]


def crash_entries(targets: list[Target], equivalences: bool) -> list[_Entry]:
    """The crash state each target's kill left at each of its points (`target.crashed`),
    in order, with the keys it shares a verdict by; a point whose kill failed twice
    (`target.unjudged`) has none."""
    entries = []
    for target in targets:
        trace = target.sweep.trace
        watch_of = _last_written(trace)
        for point in target.points:
            if point.id in target.unjudged:  # no state to judge: its finding (judge_states)
                continue
            world_bytes, files = target.crashed[point.id]
            state = process_state(files)[0]
            signature = world_signature(pickle.loads(world_bytes))
            watch = trace[point.index - 1].subject if point.torn else watch_of.get(point.index)
            masked = masked_digest(state, watch) if equivalences else None
            stable = stable_digest(state)
            entries.append(_Entry(target, point, state, world_bytes,
                                  (state.digest(), signature),
                                  (masked, watch, signature) if masked is not None else None,
                                  watch, (stable, signature) if stable is not None else None))
    return entries


def judge_states(pool: ForkServers, scenario: Scenario, targets: list[Target], progress,
                 equivalences: bool, stage: str | None, memo: "Memo | None" = None,
                 done_before: int = 0, units: int | None = None,
                 shard: tuple[int, int] | None = None, report_only: bool = False,
                 entries: list[_Entry] | None = None) -> None:
    """Judge every crash state the targets left; the verdicts go to each target's sweep.
    `memo` carries what earlier calls judged (the pairs go in shares). `shard`: judge only
    the states shard i/n owns (`owned`); a point whose kill failed twice goes, as its
    finding, to the shard its id hashes to. `report_only` (with `shard`; the first crashes
    of a run with a pair stage): judge every state as the whole run does, for the pair
    stage needs every first crash's course and run, but count and report only those the
    shard owns (`Sweep.reports`, as in-process). `entries`: the states to judge, already
    taken from the targets (`crash_entries`) and chosen (the pair stage's shards)."""
    # Resume each distinct crash state once. States that differ only in the content of
    # the file being written at the kill (a torn temp file, mostly) share the verdict of
    # the first of them when its resumed run destroyed that file before reading it.
    if entries is None:
        entries = crash_entries(targets, equivalences)
    mine: Any = None  # report_only: whether this shard owns an exact key
    if shard is not None and report_only:
        owner, i = owner_of(entries, shard[1]), shard[0] - 1
        mine = lambda exact: owner[exact] == i  # noqa: E731
        for target in targets:
            target.sweep.reports = mine
    elif shard is not None:
        entries = owned(entries, shard)
    memo = memo if memo is not None else Memo()
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

    died: list = []  # (entry, why) of resumed children that died: tried once more
    failed = memo.failed

    def resume_done(job: dict, result: JobResult) -> None:
        entry = entry_of.pop(job["id"])
        sweep = entry.target.sweep
        try:
            resumed = _resumed(golden, sweep.schedule(entry.point), entry.state, result,
                               entry.watch, sweep.keep_traces)
        except WorkerDied as exc:
            died.append((entry, str(exc)))
            return
        settle(entry, resumed)

    def settle(entry: _Entry, resumed: ResumeResult) -> None:
        results[entry.exact] = resumed
        ran_for[id(resumed)] = entry.exact
        settled[0] += 1
        tell(min(settled[0], total))

    def run_wave(batch: list[_Entry]) -> None:
        pool.run(resume_jobs(batch), resume_done)
        for entry, why in died:  # once more, alone (the same on any worker count)
            def again(entry: _Entry = entry) -> ResumeResult:
                sweep = entry.target.sweep
                return judged_resume(pool, scenario, sweep, entry.point, entry.state,
                                     entry.world, sweep.keep_traces, entry.watch)

            resumed, why = twice(again, why)
            if resumed is None:
                failed[entry.exact] = why
                settled[0] += 1
            else:
                settle(entry, resumed)
        died.clear()

    def resume_jobs(batch: list[_Entry]) -> list[dict]:
        jobs = []
        for entry in batch:
            if entry.exact in fresh_for:
                continue
            fresh_for[entry.exact] = (entry.target.tag, entry.point.id)
            job = new_job(("resume", entry.exact), files=entry.state.as_dict(),
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
    run_wave(first_wave)
    second_wave = [e for e in deferred if e.exact not in results and memo.blind(e.cls) is None
                   and e.exact not in failed]
    run_wave(second_wave)

    for target in targets:
        for point in target.points:
            if point.id in target.unjudged and (
                    shard is None or shard_of(("p", point.id), shard[1]) == shard[0] - 1):
                unjudged.record(target.sweep, "process", point, target.unjudged[point.id])
    for entry in entries:
        if entry.exact in failed:  # its resumed child died twice: the point's finding
            if mine is not None and not mine(entry.exact):
                continue  # another shard's state: its finding is reported there
            unjudged.record(entry.target.sweep, "process", entry.point, failed[entry.exact])
            continue
        result = results.get(entry.exact) or memo.blind(entry.cls)
        fresh = fresh_for.get(entry.exact) == (entry.target.tag, entry.point.id)
        sweep = entry.target.sweep
        sweep.resumed_from.setdefault(id(result), ran_for[id(result)])
        sweep.record("process", entry.point, 0, entry.state, result, [], fresh, entry.exact)
    tell(total)


def crash_run_of(schedule: list[KillPoint], state: Any, report: dict,
                 result: JobResult) -> CrashRun:
    """A resumed child's report as the oracle judges it (a sweep's state, or the probe's)."""
    crash_run = CrashRun(schedule, state, with_refused(pickle.loads(report["world"]), result),
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
    report = report_of(result, f"the resumed run after {schedule[-1].id}")
    crash_run = crash_run_of(schedule, state, report, result)
    violations = judge(golden, crash_run, RESUME_GUARDS)
    outcome = crash_run.outcome
    return ResumeResult(
        violations, ResumeSummary.of(crash_run) if violations else None,
        crash_run.resume_positions[0] if crash_run.resume_positions else None,
        result.seconds, first_content={watch: report["first_touch"]} if watch else {},
        events=report["events"] if keep_trace else None,
        escalated=outcome is not None and outcome.status == "escalated")


def judged_resume(pool: ForkServers, scenario: Scenario, sweep: Sweep, point: KillPoint,
                  state: Any, world: bytes, keep_trace: bool = False,
                  watch: str | None = None) -> ResumeResult:
    """Resume `state` (left by a crash at `point`) once, and judge the run (a replay)."""
    job = new_job(("resume",), files=state.as_dict(), world=world,
                  downtime=scenario.profile.downtime)
    job["watch"] = watch
    result = pool.run([job])[job["id"]]
    return _resumed(sweep.golden, sweep.schedule(point), state, result, watch, keep_trace)


def _last_written(trace: list) -> dict[int, str]:
    """For each event index, the file most recently created or written at or before it."""
    out, last = {}, None
    for event in trace:
        if event.kind in ("fs.create", "fs.write"):
            last = event.subject
        if last is not None:
            out[event.index] = last
    return out
