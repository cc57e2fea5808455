"""Breaks P12 in Redis: every save puts an expiry on the checkpoint (an hour, "so stale
runs clean themselves up"), a running task's included. If the agent is down longer than
that, its checkpoint and step log are gone when it comes back, and it starts the task
over. Found with a downtime fault longer than the TTL. (Run it on a scenario with
`[store] kind = "redis"`.)"""
from __future__ import annotations

from typing import Any

from ..agent import Agent
from ..checkpoint import Checkpoint, dumps
from ..stores import RedisCheckpointStore

TTL_SECONDS = 3600


class ExpiringStore(RedisCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        data = dumps(checkpoint)
        pipe = self._redis().pipeline(transaction=True)
        pipe.set(self.key, data, ex=TTL_SECONDS)
        pipe.rpush(self.log, self.entry(checkpoint, data))
        pipe.expire(self.log, TTL_SECONDS)
        pipe.execute()


class ExpiringAgent(Agent):
    redis_store = ExpiringStore


def make_agent(env: Any) -> ExpiringAgent:
    return ExpiringAgent(env)
