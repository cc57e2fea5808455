"""Breaks P3 in Redis: a save is two separate commands, SET the checkpoint and then RPUSH
its step-log entry, as a naive save does (no MULTI/EXEC). A crash between the two leaves
a checkpoint its log does not record: the store is torn, and the resumed run cannot trust
it. (Run it on a scenario with `[store] kind = "redis"`.)"""
from __future__ import annotations

from typing import Any

from ..agent import Agent
from ..checkpoint import Checkpoint, dumps
from ..stores import RedisCheckpointStore


class TwoWriteStore(RedisCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        data = dumps(checkpoint)
        r = self._redis()
        r.set(self.key, data)
        r.rpush(self.log, self.entry(checkpoint, data))


class TwoWriteAgent(Agent):
    redis_store = TwoWriteStore


def make_agent(env: Any) -> TwoWriteAgent:
    return TwoWriteAgent(env)
