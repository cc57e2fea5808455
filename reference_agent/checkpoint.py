"""`checkpoint.json`: the six fields of P1, versioned and migrated on load (P4).

Version history:
  1  `pendingToolUse` is null or one {id, name, input} object
  2  `pendingToolUse` is null or a list of them (one turn may name several tools)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import storage

CURRENT_VERSION = 2
KNOWN_VERSIONS = (1, 2)
FIELDS = ("version", "task", "turns", "tokensUsed", "messages", "pendingToolUse")
# No real conversation comes near this (a 1M-token context is a few MB of text); a bigger
# file is damage or an attack, refused before it is read into memory.
MAX_BYTES = 64 * 1024 * 1024


class CheckpointError(Exception):
    """The checkpoint exists but cannot be used. Names the file and the field at fault.

    The message never quotes the file's content (it may hold secrets from the conversation).
    """

    def __init__(self, path: Path | str, field_name: str, problem: str) -> None:
        self.path, self.field, self.problem = str(path), field_name, problem
        super().__init__(f"{self.path}: {field_name}: {problem}")


class UnknownVersionError(CheckpointError):
    """A checkpoint version this code does not know: refused loudly, never parsed on hope."""

    def __init__(self, path: Path | str, version: Any) -> None:
        self.version = version
        super().__init__(path, "version", f"unknown checkpoint version {version!r}; this code "
                         f"reads versions {', '.join(map(str, KNOWN_VERSIONS))}. The file was "
                         "left untouched")


@dataclass
class PendingCall:
    id: str
    name: str
    input: dict

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "input": self.input}


@dataclass
class Checkpoint:
    task: str
    turns: int = 0
    tokensUsed: int = 0
    messages: list[dict] = field(default_factory=list)
    pendingToolUse: list[PendingCall] | None = None

    @classmethod
    def new(cls, task: str) -> "Checkpoint":
        return cls(task=task, messages=[{"role": "user", "content": task}])

    def to_json(self) -> dict:
        return {"version": CURRENT_VERSION, "task": self.task, "turns": self.turns,
                "tokensUsed": self.tokensUsed, "messages": self.messages,
                "pendingToolUse": None if self.pendingToolUse is None
                else [p.to_json() for p in self.pendingToolUse]}


def _pending_call(path: Path, where: str, raw: Any) -> PendingCall:
    if not isinstance(raw, dict):
        raise CheckpointError(path, where, f"expected an object {{id, name, input}}, "
                              f"got {type(raw).__name__}")
    for key, kind in (("id", str), ("name", str), ("input", dict)):
        if not isinstance(raw.get(key), kind):
            raise CheckpointError(path, f"{where}.{key}",
                                  f"expected {kind.__name__}, got {type(raw.get(key)).__name__}")
    return PendingCall(raw["id"], raw["name"], raw["input"])


def migrate(path: Path, data: dict) -> dict:
    """Bring a known older version up to CURRENT_VERSION (in memory only)."""
    if data["version"] == 1:
        pending = data.get("pendingToolUse")
        data = {**data, "version": 2, "pendingToolUse": None if pending is None else [pending]}
    return data


def check_version(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise CheckpointError(path, "(top level)", f"expected a JSON object, got "
                              f"{type(data).__name__}")
    if "version" not in data:
        raise CheckpointError(path, "version", "missing: cannot tell which format this is")
    version = data["version"]
    if isinstance(version, bool) or version not in KNOWN_VERSIONS:
        raise UnknownVersionError(path, version)


def from_json(path: Path, data: dict) -> Checkpoint:
    """Validate a current-version document field by field."""
    missing = [f for f in FIELDS if f not in data]
    if missing:
        raise CheckpointError(path, missing[0], "missing")
    extra = sorted(set(data) - set(FIELDS))
    if extra:
        raise CheckpointError(path, extra[0], "not a checkpoint field (expected exactly "
                              + ", ".join(FIELDS) + ")")
    if not isinstance(data["task"], str):
        raise CheckpointError(path, "task", f"expected a string, got {type(data['task']).__name__}")
    for name in ("turns", "tokensUsed"):
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(path, name, f"expected a non-negative integer, got {value!r}"
                                  if isinstance(value, (int, float)) else
                                  f"expected a non-negative integer, got {type(value).__name__}")
    messages = data["messages"]
    if not isinstance(messages, list) or not messages:
        raise CheckpointError(path, "messages", "expected a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") \
                or not isinstance(m.get("content"), (str, list)):
            raise CheckpointError(path, f"messages[{i}]", "expected {role: user|assistant, "
                                  "content: string or list}")
    pending = data["pendingToolUse"]
    if pending is not None and not isinstance(pending, list):
        raise CheckpointError(path, "pendingToolUse", "expected null or a list (version 2)")
    return Checkpoint(task=data["task"], turns=data["turns"], tokensUsed=data["tokensUsed"],
                      messages=messages,
                      pendingToolUse=None if pending is None else
                      [_pending_call(path, f"pendingToolUse[{i}]", p) for i, p in
                       enumerate(pending)])


def _check_size(path: Path, size: int) -> None:
    if size > MAX_BYTES:
        raise CheckpointError(path, "(file)", f"{size} bytes, more than the "
                              f"{MAX_BYTES // (1024 * 1024)} MiB a checkpoint may hold")


def loads(raw: bytes, path: Path | str = "checkpoint.json") -> Checkpoint:
    """Parse, check the version first (P4), migrate, validate: what `load` does to a file."""
    path = Path(path)
    _check_size(path, len(raw))
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(path, "(file)", f"not valid JSON ({len(raw)} bytes; "
                              f"{type(exc).__name__} at byte "
                              f"{getattr(exc, 'pos', getattr(exc, 'start', '?'))})") from None
    check_version(path, data)  # P4: version first, before anything else is trusted
    return from_json(path, migrate(path, data))


def dumps(checkpoint: Checkpoint) -> bytes:
    """The bytes `save` writes."""
    return storage.encode_json(checkpoint.to_json())


class OwnershipLost(Exception):
    """P13: another incarnation saved this checkpoint since this one loaded or saved it:
    this one was paused past its turn and the task is someone else's now. Stop."""


