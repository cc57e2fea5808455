"""`faultsim validate`: check scenario files without running an agent, and report every
problem at once, one line each: `FILE:LINE: dotted.key: message`.

The check walks the file against the loader's own table (`scenario.SECTIONS`: known keys,
types, allowed values, ranges) and the rules that need the whole file (a turn position
within its script, exactly one of `tool_calls` and `final`, distinct tasks ...), which are
the loader's own (faultsim.scenario.rules: the loader raises the first problem a rule
finds, this walk reports them all). The loader then runs as a backstop: a file it refuses
is never reported valid.

tomllib gives no positions, so a key's line is found in the text (`locate`): headers
(`[services.email]`, `[[turns]]`), `key = ` lines under them, and the elements of arrays
written one per line. A key found nowhere (an inline table's key) takes the line of the
nearest enclosing one, else line 1.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..world import parse_instant
from .load import (MOVED_FAULTS, SECTIONS, Field, parse_duration, parse_scenario,
                   toml_error_line)
from .types import MAIN_TAG, Problem, ScenarioError
from .rules import (checkpoint_declared, checkpoint_glob, distinct_tasks, ends_with_final,
                    fault_position, fault_script, final_is_last, langgraph_graph,
                    sandbox_allow, service_records, subagent_name, turn_reactions, turn_shape)


@dataclass(frozen=True)
class Located:
    """A problem as `faultsim validate` prints it: FILE:LINE: key: message."""

    path: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key}: {self.message}"


# -- where a key is written -----------------------------------------------------------------
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _dotted(text: str) -> tuple[list[str], str] | None:
    """The parts of the dotted key `text` starts with, and the rest of the text after it."""
    parts, i = [], 0
    while True:
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] in "\"'":
            quote = text[i]
            end = text.find(quote, i + 1)
            if end < 0:
                return None
            parts.append(text[i + 1:end])
            i = end + 1
        else:
            m = _BARE.match(text, i)
            if not m:
                return None
            parts.append(m.group())
            i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == ".":
            i += 1
            continue
        return parts, text[i:]


def _join(prefix: str, parts: list[str]) -> str:
    return ".".join([prefix, *parts] if prefix else parts)


def _depth(text: str) -> int:
    """How many brackets and braces `text` leaves open (strings and comments skipped)."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            break
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return depth


def locate(text: str) -> dict[str, int]:
    """Dotted keys as the loader names them (`turns[2].tool_calls`, `services.email.kind`)
    -> the 1-based line they are written on."""
    lines: dict[str, int] = {}
    counters: dict[str, int] = {}
    table = ""
    open_array: str | None = None  # a multi-line array value: its key
    element, depth = 0, 0
    in_string = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if in_string:  # inside a multi-line string
            if raw.count(in_string) % 2:
                in_string = None
            continue
        if open_array is not None:
            if depth == 1 and line and line[0] not in "]#":
                lines.setdefault(f"{open_array}[{element}]", n)
                element += 1
            depth += _depth(line)
            if depth <= 0:
                open_array = None
            continue
        if not line or line.startswith("#"):
            continue
        if line.startswith("[["):
            parsed = _dotted(line[2:])
            if parsed:
                name = _join("", parsed[0])
                index = counters.get(name, 0)
                counters[name] = index + 1
                table = f"{name}[{index}]"
                lines.setdefault(name, n)
                lines.setdefault(table, n)
            continue
        if line.startswith("["):
            parsed = _dotted(line[1:])
            if parsed:
                table = _join("", parsed[0])
                for k in range(1, len(parsed[0]) + 1):
                    lines.setdefault(_join("", parsed[0][:k]), n)
            continue
        parsed = _dotted(line)
        if not parsed or not parsed[1].startswith("="):
            continue
        parts, rest = parsed
        for k in range(1, len(parts) + 1):
            lines.setdefault(_join(table, parts[:k]), n)
        value = rest[1:].strip()
        for quote in ('"""', "'''"):
            if value.startswith(quote) and value.count(quote) == 1:
                in_string = quote
        if value.startswith("[") and _depth(value) > 0:
            open_array, element, depth = _join(table, parts), 0, _depth(value)
            if value[1:].split("#")[0].strip():  # an element on the key's own line
                lines.setdefault(f"{open_array}[0]", n)
                element = 1
    return lines


_LAST = re.compile(r"(\[\d+\]|\.[^.\[]+|^[^.\[]+)$")


