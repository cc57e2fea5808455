"""The SQLite notes agent under faultsim (subprocess mode, chosen by the scenario's store)."""
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("scenario.toml").name


@pytest.mark.faultsim(SCENARIO, agent="notes_agent:make_agent")
def test_the_agent_survives_every_crash(crash_safety):
    report = crash_safety.check()
    assert report.runs[0].mode == "subprocess" and len(report.runs[0].verdicts) > 20


@pytest.mark.faultsim(SCENARIO, agent="notes_agent:make_agent_without_lookup")
def test_the_planted_mistake_is_caught(crash_safety):
    report = crash_safety.explore()
    broken = {v.invariant for run in report.runs for verdict in run.failures
              for v in verdict.violations}
    assert broken == {"effects_exactly_once"}, broken  # the note, added twice
    # the counterexample shows the rows the database held at the kill, not its bytes
    run = report.runs[0]
    text = run.counterexample(run.failures[0])
    assert "store.db (" in text and "      table messages: " in text, text
    assert "SQLite format 3" not in text
