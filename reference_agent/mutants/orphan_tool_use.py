"""P5 broken: resume keeps the assistant `tool_use` in the conversation but drops the
pending call, so the next request carries a `tool_use` with no `tool_result`: the API
refuses it with 400 invalid_request_error, exactly as production would."""
from ..agent import Agent


class OrphanToolUseAgent(Agent):
    def _reconcile_pending(self, checkpoint):
        checkpoint.pendingToolUse = None
        return checkpoint


def make_agent(env):
    return OrphanToolUseAgent(env)
