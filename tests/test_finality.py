"""The kill is final (faultsim/interpose/finality.py): cleanup that runs as the in-process kill
unwinds leaves nothing in the crash state and is no finding; an agent that swallows the
kill and goes on is reported, once, where it went on; threads end with their incarnation
and one still working after run() returns is stopped and reported. Each guard proven on
agents written as users write them (tests/finality_agents.py), its kills counted."""
from __future__ import annotations

import atexit
import inspect

import pytest

import faultsim
from faultsim.real.explore import explore_subprocess
from tests import finality_agents as agents
from tests.helpers import scenario_from
from tests.test_checkpoints import BASE


@pytest.fixture(scope="module")
def charge(tmp_path_factory):
    return scenario_from(tmp_path_factory, BASE.format(
        id="finality", checkpoint='[checkpoint]\nfiles = ["state.json"]\n'))


def _line(func, text: str) -> int:
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _verdicts(report) -> list:
    return [v for run in report.runs for v in run.verdicts]


def _landed_everywhere(report) -> int:
    """Every kill point explored has its verdict (a kill that did not land raises)."""
    for run in report.runs:
        assert {v.kill_point.id for v in run.verdicts} == {p.id for p in run.explored}
    return len(_verdicts(report))


def _files(verdict) -> dict:
    return dict(verdict.state.files)


def test_a_frameworks_cleanup_unlinks_nothing_and_is_no_finding(charge):
    agents.RAN.clear()
    report = faultsim.explore(agents.framework_cleanup, charge, crashes=1, workers=0)
    assert _landed_everywhere(report) > 20
    assert agents.RAN["unlink"] > 5  # kills inside the save ran its `except BaseException`
    assert report.ok, report.counterexamples(3)
    # the temp file it removed while the kill unwound is still in the crash state
    torn = [v for v in _verdicts(report) if v.kill_point.category in (
        "checkpoint-mid-write", "checkpoint-rename")]
    assert len(torn) > 5
    assert all("state.json.tmp" in _files(v) for v in torn)


def test_a_session_saved_in_finally_never_lands_and_is_no_finding(charge):
    agents.RAN.clear()
    report = faultsim.explore(agents.session_in_finally, charge, crashes=1, workers=0)
    count = _landed_everywhere(report)
    # every kill before the clean run's own last save ran the `finally` (with the kill)
    first = next(e.index for e in _verdicts(report)[0].golden.trace
                 if e.subject == "session.json")
    before = [v for v in _verdicts(report) if 0 < v.kill_point.index < first]
    assert count > 20 and agents.RAN["finally:Killed"] >= len(before) > 20  # + the probe's
    assert report.ok, report.counterexamples(3)
    for v in _verdicts(report):
        assert b"Killed" not in _files(v).get("session.json", b""), v.kill_point.id
    # the same agent under the forking executor: the same (clean) verdicts
    forked = faultsim.explore(agents.session_in_finally, charge, crashes=1)
    assert forked.ok and len(_verdicts(forked)) == count


def test_an_atexit_handler_of_an_incarnation_never_runs(charge):
    agents.RAN.clear()
    before = atexit._ncallbacks()
    report = faultsim.explore(agents.saves_at_exit, charge, crashes=1, workers=0)
    assert _landed_everywhere(report) > 20
    assert report.ok, report.counterexamples(3)
    assert atexit._ncallbacks() == before  # none left to run when this process exits
    assert "atexit" not in agents.RAN
    assert not any("exit.txt" in _files(v) for v in _verdicts(report))


def test_swallowing_the_kill_is_reported_once_where_it_went_on(charge):
    agents.RAN.clear()
    report = faultsim.explore(agents.swallows_the_kill, charge, crashes=1, workers=0)
    assert _landed_everywhere(report) > 20
    bad = [v for v in _verdicts(report) if not v.ok]
    # it catches only what the model call raises: the kills after a model answer
    assert {v.kill_point.category for v in bad} == {"after-model-response"}
    assert len(bad) == agents.RAN["swallowed"] // 3 == 2  # three tries per swallowed kill
    where = f"tests/finality_agents.py:{_line(agents.SwallowsTheKill.run, 'return create')}"
    for v in bad:
        [violation] = v.violations
        assert violation.invariant == "no_work_after_kill"
        assert f"it asked the model at {where}" in violation.explanation
        assert f"the kill was caught in {where}, in create" in violation.explanation
    # the same verdicts under the forking executor
    forked = faultsim.explore(agents.swallows_the_kill, charge, crashes=1)
    assert _explained(forked) == _explained(report)


def _explained(report) -> set:
    return {(v.kill_point.id, tuple(x.explanation for x in v.violations))
            for v in _verdicts(report)}


