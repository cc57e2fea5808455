"""Graphs faultsim's LangGraph adapter explores (`faultsim run scenarios/langgraph/`).

Written the way LangGraph's documentation writes them; nothing here knows about crashes.
The tools name the scenario's services through `faultsim.adapters.langgraph.effect`.
"""
from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import interrupt

from faultsim.adapters.langgraph import effect


# -- tools --------------------------------------------------------------------------------
@tool
@effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice (the payment provider takes an idempotency key)."""
    raise RuntimeError("production payment client not configured in this example")


@tool
@effect("email")
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email (no idempotency key: every call is a new email)."""
    raise RuntimeError("production mail client not configured in this example")


@tool
@effect("invoices", key=lambda invoice: invoice)
def lookup_invoice(invoice: str) -> str:
    """Look up an invoice."""
    raise RuntimeError("production ledger not configured in this example")


# -- 1. a ReAct agent: a keyed payment and a blind email ----------------------------------
def react_payments(checkpointer, model):
    return create_react_agent(model, [lookup_invoice, pay_invoice, send_email],
                              checkpointer=checkpointer,
                              prompt="You pay supplier invoices and confirm by email.")


# -- 2. one superstep of parallel tool calls ---------------------------------------------
def parallel_lookups(checkpointer, model):
    return create_react_agent(model, [lookup_invoice, pay_invoice, send_email],
                              checkpointer=checkpointer,
                              prompt="Check every invoice at once, then pay the approved.")


# -- 3. a human approves before anything is paid ------------------------------------------
class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    approvals: Annotated[list[str], operator.add]


def approval_gate(checkpointer, model):
    tools = [lookup_invoice, pay_invoice, send_email]
    bound = model.bind_tools(tools)

    def agent(state: State) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        if any(c["name"] == "pay_invoice" for c in last.tool_calls) and not state.get(
                "approvals"):
            return "approve"
        return "tools"

    def approve(state: State) -> dict:
        calls = [c for c in state["messages"][-1].tool_calls if c["name"] == "pay_invoice"]
        answer = interrupt({"question": "Approve these payments?",
                            "payments": [c["args"] for c in calls]})
        if answer != "approved":
            return {"messages": [ToolMessage(f"payment refused by a person: {answer}",
                                             tool_call_id=c["id"]) for c in calls]}
        return {"approvals": [answer]}

    def after_approval(state: State) -> str:
        return "agent" if isinstance(state["messages"][-1], ToolMessage) else "tools"

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["approve", "tools", END])
    builder.add_conditional_edges("approve", after_approval, ["agent", "tools"])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)

