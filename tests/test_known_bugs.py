"""The known-bugs corpus (bench/known_bugs/): CI runs one entry, langgraph #7417, on the
installed LangGraph only (bench/known_bugs/run.py builds a venv per version for the table):
its expected verdict on that side holds, and each failing state says why."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from faultsim import explore, load_scenario  # noqa: E402
from faultsim.loading import factory_for  # noqa: E402
from faultsim.report import why_of  # noqa: E402

BUG = Path(__file__).resolve().parent.parent / "bench" / "known_bugs" / "langgraph_7417"


def test_langgraph_7417_fails_as_the_report_says_and_each_failure_says_why():
    spec = json.loads((BUG / "bug.json").read_text())
    sc = load_scenario(BUG / spec["scenario"])
    run = explore(factory_for(spec["agent"], sc), sc, agent_name=spec["agent"],
                  crashes=1, crash_model="process").runs[0]
    assert len(run.verdicts) == len(run.kill_points)  # one landed kill per point
    assert (not run.ok) == (spec["expected"]["b"] == "fails")  # the installed one is B's
    found = {(why_of(f) or ("unclassed",))[0] for f in run.failures}  # each is classed
    assert set(spec["expected"]["why"]) <= found <= {"by-design", "ordering"}
    assert all(v.invariant == "effects_exactly_once" for f in run.failures
               for v in f.violations)
