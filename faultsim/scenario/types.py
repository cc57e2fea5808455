"""The scenario's data types: a task, the model's script, the services, the expected final
answer, the store, the fault profile (how the scenario is attacked unless the command line
says otherwise), and the error a malformed file raises (`ScenarioError`).

World, model and checkpoint types only: faultsim.scenario.load builds these from a file.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.checkpoints import DEFAULT as DEFAULT_CHECKPOINT
from ..core.checkpoints import CheckpointSpec
from ..core.classes import PER_CLASS
from ..core.crashmodel import CRASH_MODELS
from ..errors import UsageError
from ..model import Script
from ..world import World, WorldClock

MAIN_TAG = "s"  # the main script's tag in tool-use ids (toolu_s_03_1)


class ScenarioError(UsageError, ValueError):
    """A scenario file is malformed. `str()` names the file, the key and what was expected."""

    def __init__(self, path: str | Path, key: str, expected: str, got: Any = None, *,
                 line: int | None = None) -> None:
        self.path, self.key, self.expected, self.line = str(path), key, expected, line
        detail = "" if got is None else f", got {show_value(got)}"
        # FILE:LINE: as `faultsim validate` prints it, when the line is known (a syntax error)
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {key}: expected {expected}{detail}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a scenario file: the dotted key, what was expected, and what was
    there (None: nothing to show). The loader raises the first as a ScenarioError;
    `faultsim validate` prints each with its line."""

    key: str
    expected: str
    got: Any = None

    @property
    def message(self) -> str:
        return f"expected {self.expected}" + ("" if self.got is None else
                                              f", got {show_value(self.got)}")

    def error(self, path: str | Path) -> ScenarioError:
        return ScenarioError(path, self.key, self.expected, self.got)


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    kind: str
    records: dict = field(default_factory=dict)
    key_retention_hours: float = 24.0


CRASH_MODEL_NAMES = CRASH_MODELS  # a fault profile lists models; "all" is for flags
STORE_KINDS = ("file", "sqlite", "redis")


@dataclass(frozen=True)
class StoreSpec:
    """Where the agent keeps its checkpoints: plain files under its workdir (the default),
    an SQLite database file there, or a Redis database faultsim starts. SQLite and Redis
    write below Python's file layer, so they run in subprocess mode only."""

    kind: str = "file"

    @property
    def needs_subprocess(self) -> bool:
        return self.kind != "file"


@dataclass(frozen=True)
class LangGraphSpec:
    """A scenario run by a LangGraph graph (faultsim.adapters.langgraph) instead of an agent
    factory: `graph` names the graph factory, FILE.py:ATTR relative to the scenario file or
    MODULE:ATTR; `human_reply` answers the graph's interrupt() (none: the pause is the end,
    an escalation to a person); `durability` the mode an agent spec without one runs;
    `method` how the graph is driven (invoke, stream, ainvoke or astream)."""

    graph: str
    human_reply: str | None = None
    durability: str | None = None  # the mode `langgraph:` explores (None: every mode)
    method: str = "invoke"  # how the service drives the graph (LANGGRAPH_METHODS)


LANGGRAPH_MODES = ("sync", "async", "exit")  # LangGraph's durability modes
# how a service drives a compiled graph: its sync methods, or its async ones on an event
# loop (with an AsyncSqliteSaver on a SQLite store)
LANGGRAPH_METHODS = ("invoke", "stream", "ainvoke", "astream")


@dataclass(frozen=True)
class FaultProfile:
    """How the scenario is attacked by default; `faultsim run` flags and pytest options
    override it. API faults live on the scripts (`Script.faults`): they are addressed by a
    script's turn position."""

    crash_models: tuple[str, ...] = ("process",)
    crashes: int = 2  # the most crashes in one schedule
    downtime: float = 0.0  # seconds the world's clock moves between a crash and the restart
    # power model: a torn write damages only the bytes it wrote (see crashmodel)
    powersafe_overwrite: bool = True
    # a kill inside a write over 64 KiB: representative cuts ("bounded") or every one
    # ("all"); killpoints.torn_offsets
    torn_cuts: str = "bounded"
    # every kill point ("exhaustive") or a representative choice of each class
    # ("representative": its first, last and `per_class` seeded others; faultsim.core.classes)
    coverage: str = "exhaustive"
    per_class: int = PER_CLASS

    @property
    def crash_model(self) -> str:
        """As the `crash_model` argument of `explore()` takes it."""
        return "all" if set(self.crash_models) == set(CRASH_MODEL_NAMES) else \
            self.crash_models[0]


@dataclass(frozen=True)
class Scenario:
    id: str
    path: str
    task: str
    script: Script
    expected_final_answer: str
    services: tuple[ServiceSpec, ...]
    model: str = "claude-sonnet-5-5"
    # models that accept a conversation ending with an assistant turn (None: as the API
    # does today: not Claude 4.6 and later)
    prefill_models: tuple[str, ...] | None = None
    start_time: str = "2026-10-01T09:00:00Z"
    subagents: tuple[Script, ...] = ()
    profile: FaultProfile = FaultProfile()
    store: StoreSpec = StoreSpec()
    langgraph: LangGraphSpec | None = None
    # addresses besides faultsim's own the agent may connect to ([sandbox] allow)
    allow: tuple[tuple[str, int], ...] = ()
    checkpoint: CheckpointSpec = DEFAULT_CHECKPOINT  # where the agent keeps its state
    # the agent's turn limit (AgentEnv.max_turns): high enough for any realistic task, there
    # only to stop a runaway loop
    max_turns: int = 10_000

    def build_world(self, *, retry_after_ms: int = 1) -> World:
        world = World(clock=WorldClock(self.start_time), retry_after_ms=retry_after_ms,
                      scripts=[self.script, *self.subagents],
                      prefill_models=self.prefill_models, allow=self.allow)
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
