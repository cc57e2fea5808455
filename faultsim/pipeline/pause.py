"""The `pause` crash model's mode-neutral half (issue 55): its schedules' wake points,
the clean run's points an incarnation can be paused at, and the verdict of one schedule
with both incarnations' traces side by side. The backends run the schedules: in process
two threads handing a baton (`faultsim.inprocess.pause`), for an agent run as a command
two process groups under SIGSTOP and SIGCONT (`faultsim.command.pause`); both hand this
module a run with the same fields (`point`, `wake`, `paused`, `new`: each with `result`,
an `Incarnation`, and `events`; `world`, `final`, `rollbacks`, `held_at`, `hung`), so one
schedule is judged the same way whichever ran it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..agent import Outcome
from ..core.crashmodel import PAUSE, WAKE_END
from ..killpoints import KillPoint
from ..judge.oracle import CrashRun, Golden, Violation, completes_or_escalates, effects_exactly_once
from ..core.trace import Event

SAVE_KINDS = ("fs.rename", "fs.write", "fs.truncate")
# the outcome status of an incarnation that found it lost the task (reference_agent's):
# a legal end for the one that is not the owner, as any other end of it is
SUPERSEDED = "superseded"


@dataclass(frozen=True)
class Wake:
    """Where the paused incarnation is woken in the new one's course."""

    kind: str  # "request", "save", "end"
    n: int = 0  # for "save": the N-th checkpoint save (1-based)

    @property
    def label(self) -> str:
        return f"save {self.n}" if self.kind == "save" else self.kind

    @property
    def order(self) -> int:
        """Its place among a pause point's wakes (the verdict's `order`)."""
        return {"request": 0, "save": self.n, "end": WAKE_END}[self.kind]

    @classmethod
    def of_order(cls, order: int) -> "Wake":
        """The wake `order` names (a replay token's)."""
        return cls("request") if order == 0 else cls("end") if order == WAKE_END \
            else cls("save", order)


def judge_pause(g: Golden, run: Any) -> list[Violation]:
    """The verdict of one pause schedule.

    - `effects_exactly_once` (P8/P11): the effects both incarnations applied together,
      against the clean run's (an effect never applied is judged only when one of them
      completed);
    - `completes_or_escalates` (P5): one of the two must complete with the clean answer or
      escalate, and one that completes must give the clean answer; the other may end in
      any way (completed, escalated, superseded, an error): whichever lost the task is no
      owner, and how it stops is its own affair (P13). A hang of either is a failure;
    - `checkpoint_not_rolled_back` (P13): no save of the woken incarnation replaced the
      new one's checkpoint with a shorter history (a lost update);
    - `one_owner_completes` (P13): both incarnations reported the task done and told
      different stories (answer, turns, steps): two owners finished two runs of it.
    """
    out: list[Violation] = []
    new, woken = run.new.result, run.paused.result
    side = side_by_side(run)
    # the owner: the one that completed or escalated (the new one first), else the new one
    owner = next((r for r in (new, woken) if r.outcome is not None
                  and r.outcome.status in ("completed", "escalated")), new)
    crash_run = CrashRun([run.point], _no_state(), run.world, outcome=owner.outcome,
                         error=owner.error, timed_out=owner.timed_out, final=run.final)
    found = effects_exactly_once(g, crash_run)
    if found is not None:
        out.append(_with(found, side))
    if run.hung is not None:
        out.append(Violation.of("completes_or_escalates", run.hung + "\n" + side,
                                cause="hang"))
    else:
        for who, r in (("new", new), ("woken", woken)):
            if r is not owner and not (r.outcome is not None
                                       and r.outcome.status == "completed"):
                continue  # not the owner, and claims nothing: any end is legal
            found = completes_or_escalates(g, CrashRun(
                [run.point], _no_state(), run.world, outcome=r.outcome, error=r.error,
                timed_out=r.timed_out, final=run.final))
            if found is not None:
                text = (f"the {who} incarnation: " + found.explanation) if r is not owner \
                    or owner.outcome is not None else (
                    "neither incarnation completed or escalated; the new one: "
                    + found.explanation + "; the woken one: "
                    + (woken.error or (woken.outcome.status if woken.outcome else "?")))
                out.append(Violation.of("completes_or_escalates", text + "\n" + side,
                                        **dict(found.facts)))
                break
    if run.rollbacks:
        out.append(Violation.of("checkpoint_not_rolled_back",
                                "a lost update: " + "; ".join(run.rollbacks) + "\n" + side))
    a, b = woken.outcome, new.outcome
    if a is not None and b is not None and a.status == b.status == "completed" and \
            _story(a) != _story(b):
        out.append(Violation.of(
            "one_owner_completes", "both incarnations reported the task done, with "
            f"different outcomes: the woken one {_story(a)}, the new one {_story(b)}\n"
            + side))
    return out