def line_of(key: str, lines: dict[str, int]) -> int:
    """The line of `key`, else of its nearest enclosing key, else 1."""
    while key:
        if key in lines:
            return lines[key]
        m = _LAST.search(key)
        if not m or m.start() == 0:
            key = "" if not m else key[:m.start()]
            continue
        key = key[:m.start()]
    return 1


# -- what is wrong --------------------------------------------------------------------------
_PY = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
       "object": dict, "array": list, "table": dict, "map": dict}


class _Walk:
    def __init__(self) -> None:
        self.errors: list[Problem] = []

    def bad(self, key: str, expected: str, got: Any = None) -> None:
        self.errors.append(Problem(key, expected, got))

    def add(self, found: Iterable[Problem]) -> None:
        """What a rule of faultsim.scenario.rules finds (the loader raises the first)."""
        self.errors += found

    def value(self, f: Field, value: Any, key: str) -> bool:
        """Whether `value` has the field's type (reported when not)."""
        if f.type == "duration":
            try:
                parse_duration(value)
            except ValueError:
                self.bad(key, f.expected, value)
                return False
            return True
        if f.type == "instant":
            try:
                if not isinstance(value, (str, _dt.datetime)):
                    raise ValueError
                parse_instant(value)
            except (ValueError, OverflowError):
                self.bad(key, f.expected, value)
                return False
            return True
        kind = _PY[f.type]
        if f.enum and f.type == "string" and isinstance(value, int) \
                and not isinstance(value, bool):
            value = str(value)  # kind = 529
        if not isinstance(value, kind) or (isinstance(value, bool) and f.type != "boolean"):
            self.bad(key, f.expected, value)
            return False
        if isinstance(value, str) and not value.strip():
            self.bad(key, f.expected, value)
            return False
        if f.enum and f.type == "string" and value not in f.enum:
            self.bad(key, f.expected, value)
            return False
        if f.minimum is not None and value < f.minimum:
            self.bad(key, f.expected, value)
            return False
        if f.exclusive_minimum is not None and value <= f.exclusive_minimum:
            self.bad(key, f.expected, value)
            return False
        if f.type == "array":
            if f.min_items and len(value) < f.min_items:
                self.bad(key, f.expected + (", not empty" if not value else ""), value)
                return False
            if f.unique and len(set(map(repr, value))) != len(value):
                self.bad(key, f.expected + ", each once", value)
            for k, item in enumerate(value):
                at = f"{key}[{k}]"
                if f.of:
                    if not isinstance(item, dict):
                        self.bad(at, "a table", item)
                    else:
                        self.section(f.of, item, at)
                elif not isinstance(item, _PY[f.items or "string"]) or \
                        (isinstance(item, str) and not item):
                    self.bad(at, f.expected, item)
                elif f.enum and item not in f.enum:
                    self.bad(at, "one of " + ", ".join(f.enum), item)
        elif f.type == "table":
            self.section(f.of, value, key)
        elif f.type == "map":
            for name, item in value.items():
                at = f"{key}.{name}"
                if not isinstance(item, dict):
                    self.bad(at, "a table", item)
                else:
                    self.section(f.of, item, at)
        return True

    def section(self, name: str, table: dict, where: str) -> dict[str, bool]:
        """Check `table` against the section; returns which present keys are well typed."""
        fields = SECTIONS[name]
        if "faults" in table and name in ("scenario", "subagent"):
            self.bad(_key(where, "faults"), MOVED_FAULTS, "an old [[faults]] list")
        good = {}
        for key, value in table.items():
            full = _key(where, key)
            if key not in fields:
                if key != "faults":
                    self.bad(full, "one of the known keys " + ", ".join(sorted(fields)),
                             "an unknown key")
                continue
            good[key] = self.value(fields[key], value, full)
        for key, f in fields.items():
            if f.required and key not in table:
                self.bad(_key(where, key), f.expected + " (missing)")
        getattr(self, "rules_" + name, lambda *a: None)(table, where, good)
        return good

    # the rules beyond one key's type (faultsim.scenario.rules), by section
    def rules_turn(self, t: dict, where: str, good: dict) -> None:
        self.add(turn_shape(t, where))
        self.add(turn_reactions(t, where))

    def rules_service(self, s: dict, where: str, good: dict) -> None:
        self.add(service_records(s, where))
        if good.get("key_retention_hours"):
            try:
                if not math.isfinite(s["key_retention_hours"]):
                    raise ValueError
                _dt.timedelta(hours=s["key_retention_hours"])
            except (ValueError, OverflowError):
                self.bad(_key(where, "key_retention_hours"), "a positive number of hours "
                         "that fits a duration", s["key_retention_hours"])

    def rules_langgraph(self, lg: dict, where: str, good: dict) -> None:
        if good.get("graph"):
            self.add(langgraph_graph(lg["graph"], _key(where, "graph")))

    def rules_checkpoint(self, cp: dict, where: str, good: dict) -> None:
        for key in ("files", "redis_keys"):
            if good.get(key):
                for k, g in enumerate(cp[key]):
                    self.add(checkpoint_glob(key, g, f"{where}.{key}[{k}]"))
        self.add(checkpoint_declared(cp, where, good))

    def rules_sandbox(self, sb: dict, where: str, good: dict) -> None:
        if good.get("allow"):
            for k, entry in enumerate(sb["allow"]):
                self.add(sandbox_allow(entry, f"{where}.allow[{k}]"))

    def scripts(self, data: dict) -> None:
        """The rules across scripts: final answers last, turn positions within their
        script, sub-agent names and tasks."""
        scripts: dict[str, int] = {}
        for tag, turns, where in self._scripts(data):
            scripts[tag] = len(turns)
            for i, t in enumerate(turns):
                self.add(final_is_last(t, i, len(turns), f"{where}[{i}]"))
            self.add(ends_with_final(turns, where))
        subs = data.get("subagents")
        if isinstance(subs, dict):
            for name in subs:
                self.add(subagent_name(name, f"subagents.{name}"))
            self.add(distinct_tasks(data))
        profile = data.get("fault_profile")
        faults = profile.get("api_faults") if isinstance(profile, dict) else None
        if not isinstance(faults, list):
            return
        for i, f in enumerate(faults):
            if not isinstance(f, dict):
                continue
            at = f"fault_profile.api_faults[{i}]"
            tag = f.get("script", MAIN_TAG)
            if not isinstance(tag, str):
                continue  # reported as a type error
            if tag not in scripts:
                self.add(fault_script(tag, at, scripts))
                continue
            self.add(fault_position(f.get("at"), at, scripts[tag]))

    @staticmethod
    def _scripts(data: dict):
        if isinstance(data.get("turns"), list):
            yield MAIN_TAG, data["turns"], "turns"
        subs = data.get("subagents")
        for name, sub in (subs.items() if isinstance(subs, dict) else ()):
            if isinstance(sub, dict) and isinstance(sub.get("turns"), list):
                yield name, sub["turns"], f"subagents.{name}.turns"


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def problems(data: dict, path: str | Path = "<scenario>", backstop: bool = True
             ) -> list[tuple[str, str]]:
    """Every (dotted key, message) wrong in a parsed scenario file. `backstop=False` leaves
    out the loader's own check (a test's way to see that the walk alone finds them)."""
    walk = _Walk()
    walk.section("scenario", data, "")
    walk.scripts(data)
    errors = [(p.key, p.message) for p in walk.errors]
    if not backstop:
        return list(dict.fromkeys(errors))
    try:
        parse_scenario(data, path)
    except ScenarioError as exc:
        # the backstop: a rule the walk does not know is still reported
        if not any(_related(exc.key, key) for key, _ in errors):
            detail = str(exc)[len(f"{exc.path}: {exc.key}: "):]
            errors.append((exc.key, detail))
    seen, out = set(), []
    for error in errors:
        if error not in seen:
            seen.add(error)
            out.append(error)
    return out


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


def validate_file(path: str | Path) -> list[Located]:
    """The problems of one scenario file (none: valid)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [Located(name, 1, "(file)", "expected an existing scenario file")]
    except UnicodeDecodeError as exc:
        return [Located(name, 1, "(syntax)", f"expected UTF-8 text, got {exc.reason}")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [Located(name, toml_error_line(exc) or 1, "(syntax)",
                        f"expected valid TOML, got {exc}")]
    lines = locate(text)
    found = [Located(name, line_of(key, lines), key, message)
             for key, message in problems(data, path)]
    return sorted(found, key=lambda p: p.line)  # stable: one line's keys keep their order


def scenario_files(args: list[str]) -> tuple[list[Path], list[Located]]:
    """The files named, and under each folder named every *.toml at any depth; a path that
    does not exist is a problem of its own."""
    files: list[Path] = []
    missing: list[Located] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(p.rglob("*.toml"))
            if not found:
                missing.append(Located(arg, 1, "(folder)", "expected *.toml scenario files "
                                       "in this folder, found none"))
            files += found
        elif p.exists():
            files.append(p)
        else:
            missing.append(Located(arg, 1, "(file)", "expected an existing scenario file or "
                                   "folder"))
    return files, missing
