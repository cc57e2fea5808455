"""Two versions of one user's agent for `faultsim compare` (tests/test_compare.py): the
receipts example's agent, and its next version, which also writes one harmless file
(`started.txt`, once, before anything else). Every kill-point index after that write shifts
by its events; the crash states mean the same and must align by identity."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "receipts"))

from receipts_agent import ReceiptAgent  # noqa: E402


class StampingAgent(ReceiptAgent):
    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        stamp = os.path.join(str(self.env.workdir), "started.txt")
        if not os.path.exists(stamp):  # a resumed run has it already: nothing to redo
            with open(stamp, "w") as f:
                f.write("v2\n")
        return super().run()


def make_agent_v1(env):
    return ReceiptAgent(env, intents=False)


def make_agent_v2(env):
    return StampingAgent(env, intents=False)
