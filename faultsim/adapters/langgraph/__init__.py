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
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
from typing import Any, Callable, Iterable, Iterator, Mapping

from ...agent import AgentEnv, Outcome
from ...effects import Effect, act, transparent
from ...killpoints import register_phases
from ...loading import LANGGRAPH_MODES

try:
    from langchain_anthropic import ChatAnthropic
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.langgraph needs the langgraph extra: pip install "
                      f"'faultsim[langgraph]' ({exc})") from None

from ._saver import WatchedSaver, WorldSaver
from ._serial import Serializer

__all__ = ["DURABILITY_MODES", "effect", "graph_agent", "chat_model", "explore_modes",
           "WatchedSaver", "WorldSaver"]

DURABILITY_MODES = LANGGRAPH_MODES

# the phases this adapter's marks start: its checkpointer's calls (_saver.py) and a tool's
# end (`act(..., end_mark=...)` below)
register_phases({"mark.lg.read": "after-checkpoint-read",
                 "mark.lg.put": "after-checkpoint-put",
                 "mark.lg.writes": "after-put-writes",
                 "mark.lg.tool.end": "after-tool"})
CHECKPOINTER_KEY = "langgraph.checkpointer"

_session: contextvars.ContextVar["_Session | None"] = contextvars.ContextVar(
    "faultsim_langgraph_session", default=None)

GraphFactory = Callable[..., Any]  # (checkpointer, model) -> compiled graph


# -- tools --------------------------------------------------------------------------------
def effect(service: str, *, key: Callable[..., str] | None = None) -> Callable:
    """`faultsim.effect` (the one wrapper for any agent), its end mark told apart: the
    adapter's kill points after a tool (`lg.tool.end`) are LangGraph's, whose pending
    writes, not the agent's own save point, record the tool's result. Put it under
    `@tool`, so the tool's schema still comes from your function's signature and
    docstring; the tool message gets the receiver's answer as JSON."""
    def wrap(fn: Callable) -> Callable:
        spec = Effect(service, key, fn.__name__)

        def as_tool_message(session: Any, args: tuple, kwargs: dict) -> str:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            return session.act(fn.__name__, service, dict(bound.arguments), key)

        call = transparent(fn, _session.get, as_tool_message)
        call.faultsim_effect = spec  # type: ignore[attr-defined]
        return call
    return wrap


# -- the chat model -----------------------------------------------------------------------
def chat_model(env: AgentEnv, **options: Any) -> ChatAnthropic:
    """A `ChatAnthropic` whose requests go to faultsim's fake Claude, in process (no socket).
    Agents that build their own client reach the same fake over loopback instead:
    `faultsim.model.serve` (ANTHROPIC_BASE_URL)."""
    # max_tokens: the SDK refuses a non-streaming request that could run for 10 minutes,
    # which is what ChatAnthropic's default for a model it does not know amounts to.
    options = {"max_tokens": 4096, "max_retries": 2, **options}
    chat = ChatAnthropic(model=env.model, api_key="sk-ant-faultsim-fake", **options)
    chat.__dict__["_client"] = env.client  # its cached SDK client: the one faultsim serves
    return chat


# -- one incarnation ----------------------------------------------------------------------
class _Session:
    """What an incarnation's tools and checkpointer report to."""

    def __init__(self, env: AgentEnv) -> None:
        if env.world is None:
            raise RuntimeError("graph_agent runs under faultsim's explorer (its AgentEnv "
                               "carries the world)")
        self.env, self.world = env, env.world
        self.serializer = Serializer(dead=self.world.is_sealed)

    def act(self, tool: str, service: str, arguments: dict, key: Callable | None) -> str:
        """One routed tool call (faultsim.effects.act), its answer as the tool message."""
        result = act(self.env, Effect(service, key, tool), arguments, end_mark="lg.tool.end")
        return json.dumps(result, sort_keys=True)

    def report(self, name: str, subject: str) -> None:
        if self.env.mark is not None:
            self.env.mark(name, tool=subject)

    def guard(self, op: str) -> None:
        if self.world.is_sealed():
            from ...trace import WorldSealed
            raise WorldSealed(f"a killed incarnation called the checkpointer's {op}")

    def on_world(self, kind: str, **info: Any) -> None:
        # A call outside (the model, a service) has come back: writes that were in flight
        # while it went are done by now. Kill points just before this one find them not
        # done, the race LangGraph's background saving runs with every such call.
        if kind == "model.response" or kind.startswith("effect."):
            self.serializer.flush()


def _deterministic_checkpoint_ids(incarnation: int) -> None:
    """LangGraph's checkpoint ids are uuid6: the time, made monotonic by a process-wide
    counter, so a second clean run would get other ids than the first. Start the counter
    from the (frozen) world clock instead, a little later for each incarnation: ids repeat
    run after run, and a resumed run's ids still sort after the ones it finds saved."""
    import time

    from langgraph.checkpoint.base import id as checkpoint_id

    checkpoint_id._last_v6_timestamp = (time.time_ns() // 100 + 0x01B21DD213814000
                                        + incarnation * 10**9)


