"""The adapter's exploration as faultsim's own report (`report.ModelRun`): the same summary
table, JSON, JUnit, counterexamples, exit codes and replay tokens as any agent.

A token's step names the kill point by its index in the clean run's order (the points of
`explore`, then the transcript writes) and the crash state by its place among that point's
states under the token's crash model (`runs.replay` reruns exactly that).
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import TYPE_CHECKING, Sequence

from ...killpoints import KillPoint as EnginePoint
from ...pipeline.crashes import explored, verdicts
from ...reports.report import ModelRun, Report, Verdict as ReportVerdict
from ...core.trace import Event
from .control import WRITE_KILL, KillPoint

if TYPE_CHECKING:
    from .results import Exploration, Verdict

MODE = "subprocess"  # real processes: a token says so, and its replay kills real ones too

_WHERE = {
    "model-request": "the fake's answer to model request {d} (the CLI has not read it)",
    "after-tool-use": "a tool_use block of {d} closed in the stream",
    "builtin-start": "the CLI's PreToolUse hook for its built-in tool {d} (not yet run)",
    "builtin-end": "the CLI's PostToolUse hook for its built-in tool {d} (it ran; the CLI has "
                   "not recorded its result)",
    "handler-entry": "the SDK's call of tool handler {d}",
    "before-effect": "the start of effect {d} (not yet applied)",
    "after-effect": "effect {d} applied (the handler has not returned)",
    "handler-return": "the return of tool handler {d} (the CLI has not its result)",
    WRITE_KILL: "the entry of the CLI's transcript write {n} (held by strace; it writes "
                "nothing)",
}


def engine_point(kp: KillPoint) -> EnginePoint:
    where = _WHERE.get(kp.category, "{d}").format(d=kp.detail, n=kp.ordinal)
    return EnginePoint(kp.index, None, kp.category, kp.id, where)


def course(points: Sequence[KillPoint]) -> list[Event]:
    """The clean run as a counterexample shows it around a kill, and as two clean runs are
    compared (`faultsim.pipeline.golden.agree`): its kill points in order (the CLI's own
    course is not traced event by event; its transcript writes, counted apart, are not
    placed among them)."""
    return [Event(kp.index, f"point.{kp.category}", kp.detail, f"#{kp.ordinal}")
            for kp in points if kp.category != WRITE_KILL]


def name(event: Event, before: Sequence[Event]) -> str:
    """A kill point of `course` as the agent's author knows it."""
    category = event.kind.removeprefix("point.")
    ordinal = event.detail.removeprefix("#")
    return _WHERE.get(category, "{d}").format(d=event.subject, n=ordinal) + (
        f" (#{ordinal})" if ordinal not in ("", "1") else "")


def _transcript(data: bytes) -> str:
    """A transcript as a counterexample shows it: what the resume rebuilds from (its raw
    bytes carry the CLI's timestamps and the sandbox's path, different on every run)."""
    kinds, last = [], "none"
    for line in data.split(b"\n")[:-1]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        kinds.append(entry.get("type"))
        if entry.get("type") in ("user", "assistant"):
            content = (entry.get("message") or {}).get("content")
            blocks = content if isinstance(content, list) else [{"type": "text"}]
            last = entry["type"] + " " + ", ".join(
                f"tool_use {b.get('name')}" if b.get("type") == "tool_use" else
                str(b.get("type")) for b in blocks if isinstance(b, dict))
    torn = "" if data.endswith(b"\n") or not data else ", then a torn line"
    return (f"{len(kinds)} entries ({kinds.count('user')} user, "
            f"{kinds.count('assistant')} assistant){torn}; the last conversation entry: "
            f"{last}")


class ClaudeRun(ModelRun):
    """faultsim's `ModelRun`, its counterexample naming the transcript by what it holds."""

    def counterexample(self, verdict: ReportVerdict) -> str:
        lines = []
        for line in super().counterexample(verdict).split("\n"):
            found = _PROJECT.match(line)
            if found:
                data = dict(verdict.state.files).get(found.group(1)) or b""
                line = f"    claude/projects/<cwd>/{found.group(2)}: {_transcript(data)}"
            lines.append(line)
        return "\n".join(lines)


_PROJECT = re.compile(r"^    (claude/projects/[^/]+/([^/ ]+\.jsonl)) \(\d+ bytes\): ")


def _is_power(v: Verdict) -> bool:
    return v.state.startswith("power loss")


def model_runs(exploration: Exploration, agent: str, crash_models: Sequence[str], *,
               timeout: float) -> list[ModelRun]:
    """One `ModelRun` per crash model, by the pipeline's conversion (`crashes.verdicts`,
    the command backend's): process crashes judge every state but the torn ones; power
    loss judges them all (a lost append is a power-loss state too, `sweep.found`)."""
    golden = dataclasses.replace(exploration.golden, trace=course(exploration.kill_points))
    points = {kp.id: engine_point(kp) for kp in exploration.kill_points}
    judged = [v.judged for v in exploration.verdicts if v.judged is not None]
    runs = {model: ClaudeRun(exploration.scenario, agent, model, list(points.values()),
                             [points[kp.id] for kp in explored(judged, model)],
                             seconds=exploration.seconds, mode=MODE, timeout=timeout)
            for model in crash_models}
    verdicts(runs, judged, golden, lambda kp: points[kp.id])
    return list(runs.values())


def assert_ok(exploration: Exploration, agent: str = "claude-agent-sdk:agent") -> None:
    """For a test: fail with faultsim's counterexamples when a crash state violates the
    protocol, and when nothing was tested (no kill landed)."""
    if not exploration.kills_landed or not exploration.verdicts:
        raise AssertionError("faultsim: no kill landed, no crash state judged: nothing was "
                             "tested")
    model = "power" if any(_is_power(v) for v in exploration.verdicts) else "process"
    Report(model_runs(exploration, agent, (model,), timeout=60.0)).assert_ok()
