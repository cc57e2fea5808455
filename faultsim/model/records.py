"""What the fake logs of each request (`RequestRecord`) and how a conversation is shown in
a counterexample (`abridge`, `text_of`).

Part of the fake Claude (layer 2): imports only the standard library."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """One request as the fake saw it; the oracle reads these later."""

    index: int
    incarnation: int
    script: str | None  # the script's tag, None when no script matched
    position: int | None  # how many tool-result turns the request carried
    repeat: int  # how many times this position had been answered before
    status: int
    error: str | None  # error type for non-200 answers
    message: str | None  # error message for non-200 answers
    input_tokens: int = 0
    output_tokens: int = 0
    tool_use_ids: tuple[str, ...] = ()
    stop_reason: str | None = None
    stream: bool = False  # answered as server-sent events
    # the conversation it sent, abridged (`abridge`): what a counterexample shows of a
    # resumed run's first request, beside the clean run's at that turn
    sent: tuple[str, ...] = field(default=(), compare=False)
    # "retry" / "give_up": the model's reaction to a tool's error result (`on_error`), a
    # new turn of its own rather than a scripted turn answered (again)
    reaction: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


ABRIDGE_KEEP = 4  # messages kept from the end of a conversation (and its first)
ABRIDGE_TEXT = 48  # characters of a text block shown


def _block(block: Any) -> str:
    if isinstance(block, str):
        block = {"type": "text", "text": block}
    if not isinstance(block, dict):
        return type(block).__name__
    kind = block.get("type", "?")
    if kind == "text":
        text = str(block.get("text", ""))
        return "text " + repr(text[:ABRIDGE_TEXT] + ("..." if len(text) > ABRIDGE_TEXT else ""))
    if kind == "tool_use":
        return f"tool_use {block.get('name')}"
    if kind == "tool_result":
        inner = block.get("content")
        text = text_of(inner) if isinstance(inner, (str, list)) else ""
        return ("tool_result" + (" (error)" if block.get("is_error") else "") +
                (f" {text[:ABRIDGE_TEXT]!r}" if text else ""))
    return str(kind)


def abridge(messages: list[dict]) -> tuple[str, ...]:
    """A conversation as a counterexample shows it: a line per message (its role and each
    content block's type, text cut short), the first message and the last few only, so
    that recording it costs the same for the 200th request as for the first."""
    def line(m: dict) -> str:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [content]
        return f"{m.get('role')}: " + ", ".join(_block(b) for b in blocks)

    if len(messages) <= ABRIDGE_KEEP + 1:
        return tuple(line(m) for m in messages)
    left = len(messages) - 1 - ABRIDGE_KEEP
    return (line(messages[0]), f"... {left} message{'s' if left != 1 else ''} ...",
            *(line(m) for m in messages[-ABRIDGE_KEEP:]))


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict)
                   and b.get("type") == "text")
