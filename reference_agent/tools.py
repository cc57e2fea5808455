"""The agent's tools over the world, each with what reconciliation needs to know about it:
how it is keyed (P8), what evidence proves it done (P7) and how to check that evidence
against the real state (P10)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .agent import Agent


class ToolInputError(Exception):
    """The model's input for a tool is unusable; reported to the model as an error result."""


class UnknownToolError(Exception):
    """The model named a tool this agent does not have."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# How a resumed run settles a call whose outcome it does not know (P5).
IDEMPOTENT = "idempotent"  # run again: same input, same outcome (overwrite, read)
KEYED = "keyed"            # repeat with the same key: the receiver deduplicates
QUERYABLE = "queryable"    # look the effect up first, write only if it is not there
BLIND = "blind"            # intent record; unknown completion escalates (P11)
SUBAGENT = "subagent"      # the child's own checkpoint resumes it


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict
    policy: str
    service: str | None
    run: Callable[["Agent", dict, str], Any]
    verify: Callable[["Agent", dict], bool]

    def spec(self) -> dict:
        return {"name": self.name, "description": self.description,
                "input_schema": self.schema}


def _schema(required: dict[str, str], optional: dict[str, str] | None = None) -> dict:
    props = {k: {"type": v} for k, v in {**required, **(optional or {})}.items()}
    return {"type": "object", "properties": props, "required": list(required)}


def _require(tool_input: dict, **kinds: type) -> None:
    for key, kind in kinds.items():
        if not isinstance(tool_input.get(key), kind):
            raise ToolInputError(f"input {key!r} must be a {kind.__name__}")


# -- write_file: idempotent overwrite inside the workspace (P9) ----------------------------
def workspace_path(agent: "Agent", relative: str) -> Path:
    rel = PurePosixPath(relative)
    if rel.is_absolute() or not rel.parts or ".." in rel.parts:
        raise ToolInputError(f"path {relative!r} must be relative and stay inside the workspace")
    return agent.workspace / Path(*rel.parts)


def _write_file(agent: "Agent", tool_input: dict, key: str) -> dict:
    _require(tool_input, path=str, content=str)
    target = workspace_path(agent, tool_input["path"])
    data = tool_input["content"].encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A plain overwrite, not an atomic one: the output is recomputable from the recorded
    # input, and P10's verification on resume redoes it if it did not survive.
    with open(target, "wb") as f:
        f.write(data)
    return {"path": tool_input["path"], "bytes": len(data), "sha256": sha256(data)}


def _verify_file(agent: "Agent", entry: dict) -> bool:
    try:
        target = workspace_path(agent, entry["input"]["path"])
        return sha256(target.read_bytes()) == entry["result"]["sha256"]
    except (OSError, ToolInputError, KeyError, TypeError):
        return False


# -- keyed receivers: tickets, payments (P8) ----------------------------------------------
def _keyed(service: str, **kinds: type) -> Callable:
    def run(agent: "Agent", tool_input: dict, key: str) -> Any:
        _require(tool_input, **kinds)
        return agent.service(service).submit(tool_input, key=key)
    return run


def _verify_keyed(service: str) -> Callable:
    def verify(agent: "Agent", entry: dict) -> bool:
        stored = agent.service(service).lookup_key(entry["key"])
        # A key past the receiver's retention window can no longer be checked; the effect
        # it proved is not undone by that, so the recorded result stands.
        return stored is None or stored == entry["result"]
    return verify


# -- update_record: queryable, so query first and write only what is missing (P8) ---------
def _update_record(agent: "Agent", tool_input: dict, key: str) -> Any:
    _require(tool_input, record_id=str, fields=dict)
    records = agent.service("records")
    current = records.query(tool_input["record_id"])
    if current is not None and all(current.get(k) == v for k, v in tool_input["fields"].items()):
        return current  # already there: skip the write
    return records.apply(tool_input["record_id"], tool_input["fields"])


def _verify_record(agent: "Agent", entry: dict) -> bool:
    current = agent.service("records").query(entry["input"]["record_id"])
    return current is not None and all(current.get(k) == v
                                       for k, v in entry["input"]["fields"].items())


# -- send_email: blind; the agent wraps it in intent records (P11) ------------------------
def _send_email(agent: "Agent", tool_input: dict, key: str) -> Any:
    _require(tool_input, to=str, subject=str, body=str)
    return agent.service("email").send(tool_input)


def _verify_email(agent: "Agent", entry: dict) -> bool:
    intent = agent.intents.get(entry["tool_use_id"])
    return bool(intent and intent.get("completed_at") and intent.get("result") == entry["result"])


# -- lookup_order: read-only ---------------------------------------------------------------
def _lookup_order(agent: "Agent", tool_input: dict, key: str) -> Any:
    _require(tool_input, order_id=str)
    found = agent.service("orders").read(tool_input["order_id"])
    if found is None:
        raise ToolInputError(f"no order {tool_input['order_id']!r}")
    return found


# -- run_subagent: a child agent in namespace parent:child (P12) ---------------------------
def _run_subagent(agent: "Agent", tool_input: dict, key: str) -> Any:
    _require(tool_input, name=str, task=str)
    return agent.run_child(tool_input["name"], tool_input["task"])


def _verify_subagent(agent: "Agent", entry: dict) -> bool:
    return agent.child_result(entry["input"]["name"]) == entry["result"]


def _always(agent: "Agent", entry: dict) -> bool:
    return True


TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("write_file", "Write (overwrite) a text file in the workspace.",
         _schema({"path": "string", "content": "string"}), IDEMPOTENT, None,
         _write_file, _verify_file),
    Tool("create_ticket", "Open a ticket in the tracker.",
         _schema({"title": "string", "category": "string"}, {"body": "string"}), KEYED,
         "tickets", _keyed("tickets", title=str, category=str), _verify_keyed("tickets")),
    Tool("charge_payment", "Charge or refund a customer (negative amount = refund).",
         _schema({"customer": "string", "amount_cents": "integer"}, {"currency": "string"}),
         KEYED, "payments", _keyed("payments", customer=str, amount_cents=int),
         _verify_keyed("payments")),
    Tool("send_email", "Send an email.", _schema({"to": "string", "subject": "string",
                                                  "body": "string"}),
         BLIND, "email", _send_email, _verify_email),
    Tool("update_record", "Set fields on a CRM record.",
         _schema({"record_id": "string", "fields": "object"}), QUERYABLE, "records",
         _update_record, _verify_record),
    Tool("lookup_order", "Look up an order by id.", _schema({"order_id": "string"}),
         IDEMPOTENT, "orders", _lookup_order, _always),
    Tool("run_subagent", "Delegate a sub-task to a sub-agent and wait for its answer.",
         _schema({"name": "string", "task": "string"}), SUBAGENT, None, _run_subagent,
         _verify_subagent),
]}


def get_tool(name: str) -> Tool:
    try:
        return TOOLS[name]
    except KeyError:
        raise UnknownToolError(f"the model named an unknown tool {name!r}; this agent has "
                               f"{', '.join(sorted(TOOLS))}") from None


def target_of(entry: dict) -> tuple:
    """What a recorded step's effect lives on; a later step on the same target supersedes
    it (a file overwritten again, a record updated again)."""
    tool_input = entry.get("input") or {}
    if entry["tool"] == "write_file":
        return ("file", tool_input.get("path"))
    if entry["tool"] == "update_record":
        return ("record", tool_input.get("record_id"))
    return ("step", entry["n"])
