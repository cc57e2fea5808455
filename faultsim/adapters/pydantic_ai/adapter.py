"""The pydantic-ai adapter's code. Its face is the package, `faultsim.adapters.pydantic_ai`:
its docstring is the adapter's manual, and it re-exports the names users import."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from ...agent import AgentEnv, Outcome
from ...killpoints import register_phases
from .._files import write_atomic as _write_atomic

# the phases this adapter's marks start: every tool's execution (`pa.tool.start` / `pa.tool.end`)
register_phases({"mark.pa.tool.start": "in-tool", "mark.pa.tool.end": "after-tool"})

try:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import (ModelMessagesTypeAdapter, ModelRequest, ModelResponse,
                                     ToolCallPart, UserPromptPart)
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.pydantic_ai needs the pydantic-ai extra: pip install "
                      f"'faultsim[pydantic-ai]' ({exc})") from None

# The history's schema is built on first use; built under faultsim's frozen clock it would
# meet freezegun's FakeDatetime and fail. Build it now, on real time.
ModelMessagesTypeAdapter.dump_json(ModelMessagesTypeAdapter.validate_json(b"[]"))

__all__ = ["SAVES", "RESUMES", "agent_factory", "anthropic_model"]

# when the history file is written: after each node, with the request it is about to send
# ("step"); after each node, `run.all_messages()` alone ("node"); once, at the end ("end")
SAVES = ("step", "node", "end")
RESUMES = ("continue", "reprompt")  # what a restarted run sends with a history it found

AgentBuilder = Callable[..., Any]  # (model) -> pydantic_ai.Agent


def anthropic_model(env: AgentEnv) -> AnthropicModel:
    """pydantic-ai's real `AnthropicModel`, its `AsyncAnthropic` client served by faultsim's
    fake Claude inside the agent's process (no socket; in subprocess mode, the child's)."""
    if env.async_client is None:
        raise RuntimeError("anthropic_model(env) needs the AgentEnv faultsim builds (its "
                           "async_client is the fake Claude)")
    return AnthropicModel(env.model, provider=AnthropicProvider(anthropic_client=env.async_client))


# -- determinism --------------------------------------------------------------------------
@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """pydantic-ai names each run and conversation with a uuid7 from `os.urandom`, and runs
    a sync tool on a worker thread. Draw the ids from `random` (seeded per incarnation by
    faultsim) and run sync tools inline, as pydantic-ai's Temporal integration does: two
    clean runs then save the same bytes and hit the same kill points."""
    import random
    import sys
    import time
    import uuid

    from pydantic_ai import _utils
    from pydantic_ai import _uuid as pa_uuid

    original = pa_uuid.uuid7

    def uuid7() -> uuid.UUID:
        ms = time.time_ns() // 1_000_000
        bits = random.getrandbits(74)
        return uuid.UUID(int=(ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (bits >> 62) << 64
                         | 0b10 << 62 | bits & (1 << 62) - 1)

    users = [m for name, m in list(sys.modules.items())
             if name.startswith("pydantic_ai") and getattr(m, "uuid7", None) is original]
    for module in users:
        module.uuid7 = uuid7
    try:
        with _utils.disable_threads():
            yield
    finally:
        for module in users:
            module.uuid7 = original


def _tool_marks(mark: Callable[..., None] | None) -> list:
    """A run-time capability (the user's Agent is not touched): a mark before and after
    every tool pydantic-ai executes, so kill points land at each tool's start and end,
    whether or not its effects go through `faultsim.effect`."""
    if mark is None:
        return []
    from pydantic_ai.capabilities import AbstractCapability

    class ToolMarks(AbstractCapability):
        @classmethod
        def get_serialization_name(cls) -> str | None:
            return None

        async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any,
                                    handler: Any) -> Any:
            mark("pa.tool.start", tool=call.tool_name)
            result = await handler(args)
            mark("pa.tool.end", tool=call.tool_name)
            return result

    return [ToolMarks()]


# -- the history file ---------------------------------------------------------------------
def _load(path: Path) -> list:
    if not path.exists():
        return []
    try:
        return ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path.name}: not a pydantic-ai message history ({first})") from None



def _history(run: Any, node: Any, *, pending: bool) -> bytes:
    """The history to save after `node`. `run.all_messages()` holds a tool's result only once
    the next model answer is in: the result waits in the next node's `request`. With
    `pending`, that request is saved too, before it is sent (P2's save point B)."""
    messages = run.all_messages()
    if pending and Agent.is_model_request_node(node) and node.request.parts and \
            (not messages or messages[-1] is not node.request):
        messages = [*messages, node.request]
    return ModelMessagesTypeAdapter.dump_json(messages)


def _turns(messages: list) -> int:
    return sum(isinstance(m, ModelResponse) for m in messages)


def _final_text(messages: list) -> str | None:
    """The answer a finished history ends with (a response that calls no tool), else None."""
    if not messages or not isinstance(messages[-1], ModelResponse):
        return None
    last = messages[-1]
    if any(isinstance(p, ToolCallPart) for p in last.parts):
        return None
    return last.text or ""


def _said(messages: list, follow_ups: tuple[str, ...]) -> int:
    """How many of the follow-ups a history holds: the last one among its user prompts,
    and every one before it."""
    said = {p.content if isinstance(p.content, str) else "".join(
                c for c in p.content if isinstance(c, str))
            for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPromptPart)}
    return max((n + 1 for n, text in enumerate(follow_ups) if text in said), default=0)


# -- one incarnation ----------------------------------------------------------------------
class AgentRun:
    """One incarnation: build the agent, read the history, run, persist as told."""

    def __init__(self, build_agent: AgentBuilder, env: AgentEnv, *, history: str, save: str,
                 resume: str, deps: Callable[[Path], Any] | None) -> None:
        self.build_agent, self.env = build_agent, env
        self.path = Path(env.workdir) / history
        self.save, self.resume, self.deps = save, resume, deps

    async def run(self) -> Outcome:
        env = self.env
        self.path.parent.mkdir(parents=True, exist_ok=True)
        messages = _load(self.path)
        said = _said(messages, env.follow_ups)
        # the user turn under way (the task, or the last follow-up the history holds)
        prompt = env.follow_ups[said - 1] if said else env.task
        done = _final_text(messages)
        if done is not None:  # that turn finished before the crash, only not reported
            outcome = Outcome("completed", done, turns=_turns(messages))
        else:
            outcome = await self._turn(
                prompt if not messages or self.resume == "reprompt" else None, messages)
        # several user turns: after each final answer, the next follow-up the history does
        # not hold yet, into the same conversation
        while outcome.status == "completed" and said < len(env.follow_ups):
            outcome = await self._turn(env.follow_ups[said], _load(self.path))
            said += 1
        return outcome

    async def _turn(self, prompt: str | None, messages: list) -> Outcome:
        """One run of `agent.iter` to its end: `prompt` (None: carry on with what the
        history left) after `messages`, the history saved as told."""
        env = self.env
        deps = self.deps(Path(env.workdir)) if self.deps is not None else None
        saved = self.path.read_bytes() if messages else b""
        with _deterministic():
            agent = self.build_agent(anthropic_model(env))
            async with agent.iter(prompt, message_history=messages or None, deps=deps,
                                  capabilities=_tool_marks(env.mark)) as run:
                async for node in run:
                    if self.save != "end":
                        data = _history(run, node, pending=self.save == "step")
                        if data not in (saved, b"[]"):  # nothing new: nothing to save
                            _write_atomic(self.path, data)
                            saved = data
            result = run.result
            data = result.all_messages_json()
            if data != saved:
                _write_atomic(self.path, data)
        output = result.output
        if isinstance(output, DeferredToolRequests):
            waiting = [c.tool_name for c in [*output.approvals, *output.calls]]
            return Outcome("escalated", None, turns=_turns(result.all_messages()),
                           escalation=f"waiting for a person on {', '.join(waiting)}")
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        return Outcome("completed", text, turns=_turns(result.all_messages()))


def agent_factory(build_agent: AgentBuilder, *, history: str = "history.json",
                  save: str = "step", resume: str = "continue",
                  deps: Callable[[Path], Any] | None = None
                  ) -> Callable[[AgentEnv], AgentRun]:
    """A faultsim agent factory running `build_agent(model)`'s Agent on the scenario's task,
    its message history kept in `history` (a path under the workdir; declare it in the
    scenario's `[checkpoint] files`). `save`: "step", "node" or "end"; `resume`: "continue"
    or "reprompt" (see the module docstring). `deps(workdir)` builds the run's deps."""
    if save not in SAVES:
        raise ValueError(f"save {save!r}: expected one of {', '.join(SAVES)}")
    if resume not in RESUMES:
        raise ValueError(f"resume {resume!r}: expected one of {', '.join(RESUMES)}")
    if Path(history).is_absolute() or ".." in Path(history).parts:
        raise ValueError(f"history {history!r}: expected a path under the workdir")

    def make_agent(env: AgentEnv) -> AgentRun:
        return AgentRun(build_agent, env, history=history, save=save, resume=resume, deps=deps)

    # Named after the module that builds the agent; the pytest marker names it by the
    # attribute it is kept in (what subprocess mode's fork servers import), faultsim.explore
    # by its module's `make_agent` (give agent_name= for a factory kept under another name).
    make_agent.__module__ = getattr(build_agent, "__module__", __package__)  # the face
    make_agent.__qualname__ = f"<pydantic_ai {getattr(build_agent, '__qualname__', 'agent')} " \
                              f"save={save} resume={resume}>"
    return make_agent
