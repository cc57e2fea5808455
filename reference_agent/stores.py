"""Checkpoint stores in a database (P3 there): each save is one atomic unit.

- `SqliteCheckpointStore`: one row per namespace in a `checkpoints` table; a save is one
  transaction (BEGIN IMMEDIATE, upsert, COMMIT). A crash before COMMIT leaves a hot
  journal that SQLite rolls back on the next open: the previous version stays whole.
- `RedisCheckpointStore`: the checkpoint under `faultsim/NS/checkpoint` and a step log
  (one entry per save) under `faultsim/NS/steps`, written together in one MULTI/EXEC.
  Loading verifies the two agree (P10): a checkpoint the log does not end with was torn
  from its log entry, which only a save outside a transaction can do.

A running task's keys never expire (P12); a completed run's expire after a day.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .checkpoint import (UNREAD, Checkpoint, CheckpointError, OwnershipLost, _check_size, dumps,
                         loads, tracked, version_of)

COMPLETED_TTL_SECONDS = 24 * 3600


class SqliteCheckpointStore:
    def __init__(self, db_path: Path | str, namespace: str) -> None:
        self.db_path, self.namespace = Path(db_path), namespace
        self.label = f"{self.db_path}#checkpoints[{namespace}]"
        self._conn = None
        self.version: str | None = UNREAD  # P13, as CheckpointStore: the version it holds
        self.fenced = True

    def owns(self) -> None:
        """Raise OwnershipLost unless the row still holds the version this one holds."""
        if self.version != UNREAD and tracked(self, SqliteCheckpointStore) and \
                version_of(self.load_raw()) != self.version:
            raise OwnershipLost(f"{self.label}: another incarnation saved it since this "
                                "one last did: the task is no longer this incarnation's")

    def _db(self):
        import sqlite3

        if self._conn is None:
            # autocommit mode: this store says where each transaction begins and ends
            self._conn = sqlite3.connect(str(self.db_path), isolation_level=None)
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS checkpoints "
                               "(namespace TEXT PRIMARY KEY, data BLOB NOT NULL)")
        return self._conn

    def exists(self) -> bool:
        return self.load_raw() is not None

    def load_raw(self) -> bytes | None:
        row = self._db().execute("SELECT data FROM checkpoints WHERE namespace = ?",
                                 (self.namespace,)).fetchone()
        return None if row is None else bytes(row[0])

    def load(self) -> Checkpoint | None:
        raw = self.load_raw()
        if raw is None:
            self.version = None
            return None
        _check_size(self.label, len(raw))
        loaded = loads(raw, self.label)
        self.version = version_of(raw)
        return loaded

    def save(self, checkpoint: Checkpoint) -> None:
        db = self._db()
        data = dumps(checkpoint)
        db.execute("BEGIN IMMEDIATE")
        try:
            if self.fenced and self.version != UNREAD and \
                    tracked(self, SqliteCheckpointStore) and \
                    version_of(self.load_raw()) != self.version:
                # P13: compared inside the write transaction, so no save slips in between
                raise OwnershipLost(f"{self.label}: another incarnation saved it since "
                                    "this one last did")
            db.execute("INSERT INTO checkpoints (namespace, data) VALUES (?, ?) "
                       "ON CONFLICT(namespace) DO UPDATE SET data = excluded.data",
                       (self.namespace, data))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.version = version_of(data)

    def retire(self) -> None:
        """A completed run: files and rows are swept by retention, nothing to do here."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class RedisCheckpointStore:
    def __init__(self, url: str, namespace: str) -> None:
        self.url, self.namespace = url, namespace
        self.key = f"faultsim/{namespace}/checkpoint"
        self.log = f"faultsim/{namespace}/steps"
        self._client = None
        self.version: str | None = UNREAD  # P13, as CheckpointStore: the version it holds
        self.fenced = True

    def owns(self) -> None:
        """Raise OwnershipLost unless the key still holds the version this one holds."""
        if self.version != UNREAD and tracked(self, RedisCheckpointStore) and \
                version_of(self._redis().get(self.key)) != self.version:
            raise OwnershipLost(f"{self.key}: another incarnation saved it since this one "
                                "last did: the task is no longer this incarnation's")

    def _redis(self):
        import redis

        if self._client is None:
            self._client = redis.Redis.from_url(self.url)
        return self._client

    def exists(self) -> bool:
        return bool(self._redis().exists(self.key))

    def load(self) -> Checkpoint | None:
        r = self._redis()
        raw, last = r.get(self.key), r.lindex(self.log, -1)
        if raw is None:
            self.version = None
            return None
        _check_size(self.key, len(raw))
        try:
            entry = json.loads(last) if last is not None else None
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or entry.get("sha") != _sha(raw):
            raise CheckpointError(self.key, self.log, "the checkpoint is not the save its "
                                    "step log ends with: a save was torn from its log entry")
        loaded = loads(raw, self.key)
        self.version = version_of(raw)
        return loaded

    def entry(self, checkpoint: Checkpoint, data: bytes) -> bytes:
        pending = [c.id for c in checkpoint.pendingToolUse or []]
        return json.dumps({"turns": checkpoint.turns, "pending": pending,
                           "sha": _sha(data)}, separators=(",", ":")).encode()

    def save(self, checkpoint: Checkpoint) -> None:
        import redis

        data = dumps(checkpoint)
        pipe = self._redis().pipeline(transaction=True)  # MULTI ... EXEC: one unit
        try:
            if self.fenced and self.version != UNREAD and \
                    tracked(self, RedisCheckpointStore):  # P13: WATCH, compare; EXEC fails
                # if the key moved on in between
                pipe.watch(self.key)
                if version_of(pipe.get(self.key)) != self.version:
                    raise OwnershipLost(f"{self.key}: another incarnation saved it since "
                                        "this one last did")
                pipe.multi()
            pipe.set(self.key, data)
            pipe.rpush(self.log, self.entry(checkpoint, data))
            pipe.execute()
        except redis.WatchError:
            raise OwnershipLost(f"{self.key}: another incarnation saved it as this one "
                                "did") from None
        finally:
            pipe.reset()
        self.version = version_of(data)

    def retire(self) -> None:
        """A completed run's keys expire after a day (P12), both at once."""
        pipe = self._redis().pipeline(transaction=True)
        pipe.expire(self.key, COMPLETED_TTL_SECONDS)
        pipe.expire(self.log, COMPLETED_TTL_SECONDS)
        pipe.execute()


def store_for(agent: Any) -> Any:
    """The checkpoint store the scenario chose (env.store), for one agent namespace."""
    spec = getattr(agent.env, "store", None)
    kind = getattr(spec, "kind", "file") or "file"
    if kind == "sqlite":
        return agent.sqlite_store(spec.path, agent.namespace)
    if kind == "redis":
        return agent.redis_store(spec.url, agent.namespace)
    return agent.checkpoint_store(agent.dir / "checkpoint.json")
