"""P3 broken in a database store, only on the recovery path: the save that completes a
reconciled turn (B after a resume settles `pendingToolUse`) is two separate writes instead
of one atomic unit. Redis: SET the checkpoint, then RPUSH its step-log entry (no
MULTI/EXEC). SQLite: DELETE the row, then INSERT the new one, each its own transaction.

No single crash can see it: the first incarnation never reconciles, and a resumed run that
is not killed again does both writes. A second crash between them leaves a checkpoint torn
from its step log (Redis: the next resume refuses the store) or no checkpoint at all
(SQLite: the next resume starts the task over). (Run it on a scenario with `[store] kind =
"redis"` or `"sqlite"`, in subprocess mode, with `--crashes 2`; on the file store it
behaves like the reference agent.)
"""
from __future__ import annotations

from typing import Any

from ..agent import Agent
from ..checkpoint import UNREAD, Checkpoint, dumps
from ..stores import RedisCheckpointStore, SqliteCheckpointStore


class TwoWriteRedis(RedisCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        data = dumps(checkpoint)
        r = self._redis()
        r.set(self.key, data)
        r.rpush(self.log, self.entry(checkpoint, data))


class TwoWriteSqlite(SqliteCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        db = self._db()  # autocommit: each statement is its own transaction
        db.execute("DELETE FROM checkpoints WHERE namespace = ?", (self.namespace,))
        db.execute("INSERT INTO checkpoints (namespace, data) VALUES (?, ?)",
                   (self.namespace, dumps(checkpoint)))


class RecoveryTwoWritesAgent(Agent):
    def _reconcile_pending(self, checkpoint: Checkpoint) -> Checkpoint:
        store = self.store
        if isinstance(store, SqliteCheckpointStore):
            self.store = TwoWriteSqlite(store.db_path, store.namespace)
        elif isinstance(store, RedisCheckpointStore):
            self.store = TwoWriteRedis(store.url, store.namespace)
        try:
            return super()._reconcile_pending(checkpoint)
        finally:
            self.store = store
            store.version = UNREAD  # its save went around this store: not tracked (P13)


def make_agent(env: Any) -> RecoveryTwoWritesAgent:
    return RecoveryTwoWritesAgent(env)
