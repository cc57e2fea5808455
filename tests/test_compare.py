"""Differential verdicts (faultsim.reports.compare, faultsim.reports.identity): crash states aligned by
their stable identity between two agents, on the receipts example (its planted mistake
against its fix) and on two versions whose kill-point indices shift."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import faultsim
from faultsim.cli import main
from faultsim.reports.compare import compare

ROOT = Path(__file__).resolve().parent.parent
RECEIPTS = ROOT / "examples" / "receipts"
SCENARIO = RECEIPTS / "scenario.toml"
sys.path.insert(0, str(RECEIPTS))

import receipts_agent  # noqa: E402

import version_agents  # noqa: E402


def _report(factory) -> dict:
    return faultsim.explore(factory, faultsim.load_scenario(SCENARIO), crashes=1,
                            crash_model="process").to_json()


@pytest.fixture(scope="module")
def reports(shared_cache) -> dict[str, dict]:
    """Three real sweeps, each made once per session whichever xdist worker asks first
    (tests/shared_runs.py)."""
    from shared_runs import memo_in_process

    with memo_in_process(shared_cache):
        return {"blind": _report(receipts_agent.make_agent_without_intents),
                "fixed": _report(receipts_agent.make_agent),
                "v2": _report(version_agents.make_agent_v2)}


def _failing(report: dict) -> set[str]:
    return {i for run in report["runs"] for i, _, v, _ in run["states"]
            if v not in ("passed", "escalated")}


def test_identities_are_distinct_and_name_every_crash_state(reports):
    for report in reports.values():
        (run,) = report["runs"]
        names = [i for i, _, _, _ in run["states"]]
        assert len(names) == len(set(names)) == run["crash_states"]


def test_the_fix_cures_exactly_the_states_the_mistake_fails(reports):
    diff = compare(reports["blind"], reports["fixed"])
    (run,) = diff.runs
    counts = run.counts()
    failing = _failing(reports["blind"])
    assert failing  # the planted mistake is caught (the kills landed and were judged)
    fixed = {s.identity for s in run.states if s.kind == "fixed by B"}
    assert fixed == failing
    assert "process:after-effect effect.applied mailer.send#1 turn 2 tool send_receipt" in fixed
    assert counts["broken by B"] == counts["fails in both"] == 0
    # a state one side lacks (B writes intents.json: events A never had) passes there
    assert all(s.a in ("passed", "escalated") for s in run.states if s.kind == "only in A")
    assert all(s.b in ("passed", "escalated") for s in run.states if s.kind == "only in B")
    assert diff.ok
    # the other way round, the fix's loss is a regression, named
    back = compare(reports["fixed"], reports["blind"])
    assert not back.ok and {s.identity for _, s in back.regressions} == failing


def test_an_extra_write_shifts_every_index_and_the_identity_still_aligns(reports):
    a, b = reports["blind"], reports["v2"]
    diff = compare(a, b)
    (run,) = diff.runs
    counts = run.counts()
    assert counts["only in A"] == counts["fixed by B"] == counts["broken by B"] == 0
    assert counts["passes in both"] + counts["fails in both"] == a["runs"][0]["crash_states"]
    assert counts["fails in both"] == len(_failing(a)) > 0
    extra = [s for s in run.states if s.kind == "only in B"]
    assert extra and all("started.txt" in s.identity and s.b == "passed" for s in extra)
    # aligned by kill-point id (index included), almost no state finds itself
    ids_b = {k: v for _, k, v, _ in b["runs"][0]["states"]}
    same = [k for _, k, v, _ in a["runs"][0]["states"] if ids_b.get(k) == v]
    assert len(same) < len(a["runs"][0]["states"]) // 4
    missing = [k for k in (k for _, k, v, _ in a["runs"][0]["states"]
                           if v != "passed") if k not in ids_b]
    assert missing  # an index-based alignment loses the failing states


def _write(tmp_path: Path, name: str, report: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def test_compare_two_reports_exits_1_naming_the_states_b_adds(reports, tmp_path, capsys):
    good, bad = _write(tmp_path, "a.json", reports["fixed"]), _write(tmp_path, "b.json",
                                                                      reports["blind"])
    out = tmp_path / "diff.json"
    assert main(["compare", good, bad, "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"B adds {len(_failing(reports['blind']))} failing crash states" in text
    assert "broken by B: process:after-effect effect.applied mailer.send#1" in text
    found = json.loads(out.read_text())
    assert not found["ok"]
    assert {r["identity"] for r in found["regressions"]} == _failing(reports["blind"])
    assert main(["compare", bad, good]) == 0


def test_compare_refuses_a_report_without_identities(reports, tmp_path, capsys):
    old = json.loads(json.dumps(reports["fixed"]))
    del old["runs"][0]["states"]
    path = _write(tmp_path, "old.json", old)
    assert main(["compare", path, path]) == 2
    assert "old.json: runs[0] has no \"states\"" in capsys.readouterr().err


def test_run_with_a_baseline_fails_only_on_added_failing_states(reports, tmp_path, capsys,
                                                                memo_backend):
    base = _write(tmp_path, "base.json", reports["blind"])
    agent = f"{RECEIPTS / 'receipts_agent.py'}:make_agent_without_intents"
    args = ["run", str(SCENARIO), "--agent", agent, "--crashes", "1", "--crash-model",
            "process", "--examples", "0", "--workers", "0"]
    assert main(args) == 1  # it violates ...
    assert main(args + ["--baseline", base]) == 0  # ... nothing the baseline did not
    assert "B adds 0 failing crash states" in capsys.readouterr().out


def test_the_action_with_a_baseline_fails_the_job_naming_the_states_a_change_adds(
        reports, tmp_path, capsys, memo_backend):
    from faultsim.cli import ci_action

    base = _write(tmp_path, "base.json", reports["fixed"])
    agent = f"{RECEIPTS / 'receipts_agent.py'}:make_agent_without_intents"
    env = {"INPUT_SCENARIOS": str(SCENARIO), "INPUT_AGENT": agent, "INPUT_BASELINE": base,
           "INPUT_CRASH_MODEL": "process", "INPUT_HTML": "false",
           "INPUT_ARGS": "--crashes 1 --examples 0 --workers 0",
           "INPUT_REPORT_DIR": str(tmp_path / "out"),
           "GITHUB_OUTPUT": str(tmp_path / "output.txt")}
    assert ci_action.main(env) == 1
    out = capsys.readouterr().out
    added = _failing(reports["blind"])
    assert f"B adds {len(added)} failing crash states: " in out
    assert all(identity in out for identity in added)
    # (against a baseline with the same failures it passes: the --baseline test above)


# -- counterexamples show the resume (report.first_request, model.fake.abridge) ----------

def test_the_counterexample_shows_the_resumed_request_beside_the_clean_one(reports):
    (run,) = reports["blind"]["runs"]
    (cx,) = [c for c in run["counterexamples"] if c["invariants"] == ["effects_exactly_once"]]
    first = cx["first_request"]
    assert first["incarnation"] == 2 and first["turn"] == "turn 3"
    assert first["messages"][0].startswith("user: text 'Charge CUST-1")
    assert first["messages"][-2:] == ["assistant: tool_use send_receipt",
                                      "user: tool_result '{\"id\": \"mailer-0002\"}'"]
    # the receipt went out again, and the resumed conversation says so; nothing else differs
    assert first["diff"] == ["-user: tool_result '{\"id\": \"mailer-0001\"}'",
                             "+user: tool_result '{\"id\": \"mailer-0002\"}'"]
    assert first["clean"][:-1] == first["messages"][:-1]
    assert "the resumed run's first request to the model (turn 3; abridged):" in cx["text"]
    assert "    +user: tool_result '{\"id\": \"mailer-0002\"}'" in cx["text"]


def test_abridge_keeps_roles_block_types_and_the_ends_of_a_long_conversation():
    from faultsim.model.fake import ABRIDGE_TEXT, abridge

    long_text = "x" * (ABRIDGE_TEXT + 10)
    messages = [{"role": "user", "content": long_text}]
    for n in range(6):
        messages += [{"role": "assistant", "content": [
                         {"type": "thinking", "thinking": "..."},
                         {"type": "tool_use", "id": f"t{n}", "name": "look", "input": {}}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": f"t{n}", "is_error": n == 5,
                          "content": [{"type": "text", "text": f"r{n}"}]}]}]
    lines = abridge(messages)
    assert lines[0] == f"user: text '{'x' * ABRIDGE_TEXT}...'"
    assert lines[1] == "... 8 messages ..."
    assert lines[-2:] == ("assistant: thinking, tool_use look",
                          "user: tool_result (error) 'r5'")
    assert len(lines) == 6
    assert abridge(messages[:3]) == (lines[0], "assistant: thinking, tool_use look",
                                     "user: tool_result 'r0'")


def test_a_resumed_request_like_the_clean_one_is_said_to_be_the_same():
    from types import SimpleNamespace

    from faultsim.reports.text import _first_request_lines, first_request

    sent = ("user: text 'go'", "assistant: tool_use look", "user: tool_result 'ok'")
    verdict = SimpleNamespace(resume=SimpleNamespace(first=(2, "main", 1, "turn 2", sent)),
                              golden=SimpleNamespace(sent={("main", 1): sent}), earlier=())
    assert first_request(verdict)["diff"] == []
    assert _first_request_lines(verdict)[-1] == \
        "  the same as the clean run's request for that turn"
    verdict.golden.sent = {}
    assert first_request(verdict)["clean"] is None
    assert _first_request_lines(verdict)[-1] == "  the clean run sent no request for that turn"
    verdict.resume.first = ()
    assert first_request(verdict) is None and _first_request_lines(verdict) == []


def test_the_html_page_leaves_the_states_out(reports):
    from faultsim.reports.html import render

    page = render(reports["blind"])
    assert "mailer.send#1 turn 2 tool send_receipt" not in page
    assert "k27-after-effect-mailer.send#1" in page  # the map and counterexamples stay


def test_a_point_that_is_no_event_of_the_trace_is_named_by_its_words():
    """The Claude Agent SDK backend's kill points (its hooks, the CLI's transcript writes)
    are not events of the trace its run keeps: their identity is what the point says, and
    a full run's report no longer fails naming them."""
    from faultsim.reports.identity import identities
    from faultsim.killpoints import KillPoint

    points = [(KillPoint(0, None, "start", "k0-start", "the start"), 0),
              (KillPoint(7, None, "transcript-write", "k7-transcript-write-3",
                         "transcript write 3"), 0),
              (KillPoint(8, None, "transcript-write", "k8-transcript-write-4",
                         "transcript write 4"), 0)]
    names = identities(points, [], "process")
    assert names == ["process:start start", "process:transcript-write transcript write 3",
                     "process:transcript-write transcript write 4"]


