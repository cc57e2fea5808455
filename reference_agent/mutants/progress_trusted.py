"""P10 broken: the progress file is trusted without verifying its evidence against the
real state. A step whose output did not survive (a workspace file lost to power loss) is
taken as done and never redone."""
from ..agent import Agent


class ProgressTrustedAgent(Agent):
    def _verify(self, tool, entry):
        return True


def make_agent(env):
    return ProgressTrustedAgent(env)
