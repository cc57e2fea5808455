"""A pydantic-ai service of two user turns (tests/data/pydantic_followup.toml): an invoice
paid, then the user's follow-up (send the receipt) in the same conversation, the message
history in history.json. Both effects are keyed, so a tool pydantic-ai runs again after a
crash applies once.

The planted mistake, `make_agent_replays_follow_ups`: the service's chat loop sends every
follow-up of its queue after the first answer on each start, instead of reading from the
history which ones the conversation already holds; a restart after the follow-up was sent
sends it again."""
from __future__ import annotations

import json

from pydantic_ai import Agent

import faultsim
from faultsim.adapters.pydantic_ai import AgentRun, agent_factory
from faultsim.adapters.pydantic_ai.adapter import _final_text, _load


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay(invoice: str, amount_cents: int) -> dict:
    raise NotImplementedError("production: payments.create(..., idempotency_key=...)")


@faultsim.effect("receipts", key=lambda invoice: f"receipt-{invoice}")
def send(invoice: str) -> dict:
    raise NotImplementedError("production: mailer.send(..., idempotency_key=...)")


def build_agent(model) -> Agent:
    agent = Agent(model, instructions="You pay supplier invoices and send their receipts.")

    @agent.tool_plain
    def pay_invoice(invoice: str, amount_cents: int) -> str:
        """Pay a supplier invoice (the provider deduplicates on the invoice)."""
        return json.dumps(pay(invoice, amount_cents))

    @agent.tool_plain
    def send_receipt(invoice: str) -> str:
        """Email the supplier the receipt of a paid invoice."""
        return json.dumps(send(invoice))

    return agent


make_agent = agent_factory(build_agent)


class _ReplaysFollowUps(AgentRun):
    async def run(self):
        messages = _load(self.path)
        done = _final_text(messages) if messages else None
        if done is None:  # the first user turn, or carried on from where the history left it
            outcome = await self._turn(None if messages else self.env.task, messages)
        # the mistake: every follow-up of the queue, whatever the history already holds
        for text in self.env.follow_ups:
            outcome = await self._turn(text, _load(self.path))
        return outcome


def make_agent_replays_follow_ups(env):
    return _ReplaysFollowUps(build_agent, env, history="history.json", save="step",
                             resume="continue", deps=None)
