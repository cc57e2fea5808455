"""The scenario's services over the wire: HTTP (and MCP, `mcp_tools`) on a loopback port,
for agents faultsim does not import (any language, any HTTP client).

    wire = serve_services(world, scenario, hook=None)
    wire.env      # FAULTSIM_SERVICE_<NAME>_URL per service, FAULTSIM_MCP_URL, ...
    wire.attach(other_world)  # serve a copy of the world (another run), calls from 1
    wire.close()  # stops the server and its threads

Every call lands on the world's receivers exactly as a `faultsim.effect` call does (the
same receiver method with the same arguments, so the ledger cannot tell them apart):

    keyed      POST URL, JSON object body, header Idempotency-Key   submit(body, key=KEY)
               GET  URL/idempotency-keys/KEY                          lookup_key(KEY) (404: none)
    queryable  POST URL, JSON object body with "record_id"            apply(body["record_id"], body)
               GET  URL/ID                                            query(ID)       (404: none)
    blind      POST URL, JSON object body                             send(body)
    readonly   GET  URL/ID                                            read(ID)        (404: none)

A POST may go to a path below URL (`URL/v1/payments`: the endpoint a real API names) and a
GET's id is its path's last segment, so an agent keeps its production paths.

Keyed services follow Stripe's idempotency (docs.stripe.com/idempotency,
docs.stripe.com/error-low-level): a repeated key with the same body answers the first
response with `Idempotent-Replayed: true` and applies nothing; the same key with another
body is refused with 400 and an `idempotency_error`. 400, not 409: Stripe's docs name no
status for the mismatch (409 is theirs for a request that conflicts with one in flight
under the same key, which one-at-a-time serving never meets), its own client maps
`idempotency_error` under 400/404 (stripe-ruby, api_requestor.rb handle_error_response),
and users report the mismatch as a 400 (stripe/stripe-ruby#503). Errors are Stripe's
shape, `{"error": {"type": ..., "message": ...}}`. There is no list endpoint: the
receivers have no list operation in process either, and the wire must be no looser.

`hook(phase, service, n)` runs in the server thread before each step of the n-th call
(1-based, counted per service, every request that reaches the service): "received" (the
request is read, nothing applied), "applied" (the receiver ran: a write's effect is
applied), "answered" (the answer is ready, not yet sent). If it raises `trace.Killed`
the server drops the connection without answering (after "applied" and "answered", with
the effect applied): the client sees what a dead server leaves. An answer once sent is
the agent's: a kill after it lands at the agent's next step (its next request or file
operation), which faultsim holds itself. Calls are served one at a time (the world is
deterministic), hooks included.

Layer 2 (the world): imports `model.endpoint` (its loopback server, which the network
guard lets through), `trace`, `services` and `mcp_tools`.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote, unquote, urlsplit

from ..interpose.loopback import Handler as LoopbackHandler, LoopbackServer
from ..core.trace import Killed, WorldSealed
from . import mcp_tools
from .services import IdempotencyConflict, ServiceError

if TYPE_CHECKING:
    from .world import World

Hook = Callable[[str, str, int], None]
PHASES = ("received", "applied", "answered")
SERVICES_PATH = "/services/"
MCP_PATH = "/mcp"
RELAY = Path(__file__).with_name("mcp_stdio.py")


def env_name(service: str) -> str:
    """FAULTSIM_SERVICE_<NAME>_URL: the name upper-cased, every other character `_`."""
    return "FAULTSIM_SERVICE_" + re.sub(r"[^A-Z0-9]", "_", service.upper()) + "_URL"


class Reply(Exception):
    """An answer other than 200: status, Stripe-shaped error body."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message

    def body(self) -> dict:
        return {"error": {"type": self.kind, "message": self.message}}


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def _object(body: Any, service: str) -> dict:
    if not isinstance(body, dict):
        raise Reply(400, "invalid_request_error",
                    f"{service}: the request body must be a JSON object")
    return body


