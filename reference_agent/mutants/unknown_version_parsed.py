"""P4 broken: the loader does not check `version`; an unknown version is parsed on hope.

A checkpoint written by a newer release (or not a checkpoint at all) is read as if it
were this version, and the next save overwrites it with a downgraded copy.
"""
import json

from ..agent import Agent
from ..checkpoint import CheckpointStore, from_json


class HopefulStore(CheckpointStore):
    def load(self):
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return None
        pending = data.get("pendingToolUse")
        if isinstance(pending, dict):
            pending = [pending]
        return from_json(self.path, {**data, "version": 2, "pendingToolUse": pending})


class UnknownVersionParsedAgent(Agent):
    checkpoint_store = HopefulStore


def make_agent(env):
    return UnknownVersionParsedAgent(env)
