"""The LangGraph adapter's code. Its face is the package, `faultsim.adapters.langgraph`:
its docstring is the adapter's manual, and it re-exports the names users import."""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
from typing import Any, Callable, Iterable, Iterator, Mapping

from ...agent import AgentEnv, Outcome
from ...effects import Effect, act, transparent
from ...killpoints import register_phases
from ...settings.loading import LANGGRAPH_MODES
from ...scenario.types import LANGGRAPH_METHODS

try:
    from langchain_anthropic import ChatAnthropic
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.langgraph needs the langgraph extra: pip install "
                      f"'faultsim[langgraph]' ({exc})") from None

from ._saver import WatchedSaver, WorldSaver
from ._serial import Serializer

__all__ = ["DURABILITY_MODES", "METHODS", "effect", "graph_agent", "chat_model",
           "explore_modes", "WatchedSaver", "WorldSaver"]

DURABILITY_MODES = LANGGRAPH_MODES
METHODS = LANGGRAPH_METHODS  # how the graph is driven: invoke, stream, ainvoke, astream

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
            from ...core.trace import WorldSealed
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


@contextlib.contextmanager
def _aiosqlite_inline() -> Iterator[None]:
    """aiosqlite runs each connection's statements on a thread of its own and hands the
    results back to the loop: SQLite's kill points would land on that thread, in an order
    the thread scheduler picks. Meanwhile a connection runs each job at once, on the loop's
    thread (its queue runs what it is given; its thread never starts): the same
    statements, in the order they are queued, which is the order the thread runs them."""
    try:
        import aiosqlite.core as core
    except ImportError:  # no async SQLite saver without it: nothing to route
        yield
        return

    class Jobs:
        def put_nowait(self, item: tuple) -> None:
            future, job = item
            try:
                result = job()
            except Exception as exc:
                if future is not None:
                    core.set_exception(future, exc)
                return
            if future is not None:
                core.set_result(future, result)

    class NoThread:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def join(self, timeout: float | None = None) -> None:
            pass

        def is_alive(self) -> bool:
            return False

    saved = core.SimpleQueue, core.Thread
    core.SimpleQueue, core.Thread = Jobs, NoThread
    try:
        yield
    finally:
        core.SimpleQueue, core.Thread = saved


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


def _said(messages: list, follow_ups: tuple[str, ...]) -> int:
    """How many of the follow-ups a thread's messages hold: the last one among its human
    messages, and every one before it."""
    said = {_text(m.content) for m in messages if getattr(m, "type", None) == "human"}
    return max((n + 1 for n, text in enumerate(follow_ups) if text in said), default=0)