def rest_call(world: "World", service: str, method: str, rest: str, body: Any,
              key: str | None) -> Answer:
    """One REST request on `service`; `rest` is its path below the service's URL, still
    percent-encoded. A write may name an endpoint below the URL (`/v1/payments`, as a
    real API's path does): the receiver has one write, whatever the path. A lookup's id is
    the path's last segment."""
    receiver = world.service(service)
    kind = receiver.kind
    segments = [unquote(s) for s in rest.split("/") if s]
    if method == "POST" and kind in ("keyed", "queryable", "blind"):
        params = _object(body, service)
        if kind == "keyed":
            if not key:
                raise Reply(400, "invalid_request_error",
                            f"{service}: an Idempotency-Key header is required")
            replay = receiver.lookup_key(key) is not None  # type: ignore[attr-defined]
            try:
                result = receiver.submit(params, key=key)  # type: ignore[attr-defined]
            except IdempotencyConflict as e:
                raise Reply(400, "idempotency_error", str(e)) from None
            return Answer(200, result, {"Idempotent-Replayed": "true"} if replay else {})
        if kind == "blind":
            return Answer(200, receiver.send(params))  # type: ignore[attr-defined]
        record_id = params.get("record_id")
        if not isinstance(record_id, str) or not record_id:
            raise Reply(400, "invalid_request_error",
                        f"{service}: the body needs a \"record_id\" (a non-empty string)")
        return Answer(200, receiver.apply(record_id, params))  # type: ignore[attr-defined]
    if method == "GET" and segments and kind != "blind":
        if kind == "keyed":
            if len(segments) < 2 or segments[-2] != "idempotency-keys":
                raise Reply(404, "invalid_request_error", f"{service} (keyed) looks up "
                            f"URL/idempotency-keys/KEY, not {rest!r}")
            found = receiver.lookup_key(segments[-1])  # type: ignore[attr-defined]
        elif kind == "queryable":
            found = receiver.query(segments[-1])  # type: ignore[attr-defined]
        else:
            found = receiver.read(segments[-1])  # type: ignore[attr-defined]
        if found is None:
            raise Reply(404, "resource_missing", f"{service}: no {segments[-1]!r}")
        return Answer(200, found)
    allowed = {"keyed": "POST URL, GET URL/idempotency-keys/KEY",
               "queryable": "POST URL, GET URL/ID", "blind": "POST URL",
               "readonly": "GET URL/ID"}[kind]
    raise Reply(405, "invalid_request_error",
                f"{service} is {kind}: it serves {allowed}, not {method} {rest or 'URL'}")


