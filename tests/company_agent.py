"""A user's agent whose verdicts once depended on the company they kept: the receipts
example's agent plus a best-effort progress note, saved atomically, whose bare `except:`
(meant for a full disk) also swallows a kill and lets the dead incarnation go on writing.

A kill inside the note's save is a finding at each such kill point (the incarnation kept
working after its kill). The kill points just after the note's temporary file is written
and just after it is fsynced leave equal crash states: the forking executor resumed the
second one's state by the first one's run and dropped what the kill at the second point
set off, so whether a kill point was a finding depended on which other kill points (and
crash models) ran beside it."""
from __future__ import annotations

import json
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


