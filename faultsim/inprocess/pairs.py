"""Schedules of two crashes, exhaustively: each first crash state (one per class) resumed
and killed again at every kill point of its own course."""
from __future__ import annotations

import copy

import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not

from ..crashmodel import CrashState
from ..errors import NonDeterminismError
from ..killpoints import KillPoint, kill_points
from ..oracle import Golden
from ..pipeline.sweep import Earlier, ResumeResult, Sweep
from ..report import ModelRun
from ..world import World
from .forking import sweep_forking
from .replaying import sweep_replaying
from .sandbox import Explorer


def first_crashes(sweep: Sweep, model: str, position: dict[str, int]) -> list[tuple]:
    """The first crashes to explore further: one per class of equal (or equivalent) crash
    states that passed, with how many first crashes the class stands for.

    A class is the states that share one resumed run, by the state that run was resumed
    for: two children that happened to resume equal states at once (more likely with
    more workers) still make one class. It is represented by its earliest member (kill
    point, then crash state), never by the one that happened to be resumed: which one
    that is depends on how the workers' children interleaved, and the report must not.
    The resumed run's trace is reused as the course when the representative is the very
    state it was run for; otherwise its course is run afresh."""
    classes: dict[object, list] = {}
    for model_, point, order, state, result, ok, key in sweep.instances:
        if model_ == model and ok:
            resumed = sweep.resumed_from.get(id(result))
            exact = key is not None and key == resumed
            group = resumed if resumed is not None else id(result)
            classes.setdefault(group, []).append(
                (position[point.id], order, not exact, point, state, result))
    reps = []
    for members in classes.values():
        members.sort(key=lambda m: m[:3])
        _, order, inexact, point, state, result = members[0]
        reps.append((point, order, state, result if not inexact else None, len(members)))
    reps.sort(key=lambda r: (position[r[0].id], r[1]))
    return reps


def sweep_after_first(ex: Explorer, golden: Golden, runs: dict[str, ModelRun], model: str,
                      point: KillPoint, order: int, state: CrashState,
                      result: ResumeResult | None, workers: int, memo: dict,
                      insensitive: dict, equivalences: bool) -> tuple:
    """Crash at `point` again, then kill the run resumed from `state` at every kill point of
    its own course; the verdicts go to `runs[model]` (its depth-2 figures and failures).
    `result` is this very state's resumed run (its trace is the course), or None: then the
    course is learned afresh (an equivalent state was resumed, not this one). Returns the
    course. `memo`/`insensitive` share second crash states' verdicts between calls."""
    import os

    world, states, _ = ex.crash(point, model)
    if order >= len(states) or states[order].digest() != state.digest():
        raise NonDeterminismError(f"{point.id}: the crash state differs from the one "
                                  "judged before; the agent is not deterministic")
    pristine = copy.deepcopy(world)
    if result is not None and result.events is not None:
        course = tuple(result.events)
    else:
        w = copy.deepcopy(pristine)
        ex.prepare(w, state)
        course = tuple(ex.incarnation(w).events)

    def start() -> World:
        w = copy.deepcopy(pristine)
        ex.prepare(w, state)
        return w

    sub = Sweep(golden, runs, memo=memo, insensitive=insensitive, equivalences=equivalences,
                earlier=(Earlier(point, order, state.persisted, course),))
    points = kill_points(course)
    if workers > 0 and hasattr(os, "fork"):
        sweep_forking(ex, sub, points, [model], workers, None, start)
    else:
        sweep_replaying(ex, sub, points, [model], None, start)
    return course


def sweep_pairs(ex: Explorer, top: Sweep, models: list[str], position: dict[str, int],
                workers: int, progress) -> None:
    """Every schedule of two crashes: for each first crash state (one per class), the
    resumed run is killed at every kill point of its own course (its reconciliation, its
    checkpoint writes ...), and each crash state that leaves is resumed and judged.

    Pruning: a first crash whose state equals (or is equivalent to) one already explored
    gives the same resumed run, so its pairs are counted, not run again; a second crash
    state equal to one already judged (after any first crash) shares its verdict.
    """
    memo: dict = {}
    insensitive: dict = {}
    for model in models:
        run = top.runs[model]
        stats = run.depth(2)
        started = _real_time.real_perf_counter()
        reps = first_crashes(top, model, position)
        if progress is not None:
            progress(0, len(reps), stage=f"pairs ({model})")
        for n, (point, order, state, result, count) in enumerate(reps):
            before = stats.explored
            sweep_after_first(ex, top.golden, top.runs, model, point, order, state, result,
                              workers, memo, insensitive, top.equivalences)
            stats.total += count * (stats.explored - before)
            if progress is not None:
                progress(n + 1, len(reps), stage=f"pairs ({model})")
        stats.seconds += _real_time.real_perf_counter() - started
        order_of = {id(v): i for i, v in enumerate(run.deep_failures)}
        run.deep_failures.sort(key=lambda v: (
            [(position.get(e.point.id, -1) if k == 0 else e.point.index, e.order)
             for k, e in enumerate(v.earlier)],
            v.kill_point.index, v.kill_point.offset or 0, v.order, order_of[id(v)]))
