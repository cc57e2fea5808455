"""P1/P5 broken: resume restarts `turns` and `tokensUsed` at zero instead of continuing
from the stored values (a max-turns stop and the budget then work from wrong totals)."""
from ..agent import Agent


class CountersResetAgent(Agent):
    def _resume(self, checkpoint):
        checkpoint.turns = 0
        checkpoint.tokensUsed = 0
        return super()._resume(checkpoint)


def make_agent(env):
    return CountersResetAgent(env)
