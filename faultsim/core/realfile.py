"""A real file's bytes, read and written through `posix`: pyfakefs patches `open` and `os`
(never `posix`) while an incarnation runs, and a forked child runs under it for good."""
from __future__ import annotations

import posix


def read_bytes(path: str) -> bytes:
    """The file's bytes; OSError where it cannot be read."""
    fd = posix.open(path, posix.O_RDONLY)
    try:
        chunks = []
        while chunk := posix.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        posix.close(fd)


def write_bytes(path: str, data: bytes) -> None:
    """Create or replace the file's content (mode 0600); OSError where it cannot."""
    fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT | posix.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[posix.write(fd, view):]
    finally:
        posix.close(fd)