def _refused_report(path: str, kind: str = "AgentFailedCleanly",
                    category: str = "finding") -> dict:
    return {"ok": False, "runs": [], "refused": [
        {"scenario": path, "agent": "x", "kind": kind, "category": category,
         "message": f"{path}: the agent fails without any crash: boom", "details": ""}]}


def test_a_clean_run_that_fails_on_one_side_is_the_state_the_other_fixes_or_breaks(reports):
    """A report refused before any crash state (its clean run fails: openai-agents
    #4827's 0.23.1) is one state, the clean run, against the other side's passing one."""
    passing = reports["fixed"]
    path = passing["runs"][0]["path"]
    failed = _refused_report(path)
    fixed = compare(failed, passing)
    [run] = fixed.runs
    assert run.side is None and run.counts()["fixed by B"] == 1 and fixed.ok
    assert [s.identity for s in run.states if s.kind == "fixed by B"] == ["the clean run"]
    assert run.states[0].a == "AgentFailedCleanly" and run.states[0].b == "passed"
    broken = compare(passing, failed)
    assert not broken.ok
    assert [(s.identity, s.b) for _, s in broken.regressions] == [
        ("the clean run", "AgentFailedCleanly")]
    assert "B adds 1 failing crash state: receipts / process: the clean run " \
        "(AgentFailedCleanly)" in broken.text()
    both = compare(failed, failed)
    assert [s.kind for r in both.runs for s in r.states] == ["fails in both"] and both.ok
    # a usage or harness error says nothing of the agent: no state, as before
    usage = compare(_refused_report(path, "ScenarioError", "usage"), passing)
    assert usage.runs[0].side == "B" and usage.runs[0].counts()["fixed by B"] == 0


