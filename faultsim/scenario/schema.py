"""The scenario format as a JSON Schema, generated from the loader's own table
(`scenario.SECTIONS`): `faultsim scenario schema` prints it, and the package carries a copy,
`faultsim/scenario.schema.json`, that a test keeps equal to what this module generates.

Editors that read TOML against a JSON Schema (Taplo / Even Better TOML, Tombi) take it from a
comment on the scenario file's first line:

    #:schema ./scenario.schema.json

(write it there with `faultsim scenario schema > scenario.schema.json`; the path is relative
to the scenario file, and a URL works too).

The schema says what a file may hold; a few rules need the whole file (a turn position within
its script, a task distinct from the sub-agents' ones): `faultsim validate` checks those too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .load import DURATION_EXPECTED, SECTIONS, Field

# faultsim/scenario.schema.json: package data of faultsim, where it was before the move
SCHEMA_FILE = Path(__file__).parent.parent / "scenario.schema.json"
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?[dhms]\s*)+$"


def _field(f: Field) -> dict[str, Any]:
    out: dict[str, Any] = {"description": f.expected + (f"; {f.doc}" if f.doc else "")}
    if f.type == "duration":
        out["description"] = DURATION_EXPECTED + (f"; {f.doc}" if f.doc else "")
        out["anyOf"] = [{"type": "string", "pattern": DURATION_PATTERN},
                        {"type": "number", "minimum": 0}]
    elif f.type == "instant":
        # a TOML date-time, or a string holding one
        out["type"] = "string"
        out["format"] = "date-time"
    elif f.type == "table":
        out["$ref"] = f"#/$defs/{f.of}"
    elif f.type == "map":
        out["type"] = "object"
        out["additionalProperties"] = {"$ref": f"#/$defs/{f.of}"}
    elif f.type == "array":
        out["type"] = "array"
        if f.of:
            out["items"] = {"$ref": f"#/$defs/{f.of}"}
        else:
            items: dict[str, Any] = {"type": f.items}
            if f.enum:
                items["enum"] = list(f.enum)
            elif f.items == "string":
                items["minLength"] = 1
            out["items"] = items
        if f.min_items is not None:
            out["minItems"] = f.min_items
        if f.unique:
            out["uniqueItems"] = True
    elif f.enum and any(e.isdigit() for e in f.enum):
        # an HTTP status may be written as a number: kind = 529
        out["anyOf"] = [{"type": "string", "enum": list(f.enum)},
                        {"type": "integer", "enum": [int(e) for e in f.enum if e.isdigit()]}]
    else:
        out["type"] = f.type
        if f.enum:
            out["enum"] = list(f.enum)
        if f.type == "string" and not f.enum:
            out["minLength"] = 1
            out["pattern"] = r"\S"
    if f.minimum is not None:
        out["minimum"] = f.minimum
    if f.exclusive_minimum is not None:
        out["exclusiveMinimum"] = f.exclusive_minimum
    if not f.required and f.default is not None:
        out["default"] = f.default
    return out


def _section(name: str) -> dict[str, Any]:
    fields = SECTIONS[name]
    out: dict[str, Any] = {"type": "object",
                           "properties": {k: _field(f) for k, f in fields.items()},
                           "additionalProperties": False}
    required = [k for k, f in fields.items() if f.required]
    if required:
        out["required"] = required
    if name == "turn":  # a turn asks for tools or answers, never both
        out["oneOf"] = [{"required": ["tool_calls"]}, {"required": ["final"]}]
    return out


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file."""
    top = _section("scenario")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "faultsim scenario",
            "description": "A faultsim scenario file: the task, the model's script, the "
                           "services, the expected final answer and the fault profile.",
            **top,
            "$defs": {name: _section(name) for name in SECTIONS if name != "scenario"}}


def dumps() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"
