"""P3 broken, only on the recovery path: the save that completes a reconciled turn (B after
a resume settles `pendingToolUse`) writes `checkpoint.json` in place.

Every save of a first run is atomic, so no single crash can see it: the first incarnation
never reconciles, and a resumed run that is not killed again finishes its write. A second
crash inside that write leaves a truncated checkpoint, and the next resume cannot parse it.
"""
from ..agent import Agent
from ..checkpoint import UNREAD
from .overwrite_in_place import InPlaceStore


class ReconcileInPlaceAgent(Agent):
    def _reconcile_pending(self, checkpoint):
        store = self.store
        self.store = InPlaceStore(store.path)  # the recovery's own, non-atomic save
        try:
            return super()._reconcile_pending(checkpoint)
        finally:
            self.store = store
            store.version = UNREAD  # its save went around this store: not tracked (P13)


def make_agent(env):
    return ReconcileInPlaceAgent(env)