@contextlib.contextmanager
def _deterministic_run_ids() -> Iterator[None]:
    """LangChain names each run (and so each AI message: lc_run--<id>) with a uuid7 from the
    OS's random source. Draw those ids from `random` instead, which faultsim seeds per
    incarnation, so two clean runs save the same bytes."""
    import random
    import sys
    import time
    import uuid

    from langchain_core.utils import uuid as lc_uuid

    original = lc_uuid.uuid7

    def uuid7(nanoseconds: int | None = None) -> uuid.UUID:
        ms = (time.time_ns() if nanoseconds is None else nanoseconds) // 1_000_000
        bits = random.getrandbits(74)
        return uuid.UUID(int=(ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (bits >> 62) << 64
                         | 0b10 << 62 | bits & (1 << 62) - 1)

    users = [m for name, m in list(sys.modules.items())
             if name.startswith(("langchain", "langgraph")) and
             getattr(m, "uuid7", None) is original]
    for module in users:
        module.uuid7 = uuid7
    try:
        yield
    finally:
        for module in users:
            module.uuid7 = original


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


class GraphRun:
    """One incarnation: build the graph, then start, resume or finish its thread."""

    def __init__(self, build_graph: GraphFactory, env: AgentEnv, durability: str,
                 human_reply: str | None) -> None:
        self.build_graph, self.env = build_graph, env
        self.durability, self.human_reply = durability, human_reply

    def _checkpointer(self, session: _Session) -> tuple[Any, Callable[[], None]]:
        """The scenario's store: LangGraph's SqliteSaver on the sandbox's database file
        ([store] kind = "sqlite", subprocess mode), else an InMemorySaver kept in the world
        (it stands for a checkpoint server: the agent's crash does not touch it)."""
        store = self.env.store
        if store is not None and store.kind == "sqlite":
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(str(store.path), check_same_thread=False)
            return SqliteSaver(conn), conn.close
        if store is not None and store.kind != "file":
            raise ValueError(f"the LangGraph adapter keeps checkpoints in memory or SQLite, "
                             f"not in {store.kind}")
        return session.world.durable.setdefault(CHECKPOINTER_KEY, WorldSaver()), lambda: None

    def run(self) -> Outcome:
        from langchain_core.messages import HumanMessage
        from langgraph.types import Command

        env = self.env
        session = _Session(env)
        _deterministic_checkpoint_ids(env.incarnation)
        store, close = self._checkpointer(session)
        saver = WatchedSaver(store, report=session.report, guard=session.guard)
        unsubscribe = session.world.subscribe(session.on_world)
        token = _session.set(session)
        try:
            # no LangSmith tracing, whatever the environment says: faultsim opens no
            # connection beyond loopback
            from langsmith.run_helpers import tracing_context

            with session.serializer.installed(), _deterministic_run_ids(), \
                    tracing_context(enabled=False):
                graph = self.build_graph(checkpointer=saver, model=chat_model(env))
                config = {"configurable": {"thread_id": env.task_id}}
                state = graph.get_state(config)
                if not state.values and not state.next:
                    payload: Any = {"messages": [HumanMessage(env.task)]}  # nothing saved
                else:
                    payload = None  # LangGraph's resume: go on from the last checkpoint
                while True:
                    graph.invoke(payload, config, durability=self.durability)
                    session.serializer.flush()
                    state = graph.get_state(config)
                    if not state.interrupts:
                        break
                    if self.human_reply is None:  # paused for a person: a legal stop
                        return Outcome("escalated", None,
                                       escalation=str(state.interrupts[0].value))
                    payload = Command(resume=self.human_reply)
        finally:
            _session.reset(token)
            unsubscribe()
            close()
        messages = state.values.get("messages") or []
        answer = _text(messages[-1].content) if messages else None
        return Outcome("completed", answer, turns=sum(1 for m in messages
                                                       if m.type == "ai"))


def graph_agent(build_graph: GraphFactory, *, durability: str = "async",
                human_reply: str | None = None) -> Callable[[AgentEnv], GraphRun]:
    """A faultsim agent factory running `build_graph`'s graph with `durability` ("sync",
    "async" or "exit", LangGraph's modes). `human_reply` answers an `interrupt()`; without
    one, an interrupt ends the run as an escalation to a person (a legal stop)."""
    if durability not in DURABILITY_MODES:
        raise ValueError(f"durability {durability!r}: expected one of "
                         f"{', '.join(DURABILITY_MODES)}")

    def make_agent(env: AgentEnv) -> GraphRun:
        return GraphRun(build_graph, env, durability, human_reply)

    # Not importable by name: runs name it `langgraph:MODE` (the scenario's [langgraph]
    # graph), which replays resolve; give agent_name= when exploring it from Python.
    make_agent.__qualname__ = f"<graph_agent {getattr(build_graph, '__qualname__', 'graph')} " \
                              f"durability={durability}>"
    return make_agent


def explore_modes(build_graph: GraphFactory, scenario: Any, *,
                  modes: Iterable[str] = DURABILITY_MODES, human_reply: str | None = None,
                  **options: Any) -> Mapping[str, Any]:
    """`faultsim.explore` once per durability mode: {mode: Report}."""
    from ...engine import explore

    return {mode: explore(graph_agent(build_graph, durability=mode, human_reply=human_reply),
                          scenario, **{"agent_name": f"langgraph:{mode}", **options})
            for mode in modes}
