"""Ids an agent draws are seeded in its process (faultsim.interpose.determinism), however
it reached `uuid4`: here imported by name when its module was loaded, as Agno does (issue
51 item 14), in both modes."""
from __future__ import annotations

import pytest

import faultsim
from conftest import DATA

SCENARIO = faultsim.load_scenario(DATA / "one_charge.toml")


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_uuid4_imported_by_name_at_import_time_is_seeded(mode):
    """`from uuid import uuid4` at import (Agno): the two clean runs draw the same ids."""
    import import_time_uuid_agent

    if mode == "in-process":
        report = faultsim.explore(import_time_uuid_agent.make_agent, SCENARIO, crashes=1,
                                  only=lambda p: p.id == "k1-start-run.id#1")
    else:
        from faultsim.real.explore import explore_subprocess

        report = explore_subprocess("import_time_uuid_agent:make_agent", SCENARIO,
                                    only=lambda p: p.id == "k1-start-run.id#1")
    assert report.ok and len(report.runs[0].verdicts) == 1


def test_a_draw_made_while_a_module_is_imported_does_not_shift_the_agents_ids():
    """The first clean run imports a module that draws a uuid4 at import (an
    OpenTelemetry key); the second finds it imported. Seeded, that one draw would shift the
    first run's ids and the two clean runs would part."""
    import lazy_ids_agent

    report = faultsim.explore(lazy_ids_agent.make_agent, SCENARIO, crashes=1,
                              only=lambda p: p.id == "k1-start-run.id#1")
    assert report.ok and len(report.runs[0].verdicts) == 1
