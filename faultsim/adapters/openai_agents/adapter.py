"""The OpenAI Agents SDK adapter's code. Its face is the package, `faultsim.adapters.openai_agents`:
its docstring is the adapter's manual, and it re-exports the names users import."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

from ...agent import AgentEnv, Outcome
from ...killpoints import register_phases
from .._files import write_atomic as _write_atomic
from .._inline import Inline

# the phases this adapter's marks start: the SDK's execution of every tool (`_ToolMarks`),
# as pydantic-ai's: killed after `oa.tool.start` is inside the tool, after `oa.tool.end`
# the tool returned and the SDK has not yet recorded its result
register_phases({"mark.oa.tool.start": "in-tool", "mark.oa.tool.end": "after-tool"})

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # before the SDK reads it
try:
    import agents
    from agents import RunConfig, RunHooks, Runner, RunState
    from agents.items import ItemHelpers, ModelResponse
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion_message_function_tool_call import (
        ChatCompletionMessageFunctionToolCall, Function)
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.openai_agents needs the openai-agents extra: pip "
                      f"install 'faultsim[openai-agents]' ({exc})") from None

agents.set_tracing_disabled(True)

__all__ = ["RESUMES", "FakeClaudeModel", "agent_factory", "sqlite_session"]

RESUMES = ("continue", "reprompt")
AgentBuilder = Callable[[], Any]  # () -> agents.Agent
SessionBuilder = Callable[[Path], Any]  # (database path) -> agents.memory.Session
MAX_TOKENS = 4096
THINKING_BUDGET = 1024


# -- the model: the SDK's items, faultsim's fake Claude --------------------------------
class _ChatMessage(ChatCompletionMessage):
    """What `LitellmModel` hands the SDK's converter for an Anthropic answer (its
    `InternalChatCompletionMessage`: reasoning text and the signed thinking blocks)."""

    reasoning_content: str = ""
    thinking_blocks: list[dict[str, Any]] | None = None


def _to_anthropic(chat: list[dict]) -> tuple[str, list[dict]]:
    """Chat-completions messages (the SDK converter's output) as the Messages API's system
    text and turns: LiteLLM's step on its Anthropic path, with consecutive turns of one
    role merged, as the API does."""
    system: list[str] = []
    turns: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    def text_blocks(content: Any) -> list[dict]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}] if content else []
        out = []
        for part in content or []:
            if part.get("type") in ("thinking", "redacted_thinking"):
                out.append(dict(part))
            elif part.get("type") in ("text", "input_text", "output_text"):
                out.append({"type": "text", "text": part.get("text", "")})
        return out

    for m in chat:
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(b["text"] for b in text_blocks(m.get("content")))
        elif role == "user":
            add("user", text_blocks(m.get("content")))
        elif role == "assistant":
            blocks = [dict(b) for b in m.get("thinking_blocks") or []]
            blocks += text_blocks(m.get("content"))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"],
                               "input": json.loads(fn.get("arguments") or "{}")})
            add("assistant", blocks)
        elif role == "tool":
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [])
            add("user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                          "content": text}])
    return "\n\n".join(system), turns


def _tool_spec(tool: Any) -> dict:
    spec = Converter.tool_to_openai(tool)["function"]
    return {"name": spec["name"], "description": spec.get("description") or "",
            "input_schema": spec.get("parameters") or {"type": "object", "properties": {}}}


class FakeClaudeModel(Model):
    """A `Model` of the SDK's interface answering from faultsim's fake Claude."""

    def __init__(self, env: AgentEnv) -> None:
        if env.async_client is None:
            raise RuntimeError("FakeClaudeModel(env) needs the AgentEnv faultsim builds (its "
                               "async_client is the fake Claude)")
        self.client, self.model = env.async_client, env.model
        # LitellmModel's name for it: the converter replays a reasoning item's thinking
        # blocks only to the model named in the item's provider_data, compared as a string
        self.name = f"anthropic/{env.model}"

    def _body(self, system_instructions: str | None, input: Any, model_settings: Any,
              tools: list, handoffs: list) -> dict[str, Any]:
        # LitellmModel keeps thinking blocks exactly when reasoning is asked for
        thinking = model_settings.reasoning is not None and \
            model_settings.reasoning.effort is not None
        chat = Converter.items_to_messages(
            ItemHelpers.input_to_new_input_list(input), preserve_thinking_blocks=thinking,
            preserve_tool_output_all_content=True, model=self.name)
        system, messages = _to_anthropic(chat)
        body: dict[str, Any] = {"model": self.model, "max_tokens": MAX_TOKENS,
                                "messages": messages}
        system = "\n\n".join(s for s in (system_instructions or "", system) if s)
        if system:
            body["system"] = system
        specs = [_tool_spec(t) for t in tools] + [
            {"name": h.tool_name, "description": h.tool_description or "",
             "input_schema": h.input_json_schema} for h in handoffs]
        if specs:
            body["tools"] = specs
        if thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": THINKING_BUDGET}
        return body

    def _output(self, reply: Any) -> tuple[list, Usage]:
        """The SDK's output items for an Anthropic answer, as LitellmModel makes them."""
        blocks = [b.model_dump(mode="json", exclude_none=True) for b in reply.content]
        thought = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        calls = [ChatCompletionMessageFunctionToolCall(
            id=b["id"], type="function",
            function=Function(name=b["name"], arguments=json.dumps(b["input"])))
            for b in blocks if b["type"] == "tool_use"]
        message = _ChatMessage(
            role="assistant", content="".join(b["text"] for b in blocks if b["type"] == "text")
            or None, tool_calls=calls or None, thinking_blocks=thought or None,
            reasoning_content="".join(b.get("thinking", "") for b in thought))
        items = Converter.message_to_output_items(
            message, provider_data={"model": self.name, "response_id": reply.id})
        usage = Usage(requests=1, input_tokens=reply.usage.input_tokens,
                      output_tokens=reply.usage.output_tokens,
                      total_tokens=reply.usage.input_tokens + reply.usage.output_tokens)
        return items, usage

    async def get_response(self, system_instructions: str | None, input: Any,
                           model_settings: Any, tools: list, output_schema: Any,
                           handoffs: list, tracing: Any, *, previous_response_id: Any = None,
                           conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
        body = self._body(system_instructions, input, model_settings, tools, handoffs)
        items, usage = self._output(await self.client.messages.create(**body))
        return ModelResponse(output=items, usage=usage, response_id=None)

    async def stream_response(self, system_instructions: str | None, input: Any,
                              model_settings: Any, tools: list, output_schema: Any,
                              handoffs: list, tracing: Any, *, previous_response_id: Any = None,
                              conversation_id: Any = None, prompt: Any = None
                              ) -> AsyncIterator[Any]:
        """`Runner.run_streamed`'s model: the fake's answer streamed (server-sent events, so
        kill points land mid-stream), handed to the SDK as one `response.completed`."""
        from openai.types.responses import Response, ResponseCompletedEvent, ResponseUsage
        from openai.types.responses.response_usage import (InputTokensDetails,
                                                           OutputTokensDetails)

        body = self._body(system_instructions, input, model_settings, tools, handoffs)
        async with self.client.messages.stream(**body) as stream:
            reply = await stream.get_final_message()
        if reply.stop_reason is None:  # the SDK returns a cut stream's half as if whole
            raise RuntimeError("the model's stream ended before message_stop")
        items, usage = self._output(reply)
        response = Response(
            id=reply.id, created_at=0, model=self.name, object="response", output=items,
            tool_choice="auto", tools=[], parallel_tool_calls=False, status="completed",
            usage=ResponseUsage(
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0)))
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)


