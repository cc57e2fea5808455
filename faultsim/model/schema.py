"""Whether a scripted turn may answer a request at all: the real model calls only tools it
was offered, as `tool_choice` allows, with inputs that fit their `input_schema`.

Part of the fake Claude (layer 2): imports only the standard library."""
from __future__ import annotations

import json
from typing import Any, Mapping


def tool_choice_refusal(body: Mapping, turn: Any) -> str | None:
    """Why the scripted turn cannot be the answer to this request, if it cannot: the real
    model never calls a tool it was not offered, nor against `tool_choice`. Answering
    anyway would let a lenient agent pass without exercising a single effect."""
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type")
    offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    calls = [c.name for c in turn.tool_calls]
    if not calls:
        if kind in ("any", "tool"):
            return (f"the scripted turn is a final answer, but tool_choice "
                    f"{json.dumps(choice)} forces a tool call")
        return None
    if kind == "none":
        return (f"the scripted turn calls {', '.join(calls)}, but the request sets "
                'tool_choice {"type": "none"}')
    for name in calls:
        if name not in offered:
            return (f"the scripted turn calls {name!r}, a tool the request does not offer "
                    f"(it offers: {', '.join(sorted(n for n in offered if n)) or 'no tools'})")
    if kind == "tool" and calls != [choice.get("name")]:
        return (f"the scripted turn calls {', '.join(calls)}, but tool_choice forces "
                f"{choice.get('name')!r}")
    schemas = {t.get("name"): t.get("input_schema") for t in body.get("tools") or []
               if isinstance(t, dict)}
    for call in turn.tool_calls:
        wrong = schema_mismatch(schemas.get(call.name), call.input, "input")
        if wrong:
            return (f"the scripted call of {call.name!r} does not fit the input_schema the "
                    f"request offers it with: {wrong}")
    return None


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
               "null": type(None)}


def schema_mismatch(schema: Any, value: Any, where: str) -> str | None:
    """Where `value` breaks `schema`, for the JSON Schema keywords tool schemas use (type,
    properties, required, additionalProperties: false, items, enum); None when it fits or
    the schema says nothing checkable. A scripted input that no real model could send to
    this tool would exercise the agent's error path, not its effect."""
    if not isinstance(schema, dict):
        return None
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in names):
            return f"{where} is {json.dumps(value)}, not {' or '.join(names)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {json.dumps(value)}, not one of {json.dumps(schema['enum'])}"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                return f"{where} lacks the required {name!r}"
        for name, item in value.items():
            if name in props:
                wrong = schema_mismatch(props[name], item, f"{where}.{name}")
                if wrong:
                    return wrong
            elif schema.get("additionalProperties") is False:
                return f"{where} has {name!r}, which the schema does not allow"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value):
            wrong = schema_mismatch(schema["items"], item, f"{where}[{k}]")
            if wrong:
                return wrong
    return None


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kind = _JSON_TYPES.get(name)
    return True if kind is None else isinstance(value, kind)
