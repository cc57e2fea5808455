"""The agent-factory contract: what faultsim hands an agent, and what it reads back.

    def make_agent(env: AgentEnv) -> object with .run()

`make_agent` is called once per incarnation and must build everything afresh from `env`;
`.run()` (a plain method or a coroutine) starts the task, or resumes it from the files
under `env.workdir` if an earlier incarnation left any, and returns the outcome: a string
(the final answer) or an object with `final_answer` and, optionally, `status`, `turns`, `tokens_used`, `steps`, `escalation`.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import UsageError

if TYPE_CHECKING:
    import anthropic

    from .world import Receiver, World, WorldClock


@dataclass
class AgentEnv:
    workdir: Path  # the agent's durable store; everything it writes belongs under here
    client: "anthropic.Anthropic"  # a real SDK client served by the fake model
    services: Mapping[str, "Receiver"]  # the world's receivers, by name
    clock: "WorldClock"  # the world's clock (process time is frozen to it during a run)
    task: str  # the user's task, in words
    task_id: str  # stable id for the task (namespace, idempotency keys)
    model: str  # the model name the agent should ask for
    incarnation: int  # 1 for the first start, 2 for the first resume, …
    mark: Callable[..., None] | None = None  # optional: the agent may report protocol marks
    store: "Store | None" = None  # where the scenario says checkpoints live (None: files)
    world: "World | None" = None  # for faultsim's own adapters (faultsim.adapters.*) only
    # builds `async_client` on first use: most agents are sync, and a client costs ~0.6 ms
    async_factory: "Callable[[], anthropic.AsyncAnthropic] | None" = field(default=None,
                                                                           repr=False)

    @cached_property
    def async_client(self) -> "anthropic.AsyncAnthropic | None":
        """The same fake Claude as `client`, as an `anthropic.AsyncAnthropic`."""
        return self.async_factory() if self.async_factory is not None else None


@dataclass(frozen=True)
class Store:
    """The checkpoint store a scenario chose, as the agent reaches it."""

    kind: str = "file"  # file | sqlite | redis
    path: Path | None = None  # sqlite: the database file, under workdir
    url: str | None = None  # redis: the database to use (redis://127.0.0.1:PORT/DB)


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | escalated
    final_answer: str | None
    turns: int | None = None
    tokens_used: int | None = None
    steps: int | None = None
    escalation: str | None = None


def run_agent(agent: Any) -> Any:
    """`agent.run()`, awaited when it is a coroutine (an async agent), on a fresh event
    loop. (Process time is frozen to the world clock during a run; faultsim's freezers
    keep event loops on real monotonic time, so `asyncio.sleep` still returns.)"""
    result = agent.run()
    if not inspect.isawaitable(result):
        return result
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(result)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def outcome_of(result: Any) -> Outcome:
    """Read what an agent's `.run()` returned, whatever its shape."""
    if isinstance(result, Outcome):
        return result
    if isinstance(result, str):
        return Outcome("completed", result)
    if result is None:
        raise TypeError("the agent's run() returned None; it must return the final answer "
                        "(a string) or an object with a final_answer attribute")
    status = getattr(result, "status", "completed")
    return Outcome(status=status, final_answer=getattr(result, "final_answer", None),
                   turns=getattr(result, "turns", None),
                   tokens_used=getattr(result, "tokens_used", None),
                   steps=getattr(result, "steps", None),
                   escalation=getattr(result, "escalation", None))


class AgentLoadError(UsageError):
    """`--agent MODULE[:ATTR]` does not name an importable factory."""


def _import_file(spec: str, path: str) -> Any:
    import importlib.util
    import sys
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise AgentLoadError(f"agent {spec!r}: no such file {path!r}")
    name = f"_faultsim_agent_{file.stem}"
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise AgentLoadError(f"agent {spec!r}: {path!r} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # so pickling and dataclasses find it
    sys.path.insert(0, str(file.resolve().parent))  # its own imports, as `python FILE` has
    module_spec.loader.exec_module(module)
    return module


def load_factory(spec: str) -> Callable[[AgentEnv], Any]:
    """`package.module` (attribute `make_agent`), `package.module:attr`, or a file:
    `path/to/agent.py[:attr]`."""
    module_name, _, attr = spec.rpartition(":") if spec.count(":") else (spec, "", "")
    attr = attr or "make_agent"
    if not module_name:
        raise AgentLoadError(f"agent {spec!r}: expected MODULE, MODULE:ATTR or FILE.py[:ATTR]")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            module = _import_file(spec, module_name)
        else:
            module = importlib.import_module(module_name)
    except AgentLoadError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AgentLoadError(f"agent {spec!r}: no module named {exc.name!r}") from None
        raise AgentLoadError(f"agent {spec!r}: importing it failed: {exc}") from None
    except Exception as exc:
        raise AgentLoadError(f"agent {spec!r}: importing it failed: "
                             f"{type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AgentLoadError(f"agent {spec!r}: module {module_name!r} has no callable "
                             f"{attr!r}")
    return factory


LANGGRAPH = "langgraph:"  # agent spec langgraph:MODE: the scenario's [langgraph] graph
LANGGRAPH_MODES = ("sync", "async", "exit")  # LangGraph's durability modes


def factory_for(spec: str, scenario: Any = None) -> Callable[[AgentEnv], Any]:
    """`load_factory`, plus `langgraph:MODE`: the graph a scenario's [langgraph] table names,
    run by faultsim's LangGraph adapter with durability MODE (sync, async or exit).
    `scenario` is a Scenario or its file, read only for a `langgraph:` spec."""
    if not spec.startswith(LANGGRAPH):
        return load_factory(spec)
    if isinstance(scenario, (str, Path)):
        from .scenario import load_scenario

        scenario = load_scenario(scenario)
    spec_lg = getattr(scenario, "langgraph", None)
    if spec_lg is None:
        raise AgentLoadError(f"agent {spec!r} runs a scenario's [langgraph] graph; "
                             f"{getattr(scenario, 'path', 'this scenario')} has none")
    try:
        from .adapters.langgraph import graph_agent
    except ImportError as exc:
        raise AgentLoadError(str(exc)) from None
    try:
        return graph_agent(load_factory(spec_lg.graph), durability=spec[len(LANGGRAPH):],
                           human_reply=spec_lg.human_reply)
    except ValueError as exc:
        raise AgentLoadError(f"agent {spec!r}: {exc}") from None
