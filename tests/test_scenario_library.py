"""The bundled scenarios (`scenarios/`): each loads, runs clean to its expected final answer,
has the feature it exists for, and lets faultsim catch the mutant that breaks the rule that
feature stresses. (That the reference agent passes every one of them under its fault
profile is what README's first command shows; tests/test_docs.py runs it.)"""
from __future__ import annotations

from pathlib import Path

import pytest

import reference_agent
from faultsim import explore, load_scenario, run_once
from reference_agent.mutants import NAMES
from reference_agent.tools import TOOLS

SCENARIOS = Path(__file__).parent.parent / "scenarios"
FILES = sorted(SCENARIOS.glob("*.toml"))


def scenario(name: str):
    return load_scenario(SCENARIOS / f"{name}.toml")


def test_the_library_has_the_seven_scenarios_of_the_issue():
    assert {f.stem for f in FILES} >= {
        "support_tickets", "research_50_steps", "refunds", "customer_notifications",
        "parallel_tools", "three_subagents", "flaky_api"}


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_each_scenario_runs_clean_to_its_expected_final_answer(path):
    sc = load_scenario(path)
    assert sc.id == path.stem
    used = {c.name for s in (sc.script, *sc.subagents) for t in s.turns for c in t.tool_calls}
    assert used <= set(TOOLS)
    record = run_once(sc, reference_agent.make_agent)
    assert record.outcome.status == "completed"
    assert record.outcome.final_answer == sc.expected_final_answer
    assert not record.world.model.invalid_requests and not record.world.model.script_errors


def test_research_task_has_fifty_steps_in_one_conversation():
    sc = scenario("research_50_steps")
    assert sc.script.tool_turns == 50 and not sc.subagents


def test_refunds_go_through_a_keyed_payment_receiver_after_a_downtime():
    sc = scenario("refunds")
    kinds = {s.name: s.kind for s in sc.services}
    assert kinds["payments"] == "keyed" and sc.profile.downtime == 6 * 3600
    charges = [c for t in sc.script.turns for c in t.tool_calls if c.name == "charge_payment"]
    assert len(charges) == 3 and all(c.input["amount_cents"] < 0 for c in charges)


def test_notifications_go_through_a_blind_receiver_under_both_crash_models():
    sc = scenario("customer_notifications")
    assert {s.name: s.kind for s in sc.services}["email"] == "blind"
    assert sc.profile.crash_models == ("process", "power")


def test_parallel_tools_has_turns_of_several_calls():
    sc = scenario("parallel_tools")
    assert [len(t.tool_calls) for t in sc.script.turns if t.tool_calls] == [4, 3]


def test_three_subagents():
    assert [s.tag for s in scenario("three_subagents").subagents] == ["triage", "billing",
                                                                      "comms"]


def test_flaky_api_is_answered_529_and_429_and_the_sdk_retries_each_once_more():
    sc = scenario("flaky_api")
    record = run_once(sc, reference_agent.make_agent)
    failed = [(r.position, r.status) for r in record.world.model.requests if not r.ok]
    assert failed == [(0, 529), (1, 529), (1, 529), (2, 429), (3, 429), (3, 429)]
    # each effect once, as in a run without faults
    assert sorted(record.world.ledger.effect_counts().values()) == [1, 1, 1]


def test_a_crash_between_an_api_fault_and_its_retry_is_explored():
    sc = scenario("flaky_api")
    report = explore(reference_agent.make_agent, sc, crashes=1, workers=2)
    (run,) = report.runs
    golden = {e.index: e for e in run.verdicts[0].golden.trace}
    faulted = {v.kill_point.id for v in run.verdicts if v.kill_point.offset is None
               and golden.get(v.kill_point.index) is not None
               and golden[v.kill_point.index].kind == "model.response"
               and golden[v.kill_point.index].detail[:3] in ("529", "429")}
    assert len(faulted) == 6  # a kill landed after each faulted answer, before its retry
    assert report.ok


# The mutant each scenario's feature exposes, caught on that scenario with the invariant
# that guards the broken rule (single crashes at the kill points that matter, for time).
CAUGHT = {
    "refunds": ("key_after_effect", "effects_exactly_once", ("after-effect", "in-tool")),
    "customer_notifications": ("blind_without_intent", "effects_exactly_once",
                               ("after-effect",)),
    "parallel_tools": ("orphan_tool_use", "api_valid", ("after-effect", "in-tool")),
    "three_subagents": ("save_b_only", "effects_exactly_once", ("after-effect",)),
    "research_50_steps": ("counters_reset", "counters_continue", ("after-B",)),
    "flaky_api": ("save_b_only", "effects_exactly_once", ("after-effect",)),
}


def caught_sweep(shared_cache, name: str):
    """The sweep of scenario `name`'s mutant (CAUGHT) at its categories, one crash, process
    model: made once per session (tests/shared_runs.py) and read by the test below and by
    tests/test_representative_detection.py, which classes the same sweep's violations.
    Sound: the same call gives the same report, timings aside (the project's rule), and
    each reader gets a fresh copy."""
    mutant, _, categories = CAUGHT[name]

    def sweep():
        module = __import__(f"reference_agent.mutants.{mutant}", fromlist=["make_agent"])
        only = lambda p: p.category in categories  # noqa: E731
        return explore(module.make_agent, scenario(name), crashes=1, workers=2, only=only,
                       crash_model="process")

    return shared_cache.get(f"scenario library: {mutant} on {SCENARIOS / name}.toml at "
                            f"{categories}, crashes=1, process", sweep)


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_each_scenario_catches_its_mutant(name, shared_cache):
    mutant, invariant, categories = CAUGHT[name]
    assert mutant in NAMES
    sc = scenario(name)
    only = lambda p: p.category in categories  # noqa: E731
    report = caught_sweep(shared_cache, name)
    (run,) = report.runs
    assert run.explored and len(run.verdicts) >= len(run.explored)  # the kills landed
    assert invariant in {v.invariant for f in run.failures for v in f.violations}
    clean = explore(reference_agent.make_agent, sc, crashes=1, workers=2, only=only,
                    crash_model="process")
    assert clean.ok  # the same kill points on the reference agent


def test_a_subagent_starting_its_first_turn_is_not_a_restart_of_the_parent():
    # While the parent reconciles a pending run_subagent, the child asks for its own turn 1.
    # Only the parent asking for ITS turn 1 again is a silent restart.
    from tests.broken_agents import starts_over

    sc = scenario("three_subagents")
    only = lambda p: p.category in ("after-model-response", "between-A-and-tool")  # noqa: E731
    clean = explore(reference_agent.make_agent, sc, crashes=1, workers=2, only=only)
    assert clean.ok and len(clean.runs[0].verdicts) > 100
    broken = explore(starts_over, sc, crashes=1, workers=2, only=only)
    assert "no_silent_restart" in {v.invariant for f in broken.runs[0].failures
                                   for v in f.violations}
