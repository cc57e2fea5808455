"""A user's agent that is slow to start: before its first model request it waits for an
upstream service (a real sleep, `SLOW_AGENT_SECONDS`, default 1 s), as an agent warming a
cache or waiting on a rate limit does. Otherwise it is `tests/state_agent.py`'s careful
agent (state.json, written atomically). tests/test_progress.py watches faultsim talk while
its clean runs are slow."""
from __future__ import annotations

import os
import time

from tests.state_agent import StateAgent


def wait_for_upstream() -> None:
    time.sleep(float(os.environ.get("SLOW_AGENT_SECONDS", "1.0")))


class SlowStart(StateAgent):
    def run(self):
        if not os.path.exists(self.path):  # a fresh start, not a resume
            wait_for_upstream()
        return super().run()


def make_agent(env):
    return SlowStart(env)
