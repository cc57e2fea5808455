"""Unit tests of the reference agent's protocol pieces: checkpoint format (P1, P3, P4),
sub-agents and retention (P12), API faults, and clear errors on bad input."""
from __future__ import annotations

import datetime as dt
import json
import tomllib

import anthropic
import pytest

import reference_agent
from conftest import DATA, SCENARIOS, KillAfterEffect, KillAtMark
from faultsim import ScenarioRun, parse_scenario, run_once
from helpers import crash_then_resume
from reference_agent.checkpoint import (FIELDS, Checkpoint, CheckpointError, CheckpointStore,
                                        PendingCall, UnknownVersionError)


# -- the checkpoint file -----------------------------------------------------------------
def test_checkpoint_on_disk_has_exactly_the_six_fields_at_a_and_b(support_tickets, tmp_path):
    path = tmp_path / "runs/support_tickets/checkpoint.json"
    seen = {}

    def mark(name, **info):
        if name in ("checkpoint.A", "checkpoint.B"):
            data = json.loads(path.read_text())
            assert tuple(data) == FIELDS
            assert data["version"] == reference_agent.CURRENT_VERSION
            seen.setdefault(name, []).append(data)

    with ScenarioRun(support_tickets, reference_agent.make_agent, workdir=tmp_path) as run:
        run.incarnation(mark=mark)
    a, b = seen["checkpoint.A"], seen["checkpoint.B"]
    assert len(a) == len(b) == 12
    assert [len(x["pendingToolUse"]) for x in a][:2] == [1, 3]  # turn 2 is parallel
    assert all(x["pendingToolUse"] is None for x in b)
    assert [x["turns"] for x in b] == list(range(1, 13))
    assert a[0]["messages"][-1]["content"][-1]["type"] == "tool_use"
    assert all(later["tokensUsed"] > earlier["tokensUsed"] for earlier, later in zip(b, b[1:]))
    assert not (tmp_path / "runs/support_tickets/checkpoint.json.tmp").exists()


def test_save_and_load_round_trip(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoint.json")
    cp = Checkpoint.new("do it")
    cp.turns, cp.tokensUsed = 3, 120
    cp.pendingToolUse = [PendingCall("toolu_1", "write_file", {"path": "a", "content": "b"})]
    store.save(cp)
    assert store.load() == cp


def _write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_version_1_migrates_on_load(tmp_path):
    v1 = {"version": 1, "task": "t", "turns": 2, "tokensUsed": 10,
          "messages": [{"role": "user", "content": "t"}],
          "pendingToolUse": {"id": "toolu_x", "name": "lookup_order", "input": {}}}
    path = _write(tmp_path / "checkpoint.json", v1)
    cp = CheckpointStore(path).load()
    assert cp.pendingToolUse == [PendingCall("toolu_x", "lookup_order", {})]
    assert (cp.turns, cp.tokensUsed) == (2, 10)
    assert json.loads(path.read_text()) == v1  # loading alone never rewrites the file
    v1["pendingToolUse"] = None
    assert CheckpointStore(_write(path, v1)).load().pendingToolUse is None


def test_version_1_checkpoint_resumes_to_completion(support_tickets, golden, tmp_path):
    """A checkpoint left by the previous release (pending as one object) still resumes."""
    def downgrade(run):
        path = run.workdir / "runs/support_tickets/checkpoint.json"
        data = json.loads(path.read_text())
        assert len(data["pendingToolUse"]) == 1
        data["version"], data["pendingToolUse"] = 1, data["pendingToolUse"][0]
        path.write_text(json.dumps(data))

    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("payments", 1), between=downgrade)
    assert result.outcome.final_answer == support_tickets.expected_final_answer
    assert result.ledger.duplicates() == {}
    saved = json.loads((tmp_path / "runs/support_tickets/checkpoint.json").read_text())
    assert saved["version"] == 2


@pytest.mark.parametrize("content,field,problem", [
    ({"version": 7, "task": "t"}, "version", "unknown checkpoint version 7"),
    ({"version": "2", "task": "t"}, "version", "unknown checkpoint version '2'"),
    ({"version": True}, "version", "unknown checkpoint version True"),
    ({"task": "t"}, "version", "missing"),
    ('{"version": 2, "task": "sk-ant-SECRET", "tu', "(file)", "not valid JSON"),
    ("\x00\x00\x00\x00", "(file)", "not valid JSON"),
    ("[1, 2]", "(top level)", "expected a JSON object"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": 0, "messages": []},
     "pendingToolUse", "missing"),
    ({"version": 2, "task": "t", "turns": -1, "tokensUsed": 0,
      "messages": [{"role": "user", "content": "t"}], "pendingToolUse": None},
     "turns", "non-negative integer"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": "12",
      "messages": [{"role": "user", "content": "t"}], "pendingToolUse": None},
     "tokensUsed", "non-negative integer"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": 0,
      "messages": [{"role": "robot", "content": "t"}], "pendingToolUse": None},
     "messages[0]", "role"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": 0,
      "messages": [{"role": "user", "content": "t"}], "pendingToolUse": {"id": "x"}},
     "pendingToolUse", "null or a list"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": 0,
      "messages": [{"role": "user", "content": "t"}], "pendingToolUse": [{"id": 1}]},
     "pendingToolUse[0].id", "expected str"),
    ({"version": 2, "task": "t", "turns": 0, "tokensUsed": 0, "extra": 1,
      "messages": [{"role": "user", "content": "t"}], "pendingToolUse": None},
     "extra", "not a checkpoint field"),
])
def test_bad_checkpoints_fail_naming_file_and_field(content, field, problem, tmp_path):
    path = _write(tmp_path / "checkpoint.json", content)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        CheckpointStore(path).load()
    err = info.value
    assert err.path == str(path) and err.field == field and problem in str(err)
    assert "SECRET" not in str(err)  # the file's content is never quoted
    assert path.read_bytes() == before
    assert isinstance(err, UnknownVersionError) == ("unknown checkpoint version" in problem)


