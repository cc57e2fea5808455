"""What held and what broke, per durability mode: per scenario, and per kill-point category
over all scenarios."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

COLUMNS = ("crash states", "resumed correctly", "steps lost", "effects duplicated",
           "restarted from scratch", "dropped", "invalid transcripts")


@dataclass
class Row:
    scenario: str  # a scenario id, or "all" in the per-category view
    mode: str
    category: str = "all"
    counts: dict[str, int] = field(default_factory=lambda: {c: 0 for c in COLUMNS})
    replay: dict[str, str] = field(default_factory=dict)  # column -> first break's command


def _second_answer(trace) -> int | None:
    """Where the clean run got its second model answer: a restart from turn 1 after it has
    lost more than the one step a crash may cost."""
    answers = [n for n, event in enumerate(trace, start=1)
               if event.kind == "model.response" and event.detail.startswith("200")]
    return answers[1] if len(answers) > 1 else None


def classify(verdict) -> list[str]:
    """The columns one crash state counts in (besides "crash states")."""
    names = {v.invariant for v in verdict.violations}
    found = []
    if "one_step_repeated_per_crash" in names:
        found.append("steps lost")
    if any(v.invariant == "effects_exactly_once" and v.fact("extra")
           for v in verdict.violations):
        found.append("effects duplicated")
    answered = _second_answer(verdict.golden.trace)
    if verdict.resumed_at == 0 and answered is not None and \
            verdict.kill_point.index >= answered:
        found.append("restarted from scratch")
    if "completes_or_escalates" in names:
        found.append("dropped")
    if "api_valid" in names:
        found.append("invalid transcripts")
    if not verdict.violations:
        found.append("resumed correctly")
    return found


def mode_of(run) -> str:
    return run.agent.partition(":")[2] or run.agent


def rows(runs: Iterable, *, by_category: bool = False) -> list[Row]:
    """One row per (scenario, durability mode), or per (mode, kill-point category) summed
    over the scenarios."""
    out: dict[tuple, Row] = {}
    for run in runs:
        for verdict in run.verdicts:
            if by_category:
                key = ("all", mode_of(run), verdict.kill_point.category)
            else:
                key = (run.scenario.id, mode_of(run), "all")
            row = out.setdefault(key, Row(*key))
            row.counts["crash states"] += 1
            for column in classify(verdict):
                row.counts[column] += 1
                if column != "resumed correctly":
                    row.replay.setdefault(column, run.replay_command(verdict))
    return sorted(out.values(), key=lambda r: (r.scenario, _MODES.get(r.mode, 9),
                                               _order(r.category)))


_MODES = {"sync": 0, "async": 1, "exit": 2}


def _order(category: str) -> int:
    from ...killpoints import CATEGORIES

    return CATEGORIES.index(category) if category in CATEGORIES else -1


def table(runs: Iterable, *, by_category: bool = False) -> str:
    """A Markdown table (it reads as plain text too)."""
    head = ["durability", "kill-point category"] if by_category else ["scenario",
                                                                      "durability"]
    lines = ["| " + " | ".join(head + list(COLUMNS)) + " |",
             "|" + "---|" * (len(head) + len(COLUMNS))]
    for row in rows(runs, by_category=by_category):
        cells = [row.mode, row.category] if by_category else [row.scenario, row.mode]
        cells += [str(row.counts[c]) if row.counts[c] else "·" for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def breaks(runs: Iterable) -> list[str]:
    """Each kind of break, once per scenario and mode, with the command that replays it."""
    out = []
    for row in rows(runs):
        for column, command in row.replay.items():
            out.append(f"{row.scenario} [{row.mode}] {column} "
                       f"({row.counts[column]} of {row.counts['crash states']}): {command}")
    return out
