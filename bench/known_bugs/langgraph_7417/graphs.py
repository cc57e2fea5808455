"""langgraph #7417's graph, as its report describes it: a ReAct agent whose one tool runs a
long job and delivers its result (here, emails the report), and the same agent with the
delivery keyed, the remedy. Nothing here knows about crashes."""
from __future__ import annotations

from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from faultsim.adapters.langgraph import effect


@tool
@effect("email")
def build_and_send_report(quarter: str, to: str) -> str:
    """Build the quarter's report (minutes of work) and email it (no idempotency key)."""
    raise RuntimeError("production report job not configured in this example")


@tool
@effect("reports", key=lambda quarter, to: f"report-{quarter}-{to}")
def build_and_deliver_report(quarter: str, to: str) -> str:
    """The same job, delivered through a receiver that takes an idempotency key."""
    raise RuntimeError("production report job not configured in this example")


def blind(checkpointer, model):
    return create_react_agent(model, [build_and_send_report], checkpointer=checkpointer,
                              prompt="You build and send quarterly reports.")


def keyed(checkpointer, model):
    return create_react_agent(model, [build_and_deliver_report], checkpointer=checkpointer,
                              prompt="You build and send quarterly reports.")
