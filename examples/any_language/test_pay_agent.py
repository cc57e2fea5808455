"""The Python script agent (pay_agent.py, on the `anthropic` SDK, importing nothing of
faultsim) run as a command: clean under both crash models after the payment; its planted
twin (`--mistake`) pays twice after a crash there.

One kill point only: each incarnation imports the SDK (seconds on a busy machine);
tests/test_command.py covers every kind of boundary on a standard-library twin."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from faultsim.command import explore
from faultsim.command.syscalls import strace_unavailable
from faultsim.scenario import load_scenario

HERE = Path(__file__).resolve().parent
POINTS = ("k7-after-effect-payments.submit#1",)  # the payment made, its answer not sent

pytestmark = [
    pytest.mark.skipif(strace_unavailable() is not None, reason=str(strace_unavailable())),
    pytest.mark.skipif(importlib.util.find_spec("anthropic") is None,
                       reason="needs the anthropic SDK"),
]


def _explore(*flags: str, only=POINTS):
    command = f"cmd:{sys.executable} {HERE / 'pay_agent.py'} {' '.join(flags)}".strip()
    return explore(command, load_scenario(HERE / "scenario.toml"),
                   crash_models=("process", "power"), only=lambda p: p.id in only)


def test_the_script_agent_is_clean_under_both_models():
    found = _explore()
    assert found.kills_landed == len(POINTS)
    verdicts = [v for run in found.runs.values() for v in run.verdicts]
    assert len(verdicts) >= 2 * len(POINTS)  # a state per model at least
    assert not [v for v in verdicts if v.violations]


def test_its_planted_twin_pays_twice():
    found = _explore("--mistake")
    assert found.kills_landed == 1
    assert {v.crash_model for run in found.runs.values() for v in run.verdicts
            if "effects_exactly_once" in {x.invariant for x in v.violations}} == {
                "process", "power"}
