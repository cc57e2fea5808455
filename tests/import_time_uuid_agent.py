"""An agent that imports `uuid4` by name when its module is loaded, as Agno does
(`from uuid import uuid4`), and records each run's id in its workdir: deterministic under
faultsim only if that imported function is seeded too. On tests/data/one_charge.toml;
otherwise tests/user_agents.py's correct agent."""
from __future__ import annotations

import os
from uuid import uuid4

import user_agents


class _RunNamed(user_agents.Agent):
    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        with open(os.path.join(str(self.env.workdir), "run.id"), "w") as f:
            f.write(str(uuid4()))  # as Agno names each run
        return super().run()


def make_agent(env):
    return _RunNamed(env)
