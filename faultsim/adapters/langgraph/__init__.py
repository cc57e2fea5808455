"""Crash-test a LangGraph graph, unchanged: `pip install 'faultsim[langgraph]'`.

You give faultsim a *graph factory*, the function your code already has that builds the
compiled graph::

    def build_graph(checkpointer, model):
        return create_react_agent(model, [pay_invoice, send_email], checkpointer=checkpointer)

and mark the tools that act on the world with `effect`, naming the scenario's service and,
for a keyed one, how the idempotency key is derived from the tool's arguments::

    @tool
    @effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}")
    def pay_invoice(invoice: str, amount_cents: int) -> str: ...

Outside faultsim `effect` does nothing. Under faultsim the tool's body does not run: the
scenario's service answers instead, so the ledger sees every effect (and its repeats).

`graph_agent(build_graph, durability="sync")` turns the factory into a faultsim agent
(each incarnation builds the graph afresh with a fake-Claude `ChatAnthropic` and a
checkpointer kept in the world, then starts or resumes the thread the way a service
restarting after a crash would). `explore_modes` explores it under each durability mode.

`method` is how the service drives the graph: `invoke` (the default) or `stream`, or, as
most LangGraph services run, `ainvoke` / `astream` on an event loop, with LangGraph's
`AsyncSqliteSaver` on the scenario's SQLite database (aiosqlite) and the async methods of
every saver. For one order of kill points run after run, the loop's default executor runs
its jobs at once on the loop's thread (a sync node or tool of an async graph) and
aiosqlite's connection runs its statements there too, rather than on its own thread.

Several user turns (the scenario's `follow_up`s, `env.follow_ups`): once the thread has
finished (no next node, no pause), the next follow-up is the next invocation's input,
`{"messages": [HumanMessage(follow_up)]}`, into the same thread, as a chat service sends
the user's next message; the last answer is the outcome. Which turn a restart is at is read
from the checkpointer's saved state: a thread with a next node is carried on (its input,
a follow-up included, is in the checkpoint), a finished one is followed by the next
follow-up its messages do not hold yet, so a follow-up is sent once.
"""
from __future__ import annotations

from .adapter import (CHECKPOINTER_KEY, DURABILITY_MODES, GraphFactory, GraphRun, METHODS,
                      WatchedSaver, WorldSaver, chat_model, effect, explore_modes,
                      graph_agent)  # noqa: F401

__all__ = ["DURABILITY_MODES", "METHODS", "effect", "graph_agent", "chat_model",
           "explore_modes", "WatchedSaver", "WorldSaver"]
