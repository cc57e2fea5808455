"""Schedules of two crashes: each first crash state (one per class) resumed and killed again
at every kill point of its own course, or (representative coverage) at the kill points
`classes.cover_courses` chooses over the classes of every resumed course."""
from __future__ import annotations

import copy
import os
from contextlib import nullcontext
from typing import Callable

import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not

from ..core.classes import cover_courses
from ..core.crashmodel import CrashState
from ..errors import NonDeterminismError
from ..killpoints import KillPoint
from ..judge.oracle import Golden
from ..pipeline.sweep import Earlier, ResumeResult, Sweep, first_crashes  # noqa: F401
from ..reports.report import DepthStats, ModelRun
from ..world import World
from .forking import sweep_forking
from .replaying import sweep_replaying
from .after_convergence import Shortcut
from .search_after_convergence import Known, converged_course
from .crash_feed import CrashFeed
from .sandbox import Crashed, Explorer


def sweep_after_first(ex: Explorer, golden: Golden, runs: dict[str, ModelRun], model: str,
                      point: KillPoint, order: int, state: CrashState,
                      result: ResumeResult | None, workers: int, memo: dict,
                      insensitive: dict, equivalences: bool, guarded: dict | None = None,
                      judged: dict | None = None, observed: Known | None = None,
                      known_course: tuple | None = None,
                      chosen: tuple[int, ...] | None = None,
                      crash: Callable[[KillPoint], Crashed] | None = None,
                      owns: Callable[[tuple], bool] | None = None,
                      last: int | None = None) -> tuple:
    """Crash at `point` again, then kill the run resumed from `state` at every kill point of
    its own course; the verdicts go to `runs[model]` (its depth-2 figures and failures).
    `result` is this very state's resumed run (its trace is the course), or None: then the
    course is learned afresh (an equivalent state was resumed, not this one). Returns the
    course. `memo`/`insensitive` share second crash states' verdicts between calls.
    `judged`: the single-crash sweep's verdicts by (model, event index, offset, order); a
    second crash after the resumed run met the clean run is composed from them
    (faultsim.inprocess.after_convergence), not resumed. `observed`: the second crashes
    resumed after earlier first crashes, by crash state and observable world; one equal
    to them is composed from that run, and the runs resumed here are learned into it
    once this first crash's sweep is over (after_convergence.py: why, and why only then).
    `known_course`: (course, meets) learned before (`course_of`); `chosen`: the positions
    of the course's kill points to crash at (representative coverage; None: every one).
    `crash`: where the first crash comes from (a `crash_feed.CrashFeed`'s, one driver run
    for all of them; None: `Explorer.crash`, a run of the prefix). `owns`: under --shard,
    whether this shard owns a second crash state, by its memo key (`sharding.PairSurvey`);
    the others are skipped. `last`: the course is known up to this event only (a horizon
    cut: `within_horizon`); the driver ends there at the latest.
    Returns the course and the positions where a second crash state was judged."""
    crashed = crash(point) if crash is not None else ex.crash(point, model)
    world, states = crashed.world, crashed.states
    if order >= len(states) or states[order].digest() != state.digest():
        raise NonDeterminismError(f"{point.id}: the crash state differs from the one "
                                  "judged before; the agent is not deterministic")
    pristine = copy.deepcopy(world)
    if known_course is not None:
        course, meets = known_course
    elif result is not None and result.events is not None:
        course, meets = tuple(result.events), result.meets
    else:
        # learned afresh, cut where it meets the clean run as the sweep's runs are (its
        # course then ends with the clean run's, convergence.course_events)
        course, meets = converged_course(ex, pristine, state)

    def start() -> World:
        w = copy.deepcopy(pristine)
        ex.prepare(w, state)
        return w

    sub = Sweep(golden, runs, memo=memo, insensitive=insensitive, equivalences=equivalences,
                guarded={} if guarded is None else guarded,
                earlier=(Earlier(point, order, state.persisted, course),), owns=owns)
    if meets is not None and judged:
        sub.shortcut = Shortcut(golden, judged, meets)
    sub.observed = observed
    points = golden.kill_points(course)
    at = range(len(points)) if chosen is None else chosen  # each crashed point's position
    if chosen is not None:
        points = [points[n] for n in chosen]
    if workers > 0 and hasattr(os, "fork"):
        # Representative coverage: the driver ends after the last chosen point's event.
        # Why no verdict depends on the rest of the run: a second crash's verdict is made
        # in the child forked at its point (its crash state, world and history are the
        # driver's at that point, and its resumed run is the child's own), so nothing the
        # driver does later reaches it; the first crash's own resumed run, the rest of
        # this course included, was judged to its end in the single-crash stage (its
        # `result`), not here; the course's kill points and classes are the learned
        # course's (`known_course`), which `classes.cover_courses` chose from before this
        # driver ran. What the rest would add: forks at no chosen point, and the check
        # that the run does what the learned course says past that point (the prefix is
        # still checked). Exhaustive coverage (`chosen` None) runs every driver to its end.
        sweep_forking(ex, sub, points, [model], workers, None, start,
                      stop=chosen is not None, last=last)
    else:
        sweep_replaying(ex, sub, points, [model], None, start)
    if observed is not None:
        for key, result in sub.fresh_observed:
            observed.learn(key, result)
    position = {p.id: n for p, n in zip(points, at)}
    return course, {position[point_id] for m, point_id, _ in sub.recorded if m == model}