UNREAD = "unread"  # a store that has not loaded yet: a caller's own save is not checked


def tracked(store: Any, base: type) -> bool:
    """Whether `store` keeps its version (P13): it loads and saves as `base` does. A
    subclass that replaces how it reads or writes (the mutants of P1-P12) keeps none, and
    is checked nowhere: those mutants behave as they did before P13."""
    kind = type(store)
    return kind.load is base.load and kind.save is base.save


def version_of(raw: bytes | None) -> str | None:
    """The checkpoint version a compare-and-set names: a digest of its bytes (None: none)."""
    import hashlib

    return None if raw is None else hashlib.sha256(raw).hexdigest()


class CheckpointStore:
    """Loads and saves one namespace's `checkpoint.json`.

    P13, ownership by compare-and-set on the checkpoint's version: the store remembers the
    version it last loaded or saved (`version`), and `owns()` checks that the file still
    holds it; `save` checks it right before its rename. A second incarnation that saved in
    between moved the version on, so a paused one that wakes finds it lost the task and
    stops (OwnershipLost) instead of writing its older checkpoint over the newer one. Only
    reads: the writes, and so every crash state and kill point, are those without it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # what this incarnation last read or wrote; UNREAD until its first load (the agent
        # loads before any save; a tool that only saves through the store is not checked)
        self.version: str | None = UNREAD
        self.fenced = True  # False: the mutants that save without the check

    def _current(self) -> str | None:
        try:
            return version_of(self.path.read_bytes())
        except FileNotFoundError:
            return None

    def owns(self) -> None:
        """Raise OwnershipLost unless the checkpoint is still the version this one holds."""
        if self.version != UNREAD and tracked(self, CheckpointStore) and \
                self._current() != self.version:
            raise OwnershipLost(f"{self.path}: another incarnation saved it since this one "
                                "last did: the task is no longer this incarnation's")

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> Checkpoint | None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self.version = None
            return None
        _check_size(self.path, size)  # before reading it into memory
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.version = None
            return None
        loaded = loads(raw, self.path)
        self.version = version_of(raw)
        return loaded

    def save(self, checkpoint: Checkpoint) -> None:
        data = dumps(checkpoint)
        storage.atomic_write_bytes(self.path, data, check=self.owns if self.fenced else None)
        self.version = version_of(data)
