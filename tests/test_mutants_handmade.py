"""Hand-made crashes that expose each mutant's flaw, each paired with the same crash on the
reference agent so the test proves the kill itself is survivable."""
from __future__ import annotations

import builtins
import importlib
import json

import anthropic
import pytest

import reference_agent
from conftest import Killed, KillAfterEffect, KillAtMark
from helpers import crash_then_resume
from reference_agent.mutants import NAMES


def mutant(name):
    return importlib.import_module(f"reference_agent.mutants.{name}").make_agent


def both(scenario, tmp_path, name, *killers, **kw):
    """The same crash on the reference agent and on the mutant."""
    ref = crash_then_resume(scenario, reference_agent.make_agent, tmp_path / "ref",
                            *[k() for k in killers], **kw)
    mut = crash_then_resume(scenario, mutant(name), tmp_path / "mut",
                            *[k() for k in killers], **kw)
    # The reference survives the same kill: it completes, or (a blind effect of unknown
    # completion) escalates; it never duplicates.
    assert ref.error is None and ref.outcome.status in ("completed", "escalated")
    assert ref.ledger.duplicates() == {}
    return ref, mut


def test_every_named_mutant_exists_with_a_factory_and_a_rule():
    for name in NAMES:
        module = importlib.import_module(f"reference_agent.mutants.{name}")
        assert callable(module.make_agent)
        assert module.__doc__ and module.__doc__.split()[0].startswith("P"), name


@pytest.mark.parametrize("name,service", [("save_b_only", "tickets"),
                                          ("reask_instead_of_reconcile", "tickets"),
                                          ("key_after_effect", "payments"),
                                          ("blind_without_intent", "email")])
def test_crash_after_an_effect_duplicates_it(name, service, support_tickets, tmp_path):
    ref, mut = both(support_tickets, tmp_path, name, lambda: KillAfterEffect(service, 1))
    assert mut.error is None
    dups = mut.ledger.duplicates(service)
    assert len(dups) == 1 and list(dups.values()) == [2], mut.ledger.describe()
    (effect,) = dups
    assert effect.startswith(f"{service}.")


def test_orphan_tool_use_is_refused_by_the_api(support_tickets, tmp_path):
    ref, mut = both(support_tickets, tmp_path, "orphan_tool_use",
                    lambda: KillAtMark("checkpoint.A", 3))
    assert isinstance(mut.error, anthropic.BadRequestError)
    (bad,) = mut.world.model.invalid_requests
    assert "`tool_use` ids were found without `tool_result` blocks" in bad.message
    assert "toolu_s_03_1" in bad.message
    assert ref.world.model.invalid_requests == []


def test_messages_only_loses_the_pending_call_and_the_counters(support_tickets, tmp_path):
    ref, mut = both(support_tickets, tmp_path, "messages_only",
                    lambda: KillAtMark("checkpoint.A", 5))
    on_disk = json.loads((tmp_path / "mut/runs/support_tickets/checkpoint.json").read_text())
    assert list(on_disk) == ["messages"]
    assert isinstance(mut.error, anthropic.BadRequestError)
    assert mut.world.model.invalid_requests


def test_counters_reset_restarts_turns_and_tokens(support_tickets, golden, tmp_path):
    ref, mut = both(support_tickets, tmp_path, "counters_reset",
                    lambda: KillAtMark("checkpoint.B", 6))
    assert ref.outcome.turns == golden.outcome.turns == 13
    assert ref.outcome.tokens_used == golden.outcome.tokens_used
    assert mut.outcome.turns == 13 - 6
    assert mut.outcome.tokens_used < golden.outcome.tokens_used