def course_of(ex: Explorer, model: str, rep,
              crash: Callable[[KillPoint], Crashed] | None = None) -> tuple:
    """The (course, meets) of the run resumed after first crash `rep` (a FirstCrash): its
    resumed run's trace where it was run for this very state, else learned afresh as
    `sweep_after_first` would (the same crash, checked to leave the same state; `crash`
    as there)."""
    if rep.result is not None and rep.result.events is not None:
        return tuple(rep.result.events), rep.result.meets
    crashed = crash(rep.point) if crash is not None else ex.crash(rep.point, model)
    states = crashed.states
    if rep.order >= len(states) or states[rep.order].digest() != rep.state.digest():
        raise NonDeterminismError(f"{rep.point.id}: the crash state differs from the one "
                                  "judged before; the agent is not deterministic")
    return converged_course(ex, crashed.world, rep.state)


def within_horizon(golden: Golden, known: tuple, stats) -> tuple:
    """A first crash's (course, meets), where its run was cut at the horizon (--horizon,
    `meets[2]`): its own events up to the cut only, no meeting (the second crashes are
    chosen over the stretch it ran, and no Shortcut applies); the kill points past the cut
    are counted (`stats.past_horizon`), taken as the clean run's crashes there.

    Why not crashed: past the cut the course is the clean run's by the horizon's
    assumption only. The run itself differs there in what the recovery left (seen: its
    plan.json 809 bytes, the clean run's 574), so a driver run past the cut does not
    follow the course it was given, and the crash states it would leave are not the clean
    run's. The assumption carried to the second crash (convergence.py, "The horizon"):
    a crash past the cut behaves as the clean run's crash at the same point, which the
    single-crash sweep judges (each class of the clean run's kill points)."""
    course, meets = known
    if meets is None or len(meets) < 3 or not meets[2]:
        return known
    own = course[:meets[0]]
    stats.past_horizon += len(golden.kill_points(course)) - len(golden.kill_points(own))
    return own, None


