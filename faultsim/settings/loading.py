"""Which agent an `--agent` spec names: `MODULE[:ATTR]`, `FILE.py[:ATTR]`,
or a prefixed spec of `SPECS` (`langgraph:MODE`: the graph a scenario's [langgraph] table
names, run by the LangGraph adapter with that durability mode; `claude-agent-sdk:...`).
The CLI, the plugin, the backends and the fork servers of the subprocess mode resolve
specs here and nowhere else.

May import: the contract (`agent`), `errors`; an adapter only by its name in `SPECS`,
through `importlib`, for a spec that names it (no upward import: every other agent loads
without LangGraph or the Claude Agent SDK)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from ..agent import AgentEnv, check_factory
from ..errors import UsageError


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
    """The agent factory `spec` names: `package.module` (attribute `make_agent`),
    `package.module:attr`, or a file: `path/to/agent.py[:attr]`; refused (one line, exit 2)
    when its signature cannot take `make_agent(env)`, before anything runs."""
    factory = load_callable(spec)
    check_factory(factory, spec)
    return factory


def load_callable(spec: str) -> Callable[..., Any]:
    """The callable `spec` names (as `load_factory`), whatever it takes: an adapter's
    spec names other callables (a Claude Agent SDK coroutine, a LangGraph graph builder)."""
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


def bound_name(factory: Any) -> str | None:
    """The name `factory` is bound to at its module's top level (None: bound nowhere there).
    An adapter's factory (`agent_factory(build_agent)`) is a closure: its own name is not
    what imports it, the attribute the user assigned it to is; a spec made of anything else
    would import another agent (the module's `make_agent`) in the subprocess mode's fork
    servers and in replays."""
    import sys

    module = sys.modules.get(getattr(factory, "__module__", None) or "")
    if module is None:
        return None
    if getattr(module, "make_agent", None) is factory:
        return "make_agent"
    return next((name for name, value in vars(module).items()
                 if value is factory and not name.startswith("_")), None)


LANGGRAPH = "langgraph:"  # agent spec langgraph:MODE: the scenario's [langgraph] graph
from ..scenario.types import LANGGRAPH_MODES  # noqa: E402  LangGraph's durability modes
# agent spec claude-agent-sdk:FILE.py:ATTR: a Claude Agent SDK agent's coroutine, explored
# by faultsim.adapters.claude_agent_sdk on its own processes
CLAUDE_AGENT_SDK = "claude-agent-sdk:"
# agent spec cmd:COMMAND: any program, in any language, explored from outside as a command
# by faultsim.command (the fake Claude and the services over loopback, strace on its calls)
COMMAND = "cmd:"

# Agent specs by name (hypothesis's provider table): prefix -> "module:function" that turns
# the whole spec (and the scenario, or its file) into what runs. Imported by name, only for
# such a spec: no module here imports an adapter, and every other agent loads without one.
# The backend a prefixed agent runs on is `backends.BY_PREFIX`'s to say.
SPECS = {
    LANGGRAPH: "faultsim.adapters.langgraph.spec:factory",
    CLAUDE_AGENT_SDK: "faultsim.adapters.claude_agent_sdk.runs:load",
    COMMAND: "faultsim.command.backend:no_factory",  # a program: no Python factory
}


def prefix_of(spec: str) -> str | None:
    """The table's prefix `spec` starts with (None: a plain MODULE[:ATTR] or FILE.py)."""
    if spec == LANGGRAPH[:-1]:  # `langgraph`: the scenario's graph, in the mode it names
        return LANGGRAPH
    return next((p for p in SPECS if spec.startswith(p)), None)


def names_graph(spec: str) -> bool:
    """Whether an agent spec runs a scenario's [langgraph] graph (`langgraph:MODE`, or
    `langgraph:` / `langgraph`, which take the mode the scenario names)."""
    return spec.startswith(LANGGRAPH) or spec == LANGGRAPH[:-1]


def langgraph_spec(spec: str, scenario: Any) -> str:
    """`langgraph:MODE` for a spec that leaves the mode to the scenario (`langgraph:` or
    `langgraph`): the durability its [langgraph] table names; other specs unchanged."""
    if spec not in (LANGGRAPH, LANGGRAPH[:-1]):
        return spec
    mode = getattr(getattr(scenario, "langgraph", None), "durability", None)
    if mode is None:
        raise AgentLoadError(f"agent {spec!r} takes its durability mode from the scenario's "
                             f"[langgraph] durability, and "
                             f"{getattr(scenario, 'path', 'this scenario')} names none: "
                             f"give one, langgraph:{'|'.join(LANGGRAPH_MODES)}")
    return LANGGRAPH + mode


def factory_for(spec: str, scenario: Any = None) -> Callable[[AgentEnv], Any]:
    """`load_factory`, plus the prefixed specs of `SPECS`: `langgraph:MODE` (the graph a
    scenario's [langgraph] table names, run by faultsim's LangGraph adapter with
    durability MODE: sync, async or exit; `langgraph:` alone takes the mode the table's
    `durability` names) and `claude-agent-sdk:FILE.py:ATTR` (the agent's coroutine).
    `scenario` is a Scenario or its file, read only by a prefixed spec."""
    prefix = prefix_of(spec)
    if prefix is None:
        return load_factory(spec)
    if prefix == LANGGRAPH and spec in (LANGGRAPH, LANGGRAPH[:-1]):
        if isinstance(scenario, (str, Path)):
            from ..scenario import load_scenario

            scenario = load_scenario(scenario)
        spec = langgraph_spec(spec, scenario)
    module, _, attr = SPECS[prefix].partition(":")
    try:
        resolve = getattr(importlib.import_module(module), attr)
    except ImportError as exc:  # the adapter's extra is not installed: its message says so
        raise AgentLoadError(str(exc)) from None
    return resolve(spec) if prefix in (CLAUDE_AGENT_SDK, COMMAND) else resolve(spec, scenario)
