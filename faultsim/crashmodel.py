"""Crash models: what the next incarnation finds on disk after a kill.

- `process` (SIGKILL): every completed operation survives, the page cache included; a kill
  inside a write leaves the bytes written so far.
- `power` (power loss): only what was fsynced is sure to survive. Following ALICE's abstract
  persistence model, bounded: file data and directory entries persist independently of each
  other (a file's data needs an fsync of the file, a name needs an fsync of its directory),
  and unsynced data may also be torn at sector granularity. Each outcome is named, so a
  verdict says which persisted subset it needed.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Mapping

CRASH_MODELS = ("process", "power")
SECTOR = 512

Files = Mapping[str, "bytes | None"]

DIR = None  # a directory in a snapshot


@dataclass
class Durability:
    """What an fsync has made sure of, for the power-loss model.

    `data[ino]` is a file's content as of its last fsync (missing: never synced, so a power
    loss leaves it empty); `entries[ino]` a directory's names as of its last fsync.
    Everything present when an incarnation starts is durable (it is what was on disk).
    """

    data: dict[int, bytes] = field(default_factory=dict)  # file inode -> synced bytes
    entries: dict[int, dict[str, int]] = field(default_factory=dict)  # dir inode -> names
    dirs: set[int] = field(default_factory=set)  # inodes known to be directories
    root: int = 0
    last_written: list[str] = field(default_factory=list)  # unsynced files, oldest first


@dataclass(frozen=True)
class CrashState:
    model: str
    persisted: str  # which subset survived, in words
    files: tuple[tuple[str, bytes | None], ...]  # sorted (path, bytes or None for a dir)

    @classmethod
    def of(cls, model: str, persisted: str, files: Files) -> "CrashState":
        return cls(model, persisted, tuple(sorted(files.items())))

    def as_dict(self) -> dict[str, bytes | None]:
        return dict(self.files)

    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for path, data in self.files:
            h.update(path.encode() + b"\0")
            h.update(b"D" if data is None else b"F%d\0" % len(data) + data)
        return h.hexdigest()


def process_state(snapshot: Files) -> list[CrashState]:
    return [CrashState.of("process", "every completed operation", snapshot)]


def _walk_durable(d: Durability, content_of) -> dict[str, bytes | None]:
    """The tree as the synced directory entries describe it."""
    out: dict[str, bytes | None] = {}

    def walk(ino: int, prefix: str) -> None:
        for name, child in sorted(d.entries.get(ino, {}).items()):
            rel = prefix + name
            if child in d.dirs:
                out[rel] = DIR
                walk(child, rel + "/")
            else:
                out[rel] = content_of(child)

    walk(d.root, "")
    return out


def power_states(snapshot: Files, inodes: Mapping[str, int], d: Durability) -> list[CrashState]:
    """The bounded set of power-loss outcomes at this instant, deterministic in order."""
    current_by_ino = {inodes[p]: data for p, data in snapshot.items() if data is not DIR}

    def synced(ino: int) -> bytes:
        return d.data.get(ino, b"")

    def current(ino: int) -> bytes:
        return current_by_ino.get(ino, synced(ino))

    candidates: list[tuple[str, dict]] = [
        ("everything persisted", dict(snapshot)),
        ("names persisted, unsynced data lost",
         {p: data if data is DIR else synced(inodes[p]) for p, data in snapshot.items()}),
        ("data persisted, unsynced names lost", _walk_durable(d, current)),
        ("nothing unsynced persisted", _walk_durable(d, synced)),
    ]
    # The most recently written unsynced file, torn at sector granularity.
    torn_path = next((p for p in reversed(d.last_written) if isinstance(snapshot.get(p), bytes)
                      and snapshot[p] != synced(inodes[p])), None)
    if torn_path is not None:
        new, base = snapshot[torn_path], synced(inodes[torn_path])
        sectors = math.ceil(len(new) / SECTOR)
        for k in sorted({1, sectors // 2, sectors - 1} - {0}):
            if k >= sectors:
                continue
            for fill, name in ((b"\0", "zero"), (b"\xa5", "garbage")):
                if fill == b"\xa5" and k != max(1, sectors // 2):
                    continue
                data = new[:k * SECTOR] + fill * (len(new) - k * SECTOR)
                if data != base:
                    candidates.append((f"{torn_path} torn after sector {k}/{sectors}, "
                                       f"{name}-filled", {**snapshot, torn_path: data}))
    seen, out = set(), []
    for persisted, files in candidates:
        state = CrashState.of("power", persisted, files)
        if state.files not in seen:
            seen.add(state.files)
            out.append(state)
    return out
