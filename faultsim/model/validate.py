"""Request validation with the Messages API's own 400 messages.

A crash that leaves an assistant `tool_use` without its `tool_result` must be refused here
exactly as production refuses it: that is how faultsim sees an orphaned call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


# Claude 4.6 and later (Opus 4.6, Sonnet 4.6, Opus 4.7, the 5 family) refuse a request
# that ends with an assistant turn: "This model does not support assistant message prefill.
# The conversation must end with a user message." Earlier models continue the prefill.
_NO_PREFILL = re.compile(r"claude-(?:opus|sonnet|haiku)-(?:4-[6-9]|[5-9])")


def supports_prefill(model: str, prefill_models: tuple[str, ...] | None = None) -> bool:
    """Whether `model` accepts a conversation ending with an assistant turn: the models
    named in `prefill_models` (by prefix) when given, else today's API behaviour."""
    if prefill_models is not None:
        return any(model.startswith(m) for m in prefill_models)
    return not _NO_PREFILL.match(model)


class InvalidRequest(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)]


def merged_turns(messages: list[dict]) -> list[dict]:
    """The conversation as the API reads it: "Consecutive `user` or `assistant` turns in
    your request will be combined into a single turn" (the SDK's own documentation of
    `messages`). Content becomes a list of blocks where two turns were combined."""
    out: list[dict] = []
    for msg in messages:
        if out and msg.get("role") == out[-1].get("role"):
            out[-1] = {**out[-1], "content": _blocks(out[-1]["content"])
                       + _blocks(msg["content"])}
        else:
            out.append(msg)
    return out


_TOOL_CHOICES = ("auto", "any", "tool", "none")


def validate_request(body: Any, *, count_tokens: bool = False) -> None:
    """Raise InvalidRequest with the API's message for the first problem found.
    `count_tokens`: the body of /v1/messages/count_tokens (no max_tokens)."""
    validated_turns(body, count_tokens=count_tokens)


def validated_turns(body: Any, *, count_tokens: bool = False) -> list[dict]:
    """`validate_request`, returning the conversation as the API reads it
    (`merged_turns`), so the fake merges it once per request."""
    return _validate(body, count_tokens, None)[0]


