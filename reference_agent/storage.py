"""Durable writes (P3): full content to a temp file, fsync, atomic rename, fsync the directory.

A crash mid-write then costs only the temp file; `checkpoint.json` is always one whole
version. The two fsyncs are what make it survive power loss, not only a killed process.
"""
from __future__ import annotations

import contextvars
import json
import os
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"
# P13: the running incarnation's ownership check, run by every atomic write it makes (its
# records' too: their temp files' names are shared with any other incarnation). Set by
# Agent.run for its duration; per thread, as two incarnations in one process need.
FENCE: contextvars.ContextVar = contextvars.ContextVar("fence", default=None)


def fsync_path(path: Path) -> None:
    """fsync a file's data or a directory's entries (both open read-only on POSIX)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path) -> None:
    """Create `directory` and any missing parents, durably: a new directory's name lives
    in its parent, so each parent is fsynced after the child is made (P3, power loss)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_path(d.parent)


def atomic_write_bytes(path: Path, data: bytes, check=None) -> None:
    """`check()`, when given (a compare-and-set's check, P13), runs before the temp file is
    written and again right before the rename: raising there leaves `path` untouched. Twice,
    because the temp file's name is shared: a writer that was paused holding it open would
    otherwise write, through its descriptor, into the file another writer has since renamed
    into place (found by the pause model: both incarnations then stop)."""
    check = check or FENCE.get()
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        if check is not None:
            check()
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if check is not None:
        check()
    os.replace(tmp, path)
    fsync_path(path.parent)


def encode_json(value: Any) -> bytes:
    # Compact on purpose: json's C encoder only runs without `indent`, and an agent that
    # saves twice a turn pays for every pretty-printed byte.
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, encode_json(value))


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it does not exist. Parse errors propagate."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return json.loads(raw.decode("utf-8"))
