"""The HTTP servers faultsim runs beside an agent on 127.0.0.1: the fake Claude's endpoint
(`model/endpoint.py`), the world's services and MCP (`world/wire.py`) and the recording
proxy (`recorder/proxy.py`). One home for what they share: a free port, a daemon thread,
the network guard told when the agent may connect, and a close that leaves no thread
behind (a client's keep-alive connection holds its serving thread in a read, which close
ends). Each keeps only its own handling of a request: a subclass of `Handler`."""
from __future__ import annotations

import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .netguard import serving, stopped


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "LoopbackServer"

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # a client killed mid-request (faultsim's own SIGKILL) resets its connection: the
        # crash being tested, not an error of the server to print
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """A request handler of a loopback server: HTTP/1.1 (keep-alive, as SDK clients use
    it), silent (each server keeps its own log: the fake's requests, the ledger, the
    exchanges), and known to its server while it serves a connection."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner.closed()


class LoopbackServer:
    """An HTTP server faultsim itself runs on 127.0.0.1 (a free port), from a daemon thread;
    the network guard lets connections to it through from start() to close()."""

    def __init__(self, handler: type[Handler], name: str) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        self.server.owner = self
        # a short poll: close() waits for the server loop to see the shutdown
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        name=name, daemon=True)
        self._open: dict[threading.Thread, Any] = {}  # the connections served, by thread
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads serving connections now (none after close())."""
        with self._lock:
            return list(self._open)

    def opened(self, connection: Any) -> None:
        with self._lock:
            self._open[threading.current_thread()] = connection

    def closed(self) -> None:
        with self._lock:
            self._open.pop(threading.current_thread(), None)

    def start(self) -> None:
        self._thread.start()
        serving(*self.server.server_address[:2])  # the network guard lets the agent in

    def close(self) -> None:
        """Stop serving (no new connection from here on), end every open connection and
        wait for the threads serving them."""
        stopped(*self.server.server_address[:2])
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
        with self._lock:
            still = dict(self._open)
        for thread, connection in still.items():
            try:
                connection.shutdown(socket.SHUT_RDWR)  # its read returns: the thread ends
            except OSError:
                pass  # already closed by the client
            thread.join(timeout=5)
