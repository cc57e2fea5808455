"""One registry of rules (oracle.REGISTRY): the report's severity order and rule codes, the
guards' stages and the docs' invariants table all follow it."""
from __future__ import annotations

import re
from pathlib import Path

from faultsim.judge import oracle


from faultsim.reports import report
INVARIANTS = Path(__file__).resolve().parent.parent / "docs/reference/invariants.md"


def test_report_severity_and_rule_codes_come_from_the_registry():
    assert report.SEVERITY == tuple(r.invariant for r in oracle.REGISTRY)
    assert report.RULES == {r.invariant: r.rule for r in oracle.REGISTRY}
    assert len(set(report.SEVERITY)) == len(report.SEVERITY)


def test_each_guard_is_registered_at_its_stage():
    stages = {"state": oracle.STATE_GUARDS, "resume": oracle.RESUME_GUARDS,
              "kill": (oracle.no_work_after_kill,),
              "probe": (oracle.unknown_version_refused,)}
    for stage, guards in stages.items():
        assert {g.__name__ for g in guards} == \
            {r.invariant for r in oracle.REGISTRY if r.stage == stage}, stage


def test_the_docs_invariants_table_is_the_registry():
    page = INVARIANTS.read_text()
    table = page.split("<!-- generated: faultsim.judge.oracle.registry_table() -->\n")[1]
    table = table.split("\n<!-- end generated -->")[0]
    assert table == oracle.registry_table()
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (\w+) \| (.+) \|$", table, re.M)
    assert rows == [(r.invariant, r.rule, r.stage, r.summary) for r in oracle.REGISTRY]


def test_a_violation_takes_its_rule_code_from_the_registry():
    v = oracle.Violation.of("completes_or_escalates", "the run hung")
    assert (v.rule, v.explanation) == ("P5", "the run hung")


def test_violations_carry_their_facts_so_no_consumer_parses_prose():
    from faultsim import explore, load_scenario
    from faultsim.settings.loading import load_factory

    from conftest import DATA

    report = explore(load_factory("reference_agent.mutants.key_after_effect"),
                     load_scenario(DATA / "tiny.toml"), crash_model="process", crashes=1)
    dup = [v for f in report.runs[0].failures for v in f.violations
           if v.invariant == "effects_exactly_once"]
    assert dup, "the mutant applies a keyed effect twice"
    for v in dup:
        extra = v.fact("extra")
        assert extra and all(n > 0 for n in extra.values())
        assert all(name in v.explanation for name in extra)  # the prose says the same
