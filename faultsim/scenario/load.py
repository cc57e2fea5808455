"""Loading scenario files: the format in one table (`SECTIONS`: every section, its keys,
their types, allowed values and defaults), durations, and `load_scenario` /
`parse_scenario`, which validate everything up front; an error names the file, the key and
what was expected, never a traceback from deep inside a run.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..core.checkpoints import DEFAULT as DEFAULT_CHECKPOINT
from ..core.checkpoints import FORMATS as CP_FORMATS
from ..core.checkpoints import CheckpointSpec
from ..core.classes import COVERAGES, PER_CLASS
from ..killpoints import TORN_CUTS
from ..interpose.netguard import parse_allowed
from ..model import ApiFault, Script, ToolCall, Turn
from ..model.script import FAULT_KINDS, ON_ERROR
from ..world import RECEIVER_KINDS, parse_instant
from .types import (CRASH_MODEL_NAMES, LANGGRAPH_METHODS, LANGGRAPH_MODES, MAIN_TAG,
                    STORE_KINDS, FaultProfile, LangGraphSpec, Problem, Scenario, ScenarioError,
                    ServiceSpec, StoreSpec)
from .rules import (ALLOW_EXPECTED, GLOB_EXPECTED, checkpoint_declared, checkpoint_glob,
                    distinct_tasks, ends_with_final, fault_position, fault_script,
                    final_is_last, langgraph_graph, sandbox_allow, service_records,
                    subagent_name, turn_reactions, turn_shape)


# -- the scenario format, in one table --------------------------------------------------------
# Every section (table) of a scenario file and every key it may hold, with its type, what the
# loader expects in words, and its default. The loader takes its known keys and defaults from
# here; the JSON Schema (faultsim.scenario.schema) and `faultsim validate` are generated from
# it, so the three cannot drift apart.
REQUIRED = object()  # a key without a default


@dataclass(frozen=True)
class Field:
    """One key of a section. `type` is a JSON type ("string", "integer", "number",
    "boolean", "object" for a free-form table), "array" (of `items`: a JSON type or a
    section), "table" (the section `of`), "map" (a table of NAME -> the section `of`),
    "duration" or "instant". `default` None: optional, and absent means none (or, for
    `id`, the file's stem)."""

    type: str
    expected: str
    default: Any = REQUIRED
    of: str | None = None  # the section of a table or a map, or an array's items
    items: str | None = None  # an array's item JSON type (when not a section)
    enum: tuple = ()  # the values allowed (for an array: of its items)
    minimum: float | None = None  # inclusive
    exclusive_minimum: float | None = None
    min_items: int | None = None
    unique: bool = False
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def _one_of(names: tuple) -> str:
    return "one of " + ", ".join(names)


SECTIONS: dict[str, dict[str, Field]] = {
    "scenario": {
        "id": Field("string", "a scenario id", None, doc="default: the file's name"),
        "task": Field("string", "the task in words (a non-empty string)",
                      doc="the first user message"),
        "expected_final_answer": Field("string", "the final answer the run must give"),
        "model": Field("string", "a model name", "claude-sonnet-5-5"),
        "prefill_models": Field("array", "a list of model names", None, items="string",
                                doc="models that accept a conversation ending with an "
                                    "assistant turn (default: none, as the API today)"),
        "start_time": Field("instant", "an ISO-8601 instant", "2026-10-01T09:00:00Z"),
        "max_turns": Field("integer", "an integer >= 1", 10_000, minimum=1,
                           doc="the most model turns the agent may take (env.max_turns)"),
        "services": Field("map", "a table of [services.NAME]", {}, of="service"),
        "turns": Field("array", "a list of [[turns]] tables", of="turn", min_items=1,
                       doc="the model's script: one entry per model answer"),
        "subagents": Field("map", "a table of [subagents.NAME]", {}, of="subagent"),
        "fault_profile": Field("table", "a [fault_profile] table", {}, of="fault_profile"),
        "store": Field("table", "a [store] table", {}, of="store"),
        "langgraph": Field("table", "a [langgraph] table", None, of="langgraph"),
        "checkpoint": Field("table", "a [checkpoint] table", None, of="checkpoint"),
        "sandbox": Field("table", "a [sandbox] table", {}, of="sandbox"),
    },
    "service": {
        "kind": Field("string", _one_of(RECEIVER_KINDS), enum=RECEIVER_KINDS),
        "records": Field("object", "a table of records by id", {},
                         doc="only on queryable or readonly services"),
        "key_retention_hours": Field("number", "a positive number", 24,
                                     exclusive_minimum=0, doc="keyed services"),
    },
    "turn": {
        "text": Field("string", "a string", ""),
        "tool_calls": Field("array", "a non-empty list of tool calls", None, of="tool_call",
                            min_items=1, doc="exactly one of tool_calls or final"),
        "final": Field("string", "a non-empty string", None,
                       doc="the final answer; in the last turn, or in one with a follow_up"),
        "thinking": Field("string", "a non-empty string", None),
        "redacted_thinking": Field("string", "a non-empty string", None),
        "follow_up": Field("string", "a non-empty string", None,
                           doc="a final turn but the last: what the user says next"),
        "on_error": Field("string", _one_of(ON_ERROR), None, enum=ON_ERROR,
                          doc="a tool turn: what the model does when a result of its calls "
                              "is an error (default: retry an interrupted call, else go on)"),
        "on_error_final": Field("string", "a non-empty string", None,
                                doc="on_error = \"give_up\": the model's last answer"),
    },
    "tool_call": {
        "name": Field("string", "a tool name"),
        "input": Field("object", "a table of inputs", {}),
    },
    "subagent": {
        "task": Field("string", "the sub-task in words"),
        "turns": Field("array", "a list of [[turns]] tables", of="turn", min_items=1),
    },
    "fault_profile": {
        "crash_models": Field("array", "a list of crash models, some of "
                              + ", ".join(CRASH_MODEL_NAMES), ["process"],
                              items="string", enum=CRASH_MODEL_NAMES, min_items=1,
                              unique=True),
        "crashes": Field("integer", "an integer >= 1", 2, minimum=1,
                         doc="the most crashes in one schedule"),
        "downtime": Field("duration", 'a duration such as "90s", "45m", "25h", "2d", '
                          '"1h30m", or seconds', 0,
                          doc="how far the world's clock moves between a crash and the "
                              "restart"),
        "api_faults": Field("array", "a list of {at = TURN, kind = ..., times = N, "
                            "script = NAME}", [], of="api_fault"),
        "powersafe_overwrite": Field("boolean", "true or false", True),
        "torn_cuts": Field("string", _one_of(TORN_CUTS), "bounded", enum=TORN_CUTS,
                           doc="a kill inside a write of over 64 KiB: a bounded set of "
                               "representative cuts, or every sector boundary"),
        "coverage": Field("string", _one_of(COVERAGES), "exhaustive", enum=COVERAGES,
                          doc="every kill point, or each kill-point class at its first "
                              "and last occurrence and per_class seeded others, and every "
                              "kill point of the first and last step"),
        "per_class": Field("integer", "an integer >= 0", PER_CLASS, minimum=0,
                           doc="representative coverage: seeded kill points judged per "
                               "class beside its first and last"),
    },
    "api_fault": {
        "at": Field("integer", "a turn position", minimum=0,
                    doc="0-based, within the script the fault is on"),
        "kind": Field("string", _one_of(FAULT_KINDS), enum=FAULT_KINDS,
                      doc="a status code may be written as a number"),
        "times": Field("integer", "a positive integer", 1, minimum=1),
        "script": Field("string", "the name of a sub-agent", MAIN_TAG,
                        doc=f"{MAIN_TAG!r}, the default, is the main script"),
    },
    "store": {
        "kind": Field("string", _one_of(STORE_KINDS), "file", enum=STORE_KINDS),
    },
    "langgraph": {
        "graph": Field("string", "the graph factory: FILE.py:ATTR (relative to this file) "
                       "or MODULE:ATTR"),
        "human_reply": Field("string", "a person's answer", None),
        "durability": Field("string", _one_of(LANGGRAPH_MODES), None, enum=LANGGRAPH_MODES,
                            doc="the mode `--agent langgraph:` (no mode) and `faultsim run` "
                                "explore (default: every mode)"),
        "method": Field("string", _one_of(LANGGRAPH_METHODS), "invoke",
                        enum=LANGGRAPH_METHODS,
                        doc="how the service drives the graph: ainvoke / astream on an "
                            "event loop, with an AsyncSqliteSaver on a SQLite store"),
    },
    "checkpoint": {
        "files": Field("array", "a list of globs", [], items="string",
                       doc="globs relative to the workdir"),
        "redis_keys": Field("array", "a list of globs", [], items="string"),
        "format": Field("string", _one_of(CP_FORMATS), None, enum=CP_FORMATS),
    },
    "sandbox": {
        "allow": Field("array", 'a list of "HOST:PORT" strings', [], items="string"),
    },
}


def keys(section: str) -> set[str]:
    return set(SECTIONS[section])


def default(section: str, key: str) -> Any:
    return SECTIONS[section][key].default


class _Reader:
    """Typed access to a TOML table that reports the dotted key on every mistake."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    def fail(self, key: str, expected: str, got: Any = None) -> ScenarioError:
        return Problem(key, expected, got).error(self.path)

    def first(self, found: Iterable[Problem]) -> None:
        """Raise the first problem a rule (faultsim.scenario.rules) finds."""
        for problem in found:
            raise problem.error(self.path)

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
            self.no_extra(t, keys("turn"), at)
            thinking = self.get(t, "thinking", at, str, "a non-empty string", None)
            redacted = self.get(t, "redacted_thinking", at, str, "a non-empty string", None)
            self.first(turn_shape(t, at))
            self.first(turn_reactions(t, at))
            if "final" in t:
                self.first(final_is_last(t, i, len(raw), at))
                turns.append(Turn(final=self.get(t, "final", at, str, "a non-empty string"),
                                  thinking=thinking, redacted_thinking=redacted,
                                  follow_up=self.get(t, "follow_up", at, str,
                                                     "a non-empty string", None)))
                continue
            on_error = self.get(t, "on_error", at, str, _one_of(ON_ERROR), None)
            if on_error is not None and on_error not in ON_ERROR:
                raise self.fail(at + ".on_error", _one_of(ON_ERROR), on_error)
            give_up = self.get(t, "on_error_final", at, str, "a non-empty string", None)
            calls_raw = self.get(t, "tool_calls", at, list, "a non-empty list of tool calls")
            if not calls_raw:
                raise self.fail(at + ".tool_calls", "a non-empty list of tool calls", calls_raw)
            calls = []
            for k, c in enumerate(calls_raw):
                cat = f"{at}.tool_calls[{k}]"
                if not isinstance(c, dict):
                    raise self.fail(cat, "a table {name = ..., input = {...}}", c)
                self.no_extra(c, keys("tool_call"), cat)
                calls.append(ToolCall(self.get(c, "name", cat, str, "a tool name"),
                                      dict(self.get(c, "input", cat, dict, "a table of inputs",
                                                    {}))))
            turns.append(Turn(tool_calls=tuple(calls),
                              text=self.get(t, "text", at, str, "a string", ""),
                              thinking=thinking, redacted_thinking=redacted,
                              on_error=on_error, on_error_final=give_up))
        self.first(ends_with_final(raw, f"{where}.turns" if where else "turns"))
        return tuple(turns)

    def api_faults(self, profile: dict, scripts: dict[str, int]) -> dict[str, tuple]:
        """`fault_profile.api_faults`: by script tag, the faults at its turn positions."""
        out: dict[str, list[ApiFault]] = {tag: [] for tag in scripts}
        where = "fault_profile.api_faults"
        raw = self.get(profile, "api_faults", "fault_profile", list,
                       "a list of {at = TURN, kind = ..., times = N, script = NAME}",
                       default("fault_profile", "api_faults"))
        names = ", ".join(repr(t) for t in scripts if t != MAIN_TAG)
        for i, f in enumerate(raw):
            at = f"{where}[{i}]"
            if not isinstance(f, dict):
                raise self.fail(at, "a table {at = TURN, kind = ...}", f)
            self.no_extra(f, keys("api_fault"), at)
            tag = self.get(f, "script", at, str, "the name of a sub-agent"
                           + (f" ({names})" if names else " (this scenario has none)"),
                           MAIN_TAG)
            self.first(fault_script(tag, at, scripts))
            n_turns = scripts[tag]
            pos = self.get(f, "at", at, int, f"a turn position 0..{n_turns - 1}")
            self.first(fault_position(pos, at, n_turns))
            kind = str(self.get(f, "kind", at, (str, int), "one of " + ", ".join(FAULT_KINDS)))
            if kind not in FAULT_KINDS:
                raise self.fail(at + ".kind", "one of " + ", ".join(FAULT_KINDS), kind)
            times = self.get(f, "times", at, int, "a positive integer",
                             default("api_fault", "times"))
            if times < 1:
                raise self.fail(at + ".times", "a positive integer", times)
            out[tag].append(ApiFault(at=pos, kind=kind, times=times))
        return {tag: tuple(faults) for tag, faults in out.items()}

    def profile(self, profile: dict) -> FaultProfile:
        where = "fault_profile"
        expected = "a list of crash models, some of " + ", ".join(CRASH_MODEL_NAMES)
        models = self.get(profile, "crash_models", where, list, expected,
                          default(where, "crash_models"))
        if not models or len(set(map(repr, models))) != len(models):
            raise self.fail(f"{where}.crash_models", expected + ", each once", models)
        for k, m in enumerate(models):
            if m not in CRASH_MODEL_NAMES:
                raise self.fail(f"{where}.crash_models[{k}]", "one of "
                                + ", ".join(CRASH_MODEL_NAMES), m)
        crashes = self.get(profile, "crashes", where, int, "an integer >= 1",
                           default(where, "crashes"))
        if crashes < 1:
            raise self.fail(f"{where}.crashes", "an integer >= 1", crashes)
        downtime = parse_duration(self.get(profile, "downtime", where, (str, int, float),
                                           DURATION_EXPECTED, default(where, "downtime")),
                                  self, f"{where}.downtime")
        powersafe = self.get(profile, "powersafe_overwrite", where, bool, "true or false",
                             default(where, "powersafe_overwrite"))
        cuts = self.get(profile, "torn_cuts", where, str, _one_of(TORN_CUTS),
                        default(where, "torn_cuts"))
        if cuts not in TORN_CUTS:
            raise self.fail(f"{where}.torn_cuts", _one_of(TORN_CUTS), cuts)
        coverage = self.get(profile, "coverage", where, str, _one_of(COVERAGES),
                            default(where, "coverage"))
        if coverage not in COVERAGES:
            raise self.fail(f"{where}.coverage", _one_of(COVERAGES), coverage)
        per_class = self.get(profile, "per_class", where, int, "an integer >= 0",
                             default(where, "per_class"))
        if per_class < 0:
            raise self.fail(f"{where}.per_class", "an integer >= 0", per_class)
        return FaultProfile(tuple(models), crashes, downtime, powersafe, cuts, coverage,
                            per_class)


DURATION_EXPECTED = 'a duration such as "90s", "45m", "25h", "2d", "1h30m", or seconds'
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([dhms]))", re.ASCII)
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def format_duration(seconds: float) -> str:
    """`5400` -> `"1h30m"`: the scenario file's own spelling."""
    if seconds <= 0:
        return "0s"
    out, rest = [], seconds
    for unit in ("d" if seconds % 86400 == 0 else "hms"):
        n = int(rest // _UNIT[unit]) if unit != "s" else rest
        if n:
            out.append(f"{n:g}{unit}")
            rest -= n * _UNIT[unit]
    return "".join(out)


def parse_duration(value: Any, reader: "_Reader | None" = None, key: str = "duration"
                   ) -> float:
    """Seconds from `"1h30m"`-style text or a number; a ScenarioError (or ValueError
    without a reader) names what was expected."""
    def bad() -> Exception:
        if reader is None:
            return ValueError(f"{value!r}: expected {DURATION_EXPECTED}")
        return reader.fail(key, DURATION_EXPECTED, value)

    if isinstance(value, bool):
        raise bad()
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise bad()
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    else:
        raise bad()
    try:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError
        _dt.timedelta(seconds=seconds)
    except (ValueError, OverflowError):
        raise bad() from None
    return seconds


MOVED_FAULTS = ("a fault profile: API faults are listed in [fault_profile] as "
          "api_faults = [{ at = TURN, kind = \"529\" }] (add script = NAME for a sub-agent)")


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(path, "(file)", "an existing scenario file", "no such file") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(path, "(syntax)", "UTF-8 text", exc.reason) from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(path, "(syntax)", "valid TOML", str(exc),
                            line=toml_error_line(exc)) from None
    return parse_scenario(data, path)


def toml_error_line(exc: Exception) -> int | None:
    """The line a TOML syntax error is on (tomllib says it only in its message)."""
    found = re.search(r"at line (\d+)", str(exc))
    return int(found.group(1)) if found else None


def parse_scenario(data: dict, path: str | Path = "<scenario>") -> Scenario:
    r = _Reader(path)
    if "faults" in data:
        raise r.fail("faults", MOVED_FAULTS, "the old top-level [[faults]] list")
    r.no_extra(data, keys("scenario"), "")
    task = r.get(data, "task", "", str, "the task in words (a non-empty string)")
    turns = r.turns(data, "")
    start = r.get(data, "start_time", "", (str, _dt.datetime), "an ISO-8601 instant",
                  default("scenario", "start_time"))
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
        r.no_extra(spec, keys("service"), at)
        kind = r.get(spec, "kind", at, str, "one of " + ", ".join(RECEIVER_KINDS))
        if kind not in RECEIVER_KINDS:
            raise r.fail(at + ".kind", "one of " + ", ".join(RECEIVER_KINDS), kind)
        records = r.get(spec, "records", at, dict, "a table of records by id", {})
        r.first(service_records(spec, at))
        hours = r.get(spec, "key_retention_hours", at, (int, float), "a positive number",
                      default("service", "key_retention_hours"))
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
        r.first(subagent_name(name, at))
        if not isinstance(sub, dict):
            raise r.fail(at, "a table with 'task' and 'turns'", sub)
        if "faults" in sub:
            raise r.fail(at + ".faults", MOVED_FAULTS, "a sub-agent's own [[faults]] list")
        r.no_extra(sub, keys("subagent"), at)
        sub_turns = r.turns(sub, at)
        subagents.append(Script(task=r.get(sub, "task", at, str, "the sub-task in words"),
                                turns=sub_turns, tag=name))
    r.first(distinct_tasks(data))

    raw_profile = r.get(data, "fault_profile", "", dict, "a [fault_profile] table", {})
    r.no_extra(raw_profile, keys("fault_profile"), "fault_profile")
    profile = r.profile(raw_profile)
    faults = r.api_faults(raw_profile, {MAIN_TAG: len(turns),
                                        **{s.tag: len(s.turns) for s in subagents}})
    subagents = [dataclasses.replace(s, faults=faults[s.tag]) for s in subagents]

    raw_store = r.get(data, "store", "", dict, "a [store] table", {})
    r.no_extra(raw_store, keys("store"), "store")
    store_kind = r.get(raw_store, "kind", "store", str, "one of " + ", ".join(STORE_KINDS),
                       default("store", "kind"))
    if store_kind not in STORE_KINDS:
        raise r.fail("store.kind", "one of " + ", ".join(STORE_KINDS), store_kind)

    langgraph = None
    if "langgraph" in data:
        raw_lg = r.get(data, "langgraph", "", dict, "a [langgraph] table", {})
        r.no_extra(raw_lg, keys("langgraph"), "langgraph")
        graph = r.get(raw_lg, "graph", "langgraph", str,
                      "the graph factory: FILE.py:ATTR (relative to this file) or MODULE:ATTR")
        r.first(langgraph_graph(graph, "langgraph.graph"))
        file, _, attr = graph.rpartition(":")
        if file.endswith(".py") and not Path(file).is_absolute():
            graph = f"{Path(path).parent / file}:{attr}"
        reply = r.get(raw_lg, "human_reply", "langgraph", str, "a person's answer", None) \
            if "human_reply" in raw_lg else None
        durability = r.get(raw_lg, "durability", "langgraph", str, _one_of(LANGGRAPH_MODES),
                           None)
        if durability is not None and durability not in LANGGRAPH_MODES:
            raise r.fail("langgraph.durability", _one_of(LANGGRAPH_MODES), durability)
        method = r.get(raw_lg, "method", "langgraph", str, _one_of(LANGGRAPH_METHODS),
                       "invoke")
        if method not in LANGGRAPH_METHODS:
            raise r.fail("langgraph.method", _one_of(LANGGRAPH_METHODS), method)
        langgraph = LangGraphSpec(graph, reply, durability, method)

    checkpoint = DEFAULT_CHECKPOINT
    if "checkpoint" in data:
        raw_cp = r.get(data, "checkpoint", "", dict, "a [checkpoint] table", {})
        r.no_extra(raw_cp, keys("checkpoint"), "checkpoint")
        globs = {}
        for key in ("files", "redis_keys"):
            globs[key] = r.get(raw_cp, key, "checkpoint", list, "a list of globs", [])
            for k, g in enumerate(globs[key]):
                if not isinstance(g, str) or not g:
                    raise r.fail(f"checkpoint.{key}[{k}]", GLOB_EXPECTED[key], g)
                r.first(checkpoint_glob(key, g, f"checkpoint.{key}[{k}]"))
        fmt = r.get(raw_cp, "format", "checkpoint", str, "one of " + ", ".join(CP_FORMATS),
                    None) if "format" in raw_cp else None
        if fmt is not None and fmt not in CP_FORMATS:
            raise r.fail("checkpoint.format", "one of " + ", ".join(CP_FORMATS), fmt)
        r.first(checkpoint_declared(raw_cp, "checkpoint", {}))
        checkpoint = CheckpointSpec(tuple(globs["files"]), tuple(globs["redis_keys"]), fmt,
                                    declared=True)

    raw_sandbox = r.get(data, "sandbox", "", dict, "a [sandbox] table", {})
    r.no_extra(raw_sandbox, keys("sandbox"), "sandbox")
    allow = []
    for k, entry in enumerate(r.get(raw_sandbox, "allow", "sandbox", list,
                                    "a list of \"HOST:PORT\" strings", [])):
        at = f"sandbox.allow[{k}]"
        if not isinstance(entry, str) or not entry:
            raise r.fail(at, ALLOW_EXPECTED, entry)
        r.first(sandbox_allow(entry, at))
        allow.append(parse_allowed(entry))

    scenario_id = r.get(data, "id", "", str, "a scenario id", Path(path).stem)
    max_turns = r.get(data, "max_turns", "", int, "an integer >= 1",
                      default("scenario", "max_turns"))
    if max_turns < 1:
        raise r.fail("max_turns", "an integer >= 1", max_turns)
    return Scenario(
        id=scenario_id, path=str(path), task=task, profile=profile,
        script=Script(task=task, turns=turns, tag=MAIN_TAG, faults=faults[MAIN_TAG]),
        expected_final_answer=r.get(data, "expected_final_answer", "", str,
                                    "the final answer the run must give"),
        services=tuple(services), model=r.get(data, "model", "", str, "a model name",
                                              default("scenario", "model")),
        start_time=start, subagents=tuple(subagents), store=StoreSpec(store_kind),
        langgraph=langgraph, prefill_models=_prefill_models(r, data), allow=tuple(allow),
        checkpoint=checkpoint, max_turns=max_turns)


def _prefill_models(r: Any, data: dict) -> tuple[str, ...] | None:
    if "prefill_models" not in data:
        return None
    names = r.get(data, "prefill_models", "", list, "a list of model names", [])
    for k, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise r.fail(f"prefill_models[{k}]", "a model name", name)
    return tuple(names)

