"""The receipts agent under faultsim, as its team's CI would run it."""
from pathlib import Path

import pytest

import faultsim

from receipts_agent import make_agent, make_agent_without_intents

SCENARIO = Path(__file__).with_name("scenario.toml")


@pytest.mark.faultsim(SCENARIO.name, agent=make_agent)
def test_the_agent_survives_every_crash(crash_safety):
    report = crash_safety.check()  # fails with a replayable counterexample otherwise
    assert sum(len(run.verdicts) for run in report.runs) > 100


def test_the_planted_mistake_is_caught():
    report = faultsim.explore(make_agent_without_intents, faultsim.load_scenario(SCENARIO),
                              crashes=1)
    broken = {v.invariant for run in report.runs for verdict in run.failures
              for v in verdict.violations}
    assert "effects_exactly_once" in broken  # the receipt, sent twice
