"""Scenario files: a task, the model's script, the services, the expected final answer.

Loading validates everything up front; an error names the file, the key and what was
expected, never a traceback from deep inside a run.
"""
from __future__ import annotations

import datetime as _dt
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model import ApiFault, Script, ToolCall, Turn
from .model.script import FAULT_KINDS
from .world import RECEIVER_KINDS, World, WorldClock, parse_instant


MAIN_TAG = "s"  # the main script's tag in tool-use ids (toolu_s_03_1)


class ScenarioError(ValueError):
    """A scenario file is malformed. `str()` names the file, the key and what was expected."""

    def __init__(self, path: str | Path, key: str, expected: str, got: Any = None) -> None:
        self.path, self.key, self.expected = str(path), key, expected
        detail = "" if got is None else f", got {_show(got)}"
        super().__init__(f"{self.path}: {key}: expected {expected}{detail}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    kind: str
    records: dict = field(default_factory=dict)
    key_retention_hours: float = 24.0


@dataclass(frozen=True)
class Scenario:
    id: str
    path: str
    task: str
    script: Script
    expected_final_answer: str
    services: tuple[ServiceSpec, ...]
    model: str = "claude-sonnet-5-5"
    start_time: str = "2026-10-01T09:00:00Z"
    subagents: tuple[Script, ...] = ()

    def build_world(self, *, retry_after_ms: int = 1) -> World:
        world = World(clock=WorldClock(self.start_time), retry_after_ms=retry_after_ms,
                      scripts=[self.script, *self.subagents])
        for spec in self.services:
            options: dict[str, Any] = {}
            if spec.kind in ("queryable", "readonly"):
                options["records"] = spec.records
            if spec.kind == "keyed":
                options["key_retention"] = _dt.timedelta(hours=spec.key_retention_hours)
            world.add_service(spec.name, spec.kind, **options)
        return world

    def subagent(self, name: str) -> Script:
        for s in self.subagents:
            if s.tag == name:
                return s
        raise KeyError(f"scenario {self.id!r} has no sub-agent {name!r}")


class _Reader:
    """Typed access to a TOML table that reports the dotted key on every mistake."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    def fail(self, key: str, expected: str, got: Any = None) -> ScenarioError:
        return ScenarioError(self.path, key, expected, got)

    def get(self, table: dict, key: str, where: str, kind: type | tuple, expected: str,
            default: Any = ..., ) -> Any:
        full = f"{where}.{key}" if where else key
        if key not in table:
            if default is ...:
                raise self.fail(full, expected + " (missing)")
            return default
        value = table[key]
        if not isinstance(value, kind) or isinstance(value, bool) and bool not in (
                kind if isinstance(kind, tuple) else (kind,)):
            raise self.fail(full, expected, value)
        if isinstance(value, str) and not value.strip():
            raise self.fail(full, expected, value)
        return value

    def no_extra(self, table: dict, allowed: set[str], where: str) -> None:
        for key in table:
            if key not in allowed:
                full = f"{where}.{key}" if where else key
                raise self.fail(full, "one of the known keys " + ", ".join(sorted(allowed)),
                                "an unknown key")

    def turns(self, table: dict, where: str) -> tuple[Turn, ...]:
        raw = self.get(table, "turns", where, list, "a list of [[turns]] tables")
        if not raw:
            raise self.fail(f"{where}.turns" if where else "turns", "at least one turn", raw)
        turns = []
        for i, t in enumerate(raw):
            at = f"{where}.turns[{i}]" if where else f"turns[{i}]"
            if not isinstance(t, dict):
                raise self.fail(at, "a table", t)
            self.no_extra(t, {"text", "tool_calls", "final"}, at)
            if ("final" in t) == ("tool_calls" in t):
                raise self.fail(at, "exactly one of 'tool_calls' or 'final'",
                                "both" if "final" in t else "neither")
            if "final" in t:
                turns.append(Turn(final=self.get(t, "final", at, str, "a non-empty string")))
                if i != len(raw) - 1:
                    raise self.fail(at + ".final", "the final answer only in the last turn")
                continue
            calls_raw = self.get(t, "tool_calls", at, list, "a non-empty list of tool calls")
            if not calls_raw:
                raise self.fail(at + ".tool_calls", "a non-empty list of tool calls", calls_raw)
            calls = []
            for k, c in enumerate(calls_raw):
                cat = f"{at}.tool_calls[{k}]"
                if not isinstance(c, dict):
                    raise self.fail(cat, "a table {name = ..., input = {...}}", c)
                self.no_extra(c, {"name", "input"}, cat)
                calls.append(ToolCall(self.get(c, "name", cat, str, "a tool name"),
                                      dict(self.get(c, "input", cat, dict, "a table of inputs",
                                                    {}))))
            turns.append(Turn(tool_calls=tuple(calls),
                              text=self.get(t, "text", at, str, "a string", "")))
        if not turns[-1].is_final:
            raise self.fail(f"{where}.turns" if where else "turns",
                            "a last turn with a 'final' answer")
        return tuple(turns)

    def faults(self, table: dict, where: str, n_turns: int) -> tuple[ApiFault, ...]:
        out = []
        for i, f in enumerate(self.get(table, "faults", where, list, "a list of [[faults]]",
                                       [])):
            at = f"{where}.faults[{i}]" if where else f"faults[{i}]"
            if not isinstance(f, dict):
                raise self.fail(at, "a table", f)
            self.no_extra(f, {"at", "kind", "times"}, at)
            pos = self.get(f, "at", at, int, f"a turn position 0..{n_turns - 1}")
            if not 0 <= pos < n_turns:
                raise self.fail(at + ".at", f"a turn position 0..{n_turns - 1}", pos)
            kind = str(self.get(f, "kind", at, (str, int), "one of " + ", ".join(FAULT_KINDS)))
            if kind not in FAULT_KINDS:
                raise self.fail(at + ".kind", "one of " + ", ".join(FAULT_KINDS), kind)
            times = self.get(f, "times", at, int, "a positive integer", 1)
            if times < 1:
                raise self.fail(at + ".times", "a positive integer", times)
            out.append(ApiFault(at=pos, kind=kind, times=times))
        return tuple(out)


_TOP_KEYS = {"id", "task", "model", "start_time", "expected_final_answer", "services",
             "turns", "faults", "subagents"}


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(path, "(file)", "an existing scenario file", "no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(path, "(syntax)", "valid TOML", str(exc)) from None
    return parse_scenario(data, path)


def parse_scenario(data: dict, path: str | Path = "<scenario>") -> Scenario:
    r = _Reader(path)
    r.no_extra(data, _TOP_KEYS, "")
    task = r.get(data, "task", "", str, "the task in words (a non-empty string)")
    turns = r.turns(data, "")
    start = r.get(data, "start_time", "", (str, _dt.datetime), "an ISO-8601 instant",
                  "2026-10-01T09:00:00Z")
    try:
        start = parse_instant(start).isoformat()
    except (ValueError, OverflowError):
        raise r.fail("start_time", "an ISO-8601 instant", start) from None

    services = []
    raw_services = r.get(data, "services", "", dict, "a table of [services.NAME]", {})
    for name, spec in raw_services.items():
        at = f"services.{name}"
        if not isinstance(spec, dict):
            raise r.fail(at, "a table with 'kind'", spec)
        r.no_extra(spec, {"kind", "records", "key_retention_hours"}, at)
        kind = r.get(spec, "kind", at, str, "one of " + ", ".join(RECEIVER_KINDS))
        if kind not in RECEIVER_KINDS:
            raise r.fail(at + ".kind", "one of " + ", ".join(RECEIVER_KINDS), kind)
        records = r.get(spec, "records", at, dict, "a table of records by id", {})
        if records and kind not in ("queryable", "readonly"):
            raise r.fail(at + ".records", "records only on queryable or readonly services",
                         kind)
        hours = r.get(spec, "key_retention_hours", at, (int, float), "a positive number", 24)
        try:
            if not math.isfinite(hours) or hours <= 0:
                raise ValueError
            _dt.timedelta(hours=hours)
        except (ValueError, OverflowError):
            raise r.fail(at + ".key_retention_hours", "a positive number of hours that fits "
                         "a duration", hours) from None
        services.append(ServiceSpec(name, kind, dict(records), float(hours)))

    subagents = []
    for name, sub in r.get(data, "subagents", "", dict, "a table of [subagents.NAME]",
                           {}).items():
        at = f"subagents.{name}"
        if name == MAIN_TAG:
            raise r.fail(at, f"a sub-agent name other than {MAIN_TAG!r} (the main script's tag)")
        if not isinstance(sub, dict):
            raise r.fail(at, "a table with 'task' and 'turns'", sub)
        r.no_extra(sub, {"task", "turns", "faults"}, at)
        sub_turns = r.turns(sub, at)
        subagents.append(Script(task=r.get(sub, "task", at, str, "the sub-task in words"),
                                turns=sub_turns, tag=name,
                                faults=r.faults(sub, at, len(sub_turns))))
    tasks = [task] + [s.task for s in subagents]
    if len(set(tasks)) != len(tasks):
        raise r.fail("subagents", "task texts distinct from each other and from 'task'")

    scenario_id = r.get(data, "id", "", str, "a scenario id", Path(path).stem)
    return Scenario(
        id=scenario_id, path=str(path), task=task,
        script=Script(task=task, turns=turns, tag=MAIN_TAG, faults=r.faults(data, "", len(turns))),
        expected_final_answer=r.get(data, "expected_final_answer", "", str,
                                    "the final answer the run must give"),
        services=tuple(services), model=r.get(data, "model", "", str, "a model name",
                                              "claude-sonnet-5-5"),
        start_time=start, subagents=tuple(subagents))
