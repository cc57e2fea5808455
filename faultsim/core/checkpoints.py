"""Where an agent keeps its durable state, as its scenario declares it:

    [checkpoint]
    files = ["state.json", "sessions/*.jsonl"]   # globs under the workdir
    redis_keys = ["agent:checkpoint:*"]           # globs over Redis keys
    format = "json"                               # optional: else from each file's suffix

Without a declaration, today's names: any `checkpoint.json`, and Redis keys ending in
`/checkpoint`. The state guards (`checkpoint_whole`, `no_silent_restart`), the kill-point
categories (`checkpoint-mid-write`, `checkpoint-rename`) and the version probe read
checkpoints through `CheckpointSpec.matches`. Formats: `json` (one document), `jsonl` (a
transcript: one document per line, the last line may be torn), `sqlite` (a database file:
SQLite keeps it whole itself), `bytes` (opaque: never parsed).

Standard library only (the bottom layer).
"""
from __future__ import annotations

import fnmatch
import json
import posixpath
from dataclasses import dataclass

FORMATS = ("json", "jsonl", "sqlite", "bytes")
REDIS = "@redis/"  # how a Redis key's value appears in a crash state (subprocess mode)
_SUFFIX = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".db": "sqlite",
           ".sqlite": "sqlite", ".sqlite3": "sqlite"}


@dataclass(frozen=True)
class CheckpointSpec:
    files: tuple[str, ...] = ()
    redis_keys: tuple[str, ...] = ()
    format: str | None = None  # None: from each file's suffix
    declared: bool = False  # False: today's names (checkpoint.json, KEY/checkpoint)

    def matches(self, path: str) -> bool:
        """Whether `path` (relative to the workdir, or @redis/KEY) is a checkpoint."""
        if path.startswith(REDIS):
            key = path[len(REDIS):]
            if not self.declared:
                return posixpath.basename(key) == "checkpoint"
            return any(fnmatch.fnmatchcase(key, g) for g in self.redis_keys)
        path = path.lstrip("/")
        if not self.declared:
            return posixpath.basename(path) == "checkpoint.json"
        return any(fnmatch.fnmatchcase(path, g) for g in self.files)

    def format_of(self, path: str) -> str:
        if self.format:
            return self.format
        if path.startswith(REDIS):
            return "json"
        return _SUFFIX.get(posixpath.splitext(path)[1].lower(), "bytes")

    def describe(self) -> str:
        if not self.declared:
            return "checkpoint.json files (no [checkpoint] declared)"
        return ", ".join([*self.files, *(f"redis {k}" for k in self.redis_keys)])


DEFAULT = CheckpointSpec()


_WHOLE: dict[tuple, tuple] = {}  # (spec, path, id(data)) -> (data, why): see `whole`
_WHOLE_LIMIT = 512


def whole(spec: CheckpointSpec, path: str, data: bytes) -> str | None:
    """Why `data` is not a whole checkpoint of its format (None: it is, or the format keeps
    itself whole). A JSONL transcript's torn last line is a legal state of an append-only
    log: the resumed run must survive it, and other guards judge whether it did.

    Memoised by the bytes object (a pure function of spec, path and bytes; the entry holds
    the bytes, so the id is not reused while it lives): a sweep asks it at every kill
    point, and between two writes the checkpoint is one object, parsed once, not once a
    point (a parse is O(checkpoint) and the checkpoint grows with the run)."""
    key = (spec, path, id(data))
    found = _WHOLE.get(key)
    if found is not None and found[0] is data:
        return found[1]
    why = _whole(spec, path, data)
    if len(_WHOLE) >= _WHOLE_LIMIT:
        _WHOLE.clear()
    _WHOLE[key] = (data, why)
    return why


def _whole(spec: CheckpointSpec, path: str, data: bytes) -> str | None:
    fmt = spec.format_of(path)
    if fmt == "json":
        try:
            json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return "not one whole JSON document"
    elif fmt == "jsonl":
        lines = data.split(b"\n")
        for n, line in enumerate(lines[:-1]):  # every line the last newline closed
            if line.strip():
                try:
                    json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    return f"line {n + 1} (a completed line, not the torn tail) is not JSON"
    return None


def settled(spec: CheckpointSpec, path: str, data: bytes) -> bytes:
    """The part of a checkpoint a resumed agent can rely on: a JSONL transcript's completed
    lines (its torn tail is skipped, legally); any other format whole."""
    if spec.format_of(path) == "jsonl":
        return data[:data.rfind(b"\n") + 1]
    return data


def history_length(spec: CheckpointSpec, path: str, data: bytes) -> int | None:
    """How many messages this checkpoint's conversation holds (a JSON document's
    `messages` list or a bare list, a JSONL file's whole lines); None when that cannot be
    read (not whole, another shape). The pause model's measure of a checkpoint's age: a
    save that makes it shorter than the one it replaced went back in time."""
    fmt = spec.format_of(path)
    try:
        if fmt == "json":
            doc = json.loads(data)
            if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
                return len(doc["messages"])
            return len(doc) if isinstance(doc, list) else None
        if fmt == "jsonl":
            return sum(1 for line in data.split(b"\n")[:-1] if line.strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return None


def progress(spec: CheckpointSpec, path: str, data: bytes) -> bool:
    """Whether this checkpoint holds a conversation in progress (more than the task)."""
    fmt = spec.format_of(path)
    try:
        if fmt == "json":
            doc = json.loads(data)
            if isinstance(doc, dict):
                messages = doc.get("messages")
                return isinstance(messages, list) and len(messages) > 1
            # a bare list is a message history (pydantic-ai's all_messages_json)
            return isinstance(doc, list) and len(doc) > 1
        if fmt == "jsonl":
            return sum(1 for line in data.split(b"\n")[:-1] if line.strip()) > 1
    except (UnicodeDecodeError, ValueError):
        return False
    return False
