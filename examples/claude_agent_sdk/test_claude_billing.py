"""The test a team's CI would run on its Claude Agent SDK agent: kill it right after the
payment went out, resume it from the files the kill left, and check nothing is paid or
sent twice (faultsim's oracle). The full sweep is findings.py (minutes)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is not installed "
                    "(pip install 'faultsim[claude-agent-sdk]')")

import faultsim  # noqa: E402
from faultsim.adapters.claude_agent_sdk import cli_unavailable, explore  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import claude_billing_agent  # noqa: E402


def test_a_kill_after_the_payment_resumes_without_paying_twice():
    if cli_unavailable():
        pytest.skip(cli_unavailable())
    scenario = faultsim.load_scenario(HERE / "scenario.toml")
    result = explore(claude_billing_agent.run_billing, scenario, prefixes="written",
                     only=lambda kp: kp.key == ("after-effect", "pay", 1), writes=False)
    assert result.kills_landed == 1 and len(result.verdicts) == 1
    # fails with faultsim's counterexample and the command that replays it
    result.assert_ok(f"claude-agent-sdk:{HERE / 'claude_billing_agent.py'}:run_billing")
