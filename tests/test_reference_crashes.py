"""Hand-made crash tests: the reference agent resumes correctly wherever the kill lands."""
from __future__ import annotations

import datetime as dt
import json

import pytest

import reference_agent
from conftest import KillAfterEffect, KillAtMark
from helpers import crash_then_resume


def assert_like_golden(result, golden, scenario):
    """Completed with the golden answer, the same effects, none duplicated, no bad request."""
    assert result.error is None, f"resume failed: {result.error!r}"
    out = result.outcome
    assert out.status == "completed"
    assert out.final_answer == scenario.expected_final_answer
    assert out.turns == golden.outcome.turns
    assert result.ledger.duplicates() == {}
    assert result.ledger.effect_counts() == golden.world.ledger.effect_counts()
    assert result.world.model.invalid_requests == []


def test_golden_run_through_the_real_sdk(golden, support_tickets):
    out = golden.outcome
    assert out.status == "completed" and out.final_answer == support_tickets.expected_final_answer
    assert out.turns == 13
    model = golden.world.model
    assert [r.status for r in model.requests] == [200] * 13
    assert out.tokens_used == sum(r.input_tokens + r.output_tokens for r in model.requests)
    assert golden.effects_by_service() == {"tickets": 3, "payments": 1, "email": 2,
                                           "records": 3, "orders": 0}
    assert golden.world.ledger.duplicates() == {}


@pytest.mark.parametrize("turn", [1, 2, 4, 6, 8, 12])
def test_kill_between_save_a_and_the_tool(turn, support_tickets, golden, tmp_path):
    killer = KillAtMark("checkpoint.A", nth=turn)
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path, killer)
    assert result.kills[0]["mark"] == "checkpoint.A"
    assert_like_golden(result, golden, support_tickets)
    # The model's answer was saved at A: resume reconciles instead of re-asking.
    assert result.world.model.repeated_requests() == []
    assert result.outcome.tokens_used == golden.outcome.tokens_used


@pytest.mark.parametrize("service,nth", [("tickets", 1), ("tickets", 3), ("payments", 1),
                                         ("records", 2)])
def test_kill_after_the_effect_before_the_tool_returns(service, nth, support_tickets, golden,
                                                       tmp_path):
    killer = KillAfterEffect(service, nth)
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path, killer)
    assert result.kills[0].service == service and result.kills[0].incarnation == 1
    assert_like_golden(result, golden, support_tickets)
    resumed = result.ledger.by_incarnation(2)
    if service in ("tickets", "payments"):  # keyed: repeated with the same key, deduplicated
        assert any(e.outcome == "deduplicated" and e.key == result.kills[0].key
                   for e in resumed)
    else:  # queryable: looked up first, the write skipped
        assert not any(e.service == "records" and e.op == "apply" and
                       e.params == result.kills[0].params for e in resumed)


@pytest.mark.parametrize("nth", [1, 2])
def test_kill_after_a_blind_effect_escalates_instead_of_repeating(nth, support_tickets,
                                                                 tmp_path):
    killer = KillAfterEffect("email", nth)
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path, killer)
    assert result.error is None
    assert result.outcome.status == "escalated"
    assert "may or may not have happened" in result.outcome.escalation
    assert len(result.ledger.applied("email")) == nth  # sent once, never again
    assert result.ledger.duplicates() == {}
    run_json = json.loads((tmp_path / "runs/support_tickets/run.json").read_text())
    assert run_json["status"] == "escalated"
    unknowns = json.loads((tmp_path / "runs/support_tickets/decisions.json").read_text())
    assert unknowns["unknowns"] and "no completion" in unknowns["unknowns"][0]["what"]
    # A further resume stays escalated and sends nothing.
    with result.run.world.clock.frozen():
        again = result.run.incarnation()
    assert again.status == "escalated" and len(result.ledger.applied("email")) == nth


@pytest.mark.parametrize("mark", ["tool.end", "progress.recorded", "checkpoint.B"])
@pytest.mark.parametrize("tool", ["create_ticket", "send_email", "update_record",
                                  "write_file", "charge_payment"])
def test_kill_after_the_tool_returns_and_before_or_after_b(mark, tool, support_tickets,
                                                           golden, tmp_path):
    killer = KillAtMark(mark, nth=1) if mark == "checkpoint.B" else KillAtMark(mark, 1, tool=tool)
    if mark == "checkpoint.B":  # the B after the first call of this tool
        first = next(i for i, t in enumerate(support_tickets.script.turns)
                     if t.tool_calls and t.tool_calls[0].name == tool)
        killer = KillAtMark("checkpoint.B", nth=first + 1)
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path, killer)
    assert result.kills
    assert_like_golden(result, golden, support_tickets)
    assert result.outcome.tokens_used == golden.outcome.tokens_used