def test_an_async_agent_cleans_up_clean_and_its_swallowing_twin_is_caught(charge):
    # the kill lands in the agent's task, and in the worker thread of its tool
    for executor in ({"workers": 0}, {}):
        clean = faultsim.explore(agents.async_agent, charge, crashes=1, **executor)
        assert _landed_everywhere(clean) > 20
        assert clean.ok, clean.counterexamples(3)
        assert not any(b"Killed" in _files(v).get("session.json", b"")
                       for v in _verdicts(clean))
    agents.RAN.clear()
    caught = faultsim.explore(agents.async_swallower, charge, crashes=1, workers=0)
    bad = [v for v in _verdicts(caught) if not v.ok]
    assert agents.RAN["swallowed"] == 2 * len(bad) and len(bad) == 2
    where = f"tests/finality_agents.py:{_line(agents.AsyncAgent.ask, 'await self.env')}"
    assert all(f"it asked the model at {where}" in v.violations[0].explanation for v in bad)
    forked = faultsim.explore(agents.async_swallower, charge, crashes=1)
    assert _explained(forked) == _explained(caught)


def _stray_verdicts(report) -> set:
    return {(v.kill_point.id, tuple(x.invariant for x in v.violations))
            for v in _verdicts(report)}


def test_a_thread_left_running_is_stopped_and_reported(charge):
    # the issue's repro: it ended the whole run with exit 3 (a worker "exited with status
    # 0"), its thread writing into the driver's file system and catching its kills
    forked = faultsim.explore(agents.stray_thread, charge, crashes=1)
    count = _landed_everywhere(forked)
    assert count > 20
    site = f"tests/finality_agents.py:{_line(agents.StrayThread.run, 'Thread(')}"
    for v in _verdicts(forked):
        assert [x.invariant for x in v.violations] == ["no_stray_thread"], v.kill_point.id
        assert f"thread _keep_appending started at {site} was still working after run() " \
               "returned" in v.violations[0].explanation
        assert "journal.log" not in _files(v)  # no thread of an earlier run wrote there
    # deterministic: the replaying executor, in this process, finds the same
    replayed = faultsim.explore(agents.stray_thread, charge, crashes=1, workers=0)
    assert _stray_verdicts(replayed) == _stray_verdicts(forked)
    assert not any("journal.log" in _files(v) for v in _verdicts(replayed))


def test_a_correct_agent_with_a_joined_thread_is_left_clean(charge):
    report = faultsim.explore(agents.joined_thread, charge, crashes=1, workers=0)
    count = _landed_everywhere(report)
    assert count > 20 and report.ok, report.counterexamples(3)
    # kills inside the thread's write: the forking executor replays those (a fork copies
    # only the calling thread), the same verdicts
    inside = [v for v in _verdicts(report) if "journal.log" in v.kill_point.id]
    assert inside
    forked = faultsim.explore(agents.joined_thread, charge, crashes=1)
    assert forked.ok and _stray_verdicts(forked) == _stray_verdicts(report)


def test_a_thread_pool_kept_between_incarnations_serves_each_in_turn(charge):
    # its worker was started by the first incarnation; later ones' work items are theirs
    report = faultsim.explore(agents.pooled_tools, charge, crashes=1, workers=0)
    assert _landed_everywhere(report) > 20
    assert report.ok, report.counterexamples(3)
    assert any(v.kill_point.category == "after-effect" for v in _verdicts(report))


def test_subprocess_mode_reports_the_stray_thread_the_same(charge):
    few = lambda p: p.index in (4, 12, 13, 20)  # noqa: E731  (a start, a tool, a turn)
    real = explore_subprocess("tests.finality_agents:stray_thread", charge, workers=2,
                              only=few)
    assert _landed_everywhere(real) == 4
    replayed = faultsim.explore(agents.stray_thread, charge, crashes=1, workers=0)
    inproc = {v.kill_point.id: [x.explanation for x in v.violations]
              for v in _verdicts(replayed)}
    for v in _verdicts(real):  # subprocess mode's points are a subset (no power model)
        assert [x.explanation for x in v.violations] == inproc[v.kill_point.id]


SLOW_SWEEP = """
import sys
sys.path.insert(0, {root!r})
import faultsim
from tests import finality_agents as agents
report = faultsim.explore(agents.slow_tool_async, faultsim.load_scenario({path!r}), crashes=1)
runs = report.runs
print(sum(len(r.explored) for r in runs), report.ok)
"""


def test_an_async_agent_whose_tool_thread_is_slow_is_swept_without_hanging(charge):
    """The forking executor's children share the driver's epoll instance: a child's loop
    closing as its killed run unwound removed the driver's self-pipe from it, and the
    driver then slept through its tool thread's result (agent._own_selector). Run in a
    process of its own, so that a hang fails here instead of stalling the suite."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    try:
        done = subprocess.run([sys.executable, "-c", SLOW_SWEEP.format(
            root=root, path=str(charge.path))], capture_output=True, text=True,
            timeout=150, cwd=root)
    except subprocess.TimeoutExpired:
        pytest.fail("the forking sweep of an async agent with a slow tool thread hung")
    assert done.returncode == 0, done.stderr[-2000:]
    explored, ok = done.stdout.split()
    assert int(explored) > 20 and ok == "True"  # every kill landed and was judged
