"""Prints, as JSON, the verdicts of one sweep of tests/data/tiny.toml (one process crash,
the reference agent and the save_b_only mutant) on the anthropic SDK of the interpreter
running it, with that SDK's version: tests/test_sdk_lines.py runs it under two
interpreters (2.x and an SDK below 2.0) and compares what they print.

    python tests/sdk_verdicts.py"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # reference_agent, as the suite imports it

import anthropic  # noqa: E402

from faultsim import load_scenario  # noqa: E402
from faultsim.inprocess.explore import explore  # noqa: E402
from faultsim.reports.text import states  # noqa: E402

import reference_agent  # noqa: E402
from reference_agent.mutants import save_b_only  # noqa: E402

scenario = load_scenario(ROOT / "tests" / "data" / "tiny.toml")
verdicts = {}
for name, module in (("reference", reference_agent), ("save_b_only", save_b_only)):
    report = explore(module.make_agent, scenario, crashes=1, crash_model="process")
    verdicts[name] = [states(run) for run in report.runs]
print(json.dumps({"anthropic": anthropic.__version__, "verdicts": verdicts}))