class ServiceWire:
    """The running server: `urls` per service, `env` for the agent, `close()`."""

    def __init__(self, world: "World", names: list[str], hook: Hook | None = None) -> None:
        self.world = world
        self.names = names
        self.hook = hook
        self.calls: dict[str, int] = {name: 0 for name in names}  # per-service call count
        # one call at a time, hooks included: the ledger's order is the calls' order
        self.lock = threading.Lock()
        self._http = LoopbackServer(self._handler(), "faultsim-service-wire")
        self.tools = mcp_tools.Tools(world, names)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    @property
    def urls(self) -> dict[str, str]:
        return {name: self.base_url + SERVICES_PATH + quote(name, safe="")
                for name in self.names}

    @property
    def mcp_url(self) -> str:
        return self.base_url + MCP_PATH

    @property
    def mcp_command(self) -> list[str]:
        """The stdio MCP server an agent starts: a relay (standard library only, `-I`) that
        forwards each message to `mcp_url`, so the ledger stays in this process."""
        return [sys.executable, "-I", str(RELAY), "--connect", self.mcp_url]

    @property
    def env(self) -> dict[str, str]:
        env = {env_name(name): url for name, url in self.urls.items()}
        command = self.mcp_command
        env["FAULTSIM_MCP_URL"] = self.mcp_url
        env["FAULTSIM_MCP_COMMAND"] = shlex.join(command)
        # the `mcpServers` shape MCP clients read from a config file (.mcp.json)
        env["FAULTSIM_MCP_CONFIG"] = json.dumps(
            {"mcpServers": {"faultsim": {"command": command[0], "args": command[1:]}}})
        return env

    def attach(self, world: "World") -> None:
        """Serve `world` from now on (a copy of the world for another run: the explorer
        copies worlds at kill points), its calls counted from 1 again."""
        with self.lock:
            missing = [n for n in self.names if n not in world.services]
            if missing:
                raise KeyError(f"the world to attach has no service {missing[0]!r}")
            self.world = world
            self.tools.world = world
            self.calls = {name: 0 for name in self.names}

    def start(self) -> "ServiceWire":
        self._http.start()
        return self

    def close(self) -> None:
        self._http.close()  # and every open connection, waited for

    def __enter__(self) -> "ServiceWire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self, phase: str, service: str, n: int) -> None:
        if self.hook is not None:
            self.hook(phase, service, n)

    def begin(self, service: str) -> int:
        self.calls[service] += 1
        return self.calls[service]

    def _handler(self) -> type[LoopbackHandler]:
        wire = self

        class Handler(LoopbackHandler):  # the ledger is the log
            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _send(self, answer: Answer, payload: bytes | None = None) -> None:
                if payload is None:
                    payload = _payload(answer)
                self.send_response(answer.status)
                if answer.body is not None:
                    self.send_header("content-type", "application/json")
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def _answer(self) -> None:
                path = urlsplit(self.path).path
                raw = self._body()
                try:
                    body = json.loads(raw) if raw.strip() else None
                except ValueError:
                    body = ValueError
                if path == MCP_PATH:
                    return self._mcp(body)
                if not path.startswith(SERVICES_PATH):
                    return self._send(Answer(404, Reply(404, "invalid_request_error",
                                                        f"no route {path}").body()))
                name, _, rest = path[len(SERVICES_PATH):].partition("/")
                name = unquote(name)
                if name not in wire.calls:
                    return self._send(Answer(404, Reply(
                        404, "invalid_request_error", f"no service {name!r}; this world "
                        f"has: {', '.join(sorted(wire.calls)) or 'none'}").body()))

                def call() -> Answer:
                    if body is ValueError:
                        raise Reply(400, "invalid_request_error",
                                    f"{name}: the request body is not JSON")
                    return rest_call(wire.world, name, self.command, rest, body,
                                     self.headers.get("idempotency-key"))
                self._serve(name, call)

            def _mcp(self, body: Any) -> None:
                if self.command != "POST":
                    # no server-initiated stream: the spec lets a server answer GET with 405
                    return self._send(Answer(405, None, {"allow": "POST"}))
                if body is ValueError or body is None:
                    return self._send(Answer(400, mcp_tools.parse_error()))
                service = wire.tools.service_of(body)
                if service is None:  # no service call: initialize, tools/list, ...
                    reply = wire.tools.handle(body)
                    return self._send(Answer(202, None) if reply is None else
                                      Answer(200, reply))
                self._serve(service, lambda: Answer(200, wire.tools.handle(body)))

            def _serve(self, service: str, call: Callable[[], Answer]) -> None:
                with wire.lock:
                    n = wire.begin(service)
                    try:
                        wire.step("received", service, n)
                        try:
                            answer = call()
                        except Reply as e:
                            answer = Answer(e.status, e.body())
                        except ServiceError as e:
                            answer = Answer(400, Reply(400, "invalid_request_error",
                                                       str(e)).body())
                        wire.step("applied", service, n)
                        payload = _payload(answer)
                        wire.step("answered", service, n)
                        self._send(answer, payload)
                    except (Killed, WorldSealed):
                        # a kill (the hook's), or a dead incarnation's call refused by the
                        # sealed world: the client sees the connection drop
                        self.close_connection = True
                    except BaseException:
                        self.close_connection = True
                        raise

            do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _answer

        return Handler


def _payload(answer: Answer) -> bytes:
    return b"" if answer.body is None else json.dumps(answer.body).encode("utf-8")


def serve_services(world: "World", scenario: Any = None, hook: Hook | None = None
                   ) -> ServiceWire:
    """Serve every service of `world` (in `scenario`'s declaration order, if given) on
    127.0.0.1, a free port, until `close()`."""
    names = [s.name for s in scenario.services] if scenario is not None else \
        list(world.services)
    missing = [n for n in names if n not in world.services]
    if missing:
        raise KeyError(f"the world has no service {missing[0]!r} that the scenario declares")
    return ServiceWire(world, names, hook).start()
