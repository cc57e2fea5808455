"""What the protocol counts as repeated (issue 51, item 15; docs/reference/invariants.md):
a queryable write sets the record's fields, so setting the values it already holds is no
second effect; and a turn asked again after a crash is one repeated step, the calls its
answer names included. Each decision proven both ways on agents written the way a
framework user writes one (tests/session_agents.py: plain Python over the anthropic SDK,
a session saved after each turn's tools). The receiver's side of the first is in
tests/test_world.py."""
from __future__ import annotations

import pytest

import session_agents as agents
from conftest import DATA
from faultsim import explore, load_scenario


@pytest.fixture(scope="module")
def refund():
    return load_scenario(DATA / "session_refund.toml")


def _violations(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for run in report.runs:
        for verdict in run.failures:
            for v in verdict.violations:
                out.setdefault(v.invariant, []).append((verdict.kill_point, v))
    return out


# -- both decisions on a session-per-turn agent ----------------------------------------------
def test_a_session_per_turn_agent_passes(refund):
    # after a kill inside a tool the resume asks that turn again and re-sends its keyed
    # charge (deduplicated) or re-sets the CRM status (already held): one step per crash,
    # no effect twice
    report = explore(agents.make_agent, refund, crashes=1)
    run = report.runs[0]
    assert {v.kill_point.category for v in run.verdicts} >= {"in-tool", "after-effect"}
    assert report.ok, report.counterexamples(limit=2)
    reasked = [q for q in run.verdicts if q.kill_point.category == "after-effect"]
    assert reasked  # the states where the turn is asked again were judged


def test_a_set_with_other_values_on_replay_is_a_second_effect(refund):
    report = explore(agents.make_agent_stamps_run_id, refund, crashes=1)
    found = _violations(report)["effects_exactly_once"]
    after_the_set = [v for point, v in found if point.category == "after-effect"
                     and "crm.apply" in v.explanation]
    assert after_the_set, [v.explanation for _, v in found]
    assert all("applied 1 times, the clean run 0" in v.explanation for v in after_the_set)


def test_a_charge_re_sent_with_a_fresh_key_is_applied_twice(refund):
    # the re-sent charge is no longer recognised by its key: applied again, it is a
    # duplicate and a step of its own beside the re-asked turn
    report = explore(agents.make_agent_fresh_key, refund, crashes=1)
    found = _violations(report)
    assert set(found) == {"effects_exactly_once", "one_step_repeated_per_crash"}, set(found)
    assert all("billing.submit" in v.explanation and "applied 2 times, the clean run 1"
               in v.explanation for _, v in found["effects_exactly_once"])
    assert {(v.fact("reasked"), v.fact("extra_attempts"), v.fact("resent"))
            for _, v in found["one_step_repeated_per_crash"]} == {(1, 1, 0)}


def test_redoing_two_turns_after_one_crash_is_two_steps(refund):
    report = explore(agents.make_agent_saves_at_end, refund, crashes=1)
    found = _violations(report)
    assert set(found) == {"one_step_repeated_per_crash"}, set(found)
    facts = {(v.fact("reasked"), v.fact("extra_attempts"))
             for _, v in found["one_step_repeated_per_crash"]}
    # two or three turns asked again (the answer's too, when the kill came after it), the
    # calls they re-sent counted with them: no extra attempt of their own
    assert facts == {(2, 0), (3, 0)}, facts
