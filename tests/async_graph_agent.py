"""A LangGraph service as most are written: an async graph (its nodes and tools
coroutines), driven with `ainvoke` / `astream` on an event loop, checkpointed by
AsyncSqliteSaver (tests/data/lg_async_sqlite.toml) or kept in memory
(tests/data/lg_async.toml). Nothing here knows about crashes.

The payment and the receipt email go through providers that take an idempotency key,
derived from the invoice. The planted mistake, `build_graph_fresh_key`: the receipt's key
is drawn afresh for each attempt, so a receipt sent again after a crash is a second email.
The graph has no sync node: `invoke` cannot run it at all."""
from __future__ import annotations

import uuid
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from faultsim.adapters.langgraph import effect


@tool
@effect("invoices", key=lambda invoice: invoice)
async def lookup_invoice(invoice: str) -> str:
    """Look up an invoice."""
    raise RuntimeError("production ledger not configured in this example")


@tool
@effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
async def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice."""
    raise RuntimeError("production payment client not configured in this example")


def _receipt_tool(key):
    @tool
    @effect("receipts", key=key)
    async def send_receipt(invoice: str, to: str) -> str:
        """Email the payment receipt (the mail provider takes an idempotency key)."""
        raise RuntimeError("production mail client not configured in this example")
    return send_receipt


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _build(checkpointer, model, send_receipt):
    tools = [lookup_invoice, pay_invoice, send_receipt]
    bound = model.bind_tools(tools)

    async def agent(state: State) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def build_graph(checkpointer, model):
    return _build(checkpointer, model,
                  _receipt_tool(lambda invoice, to: f"receipt-{invoice}-{to}"))


def build_graph_fresh_key(checkpointer, model):
    return _build(checkpointer, model, _receipt_tool(lambda invoice, to: str(uuid.uuid4())))
