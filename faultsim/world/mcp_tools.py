"""The scenario's services as MCP tools: the JSON-RPC subset of the Model Context Protocol
a tool server needs (initialize, ping, tools/list, tools/call), answered from the world's
receivers. `wire` serves it over streamable HTTP (one JSON answer per POST, no
server-initiated stream, no session) and `mcp_stdio` relays stdio to that endpoint.

Written here rather than on the `mcp` package: the protocol subset is small, the stdio relay
an agent starts in every incarnation must start fast (the standard library, `python -I`,
not pydantic and starlette), and the HTTP side shares the wire's server thread, so its hook
and the ledger see MCP calls exactly as they see REST calls. tests/test_wire.py drives it
with the `mcp` package's own client over both transports.

Tools, one per service and one per lookup a reconciling agent needs (P5, P8), each mapped
on the receiver call `faultsim.effect` makes, so the ledger cannot tell them apart:

    keyed      NAME {idempotency_key, ...params}   submit(params, key=idempotency_key)
               NAME_lookup {idempotency_key}       lookup_key(idempotency_key)
    queryable  NAME {record_id, ...fields}         apply(record_id, arguments)
               NAME_query {record_id}              query(record_id)
    blind      NAME {...params}                    send(arguments)
    readonly   NAME {record_id}                    read(record_id)

Layer 2 (the world): imports `services` and `_version` only.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .._version import __version__
from .services import ServiceError

if TYPE_CHECKING:
    from .world import World

# the handshake-era revisions (initialize); a client probing a newer era first gets
# "method not found" and falls back to initialize, as the spec's clients do
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


def parse_error() -> dict:
    return {"jsonrpc": "2.0", "id": None,
            "error": {"code": PARSE_ERROR, "message": "the body is not JSON"}}


def tool_name(service: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", service)[:100] or "service"


def _schema(required: dict[str, str], more: bool) -> dict:
    return {"type": "object",
            "properties": {k: {"type": "string", "description": d}
                           for k, d in required.items()},
            "required": list(required), "additionalProperties": more}


KEY = {"idempotency_key": "the call's idempotency key: the same key for a retry of the "
                          "same call, a new one for a new call"}
RECORD = {"record_id": "the record's id"}


class Tools:
    """The tools of `world`'s services `names`; `handle(message)` answers one JSON-RPC
    message (None for a notification)."""

    def __init__(self, world: "World", names: list[str]) -> None:
        self.world = world
        self.tools: dict[str, tuple[str, str, dict, str]] = {}  # name -> service, op, schema, doc
        for service in names:
            kind, base = world.service(service).kind, tool_name(service)
            if kind == "keyed":
                self._add(base, service, "submit", _schema(KEY, True),
                          f"{service} (keyed): applies the call once per idempotency key; a "
                          "retry with the same key and arguments returns the first result")
                self._add(base + "_lookup", service, "lookup_key", _schema(KEY, False),
                          f"{service}: the result stored for an idempotency key, or null")
            elif kind == "queryable":
                self._add(base, service, "apply", _schema(RECORD, True),
                          f"{service} (queryable): sets the record's fields")
                self._add(base + "_query", service, "query", _schema(RECORD, False),
                          f"{service}: the record as it is now, or null")
            elif kind == "blind":
                self._add(base, service, "send", {"type": "object",
                                                   "additionalProperties": True},
                          f"{service} (blind): every call is a new effect")
            else:
                self._add(base, service, "read", _schema(RECORD, False),
                          f"{service} (read-only): the record, or null")

    def _add(self, name: str, service: str, op: str, schema: dict, doc: str) -> None:
        if name in self.tools:
            raise ValueError(f"services {self.tools[name][0]!r} and {service!r} give the same "
                             f"MCP tool name {name!r}")
        self.tools[name] = (service, op, schema, doc)

    def service_of(self, message: Any) -> str | None:
        """The service a tools/call message reaches (None: no service call)."""
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str) and name in self.tools:
                return self.tools[name][0]
        return None

    def handle(self, message: Any) -> Any:
        if isinstance(message, list):  # a batch (2025-03-26)
            if any(self.service_of(m) for m in message):
                return [_error(m.get("id") if isinstance(m, dict) else None,
                               INVALID_REQUEST, "send tool calls one at a time")
                        for m in message if not isinstance(m, dict) or "id" in m] or None
            replies = [r for r in (self.handle(m) for m in message) if r is not None]
            return replies or None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            if isinstance(message, dict) and ("result" in message or "error" in message):
                return None  # a response to a request of ours: we send none
            return _error(None, INVALID_REQUEST, "not a JSON-RPC request")
        method, ident = message["method"], message.get("id")
        if "id" not in message:
            return None  # a notification (notifications/initialized, cancelled, ...)
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            return _result(ident, {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "faultsim-services", "version": __version__}})
        if method == "ping":
            return _result(ident, {})
        if method == "tools/list":
            return _result(ident, {"tools": [
                {"name": name, "description": doc, "inputSchema": schema}
                for name, (_, _, schema, doc) in self.tools.items()]})
        if method == "tools/call":
            return self._call(ident, params)
        return _error(ident, METHOD_NOT_FOUND, f"method {method!r} is not served")

    def _call(self, ident: Any, params: dict) -> dict:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name not in self.tools:
            return _error(ident, INVALID_PARAMS, f"unknown tool {name!r}; tools: "
                          f"{', '.join(self.tools)}")
        if not isinstance(arguments, dict):
            return _error(ident, INVALID_PARAMS, f"{name}: arguments must be an object")
        service, op, _, _ = self.tools[name]
        receiver = self.world.service(service)
        try:
            if op in ("submit", "lookup_key"):
                key = arguments.get("idempotency_key")
                if not isinstance(key, str) or not key:
                    raise ServiceError(f"{name}: idempotency_key is required (a string)")
                rest = {k: v for k, v in arguments.items() if k != "idempotency_key"}
                value = receiver.submit(rest, key=key) if op == "submit" else \
                    receiver.lookup_key(key)  # type: ignore[attr-defined]
            elif op == "send":
                value = receiver.send(arguments)  # type: ignore[attr-defined]
            else:
                record_id = arguments.get("record_id")
                if not isinstance(record_id, str) or not record_id:
                    raise ServiceError(f"{name}: record_id is required (a string)")
                value = receiver.apply(record_id, arguments) if op == "apply" else \
                    getattr(receiver, op)(record_id)
        except ServiceError as e:
            return _result(ident, {"content": [{"type": "text", "text": str(e)}],
                                   "isError": True})
        result: dict = {"content": [{"type": "text", "text": json.dumps(value)}],
                        "isError": False}
        if isinstance(value, dict):
            result["structuredContent"] = value
        return _result(ident, result)


def _result(ident: Any, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