# -- determinism --------------------------------------------------------------------------
# `loop.run_in_executor(None, f)` (so `asyncio.to_thread`) runs `f` now, on the loop's
# thread: kill points land in one order, on the thread faultsim forks from
_Inline = Inline


@contextlib.contextmanager
def _seeded_ids() -> Iterator[None]:
    """The SDK imports `uuid4` by name; route those to `uuid.uuid4`, which faultsim seeds
    per incarnation."""
    import uuid

    def uuid4() -> uuid.UUID:
        return uuid.uuid4()

    def stdlib(f: Any) -> bool:  # uuid.uuid4 itself may be faultsim's seeded one by now
        return getattr(f, "__module__", None) == "uuid" and getattr(f, "__name__", "") == "uuid4"
    users = [(m, m.uuid4) for name, m in list(sys.modules.items())
             if (name == "agents" or name.startswith("agents.")) and
             stdlib(getattr(m, "uuid4", None))]
    for module, _ in users:
        module.uuid4 = uuid4
    try:
        yield
    finally:
        for module, original in users:
            module.uuid4 = original


class _ToolMarks(RunHooks):
    """A mark before and after every tool the SDK executes: kill points at each tool's
    start and end, whether or not its effects go through `faultsim.effect`."""

    def __init__(self, mark: Callable[..., None]) -> None:
        self.mark = mark

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.mark("oa.tool.start", tool=tool.name)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.mark("oa.tool.end", tool=tool.name)


