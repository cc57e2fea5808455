"""A billing agent on the Claude Agent SDK, written the way teams write one.

Two in-process SDK MCP tools: a payment through a provider that takes an idempotency key,
and an email, which has none. The service that runs it keeps the session id in
`session.json` and, restarted after a crash, resumes that session (`resume=session_id`).
faultsim runs `run_billing` unchanged; outside faultsim `faultsim.effect` calls the real
clients (stubs here).

`run_billing_careful` is the same agent with an email tool that keeps intent and completion
records (PROTOCOL P11) in `emails.json`: a retried send that finds its completion returns it
instead of sending again, and one that finds only the intent stops the run for a person.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from claude_agent_sdk import (ClaudeAgentOptions, ClaudeSDKClient, ResultMessage,
                              SystemMessage, create_sdk_mcp_server, query, tool)

import faultsim


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay(invoice: str, amount_cents: int) -> dict:
    raise NotImplementedError("the payment provider's client")  # never reached under faultsim


@faultsim.effect("email")  # blind: no key, every call is an email
def send(to: str, body: str) -> dict:
    raise NotImplementedError("the mail provider's client")


@tool("pay_invoice", "Pay a supplier invoice.", {"invoice": str, "amount_cents": int})
async def pay_invoice(args: dict) -> dict:
    receipt = pay(args["invoice"], args["amount_cents"])
    return {"content": [{"type": "text", "text": json.dumps(receipt, default=str)}]}


@tool("send_email", "Send an email.", {"to": str, "body": str})
async def send_email(args: dict) -> dict:
    sent = send(args["to"], args["body"])
    return {"content": [{"type": "text", "text": json.dumps(sent, default=str)}]}


billing = create_sdk_mcp_server("billing", tools=[pay_invoice, send_email])
TOOLS = ["mcp__billing__pay_invoice", "mcp__billing__send_email"]


async def run_billing(task: str, workdir: Path) -> str:
    """Start the task, or resume the session an earlier run left in session.json."""
    return await _run(task, workdir, billing)


def _write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def careful_billing(workdir: Path, stopped: list[str]) -> object:
    """The billing server with an email tool that records its intent before sending and its
    completion after (P11), in workdir/emails.json."""
    log = workdir / "emails.json"

    @tool("send_email", "Send an email.", {"to": str, "body": str})
    async def send_email_once(args: dict) -> dict:
        key = f"{args['to']}|{args['body']}"
        records = json.loads(log.read_text()) if log.exists() else {}
        if key in records and records[key] is not None:  # sent before a crash: its result
            return {"content": [{"type": "text", "text": json.dumps(records[key])}]}
        if key in records:  # intent, no completion: it may have gone out; never guess
            stopped.append(f"an email to {args['to']} may have been sent before a crash")
            return {"content": [{"type": "text", "text": "Unknown whether this email was "
                                 "sent; a person must check."}], "is_error": True}
        records[key] = None
        _write_atomic(log, records)
        sent = send(args["to"], args["body"])
        records[key] = sent
        _write_atomic(log, records)
        return {"content": [{"type": "text", "text": json.dumps(sent, default=str)}]}

    return create_sdk_mcp_server("billing", tools=[pay_invoice, send_email_once])


async def run_billing_careful(task: str, workdir: Path) -> object:
    stopped: list[str] = []
    answer = await _run(task, workdir, careful_billing(workdir, stopped))
    if stopped:
        return faultsim.Outcome("escalated", None, escalation=stopped[0])
    return answer


async def run_billing_continues(task: str, workdir: Path) -> str:
    """The same agent resumed the other way the SDK offers: no session id kept, the latest
    session of the working directory continued (`continue_conversation=True`), the task as
    the prompt every time."""
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5", cwd=workdir, mcp_servers={"billing": billing},
        allowed_tools=TOOLS, continue_conversation=True)
    answer = None
    async for message in query(prompt=task, options=options):
        if isinstance(message, ResultMessage):
            if message.is_error:
                raise RuntimeError(f"the agent failed: {message.result}")
            answer = message.result
    return answer


async def run_billing_client(task: str, workdir: Path) -> str:
    """The same agent on the SDK's interactive client (`ClaudeSDKClient`) instead of
    `query()`: the session id kept in session.json, resumed the same way."""
    state = workdir / "session.json"
    session_id = json.loads(state.read_text())["session_id"] if state.exists() else None
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5", cwd=workdir, mcp_servers={"billing": billing},
        allowed_tools=TOOLS, resume=session_id)
    async with ClaudeSDKClient(options=options) as client:
        await client.query(task if session_id is None else
                           "Continue the task where you left off.")
        return await _answer(client.receive_response(), state, session_id)


async def _run(task: str, workdir: Path, server: object) -> str:
    state = workdir / "session.json"
    session_id = json.loads(state.read_text())["session_id"] if state.exists() else None
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5", cwd=workdir, mcp_servers={"billing": server},
        allowed_tools=TOOLS, resume=session_id)
    prompt = task if session_id is None else "Continue the task where you left off."
    return await _answer(query(prompt=prompt, options=options), state, session_id)


async def _answer(messages, state: Path, session_id: str | None) -> str:
    """Follow the session's messages: keep a new session's id (from its init message) in
    `state`, return the final result."""
    answer = None
    async for message in messages:
        if isinstance(message, SystemMessage) and message.subtype == "init" and \
                session_id is None:
            session_id = message.data["session_id"]
            state.write_text(json.dumps({"session_id": session_id}))
        elif isinstance(message, ResultMessage):
            if message.is_error:
                raise RuntimeError(f"the agent failed: {message.result}")
            answer = message.result
    return answer
