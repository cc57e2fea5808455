"""openai-agents-python #4827's agent, as its report writes it: an Agent with an output
guardrail and a `tool_use_behavior` other than "run_llm_again" (it stops when it closes
the ticket), whose refund tool needs a person's approval; an SQLiteSession holds the
conversation and the RunState is saved at the pause (the SDK's human-in-the-loop recipe
with a session). The person approves, the run resumes from the decided state on the same
session (the refund is no stopping tool: the model is asked again), and the user then asks
a follow-up question in that session: the turn whose request carries what the approval
resume left in the session. The refund goes to the scenario's keyed receiver
under a key derived from the order, looked up before it is paid, so a refund run again
after a crash pays once; what is judged is whether the conversation can go on."""
from __future__ import annotations

import json

from agents import Agent, GuardrailFunctionOutput, StopAtTools, function_tool, output_guardrail

import faultsim
from faultsim.adapters.openai_agents import agent_factory, sqlite_session


@faultsim.effect("refunds", key=lambda order, amount_cents: f"refund-{order}-{amount_cents}")
def refund(order: str, amount_cents: int) -> dict:
    raise NotImplementedError("production: payments.refunds.create(..., idempotency_key=...)")


def build_agent() -> Agent:
    @function_tool(needs_approval=True)
    def refund_order(order: str, amount_cents: int) -> str:
        """Refund an order to its customer (a person approves every refund)."""
        done = refund.lookup(f"refund-{order}-{amount_cents}")  # refunded before a crash?
        return json.dumps(done if done is not None else refund(order, amount_cents))

    @function_tool
    def close_ticket(summary: str) -> str:
        """Close the support ticket with a summary (ends the run)."""
        return summary

    @output_guardrail
    async def no_card_numbers(ctx, agent, output) -> GuardrailFunctionOutput:
        """The answer the customer sees carries no card number."""
        digits = sum(c.isdigit() for c in str(output))
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=digits >= 13)

    return Agent(name="refunds", instructions="You refund orders once a person approves.",
                 tools=[refund_order, close_ticket], output_guardrails=[no_card_numbers],
                 tool_use_behavior=StopAtTools(stop_at_tool_names=["close_ticket"]))


def person(item) -> bool:
    return item.tool_name == "refund_order"


make_agent = agent_factory(build_agent, session=sqlite_session("support"), state="state.json",
                           approve=person)
