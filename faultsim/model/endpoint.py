"""The fake Claude as a Messages API endpoint on a loopback port.

For agents that build their own client and cannot be handed one: LangChain's
`ChatAnthropic(base_url=...)`, or any SDK client configured by the environment
(`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`). They are served the same answers, by the same
`FakeClaude`, as the in-process transport serves. Only 127.0.0.1 is bound.

    with serve(world.model) as endpoint:
        chat = ChatAnthropic(model="claude-sonnet-5-5", base_url=endpoint.base_url,
                             api_key=endpoint.api_key)
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import httpx2

from ..interpose.loopback import Handler as LoopbackHandler, LoopbackServer
from .fake import FAKE_API_KEY

if TYPE_CHECKING:
    from .fake import FakeClaude

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length",
               "content-encoding"}


class ModelEndpoint:
    """A running endpoint: `base_url` and `api_key` are what a client needs."""

    api_key = FAKE_API_KEY

    def __init__(self, fake: "FakeClaude") -> None:
        self.fake = fake
        self._lock = threading.Lock()  # one request at a time: the fake is deterministic
        self._http = LoopbackServer(self._handler(), "faultsim-model-endpoint")

    @property
    def base_url(self) -> str:
        return self._http.base_url

    @property
    def environ(self) -> dict[str, str]:
        """The variables an SDK client reads when built without arguments."""
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": self.api_key}

    def start(self) -> "ModelEndpoint":
        self._http.start()
        return self

    def close(self) -> None:
        self._http.close()

    def _handler(self) -> type[LoopbackHandler]:
        endpoint = self

        class Handler(LoopbackHandler):  # the fake keeps its own log (FakeClaude.requests)
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                request = httpx2.Request(self.command, endpoint.base_url + self.path,
                                         headers=dict(self.headers.items()), content=body)
                try:
                    with endpoint._lock:
                        response = endpoint.fake.handle(request)
                except BaseException:
                    # a simulated timeout, or a kill that sealed the world: the client
                    # sees the connection drop, as it would from a dead or silent server
                    self.close_connection = True
                    return
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    self._stream(response)
                    return
                content = response.content
                self.send_response(response.status_code)
                for name, value in response.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def _stream(self, response: httpx2.Response) -> None:
                """Server-sent events in chunked encoding, each event sent as the fake
                produces it. A kill or a `stream_cut` mid-stream drops the connection
                without the closing chunk: the client's read fails as in production."""
                self.send_response(response.status_code)
                for name, value in response.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    with endpoint._lock:
                        for chunk in response.iter_raw():
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                except BaseException:
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")

            do_POST = do_GET = _answer

        return Handler


@contextmanager
def serve(fake: "FakeClaude", *, environ: bool = False) -> Iterator[ModelEndpoint]:
    """Serve `fake` on 127.0.0.1 (a free port) while inside. With `environ=True`,
    ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY point at it meanwhile (restored after)."""
    endpoint = ModelEndpoint(fake).start()
    saved = {k: os.environ.get(k) for k in endpoint.environ} if environ else {}
    if environ:
        os.environ.update(endpoint.environ)
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        endpoint.close()