def test_malformed_checkpoint_stops_the_run_loudly(support_tickets, tmp_path):
    def corrupt(run):
        (run.workdir / "runs/support_tickets/checkpoint.json").write_text('{"version": 2, "ta')

    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAtMark("checkpoint.B", 4), between=corrupt)
    assert isinstance(result.error, CheckpointError)
    assert "checkpoint.json: (file): not valid JSON" in str(result.error)
    assert len(result.world.model.requests) == 4  # nothing was asked after the refusal


# -- bad input from the model ---------------------------------------------------------------
def _scenario(tmp_path, **changes):
    data = tomllib.loads((SCENARIOS / "support_tickets.toml").read_text())
    data.update(changes)
    return parse_scenario(data, tmp_path / "changed.toml")


def test_a_scripted_tool_the_agent_does_not_offer_is_a_script_error_before_anything_is_saved(
        tmp_path):
    """The real model never calls a tool the request did not offer: the fake refuses such
    a script (naming turn and tool) instead of letting a lenient agent pass untested."""
    sc = _scenario(tmp_path, turns=[{"tool_calls": [{"name": "launch_rocket", "input": {}}]},
                                    {"final": "done"}])
    with ScenarioRun(sc, reference_agent.make_agent, workdir=tmp_path / "w") as run:
        with pytest.raises(anthropic.BadRequestError,
                           match="turn 1: the scripted turn calls 'launch_rocket', a tool the "
                                 "request does not offer"):
            run.incarnation()
    saved = json.loads((tmp_path / "w/runs/support_tickets/checkpoint.json").read_text())
    assert saved["pendingToolUse"] is None and len(saved["messages"]) == 1


def test_bad_tool_input_goes_back_to_the_model_as_an_error_result(tmp_path):
    sc = _scenario(tmp_path, turns=[
        {"tool_calls": [{"name": "write_file", "input": {"path": "../escape", "content": "x"}}]},
        {"tool_calls": [{"name": "lookup_order", "input": {"order_id": "NOPE"}}]},
        {"final": "done"}], expected_final_answer="done")
    with ScenarioRun(sc, reference_agent.make_agent, workdir=tmp_path / "w") as run:
        assert run.incarnation().final_answer == "done"
    saved = json.loads((tmp_path / "w/runs/support_tickets/checkpoint.json").read_text())
    results = [m["content"][0] for m in saved["messages"] if m["role"] == "user"
               and isinstance(m["content"], list)]
    assert results[0]["is_error"] and "stay inside the workspace" in results[0]["content"]
    assert results[1]["is_error"] and "no order 'NOPE'" in results[1]["content"]
    assert not (tmp_path / "w/escape").exists()


# -- API faults -------------------------------------------------------------------------------
def test_api_faults_are_retried_by_the_sdk_without_duplicating_effects(tmp_path, golden):
    sc = _scenario(tmp_path, fault_profile={"api_faults": [
        {"at": 1, "kind": "529", "times": 2}, {"at": 3, "kind": "429"},
        {"at": 5, "kind": "500"}]})
    record = run_once(sc, reference_agent.make_agent)
    assert record.outcome.final_answer == sc.expected_final_answer
    errors = [(r.position, r.status, r.error) for r in record.world.model.requests if not r.ok]
    assert errors == [(1, 529, "overloaded_error"), (1, 529, "overloaded_error"),
                      (3, 429, "rate_limit_error"), (5, 500, "api_error")]
    assert record.world.ledger.effect_counts() == golden.world.ledger.effect_counts()
    assert record.outcome.tokens_used == golden.outcome.tokens_used


# -- sub-agents (P12) -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def delegation():
    from faultsim import load_scenario
    return load_scenario(DATA / "subagents.toml")


