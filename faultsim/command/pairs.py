"""Schedules of two crashes for an agent run as a command (`--crashes 2`), as in subprocess
mode and in-process: each distinct first crash state that passed is resumed (traced, its
course learned), then the resumed run is crashed at every kill point of its own course
(its reconciliation, its checkpoint writes, its exit), each kill proven landed, and each
crash state that leaves is resumed and judged: the report's depth-2 figures and
counterexamples, with replay tokens of two steps.

Pruning (the argument, checked against the long way by tests/test_command.py): a
resumed run is decided by the files it starts from, HOME/TMPDIR and the world it meets,
the command being deterministic (the two clean runs checked that). So first crashes whose
state, world (`world_signature`) and HOME/TMPDIR are equal give the same resumed run and
the same second crashes: one of them (the earliest) is explored and the others counted
(`DepthStats.total`); and a second crash state equal in the same three to one judged
already, after any first crash, shares that resume (its verdict judged again for its own
schedule).

May import: this package and what it may import."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from ..core.crashmodel import CrashState
from ..errors import NonDeterminismError
from ..killpoints import KillPoint
from ..judge.oracle import Golden, judge
from ..pipeline.incarnation import world_signature
from ..pipeline.sweep import Earlier
from ..reports.report import ModelRun, ResumeSummary, Verdict
from ..scenario import Scenario
from .incarnation import Services, incarnation
from .sweep import (Exploration, First, files_key, filtered_calls, hold_for, killed_run,
                    resume)
from .sweep import explore as sweep_explore


def explore(command: str, scenario: Scenario, **options: Any) -> Exploration:
    """`sweep.explore` with the pairs swept by this module when `crashes=2` (the package's
    `explore`: the sweep cannot import this module, which imports it)."""
    return sweep_explore(command, scenario, pairs=sweep_pairs, **options)


def first_classes(firsts: list[First], model: str, position: dict[str, int]
                  ) -> list[tuple[First, int]]:
    """One first crash per class of equal ones (the earliest: kill point, then state),
    with how many it stands for; in kill point order."""
    classes: dict[tuple, list[First]] = {}
    for f in firsts:
        if f.model == model:
            classes.setdefault(f.key, []).append(f)
    reps = [(min(members, key=lambda f: (position[f.point.id], f.order)), len(members))
            for members in classes.values()]
    return sorted(reps, key=lambda r: (position[r[0].point.id], r[0].order))


def sweep_pairs(argv: list[str], scenario: Scenario, base: Path, golden: Golden,
                chosen: list[KillPoint], runs: dict[str, ModelRun], result: Exploration,
                limit: Any, seed: str, services: Services | None, *,
                second: Callable[[KillPoint], bool] | None = None, share: bool = True,
                progress: Callable[[str], None] | None = None) -> None:
    position = {p.id: n for n, p in enumerate(chosen)}
    memo: dict[tuple, Any] = {}  # second crash state's key -> its resumed run
    for model, run in runs.items():
        run.crashes = 2
        stats = run.depth(2)
        started = time.monotonic()
        for first, count in first_classes(result.firsts, model, position):
            start = (first.state.as_dict(), first.crash.rest, first.world)
            # the resumed run's course, traced: its kill points and the calls to hold
            course = incarnation(argv, scenario, _copy(first.world), base,
                                 work=start[0], rest=start[1], timeout=limit, seed=seed,
                                 services=services)
            if course.outcome is None:
                raise NonDeterminismError(
                    f"{scenario.path}: the run resumed after {first.point.id} "
                    f"[{first.state.persisted}] passed, then failed when run again "
                    f"({course.error}): the command is not deterministic")
            calls, paths = filtered_calls(argv, scenario, base, course, limit, seed, services,
                                     start=start)
            earlier = Earlier(first.point, first.order, first.state.persisted,
                              tuple(course.events))
            points = [p for p in _course_points(golden, course.events)
                      if second is None or second(p)]
            judged = 0
            for point in points:
                crash, world = killed_run(argv, scenario, base, point,
                                      hold_for(point, course, calls, paths), limit, seed,
                                      services, result, start=start)
                result.kills_landed += 1
                result.pair_kills += 1
                for order, state in enumerate(_states(crash, model, scenario)):
                    key = (state.digest(), world_signature(world), files_key(crash.rest)) \
                        if share else (first.point.id, first.order, point.id, order)
                    fresh = key not in memo
                    if fresh:
                        began = time.monotonic()
                        _v, memo[key], _resumed = resume(
                            argv, scenario, base, golden, world, crash, point, state,
                            limit, seed, services, earlier=(first.point,))
                        stats.resume_seconds += time.monotonic() - began
                        result.resumes += 1
                    crash_run = dataclasses.replace(memo[key],
                                                    kill_points=[first.point, point])
                    violations = judge(golden, crash_run)
                    verdict = Verdict(point, model, state.persisted, violations, state,
                                      ResumeSummary.of(crash_run) if violations else None,
                                      golden, order=order, earlier=(earlier,),
                                      resumed_at=(crash_run.resume_positions or [None])[0],
                                      escalated=crash_run.outcome is not None
                                      and crash_run.outcome.status == "escalated")
                    result.states += 1
                    result.deep.append(verdict)
                    judged += 1
                    stats.explored += 1
                    stats.resumed += fresh
                    if violations:
                        run.deep_failures.append(verdict)
                    if progress is not None:
                        progress(f"{first.point.id} then {point.id} [{model}: "
                                 f"{state.persisted}]: " + (
                                     ", ".join(v.invariant for v in violations) or "ok"))
            stats.total += count * judged
        stats.seconds += time.monotonic() - started


def _course_points(golden: Golden, events: list) -> list[KillPoint]:
    """The kill points of a resumed run's course, but those inside a write (as
    `sweep.kill_points`)."""
    return [p for p in golden.kill_points(events) if not p.torn]


def _states(crash: Any, model: str, scenario: Scenario) -> list[CrashState]:
    if model == "process":
        return [CrashState.of("process", "every completed operation", crash.work)]
    return crash.model.power_states(powersafe=scenario.profile.powersafe_overwrite)


def _copy(world: Any) -> Any:
    import copy

    return copy.deepcopy(world)
