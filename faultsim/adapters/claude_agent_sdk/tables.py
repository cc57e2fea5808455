"""The findings table: each crash state counted in the columns its resume falls in."""
from __future__ import annotations

from typing import Callable

from .results import Verdict

COLUMNS = ("crash states", "resumed correctly", "steps lost", "effects lost",
           "effects duplicated", "restarted from scratch", "unresumable", "other failures",
           "invalid transcripts", "orphaned tool calls")


def classify(verdict: Verdict) -> list[str]:
    """The columns one crash state counts in (besides "crash states"). "orphaned tool calls"
    describes the state (a tool_use with no result on disk), the others what its resume did."""
    names = {v.invariant for v in verdict.violations}
    found = []
    if "one_step_repeated_per_crash" in names:
        found.append("steps lost")
    effects = [v for v in verdict.violations if v.invariant == "effects_exactly_once"]
    if any(v.fact("missing") for v in effects):
        found.append("effects lost")
    if any(v.fact("extra") for v in effects):
        found.append("effects duplicated")
    if verdict.resumed_at == 0 and verdict.effects_before:
        found.append("restarted from scratch")
    if verdict.error and "No conversation found" in verdict.error:
        found.append("unresumable")
    elif "completes_or_escalates" in names:
        found.append("other failures")
    if "api_valid" in names:
        found.append("invalid transcripts")
    if verdict.orphaned:
        found.append("orphaned tool calls")
    if not verdict.violations:
        found.append("resumed correctly")
    return found


def table(verdicts: list[Verdict], *, by: Callable[[Verdict], str],
          head: str = "kill-point category") -> str:
    """A Markdown table, one row per `by(verdict)` in first-met order, and a total row."""
    rows: dict[str, dict[str, int]] = {}
    for v in [*verdicts]:
        for key in (by(v), "all"):
            counts = rows.setdefault(key, {c: 0 for c in COLUMNS})
            counts["crash states"] += 1
            for column in classify(v):
                counts[column] += 1
    rows["all"] = rows.pop("all", {c: 0 for c in COLUMNS})
    lines = ["| " + " | ".join([head, *COLUMNS]) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    for key, counts in rows.items():
        lines.append("| " + " | ".join([key, *(str(counts[c]) if counts[c] else "·"
                                              for c in COLUMNS)]) + " |")
    return "\n".join(lines)
