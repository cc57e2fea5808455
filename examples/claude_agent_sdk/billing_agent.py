"""A billing agent on the Claude Agent SDK, written the way teams write one.

Two in-process SDK MCP tools: a payment through a provider that takes an idempotency key,
and an email, which has none. The service that runs it keeps the session id in
`session.json` and, restarted after a crash, resumes that session (`resume=session_id`).
faultsim runs `run_billing` unchanged; outside faultsim `faultsim.effect` calls the real
clients (stubs here).
"""
from __future__ import annotations

import json
from pathlib import Path

from claude_agent_sdk import (ClaudeAgentOptions, ResultMessage, SystemMessage,
                              create_sdk_mcp_server, query, tool)

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


async def run_billing(task: str, workdir: Path) -> str:
    """Start the task, or resume the session an earlier run left in session.json."""
    state = workdir / "session.json"
    session_id = json.loads(state.read_text())["session_id"] if state.exists() else None
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5", cwd=workdir, mcp_servers={"billing": billing},
        allowed_tools=["mcp__billing__pay_invoice", "mcp__billing__send_email"],
        resume=session_id)
    prompt = task if session_id is None else "Continue the task where you left off."
    answer = None
    async for message in query(prompt=prompt, options=options):
        if isinstance(message, SystemMessage) and message.subtype == "init" and \
                session_id is None:
            session_id = message.data["session_id"]
            state.write_text(json.dumps({"session_id": session_id}))
        elif isinstance(message, ResultMessage):
            if message.is_error:
                raise RuntimeError(f"the agent failed: {message.result}")
            answer = message.result
    return answer
