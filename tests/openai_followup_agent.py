"""An OpenAI Agents SDK service of two user turns (tests/data/openai_followup.toml): a
refund a person approves (the RunState saved at the pause), the conversation in an
SQLiteSession, then the user's follow-up question in the same session. The refund is keyed
by the order and looked up first, so a refund run again after a crash pays once.

The planted mistake, `make_agent_calls_dropped`: a `session_input_callback` that keeps the
history's messages and tool outputs but drops the tool calls (to keep prompts small). The
first user turn never reads the history back (it starts empty, and the approval resume
runs from the RunState), so only the follow-up's request carries a tool result without
its call, which the API refuses: seen only when the follow-up is sent."""
from __future__ import annotations

import json

from agents import Agent, function_tool

import faultsim
from faultsim.adapters.openai_agents import agent_factory, sqlite_session


@faultsim.effect("refunds", key=lambda order, amount_cents: f"refund-{order}-{amount_cents}")
def refund(order: str, amount_cents: int) -> dict:
    raise NotImplementedError("production: payments.refunds.create(..., idempotency_key=...)")


def build_agent() -> Agent:
    @function_tool(needs_approval=True)
    def refund_order(order: str, amount_cents: int) -> str:
        """Refund an order to its customer (a person approves every refund)."""
        done = refund.lookup(f"refund-{order}-{amount_cents}")
        return json.dumps(done if done is not None else refund(order, amount_cents))

    return Agent(name="refunds", instructions="You refund orders once a person approves.",
                 tools=[refund_order])


def person(item) -> bool:
    return item.tool_name == "refund_order"


def calls_dropped(history: list, new_input: list) -> list:
    return [i for i in history if i.get("type") != "function_call"] + new_input


make_agent = agent_factory(build_agent, session=sqlite_session("support"), state="state.json",
                           approve=person, resume="reprompt")
make_agent_continues = agent_factory(build_agent, session=sqlite_session("support"),
                                     state="state.json", approve=person)
make_agent_calls_dropped = agent_factory(
    build_agent, session=sqlite_session("support"), state="state.json", approve=person,
    run_config={"session_input_callback": calls_dropped})
# no session: the follow-up has no conversation to go into
make_agent_state_only = agent_factory(build_agent, state="state.json", approve=person)
