"""bench/any_language.py's agent on the Claude Agent SDK: the pay agent of
examples/any_language (one keyed payment, then the answer) as the Claude Agent SDK runs it:
an SDK MCP tool paying with a key derived from the invoice, the session kept in
session.json and resumed after a restart (examples/claude_agent_sdk's pattern)."""
from __future__ import annotations

import json
from pathlib import Path

from claude_agent_sdk import (ClaudeAgentOptions, ResultMessage, SystemMessage,
                              create_sdk_mcp_server, query, tool)

import faultsim


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay(invoice: str, amount_cents: int) -> dict:
    raise NotImplementedError("the payment provider's client")  # never reached under faultsim


@tool("pay_invoice", "Pay a supplier invoice.", {"invoice": str, "amount_cents": int})
async def pay_invoice(args: dict) -> dict:
    receipt = pay(args["invoice"], args["amount_cents"])
    return {"content": [{"type": "text", "text": json.dumps(receipt, default=str)}]}


SERVER = create_sdk_mcp_server("billing", tools=[pay_invoice])


async def run_pay(task: str, workdir: Path) -> str:
    state = workdir / "session.json"
    session_id = json.loads(state.read_text())["session_id"] if state.exists() else None
    options = ClaudeAgentOptions(model="claude-sonnet-4-5", cwd=workdir,
                                 mcp_servers={"billing": SERVER},
                                 allowed_tools=["mcp__billing__pay_invoice"],
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
