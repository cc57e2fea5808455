"""P13 broken: no ownership at all (no lease, no compare-and-set on the checkpoint).

Correct under every crash that ends the old incarnation; under `--crash-model pause` the
woken incarnation carries on beside the new one: it re-sends what the new one sent and
writes its older checkpoint over the new one's (a lost update).
"""
from ..agent import Agent


class NoOwnershipAgent(Agent):
    def __init__(self, env, **kw):
        super().__init__(env, **kw)
        self.store.fenced = False  # saves without the compare-and-set

    def owns(self, where):
        pass  # never asks whether the task is still its own


def make_agent(env):
    return NoOwnershipAgent(env)
