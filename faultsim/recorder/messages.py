"""An Anthropic `messages` list as a scenario: the task (the first user message's text),
one turn per assistant answer (its text, thinking and tool calls), the final answer (the
last assistant answer, which calls no tool).

Tool-use ids are not written: the fake Claude gives its own (`toolu_s_01_1`) and places a
conversation by which of its calls are answered, so the ids a real model gave matter only
here, to check that every call was answered. Results are not written either: they come
from the agent's tools, under faultsim from the scenario's services.

Every mistake is one `MessagesError` naming the file and the place: `messages[3].content[1]
.input: expected ...`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..scenario import SECTIONS

# blocks an answer may carry that a scenario turn can say; a redacted_thinking block is
# opaque (encrypted): its text is unknown, so it is left out and the fake makes its own
ANSWER_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")


class MessagesError(UsageError, ValueError):
    """A messages file that cannot be a scenario: `str()` is one line, file and place."""

    def __init__(self, path: str, where: str, message: str) -> None:
        self.path, self.where, self.detail = path, where, message
        super().__init__(f"{path}: {where}: {message}")


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_messages(path: str | Path) -> tuple[list, dict]:
    """The messages list of a JSON file (a bare list, or an object with `messages`), and
    the rest of that object (a request body's `model`, say)."""
    name = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MessagesError(name, "(file)", "no such file") from None
    except UnicodeDecodeError as exc:
        raise MessagesError(name, "(file)", f"expected UTF-8 text, got {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise MessagesError(name, f"(syntax) line {exc.lineno}",
                            f"expected JSON, got {exc.msg}") from None
    if isinstance(data, list):
        return data, {}
    if isinstance(data, dict):
        if "messages" not in data:
            raise MessagesError(name, "messages", "expected a list of messages (missing; "
                                "the file is an object without a 'messages' key)")
        rest = {k: v for k, v in data.items() if k != "messages"}
        return data["messages"], rest
    raise MessagesError(name, "(top level)", "expected a list of messages or an object "
                        f"with 'messages', got {_show(data)}")


def scenario_from_messages(messages: Any, path: str = "<messages>", *,
                           services: dict[str, dict] | None = None,
                           model: str | None = None) -> dict:
    """A scenario document (as `tomllib` would give it) from a messages list."""
    if not isinstance(messages, list) or not messages:
        raise MessagesError(path, "messages", "expected a non-empty list of messages, got "
                            + _show(messages))
    groups = _grouped(messages, path)
    first_at, first = groups[0]
    if first["role"] != "user":
        raise MessagesError(path, f"messages[{first_at[0]}].role", "expected 'user' (the "
                            "conversation starts with the task), got 'assistant'")
    task = _task(messages[0], path)
    turns: list[dict] = []
    n = 1
    while n < len(groups):
        at, group = groups[n]
        if group["role"] != "assistant":  # two user groups cannot follow each other
            raise MessagesError(path, f"messages[{at[0]}]", "expected an assistant answer")
        turn, ids = answer_turn(group["blocks"], path, f"messages[{at[0]}]")
        if "final" in turn:
            if n != len(groups) - 1:
                later = groups[n + 1][0][0]
                raise MessagesError(path, f"messages[{later}]", "expected the end of the "
                                    f"conversation: messages[{at[0]}] is an answer without "
                                    "tool calls (the final answer; a scenario has one task "
                                    "and one final answer)")
            turns.append(turn)
            break
        if n + 1 >= len(groups):
            raise MessagesError(path, f"messages[{at[-1]}]", "expected a final answer (an "
                                "assistant message without tool calls) at the end, got "
                                "tool calls nobody answered")
        _answered(ids, groups[n + 1], path)
        turns.append(turn)
        n += 2
    else:
        last = groups[-1][0][-1]
        raise MessagesError(path, f"messages[{last}]", "expected a final answer (an "
                            "assistant message without tool calls) at the end, got a "
                            f"{groups[-1][1]['role']} message")
    doc: dict[str, Any] = {"task": task, "expected_final_answer": turns[-1]["final"]}
    if model and model != SECTIONS["scenario"]["model"].default:
        doc["model"] = model
    if services:
        doc["services"] = services
    doc["turns"] = turns
    return doc


def _grouped(messages: list, path: str) -> list[tuple[list[int], dict]]:
    """Consecutive messages of one role as one, as the API combines them; each with the
    indexes it came from and its blocks as (index, block index, block)."""
    groups: list[tuple[list[int], dict]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise MessagesError(path, where, "expected an object {role, content}, got "
                                + _show(m))
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise MessagesError(path, where + ".role", "expected 'user' or 'assistant', got "
                                + ("nothing" if role is None else _show(role)))
        content = m.get("content")
        if isinstance(content, str):
            blocks = [(where, {"type": "text", "text": content})]
        elif isinstance(content, list):
            blocks = []
            for k, b in enumerate(content):
                if not isinstance(b, dict) or not isinstance(b.get("type"), str):
                    raise MessagesError(path, f"{where}.content[{k}]", "expected a content "
                                        "block {type, ...}, got " + _show(b))
                blocks.append((f"{where}.content[{k}]", b))
        else:
            raise MessagesError(path, where + ".content", "expected a string or a list of "
                                "content blocks, got " + ("nothing" if content is None
                                                          else _show(content)))
        if groups and groups[-1][1]["role"] == role:
            groups[-1][0].append(i)
            groups[-1][1]["blocks"] += blocks
        else:
            groups.append(([i], {"role": role, "blocks": blocks}))
    return groups


def _task(first: dict, path: str) -> str:
    """The first message's text, as the fake Claude reads it to choose a script."""
    content = first["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for k, b in enumerate(blocks):
        if b["type"] == "tool_result":
            raise MessagesError(path, f"messages[0].content[{k}]", "expected the task, got a "
                                "tool_result in the first message")
    text = "".join(b.get("text", "") for b in blocks if b["type"] == "text"
                   and isinstance(b.get("text"), str))
    if not text.strip():
        raise MessagesError(path, "messages[0].content", "expected the task in words (text), "
                            "got no text")
    return text


def answer_turn(blocks: list[tuple[str, dict]], path: str, place: str
                ) -> tuple[dict, list[tuple[str, str]]]:
    """One assistant answer (its blocks, each with where it stands) as a scenario turn,
    and its tool calls' (id, where)."""
    text, thinking, calls, ids = [], [], [], []
    for where, b in blocks:
        kind = b["type"]
        if kind not in ANSWER_BLOCKS:
            raise MessagesError(path, where + ".type", "expected one of "
                                + ", ".join(ANSWER_BLOCKS) + " in an assistant answer "
                                "(a scenario cannot script " + _show(kind) + ")")
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise MessagesError(path, where + ".text", "expected a string, got "
                                    + _show(b.get("text")))
            text.append(b["text"])
        elif kind == "thinking" and isinstance(b.get("thinking"), str):
            thinking.append(b["thinking"])
        elif kind == "tool_use":
            name, tool_input, tool_id = b.get("name"), b.get("input", {}), b.get("id")
            if not isinstance(name, str) or not name:
                raise MessagesError(path, where + ".name", "expected a tool name, got "
                                    + ("nothing" if name is None else _show(name)))
            if not isinstance(tool_input, dict):
                raise MessagesError(path, where + ".input", "expected an object of inputs, "
                                    "got " + _show(tool_input))
            bad = _null_in(tool_input, where + ".input")
            if bad:
                raise MessagesError(path, bad, "expected a value TOML can write, got null "
                                    "(scenario files have no null)")
            if not isinstance(tool_id, str) or not tool_id:
                raise MessagesError(path, where + ".id", "expected the tool-use id its "
                                    "tool_result answers, got "
                                    + ("nothing" if tool_id is None else _show(tool_id)))
            calls.append({"name": name, "input": tool_input})
            ids.append((tool_id, where))
    turn: dict[str, Any] = {}
    joined = "".join(text)
    if calls:
        if joined.strip():
            turn["text"] = joined
        turn["tool_calls"] = calls
    else:
        if not joined.strip():
            raise MessagesError(path, place, "expected text in an answer without "
                                "tool calls (the final answer), got none")
        turn["final"] = joined
    if "".join(thinking).strip():
        turn["thinking"] = "".join(thinking)
    return turn, ids


def _answered(ids: list[tuple[str, str]], group: tuple[list[int], dict], path: str) -> None:
    at, user = group
    results = set()
    for _, b in user["blocks"]:
        if b["type"] == "tool_result":
            results.add(b.get("tool_use_id"))
    for tool_id, where in ids:
        if tool_id not in results:
            raise MessagesError(path, f"messages[{at[0]}]", f"expected a tool_result for "
                                f"{tool_id!r} ({where}), as the API requires; it has "
                                + (", ".join(sorted(map(str, results))) or "none"))


def _null_in(value: Any, where: str) -> str | None:
    if value is None:
        return where
    if isinstance(value, dict):
        for k, v in value.items():
            found = _null_in(v, f"{where}.{k}")
            if found:
                return found
    if isinstance(value, list):
        for n, v in enumerate(value):
            found = _null_in(v, f"{where}[{n}]")
            if found:
                return found
    return None
