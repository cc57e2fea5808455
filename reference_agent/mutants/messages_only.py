"""P1 broken: the checkpoint holds only `messages`; the five other fields are missing.

Resume cannot see the pending call (no `pendingToolUse`) nor continue the counters (no
`turns`, `tokensUsed`): it restarts them from zero and sends the orphaned `tool_use` on.
"""
import json

from .. import storage
from ..agent import Agent
from ..checkpoint import Checkpoint, CheckpointStore


class MessagesOnlyStore(CheckpointStore):
    def load(self):
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return None
        messages = data["messages"]
        return Checkpoint(task=messages[0]["content"], messages=messages)

    def save(self, checkpoint):
        storage.atomic_write_json(self.path, {"messages": checkpoint.messages})


class MessagesOnlyAgent(Agent):
    checkpoint_store = MessagesOnlyStore


def make_agent(env):
    return MessagesOnlyAgent(env)
