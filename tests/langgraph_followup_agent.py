"""A LangGraph service of two user turns (tests/data/lg_followup.toml): an invoice paid, then
the user's follow-up (send the receipt) into the same thread, the checkpoints kept by the
graph's checkpointer. Both effects are keyed, so a tool LangGraph runs again after a crash
applies once. `build_graph` is a sync graph (driven with `invoke`), `build_async_graph` the
same graph with async nodes and tools (driven with `ainvoke` on an event loop).

The planted mistakes, each the service's chat loop written another way (the graph is the
same):
  make_agent_replays_follow_ups  sends every follow-up of its queue after the first answer
                                 on each start, instead of reading from the thread which
                                 ones it holds: a restart after the follow-up was sent
                                 sends it again
  make_agent_loses_follow_ups    keeps the user's next messages in memory only: a restart
                                 that finds the thread finished reports its last answer,
                                 and a follow-up not sent before the crash is never sent
"""
from __future__ import annotations

from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from faultsim.adapters.langgraph import GraphRun, effect, graph_agent


@tool
@effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice (the provider deduplicates on the invoice)."""
    raise RuntimeError("production payment client not configured in this example")


@tool
@effect("receipts", key=lambda invoice: f"receipt-{invoice}")
def send_receipt(invoice: str) -> str:
    """Email the supplier the receipt of a paid invoice."""
    raise RuntimeError("production mail client not configured in this example")


@tool("pay_invoice")
@effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
async def apay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice (the provider deduplicates on the invoice)."""
    raise RuntimeError("production payment client not configured in this example")


@tool("send_receipt")
@effect("receipts", key=lambda invoice: f"receipt-{invoice}")
async def asend_receipt(invoice: str) -> str:
    """Email the supplier the receipt of a paid invoice."""
    raise RuntimeError("production mail client not configured in this example")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _route(state: State) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def _compile(agent, tools, checkpointer):
    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", _route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def build_graph(checkpointer, model):
    tools = [pay_invoice, send_receipt]
    bound = model.bind_tools(tools)

    def agent(state: State) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    return _compile(agent, tools, checkpointer)


def build_async_graph(checkpointer, model):
    tools = [apay_invoice, asend_receipt]
    bound = model.bind_tools(tools)

    async def agent(state: State) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    return _compile(agent, tools, checkpointer)


make_agent = graph_agent(build_graph, durability="sync")
make_async_agent = graph_agent(build_async_graph, durability="sync", method="ainvoke")


class _ReplaysFollowUps(GraphRun):
    """The mistake: the follow-ups this process has sent, counted in memory."""

    sent = 0

    def _follow_up(self, state):
        if self.sent >= len(self.env.follow_ups):
            return None
        self.sent += 1
        return {"messages": [HumanMessage(self.env.follow_ups[self.sent - 1])]}


class _LosesFollowUps(GraphRun):
    """The mistake: a follow-up goes only after an answer this process saw the graph give
    to a user message it sent; a restart that finds the thread finished ends there."""

    sent_here = False

    def _start(self, state, task):
        payload = GraphRun._start(state, task)
        self.sent_here = payload is not None  # the task, on a thread nothing was saved of
        return payload

    def _follow_up(self, state):
        return super()._follow_up(state) if self.sent_here else None


def _mistake(cls, build, method):
    def make(env):
        return cls(build, env, "sync", None, method)
    return make


make_agent_replays_follow_ups = _mistake(_ReplaysFollowUps, build_graph, "invoke")
make_async_agent_replays_follow_ups = _mistake(_ReplaysFollowUps, build_async_graph, "ainvoke")
make_agent_loses_follow_ups = _mistake(_LosesFollowUps, build_graph, "invoke")
make_async_agent_loses_follow_ups = _mistake(_LosesFollowUps, build_async_graph, "ainvoke")
