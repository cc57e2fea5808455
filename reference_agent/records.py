"""The run's other durable files, each written whole and atomically (P3):

- plan.json       P6   numbered steps with completion checks, written before their effects
- progress.json   P7   one entry per completed step, with evidence; never written before
- intents.json    P11  intent before a blind effect, completion after it
- decisions.json  P12  decisions with reasons, and open unknowns
- run.json        P12  running | completed | escalated | failed, for retention
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import storage


class RecordFileError(Exception):
    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


def _load(path: Path, default: dict) -> dict:
    try:
        data = storage.read_json(path)
    except (UnicodeDecodeError, ValueError):
        raise RecordFileError(path, "not valid JSON") from None
    if data is None:
        return default
    if not isinstance(data, dict):
        raise RecordFileError(path, "expected a JSON object")
    return data


class Plan:
    """P6. Steps are discovered as the model names tools; each is planned before it runs."""

    def __init__(self, path: Path, run_id: str, task: str) -> None:
        self.path = path
        self.data = _load(path, {"run_id": run_id, "task": task, "steps": []})

    @property
    def steps(self) -> list[dict]:
        return self.data["steps"]

    def step_for(self, tool_use_id: str) -> dict | None:
        return next((s for s in self.steps if s["tool_use_id"] == tool_use_id), None)

    def add(self, entries: list[dict]) -> None:
        new = [e for e in entries if self.step_for(e["tool_use_id"]) is None]
        for e in new:
            e["n"] = len(self.steps) + 1
            self.steps.append(e)
        self.save()

    def save(self) -> None:
        storage.atomic_write_json(self.path, self.data)


class Progress:
    """P7. One entry per completed step, keyed by step number: a retried step replaces its
    own entry (P9) instead of being logged twice."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.data = _load(path, {"run_id": run_id, "steps": []})

    @property
    def steps(self) -> list[dict]:
        return self.data["steps"]

    def entry_for(self, tool_use_id: str) -> dict | None:
        return next((s for s in self.steps if s["tool_use_id"] == tool_use_id), None)

    def record(self, entry: dict) -> None:
        steps = [s for s in self.steps if s["n"] != entry["n"]] + [entry]
        self.data["steps"] = sorted(steps, key=lambda s: s["n"])
        self.save()

    def save(self) -> None:
        storage.atomic_write_json(self.path, self.data)


class Intents:
    """P11. An intent with the reserved key before a blind effect, a completion after it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = _load(path, {"intents": {}})

    def get(self, tool_use_id: str) -> dict | None:
        return self.data["intents"].get(tool_use_id)

    def write_intent(self, tool_use_id: str, record: dict) -> None:
        self.data["intents"][tool_use_id] = {**record, "completed_at": None, "result": None}
        storage.atomic_write_json(self.path, self.data)

    def complete(self, tool_use_id: str, result: Any, at: str) -> None:
        self.data["intents"][tool_use_id].update(completed_at=at, result=result)
        storage.atomic_write_json(self.path, self.data)


class Decisions:
    """P12. Decisions with reasons, so a resumed run does not reopen them; open unknowns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = _load(path, {"decisions": [], "unknowns": []})

    def decide(self, at: str, decision: str, reason: str, step: int | None = None) -> None:
        self.data["decisions"].append({"at": at, "step": step, "decision": decision,
                                       "reason": reason})
        storage.atomic_write_json(self.path, self.data)

    def unknown(self, at: str, what: str, step: int | None = None) -> None:
        self.data["unknowns"].append({"at": at, "step": step, "what": what})
        storage.atomic_write_json(self.path, self.data)


RUNNING, COMPLETED, ESCALATED, FAILED = "running", "completed", "escalated", "failed"


@dataclass
class RunStatus:
    path: Path

    def read(self) -> dict | None:
        data = _load(self.path, {})
        return data or None

    def write(self, run_id: str, status: str, at: str, **extra: Any) -> None:
        storage.atomic_write_json(self.path, {"run_id": run_id, "status": status,
                                              "updated_at": at, **extra})
