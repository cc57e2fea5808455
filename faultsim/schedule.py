"""Crash schedules (data): one kill point per killed incarnation, the last incarnation
running to the end, and what running one gave. `session.Session` runs them; hypothesis
tests, the built-in search and replays all go through it.

A later incarnation's kill points exist only once it has run (its course depends on what
the earlier crashes left), so a schedule names them by position: `Crash(at)` is a place
along that incarnation's kill points, `at / RESOLUTION` of the way through. Smaller is
earlier, which is what shrinking towards 0 needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import UsageError
from .killpoints import KillPoint
from .reports.report import ModelRun, Verdict

RESOLUTION = 1 << 16
# Phases of a kill point in which a tool call is pending on disk: a crash there makes the
# next run reconcile (P5), the recovery path a second crash should probe.
PENDING = ("between-A-and-tool", "in-tool", "after-effect", "after-tool-before-B")


@dataclass(frozen=True)
class Crash:
    """One crash of a schedule. `at` picks the kill point: for the first incarnation it may
    be the `KillPoint` itself; otherwise a position in [0, RESOLUTION) along the
    incarnation's kill points (within its recovery, before it first asks the model, when
    `recovery` is set). `state` picks among the crash states the model allows there
    (modulo their number: one for a process kill, several after power loss)."""

    at: KillPoint | int = 0
    state: int = 0
    recovery: bool = False


@dataclass(frozen=True)
class Schedule:
    crashes: tuple[Crash, ...]

    def __post_init__(self) -> None:
        if not self.crashes:
            raise ValueError("a schedule has at least one crash")

    def __len__(self) -> int:
        return len(self.crashes)


def pending_windows(points: Sequence[KillPoint]) -> list[list[KillPoint]]:
    """The kill points at which a tool call is pending on disk, one list per stretch (one
    per tool turn): drawing a stretch first, then a point, gives every turn its chance,
    however long its window."""
    windows: list[list[KillPoint]] = []
    inside = False
    for n, point in enumerate(points):
        if point.category in PENDING:
            if not inside:
                # the stretch begins where save A's rename landed: the points after it
                # and before the agent's mark are still "after-model-response"
                start = n
                while start > 0 and points[start - 1].category == "after-model-response" \
                        and not points[start - 1].torn:
                    start -= 1
                windows.append(list(points[start:n]))
                inside = True
            windows[-1].append(point)
        elif inside and (point.torn or point.category == "checkpoint-rename"):
            windows[-1].append(point)  # inside a write of the same turn, or save B's
        else:
            inside = False
    return windows


def recovery_points(points: Sequence[KillPoint], trace: Sequence) -> list[KillPoint]:
    """The kill points of a resumed run before its first model answer: its reading of the
    files, its reconciliation of pending calls and the save that completes that turn."""
    first = next((e.index for e in trace if e.kind == "model.response"), None)
    if first is None:
        return list(points)
    return [p for p in points if p.index < first] or list(points)


class NoSuchKillPoint(UsageError, LookupError):
    """A schedule names a kill point its incarnation never reaches."""


def pick(crash: Crash, points: Sequence[KillPoint], trace: Sequence) -> KillPoint:
    if isinstance(crash.at, KillPoint):  # by place: the same event and offset in this run
        for point in points:
            if point.index == crash.at.index and point.offset == crash.at.offset:
                return point
        raise NoSuchKillPoint(f"this run has no kill point at event #{crash.at.index}"
                              + (f", offset {crash.at.offset}" if crash.at.torn else "")
                              + f" (it has {len(trace)} events)")
    pool = recovery_points(points, trace) if crash.recovery else list(points)
    at = min(max(int(crash.at), 0), RESOLUTION - 1)
    return pool[at * len(pool) // RESOLUTION]


@dataclass
class ScheduleResult:
    """What one schedule did: its verdict, and the run it belongs to (for the text)."""

    verdict: Verdict
    run: ModelRun

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def violations(self):
        return self.verdict.violations

    @property
    def schedule(self) -> list[KillPoint]:
        return self.verdict.schedule

    def as_schedule(self) -> Schedule:
        """The schedule, by place: replayable with `Session.run`."""
        v = self.verdict
        return Schedule(tuple(Crash(e.point, e.order) for e in v.earlier) +
                        (Crash(v.kill_point, v.order),))

    @property
    def token(self) -> str:
        return self.verdict.token(self.run)

    def counterexample(self) -> str:
        return self.run.counterexample(self.verdict)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError("faultsim: the schedule violates the protocol\n\n" +
                                 self.counterexample())
