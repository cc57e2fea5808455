"""P13 broken: a lease without a fencing check on save.

Ownership is checked before each model request (as a worker checks that its lease is still
valid) and nowhere else: an incarnation paused during or just after the request wakes and
saves its checkpoint over the one the new incarnation saved meanwhile (the pause of
Kleppmann's lease example: a lost update).
"""
from ..agent import Agent


class UnfencedSaveAgent(Agent):
    def __init__(self, env, **kw):
        super().__init__(env, **kw)
        self.store.fenced = False  # saves without the compare-and-set

    def owns(self, where):
        if where == "request":
            super().owns(where)


def make_agent(env):
    return UnfencedSaveAgent(env)