def test_compare_on_a_scenario_runs_on_when_one_agent_fails_its_clean_run(capsys):
    tiny = str(ROOT / "tests" / "data" / "tiny.toml")
    args = ["compare", tiny, "--agent", "reference_agent", "--agent",
            "broken_agents:raises_on_start", "--crashes", "1", "--crash-model", "process"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "broken_agents:raises_on_start: " in out and "the agent fails without any " \
        "crash: RuntimeError: cannot read my configuration" in out
    assert "broken by B: the clean run" in out


# -- torn cuts aligned by kind of cut; a failure that changed (issue 51) -------------------

_WRITE = "process:checkpoint-mid-write fs.write checkpoint.json.tmp#2 turn 1"


def _torn_report(cuts: dict[str, str], how: dict[str, str] | None = None) -> dict:
    """A report of one run whose states are the kills inside one write (`@CUT` ->
    verdict), and the kill after it, passing."""
    how = how or {}
    states = [[f"{_WRITE} @{cut}", f"k9.{cut}-checkpoint-mid-write-checkpoint.json.tmp#2@{cut}",
               verdict, how.get(cut, "" if verdict == "passed" else verdict)]
              for cut, verdict in cuts.items()]
    states.append(["process:checkpoint-rename fs.write checkpoint.json.tmp#2 turn 1",
                   "k9-checkpoint-rename-checkpoint.json.tmp#2", "passed", ""])
    return {"ok": False, "runs": [{"scenario": "s", "crash_model": "process", "agent": "a",
                                   "path": "s.toml", "states": states}]}


def test_torn_cuts_that_exist_only_because_b_writes_more_align_by_kind_of_cut():
    """B's checkpoint is larger: its write has sector cuts @1536 and @2048 that A's has
    not. They tear the same write the same way A's @512 and @1024 do: fails in both, not
    "B adds 2 failing crash states" (which an alignment by byte offset said)."""
    bad = "checkpoint_whole"
    a = _torn_report({"first": bad, "half": bad, "last": "passed", "512": bad, "1024": bad})
    b = _torn_report({"first": bad, "half": bad, "last": "passed", "512": bad, "1024": bad,
                      "1536": bad, "2048": bad})
    diff = compare(a, b)
    assert diff.ok and "B adds 0 failing crash states" in diff.text()
    (run,) = diff.runs
    extra = {s.identity: s for s in run.states if s.aligned_with is not None}
    assert set(extra) == {f"{_WRITE} @1536", f"{_WRITE} @2048"}
    assert all(s.kind == "fails in both" and s.a == bad and s.a_id.endswith("@512")
               for s in extra.values())
    assert run.counts()["only in B"] == 0 and run.counts()["fails in both"] == 6
    assert "aligned by kind of cut with @512" in diff.text()
    # the other way round: A's extra cuts are B's kind too, nothing "only in A"
    back = compare(b, a)
    assert back.ok and back.runs[0].counts()["only in A"] == 0
    # a real regression still is one: B's extra cuts fail where every sector cut of A's
    # write passed
    passing = _torn_report({"first": bad, "half": bad, "last": "passed", "512": "passed",
                            "1024": "passed"})
    broken = compare(passing, b)
    assert not broken.ok
    assert {s.identity for _, s in broken.regressions} == {
        f"{_WRITE} @{c}" for c in ("512", "1024", "1536", "2048")}
    # first, half and last are kinds of their own: never aligned with a sector cut
    only_half = compare(_torn_report({"1024": bad}), _torn_report({"half": bad}))
    assert not only_half.ok and only_half.runs[0].counts()["only in B"] == 1


def test_a_failure_that_changed_between_a_and_b_says_so():
    """A hang that became a 400 is still "fails in both", and the line says the failure
    changed; the same failure on both sides says nothing more."""
    a = _torn_report({"first": "completes_or_escalates"}, {"first": "hang"})
    b = _torn_report({"first": "api_valid+completes_or_escalates"},
                     {"first": "HTTP 400, raised BadRequestError"})
    diff = compare(a, b)
    assert diff.ok  # no state B adds: it failed before
    (state,) = [s for s in diff.runs[0].states if s.kind == "fails in both"]
    assert state.changed == "A hang, B HTTP 400, raised BadRequestError"
    text = diff.text()
    assert "1 fails in both (1 failing another way)" in text
    assert "; the failure changed: A hang, B HTTP 400, raised BadRequestError" in text
    assert diff.to_json()["runs"][0]["states"][0]["changed"] == state.changed
    same = compare(a, a)
    assert "changed" not in same.text() and "another way" not in same.text()
    # a hang that became a raise: the same invariant, another cause
    raised = _torn_report({"first": "completes_or_escalates"}, {"first": "raised KeyError"})
    assert compare(a, raised).runs[0].states[0].changed == "A hang, B raised KeyError"
    # a report written before `how` (three fields): told by its invariants alone
    old = _torn_report({"first": "completes_or_escalates"})
    for entry in old["runs"][0]["states"]:
        del entry[3]
    assert compare(old, b).runs[0].states[0].changed == \
        "A completes_or_escalates, B HTTP 400, raised BadRequestError"
    assert compare(old, old).runs[0].states[0].changed is None


def test_the_guard_names_how_a_resumed_run_failed():
    """The `how` of a report's state comes from the guard's cause: a hang, a raise,
    HTTP 400 (what compare's "the failure changed" reads)."""
    from types import SimpleNamespace

    from faultsim.judge.oracle import api_valid, completes_or_escalates

    hung = SimpleNamespace(timed_out=True, error="no answer in 30 s")
    assert completes_or_escalates(None, hung).fact("cause") == "hang"
    raised = SimpleNamespace(timed_out=False, error="BadRequestError: Error code: 400")
    assert completes_or_escalates(None, raised).fact("cause") == "raised BadRequestError"
    refused = SimpleNamespace(world=SimpleNamespace(model=SimpleNamespace(
        invalid_requests=[SimpleNamespace(message="messages: bad")])))
    assert api_valid(None, refused).fact("cause") == "HTTP 400"
