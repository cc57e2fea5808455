"""A user's agent whose verdicts once depended on the company they kept: the receipts
example's agent plus a best-effort progress note, saved atomically, whose bare `except:`
(meant for a full disk) also swallows a kill and lets the dead incarnation go on working.

A kill inside the note's save is a finding at each such kill point (the incarnation kept
working after its kill). The crash states those kills leave differ from a judged one only
in the note's temporary file, which a resumed run never looks at before writing it over,
so they share that state's resumed run; the forking executor then forked no child at
those points and dropped what their kills set off. Whether a kill point was a finding
depended on which other kill points (and crash models) ran beside it: alone, found;
with the point before it, gone."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "receipts"))

from receipts_agent import ReceiptAgent, write_atomic  # noqa: E402


class NotingAgent(ReceiptAgent):
    def use(self, call: dict) -> dict:
        result = super().use(call)
        try:  # best effort: a note that fails must never stop the agent
            write_atomic(os.path.join(str(self.env.workdir), "progress.json"),
                         {"last_tool": call["name"]})
        except:  # noqa: E722 (as written in the wild; it catches the kill too)
            pass
        return result


def make_agent(env):
    return NotingAgent(env)