class TornWrite:
    """Tear the first write to a file named `name`: half the bytes reach it, then a kill."""

    def __init__(self, monkeypatch, name):
        self.name, self.landed = name, None
        real_open = builtins.open

        def fake_open(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            if self.landed is None and str(file).endswith("/" + name) and "w" in mode:
                return _Tearing(f, self)
            return f

        monkeypatch.setattr(builtins, "open", fake_open)


class _Tearing:
    def __init__(self, f, torn):
        self._f, self._torn = f, torn

    def write(self, data):
        if self._torn.landed is None:
            self._f.write(data[: len(data) // 2])
            self._f.flush()
            self._torn.landed = len(data) // 2
            raise Killed("torn write")
        return self._f.write(data)

    def __getattr__(self, attr):
        return getattr(self._f, attr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()  # the page cache keeps the half written (a process kill)


@pytest.mark.parametrize("agent,target", [("reference", "checkpoint.json.tmp"),
                                          ("overwrite_in_place", "checkpoint.json")])
def test_torn_checkpoint_write(agent, target, support_tickets, golden, tmp_path, monkeypatch):
    from faultsim import ScenarioRun

    factory = reference_agent.make_agent if agent == "reference" else mutant(agent)
    with ScenarioRun(support_tickets, factory, workdir=tmp_path) as run:
        # Let two turns complete, then tear the next checkpoint write.
        counter = {"n": 0}

        def arm(name, **info):
            if name == "checkpoint.B":
                counter["n"] += 1
                if counter["n"] == 2:
                    TornWrite(monkeypatch, target)

        with pytest.raises(Killed):
            run.incarnation(mark=arm)
        monkeypatch.undo()
        checkpoint = tmp_path / "runs/support_tickets/checkpoint.json"
        if agent == "reference":
            json.loads(checkpoint.read_text())  # the real file is still one whole version
            outcome = run.incarnation()
            assert outcome.final_answer == support_tickets.expected_final_answer
            assert run.world.ledger.duplicates() == {}
        else:
            with pytest.raises(json.JSONDecodeError):
                json.loads(checkpoint.read_text())
            with pytest.raises(reference_agent.CheckpointError, match="not valid JSON"):
                run.incarnation()


def test_progress_appended_logs_a_retried_step_twice(support_tickets, golden, tmp_path):
    ref, mut = both(support_tickets, tmp_path, "progress_appended",
                    lambda: KillAtMark("progress.recorded", 1, tool="create_ticket"))
    assert ref.outcome.steps == golden.outcome.steps == 14
    assert mut.outcome.steps == 15
    steps = json.loads((tmp_path / "mut/runs/support_tickets/progress.json").read_text())["steps"]
    ids = [s["tool_use_id"] for s in steps]
    assert len(ids) - len(set(ids)) == 1


def _lose_the_workspace_file(run):
    # What power loss does to a file written without fsync: the name survives, the data not.
    (run.workdir / "workspace/reports/q3_support_summary.md").write_bytes(b"")


def test_progress_trusted_skips_a_step_whose_output_is_gone(support_tickets, tmp_path):
    ref, mut = both(support_tickets, tmp_path, "progress_trusted",
                    lambda: KillAtMark("checkpoint.B", 11), between=_lose_the_workspace_file)
    want = next(c.input["content"] for t in support_tickets.script.turns for c in t.tool_calls
                if c.input.get("path") == "reports/q3_support_summary.md")
    assert (tmp_path / "ref/workspace/reports/q3_support_summary.md").read_text() == want
    assert (tmp_path / "mut/workspace/reports/q3_support_summary.md").read_text() == ""
    decisions = json.loads((tmp_path / "ref/runs/support_tickets/decisions.json").read_text())
    assert any("redo step" in d["decision"] for d in decisions["decisions"])


def test_unknown_version_is_refused_by_the_reference_and_parsed_by_the_mutant(
        support_tickets, tmp_path):
    from faultsim import ScenarioRun

    for agent, factory in (("ref", reference_agent.make_agent),
                           ("mut", mutant("unknown_version_parsed"))):
        workdir = tmp_path / agent
        with ScenarioRun(support_tickets, factory, workdir=workdir) as run:
            with pytest.raises(Killed):
                run.incarnation(mark=KillAtMark("checkpoint.B", 2))
            path = workdir / "runs/support_tickets/checkpoint.json"
            future = json.loads(path.read_text())
            future["version"] = 99
            path.write_text(json.dumps(future))
            before = path.read_bytes()
            if agent == "ref":
                with pytest.raises(reference_agent.UnknownVersionError) as info:
                    run.incarnation()
                assert info.value.version == 99 and str(path) in str(info.value)
                assert path.read_bytes() == before  # nothing overwritten
            else:
                outcome = run.incarnation()
                assert outcome.status == "completed"
                assert json.loads(path.read_text())["version"] == 2  # downgraded over