def test_subagents_run_in_their_own_namespaces(delegation, tmp_path):
    with ScenarioRun(delegation, reference_agent.make_agent, workdir=tmp_path) as run:
        out = run.incarnation()
    assert out.final_answer == delegation.expected_final_answer
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["delegation", "delegation:billing", "delegation:triage"]
    for ns in runs:
        assert json.loads((tmp_path / "runs" / ns / "run.json").read_text())["status"] == \
            "completed"
    assert sorted({r.script for r in run.world.model.requests}) == ["billing", "s", "triage"]


def test_resumed_parent_reuses_finished_children(delegation, tmp_path):
    result = crash_then_resume(delegation, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("payments", 1))
    assert result.outcome.final_answer == delegation.expected_final_answer
    assert result.ledger.duplicates() == {}
    requests = result.world.model.requests
    # triage finished before the crash: the resumed run never asks its model again
    assert [r for r in requests if r.script == "triage" and r.incarnation == 2] == []
    # billing resumed from its own checkpoint and did not re-ask its pending turn
    assert [r.position for r in requests if r.script == "billing" and r.incarnation == 2] == [1, 2]
    assert result.ledger.effect_counts("payments").most_common(1)[0][1] == 1


# -- retention (P12) ------------------------------------------------------------------------
def _finish(scenario, workdir, advance=None, kill=None):
    with ScenarioRun(scenario, reference_agent.make_agent, workdir=workdir) as run:
        if advance:
            run.world.clock.advance(advance)
        if kill:
            with pytest.raises(BaseException):
                run.incarnation(mark=kill)
            return None
        return run.incarnation()


def test_retention_expires_finished_runs_and_never_a_running_one(support_tickets, delegation,
                                                                  tmp_path):
    runs = tmp_path / "runs"
    _finish(support_tickets, tmp_path)  # completed at day 0
    crashed = _scenario(tmp_path, id="still_running")
    _finish(crashed, tmp_path, kill=KillAtMark("checkpoint.B", 2))  # running, never finished
    assert json.loads((runs / "still_running/run.json").read_text())["status"] == "running"

    _finish(delegation, tmp_path, advance=dt.timedelta(hours=23))
    assert (runs / "support_tickets").exists()  # 23 h: not yet
    _finish(delegation, tmp_path, advance=dt.timedelta(hours=25))
    assert not (runs / "support_tickets").exists()  # 25 h: the completed run expired
    assert (tmp_path / "archive/support_tickets/summary.json").exists()  # its archive stays
    _finish(delegation, tmp_path, advance=dt.timedelta(days=30))
    assert (runs / "still_running/checkpoint.json").exists()  # running: never expires


def test_retention_keeps_failed_runs_for_a_week(support_tickets, delegation, tmp_path):
    runs = tmp_path / "runs"
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("email", 1))
    assert result.outcome.status == "escalated"
    _finish(delegation, tmp_path, advance=dt.timedelta(days=6))
    assert (runs / "support_tickets").exists()
    _finish(delegation, tmp_path, advance=dt.timedelta(days=8))
    assert not (runs / "support_tickets").exists()


def test_the_scenarios_turn_limit_reaches_the_agent(tmp_path):
    """A long task is not capped by the agent (the reference agent stopped at 200 turns);
    the scenario's `max_turns` reaches it as `env.max_turns` and stops a runaway loop."""
    import sys
    from pathlib import Path

    import faultsim
    from faultsim.scenario import load_scenario

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from scaling import scenario_text

    # the bundled long scenario (scenarios/long/), its own limit taken out
    bundled = Path(__file__).resolve().parent.parent / "scenarios/long/lookups_200_steps.toml"
    path = tmp_path / "long.toml"
    path.write_text(bundled.read_text().replace("max_turns = 210\n", ""))
    scenario = load_scenario(path)
    assert scenario.max_turns == 10_000  # the default caps no realistic task
    record = faultsim.run_once(scenario, reference_agent.make_agent)
    assert record.outcome.turns == 201 and record.outcome.status == "completed"
    assert record.outcome.final_answer == scenario.expected_final_answer
    path.write_text(scenario_text(5).replace("max_turns = 15", "max_turns = 3"))
    with pytest.raises(reference_agent.agent.AgentError, match="stopped after 3 turns"):
        faultsim.run_once(load_scenario(path), reference_agent.make_agent)


def test_the_bundled_long_scenario_is_the_benchs_shape_outside_the_first_commands_folder():
    """scenarios/long/lookups_200_steps.toml is bench/scaling.py's 200-step scenario (the
    bench sweeps it for N = 200; the test above runs it clean past 200 turns), outside
    the folder `faultsim run scenarios/` sweeps (a sweep of it costs minutes)."""
    import sys
    from pathlib import Path

    from faultsim.cli.args import scenario_paths
    from faultsim.scenario import load_scenario

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "bench"))
    from scaling import bundled, scenario_text

    path = root / "scenarios" / "long" / "lookups_200_steps.toml"
    assert bundled(200) == path and path.read_text().endswith(scenario_text(200))
    assert path not in scenario_paths([str(root / "scenarios")])
    scenario = load_scenario(path)
    assert len(scenario.script.turns) == 201 and scenario.max_turns == 210
