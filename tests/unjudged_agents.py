"""Agents faultsim cannot judge at one kill point (tests/test_unjudged_points.py), written
the way a user writes one (tests/user_agents.py) on tests/data/one_charge.toml: one whose
crash run goes another way at one point, one that ends its own process when it resumes
from one state. Used in both modes (subprocess mode loads them as `unjudged_agents:NAME`)."""
from __future__ import annotations

import os
import signal

from user_agents import Agent

# How many of its next fresh starts find their folder made already (a leftover of another
# run, as a second `mkdir` of an existing folder in the issue): the test sets it for the
# crash runs of one kill point only.
LEFTOVER = {"starts": 0}


class MakesItsFolder(Agent):
    """Makes its workdir with `os.mkdir` (no exist_ok) on a fresh start: where the folder is
    there already, its run ends with FileExistsError before any model request."""

    def run(self):
        if LEFTOVER["starts"] > 0 and not os.path.exists(self.path):
            LEFTOVER["starts"] -= 1
            os.makedirs(str(self.env.workdir), exist_ok=True)  # the leftover
            os.mkdir(str(self.env.workdir))
        return super().run()


class EndsItsProcess(Agent):
    """Resumed from a checkpoint that holds the final answer already, it ends its process
    (a CLI's `os._exit` after printing the answer) instead of returning it."""

    how = "exit"

    def recovering(self, state):
        last = state["messages"][-1]
        if last["role"] == "assistant" and not any(b["type"] == "tool_use"
                                                   for b in last["content"]):
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)


class KillsItself(EndsItsProcess):
    how = "sigkill"


def makes_its_folder(env):
    return MakesItsFolder(env)


def ends_its_process(env):
    return EndsItsProcess(env)


def kills_itself(env):
    return KillsItself(env)
