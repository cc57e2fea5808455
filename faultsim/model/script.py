"""What the fake Claude says: a script of turns, addressed by position in the conversation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# stream_cut: the connection drops mid-answer (a streaming client sees a read error after
# the 200; a non-streaming one a failed read, which the SDK retries)
FAULT_KINDS = ("429", "529", "500", "timeout", "stream_cut", "max_tokens", "pause_turn",
               "refusal")
# answers that stop early, with the stop_reason of that name: `max_tokens` cuts the turn
# (its first tool call arrives with its input truncated), `pause_turn` sends only the
# turn's text (the client sends it back to continue), `refusal` ends the turn there
STOP_FAULTS = ("max_tokens", "pause_turn", "refusal")


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict


@dataclass(frozen=True)
class Turn:
    """One model response: some tool calls (several = parallel tool use), or a final answer."""

    tool_calls: tuple[ToolCall, ...] = ()
    text: str = ""
    final: str | None = None
    thinking: str | None = None  # sent first, signed, when the request enables thinking
    #                              (a default text when the scenario gives none)
    redacted_thinking: str | None = None  # sent as an opaque redacted_thinking block

    def __post_init__(self) -> None:
        if (self.final is None) == (not self.tool_calls):
            raise ValueError("a turn has either tool calls or a final answer, not both or neither")

    @property
    def is_final(self) -> bool:
        return self.final is not None


@dataclass(frozen=True)
class ApiFault:
    """Fail the first `times` requests at script position `at` with an API fault."""

    at: int
    kind: str
    times: int = 1

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown API fault {self.kind!r}; expected one of {FAULT_KINDS}")


@dataclass(frozen=True)
class Script:
    """The conversation for one task. `tag` keeps tool-use ids of different tasks apart."""

    task: str
    turns: tuple[Turn, ...]
    tag: str = "s"
    faults: tuple[ApiFault, ...] = field(default=())

    def fault_at(self, position: int) -> ApiFault | None:
        return next((f for f in self.faults if f.at == position), None)

    @property
    def tool_turns(self) -> int:
        return sum(1 for t in self.turns if not t.is_final)


def tool_use_id(tag: str, position: int, index: int, repeat: int) -> str:
    """Readable and stable; a re-asked turn gets fresh ids, as the real API would give."""
    base = f"toolu_{tag}_{position + 1:02d}_{index + 1}"
    return base if repeat == 0 else f"{base}_r{repeat + 1}"


DEFAULT_THINKING = "Deciding the next step."  # for turns the scenario gives no thinking


def sign_thinking(thinking: str) -> str:
    """The fake's signature of a thinking block: any edit to the text breaks it, as an edit
    breaks the API's (which is opaque and checked server-side)."""
    import hashlib

    return "fs1" + hashlib.blake2b(b"faultsim-thinking\0" + thinking.encode(),
                                   digest_size=24).hexdigest()


def redacted_data(text: str) -> str:
    """A redacted thinking block's opaque data: encrypted in the API, here the text's
    signature, so an edited or made-up block is refused as the API refuses it."""
    import base64

    body = base64.urlsafe_b64encode(text.encode()).decode()
    return f"fsr1.{body}.{sign_thinking('redacted' + chr(0) + text)[3:]}"


def redacted_data_valid(data: object) -> bool:
    import base64

    try:
        tag, body, _ = str(data).split(".")
        return tag == "fsr1" and data == redacted_data(base64.urlsafe_b64decode(body).decode())
    except ValueError:
        return False


def turn_content(script: Script, position: int, repeat: int, *,
                 thinking: bool = False) -> list[dict[str, Any]]:
    turn = script.turns[position]
    blocks: list[dict[str, Any]] = []
    if thinking:  # with thinking enabled the API starts every answer with its thinking
        text = turn.thinking or DEFAULT_THINKING
        blocks.append({"type": "thinking", "thinking": text, "signature": sign_thinking(text)})
    if thinking and turn.redacted_thinking:
        blocks.append({"type": "redacted_thinking",
                       "data": redacted_data(turn.redacted_thinking)})
    if turn.is_final:
        return blocks + [{"type": "text", "text": turn.final}]
    blocks += [{"type": "text", "text": turn.text}] if turn.text else []
    blocks += [{"type": "tool_use", "id": tool_use_id(script.tag, position, i, repeat),
                "name": call.name, "input": call.input}
               for i, call in enumerate(turn.tool_calls)]
    return blocks


def stopped_content(content: list[dict[str, Any]], stop: str) -> list[dict[str, Any]]:
    """What an answer that stopped early (`STOP_FAULTS`) carries of the full turn."""
    think = [b for b in content if b["type"] in ("thinking", "redacted_thinking")]
    text = [b for b in content if b["type"] == "text"]
    calls = [b for b in content if b["type"] == "tool_use"]
    if stop == "max_tokens":
        if calls:  # the first call, its input cut off before any key was complete
            return think + text + [{**calls[0], "input": {}}]
        return think + [{"type": "text", "text": t["text"][:max(1, len(t["text"]) // 2)]}
                        for t in text]
    if stop == "pause_turn":
        return think + (text or [{"type": "text", "text": "Working on it."}])
    return think + text  # refusal: whatever came before it