def _validate(body: Any, count_tokens: bool, known: "_Known | None"
              ) -> tuple[list[dict], int | None]:
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    for name in ("model", "messages") if count_tokens else ("model", "max_tokens", "messages"):
        if name not in body:
            raise InvalidRequest(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise InvalidRequest("model: Input should be a valid string")
    if not count_tokens and (not isinstance(body["max_tokens"], int)
                             or body["max_tokens"] < 1):
        raise InvalidRequest("max_tokens: Input should be greater than or equal to 1")
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICES:
            raise InvalidRequest("tool_choice: Input tag does not match any of the expected "
                                 "tags: 'auto', 'any', 'tool', 'none'")
        if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
            raise InvalidRequest("tool_choice.tool.name: Field required")
        if choice["type"] != "none" and not body.get("tools"):
            raise InvalidRequest("tool_choice may only be specified while providing tools.")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise InvalidRequest("thinking.enabled.budget_tokens: Input should be greater than "
                                 "or equal to 1024")
        if not count_tokens and body["max_tokens"] <= budget:
            raise InvalidRequest("`max_tokens` must be greater than `thinking.budget_tokens`. "
                                 "Please consult our documentation at https://docs.claude.com/"
                                 "en/docs/build-with-claude/extended-thinking#max-tokens-and-"
                                 "context-window-size")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    return _check_messages(body, messages, known)


def _check_messages(body: dict, messages: list, known: "_Known | None"
                    ) -> tuple[list[dict], int | None]:
    """The checks of `messages` (a non-empty list), in the API's order; with `known`, a
    prefix of this request equal to one that passed them (see `Validator`), so only
    what is new is looked at. Returns the merged turns and the first one using tools."""
    raw_start = len(known.raw) if known else 0
    for i in range(raw_start, len(messages)):  # each message alone: the prefix passed
        msg = messages[i]
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if not isinstance(content, (str, list)):
            raise InvalidRequest(f"messages.{i}.content: Field required")
        if isinstance(content, list) and not content:
            raise InvalidRequest(f"messages.{i}: all messages must have non-empty content")
    if messages[0]["role"] != "user":
        raise InvalidRequest('messages: first message must use the "user" role')

    # the API combines same-role turns; so does the fake. With `known`, the merged turns
    # before the last known one are those that passed, and the last may absorb new messages
    merged = merged_turns(messages)
    if known:
        start = max(0, known.merged - 2)  # a turn's check reads its neighbours
        first_use = known.first_use if known.first_use is not None and \
            known.first_use < start else None
    else:
        start, first_use = 0, None
    messages = merged
    for i in range(start, len(messages)):
        msg = messages[i]
        blocks = _blocks(msg["content"])
        if msg["role"] == "assistant":
            ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            if ids and first_use is None:
                first_use = i
            if not ids:
                continue
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered = set()
            if following is not None:
                answered = {b.get("tool_use_id") for b in _blocks(following["content"])
                            if b.get("type") == "tool_result"}
            missing = [x for x in ids if x not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{i + 1 if following is not None else i}: `tool_use` ids were "
                    f"found without `tool_result` blocks immediately after: {', '.join(missing)}. "
                    "Each `tool_use` block must have a corresponding `tool_result` block in "
                    "the next message.")
        else:
            previous = messages[i - 1] if i else None
            offered = set()
            if previous is not None:
                offered = {b.get("id") for b in _blocks(previous["content"])
                           if b.get("type") == "tool_use"}
            for k, block in enumerate(blocks):
                if block.get("type") != "tool_result":
                    continue
                if first_use is None:
                    first_use = i
                if block.get("tool_use_id") not in offered:
                    raise InvalidRequest(
                        f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous "
                        "message.")
    if first_use is not None and not body.get("tools"):
        raise InvalidRequest("Requests which include `tool_use` or `tool_result` blocks "
                             "must define tools.")
    _check_thinking(body, messages, start)
    return messages, first_use


@dataclass(frozen=True)
class _Known:
    """A request's messages that passed every check: the `raw` messages as parsed, which
    merge into `merged` turns, the first of which to use tools is `first_use`."""

    raw: list
    merged: int
    first_use: int | None


class Validator:
    """`validated_turns` for one run's requests, checking only what is new since the run's
    last valid request: a conversation grows by a turn or two per request, and checking
    the whole of it every time made the fake's work per request O(history).

    Sound because every check on the messages is local: a message alone (role, content),
    a merged turn with its neighbours (tool_use ids answered in the next turn, tool_result
    ids offered by the previous one, thinking signatures), the whole conversation only
    through "does any turn use tools" (kept as `first_use`) and the last two turns (checked
    anew every time). So when this request's first messages equal those of a request that
    passed, those messages, and the merged turns before the last known two, pass again,
    and the first error, if any, lies in what is rechecked: its message is the full
    check's, formatted from this request's own objects. Equal, not byte-identical: the
    parsed JSON is compared (in C, a fraction of the checks' cost), and equality can only
    confuse 1, 1.0 and true; no check on messages tells those apart (types are tested only
    for dict, list and str, which equal nothing of another type; ids are compared by
    equality; a thinking text or redacted data that passed was a str, so an equal one is
    the same str). The body's own fields are checked in full every time (they are small).
    Anything else (a shorter, edited or reordered history) is checked in full."""

    def __init__(self) -> None:
        self._known: _Known | None = None

    def turns(self, body: Any, *, count_tokens: bool = False) -> list[dict]:
        known = self._known
        if known is None or not isinstance(body, dict) or \
                not isinstance(body.get("messages"), list) or \
                len(body["messages"]) < len(known.raw) or \
                body["messages"][:len(known.raw)] != known.raw:
            known = None
        messages, first_use = _validate(body, count_tokens, known)
        self._known = _Known(body["messages"], len(messages), first_use)
        return messages


def _check_thinking(body: dict, messages: list[dict], start: int = 0) -> None:
    """Extended thinking's round trip, as the API enforces it: every thinking block comes
    back with the signature it was sent with (an edited or forged one is refused), and
    while thinking is enabled, the assistant turn whose tool calls the conversation is
    answering must still start with its thinking. A resumed agent that dropped or edited
    those blocks is refused in production: the session is dead."""
    from .script import redacted_data_valid, sign_thinking

    for i in range(start, len(messages)):  # the turns before `start` passed (Validator)
        msg = messages[i]
        if msg["role"] != "assistant":
            continue
        for k, block in enumerate(_blocks(msg["content"])):
            if block.get("type") == "thinking" and \
                    block.get("signature") != sign_thinking(block.get("thinking", "")):
                raise InvalidRequest(f"messages.{i}.content.{k}: Invalid `signature` in "
                                     "`thinking` block")
            if block.get("type") == "redacted_thinking" and \
                    not redacted_data_valid(block.get("data")):
                raise InvalidRequest(f"messages.{i}.content.{k}: Invalid `data` in "
                                     "`redacted_thinking` block")
    if (body.get("thinking") or {}).get("type") != "enabled":
        return
    # the last assistant turn, when the conversation ends with its tool results
    if len(messages) >= 2 and messages[-1]["role"] == "user" and \
            messages[-2]["role"] == "assistant":
        blocks = _blocks(messages[-2]["content"])
        if any(b.get("type") == "tool_use" for b in blocks) and \
                blocks[0].get("type") not in ("thinking", "redacted_thinking"):
            raise InvalidRequest(
                f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
                f"`redacted_thinking`, but found `{blocks[0].get('type')}`. When `thinking` is "
                "enabled, a final `assistant` message must start with a thinking block "
                "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
                "recommend you include thinking blocks from previous turns. To avoid this "
                "requirement, disable `thinking`. Please consult our documentation at "
                "https://docs.claude.com/en/docs/build-with-claude/extended-thinking")
