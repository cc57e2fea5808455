"""The agent spec `langgraph:MODE` (`loading.SPECS`): the graph a scenario's [langgraph]
table names, run by this adapter with LangGraph's durability MODE (sync, async or exit)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...settings.loading import LANGGRAPH, AgentLoadError, load_callable
from . import graph_agent


def factory(spec: str, scenario: Any = None) -> Callable[..., Any]:
    """The factory of `spec`; `scenario` is a Scenario or its file."""
    if isinstance(scenario, (str, Path)):
        from ...scenario import load_scenario

        scenario = load_scenario(scenario)
    spec_lg = getattr(scenario, "langgraph", None)
    if spec_lg is None:
        raise AgentLoadError(f"agent {spec!r} runs a scenario's [langgraph] graph; "
                             f"{getattr(scenario, 'path', 'this scenario')} has none")
    try:
        return graph_agent(load_callable(spec_lg.graph), durability=spec[len(LANGGRAPH):],
                           human_reply=spec_lg.human_reply, method=spec_lg.method)
    except ValueError as exc:
        raise AgentLoadError(f"agent {spec!r}: {exc}") from None
