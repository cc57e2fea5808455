"""A recording proxy for the Messages API on 127.0.0.1.

Every request is forwarded to the upstream endpoint as it came (method, path, query,
headers but the hop-by-hop ones, body), and the answer is sent back as it comes: a JSON
answer whole, server-sent events chunk by chunk as the upstream sends them, so a streaming
client sees the same events at the same pace. The proxy keeps, per request, its JSON body
and the answer (a streamed answer is put together from its events as the API's own SDK
does), never a header: the API key passes through and is not stored.

    with RecordingProxy("https://api.anthropic.com") as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url)
        ...
    proxy.exchanges  # what was asked and answered, in the order asked
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

from ..errors import UsageError
from ..interpose.loopback import Handler as LoopbackHandler, LoopbackServer

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
               "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length",
               "content-encoding"}


@dataclass
class Exchange:
    """One request through the proxy and what came back."""

    index: int  # in the order the requests arrived (1-based)
    method: str
    path: str  # with the query, as the client sent it
    request: Any  # the JSON body (None when not JSON)
    status: int = 0  # 0: the upstream never answered
    response: Any = None  # the JSON answer, or the message a stream put together
    stream: bool = False
    complete: bool = False  # a stream that reached message_stop; a JSON answer read whole
    error: str | None = None  # why the exchange failed on the way, if it did

    @property
    def is_message(self) -> bool:
        """A Messages API call (not count_tokens) the upstream answered in full."""
        return (self.method == "POST" and self.path.split("?")[0].endswith("/v1/messages")
                and self.status == 200 and self.complete and isinstance(self.response, dict)
                and self.response.get("type") == "message")


def upstream_url(url: str) -> tuple[str, str, int]:
    """The upstream base URL, its host and port; a UsageError for anything but http(s)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"upstream {url!r}: expected an http:// or https:// URL of a "
                         "Messages API endpoint, e.g. https://api.anthropic.com")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return url.rstrip("/"), parts.hostname, port


class RecordingProxy:
    def __init__(self, upstream: str, *, timeout: float = 600.0) -> None:
        self.upstream, self.upstream_host, self.upstream_port = upstream_url(upstream)
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._client = httpx2.Client(timeout=timeout, follow_redirects=False)
        self._http = LoopbackServer(self._handler(), "faultsim-recording-proxy")

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def start(self) -> "RecordingProxy":
        self._http.start()
        return self

    def close(self) -> None:
        """Stop serving, end every open connection and wait for the threads serving them."""
        self._http.close()
        self._client.close()

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads serving connections now (none after close())."""
        return self._http.threads

    def __enter__(self) -> "RecordingProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _new(self, method: str, path: str, body: bytes) -> Exchange:
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        with self._lock:
            exchange = Exchange(len(self.exchanges) + 1, method, path, request)
            self.exchanges.append(exchange)
        return exchange

    def _handler(self) -> type[LoopbackHandler]:
        proxy = self

        class Handler(LoopbackHandler):  # the exchanges are the log
            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                exchange = proxy._new(self.command, self.path, body)
                headers = [(k, v) for k, v in self.headers.items()
                           if k.lower() not in _HOP_BY_HOP and k.lower() != "accept-encoding"]
                # identity: the answer is read here (to keep it) and sent on unchanged
                headers.append(("accept-encoding", "identity"))
                request = proxy._client.build_request(self.command, proxy.upstream + self.path,
                                                      headers=headers, content=body)
                try:
                    response = proxy._client.send(request, stream=True)
                except httpx2.HTTPError as exc:
                    exchange.error = f"upstream {proxy.upstream}: {type(exc).__name__}: {exc}"
                    self._refuse(exchange)
                    return
                try:
                    exchange.status = response.status_code
                    if response.headers.get("content-type", "").startswith("text/event-stream"):
                        self._stream(response, exchange)
                    else:
                        self._whole(response, exchange)
                finally:
                    response.close()

            def _head(self, response: httpx2.Response, chunked: bool, length: int = 0) -> None:
                self.send_response(response.status_code)
                for name, value in response.headers.multi_items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                if chunked:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(length))
                self.end_headers()

            def _whole(self, response: httpx2.Response, exchange: Exchange) -> None:
                try:
                    content = response.read()
                except httpx2.HTTPError as exc:
                    exchange.error = f"reading the upstream's answer: {exc}"
                    self.close_connection = True  # the client's read fails, as upstream's did
                    return
                try:
                    exchange.response = json.loads(content) if content else None
                except ValueError:
                    exchange.response = None
                exchange.complete = True
                self._head(response, chunked=False, length=len(content))
                self.wfile.write(content)

            def _stream(self, response: httpx2.Response, exchange: Exchange) -> None:
                """Each chunk on as it arrives; the events are put together on the side."""
                exchange.stream = True
                self._head(response, chunked=True)
                events = StreamAssembler()
                try:
                    for chunk in response.iter_bytes():
                        if not chunk:
                            continue
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        events.feed(chunk)
                except (httpx2.HTTPError, OSError) as exc:
                    # the upstream dropped (or the client went away): no closing chunk, so
                    # the client's read fails as it would have without the proxy
                    exchange.error = f"stream cut: {type(exc).__name__}: {exc}"
                    exchange.response = events.message
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
                exchange.response, exchange.complete = events.message, events.stopped
                exchange.error = events.error

            def _refuse(self, exchange: Exchange) -> None:
                exchange.status = 502
                body = json.dumps({"type": "error", "error": {
                    "type": "api_error", "message": "faultsim recording proxy: "
                    + (exchange.error or "no answer")}}).encode()
                self.send_response(502)
                self.send_header("content-type", "application/json")
                self.send_header("x-should-retry", "false")  # the upstream is down: say so
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _forward

        return Handler


class StreamAssembler:
    """A streamed answer put together from its server-sent events: the message
    `message_start` opens, its blocks from their start and delta events (tool input from
    its JSON pieces), `stop_reason` and usage from `message_delta`."""

    def __init__(self) -> None:
        self._buffer = b""
        self.message: dict | None = None
        self._json: dict[int, str] = {}
        self.stopped = False
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        self._buffer += data.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            payload = [line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:")]
            if payload:
                try:
                    self._event(json.loads(b"\n".join(payload)))
                except ValueError:
                    self.error = "an event whose data is not JSON"

    def _event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.message["content"] = list(self.message.get("content") or [])
            return
        if kind == "error":
            self.error = json.dumps(event.get("error"))
            return
        if self.message is None:
            return
        blocks = self.message["content"]
        index = event.get("index", 0)
        if kind == "content_block_start":
            while len(blocks) <= index:
                blocks.append({})
            blocks[index] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta" and index < len(blocks):
            block, delta = blocks[index], event.get("delta") or {}
            kind_of = delta.get("type")
            if kind_of == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif kind_of == "input_json_delta":
                self._json[index] = self._json.get(index, "") + delta.get("partial_json", "")
            elif kind_of == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif kind_of == "signature_delta":
                block["signature"] = delta.get("signature", "")
        elif kind == "content_block_stop" and index < len(blocks):
            if index in self._json:
                text = self._json.pop(index)
                try:
                    blocks[index]["input"] = json.loads(text) if text else {}
                except ValueError:
                    self.error = f"block {index}: tool input is not JSON"
        elif kind == "message_delta":
            self.message.update(event.get("delta") or {})
            usage = dict(self.message.get("usage") or {})
            usage.update(event.get("usage") or {})
            self.message["usage"] = usage
        elif kind == "message_stop":
            self.stopped = True
