"""Fidelity: the fake's answers and the requests it accepts, checked against the SDK's own
types, so drift with a new SDK release shows as a failing test, not a false verdict.

- every body and server-sent event the fake sends validates as the SDK's `Message` /
  `RawMessageStreamEvent`, and uses no field the SDK does not know;
- requests the SDK's `MessageCreateParams` allow, in shapes agents use (system blocks,
  content blocks, tool_choice variants, metadata, stop sequences, thinking, cache control),
  are answered, not refused: the fake is no stricter than the API.
"""
from __future__ import annotations

import json

import anthropic
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent, Usage
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from faultsim.model import FakeClaude, Script, ToolCall, Turn
from faultsim.model import sse

TASK = "Check the order."
MODEL = "claude-sonnet-5-5"
TOOLS = [{"name": "lookup", "description": "Look an order up.",
          "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}]


def fake():
    return FakeClaude(Script(task=TASK, turns=(
        Turn(text="Looking.", thinking="Look it up first.",
             tool_calls=(ToolCall("lookup", {"id": "O-1"}),)),
        Turn(final="It shipped."))))


def raw(fake_claude, body):
    import httpx2

    response = fake_claude.handle(httpx2.Request("POST", "https://api.anthropic.com/v1/messages",
                                                 json=body))
    response.read()
    return response


def known_fields(model_cls, data: dict, where: str):
    unknown = set(data) - set(model_cls.model_fields)
    assert not unknown, f"{where}: fields the SDK's {model_cls.__name__} does not know: {unknown}"


@pytest.mark.parametrize("thinking", [False, True])
def test_answers_validate_as_the_sdks_message(thinking):
    body = {"model": MODEL, "max_tokens": 2048, "tools": TOOLS,
            "messages": [{"role": "user", "content": TASK}]}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    data = raw(fake(), body).json()
    message = Message.model_validate(data)
    known_fields(Message, data, "message")
    known_fields(Usage, data["usage"], "usage")
    for block, parsed in zip(data["content"], message.content):
        known_fields(type(parsed), block, f"{block['type']} block")
    assert [b.type for b in message.content] == (["thinking"] if thinking else []) + \
        ["text", "tool_use"]


def test_every_stream_event_validates_as_the_sdks_event():
    body = {"model": MODEL, "max_tokens": 2048, "tools": TOOLS, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": TASK}]}
    text = raw(fake(), body).text
    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert len(events) > 8
    for data in events:
        if data["type"] == "ping":  # the SDK skips pings; they have no model
            continue
        event = adapter.validate_python(data)
        known_fields(type(event), data, data["type"])


ACCEPTED = [
    {"system": "You check orders."},
    {"system": [{"type": "text", "text": "You check orders.",
                 "cache_control": {"type": "ephemeral"}}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": TASK}]}]},
    {"messages": [{"role": "user", "content": TASK}, {"role": "user", "content": "Quickly."}]},
    {"tool_choice": {"type": "auto"}},
    {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
    {"tool_choice": {"type": "tool", "name": "lookup"}},
    {"metadata": {"user_id": "u-1"}},
    {"stop_sequences": ["\n\nHuman:"]},
    {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 4096},
    {"thinking": {"type": "disabled"}},
    {"tools": TOOLS + [{"name": "other", "input_schema": {"type": "object"},
                        "cache_control": {"type": "ephemeral"}}]},
]


@pytest.mark.parametrize("extra", ACCEPTED, ids=[",".join(e) for e in ACCEPTED])
def test_requests_the_sdk_types_allow_are_answered(extra):
    body = {"model": MODEL, "max_tokens": 2048, "tools": TOOLS,
            "messages": [{"role": "user", "content": TASK}], **extra}
    pydantic.TypeAdapter(MessageCreateParamsNonStreaming).validate_python(body)
    client = fake().client(max_retries=0)
    try:
        reply = client.messages.create(**body)
    except anthropic.BadRequestError as exc:  # pragma: no cover - the failure we look for
        pytest.fail(f"the fake refused a request the API accepts: {exc.body}")
    assert reply.content


def test_the_sse_module_covers_every_block_kind_the_fake_sends():
    kinds = {b["type"] for turn in (0, 1) for b in
             raw(fake(), {"model": MODEL, "max_tokens": 2048, "tools": TOOLS,
                          "thinking": {"type": "enabled", "budget_tokens": 1024},
                          "messages": [{"role": "user", "content": TASK}]}).json()["content"]}
    message = {"id": "m", "type": "message", "role": "assistant", "model": MODEL,
               "content": [{"type": k, **({"text": "x"} if k == "text" else
                                          {"thinking": "x", "signature": "s"} if k == "thinking"
                                          else {"id": "t", "name": "n", "input": {}})}
                           for k in sorted(kinds)],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 1, "output_tokens": 1}}
    started = [s.data["content_block"]["type"] for s in sse.events(message)
               if s.event == "content_block_start"]
    assert sorted(started) == sorted(kinds)
