"""`--shard I/N` splits distinct crash states, not kill points: every shard crashes at
every kill point and resumes only the states it owns (faultsim.inprocess.sharding). The
shards' resumed runs add up to the whole run's, and together they judge every crash state
with the whole run's verdict; `faultsim report merge` joins their reports into the whole
run's report, timings aside."""
from __future__ import annotations

import pytest

import faultsim
from faultsim.loading import load_factory

from conftest import DATA, ROOT

TINY = DATA / "tiny.toml"
RECEIPTS = ROOT / "examples" / "receipts" / "scenario.toml"
CASES = {  # a clean agent and one with findings (a kill swallowed in a best-effort note)
    "reference": ("reference_agent", TINY),
    "swallows_a_kill": (f"{ROOT / 'tests' / 'company_agent.py'}:make_agent", RECEIPTS),
}


def _verdicts(report) -> dict:
    return {(run.crash_model, v.kill_point.id, v.order):
            tuple(sorted((x.invariant, x.explanation) for x in v.violations))
            for run in report.runs for v in run.verdicts}


def _explore(case, workers, shard=None):
    spec, scenario = CASES[case]
    return faultsim.explore(load_factory(spec), faultsim.load_scenario(scenario),
                            crash_model="process" if case == "reference" else "all",
                            crashes=1, workers=workers, shard=shard)


@pytest.mark.parametrize("case,workers", [("reference", 2), ("swallows_a_kill", 1)])
def test_shards_partition_the_states_and_their_resumed_runs(case, workers):
    whole = _explore(case, workers)
    shards = [_explore(case, workers, (i, 3)) for i in (1, 2, 3)]
    judged = lambda r: sum(run.judged for run in r.runs)  # noqa: E731
    reused = lambda r: sum(run.reused for run in r.runs)  # noqa: E731
    assert judged(whole) > 3  # enough states that three shards each get some
    # exactly the whole run's resumed runs, split: the equal-state memo is kept
    assert sum(judged(s) for s in shards) == judged(whole)
    assert sum(reused(s) for s in shards) == reused(whole)
    assert all(judged(s) < judged(whole) for s in shards)  # and really split
    together: dict = {}
    for s in shards:
        mine = _verdicts(s)
        assert not (together.keys() & mine.keys())  # no state judged twice
        together.update(mine)
    assert together == _verdicts(whole)  # every state, with the whole run's verdict
    if case == "swallows_a_kill":
        assert any(together.values())  # the findings are there, in some shard