def test_kill_inside_the_parallel_turn(support_tickets, golden, tmp_path):
    # Turn 2 names three tools; die after the second returned, before it was recorded.
    killer = KillAtMark("tool.end", 1, tool_use_id="toolu_s_02_2")
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path, killer)
    assert result.kills[0]["tool_use_id"] == "toolu_s_02_2"
    assert_like_golden(result, golden, support_tickets)


def test_crash_during_recovery_then_resume_again(support_tickets, golden, tmp_path):
    # First kill after a ticket is created; the second inside the resume, just as its
    # reconciliation saves B; the third incarnation finishes.
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("tickets", 2), KillAtMark("checkpoint.B", 1))
    assert len(result.kills) == 2
    assert_like_golden(result, golden, support_tickets)


def test_downtime_within_the_key_window_still_deduplicates(support_tickets, golden, tmp_path):
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("payments", 1),
                               between=lambda run: run.world.clock.advance(dt.timedelta(hours=3)))
    assert_like_golden(result, golden, support_tickets)


def test_downtime_past_the_key_window_escalates_instead_of_charging_twice(support_tickets,
                                                                          tmp_path):
    result = crash_then_resume(support_tickets, reference_agent.make_agent, tmp_path,
                               KillAfterEffect("payments", 1),
                               between=lambda run: run.world.clock.advance(dt.timedelta(hours=25)))
    assert result.outcome.status == "escalated"
    assert "idempotency keys" in result.outcome.escalation
    assert len(result.ledger.applied("payments")) == 1


def test_protocol_files_are_written_in_order(support_tickets, tmp_path):
    """P6 plan before the effect, P7 progress only after it, P11 intent before a blind one."""
    from faultsim import ScenarioRun

    run_dir = tmp_path / "runs" / "support_tickets"
    seen = []

    def check(kind, entry):
        if kind != "effect.applied":
            return
        plan = json.loads((run_dir / "plan.json").read_text())
        progress = json.loads((run_dir / "progress.json").read_text()) \
            if (run_dir / "progress.json").exists() else {"steps": []}
        checkpoint = json.loads((run_dir / "checkpoint.json").read_text())
        current = checkpoint["pendingToolUse"]
        if entry.key:  # keyed: the key names the call; it is not in progress yet (P7)
            call = entry.key.rsplit(":", 1)[-1]
            assert call not in {s["tool_use_id"] for s in progress["steps"]}
        assert current, "an effect ran with nothing pending on disk (no save A)"
        ids = {c["id"] for c in current}
        assert ids <= {s["tool_use_id"] for s in plan["steps"]}, "effect before its plan step"
        if entry.service == "email":
            intents = json.loads((run_dir / "intents.json").read_text())["intents"]
            pending_email = [c["id"] for c in current if c["name"] == "send_email"]
            assert all(intents[i]["completed_at"] is None for i in pending_email)
        seen.append(entry.service)

    with ScenarioRun(support_tickets, reference_agent.make_agent, workdir=tmp_path) as run:
        run.world.subscribe(lambda kind, **info: check(kind, info.get("entry")))
        run.incarnation()
    assert len(seen) == 9  # every applied effect was checked

    progress = json.loads((run_dir / "progress.json").read_text())
    assert [s["n"] for s in progress["steps"]] == list(range(1, 15))
    summary = json.loads((tmp_path / "archive/support_tickets/summary.json").read_text())
    assert summary["final_answer"] == support_tickets.expected_final_answer
    assert len(summary["steps"]) == 14
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_progress_is_never_written_before_its_step(support_tickets, tmp_path):
    from faultsim import ScenarioRun

    run_dir = tmp_path / "runs" / "support_tickets"
    checked = []

    def mark(name, **info):
        if name == "tool.start":
            path = run_dir / "progress.json"
            steps = json.loads(path.read_text())["steps"] if path.exists() else []
            assert info["tool_use_id"] not in {s["tool_use_id"] for s in steps}
            checked.append(info["tool_use_id"])
        if name == "progress.recorded":
            steps = json.loads((run_dir / "progress.json").read_text())["steps"]
            assert steps[-1]["tool_use_id"] == info["tool_use_id"]

    with ScenarioRun(support_tickets, reference_agent.make_agent, workdir=tmp_path) as run:
        run.incarnation(mark=mark)
    assert len(checked) == 14
