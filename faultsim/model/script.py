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

# What the model does when a result of a turn's calls comes back as an error (`is_error`,
# or a text saying the call was interrupted: the synthetic result a framework writes for a
# call a crash cut short): `retry` calls it again (at most ERROR_RETRIES times per call,
# then the script goes on), `continue` reads the error and goes on with the script,
# `give_up` ends the conversation with the turn's `on_error_final` text. Unset: a real
# model re-runs an interrupted call (nothing in "Tool was interrupted." says the work was
# done) and goes on after any other error (it does not re-send an input it was told is
# wrong), which is how the fake behaves then.
ON_ERROR = ("retry", "continue", "give_up")
ERROR_RETRIES = 2
INTERRUPTED = "interrupted"  # in a short result text (case aside): the call was cut short


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
    # a final turn that is not the last: what the user says next (a follow-up request, a
    # person's answer or approval), which opens the next turn of the script
    follow_up: str | None = None
    on_error: str | None = None  # ON_ERROR, for this turn's calls (None: see ON_ERROR)
    on_error_final: str | None = None  # give_up: the model's last answer

    def __post_init__(self) -> None:
        if (self.final is None) == (not self.tool_calls):
            raise ValueError("a turn has either tool calls or a final answer, not both or neither")
        if self.follow_up is not None and self.final is None:
            raise ValueError("only a final turn has a follow-up")
        if self.on_error is not None and self.on_error not in ON_ERROR:
            raise ValueError(f"unknown on_error {self.on_error!r}; expected one of {ON_ERROR}")
        if (self.on_error == "give_up") != (self.on_error_final is not None):
            raise ValueError("on_error = 'give_up' goes with on_error_final, and only it")

    def reaction(self, interrupted: bool) -> str:
        """What the model does after an error result of one of this turn's calls."""
        if self.on_error is not None:
            return self.on_error
        return "retry" if interrupted else "continue"

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

    @property
    def follow_ups(self) -> tuple[str, ...]:
        """What the user says after each final answer but the last, in order."""
        return tuple(t.follow_up for t in self.turns if t.follow_up is not None)


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


def interrupted_text(text: str) -> bool:
    """A tool result that says its call was cut short ("Tool was interrupted.")."""
    return len(text) <= 200 and INTERRUPTED in text.lower()


def turn_content(script: Script, position: int, repeat: int, *,
                 thinking: bool = False, only: tuple[int, ...] | None = None,
                 final: str | None = None) -> list[dict[str, Any]]:
    """The blocks of a scripted turn; `only`: just these of its calls, without its text
    (a retry after an error); `final`: this text instead of the turn (a give-up)."""
    turn = script.turns[position]
    if final is not None:
        turn = Turn(final=final, thinking=turn.thinking)
    blocks: list[dict[str, Any]] = []
    if thinking:  # with thinking enabled the API starts every answer with its thinking
        text = turn.thinking or DEFAULT_THINKING
        blocks.append({"type": "thinking", "thinking": text, "signature": sign_thinking(text)})
    if thinking and turn.redacted_thinking:
        blocks.append({"type": "redacted_thinking",
                       "data": redacted_data(turn.redacted_thinking)})
    if turn.is_final:
        return blocks + [{"type": "text", "text": turn.final}]
    blocks += [{"type": "text", "text": turn.text}] if turn.text and only is None else []
    blocks += [{"type": "tool_use", "id": tool_use_id(script.tag, position, i, repeat),
                "name": call.name, "input": call.input}
               for i, call in enumerate(turn.tool_calls) if only is None or i in only]
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