def _story(o: Outcome) -> tuple:
    return (o.final_answer, o.turns, o.steps)


def _with(v: Violation, side: str) -> Violation:
    return Violation(v.invariant, v.rule, v.explanation + "\n" + side, v.facts)


def _no_state():
    from ..core.crashmodel import CrashState

    return CrashState.of(PAUSE, "paused", {})


def side_by_side(run: Any, width: int = 58) -> str:
    """Both incarnations' traces, side by side, in the order they ran: the paused one's
    course to its pause point, the new one's to its wake point, the woken one's rest, the
    new one's rest."""
    rows: list[tuple[str, str]] = []
    p, n = run.paused.events, run.new.events
    cut = run.point.index
    first = [e for e in p if e.index <= cut]
    rest = [e for e in p if e.index > cut]
    rows += [(_ev(e), "") for e in first[-6:]]
    rows.append((f"---- PAUSED at {run.point.id} ----", ""))
    woke_at = run.held_at
    before = [e for e in n if woke_at is None or e.index <= woke_at]
    after = [e for e in n if woke_at is not None and e.index > woke_at]
    rows += [("", _ev(e)) for e in before[-12:]]
    rows.append(("---- WOKEN at the new one's " + run.wake.label + " ----", ""))
    rows += [(_ev(e), "") for e in rest[:12]]
    rows.append((_end(run.paused), ""))
    rows += [("", _ev(e)) for e in after[:8]]
    rows.append(("", _end(run.new)))
    head = f"    {'paused incarnation (woken)':<{width}} | new incarnation"
    return "\n".join([head] + [f"    {a[:width]:<{width}} | {b}" for a, b in rows])


def _ev(e: Event) -> str:
    return f"#{e.index} {e.kind} {e.subject}"


def _end(turn: Any) -> str:
    r = turn.result
    if r.outcome is not None:
        return f"== ended: {r.outcome.status} {r.outcome.final_answer!r}"
    return f"== ended: {r.error or 'did not end'}"


def pause_points(points: list[KillPoint]) -> list[KillPoint]:
    """The clean run's kill points an incarnation can be paused at: its boundary points
    (not inside a write), after its first event."""
    return [p for p in points if p.offset is None and p.index > 0]


def verdict_of(r: Any, violations: list[Violation], golden: Golden) -> Any:
    """A pause schedule's verdict, as the report keeps it (its wake point as `order`)."""
    from ..reports.report import Verdict

    return Verdict(r.point, PAUSE, f"paused, woken at the new incarnation's {r.wake.label}",
                   violations, _no_state(), None, golden, order=r.wake.order)


@dataclass
class Explored:
    """The pause schedules a backend ran and judged (its runs with their violations), and
    the counts its summary line and the report's stats give."""

    runs: list[tuple[Any, list[Violation]]]
    stops: int = 0
    schedules: int = 0
    left: int = 0

    def judge(self, point: KillPoint, runs: list[Any], golden: Golden,
              progress: Any = None) -> None:
        """Count and judge `runs`, the schedules of `point`: one whose wake point never
        came ran as the `end` schedule, which is among them, so it is not judged twice."""
        for r in runs:
            self.schedules += 1
            self.stops += r.stops
            self.left += r.left
            if r.wake.kind != "end" and not r.woke:
                continue
            v = judge_pause(golden, r)
            self.runs.append((r, v))
            if progress is not None:
                progress(f"{point.id} ~ {r.wake.label}: "
                         + (", ".join(x.invariant for x in v) or "ok"))
