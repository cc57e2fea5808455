"""Longer schedules after convergence, in the hypothesis search (`faultsim.inprocess.session`): the
last crash of a schedule, once an earlier crash's resumed run has met the clean run, is
the clean run's shorter schedule of the same crashes; where that shorter schedule's last
resumed run is known, the verdict is composed from it instead of resuming again.

Where. The search runs a schedule crash by crash: crash k leaves a crash state, the run
resumed from it is learned (its course, the kill points crash k+1 is drawn from), crash
k+1 kills that run, and so on; the last crash state is resumed and judged. A course is
learned with convergence (`converged_course`, as the pair stage learns its first crashes'):
the resumed run is cut where it met the clean run, at its event `meets[0]` ~ the clean
run's event `meets[1]`, and its course is its own events up to there and the clean run's
after (faultsim.inprocess.convergence: the events it would have gone on to emit). If crash
k+1 falls after `meets[0]`, incarnation k+1 from then on takes the clean run's steps, so
crashes k+1 ... last are the clean run's schedule of those crashes, the first at the same
distance past `meets[1]`, the rest at the same points of the same courses (each a
function of the crash state before it and the world it observes, equal in both).

What is reused, and why it is the same. The last crash state is resumed by a fresh
incarnation; what it does is a function of the crash state and of the world it can
observe (assumed, as the sweep's memos and convergence assume: not of the killed
process's memory), and of two things that differ between the schedule and the shorter
one: which incarnation it is (`env.incarnation`) and the seeded random streams. So a
resumed run of the session (`Known`, learned from every last crash the session resumed,
any schedule's) is reused only if

- it started from a crash state with the same digest, in a world that is observably the
  same: `fingerprints.world_key`, the clock, each service's and adapter's state, the fake
  model's answer and fault counts, paused answers, prompt cache, and how many requests it
  logged (each answer's request-id numbers it). Checked, not assumed: after the meeting
  they are equal by the argument above, but under the power model the crash states can
  differ in what was synced before the meeting (then the schedule is resumed);
- it drew no random number and never read `env.incarnation` (`blind`; where it was cut
  against the clean run, the clean run draws nothing after the cut, convergence.usable;
  where it was cut against an earlier resumed run, faultsim.inprocess.leads, its own
  stretch up to the cut drew and read nothing and neither did that run's remainder, the
  run it stands for), and added no refused connection or process (their text names the
  incarnation) and left no thread working (`Tail.reusable`).

Then the run here would take the same steps: the same calls with the same answers, the
same requests, files, outcome, error or hang, the same first model position asked. Its
history is not the same (the first crashes' stretch before the meeting: their ledger
entries, repeated attempts, re-asked turns), so the resume guards are not copied: the
run's world is composed as it would be at the end, this schedule's own world at the last
kill (every crash run for real, so it and the crash state and what the killed incarnation
did after the kill are this schedule's own) and then what the known run added, renumbered
under this incarnation (`after_convergence.compose`), and every resume guard runs on it
as on a resumed run; the state guards see the crash state and where the run began.

Determinism. Every crash is still run and every course is the one the long way learns
(the same events), so hypothesis draws the same choices from the same kill points; every
verdict is the long way's, so it sees the same failures and shrinks to the same schedule.
`Session(after_convergence=False)` learns courses to their end and resumes every last
crash (tests/test_search_after_convergence.py compares the two).
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from ..core.crashmodel import CrashState
from ..judge.oracle import Golden
from ..pipeline.sweep import ResumeResult
from .after_convergence import compose
from .convergence import course_events
from .fingerprints import world_key
from .leads import shared


def converged_course(ex: Any, world: Any, state: CrashState
                     ) -> tuple[tuple, tuple[int, int] | None]:
    """The clean course of the run resumed from `state` (on a copy of `world`), cut where
    it met the clean run and completed from the clean run's (convergence.course_events),
    and where it met it: (its event, the clean run's event) before the meeting request, or
    None."""
    w = copy.deepcopy(world)
    # cut at the horizon too where the sweep's kept runs are (Explorer.horizon_kept)
    run = ex.resume(w, state, [], converge=True, horizon=ex.horizon_kept)
    course, meets = tuple(run.events), None
    if ex.last_cut is not None:
        cut_course, cut = ex.last_cut
        course = tuple(course_events(cut_course, cut, list(run.events)))
        meets = (cut.events, cut_course.points[cut.at].events, cut.horizon)
    return course, meets


class Known:
    """The session's resumed last crashes whose tails can be reused, by the crash state and
    the observable world each started from."""

    def __init__(self, golden: Golden) -> None:
        self.golden = golden
        self.runs: dict[tuple, ResumeResult] = {}
        # one object per final file content: runs that end alike share their files' bytes
        # (a long sweep keeps thousands of tails; their final files are mostly equal)
        self.contents: dict = {}
        self.kept: set[int] = set()

    @staticmethod
    def key(state: CrashState, world: Any) -> tuple:
        """Taken at the kill, before the resume prepares the world (the same downtime on
        both sides)."""
        return state.digest(), world_key(world)

    def learn(self, key: tuple, result: ResumeResult) -> None:
        """Keep `result` for composing; where it is not kept (not reusable, or a run from
        the same state and world was learned first) its tail is dropped: nothing reads it."""
        if result.tail is None or not result.tail.reusable or key in self.runs:
            if id(result) not in self.kept:  # (a run kept, learned again, keeps it)
                result.tail = None
            return
        result.tail = replace(result.tail, final=shared(result.tail.final, self.contents))
        self.runs[key] = result
        self.kept.add(id(result))  # the runs kept are alive: their ids stay theirs

    def compose(self, key: tuple, schedule: list, state: CrashState, world: Any
                ) -> ResumeResult | None:
        """The verdict of resuming `state` in `world` composed from a known run started
        from the same, or None (resume it)."""
        known = self.runs.get(key)
        if known is None:
            return None
        return compose(self.golden, schedule, state, world, known)
