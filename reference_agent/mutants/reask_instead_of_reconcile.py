"""P5 broken: resume drops the pending call and re-asks the model instead of finding out
whether the call's effect already happened. The model names the tool again, with a new
id and so a new idempotency key: an effect that had happened happens twice."""
from ..agent import Agent


class ReaskAgent(Agent):
    def _reconcile_pending(self, checkpoint):
        checkpoint.messages.pop()  # the assistant turn that named the tools
        checkpoint.pendingToolUse = None
        return checkpoint


def make_agent(env):
    return ReaskAgent(env)
