"""P11 broken, only on the recovery path: a resume that finds a blind call (an email)
pending with no intent record re-runs it first and writes the intent and completion after.

With one crash that is harmless: no intent means the call never started, and the resumed
run, not killed again, records what it did. A second crash between the repeated send and
its record leaves no trace of the send, and the next resume sends the email once more.
"""
from ..agent import Agent
from ..tools import BLIND


class RepeatBeforeSaveAgent(Agent):
    _recovering = False

    def _reconcile_pending(self, checkpoint):
        self._recovering = True
        try:
            return super()._reconcile_pending(checkpoint)
        finally:
            self._recovering = False

    def _execute(self, tool, call, key, step):
        if self._recovering and tool.policy == BLIND and self.intents.get(call.id) is None:
            result = tool.run(self, call.input, key)  # the effect first ...
            self._write_intent(call, key, tool)  # ... its record only after it
            self._complete_intent(call, result)
            return result
        return super()._execute(tool, call, key, step)


def make_agent(env):
    return RepeatBeforeSaveAgent(env)
