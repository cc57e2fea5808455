"""Which agent an `--agent` spec names: `MODULE[:ATTR]`, `FILE.py[:ATTR]`, or
`langgraph:MODE` (the graph a scenario's [langgraph] table names, run by the LangGraph
adapter with that durability mode). The CLI, the plugin, the replayer and the fork servers
of the subprocess mode resolve specs here and nowhere else.

May import: the contract (`agent`), `scenario`, `errors`; the LangGraph adapter only inside
`factory_for`, for a `langgraph:` spec (the one documented lazy upward edge: every other
agent loads without LangGraph)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from .agent import AgentEnv
from .errors import UsageError


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
from .scenario.model import LANGGRAPH_MODES  # noqa: E402  LangGraph's durability modes
# agent spec claude-agent-sdk:FILE.py:ATTR: a Claude Agent SDK agent's coroutine, explored
# by faultsim.adapters.claude_agent_sdk on its own processes
CLAUDE_AGENT_SDK = "claude-agent-sdk:"


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
    """`load_factory`, plus `langgraph:MODE`: the graph a scenario's [langgraph] table names,
    run by faultsim's LangGraph adapter with durability MODE (sync, async or exit; left out,
    `langgraph:`, the mode the table's `durability` names). `scenario` is a Scenario or its
    file, read only for a `langgraph:` spec."""
    if not names_graph(spec):
        return load_factory(spec)
    if isinstance(scenario, (str, Path)):
        from .scenario import load_scenario

        scenario = load_scenario(scenario)
    spec_lg = getattr(scenario, "langgraph", None)
    if spec_lg is None:
        raise AgentLoadError(f"agent {spec!r} runs a scenario's [langgraph] graph; "
                             f"{getattr(scenario, 'path', 'this scenario')} has none")
    spec = langgraph_spec(spec, scenario)
    try:
        from .adapters.langgraph import graph_agent
    except ImportError as exc:
        raise AgentLoadError(str(exc)) from None
    try:
        return graph_agent(load_factory(spec_lg.graph), durability=spec[len(LANGGRAPH):],
                           human_reply=spec_lg.human_reply)
    except ValueError as exc:
        raise AgentLoadError(f"agent {spec!r}: {exc}") from None
