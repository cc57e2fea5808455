"""A pydantic-ai agent as a team would write it: two tools and a message-history file.

    history.json   the run's messages (`all_messages_json()`), saved after every step
    intents.json   the emails about to be sent, and those sent

The effects go through `faultsim.effect`: in production `pay` and `deliver` call the real
payment API and mailer; under faultsim the scenario's `payments` (keyed) and `email`
(blind) services answer instead. pydantic-ai re-runs the tool calls a saved history left
unanswered, so the email tool records its intent first and, when it finds an intent with
no completion, asks a person (`ApprovalRequired`) rather than sending twice.

The planted mistakes, each a factory below:
  make_agent_blind_email     the email sent without an intent record
  make_agent_saves_at_end    the history saved once, when the run is over
  make_agent_reprompts       a restart sends the task again with the history it found
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.exceptions import ApprovalRequired

import faultsim
from faultsim.adapters.pydantic_ai import agent_factory


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay(invoice: str, amount_cents: int) -> dict:
    raise NotImplementedError("production: payments.create(..., idempotency_key=...)")


@faultsim.effect("email")
def deliver(to: str, body: str) -> dict:
    raise NotImplementedError("production: smtp.send_message(...)")


def _save(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build_agent(model, *, intents: bool = True) -> Agent:
    agent = Agent(model, deps_type=Path, output_type=[str, DeferredToolRequests],
                  instructions="You pay supplier invoices and confirm by email.")

    @agent.tool_plain
    def pay_invoice(invoice: str, amount_cents: int) -> str:
        """Pay a supplier invoice (the provider deduplicates on the invoice)."""
        return json.dumps(pay(invoice, amount_cents))

    @agent.tool
    def send_email(ctx: RunContext[Path], to: str, body: str) -> str:
        """Send an email."""
        if not intents:
            return json.dumps(deliver(to, body))
        path = ctx.deps / "intents.json"
        journal = json.loads(path.read_text()) if path.exists() else {}
        entry = journal.get(ctx.tool_call_id)
        if entry is not None and entry["sent"]:
            return json.dumps(entry["result"])  # sent before the crash: its answer again
        if entry is not None:  # about to be sent when the process died: sent or not?
            raise ApprovalRequired({"why": f"email {ctx.tool_call_id}: sent or not, unknown"})
        journal[ctx.tool_call_id] = {"sent": False}
        _save(path, journal)
        result = deliver(to, body)
        journal[ctx.tool_call_id] = {"sent": True, "result": result}
        _save(path, journal)
        return json.dumps(result)

    return agent


def build_agent_blind_email(model) -> Agent:
    return build_agent(model, intents=False)


def workdir(path: Path) -> Path:
    return path


make_agent = agent_factory(build_agent, history="history.json", deps=workdir)
make_agent_blind_email = agent_factory(build_agent_blind_email, deps=workdir)
make_agent_saves_at_end = agent_factory(build_agent, save="end", deps=workdir)
make_agent_reprompts = agent_factory(build_agent, resume="reprompt", deps=workdir)
make_agent_saves_per_node = agent_factory(build_agent, save="node", deps=workdir)
