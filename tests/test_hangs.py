"""A resumed agent that hangs: stopped at a limit derived from the clean runs (10x the
slower clean incarnation, at least 3 s; `timeout=` overrides), reported with where it was
stuck, the same in both modes; equal and equivalent hung states share one hang. The
agents are tests/user_agents.py's, on tests/data/one_charge.toml."""
from __future__ import annotations

import pytest

import faultsim
import user_agents
from conftest import DATA
from faultsim.pipeline.incarnation import HANG_FLOOR, resumed_limit
from faultsim.real.explore import explore_subprocess

SCENARIO = faultsim.load_scenario(DATA / "one_charge.toml")
# resumed from a checkpoint holding the tool call in flight: the probe waits for its lock
AT_THE_TOOL_CALL = "k9-after-model-response-state.json#2"
# the checkpoint's next atomic write, killed before, inside and after its temp file: the
# resumed run reads state.json and hangs before it ever looks at the temp file
AROUND_THE_TEMP_FILE = ("k13-", "k14.", "k14-", "k15-")


def _line(text: str) -> int:
    with open(user_agents.__file__) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def _hangs(report) -> list[str]:
    return [v.explanation for run in report.runs for f in run.failures
            for v in f.violations if v.invariant == "completes_or_escalates"]


def test_the_default_limit_derives_from_the_clean_runs():
    assert resumed_limit("auto", [0.004, 0.02]) == HANG_FLOOR == 3.0  # the floor
    assert resumed_limit("auto", [1.2, 0.9]) == 12.0  # 10x the slower clean incarnation
    assert resumed_limit(7.5, [100.0]) == 7.5 and resumed_limit(None, [1.0]) is None


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_a_hang_is_stopped_at_the_derived_limit_with_where_it_was_stuck(mode):
    only = lambda p: p.id == AT_THE_TOOL_CALL  # noqa: E731
    if mode == "in-process":
        report = faultsim.explore(user_agents.hangs_on_resume, SCENARIO, crashes=1,
                                  only=only)
    else:
        report = explore_subprocess("user_agents:hangs_on_resume", SCENARIO, only=only)
    (run,) = report.runs
    assert [p.id for p in run.explored] == [AT_THE_TOOL_CALL]  # the one kill, landed
    (hang,) = _hangs(report)
    # the same words in both modes: the floor (the clean runs take milliseconds), then the
    # agent's own frames, innermost first, its lines where they are stable
    assert hang == ("the resumed agent hung: no answer within 3 s; stuck in wait_for_lock "
                    "(tests/user_agents.py), called from recovering "
                    f"(tests/user_agents.py:{_line('wait_for_lock(lock)')}), called from run "
                    f"(tests/user_agents.py:{_line('self.recovering(state)')})")


def test_an_explicit_timeout_overrides_the_derived_one():
    report = faultsim.explore(user_agents.hangs_on_resume, SCENARIO, crashes=1, timeout=1,
                              only=lambda p: p.id == AT_THE_TOOL_CALL)
    (hang,) = _hangs(report)
    assert "no answer within 1 s; stuck in wait_for_lock" in hang


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_a_correct_agent_never_hangs_under_the_derived_limit(mode):
    """The whole sweep of the correct twin, resumed runs in forked children or fresh
    processes on a shared machine: not one of them reaches the derived limit."""
    if mode == "in-process":
        report = faultsim.explore(user_agents.make_agent, SCENARIO, crashes=1)
    else:
        from helpers import part_of

        report = explore_subprocess("user_agents:make_agent", SCENARIO, only=part_of(1, 2))
    (run,) = report.runs
    assert len(run.verdicts) == len(run.explored) > 10
    assert report.ok, report.counterexamples(1)


def test_hung_states_share_one_hang_exactly_as_resuming_each():
    """The states around the next checkpoint write differ only in its temp file, which the
    hung run never looked at: one hang stands for them all, and resuming every one of
    them (the long way) gives the same verdicts."""
    only = lambda p: p.id.startswith(AROUND_THE_TEMP_FILE)  # noqa: E731
    shared = faultsim.explore(user_agents.hangs_on_resume, SCENARIO, crashes=1, timeout=1,
                              only=only)
    every = faultsim.explore(user_agents.hangs_on_resume, SCENARIO, crashes=1, timeout=1,
                             only=only, equivalences=False)

    def verdicts(report):
        return [(v.kill_point.id, v.order, [(x.invariant, x.explanation)
                                             for x in v.violations])
                for v in report.runs[0].verdicts]

    assert verdicts(shared) == verdicts(every)
    assert len(_hangs(shared)) == len(shared.runs[0].verdicts) == 6  # six kills, all hung
    # equal states share in both; the temp file's torn contents only with equivalences
    assert shared.runs[0].judged == 1 and every.runs[0].judged == 5  # one hang, not five


def test_the_plugins_kill_point_items_derive_the_limit_too(tmp_path):
    """The pytest plugin's items (one kill point each, the clean runs shared between xdist
    workers through a file) stop a hang at the same derived limit, not at 30 s."""
    from faultsim.inprocess.pointwise import PointwiseExplorer

    def explorer():
        found = PointwiseExplorer(user_agents.hangs_on_resume, SCENARIO,
                                  agent_name="user_agents:hangs_on_resume", crashes=1)
        found.golden_cache = tmp_path / "golden.pickle"
        return found

    first = explorer()
    (hang,) = _hangs(first.check(AT_THE_TOOL_CALL))
    assert first.timeout == HANG_FLOOR and "no answer within 3 s" in hang
    second = explorer()  # another worker: reads the first one's clean runs and limit
    second.record_golden()
    assert second.timeout == HANG_FLOOR and second.golden is not None
