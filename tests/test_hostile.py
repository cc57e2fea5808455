"""Hostile checkpoint files: the reference agent refuses every fixed and every drawn case
loudly, untouched and without quoting it; agents that accept, overwrite or leak are caught."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_agent
from conftest import DATA
from faultsim import load_scenario
from faultsim.formats.hostile import SECRET, Attack, fixed_cases, fuzzed_cases, large_case
from reference_agent.mutants import unknown_version_parsed
from tests.broken_agents import leaks_checkpoint_in_errors, starts_over_on_damage


TINY = load_scenario(DATA / "tiny.toml")


@pytest.fixture
def attack():
    # One attack (one fake filesystem) at a time: load scenarios before entering it.
    with Attack(reference_agent.make_agent, TINY) as a:
        yield a


def test_every_fixed_case_holds_the_secret_and_is_refused(attack):
    cases = fixed_cases(attack.sample) + [large_case(attack.sample)]
    assert len(cases) >= 17
    whole = {c.name for c in cases if SECRET.encode() in c.data}
    assert {"future version", "missing version", "NUL padding", "two records glued",
            "wrong type: turns", "very large file"} <= whole  # the secret is there to leak
    verdicts = [attack(c) for c in cases]
    assert [v.case.name for v in verdicts if not v.ok] == []
    assert all(v.error for v in verdicts)  # refused loudly, with an error each


def test_drawn_cases_are_refused(attack):
    # the database would write to the fake filesystem: none
    @settings(max_examples=60, deadline=None, database=None)
    @given(st.data())
    def refused(data):
        for case in fuzzed_cases(attack.sample, data.draw):
            verdict = attack(case)
            assert verdict.ok, (case.name, verdict.problems)

    refused()


@pytest.mark.parametrize("agent, case, problem", [
    (unknown_version_parsed.make_agent, "future version", "accepted it"),
    (leaks_checkpoint_in_errors, "NUL padding", "quotes the file's content"),
    (starts_over_on_damage, "torn tail", "overwritten or removed"),
], ids=["parses-unknown-version", "leaks", "starts-over"])
def test_agents_that_accept_leak_or_overwrite_are_caught(agent, case, problem):
    with Attack(agent, TINY) as a:
        hostile = next(c for c in fixed_cases(a.sample) if c.name == case)
        verdict = a(hostile)
    assert any(problem in p for p in verdict.problems), verdict.problems
