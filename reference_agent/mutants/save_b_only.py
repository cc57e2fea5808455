"""P2 broken: saves only at B, never at A (no `pendingToolUse` before the tool runs).

A crash while a tool runs leaves nothing on disk about the call: resume re-asks the model,
which names the tool again (with a new id, so a new idempotency key) and the effect repeats.
"""
from ..agent import Agent


class SaveBOnlyAgent(Agent):
    def _save_point_a(self, checkpoint, calls):
        checkpoint.pendingToolUse = calls  # in memory only: never saved
        self.plan.add([self._plan_entry(call) for call in calls])


def make_agent(env):
    return SaveBOnlyAgent(env)
