"""The built-in search: hypothesis drives `strategies.schedules` against a `Session` under a
budget, and shrinks a failure to the minimal schedule (fewest crashes, earliest points).

It complements the exhaustive sweep: schedules of more crashes than the sweep enumerates,
or scenarios too long to enumerate pairs of. Deterministic for a given seed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import freezegun.api as _real_time

from ..core.draws import seed_only
from ..errors import AgentFinding, KillDidNotLand
from ..killpoints import KillPoint
from ..schedule import NoSuchKillPoint, Schedule, ScheduleResult
from .session import Session


class _Counterexample(AgentFinding):
    """A schedule broke a rule: raised inside hypothesis so that it shrinks the schedule."""


ROUND = 25  # examples per round when a time budget is set


@dataclass
class SearchResult:
    tried: int = 0  # schedules run (shrinking included)
    # of those, schedules whose last crash came after an earlier crash's resumed run had met
    # the clean run: composed from a known resumed run, not resumed
    # (faultsim.inprocess.search_after_convergence)
    after_convergence: int = 0
    examples: int = 0  # distinct examples hypothesis generated before any failure
    seconds: float = 0.0
    failure: ScheduleResult | None = None  # the shrunk counterexample
    schedule: Schedule | None = None
    stopped_by_time: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None


def search(session: Session, *, max_crashes: int = 2, min_crashes: int = 1,
           examples: int = 100, seconds: float | None = None, seed: int | str | None = 0,
           database: Any = None, derandomize: bool = False) -> SearchResult:
    """Search crash schedules of `session` with hypothesis.

    `examples` and `seconds` bound the search (whichever ends first; shrinking a found
    failure is never cut short). `seed` makes it repeatable; `derandomize=True` uses
    hypothesis's own fixed derandomization instead. `database` is a hypothesis example
    database, so a failure found once is tried first next time (its I/O is done on the
    real disk, outside the session's fake filesystem). Hypothesis uses its database only
    in random runs: with a database pass `seed=None` (locally), and in CI a seed or
    `derandomize=True` without one.
    """
    if database is not None and (seed is not None or derandomize):
        raise ValueError("hypothesis uses its example database only in random runs (a seed "
                         "or derandomize=True turns it off): pass seed=None with a database")
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed
    from hypothesis import strategies as st

    result = SearchResult()
    composed = session.composed
    clock = _real_time.real_perf_counter
    started = clock()
    found: dict[str, Any] = {}

    def check(data: Any) -> None:
        if not found:
            result.examples += 1
        outcome = session.draw(data, max_crashes=max_crashes, min_crashes=min_crashes)
        result.tried += 1
        if not outcome.ok:
            found["last"] = outcome
            raise _Counterexample(outcome.token)

    # A time budget is checked between rounds of examples: stopping hypothesis in the
    # middle of a round would look to it like a test that draws inconsistently.
    size = examples if seconds is None or derandomize else min(examples, ROUND)
    left, round_ = examples, 0
    while left > 0 and not found:
        if seconds is not None and round_ and clock() - started > seconds:
            result.stopped_by_time = True
            break
        test = given(st.data())(check)
        test = settings(max_examples=min(size, left), deadline=None,
                        database=session.example_database(database),
                        derandomize=derandomize, report_multiple_bugs=False,
                        suppress_health_check=list(HealthCheck),
                        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target,
                                Phase.shrink])(test)
        if not derandomize and seed is not None:
            test = with_seed(_int_seed(seed) + round_)(test)
        try:
            with seed_only():  # draws follow the seed, not the code loaded (faultsim.core.draws)
                test()
        except _Counterexample:
            # hypothesis runs the shrunk example last, to raise it: the minimal one
            result.failure = _earliest(session, found["last"], result)
            result.schedule = result.failure.as_schedule()
        left -= size
        round_ += 1
    result.seconds = clock() - started
    result.after_convergence = session.composed - composed
    return result


def label(point: KillPoint) -> str:
    """A kill point's name without its position: the same event in another run's course."""
    return re.sub(r"^k\d+(\.\d+)?-", "", point.id)


def _earliest(session: Session, failure: ScheduleResult, result: SearchResult,
              max_runs: int = 400) -> ScheduleResult:
    """Hypothesis shrinks the draws; a crash can rarely move earlier that way, because the
    later crashes are drawn from the course the earlier ones leave. So, after it: move each
    crash to the earliest kill point at which the schedule still fails the same way, the
    later crashes kept at the same events (by label) of their new courses."""
    kinds = {v.invariant for v in failure.violations}
    best, runs = failure, 0
    for n in range(len(best.schedule)):
        moved = True
        while moved and runs < max_runs:
            moved = False
            schedule = best.schedule
            orders = [e.order for e in best.verdict.earlier] + [best.verdict.order]
            courses = [session.kill_points] + [session.golden.kill_points(e.next_trace)
                                               for e in best.verdict.earlier]
            here = (schedule[n].index, schedule[n].offset or 0)
            for candidate in courses[n]:
                if (candidate.index, candidate.offset or 0) >= here or runs >= max_runs:
                    break

                def choose(k, points, trace, candidate=candidate, schedule=schedule):
                    if k < n:
                        return schedule[k]
                    if k == n:
                        return candidate
                    wanted = label(schedule[k])
                    for point in points:
                        if label(point) == wanted:
                            return point
                    raise NoSuchKillPoint(wanted)

                try:
                    trial = session._run(len(schedule), choose,
                                         lambda k, count: min(orders[k], count - 1))
                except (NoSuchKillPoint, KillDidNotLand):
                    continue
                finally:
                    runs += 1
                    result.tried += 1
                if kinds & {v.invariant for v in trial.violations}:
                    best, moved = trial, True
                    break
    return best


def _int_seed(seed: int | str) -> int:
    try:
        return int(seed)
    except (TypeError, ValueError):
        import hashlib

        return int.from_bytes(hashlib.blake2b(str(seed).encode(), digest_size=8).digest(),
                              "big")
