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


def write_index(f, index: dict, how: str) -> None:
    """Write `index` to the open text file `f` the way `how` says: "once" (one
    f.write of the whole JSON), "dump" (json.dump: many small writes through the text
    file's buffer), "lines" (one f.write per row, a line each)."""
    if how == "once":
        f.write(json.dumps(index))  # one write of INDEX_BYTES
    elif how == "dump":
        json.dump(index, f)  # a write per JSON token: ~100,000 for 50 MB
    else:
        f.write('{"rows": [\n')
        for i, row in enumerate(index["rows"]):
            f.write(("," if i else "") + json.dumps(row) + "\n")
        f.write("]}\n")


class Agent(user_agents.Agent):
    atomic = True
    how = "once"

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
                write_index(f, index, self.how)
            if self.atomic:
                os.replace(target, path)
        return super().run()


class _InPlace(Agent):
    atomic = False


class _Dumps(Agent):
    how = "dump"


class _DumpsInPlace(Agent):
    how, atomic = "dump", False


class _Lines(Agent):
    how = "lines"


def make_agent(env):
    """Correct: the index is written to a temp file and renamed into place."""
    return Agent(env)


def in_place(env):
    """Broken: the index is written in place; a kill inside the write leaves it torn."""
    return _InPlace(env)


def dumps(env):
    """Correct: the index json.dump'ed to a temp file (many small writes), renamed."""
    return _Dumps(env)


def dumps_in_place(env):
    """Broken: the index json.dump'ed in place."""
    return _DumpsInPlace(env)


def lines(env):
    """Correct: the index written a line at a time to a temp file, renamed."""
    return _Lines(env)
