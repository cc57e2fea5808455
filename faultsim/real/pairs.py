"""Schedules of two crashes in subprocess mode: the run resumed from each first crash
state that passed is killed at every kill point of its own course (representative
coverage: at those `classes.cover_courses` chooses over every resumed course's classes),
and what that leaves is judged (in shares, verdicts shared across them).

Part of the subprocess backend: may import `pipeline/`, `pool`, `jobs`, `crashes` and
`judging`."""
from __future__ import annotations

from dataclasses import dataclass

import freezegun.api as _real_time

from ..core.classes import cover_courses
from ..errors import NonDeterminismError, WorkerDied
from ..killpoints import KillPoint
from ..pipeline.shards import shard_of
from ..pipeline.sweep import Earlier, Sweep, first_crashes
from ..scenario import Scenario
from .crashes import Target, crash_targets
from .jobs import new_job, report_of
from .judging import Memo, crash_entries, judge_states, owner_of
from .pool import ForkServers, JobResult


def explore_pairs(pool: ForkServers, scenario: Scenario, first: Target,
                  chosen: list[KillPoint], progress, drive: bool, equivalences: bool,
                  shard: tuple[int, int] | None = None) -> int:
    """Every schedule of two crashes: for each first crash state that passed (one per class
    of equal or equivalent states), the run resumed from it is killed at every kill point
    of its own course, and each crash state that leaves is resumed and judged. Returns the
    second kills landed.

    Pruning, as in-process: a first crash whose state equals (or is equivalent to) one
    already explored gives the same resumed run, so its pairs are counted, not run again;
    a second crash state equal to one already judged (after any first crash) shares its
    verdict, and so does one that differs only in a file its class's resumed run destroyed
    before reading it. What subprocess mode cannot prune: a state that has one more file
    than a judged one (the real directory does not tell which names a run looked up).

    `shard` (--shard I/N): the first stage judged every first crash state (reporting only
    its own), so every shard has every first crash's course here; the second crash states
    are split by class (`_sharded`)."""
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
        report = report_of(result, f"the resumed run after {reps[n].point.id}")
        if report["kind"] != "done":
            raise WorkerDied(f"the resumed run after {reps[n].point.id} ended by {result.how} "
                             f"{result.code} while its course was learned")
        courses[n] = tuple(report["events"])

    # an equivalent state was resumed, not this one: learn its own course afresh
    pool.run([new_job(("course", n), files=rep.state.as_dict(),
                      world=first.crashed[rep.point.id][0], downtime=downtime)
              for n, rep in enumerate(reps)
              if rep.result is None or rep.result.events is None], course_done)
    for n, rep in enumerate(reps):
        if n not in courses:
            courses[n] = tuple(rep.result.events)
    # representative coverage: the second crashes chosen over the classes of every resumed
    # course, as in-process (classes.cover_courses); None: every kill point of each
    pairs = cover_courses(((top.golden.kill_points(list(courses[n])), courses[n])
                           for n in range(len(reps))), run.coverage.per_class, run.seed) \
        if run.coverage is not None and run.coverage.representative else None
    targets = []
    for n, rep in enumerate(reps):
        point, order, state = rep.point, rep.order, rep.state
        course = courses[n]
        sub = Sweep(top.golden, top.runs, equivalences=False,
                    earlier=(Earlier(point, order, state.persisted, course),))
        points = top.golden.kill_points(list(course))
        if pairs is not None:
            points = [points[k] for k in pairs.chosen[n]]
        targets.append(Target(("pair", n), sub, points,
                               (state.as_dict(), first.crashed[point.id][0])))
    if progress is not None:
        progress(0, len(targets), stage="pairs (process)")
    share = max(4, 2 * pool.workers)
    if shard is not None:
        return _sharded(pool, scenario, targets, reps, progress, drive, equivalences, shard,
                        share, stats, started)
    # In shares of a few first crashes: the crash states of one share are held in memory
    # (files and world of each) until judged; the verdicts carry over in `memo`.
    memo, landed = Memo(), 0
    for start in range(0, len(targets), share):
        part = targets[start:start + share]
        landed += crash_targets(pool, part, drive, downtime)
        judge_states(pool, scenario, part, progress, equivalences, "pairs (process)", memo,
                     done_before=start, units=len(targets))
        for target in part:
            target.crashed = {}  # judged: only failing verdicts keep their state
    for target, rep in zip(targets, reps):
        stats.total += rep.count * len(target.points)
    if pairs is not None:  # judged: each chosen point whose kill landed (crash_targets)
        run.pair_coverage = pairs.to_json([
            {k for k, p in zip(pairs.chosen[n], t.points) if p.id not in t.unjudged}
            for n, t in enumerate(targets)])
    stats.seconds += _real_time.real_perf_counter() - started
    return landed