def sweep_pairs(ex: Explorer, top: Sweep, models: list[str], position: dict[str, int],
                workers: int, progress) -> None:
    """Every schedule of two crashes: for each first crash state (one per class), the
    resumed run is killed at every kill point of its own course (its reconciliation, its
    checkpoint writes ...), and each crash state that leaves is resumed and judged.

    Pruning: a first crash whose state equals (or is equivalent to) one already explored
    gives the same resumed run, so its pairs are counted, not run again; a second crash
    state equal to one already judged (after any first crash) shares its verdict; a
    second crash after the first crash's resumed run met the clean run is the clean run's
    first crash there, its verdict composed from that one's (after_convergence.py).

    Representative coverage (the run's `coverage`): every first crash's course is learned
    first, then the second crashes are those `classes.cover_courses` chooses over the
    classes of all the courses (in first-crash order, so the same on any worker count),
    and `run.pair_coverage` says what was judged of them.
    """
    memo: dict = {}
    insensitive: dict = {}
    # second crashes' runs, reused by later first crashes (after_convergence.py); off with
    # convergence, as the pairs after convergence are: the long way to compare with
    observed = Known(top.golden) if ex.convergence_off is None else None
    # the single crashes' verdicts, where a pair after convergence finds its own
    judged = {(j.model, j.point.index, j.point.offset, j.order): j for j in top.instances}
    # --shard: which second crash states are this shard's (sharding.PairSurvey), with every
    # first crash's course learned for it; None: all of them
    owns, shard_courses, shard_points, shard_picks = None, None, None, {}
    if top.reports is not None:
        started = _real_time.real_perf_counter()
        owns, shard_courses, shard_points, shard_picks = _survey(
            ex, top, models, position, workers, observed is not None)
        # the survey's time is the pair stage's (the first model's, as it runs first)
        top.runs[models[0]].depth(2).seconds += _real_time.real_perf_counter() - started
    for model in models:
        run = top.runs[model]
        stats = run.depth(2)
        started = _real_time.real_perf_counter()
        reps = first_crashes(top, model, position)
        coverage = run.coverage
        courses: list = [None] * len(reps)
        chosen: list = [None] * len(reps)
        cut: list = [None] * len(reps)
        if shard_courses is not None:
            # this shard's own positions: for representative coverage, those of the whole
            # run's choice (`_represent`, made in `_survey`) where it owns a state
            courses, chosen = shard_courses[model], shard_points[model]
            if model in shard_picks:
                cut, pairs = shard_picks[model]
        elif coverage is not None and coverage.representative:
            courses, cut, pairs = _represent(ex, top, model, reps, workers, stats)
            chosen = list(pairs.chosen)
        if progress is not None:
            progress(0, len(reps), stage=f"pairs ({model})")
        crashed = []
        with _feed(ex, model, [r.point for n, r in enumerate(reps)
                               if owns is None or chosen[n]], workers) as feed:
            for n, rep in enumerate(reps):
                before = stats.explored
                if owns is not None and not chosen[n]:
                    crashed.append(set())  # no second crash state of this shard's here
                    if progress is not None:
                        progress(n + 1, len(reps), stage=f"pairs ({model})")
                    continue
                _, at = sweep_after_first(ex, top.golden, top.runs, model, rep.point,
                                          rep.order, rep.state, rep.result, workers, memo,
                                          insensitive, top.equivalences, top.guarded,
                                          judged if ex.convergence_off is None else None,
                                          observed, courses[n], chosen[n],
                                          feed and feed.crash, owns, cut[n])
                crashed.append(at)
                stats.total += rep.count * (stats.explored - before)
                if progress is not None:
                    progress(n + 1, len(reps), stage=f"pairs ({model})")
        stats.seconds += _real_time.real_perf_counter() - started
        if coverage is not None and coverage.representative:
            run.pair_coverage = pairs.to_json(crashed)
            if owns is not None:  # what `faultsim report merge` joins (reports/merge.py)
                run.pair_coverage["judged_at"] = pairs.judged_at(crashed)
        order_of = {id(v): i for i, v in enumerate(run.deep_failures)}
        run.deep_failures.sort(key=lambda v: (
            [(position.get(e.point.id, -1) if k == 0 else e.point.index, e.order)
             for k, e in enumerate(v.earlier)],
            v.kill_point.index, v.kill_point.offset or 0, v.order, order_of[id(v)]))


def _represent(ex: Explorer, top: Sweep, model: str, reps: list, workers: int,
               stats) -> tuple:
    """Representative coverage's second crashes for `model`'s first crashes `reps`:
    (each one's course, cut at the horizon where its run was; where it was cut, as an
    event count, else None; the `classes.PairCoverage`). Every course first: the classes
    are shared by all of them (classes.py). The kill points past a horizon cut are
    counted into `stats.past_horizon` (`within_horizon`)."""
    with _feed(ex, model, [r.point for r in reps if r.result is None
                           or r.result.events is None], workers) as feed:
        kept = [course_of(ex, model, rep, feed and feed.crash) for rep in reps]
    courses = [within_horizon(top.golden, c, stats) for c in kept]
    # where a course was cut short: its driver ends there at the latest
    cut = [len(c[0]) if c is not k else None for c, k in zip(courses, kept)]
    pairs = cover_courses(((top.golden.kill_points(c), c) for c, _ in courses),
                          top.runs[model].coverage.per_class, top.runs[model].seed)
    return courses, cut, pairs