class GraphRun:
    """One incarnation: build the graph, then start, resume or finish its thread."""

    def __init__(self, build_graph: GraphFactory, env: AgentEnv, durability: str,
                 human_reply: str | None, method: str = "invoke") -> None:
        self.build_graph, self.env = build_graph, env
        self.durability, self.human_reply = durability, human_reply
        self.method = method

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

    async def _acheckpointer(self, session: _Session) -> tuple[Any, Callable[[], Any]]:
        """`_checkpointer` for a graph run on an event loop: LangGraph's AsyncSqliteSaver
        on an aiosqlite connection to the sandbox's database, else the in-memory saver."""
        store = self.env.store
        if store is not None and store.kind == "sqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            conn = await aiosqlite.connect(str(store.path))
            return AsyncSqliteSaver(conn), conn.close
        saver, _ = self._checkpointer(session)

        async def nothing() -> None:
            pass
        return saver, nothing

    def run(self) -> Any:
        if self.method in ("ainvoke", "astream"):
            return self._arun()  # a coroutine: faultsim awaits it on a fresh event loop
        return self._run()

    @staticmethod
    def _start(state: Any, task: str) -> Any:
        from langchain_core.messages import HumanMessage

        if not state.values and not state.next:
            return {"messages": [HumanMessage(task)]}  # nothing saved
        return None  # LangGraph's resume: go on from the last checkpoint

    def _outcome(self, state: Any) -> Outcome:
        messages = state.values.get("messages") or []
        answer = _text(messages[-1].content) if messages else None
        return Outcome("completed", answer, turns=sum(1 for m in messages
                                                       if m.type == "ai"))

    async def _arun(self) -> Outcome:
        import asyncio

        from .._inline import Inline

        env = self.env
        asyncio.get_running_loop().set_default_executor(Inline())
        session = _Session(env)
        _deterministic_checkpoint_ids(env.incarnation)
        with _aiosqlite_inline():
            store, close = await self._acheckpointer(session)
            saver = WatchedSaver(store, report=session.report, guard=session.guard)
            unsubscribe = session.world.subscribe(session.on_world)
            token = _session.set(session)
            try:
                from langsmith.run_helpers import tracing_context

                with session.serializer.installed(), _deterministic_run_ids(), \
                        tracing_context(enabled=False):
                    model = chat_model(env)
                    model.__dict__["_async_client"] = env.async_client  # the same fake
                    graph = self.build_graph(checkpointer=saver, model=model)
                    config = {"configurable": {"thread_id": env.task_id}}
                    state = await graph.aget_state(config)
                    payload = self._start(state, env.task)
                    while True:
                        if self.method == "astream":
                            async for _ in graph.astream(payload, config,
                                                         durability=self.durability):
                                pass
                        else:
                            await graph.ainvoke(payload, config, durability=self.durability)
                        state = await graph.aget_state(config)
                        payload = self._after(state)
                        if payload is None:
                            break
                        if isinstance(payload, Outcome):
                            return payload
            finally:
                _session.reset(token)
                unsubscribe()
                if not session.world.is_sealed():  # a killed run closes nothing
                    await close()
        return self._outcome(state)

    def _after(self, state: Any) -> Any:
        """What follows a pass of the graph (both drivers): when it finished, the next user
        turn's input (`_follow_up`), or None when there is none; an escalation when it
        paused for a person and no reply is scripted (a legal stop), else the Command that
        resumes it with the scripted reply."""
        from langgraph.types import Command

        if not state.interrupts:
            return self._follow_up(state) if not state.next else None
        if self.human_reply is None:
            return Outcome("escalated", None, escalation=str(state.interrupts[0].value))
        return Command(resume=self.human_reply)

    def _follow_up(self, state: Any) -> Any:
        """The finished thread's next user turn: the first follow-up its messages do not
        hold yet, as the next invocation's input into the same thread; None when they hold
        them all. Read from the saved state, not from what this process sent: a restart
        sends each follow-up once."""
        from langchain_core.messages import HumanMessage

        follow_ups = self.env.follow_ups
        said = _said(state.values.get("messages") or [], follow_ups)
        if said >= len(follow_ups):
            return None
        return {"messages": [HumanMessage(follow_ups[said])]}

    def _run(self) -> Outcome:
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
                payload = self._start(state, env.task)
                while True:
                    if self.method == "stream":
                        for _ in graph.stream(payload, config, durability=self.durability):
                            pass
                    else:
                        graph.invoke(payload, config, durability=self.durability)
                    session.serializer.flush()
                    state = graph.get_state(config)
                    payload = self._after(state)
                    if payload is None:
                        break
                    if isinstance(payload, Outcome):
                        return payload
        finally:
            _session.reset(token)
            unsubscribe()
            close()
        return self._outcome(state)


def graph_agent(build_graph: GraphFactory, *, durability: str = "async",
                human_reply: str | None = None, method: str = "invoke"
                ) -> Callable[[AgentEnv], GraphRun]:
    """A faultsim agent factory running `build_graph`'s graph with `durability` ("sync",
    "async" or "exit", LangGraph's modes). `human_reply` answers an `interrupt()`; without
    one, an interrupt ends the run as an escalation to a person (a legal stop). `method`:
    how the graph is driven, "invoke" or "stream", or "ainvoke" / "astream" on an event
    loop (an AsyncSqliteSaver on a SQLite store)."""
    if durability not in DURABILITY_MODES:
        raise ValueError(f"durability {durability!r}: expected one of "
                         f"{', '.join(DURABILITY_MODES)}")
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(METHODS)}")

    def make_agent(env: AgentEnv) -> GraphRun:
        return GraphRun(build_graph, env, durability, human_reply, method)

    # Not importable by name: runs name it `langgraph:MODE` (the scenario's [langgraph]
    # graph), which replays resolve; give agent_name= when exploring it from Python. Its
    # module is the package users import it from, not this module behind it.
    make_agent.__module__ = __package__
    make_agent.__qualname__ = f"<graph_agent {getattr(build_graph, '__qualname__', 'graph')} " \
                              f"durability={durability}" + \
        (f" method={method}>" if method != "invoke" else ">")
    return make_agent


def explore_modes(build_graph: GraphFactory, scenario: Any, *,
                  modes: Iterable[str] = DURABILITY_MODES, human_reply: str | None = None,
                  method: str = "invoke", **options: Any) -> Mapping[str, Any]:
    """`faultsim.explore` once per durability mode: {mode: Report}."""
    from ...inprocess.explore import explore

    return {mode: explore(graph_agent(build_graph, durability=mode, human_reply=human_reply,
                                      method=method),
                          scenario, **{"agent_name": f"langgraph:{mode}", **options})
            for mode in modes}
