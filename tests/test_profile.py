"""The scenario's fault profile drives a run: its crash models, its crash count, and the
downtime between a crash and the restart (which is when receivers forget keys)."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import reference_agent
from faultsim import explore
from faultsim.scenario import parse_scenario
from tests.broken_agents import trusts_keys_forever

TICKETS = Path(__file__).parent.parent / "scenarios" / "support_tickets.toml"


def tickets(profile: dict):
    data = tomllib.loads(TICKETS.read_text())
    data["fault_profile"] = profile
    return parse_scenario(data, "tickets.toml")


def after_effects(point) -> bool:
    return point.category == "after-effect"


@pytest.mark.parametrize("downtime, caught", [("23h", False), ("25h", True)])
def test_a_downtime_longer_than_key_retention_is_found(downtime, caught):
    # The keyed receivers keep keys 24 h. An agent that resends a pending call with the same
    # key, without asking whether the key outlived the downtime, pays twice after 25 h.
    report = explore(trusts_keys_forever, tickets({"downtime": downtime, "crashes": 1}),
                     only=after_effects, workers=2)
    (run,) = report.runs
    assert len(run.explored) == 19 and len(run.verdicts) == 19  # the kills landed
    keyed = {v.kill_point.id for v in run.verdicts if "submit" in v.kill_point.id}
    failed = {v.kill_point.id for v in run.failures}
    assert failed == (keyed if caught else set())
    if caught:
        assert {i.invariant for v in run.failures for i in v.violations} == \
            {"effects_exactly_once"}
        text = run.counterexample(run.failures[0])
        assert "downtime before each restart: 25h (the scenario's fault profile)" in text


def test_the_reference_agent_escalates_instead_after_a_long_downtime():
    report = explore(reference_agent.make_agent, tickets({"downtime": "25h", "crashes": 1}),
                     only=after_effects, workers=2)
    assert report.ok and len(report.runs[0].verdicts) == 19


def test_explore_takes_crash_models_and_crashes_from_the_profile():
    sc = tickets({"crash_models": ["process", "power"], "crashes": 1})
    report = explore(reference_agent.make_agent, sc, only=after_effects, workers=2)
    assert [r.crash_model for r in report.runs] == ["process", "power"]
    assert all(r.crashes == 1 and not r.depths for r in report.runs)
    report = explore(reference_agent.make_agent, sc, workers=2, crash_model="power",
                     crashes=2, only=lambda p: p.id == "k197-after-effect-payments.submit#1")
    # the arguments win
    assert [(r.crash_model, r.crashes) for r in report.runs] == [("power", 2)]
    assert report.runs[0].depth(2).explored > 0
