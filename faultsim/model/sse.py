"""The Messages API's server-sent events for one answer, as production sends them.

    message_start → ping → (content_block_start → content_block_delta… → content_block_stop)…
      → message_delta (stop_reason, output usage) → message_stop

Text arrives as `text_delta`s, tool input as `input_json_delta`s of its JSON (an empty one
first, as the API sends), thinking as `thinking_delta`s then one `signature_delta`. Chunks
are cut deterministically, so the same answer always streams the same bytes.

Each event is yielded with where it stands (`Step`), so the fake can make the gaps between
them kill points and cut the stream where a fault says.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

CHUNK = 24  # characters per delta: several deltas for any non-trivial text or input


@dataclass(frozen=True)
class Step:
    """One event of the stream and where it stands: `where` names the gap after it
    ("message_start", "block 1 tool_use stop", "block 1 tool_use input 2/5", …)."""

    event: str
    data: dict
    where: str
    delta: int = 0  # a delta's position in its block (1-based), and how many the block has
    deltas: int = 0

    def encode(self) -> bytes:
        return f"event: {self.event}\ndata: {json.dumps(self.data)}\n\n".encode()


def _chunks(text: str) -> list[str]:
    return [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]


def events(message: dict[str, Any]) -> Iterator[Step]:
    """The stream of `message` (a complete non-streaming answer body)."""
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    yield Step("message_start", {"type": "message_start", "message": start}, "message_start")
    yield Step("ping", {"type": "ping"}, "ping")
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        label = f"block {i + 1} {kind}"
        if kind == "text":
            opened, deltas = {"type": "text", "text": ""}, [
                {"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        elif kind == "tool_use":
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(json.dumps(block["input"]))]
        elif kind == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": c}
                      for c in _chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:  # redacted_thinking and other whole blocks arrive in their start event
            opened, deltas = block, []
        yield Step("content_block_start", {"type": "content_block_start", "index": i,
                                           "content_block": opened}, f"{label} start")
        for n, delta in enumerate(deltas, start=1):
            yield Step("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": delta},
                       f"{label} delta {n}/{len(deltas)}", n, len(deltas))
        yield Step("content_block_stop", {"type": "content_block_stop", "index": i},
                   f"{label} stop")
    yield Step("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": message["stop_reason"],
                                           "stop_sequence": message.get("stop_sequence")},
                                 "usage": {"output_tokens": usage["output_tokens"]}},
               "message_delta")
    yield Step("message_stop", {"type": "message_stop"}, "message_stop")
