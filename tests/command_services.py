"""A minimal loopback server for a keyed scenario service, with the interface of
faultsim.world.wire (serve_services(world, scenario, hook) -> .env, .close()), for the
command backend's tests until that module is merged: POST /v1/payments with an
Idempotency-Key header, as Stripe takes it. Tests only."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from faultsim.model.endpoint import LoopbackServer
from faultsim.trace import Killed
from faultsim.world.services import ServiceError


class Wire:
    def __init__(self, world, scenario, hook=None) -> None:
        counts: dict[str, int] = {}
        wire = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                name = self.path.strip("/").split("/")[0]
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                counts[name] = n = counts.get(name, 0) + 1
                try:
                    if hook is not None:
                        hook("received", name, n)
                        hook("applied", name, n)
                    try:
                        result, status = world.service(name).submit(
                            json.loads(body), key=self.headers.get("Idempotency-Key") or ""), 200
                    except ServiceError as exc:
                        result, status = {"error": str(exc)}, 400
                    if hook is not None:
                        hook("answered", name, n)
                except (Killed, BaseException):
                    self.close_connection = True
                    return
                data = json.dumps(result).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = LoopbackServer(Handler, "faultsim-test-services")
        self._http.start()
        self.env = {f"FAULTSIM_SERVICE_{s.name.upper()}_URL": f"{self._http.base_url}/{s.name}"
                    for s in scenario.services}

    def close(self) -> None:
        self._http.close()


def serve_services(world, scenario, hook=None) -> Wire:
    return Wire(world, scenario, hook)
