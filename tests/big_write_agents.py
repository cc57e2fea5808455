"""Agents that write one large file once, as a user writes one (a 50 MB lookup index
built on the first run, written in one call, read back by a resumed run), on
tests/data/one_charge.toml: a correct one (temp file, then `os.replace`) and one that
writes the index in place. Otherwise `user_agents.Agent` (its small state.json saved
atomically after every step). Used by tests/test_torn_bounds.py."""
from __future__ import annotations

import json
import os

import user_agents

INDEX_BYTES = 50 * 1024 * 1024
ROW = "x" * 1000


def build_index() -> dict:
    """A big dict: about INDEX_BYTES of JSON, rows of a lookup table."""
    return {"rows": [ROW] * (INDEX_BYTES // (len(ROW) + 4) + 1)}


class Agent(user_agents.Agent):
    atomic = True

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        path = os.path.join(str(self.env.workdir), "index.json")
        if os.path.exists(path):
            with open(path) as f:
                index = json.load(f)  # a torn index raises here
        else:
            index = build_index()
            target = path + ".tmp" if self.atomic else path
            with open(target, "w") as f:
                f.write(json.dumps(index))  # one write of INDEX_BYTES
            if self.atomic:
                os.replace(target, path)
        return super().run()


class _InPlace(Agent):
    atomic = False


def make_agent(env):
    """Correct: the index is written to a temp file and renamed into place."""
    return Agent(env)


def in_place(env):
    """Broken: the index is written in place; a kill inside the write leaves it torn."""
    return _InPlace(env)
