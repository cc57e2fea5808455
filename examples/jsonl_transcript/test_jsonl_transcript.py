"""The JSONL-transcript agent under faultsim: clean under both crash models and two crashes
(its scenario's fault profile); its planted mistake caught."""
from pathlib import Path

import faultsim

HERE = Path(__file__).parent
SCENARIO = faultsim.load_scenario(HERE / "scenario.toml")


def test_the_agent_survives_every_crash(crash_safety):
    crash_safety.check(faultsim.load_factory(f"{HERE / 'agent.py'}:make_agent"), SCENARIO.path)


def test_the_planted_mistake_is_caught():
    broken = faultsim.load_factory(f"{HERE / 'agent.py'}:make_agent_keeps_torn_tail")
    report = faultsim.explore(broken, SCENARIO)  # its profile: both models, two crashes
    assert not report.ok