def _sharded(pool: ForkServers, scenario: Scenario, targets: list[Target], reps: list,
             progress, drive: bool, equivalences: bool, shard: tuple[int, int], share: int,
             stats, started: float) -> int:
    """The pair stage of shard i/n: every second crash state of every target is keyed
    first, the keys split by class (`judging.owner_of`, over all targets at once: a
    class's owner needs the whole class), then this shard crashes again and judges only the
    states it owns. Returns the kills landed in that second pass.

    Why the shards' resumed pairs add up to the whole run's, each with the whole run's
    verdict. Every shard judged every first crash state (`report_only`), so `targets` are
    the whole run's, in its order. A second crash state shares a verdict (`Memo`) only
    under its exact key or its masked class, and each is joined with the other here, so
    every memo entry a state reads or writes is its own class's. The owner judges its
    classes' states in the whole run's shares and order (the same `share`, its other
    states left out), so it meets the same memo before each and takes the same decision:
    the same state is resumed, the others share its verdict. A point whose kill failed
    twice in the first pass goes to the shard its id hashes to, as the first stage's do.

    Why two passes. A class's owner is known only once every second crash state is keyed,
    and holding every state until then would hold them all at once (14,053 explored on
    tests/data/tiny.toml; held all at once, a store's pair sweep peaked at 1.7 GB against
    131 MB in shares, docs/how-to/subprocess-mode.md). So the first pass keeps the keys
    only, and the second crashes again where this shard owns a state, checking that the
    same kill leaves the same state (`_Entry.met`: SQLite's side files blanked, as their
    random nonce differs in every run).

    The cost: in memory, what the whole run holds (one share's crash states), plus a few
    keys per second crash state; in CPU, every first crash state resumed (the first stage),
    every course killed at every point (a driver run each and a fork per point, as the
    whole run does), and its own points killed again (a driver run for each course with
    one): a shard costs about the whole run's kills and first stage, plus 1/N of the kills
    and of the pairs' resumed runs (docs/explanation/engine.md, shards: measured)."""
    downtime = scenario.profile.downtime
    expected: dict = {}  # (target's tag, point id) -> the key its state is met by
    mine: set = set()  # (target's tag, point id) of the states this shard owns
    keyed: list = []
    for start in range(0, len(targets), share):  # the first pass: keys only
        part = targets[start:start + share]
        crash_targets(pool, part, drive, downtime)
        keyed += [_Key(e.target.tag, e.point.id, e.exact, e.cls, e.stable, e.met)
                  for e in crash_entries(part, equivalences)]
        for target in part:
            target.crashed = {}
    owner = owner_of(keyed, shard[1])
    i = shard[0] - 1
    for key in keyed:
        expected[(key.tag, key.point)] = key.met
        if owner[key.exact] == i:
            mine.add((key.tag, key.point))
    del keyed
    memo, landed = Memo(), 0
    for start in range(0, len(targets), share):  # the second pass: this shard's states
        part = targets[start:start + share]
        every, failed = {}, {}
        for target in part:
            # a point whose kill failed twice in the first pass: no state, so no class; its
            # finding goes to the shard its id hashes to (as judge_states does)
            failed[id(target)] = {p: why for p, why in target.unjudged.items()
                                  if shard_of(("p", p), shard[1]) == i}
            every[id(target)], target.unjudged = target.points, {}
            target.points = [p for p in target.points if (target.tag, p.id) in mine]
        landed += crash_targets(pool, part, drive, downtime)
        for target in part:
            crashed = {p.id for p in target.points}
            target.unjudged.update(failed[id(target)])
            target.points = [p for p in every[id(target)]
                             if p.id in crashed or p.id in failed[id(target)]]
        entries = crash_entries(part, equivalences)
        for entry in entries:
            if expected[(entry.target.tag, entry.point.id)] != entry.met:
                raise NonDeterminismError(
                    f"{entry.point.id} after {entry.target.sweep.earlier[0].point.id}: the "
                    "crash state differs from the one met before; the agent is not "
                    "deterministic")
        judge_states(pool, scenario, part, progress, equivalences, "pairs (process)", memo,
                     done_before=start, units=len(targets), entries=entries)
        for target in part:
            target.crashed = {}  # judged: only failing verdicts keep their state
    for target, rep in zip(targets, reps):  # this shard's schedules (the shards add up)
        stats.total += rep.count * len(target.points)
    stats.seconds += _real_time.real_perf_counter() - started
    return landed


@dataclass(frozen=True)
class _Key:
    """A second crash state's keys, kept from the first pass (`owner_of` reads these)."""

    tag: tuple
    point: str
    exact: tuple
    cls: tuple | None
    stable: tuple | None
    met: tuple
