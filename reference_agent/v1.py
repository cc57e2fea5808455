"""The reference agent as its previous release wrote checkpoints: version 1, where
`pendingToolUse` is null or one {id, name, input} object. It exists to record the version-1
corpus under tests/corpora/v1, which the current loader must read through migration (P4).

Version 1 cannot hold several pending calls, so it records scenarios whose turns name one
tool at a time.
"""
from __future__ import annotations

from . import storage
from .agent import Agent
from .checkpoint import Checkpoint, CheckpointStore

VERSION = 1


class V1CheckpointStore(CheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        pending = checkpoint.pendingToolUse
        if pending is not None and len(pending) > 1:
            raise ValueError(f"{self.path}: version 1 holds one pending tool call, not "
                             f"{len(pending)}")
        data = {**checkpoint.to_json(), "version": VERSION,
                "pendingToolUse": None if not pending else pending[0].to_json()}
        storage.atomic_write_json(self.path, data)


class V1Agent(Agent):
    checkpoint_store = V1CheckpointStore


def make_agent(env):
    return V1Agent(env)
