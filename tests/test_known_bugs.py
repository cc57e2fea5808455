"""The known-bugs corpus (bench/known_bugs/): CI runs langgraph #7417 on the installed
LangGraph only (bench/known_bugs/run.py builds a venv per version for the table): its
expected verdict on that side holds, and each failing state says why; openai-agents
#4827's clean run on the installed openai-agents, the fix's; and pydantic-ai #7977 on the
installed pydantic-ai, which has the fix: the report's cancellation resumes, a crash's
state still fails. Every entry, those whose framework is not installed here included, is
checked for its form: the fields run.py reads, a scenario that loads, an agent file that
exists, and its row in the README's table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultsim import explore, load_scenario  # noqa: E402
from faultsim.settings.loading import factory_for  # noqa: E402
from faultsim.reports.report import why_of  # noqa: E402

BUG = Path(__file__).resolve().parent.parent / "bench" / "known_bugs" / "langgraph_7417"
ROOT = BUG.parent.parent.parent
VERDICTS = {"fixed by B", "broken by B", "fails in both", "passes in both"}


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in BUG.parent.glob("*/bug.json")))
def test_every_entry_has_what_run_py_reads_and_a_row_in_the_table(folder):
    bug = BUG.parent / folder
    spec = json.loads((bug / "bug.json").read_text())
    for field in ("bug", "link", "title", "summary", "agent", "scenario", "a", "b", "expected"):
        assert spec.get(field), f"{folder}/bug.json: {field} missing"
    for side in ("a", "b"):
        assert spec[side]["name"] and spec[side]["pip"], f"{folder}/bug.json: {side}"
        if spec[side].get("patch"):
            assert (bug / spec[side]["patch"]).is_file()
    want = spec["expected"]
    assert want["a"] in ("fails", "passes") and want["b"] in ("fails", "passes")
    assert want["differential"] and set(want["differential"]) <= VERDICTS
    for scenario in filter(None, (spec["scenario"], spec.get("control"))):
        load_scenario(bug / scenario)  # raises, naming the file and field, if malformed
    agent_file = spec["agent"].split(":")[0]
    if agent_file.endswith(".py"):
        assert (ROOT / agent_file).is_file(), f"{folder}/bug.json: agent {agent_file}"
    table = (BUG.parent / "README.md").read_text()
    assert f"| [{spec['bug']}]({spec['link']}) | {spec['a']['name']} | {spec['b']['name']} |" \
        in table, f"{folder}: no row in bench/known_bugs/README.md's table"


def test_langgraph_7417_fails_as_the_report_says_and_each_failure_says_why():
    pytest.importorskip("langgraph")
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


def test_openai_agents_4827_on_the_installed_fix_carries_the_conversation_to_its_follow_up(
        tmp_path):
    """The installed openai-agents is the fix's (0.24, B): the two-turn scenario's clean run
    sends the follow-up into the session and completes with its answer (on 0.23.1 that
    request carries the orphan tool result and the API refuses it: run.py's table)."""
    pytest.importorskip("agents")
    from faultsim.pipeline.runner import ScenarioRun

    bug = BUG.parent / "openai_agents_4827"
    spec = json.loads((bug / "bug.json").read_text())
    assert spec["expected"]["b"] == "passes"
    sc = load_scenario(bug / spec["scenario"])
    assert sc.script.follow_ups  # the turn that reads the session back
    with ScenarioRun(sc, factory_for(spec["agent"], sc), workdir=tmp_path) as run:
        outcome = run.incarnation()
    assert (outcome.status, outcome.final_answer) == ("completed", sc.expected_final_answer)
    assert all(q.ok for q in run.world.model.requests)
    assert len(run.world.ledger.applied("refunds")) == 1


def test_pydantic_ai_7977_on_the_installed_fix_is_still_reached_by_a_crash():
    """The installed pydantic-ai has #7977's fix (PR #7993, 2.38.0): the report's own
    cancellation resumes with a new prompt. A kill runs no teardown, so the states the
    entry expects to fail in both still fail with the report's UserError; the same agent
    resumed without a prompt passes them all (the remedy the entry names)."""
    pytest.importorskip("pydantic_ai")
    import asyncio
    import importlib.util

    from faultsim.adapters.pydantic_ai import agent_factory

    bug = BUG.parent / "pydantic_ai_7977"
    spec = json.loads((bug / "bug.json").read_text())
    assert spec["expected"] == {"a": "fails", "b": "fails",
                                "differential": ["fails in both"], "why": []}
    def load(name: str):  # by path, under a name no other test's module has
        found = importlib.util.spec_from_file_location(f"pydantic_ai_7977_{name}",
                                                       bug / f"{name}.py")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        return module

    assert asyncio.run(load("cancelled").main()) == "resumed"  # the fix is installed
    entry = load("agent")
    sc = load_scenario(bug / spec["scenario"])
    run = explore(factory_for(spec["agent"], sc), sc, agent_name=spec["agent"],
                  crashes=1, crash_model="process").runs[0]
    assert run.failures and all(
        v.invariant == "completes_or_escalates" and "unprocessed tool calls" in v.explanation
        for f in run.failures for v in f.violations)
    assert "in-tool" in {f.kill_point.category for f in run.failures}  # the report's window
    resumed = explore(agent_factory(entry.build_agent, history="history.json",
                                    resume="continue"), sc, agent_name="continue",
                      crashes=1, crash_model="process").runs[0]
    assert resumed.ok and len(resumed.verdicts) == len(run.verdicts)
