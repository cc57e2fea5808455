"""Schedules of two crashes in subprocess mode: the run resumed from each first crash
state that passed is killed at every kill point of its own course (representative
coverage: at those `classes.cover_courses` chooses over every resumed course's classes),
and what that leaves is judged (in shares, verdicts shared across them).

Part of the subprocess backend: may import `pipeline/`, `pool`, `jobs`, `crashes` and
`judging`."""
from __future__ import annotations

import freezegun.api as _real_time

from ..core.classes import cover_courses
from ..errors import WorkerDied
from ..killpoints import KillPoint
from ..pipeline.sweep import Earlier, Sweep, first_crashes
from ..scenario import Scenario
from .crashes import Target, crash_targets
from .jobs import new_job, report_of
from .judging import Memo, judge_states
from .pool import ForkServers, JobResult


def explore_pairs(pool: ForkServers, scenario: Scenario, first: Target,
                  chosen: list[KillPoint], progress, drive: bool, equivalences: bool) -> int:
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
    # In shares of a few first crashes: the crash states of one share are held in memory
    # (files and world of each) until judged; the verdicts carry over in `memo`.
    memo, landed, share = Memo(), 0, max(4, 2 * pool.workers)
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