# -- persistence --------------------------------------------------------------------------
def sqlite_session(session_id: str, **options: Any) -> SessionBuilder:
    """An `SQLiteSession(session_id, path)` on the database faultsim gives the agent."""
    from agents import SQLiteSession

    def build(path: Path) -> Any:
        return SQLiteSession(session_id, str(path), **options)
    build.__qualname__ = f"sqlite_session({session_id!r})"
    return build



def _final_text(items: list) -> str | None:
    """The answer a finished conversation ends with (an assistant message after the last
    tool call's output, no call left open), else None."""
    if not items:
        return None
    last = items[-1]
    if not (isinstance(last, dict) and last.get("type", "message") == "message"
            and last.get("role") == "assistant"):
        return None
    calls = {i.get("call_id") for i in items if isinstance(i, dict)
             and i.get("type") == "function_call"}
    outputs = {i.get("call_id") for i in items if isinstance(i, dict)
               and i.get("type") == "function_call_output"}
    if calls - outputs:
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _said(items: list, follow_ups: tuple[str, ...]) -> int:
    """How many of the follow-ups a conversation holds: the last one among its user
    messages, and every one before it."""
    said = set()
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user" and \
                item.get("type", "message") == "message":
            content = item.get("content")
            said.add(content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict)))
    return max((n + 1 for n, text in enumerate(follow_ups) if text in said), default=0)


def _turns(items: list) -> int:
    """Model answers in a conversation: runs of the items one answer is made of (reasoning,
    assistant messages, tool calls), between the items sent to the model."""
    turns, answering = 0, False
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        out = kind in ("reasoning", "function_call") or \
            kind == "message" and item.get("role") == "assistant"
        turns += out and not answering
        answering = out
    return turns


