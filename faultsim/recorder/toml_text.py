"""A scenario document (the dict `tomllib` would give) written as TOML.

Keys are written in the order `scenario.SECTIONS` lists them, and only keys it lists: the
writer walks the same table the loader, `faultsim validate` and the JSON Schema are made
from. Plain keys come first in each table, then its sub-tables; an array of a section whose
items hold arrays of sections (`turns`) becomes `[[...]]` tables, any other array an inline
one. What is written is read back and checked (`check`) before it is returned.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
import tomllib
from typing import Any

from ..errors import UsageError
from ..reports.outfile import write_atomic
from ..scenario import SECTIONS, Field
from ..scenario.validate import problems

_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")


class Unwritable(UsageError, ValueError):
    """A value TOML cannot spell (null, a lone surrogate), named by its dotted key."""

    def __init__(self, key: str, why: str) -> None:
        self.key, self.why = key, why
        super().__init__(f"{key}: {why}")


def dumps(doc: dict, *, comments: list[str] = ()) -> str:
    """`doc` as TOML, `comments` as `#` lines on top."""
    out = [f"# {line}".rstrip() for c in comments for line in c.splitlines()]
    _table("scenario", doc, "", out)
    return "\n".join(out).strip("\n") + "\n"


def check(text: str, path: str = "<recorded>") -> list[str]:
    """What `faultsim validate` would say of `text` (nothing: it loads and validates)."""
    data = tomllib.loads(text)
    return [f"{key}: {message}" for key, message in problems(data, path)]


def key(name: str) -> str:
    return name if _BARE.match(name) else _string(name, name)


def _table(section: str, table: dict, prefix: str, out: list[str],
           label: str | None = None) -> None:
    """`table` under the header `prefix`; `label` names its keys in errors (an array's
    table is `turns[2]`, under the header `[[turns]]`)."""
    label = prefix if label is None else label
    fields = SECTIONS[section]
    unknown = [k for k in table if k not in fields]
    if unknown:  # a writer bug, not the user's: the table is the format
        raise ValueError(f"{label or 'scenario'}: {unknown} are not keys of [{section}]")
    nested = [k for k in fields if k in table and _is_table(fields[k])]
    for name, f in fields.items():
        if name in table and name not in nested:
            out.append(f"{key(name)} = {_value(table[name], _join(label, name), top=True)}")
    for name in nested:
        f, value, where = fields[name], table[name], _join(prefix, name)
        if f.type == "table":
            out += ["", f"[{where}]"]
            _table(f.of, value, where, out)
        elif f.type == "map":
            for sub, item in value.items():
                at = f"{where}.{key(sub)}"
                out += ["", f"[{at}]"]
                _table(f.of, item, at, out)
        else:  # an array of tables
            for i, item in enumerate(value):
                out += ["", f"[[{where}]]"]
                _table(f.of, item, where, out, f"{where}[{i}]")


def _is_table(f: Field) -> bool:
    if f.type in ("table", "map"):
        return True
    return f.type == "array" and f.of is not None and any(
        g.type == "array" and g.of is not None for g in SECTIONS[f.of].values())


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{key(name)}" if prefix else key(name)


def _value(value: Any, where: str, top: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value, where)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{key(k)} = {_value(v, f'{where}.{key(k)}')}"
                                for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        items = [_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if top and value and all(isinstance(v, dict) for v in value):  # a table a line
            return "[\n" + "".join(f"  {item},\n" for item in items) + "]"
        return "[" + ", ".join(items) + "]"
    if value is None:
        raise Unwritable(where, "null has no TOML spelling (leave the key out instead)")
    raise Unwritable(where, f"a {type(value).__name__} has no TOML spelling")


def _string(text: str, where: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Unwritable(where, "a string with a lone surrogate has no TOML spelling") \
            from None
    # JSON's escapes (\" \\ \n \t \uXXXX for the other controls) are TOML's; only DEL,
    # which JSON leaves as it is and TOML refuses raw, needs its own
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def write(doc: dict, out: str | None, *, comments: list[str] = (),
          source: str = "<recorded>") -> str:
    """`doc` as checked TOML, written to `out` (None: returned only). A document the
    format refuses is never written: the error names `source` and the first problem."""
    try:
        text = dumps(doc, comments=comments)
    except Unwritable as exc:
        raise UsageError(f"{source}: {exc}") from None
    found = check(text, out or "<stdout>")
    if found:
        raise UsageError(f"{source}: the scenario made from it does not validate: "
                         + "; ".join(found[:3]))
    if out is not None:
        write_atomic(out, text, what="--out")  # whole or not at all, never a torn scenario
    return text
