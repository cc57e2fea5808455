"""P13 broken: ownership checked right before each effect, but not on save.

A stale incarnation repeats no effect, yet one paused after a model answer wakes and saves
its older checkpoint over the new incarnation's newer one (a lost update).
"""
from ..agent import Agent


class FencedEffectOnlyAgent(Agent):
    def __init__(self, env, **kw):
        super().__init__(env, **kw)
        self.store.fenced = False  # saves without the compare-and-set

    def owns(self, where):
        if where == "effect":
            super().owns(where)


def make_agent(env):
    return FencedEffectOnlyAgent(env)
