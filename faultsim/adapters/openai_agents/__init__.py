"""Crash-test an OpenAI Agents SDK agent, unchanged: `pip install 'faultsim[openai-agents]'`.

You give faultsim the function your code already has that builds the `Agent`::

    def build_agent() -> Agent:
        @function_tool
        @faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}")
        def pay_invoice(invoice: str, amount_cents: int) -> str: ...

        return Agent(name="billing", instructions="...", tools=[pay_invoice])

and says how your code persists and resumes, the SDK's two documented ways:

* a `Session` (`session=sqlite_session("billing")`: an `SQLiteSession` on the scenario's
  `[store] kind = "sqlite"` database, run in subprocess mode, where every statement and
  commit SQLite makes is a kill point; or any `(path) -> Session` you give);
* `RunState` (`state="state.json"`): when a run stops for a person (a tool with
  `needs_approval`), `result.to_state().to_string()` is written to the file (temp file,
  fsync, rename: every write a kill point through faultsim's file interposition); the
  person's decision (`approve`, a function of the pending `ToolApprovalItem`) is applied
  with `state.approve` / `state.reject`, the decided state saved again, and the run
  resumed with `Runner.run(agent, state)`.

Each incarnation builds the agent afresh and drives it as users write it, `await
Runner.run(agent, input, session=..., run_config=RunConfig(model=...))` (or
`Runner.run_streamed`): the task when
nothing was saved, else `[]` (`resume="continue"`: carry on from the session) or the task
again (`resume="reprompt"`). A run-time `RunHooks` marks every tool's start and end
(`oa.tool.start` / `oa.tool.end` kill points); the user's `Agent` is not touched.

Which model route, measured (issue 24 asked to choose): the SDK speaks OpenAI's Responses
items; faultsim's fake speaks Anthropic's Messages API. Two routes join them:

* the SDK's LiteLLM path (`LitellmModel("anthropic/...")`) over faultsim's fake on a
  loopback port: it works (examples/openai_agents/litellm_1704.py runs it), but litellm is
  not a dependency of openai-agents and, measured with litellm 1.110.2: 78 packages and
  422 MB in a fresh venv, `import litellm` 3.0 s plus 1.0 s for `LitellmModel`, a DNS
  lookup of raw.githubusercontent.com at import (its price map) unless
  LITELLM_LOCAL_MODEL_COST_MAP=True, `reasoning_effort` refused for a model name it does
  not know (a scenario's), and plain `httpx` through a socket where faultsim serves its
  fake in process through `httpx2`.
* `FakeClaudeModel`, a `Model` of the SDK's interface (chosen): it converts the SDK's input
  items with the SDK's own chat-completions `Converter` — the code `LitellmModel` runs,
  `items_to_messages(preserve_thinking_blocks=...)` on the way out and
  `message_to_output_items` (thinking blocks carried in `provider_data`) on the way back —
  and replaces only LiteLLM's small chat-to-Anthropic step with faultsim's own (system
  text, `tool_calls` to `tool_use`, `tool` messages to `tool_result`, thinking blocks first),
  then asks faultsim's fake Claude through the real `anthropic` SDK client. So the fake's
  checks apply unchanged (tool_use/tool_result pairing, signed thinking blocks: the error of
  openai-agents-python#1704 is the fake's), its requests are the oracle's evidence, and its
  API faults reach the SDK's retry logic. What is not exercised: LiteLLM's own translation.

Determinism: the SDK runs sync tools and `SQLiteSession`'s database work on worker
threads (`asyncio.to_thread`) and draws ids from `uuid4`. Each incarnation runs them
inline on the loop's thread (an inline default executor, as pydantic-ai's Temporal
integration does for its tools) and draws the ids from faultsim's seeded `uuid.uuid4`, so
two clean runs hit the same kill points in the same order. Tracing is off
(`RunConfig(tracing_disabled=True)`, `OPENAI_AGENTS_DISABLE_TRACING=1`): the SDK would
otherwise export traces to api.openai.com.

Several user turns (the scenario's `follow_up`s, `env.follow_ups`): after each final
answer the next follow-up is sent into the same session, `Runner.run(agent, follow_up,
session=...)`, as a chat service does with the user's next message; the last answer is
the outcome. Which turn a restart is at is read from the session (the follow-ups its user
messages hold, whether it ends with an answer), so a follow-up is sent once; follow-ups
need `session=`.

A run that ends with interruptions (a person must decide) and no `approve` given ends as
an escalation, a legal stop. `stream=True` drives `Runner.run_streamed` (its events read
to the end) over the fake's server-sent events, with kill points inside each stream.
"""
from __future__ import annotations

from .adapter import (AgentBuilder, AgentRun, FakeClaudeModel, MAX_TOKENS, RESUMES,
                      SessionBuilder, THINKING_BUDGET, agent_factory,
                      sqlite_session)  # noqa: F401

__all__ = ["RESUMES", "FakeClaudeModel", "agent_factory", "sqlite_session"]