def _survey(ex: Explorer, top: Sweep, models: list[str], position: dict[str, int],
            workers: int, observed: bool) -> tuple:
    """Under --shard: (`owns`, each model's first crashes' (course, meets), each one's
    positions of its course's kill points where this shard owns a second crash state,
    in order; and per model with representative coverage, (where each course was cut,
    the `classes.PairCoverage`)). Every first crash of every model is surveyed before
    any pair is judged: the memos are shared across first crashes and models
    (sharding.PairSurvey says why that makes the split exact).

    Representative coverage: the second crashes are the whole run's choice, and each
    shard judges those of them whose states it owns. Why each shard makes the whole run's
    choice: every shard resumed every first crash state (`Sweep.reports`), so it has
    every first crash in the whole run's order, with its resumed run; `_represent` cuts
    each course at the horizon where its run was cut and chooses over all of them with
    `classes.cover_courses`, a pure function of the courses, the per-class count and the
    seed: the whole run's `pairs.chosen`, in every shard. Only the chosen points are
    surveyed, and each driver ends after its last chosen point (before a horizon cut):
    the pair stage meets no other second crash state, in the whole run or in a shard,
    so every state it could share a memo entry with is in the survey's classes, and
    ownership stays exact (a state met past the cut, or at a point not chosen, would
    only join classes: bigger, still exact, less split). The shard then crashes the
    chosen points where it owns a state (the survey's positions, a subset of the
    chosen) and judges only its own states there. The kill points past a horizon cut
    are counted by the first shard alone (they are not crashed, so no state owns them):
    the shards' `schedules_past_cut` add up to the whole run's."""
    from .sharding import PairSurvey

    survey = PairSurvey(ex, observed)
    courses: dict = {}
    picks: dict = {}
    first = top.reports.shard[0] == 1  # type: ignore[union-attr]
    for model in models:
        reps = first_crashes(top, model, position)
        run = top.runs[model]
        if run.coverage is not None and run.coverage.representative:
            # the kill points past a cut: counted by shard 1, into a throwaway elsewhere
            cut_courses, cut, pairs = _represent(ex, top, model, reps, workers,
                                                 run.depth(2) if first else DepthStats(2))
            courses[model], picks[model] = cut_courses, (cut, pairs)
            wanted = [[top.golden.kill_points(c)[k] for k in pairs.chosen[n]]
                      for n, (c, _) in enumerate(cut_courses)]
        else:
            courses[model], wanted = [], None
        with _feed(ex, model, [r.point for n, r in enumerate(reps)
                               if wanted is None or wanted[n]], workers) as feed:
            for n, rep in enumerate(reps):
                if wanted is not None and not wanted[n]:
                    survey.skip(model, rep)  # no second crash chosen in this course
                    continue
                crashed = feed.crash(rep.point) if feed else ex.crash(rep.point, model)
                states = crashed.states
                if rep.order >= len(states) or \
                        states[rep.order].digest() != rep.state.digest():
                    raise NonDeterminismError(f"{rep.point.id}: the crash state differs from "
                                              "the one judged before; the agent is not "
                                              "deterministic")
                if wanted is not None:
                    survey.course(model, rep, crashed.world, rep.state, wanted[n], stop=True)
                    continue
                if rep.result is not None and rep.result.events is not None:
                    course = (tuple(rep.result.events), rep.result.meets)
                else:
                    course = converged_course(ex, crashed.world, rep.state)
                courses[model].append(course)
                survey.course(model, rep, crashed.world, rep.state,
                              top.golden.kill_points(course[0]))
    owns, mine = survey.owner(top.reports.shard)  # type: ignore[attr-defined]
    chosen: dict = {m: [] for m in models}
    for (model, _, _), points in zip(survey.courses, mine):
        chosen[model].append(points)
    positions: dict = {}
    for model in models:
        positions[model] = []
        for (course, _), points in zip(courses[model], chosen[model]):
            where = {p.id: n for n, p in enumerate(top.golden.kill_points(course))}
            positions[model].append(tuple(sorted(where[p.id] for p in points)))
    return owns, courses, positions, picks


def _feed(ex: Explorer, model: str, points: list[KillPoint], workers: int):
    """The first crashes at `points` (in the order they will be asked for) from one driver
    run (crash_feed.py: why each is `Explorer.crash`'s), where the sweep forks; else None
    (`workers=0`: each by a run of its prefix, the long way the feed is compared with)."""
    if workers > 0 and hasattr(os, "fork") and points:
        return CrashFeed(ex, model, points)
    return nullcontext(None)
