"""P9 broken: progress entries are appended blindly, so a step retried after a crash is
logged twice (and the summary written from the progress file counts it twice)."""
from ..agent import Agent
from ..records import Progress


class AppendingProgress(Progress):
    def record(self, entry):
        self.data["steps"].append(entry)
        self.save()


class ProgressAppendedAgent(Agent):
    progress_class = AppendingProgress


def make_agent(env):
    return ProgressAppendedAgent(env)
