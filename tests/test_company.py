"""A crash state's verdict does not depend on the company it keeps: whichever crash models,
shard, worker count and kill-point selection run beside it, each crash state gets the
verdict the long way gives it (every kill point replayed, `--workers 0`, both crash
models: each kill observed at its own point, resumed runs shared only between equal or
equivalent states).

The agent that showed the difference (tests/company_agent.py) swallows a kill in a
best-effort note and goes on writing: a finding at every kill point inside the note's
save. The forking executor used to judge a point whose crash states were all known from
other points without a child dying there, and dropped what that kill set off: the
finding came and went with the company (a kill point alone: found; beside the one before
it: gone)."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import faultsim
from faultsim.settings.loading import load_factory

from conftest import ROOT

TESTS = Path(__file__).resolve().parent
RECEIPTS = ROOT / "examples" / "receipts" / "scenario.toml"
CASES = {
    "swallows_a_kill": (f"{TESTS / 'company_agent.py'}:make_agent", RECEIPTS),
    "without_intents": (f"{ROOT / 'examples/receipts/receipts_agent.py'}"
                        ":make_agent_without_intents", RECEIPTS),
}
_long_way: dict = {}


def _verdicts(report) -> dict:
    return {(run.crash_model, v.kill_point.id, v.order):
            tuple(sorted((x.invariant, x.explanation) for x in v.violations))
            for run in report.runs for v in run.verdicts}


def _reference(case: str):
    """Every kill point of both crash models, replayed one by one (cached per case)."""
    if case not in _long_way:
        spec, scenario = CASES[case]
        report = faultsim.explore(load_factory(spec), faultsim.load_scenario(scenario),
                                  crash_model="all", crashes=1, workers=0)
        points = report.runs[0].kill_points
        _long_way[case] = (points, _verdicts(report))
    return _long_way[case]


def test_the_probe_agent_is_a_finding_at_each_kill_inside_its_note():
    points, verdicts = _reference("swallows_a_kill")
    inside = [p.id for p in points if "progress.json" in p.where]
    found = {pid for (model, pid, _), v in verdicts.items()
             if model == "process" and any(i == "no_work_after_kill" for i, _ in v)}
    assert len(inside) >= 10 and set(inside) <= found  # every kill inside the note
    # and the receipts agent it is built on is clean there (the swallow is the finding)
    clean = faultsim.explore(load_factory(f"{ROOT / 'examples/receipts/receipts_agent.py'}"
                                          ":make_agent"), faultsim.load_scenario(RECEIPTS),
                             crash_model="process", crashes=1)
    assert clean.ok


@st.composite
def _company(draw):
    case = draw(st.sampled_from(sorted(CASES)))
    points, _ = _reference(case)
    how = draw(st.sampled_from(["window", "shard", "all"]))
    only, shard = None, None
    if how == "window":  # a few neighbouring kill points: they often share states
        start = draw(st.integers(0, len(points) - 1))
        ids = {p.id for p in points[start:start + draw(st.integers(1, 6))]}
        only = sorted(ids)
    elif how == "shard":
        n = draw(st.integers(2, 4))
        shard = (draw(st.integers(1, n)), n)
    model = draw(st.sampled_from(["process", "all"]))
    workers = draw(st.sampled_from([0, 1, 2]))
    return case, only, shard, model, workers


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(_company())
# the company that once dropped a finding: the note's kill points k15-k17, side by side
@example(("swallows_a_kill", ["k15-after-tool-before-B-progress.json.tmp#1",
                              "k16-after-tool-before-B-progress.json.tmp#2",
                              "k17-after-tool-before-B-progress.json.tmp#3"],
          None, "process", 2))
@example(("swallows_a_kill", None, (1, 1), "all", 2))
def test_a_crash_state_gets_one_verdict_whatever_runs_beside_it(company):
    case, only, shard, model, workers = company
    points, reference = _reference(case)
    spec, scenario = CASES[case]
    keep = None if only is None else set(only)
    report = faultsim.explore(load_factory(spec), faultsim.load_scenario(scenario),
                              crash_model=model, crashes=1, workers=workers, shard=shard,
                              only=None if keep is None else (lambda p: p.id in keep))
    got = _verdicts(report)
    assert got  # something was judged
    for state, verdict in got.items():
        assert verdict == reference[state], state