# -- one incarnation ----------------------------------------------------------------------
class AgentRun:
    """One incarnation: build the agent, find what was saved, run, persist as told."""

    def __init__(self, build_agent: AgentBuilder, env: AgentEnv, *,
                 session: SessionBuilder | None, state: str | None,
                 approve: Callable[[Any], bool] | None, resume: str, max_turns: int,
                 context: Callable[[Path], Any] | None, run_config: dict,
                 stream: bool) -> None:
        self.build_agent, self.env = build_agent, env
        self.session_builder, self.approve, self.resume = session, approve, resume
        self.state_path = Path(env.workdir) / state if state else None
        self.max_turns, self.context, self.run_config = max_turns, context, run_config
        self.stream = stream

    def _db(self) -> Path:
        store = self.env.store
        if store is not None and store.kind == "sqlite" and store.path is not None:
            return Path(store.path)
        if os.stat.__module__.startswith("pyfakefs"):
            # in process the workdir is pyfakefs's; SQLite's C code would write to the real disk
            raise ValueError("session: a database session needs the scenario's [store] kind = "
                             "\"sqlite\" (subprocess mode: real files SQLite can write)")
        return Path(self.env.workdir) / "session.db"

    async def run(self) -> Outcome:
        import asyncio

        asyncio.get_running_loop().set_default_executor(_Inline())
        with _seeded_ids():
            return await self._run()

    async def _run(self) -> Outcome:
        env = self.env
        Path(env.workdir).mkdir(parents=True, exist_ok=True)
        agent = self.build_agent()
        session = self.session_builder(self._db()) if self.session_builder else None
        try:
            if env.follow_ups and session is None:
                raise ValueError("follow-up turns (the scenario's follow_up) need session=: "
                                 "the conversation across user turns is kept in the Session "
                                 "(a RunState holds one run)")
            config = RunConfig(**{**self.run_config, "model": FakeClaudeModel(env),
                                  "tracing_disabled": True})
            hooks = _ToolMarks(env.mark) if env.mark is not None else None
            context = self.context(Path(env.workdir)) if self.context is not None else None
            run = dict(session=session, run_config=config, hooks=hooks,
                       max_turns=self.max_turns, context=context)
            outcome = await self._resume(agent, session, run)
            # several user turns: after each final answer the next follow-up the session
            # does not hold yet is sent into the same session, as the user's code does
            while outcome.status == "completed" and env.follow_ups:
                history = await session.get_items()
                said = _said(history, env.follow_ups)
                if said == len(env.follow_ups):
                    # the answer is the session's last (a saved final state may be an
                    # earlier turn's); no turn count: a turn re-asked after a crash is in
                    # the session twice (the SDK appends the repeat), so the session's
                    # count of answers is no counter that continues
                    return Outcome("completed", _final_text(history) or outcome.final_answer)
                result = await self._runner(agent, env.follow_ups[said], **run)
                outcome = await self._settle(agent, result, run)
            return outcome
        finally:
            if session is not None and hasattr(session, "close"):
                session.close()

    async def _resume(self, agent: Any, session: Any, run: dict) -> Outcome:
        """The user turn under way (the task, or the last follow-up sent) to its end: from
        the saved RunState, else from the session's history, else from the start."""
        env = self.env
        state, final = await self._load_state(agent)
        history = None
        if env.follow_ups:  # the session tells which user turn the conversation is at
            history = await session.get_items()
            if final is not None and _final_text(history) is None:
                state = final = None  # the final state of an earlier turn; a later one is open
        if final is not None:  # the final state was saved: nothing to redo
            return Outcome("completed", final)
        if state is not None:
            if state.get_interruptions():
                decided = await self._decide(state)
                if decided is not None:
                    return decided
            result = await self._runner(agent, state, **run)
        else:
            if history is None:
                history = await session.get_items() if session is not None else []
            done = _final_text(history)
            if done is not None:  # finished before the crash, only not reported
                return Outcome("completed", done, turns=_turns(history))
            said = _said(history, env.follow_ups)
            prompt = env.follow_ups[said - 1] if said else env.task
            task = prompt if not history or self.resume == "reprompt" else []
            result = await self._runner(agent, task, **run)
        return await self._settle(agent, result, run)

    async def _settle(self, agent: Any, result: Any, run: dict) -> Outcome:
        """A run to its end: every pause decided (and saved) and resumed, the final state
        kept."""
        while result.interruptions:
            state = result.to_state()
            self._save_state(state)
            decided = await self._decide(state)
            if decided is not None:
                return decided
            result = await self._runner(agent, state, **run)
        if self.state_path is not None:  # the run is over: the final state, kept
            self._save_state(result.to_state(), final=result.final_output)
        items = result.to_input_list()
        return Outcome("completed", str(result.final_output), turns=_turns(items))

    async def _runner(self, agent: Any, input: Any, **run: Any) -> Any:
        """`await Runner.run(...)`, or `Runner.run_streamed(...)` with its events read to
        the end, as the user's code does."""
        if not self.stream:
            return await Runner.run(agent, input, **run)
        result = Runner.run_streamed(agent, input, **run)
        async for _ in result.stream_events():
            pass
        return result

    async def _load_state(self, agent: Any) -> tuple[Any, str | None]:
        """The saved RunState, and the final output when the run it holds was over."""
        path = self.state_path
        if path is None or not path.exists():
            return None, None
        try:
            saved = json.loads(path.read_bytes())
            final = saved.pop("faultsim_final_output", None)
            state = await RunState.from_string(agent, json.dumps(saved))
        except Exception as exc:  # the SDK's own message names the field
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else \
                type(exc).__name__
            raise ValueError(f"{path.name}: not an openai-agents RunState ({first})") from None
        return state, final

    def _save_state(self, state: Any, *, final: Any = None) -> None:
        if self.state_path is None:
            return
        data = state.to_json()
        if final is not None:
            data["faultsim_final_output"] = str(final)
        _write_atomic(self.state_path, json.dumps(data, indent=2).encode())

    async def _decide(self, state: Any) -> Outcome | None:
        """The person's decisions on a paused run, saved before the run goes on; None when
        every pending call was decided."""
        pending = state.get_interruptions()
        if self.approve is None:
            names = ", ".join(i.tool_name or "?" for i in pending)
            return Outcome("escalated", None, escalation=f"waiting for a person on {names}")
        for item in pending:
            if self.approve(item):
                state.approve(item)
            else:
                state.reject(item)
        self._save_state(state)
        return None


