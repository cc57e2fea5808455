"""P3 broken: `open('checkpoint.json', 'w')` straight over the real file.

A crash mid-write leaves a truncated or empty `checkpoint.json`: resume cannot parse it.
"""
from .. import storage
from ..agent import Agent
from ..checkpoint import CheckpointStore


class InPlaceStore(CheckpointStore):
    def save(self, checkpoint):
        with open(self.path, "wb") as f:
            f.write(storage.encode_json(checkpoint.to_json()))


class OverwriteInPlaceAgent(Agent):
    checkpoint_store = InPlaceStore


def make_agent(env):
    return OverwriteInPlaceAgent(env)
