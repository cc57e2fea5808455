"""A human-approval pause with the OpenAI Agents SDK, as its documentation writes it.

`refund_order` has `needs_approval=True`: the run stops before it with the call as an
interruption; the service saves `result.to_state()` (state.json), a person approves, the
service applies `state.approve(...)`, saves the decided state and resumes with
`Runner.run(agent, state)`. faultsim's adapter plays the service and, through `approve`,
the person; it kills the process at every write of state.json, at the model's answers
and around the refund itself.

The SDK saves nothing while the resumed run goes on: until the final state is written,
state.json still holds the approved call, so a crash after the refund runs it again. The
refund carries an idempotency key derived from the order, and the tool first asks the
provider whether that key was already paid (`refund.lookup`), so the second run pays
nothing and asks nothing of the provider but that.

The planted mistakes:
  make_agent_fresh_key       the idempotency key drawn afresh for each attempt (a uuid4 in
                             the tool), not derived from the order: the refund paid twice
  make_agent_without_lookup  the refund re-submitted (deduplicated by its key) without
                             asking first: with the re-asked final turn, two steps repeated
"""
from __future__ import annotations

import json
import uuid

from agents import Agent, function_tool

import faultsim
from faultsim.adapters.openai_agents import agent_factory


@faultsim.effect("refunds", key=lambda order, amount_cents, idempotency_key: idempotency_key)
def refund(order: str, amount_cents: int, idempotency_key: str) -> dict:
    raise NotImplementedError("production: payments.refunds.create(..., idempotency_key=...)")


def build_agent(*, derived_key: bool = True, lookup: bool = True) -> Agent:
    @function_tool(needs_approval=True)
    def refund_order(order: str, amount_cents: int) -> str:
        """Refund an order to its customer (a person approves every refund)."""
        key = f"refund-{order}-{amount_cents}" if derived_key else str(uuid.uuid4())
        done = refund.lookup(key) if lookup else None  # refunded before a crash?
        return json.dumps(done if done is not None else
                          refund(order, amount_cents, idempotency_key=key))

    return Agent(name="refunds", instructions="You refund orders once a person approves.",
                 tools=[refund_order])


def build_agent_fresh_key() -> Agent:
    return build_agent(derived_key=False)


def build_agent_without_lookup() -> Agent:
    return build_agent(lookup=False)


def person(item) -> bool:
    """The person on call approves refunds (in production: a ticket, a button)."""
    return item.tool_name == "refund_order"


make_agent = agent_factory(build_agent, state="state.json", approve=person)
make_agent_fresh_key = agent_factory(build_agent_fresh_key, state="state.json", approve=person)
make_agent_without_lookup = agent_factory(build_agent_without_lookup, state="state.json",
                                          approve=person)
# the same service reading Runner.run_streamed's events
make_agent_streamed = agent_factory(build_agent, state="state.json", approve=person, stream=True)
# no one answers: the paused run is an escalation
make_agent_unattended = agent_factory(build_agent, state="state.json")
