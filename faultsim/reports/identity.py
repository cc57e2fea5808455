"""A crash state's stable identity: what `faultsim compare` aligns two runs by.

A kill-point id (`k27-after-effect-mailer.send#1`) starts with the event's index, which
shifts as soon as one side of a comparison (another agent version, another framework
release) adds or drops one event anywhere before it. The identity names the crash state by
what it means instead:

    process:after-effect effect.ok mailer.send#1 turn 2 tool send_receipt

- the crash model and the kill point's category;
- the event it follows (or tears): its kind and label (a file's name, a service call, a
  mark, the model), and its occurrence among the events of that kind and label *within its
  model turn*, so an extra event elsewhere, even an extra write of the same file in another
  turn, moves nothing;
- the model turn around it (how many model answers came before, 0 before the first) and
  the tool call it falls in (the last tool started, or effect attempted, in that turn);
- for a kill inside a write, where in the write (`@first`, `@half`, `@last` byte or the
  sector offset `@512`), not the byte count alone, which moves as the content does;
- under a crash model with several crash states per kill point (power loss: which
  unsynced writes survived), its place among them (`/2`).

Two kill points of one run never share an identity: one event has one boundary and
distinct torn offsets, and events of one turn with the same kind and label are told apart
by their occurrence. `identities` checks it anyway and adds `~2` to a repeat (a guard, not
a case any trace here produces).

Standard library and the bottom layer only (killpoints, trace)."""
from __future__ import annotations

from typing import Sequence

from ..killpoints import KillPoint, cut_kind, label
from ..core.trace import Event

_TOOL_STARTS = ("mark.tool.start", "mark.pa.tool.start")


def _where_torn(size: int, offset: int) -> str:
    kind = cut_kind(size, offset)
    return f"@{offset}" if kind == "sector" else f"@{kind}"


def context(trace: Sequence[Event]) -> list[tuple[int, str, str]]:
    """Per event of `trace` (in order): its model turn, its tool call, and its
    `KIND LABEL#N` (N: its occurrence among the events of that kind and label in its turn),
    computed in one pass."""
    out = []
    turn, tool, counts = 0, "", {}
    for event in trace:
        if event.kind == "model.response" and event.detail.startswith("200"):
            # the answer starts the next turn: the events after it belong to that turn
            turn, tool, counts = turn + 1, "", {}
        elif event.kind in _TOOL_STARTS:
            tool = event.subject
        elif event.kind.startswith("effect.") and not tool:
            tool = event.subject.split(".")[0] if "." in event.subject else event.subject
        name = f"{event.kind} {label(event)}"
        counts[name] = counts.get(name, 0) + 1
        out.append((turn, tool, f"{name}#{counts[name]}"))
    return out


def identity(point: KillPoint, trace: Sequence[Event], crash_model: str, order: int = 0,
             ctx: list[tuple[int, str, str]] | None = None) -> str:
    """The identity of the crash state `order` of kill point `point` of `trace` (a run's
    clean course); `ctx`: `context(trace)`, when naming many points of one trace."""
    ctx = context(trace) if ctx is None else ctx
    head = f"{crash_model}:{point.category}"
    if point.index == 0:
        what = "start"
    elif point.index > len(ctx):
        # a backend whose kill points are not events of this trace (the Claude Agent SDK
        # adapter's hooks and transcript writes): the point's own words name it
        what = point.where
    else:
        turn, tool, name = ctx[point.index - 1]
        what = f"{name} turn {turn}" + (f" tool {tool}" if tool else "")
        if point.torn:
            what += " " + _where_torn(trace[point.index - 1].size, point.offset)
    return f"{head} {what}" + (f" /{order + 1}" if order else "")


def identities(items: Sequence[tuple[KillPoint, int]], trace: Sequence[Event],
               crash_model: str) -> list[str]:
    """The identities of (kill point, order) crash states of one trace, all distinct."""
    ctx = context(trace)
    seen: dict[str, int] = {}
    out = []
    for point, order in items:
        name = identity(point, trace, crash_model, order, ctx)
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ~{seen[name]}")
    return out

