"""Frames between faultsim and its fork servers: a 4-byte length, then a pickle.

Pickle is fine here: both ends are faultsim, in processes it started, and nothing on the
wire is stored.
"""
from __future__ import annotations

import os
import pickle
import struct
from typing import Any

from ..world.clock import faithful_copies

_HEADER = struct.Struct(">I")


def send(fd: int, message: Any) -> None:
    with faithful_copies():  # its datetimes as they were, frozen or not (world/clock.py)
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> Any:
    """The next message, or EOFError when the other end is gone."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        raise EOFError
    data = _read_exact(fd, _HEADER.unpack(header)[0])
    if data is None:
        raise EOFError
    return pickle.loads(data)


class Reader:
    """Incremental frame reader for a non-blocking pipe (the parent reads many at once)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def read(self) -> tuple[list[Any], bool]:
        """The messages complete so far, and whether the pipe reached EOF."""
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            chunk = None
        eof = chunk == b""
        if chunk:
            self.buffer += chunk
        out = []
        while len(self.buffer) >= _HEADER.size:
            size = _HEADER.unpack_from(self.buffer)[0]
            if len(self.buffer) < _HEADER.size + size:
                break
            out.append(pickle.loads(bytes(self.buffer[_HEADER.size:_HEADER.size + size])))
            del self.buffer[:_HEADER.size + size]
        return out, eof
