"""A streamed answer as the client reads it: server-sent events with kill points in
their gaps, and the dropped connection of a `stream_cut` fault.

Part of the fake Claude (layer 2): may import `sse`; the fake's kill point is passed in."""
from __future__ import annotations

from typing import Callable, Iterator

import httpx2

from .sse import events as stream_events


class EventStream(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The answer as server-sent events, produced as the client reads them (sync or async
    clients alike). Some gaps are kill points: after `message_start`, after each content
    block, and in the middle of each tool input. A `stream_cut` fault drops the
    connection in the middle of the first tool input (else of the first block): the client
    sees what production shows, a read error after a 200."""

    def __init__(self, on_gap: Callable[[dict, str], None], message: dict,
                 request: httpx2.Request, cut: bool) -> None:
        # on_gap(message, where): the fake's kill point in a gap between events
        self.on_gap, self.message, self.request, self.cut = on_gap, message, request, cut

    def _steps(self) -> Iterator[bytes]:
        steps = list(stream_events(self.message))
        cut_at = _cut_point(steps) if self.cut else None
        for n, step in enumerate(steps):
            if cut_at is not None and n == cut_at:
                raise httpx2.RemoteProtocolError(
                    "peer closed connection without sending complete message body "
                    "(incomplete chunked read)", request=self.request)
            yield step.encode()
            if _is_kill_gap(steps, n):
                self.on_gap(self.message, step.where)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._steps()

    async def __aiter__(self):
        for chunk in self._steps():
            yield chunk


def _is_kill_gap(steps: list, n: int) -> bool:
    step = steps[n]
    if step.event in ("message_start", "content_block_stop"):
        return True
    if step.event == "content_block_delta" and step.data["delta"]["type"] == "input_json_delta":
        return step.deltas > 2 and step.delta == (step.deltas + 1) // 2  # mid tool input
    return False


def _cut_point(steps: list) -> int:
    """The index of the first event the client never gets."""
    deltas = [n for n, s in enumerate(steps) if s.event == "content_block_delta"]
    tools = [n for n in deltas if steps[n].data["delta"]["type"] == "input_json_delta"]
    chosen = tools or deltas
    if chosen:
        block = steps[chosen[0]].data["index"]
        mine = [n for n in chosen if steps[n].data["index"] == block]
        return mine[len(mine) // 2] if len(mine) > 1 else mine[0] + 1
    return 2  # after message_start and ping
