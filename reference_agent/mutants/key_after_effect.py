"""P8 broken: the idempotency key is made fresh at call time and recorded only after the
effect (in the progress entry). A crash between the effect and that record loses the key;
the retry makes a new one, and the keyed receiver applies the effect a second time."""
import uuid

from ..agent import Agent


class KeyAfterEffectAgent(Agent):
    def idempotency_key(self, call):
        recorded = self.progress.entry_for(call.id) if hasattr(self, "progress") else None
        if recorded is not None:
            return recorded["key"]
        return f"{self.namespace}:{uuid.uuid4().hex}"


def make_agent(env):
    return KeyAfterEffectAgent(env)
