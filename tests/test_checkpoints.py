"""Declared checkpoints: a scenario says where its agent keeps state ([checkpoint]), and the
state guards judge those files in their own format. Proven on agents that are not the
reference agent: one keeping `state.json`, one keeping a JSONL transcript."""
from __future__ import annotations

import pytest

import faultsim
from faultsim.errors import NoDurableState
from tests import state_agent
from tests.helpers import scenario_from

BASE = '''
id = "{id}"
task = "Charge CUST-1 1200 cents."
expected_final_answer = "Charged."
{checkpoint}
[services.billing]
kind = "keyed"
[[turns]]
tool_calls = [{{ name = "charge_card", input = {{ customer = "CUST-1", cents = 1200 }} }}]
[[turns]]
final = "Charged."
[fault_profile]
crashes = 1
'''
DECLARED = '[checkpoint]\nfiles = ["state.json"]\n'


def scenario(tmp_path_factory, name, checkpoint):
    return scenario_from(tmp_path_factory, BASE.format(id=name, checkpoint=checkpoint))


def invariants(report):
    return {x.invariant for r in report.runs for v in r.failures for x in v.violations}


def test_a_torn_declared_checkpoint_is_caught_and_named(tmp_path_factory):
    sc = scenario(tmp_path_factory, "declared", DECLARED)
    report = faultsim.explore(state_agent.make_in_place, sc, crashes=1, workers=0)
    assert "checkpoint_whole" in invariants(report)
    text = "\n".join(report.counterexamples(limit=3))
    assert "state.json on disk was not one whole version: not one whole JSON document" in text
    assert "checkpoint on disk at the kill:\n    state.json" in text


def test_without_the_declaration_the_same_mistake_goes_unjudged(tmp_path_factory):
    # what the declaration adds: by name alone, state.json is nobody's checkpoint
    sc = scenario(tmp_path_factory, "undeclared", "")
    report = faultsim.explore(state_agent.make_in_place, sc, crashes=1, workers=0)
    assert "checkpoint_whole" not in invariants(report)


def test_the_careful_agent_passes_with_its_checkpoint_declared(tmp_path_factory):
    sc = scenario(tmp_path_factory, "careful", DECLARED)
    report = faultsim.explore(state_agent.make_agent, sc, crashes=1, workers=0,
                              crash_model="all")
    assert report.ok, report.counterexamples(limit=1)
    assert sum(len(r.verdicts) for r in report.runs) > 20


def test_a_declared_checkpoint_the_clean_run_never_writes_stops_the_run(tmp_path_factory):
    sc = scenario(tmp_path_factory, "misdeclared",
                  '[checkpoint]\nfiles = ["session/*.json"]\n')
    with pytest.raises(NoDurableState, match=r"\[checkpoint\] files = \['session/\*\.json'\]"
                       r": the clean run never wrote one \(it wrote state.json"):
        faultsim.explore(state_agent.make_agent, sc, crashes=1, workers=0)


def test_an_agent_that_saves_nothing_is_told_so(tmp_path_factory):
    sc = scenario(tmp_path_factory, "stateless", "")

    class Stateless:
        def __init__(self, env):
            self.env = env

        def run(self):
            messages = [{"role": "user", "content": self.env.task}]
            while True:
                r = self.env.client.messages.create(model=self.env.model, max_tokens=256,
                                                    tools=state_agent.TOOLS,
                                                    messages=messages)
                messages.append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                calls = [b for b in r.content if b.type == "tool_use"]
                if not calls:
                    return r.content[0].text
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": str(
                        state_agent.charge_card(c.input["customer"], c.input["cents"],
                                                c.id))} for c in calls]})

    with pytest.raises(NoDurableState, match="the clean run wrote nothing durable"):
        faultsim.explore(Stateless, sc, crashes=1, workers=0)


def test_checkpoint_declarations_are_checked(tmp_path_factory):
    for bad, where in [('files = ["/etc/state.json"]', r"checkpoint\.files\[0\]"),
                       ('files = []', r"checkpoint\.files"),
                       ('files = ["a.json"]\nformat = "yaml"', r"checkpoint\.format")]:
        with pytest.raises(faultsim.ScenarioError, match=where):
            scenario(tmp_path_factory, "bad", "[checkpoint]\n" + bad + "\n")