def agent_factory(build_agent: AgentBuilder, *, session: SessionBuilder | None = None,
                  state: str | None = None, approve: Callable[[Any], bool] | None = None,
                  resume: str = "continue", max_turns: int = 10,
                  context: Callable[[Path], Any] | None = None,
                  run_config: dict | None = None, stream: bool = False
                  ) -> Callable[[AgentEnv], AgentRun]:
    """A faultsim agent factory running `build_agent()`'s Agent on the scenario's task.
    `session(path)` builds the run's `Session` on the scenario's SQLite store (or
    workdir/session.db); `state` is a RunState file under the workdir (declare it in the
    scenario's `[checkpoint] files`), written when the run pauses for approval, after the
    decision and at the end; `approve(item)` is the person's decision on a pending tool call
    (None: the run escalates). `resume`: "continue" or "reprompt" (module docstring).
    `context(workdir)` builds the run's context object; `run_config` holds your
    `RunConfig`'s other fields (faultsim sets `model` and `tracing_disabled`); `stream`
    drives `Runner.run_streamed` instead of `Runner.run`."""
    if resume not in RESUMES:
        raise ValueError(f"resume {resume!r}: expected one of {', '.join(RESUMES)}")
    if state is not None and (Path(state).is_absolute() or ".." in Path(state).parts):
        raise ValueError(f"state {state!r}: expected a path under the workdir")
    if session is None and state is None:
        raise ValueError("session and state both None: give at least one (a Session builder, "
                         "or a RunState file) or the agent keeps nothing across a crash")
    fixed = {"model", "tracing_disabled"} & set(run_config or {})
    if fixed:
        raise ValueError(f"run_config {', '.join(sorted(fixed))}: faultsim sets these (the "
                         "fake model, no tracing export)")
    if approve is not None and state is None:
        raise ValueError("approve given without state: a decision is kept in the RunState "
                         "file (state=...)")

    def make_agent(env: AgentEnv) -> AgentRun:
        return AgentRun(build_agent, env, session=session, state=state,
                        approve=approve, resume=resume, max_turns=max_turns,
                        context=context, run_config=dict(run_config or {}), stream=stream)

    # Named after the module that builds the agent; the pytest marker names it by the
    # attribute it is kept in (what subprocess mode's fork servers import), faultsim.explore
    # by its module's `make_agent` (give agent_name= for a factory kept under another name).
    make_agent.__module__ = getattr(build_agent, "__module__", __package__)  # the face
    make_agent.__qualname__ = f"<openai_agents {getattr(build_agent, '__qualname__', 'agent')}" \
                              f" resume={resume}>"
    return make_agent
