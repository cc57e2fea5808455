"""The fake Claude answering an SDK built on httpx (anthropic 0.x): each httpx request is
carried to the fake as an httpx2 one, and its httpx2 answer back as an httpx response.

The body of the answer is carried as the client reads it, chunk by chunk: the fake's kill
points in the gaps of a stream (`streaming.EventStream`) land where the client is, as on
httpx2. An httpx2 error the fake raises (a read timeout, a dropped connection, before the
answer or mid-stream) is raised as httpx's error of the same name, the one the 0.x SDK
catches (`APITimeoutError`, `APIConnectionError`). A kill is a BaseException and passes
through untouched.

Part of the fake Claude (layer 2): imports httpx2 and httpx (only loaded for a 0.x SDK,
which depends on httpx)."""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Iterator

import httpx
import httpx2


def bridged(handle: Callable[[httpx2.Request], httpx2.Response]
            ) -> Callable[[httpx.Request], httpx.Response]:
    """An `httpx.MockTransport` handler answered by `handle`, an httpx2 one."""

    def answer(request: httpx.Request) -> httpx.Response:
        carried = httpx2.Request(request.method, str(request.url),
                                 headers=request.headers.raw, content=request.content)
        try:
            response = handle(carried)
        except httpx2.HTTPError as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(response.status_code, headers=response.headers.raw,
                              stream=_Body(response, request))

    return answer


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An httpx2 response's body, read through as an httpx one."""

    def __init__(self, response: httpx2.Response, request: httpx.Request) -> None:
        self.response, self.request = response, request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.response.stream
        except httpx2.HTTPError as exc:
            raise _as_httpx(exc, self.request) from exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.stream:
                yield chunk
        except httpx2.HTTPError as exc:
            raise _as_httpx(exc, self.request) from exc


def _as_httpx(exc: httpx2.HTTPError, request: httpx.Request) -> Exception:
    # httpx2 keeps httpx's exception names; one httpx lacks (none at httpx 0.28) becomes
    # the base class of transport failures, which the SDK reports as a connection error
    kind: Any = getattr(httpx, type(exc).__name__, httpx.TransportError)
    return kind(str(exc), request=request)