def test_each_format_is_judged_on_its_own_terms():
    from faultsim.core.checkpoints import CheckpointSpec, progress, whole

    spec = CheckpointSpec(("log/*.jsonl", "state.json", "db.sqlite"), declared=True)
    assert spec.matches("log/a.jsonl") and spec.matches("state.json")
    assert not spec.matches("other.json") and not spec.matches("checkpoint.json")
    lines = b'{"role": "user"}\n{"role": "assistant"}\n{"role": "us'
    assert whole(spec, "log/a.jsonl", lines) is None  # a torn tail: legal
    assert progress(spec, "log/a.jsonl", lines)  # two complete lines: under way
    assert whole(spec, "log/a.jsonl", b'{"a": 1}\n{"b": \n{"c": 3}\n') == \
        "line 2 (a completed line, not the torn tail) is not JSON"
    assert whole(spec, "state.json", b'{"messages": [') == "not one whole JSON document"
    assert whole(spec, "db.sqlite", b"\x00garbage") is None  # SQLite keeps itself whole
    default = CheckpointSpec()
    assert default.matches("sub/checkpoint.json") and default.matches("@redis/t/checkpoint")
    redis = CheckpointSpec(redis_keys=("agent:checkpoint:*",), declared=True)
    assert redis.matches("@redis/agent:checkpoint:T1") and not redis.matches("@redis/x")


def test_an_agent_that_never_asks_the_model_is_told_so(tmp_path_factory):
    sc = scenario(tmp_path_factory, "modelless", "")

    class NoModel:
        def __init__(self, env):
            self.env = env

        def run(self):
            import os
            os.makedirs(str(self.env.workdir), exist_ok=True)
            with open(os.path.join(str(self.env.workdir), "state.json"), "w") as f:
                f.write("{}")
            state_agent.charge_card("CUST-1", 1200, "k")
            return "Charged."

    with pytest.raises(NoDurableState, match="the clean run never asked the model"):
        faultsim.explore(NoModel, sc, crashes=1, workers=0)


def test_a_restart_from_zero_is_caught_whatever_the_state_is_called(tmp_path_factory):
    # The agent keeps its conversation under its own field name ("log"): no "messages"
    # anywhere. What the crash state holds (the model's tool-use id) against what the
    # resumed agent asked (turn 1 again) still shows the restart.
    sc = scenario(tmp_path_factory, "forgetful", DECLARED)
    report = faultsim.explore(state_agent.make_forgetful, sc, crashes=1, workers=0)
    restarts = [x for r in report.runs for v in r.failures for x in v.violations
                if x.invariant == "no_silent_restart"]
    assert restarts, report.counterexamples(limit=1)
    assert "state.json held the model's answer toolu_" in restarts[0].explanation
    # ... and the same agent that reads its state back passes
    sc = scenario(tmp_path_factory, "remembers", DECLARED)
    report = faultsim.explore(state_agent.make_log_agent, sc, crashes=1, workers=0)
    assert report.ok, report.counterexamples(limit=1)
    assert sum(len(r.verdicts) for r in report.runs) > 20


def test_kill_point_categories_follow_the_declaration(tmp_path_factory):
    # state.json's saves (its temp file, whatever it is called, and the rename onto it)
    # are checkpoint kill points once declared; undeclared, they are plain writes.
    def categories(checkpoint):
        sc = scenario(tmp_path_factory, "categories", checkpoint)
        with faultsim.Session(state_agent.make_agent, sc) as session:
            points = session.kill_points
        return {p.category for p in points}, points

    declared, points = categories(DECLARED)
    undeclared, _ = categories("")
    assert {"checkpoint-mid-write", "checkpoint-rename"} <= declared
    assert not {"checkpoint-mid-write", "checkpoint-rename"} & undeclared
    torn = [p for p in points if p.category == "checkpoint-mid-write"]
    assert torn and all("state.json.tmp" in p.id for p in torn)


def test_a_run_with_no_effect_says_so(tmp_path_factory, capsys):
    from faultsim.cli.console import print_run

    text = ('id = "no_effects"\ntask = "Say hello."\nexpected_final_answer = "Hello."\n'
            + DECLARED + '[[turns]]\nfinal = "Hello."\n')
    report = faultsim.explore(state_agent.make_agent, scenario_from(tmp_path_factory, text),
                              crashes=1, workers=0)
    assert report.ok and report.runs[0].verdicts
    print_run(report.runs[0])
    assert ("effects       none: the clean run applied no effect, so no verdict here counts "
            "one (the scenario declares no [services])") in capsys.readouterr().out
    # a run with effects has no such line
    report = faultsim.explore(state_agent.make_agent, scenario(tmp_path_factory, "fx",
                                                                DECLARED), crashes=1, workers=0)
    print_run(report.runs[0])
    assert "effects       none" not in capsys.readouterr().out


def test_an_answer_in_a_torn_transcript_tail_is_not_progress():
    # The resumed agent skips a JSONL transcript's torn last line, legally: a tool-use id
    # found only there shows no progress (examples/jsonl_transcript would be a false alarm).
    from faultsim.core.checkpoints import CheckpointSpec, settled

    spec = CheckpointSpec(("t.jsonl", "s.json"), declared=True)
    torn = b'{"role": "user"}\n{"role": "assistant", "id": "toolu_s_01_1"}'
    assert b"toolu_s_01_1" not in settled(spec, "t.jsonl", torn)
    assert b"toolu_s_01_1" in settled(spec, "t.jsonl", torn + b"\n")
    assert settled(spec, "s.json", torn) == torn
