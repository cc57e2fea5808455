"""An OpenAI Agents SDK agent as a team would write it: two tools and an SQLiteSession.

    store.db       the conversation (`SQLiteSession`), which the SDK writes as it runs
    intents.json   the emails about to be sent, and those sent

The effects go through `faultsim.effect`: in production `pay` and `deliver` call the real
payment API and mailer; under faultsim the scenario's `payments` (keyed) and `email`
(blind) services answer instead. After a crash the SDK asks the model again for any turn
whose tool results it had not saved, so the email tool records its intent first, keyed by
what it sends (a re-asked turn's call has a new id), and when it finds an intent with no
completion it asks a person (the SDK's `needs_approval`) rather than send twice.

The SDK writes a turn's items to the session once its tools have run: after a crash in a
tool it asks the model for that turn again and runs the tool again. So the payment tool
first asks the provider whether its key was already paid (`pay.lookup`).

The planted mistakes, each a factory below:
  make_agent_blind_email     the email sent without an intent record
  make_agent_without_lookup  the payment re-submitted without asking the provider first
  make_agent_thinking_trimmed  with Claude's thinking on, the history read back from the
                             session without its reasoning items (openai-agents-python#1704)
  make_agent_reprompts       a restart sends the task again into the session it found
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from agents import Agent, RunContextWrapper, function_tool

import faultsim
from faultsim.adapters.openai_agents import agent_factory, sqlite_session


def payment_key(invoice: str, amount_cents: int) -> str:
    return f"pay-{invoice}-{amount_cents}"


@faultsim.effect("payments", key=payment_key)
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


def build_agent(*, intents: bool = True, lookup: bool = True) -> Agent:
    @function_tool
    def pay_invoice(invoice: str, amount_cents: int) -> str:
        """Pay a supplier invoice (the provider deduplicates on the invoice)."""
        # paid before a crash? The provider knows the key: ask it rather than pay again
        done = pay.lookup(payment_key(invoice, amount_cents)) if lookup else None
        return json.dumps(done if done is not None else pay(invoice, amount_cents))

    def intent_key(to: str, body: str) -> str:
        return hashlib.sha256(f"{to}\n{body}".encode()).hexdigest()[:16]

    def journal(workdir: Path) -> dict:
        path = workdir / "intents.json"
        return json.loads(path.read_text()) if path.exists() else {}

    async def unsure(ctx: RunContextWrapper[Path], params: dict, call_id: str) -> bool:
        """An email about to be sent when the process died: sent or not, nobody knows."""
        entry = journal(ctx.context).get(intent_key(params["to"], params["body"]))
        return intents and entry is not None and not entry["sent"]

    @function_tool(needs_approval=unsure)
    def send_email(ctx: RunContextWrapper[Path], to: str, body: str) -> str:
        """Send an email."""
        if not intents:
            return json.dumps(deliver(to, body))
        entries, key = journal(ctx.context), intent_key(to, body)
        entry = entries.get(key)
        if entry is not None and entry["sent"]:
            return json.dumps(entry["result"])  # sent before the crash: its answer again
        entries[key] = {"sent": False}
        _save(ctx.context / "intents.json", entries)
        result = deliver(to, body)
        entries[key] = {"sent": True, "result": result}
        _save(ctx.context / "intents.json", entries)
        return json.dumps(result)

    return Agent(name="billing", instructions="You pay supplier invoices and confirm by email.",
                 tools=[pay_invoice, send_email])


def build_agent_thinking() -> Agent:
    """The same agent with extended thinking on (openai-agents-python#1704: Claude's
    thinking blocks must survive the session for the next request to be accepted)."""
    from agents import ModelSettings
    from openai.types.shared import Reasoning

    return build_agent().clone(model_settings=ModelSettings(reasoning=Reasoning(effort="low")))


def messages_only(history: list, new_input: list) -> list:
    """A history trimmed to the conversation's messages and tool calls, as a team might write
    `session_input_callback` to keep prompts small: it drops the reasoning items, where the
    SDK keeps Claude's signed thinking blocks."""
    return [i for i in history if i.get("type") != "reasoning"] + new_input


def build_agent_blind_email() -> Agent:
    return build_agent(intents=False)


def build_agent_without_lookup() -> Agent:
    return build_agent(lookup=False)


def workdir(path: Path) -> Path:
    return path


make_agent = agent_factory(build_agent, session=sqlite_session("billing"), context=workdir)
make_agent_blind_email = agent_factory(build_agent_blind_email,
                                       session=sqlite_session("billing"), context=workdir)
make_agent_without_lookup = agent_factory(build_agent_without_lookup,
                                          session=sqlite_session("billing"), context=workdir)
make_agent_thinking = agent_factory(build_agent_thinking, session=sqlite_session("billing"),
                                    context=workdir)
make_agent_thinking_trimmed = agent_factory(
    build_agent_thinking, session=sqlite_session("billing"), context=workdir,
    run_config={"session_input_callback": messages_only})
make_agent_reprompts = agent_factory(build_agent, session=sqlite_session("billing"),
                                     context=workdir, resume="reprompt")
