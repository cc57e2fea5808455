"""P11 broken: no intent record around a blind effect (an email). A crash after the send
and before the result is recorded leaves no trace of it: resume sends it again."""
from ..agent import Agent


class BlindWithoutIntentAgent(Agent):
    def _write_intent(self, call, key, tool):
        pass

    def _complete_intent(self, call, result):
        pass


def make_agent(env):
    return BlindWithoutIntentAgent(env)
