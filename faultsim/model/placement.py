"""Turn addressing: which scripted turn answers a conversation (`place`), found by the
scripted calls it carries results for, and which calls of a turn came back an error
(`errored_calls`, for the model's reactions).

Part of the fake Claude (layer 2): may import `records` and `script`."""
from __future__ import annotations

from .records import text_of
from .script import Script, interrupted_text


def place(script: Script, messages: list[dict]) -> int:
    """Which scripted turn answers this conversation (0-based): the one after the last
    scripted turn whose every tool call has its result here. A call is found by its
    tool-use id (any repeat of the turn) or, for an id the fake did not give, by name and
    input. So a history rebuilt, merged, summarised or compacted is served the turn it is
    really at, whatever its shape. With no tool result at all: turn 1. Tool results that
    answer no call of the script cannot be placed (`Unplaceable`), rather than be served a
    turn by guesswork."""
    results: set = set()
    uses: list[dict] = []
    for m in messages:
        for b in (m.get("content") if isinstance(m.get("content"), list) else ()):
            if not isinstance(b, dict):
                continue
            if m.get("role") == "user" and b.get("type") == "tool_result":
                results.add(b.get("tool_use_id"))
            elif m.get("role") == "assistant" and b.get("type") == "tool_use":
                uses.append(b)
    opened = _followed_up(script, messages)
    if not results:
        return opened
    answered: set[tuple[int, int]] = set()
    foreign = []
    for rid in results:
        slot = _our_call(str(rid), script.tag)
        if slot is not None:
            answered.add(slot)
        else:
            foreign.append(rid)
    for block in uses:  # ids the agent or its framework made up: match name and input
        if block.get("id") not in foreign:
            continue
        for pos, turn in enumerate(script.turns):
            hit = next((i for i, c in enumerate(turn.tool_calls) if (pos, i) not in answered
                        and c.name == block.get("name") and c.input == block.get("input")),
                       None)
            if hit is not None:
                answered.add((pos, hit))
                break
    if not answered:
        raise Unplaceable(
            f"the request carries {len(results)} tool result(s), but none answers a call of "
            f"script {script.tag!r} (by tool-use id toolu_{script.tag}_NN_N, or by the name "
            f"and input of a scripted call): faultsim cannot tell which turn it is at")
    done = [pos for pos, turn in enumerate(script.turns) if turn.tool_calls
            and all((pos, i) in answered for i in range(len(turn.tool_calls)))]
    return max(max(done) + 1 if done else 0, opened)


def _followed_up(script: Script, messages: list[dict]) -> int:
    """The turn after the last final answer whose scripted follow-up a later user message
    carries (0: none): a follow-up opens the next part of the conversation."""
    said = [text_of(m.get("content") or "") for m in messages[1:] if m.get("role") == "user"]
    opened = [pos + 1 for pos, turn in enumerate(script.turns) if turn.follow_up is not None
              and any(turn.follow_up in text for text in said)]
    return max(opened, default=0)


def errored_calls(script: Script, messages: list[dict], position: int
                  ) -> tuple[tuple[int, ...], int, bool]:
    """The calls of turn `position` whose result in the last user message is an error:
    (their indices, the most error results any of them has in the whole conversation,
    whether one of the last results says it was interrupted). Calls are found as `place`
    finds them: the fake's own tool-use id, else the name and input of the scripted call."""
    turn = script.turns[position]
    slot_of: dict[str, int] = {}
    for m in messages:
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if not isinstance(b, dict) or b.get("type") != "tool_use":
                continue
            ours = _our_call(str(b.get("id")), script.tag)
            if ours is not None:
                if ours[0] == position:
                    slot_of[str(b.get("id"))] = ours[1]
                continue
            hit = next((i for i, c in enumerate(turn.tool_calls)
                        if c.name == b.get("name") and c.input == b.get("input")), None)
            if hit is not None:
                slot_of[str(b.get("id"))] = hit
    errors: dict[int, int] = {}
    last: set[int] = set()
    interrupted = False
    for k, m in enumerate(messages):
        if m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if not isinstance(b, dict) or b.get("type") != "tool_result":
                continue
            call = slot_of.get(str(b.get("tool_use_id")))
            inner = b.get("content")
            text = text_of(inner) if isinstance(inner, (str, list)) else ""
            cut = interrupted_text(text)
            if call is None or not (b.get("is_error") or cut):
                continue
            errors[call] = errors.get(call, 0) + 1
            if k == len(messages) - 1:
                last.add(call)
                interrupted = interrupted or cut
    return tuple(sorted(last)), max((errors[c] for c in last), default=0), interrupted


def _our_call(rid: str, tag: str) -> tuple[int, int] | None:
    """(turn, call) of a tool-use id this fake gave (`toolu_TAG_NN_I[_rK]`), else None.
    String operations, not a regex: a forked crash run would compile it anew each time."""
    prefix = f"toolu_{tag}_"
    if not rid.startswith(prefix):
        return None
    parts = rid[len(prefix):].split("_")
    if len(parts) not in (2, 3) or not (parts[0].isdigit() and parts[1].isdigit()) or \
            len(parts) == 3 and not (parts[2][:1] == "r" and parts[2][1:].isdigit()):
        return None
    return int(parts[0]) - 1, int(parts[1]) - 1


class Unplaceable(Exception):
    """A conversation that answers no call of its script: no turn can be chosen for it."""
