"""A Claude Agent SDK service of two user turns (tests/data/cs_followup.toml): an invoice paid,
then the user's follow-up (email the receipt) into the same session. The service keeps the
session id in `session.json`; restarted, it reads the session through the SDK
(`get_session_messages`) to learn which of the user's messages it holds and whether the
turn under way was answered, resumes that turn if it was not, and sends each follow-up the
session does not hold yet, once. Both tools are keyed, so a tool the resumed CLI runs again
applies once.

The planted mistakes, each the service's chat loop written another way (the tools are the
same):
  run_replays_follow_ups  counts the follow-ups it sent in memory: each start resumes the
                          turn under way and then sends every follow-up again
  run_loses_follow_ups    keeps the user's next messages in memory only: a restart resumes
                          the turn under way and ends there, so a follow-up not sent before
                          the crash is never sent
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from claude_agent_sdk import (ClaudeAgentOptions, ResultMessage, SystemMessage,
                              create_sdk_mcp_server, get_session_messages, query, tool)

import faultsim

RESUME = "Continue the task where you left off."


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay(invoice: str, amount_cents: int) -> dict:
    raise NotImplementedError("the payment provider's client")  # never reached under faultsim


@faultsim.effect("receipts", key=lambda invoice, to: f"receipt-{invoice}-{to}")
def email_receipt(invoice: str, to: str) -> dict:
    raise NotImplementedError("the mail provider's client")


@tool("pay_invoice", "Pay a supplier invoice.", {"invoice": str, "amount_cents": int})
async def pay_invoice(args: dict) -> dict:
    paid = pay(args["invoice"], args["amount_cents"])
    return {"content": [{"type": "text", "text": json.dumps(paid, default=str)}]}


@tool("send_receipt", "Email a paid invoice's receipt.", {"invoice": str, "to": str})
async def send_receipt(args: dict) -> dict:
    sent = email_receipt(args["invoice"], args["to"])
    return {"content": [{"type": "text", "text": json.dumps(sent, default=str)}]}


billing = create_sdk_mcp_server("billing", tools=[pay_invoice, send_receipt])
TOOLS = ["mcp__billing__pay_invoice", "mcp__billing__send_receipt"]


def _session(workdir: Path) -> str | None:
    state = workdir / "session.json"
    return json.loads(state.read_text())["session_id"] if state.exists() else None


async def _turn(prompt: str, workdir: Path, session_id: str | None) -> tuple[str, str]:
    """One user message into the session (a new one when `session_id` is None: its id kept
    in session.json); (the answer, the session id)."""
    options = ClaudeAgentOptions(model="claude-sonnet-4-5", cwd=workdir,
                                 mcp_servers={"billing": billing}, allowed_tools=TOOLS,
                                 resume=session_id)
    answer = None
    async for message in query(prompt=prompt, options=options):
        if isinstance(message, SystemMessage) and message.subtype == "init" and \
                session_id is None:
            session_id = message.data["session_id"]
            (workdir / "session.json").write_text(json.dumps({"session_id": session_id}))
        elif isinstance(message, ResultMessage):
            if message.is_error:
                raise RuntimeError(f"the agent failed: {message.result}")
            answer = message.result
    assert session_id is not None
    return answer, session_id


def _blocks(message: object) -> list:
    content = (message or {}).get("content") if isinstance(message, dict) else None
    return [{"type": "text", "text": content}] if isinstance(content, str) else \
        [b for b in content or [] if isinstance(b, dict)]


def where(session_id: str, workdir: Path, follow_ups: Sequence[str]) -> tuple[int, str | None]:
    """What the session holds, read through the SDK: how many of the follow-ups it holds
    (the last one among its user messages, and every one before it), and the answer to its
    last user message (None: that turn was under way)."""
    messages = get_session_messages(session_id, directory=str(workdir))
    said_texts = [b.get("text", "") for m in messages if m.type == "user"
                  for b in _blocks(m.message) if b.get("type") == "text"]
    said = max((n + 1 for n, text in enumerate(follow_ups)
                if any(text in s for s in said_texts)), default=0)
    last = messages[-1] if messages else None
    if last is None or last.type != "assistant" or any(
            b.get("type") == "tool_use" for b in _blocks(last.message)):
        return said, None
    return said, "".join(b.get("text", "") for b in _blocks(last.message)
                         if b.get("type") == "text")


async def run_billing_turns(task: str, workdir: Path, follow_ups: Sequence[str]) -> str:
    """Start the task, or carry on the session an earlier run left; then each follow-up
    the session does not hold yet, once, into the same session."""
    session_id = _session(workdir)
    said = 0
    if session_id is None:
        answer, session_id = await _turn(task, workdir, None)
    else:
        said, answer = where(session_id, workdir, follow_ups)
        if answer is None:  # the turn under way when the service stopped
            answer, _ = await _turn(RESUME, workdir, session_id)
    for text in follow_ups[said:]:
        answer, _ = await _turn(text, workdir, session_id)
    return answer


async def run_replays_follow_ups(task: str, workdir: Path, follow_ups: Sequence[str]) -> str:
    """The mistake: what it sent counted in this process only."""
    session_id = _session(workdir)
    if session_id is None:
        answer, session_id = await _turn(task, workdir, None)
    else:
        answer, _ = await _turn(RESUME, workdir, session_id)
    for text in follow_ups:
        answer, _ = await _turn(text, workdir, session_id)
    return answer


async def run_loses_follow_ups(task: str, workdir: Path, follow_ups: Sequence[str]) -> str:
    """The mistake: the user's next messages in memory only."""
    session_id = _session(workdir)
    if session_id is not None:
        answer, _ = await _turn(RESUME, workdir, session_id)
        return answer
    answer, session_id = await _turn(task, workdir, None)
    for text in follow_ups:
        answer, _ = await _turn(text, workdir, session_id)
    return answer


async def run_without_follow_ups(task: str, workdir: Path) -> str:
    """An agent written for one user turn: refused on a scenario with follow-ups."""
    answer, _ = await _turn(task, workdir, _session(workdir))
    return answer
