"""The fake's incremental validator (validate.Validator) against the full check: on every
request of generated conversations, valid and not, the same verdict and the same message."""
from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from faultsim.model.script import redacted_data, sign_thinking
from faultsim.model.validate import InvalidRequest, Validator, validated_turns

# 1, 1.0 and true are equal in Python, not in JSON: the prefix is compared by equality
IDS = ("toolu_1", "toolu_2", "toolu_3", 1, 1.0, True)


def _block(draw) -> dict:
    kind = draw(st.sampled_from(["text", "tool_use", "tool_result", "thinking",
                                 "bad_thinking", "redacted", "junk"]))
    if kind == "text":
        return {"type": "text", "text": draw(st.sampled_from(["a", "b"]))}
    if kind == "tool_use":
        return {"type": "tool_use", "id": draw(st.sampled_from(IDS)), "name": "t", "input": {}}
    if kind == "tool_result":
        return {"type": "tool_result", "tool_use_id": draw(st.sampled_from(IDS)),
                "content": "ok"}
    if kind == "thinking":
        return {"type": "thinking", "thinking": "x", "signature": sign_thinking("x")}
    if kind == "bad_thinking":
        return {"type": "thinking", "thinking": "x", "signature": "forged"}
    if kind == "redacted":
        return {"type": "redacted_thinking", "data": redacted_data("r")}
    return draw(st.sampled_from([{"type": "text", "text": 1}, {"type": "text", "text": True}]))


@st.composite
def _message(draw):
    shape = draw(st.integers(0, 19))
    if shape == 0:  # malformed messages, each its own error
        return draw(st.sampled_from([{"role": "system", "content": "x"}, {"role": "user"},
                                     {"role": "assistant", "content": []}, "text"]))
    role = draw(st.sampled_from(["user", "assistant"]))
    if shape == 1:
        return {"role": role, "content": "plain"}
    return {"role": role, "content": [_block(draw) for _ in range(draw(st.integers(1, 3)))]}


@st.composite
def _requests(draw):
    """A run's requests: a conversation that mostly grows, sometimes is cut back or edited
    (a resumed run), with the body's own fields changing now and then."""
    messages: list = [{"role": "user", "content": "task"}]
    out = []
    for _ in range(draw(st.integers(1, 8))):
        action = draw(st.sampled_from(["grow", "grow", "grow", "cut", "edit", "retype", "same"]))
        if action == "grow":
            messages = messages + [draw(_message()) for _ in range(draw(st.integers(1, 2)))]
        elif action == "cut" and len(messages) > 1:
            messages = messages[:draw(st.integers(1, len(messages) - 1))]
        elif action == "retype":  # the same history, its ids now of an equal other type
            messages = json.loads(json.dumps(messages).replace('"toolu_1"', "1")
                                  .replace(": 1,", ": true,").replace(": 1}", ": true}"))
        elif action == "edit":
            i = draw(st.integers(0, len(messages) - 1))
            messages = messages[:i] + [draw(_message())] + messages[i + 1:]
        body = {"model": "claude-sonnet-4-5", "max_tokens": 2048, "messages": messages}
        if draw(st.booleans()) or draw(st.booleans()):
            body["tools"] = [{"name": "t", "input_schema": {"type": "object"}}]
        if draw(st.integers(0, 4)) == 0:
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        # through JSON, as the fake gets it: no object shared between requests
        out.append(json.loads(json.dumps(body)))
    return out


def _verdict(check, body):
    try:
        return ("ok", json.dumps(check(body)))
    except InvalidRequest as exc:
        return ("invalid", exc.message)
    except Exception as exc:  # a non-str id breaks the full check too: the same way
        return (type(exc).__name__, str(exc))


@settings(max_examples=300, deadline=None)
@given(_requests())
def test_incremental_validation_agrees_with_the_full_check(requests):
    validator = Validator()
    for body in requests:
        assert _verdict(validator.turns, body) == _verdict(validated_turns, body)


def test_a_growing_conversation_is_checked_incrementally():
    """The shortcut is taken (the prefix is not looked at again), and an error in the new
    part still has the full check's message."""
    validator = Validator()
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    messages = [{"role": "user", "content": "task"}]
    for i in range(5):
        messages += [{"role": "assistant", "content": [
                         {"type": "tool_use", "id": f"toolu_{i}", "name": "t", "input": {}}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok"}]}]
        validator.turns({"model": "m", "max_tokens": 5, "tools": tools, "messages": messages})
    assert validator._known.raw == messages
    bad = messages + [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_x", "name": "t", "input": {}}]}]
    body = {"model": "m", "max_tokens": 5, "tools": tools, "messages": bad}
    assert _verdict(validator.turns, body) == _verdict(validated_turns, body)
    assert _verdict(validator.turns, body)[0] == "invalid"
    # the prefix's tool use still counts when the new turns use none: refused without tools
    messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"},
                 {"role": "assistant", "content": "c"}]
    validator.turns({"model": "m", "max_tokens": 5, "tools": tools, "messages": messages})
    body = {"model": "m", "max_tokens": 5, "messages": messages + [
        {"role": "user", "content": "d"}]}
    assert _verdict(validator.turns, body) == ("invalid", "Requests which include `tool_use` "
                                               "or `tool_result` blocks must define tools.")
