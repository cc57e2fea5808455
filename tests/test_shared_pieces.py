"""The pieces the two real-process backends share (issue 34 item 6): the command backend
(`faultsim.command`) and the Claude Agent SDK adapter use one copy each of the sandbox's
read and write (`faultsim.core.tree`), of the thread that follows strace's log
(`faultsim.host.strace.follow`), of the memo that lets equal crash states share one resumed
run (`faultsim.pipeline.sweep.Shared`), of the kill-point loop, its landed check and its
conversion to the report (`faultsim.pipeline.crashes`), and of the clean runs' check
saying where two runs part (`faultsim.pipeline.golden.agree`). Each piece checked here on
its own, both ways, and the loop through both backends; the backends' own tests
(tests/test_command.py, tests/test_claude_agent_sdk.py) check that the findings with the
memo on and off are the same."""
from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Callable

import sys
from dataclasses import dataclass, field

import pytest

from faultsim.agent import Outcome
from faultsim.core.crashmodel import DIR, CrashState
from faultsim.errors import NonDeterminismError
from faultsim.killpoints import KillPoint
from faultsim.judge.oracle import Golden, Violation
from faultsim.pipeline.crashes import Found, Kill, explored, sweep, verdicts
from faultsim.pipeline.golden import agree
from faultsim.pipeline.sweep import ResumeResult, Shared
from faultsim.reports.report import ModelRun
from faultsim.core.trace import Event
from faultsim.scenario import load_scenario
from faultsim.host.strace import follow
from faultsim.core.tree import read_tree, regular, under, write_tree

ROOT = Path(__file__).resolve().parent.parent


def test_a_sandbox_written_is_read_back_the_same_with_or_without_dirs_and_links(tmp_path):
    files = {"work": DIR, "work/a.txt": b"1", "work/d": DIR, "work/d/.hidden": b"2",
             "work/empty": DIR, "home": DIR, "home/.claude.json": b"{}"}
    write_tree(tmp_path / "sb", files)
    assert read_tree(tmp_path / "sb") == dict(sorted(files.items()))
    os.symlink(tmp_path / "sb/work/a.txt", tmp_path / "sb/work/link")
    os.symlink(tmp_path / "sb/work/d", tmp_path / "sb/home/dlink")
    # the command backend reads a linked file through; the Claude adapter leaves links out
    assert read_tree(tmp_path / "sb")["work/link"] == b"1"
    plain = read_tree(tmp_path / "sb", dirs=False, links=False)
    assert plain == {"home/.claude.json": b"{}", "work/a.txt": b"1", "work/d/.hidden": b"2"}
    assert under(plain, "work") == {"a.txt": b"1", "d/.hidden": b"2"}
    assert regular(read_tree(tmp_path / "sb/work")) == {"a.txt": b"1", "d/.hidden": b"2",
                                                        "link": b"1"}
    write_tree(tmp_path / "sb", {"x": b""})  # whole: what was there is gone
    assert read_tree(tmp_path / "sb") == {"x": b""}


def test_the_log_follower_stops_when_its_step_is_done_or_when_told():
    seen = []
    done = follow(lambda: seen.append(1) or len(seen) == 3, threading.Event(), tick=0.001)
    done.join(5)
    assert not done.is_alive() and len(seen) == 3
    stop = threading.Event()
    going = follow(lambda: False, stop, tick=0.001)
    time.sleep(0.02)
    assert going.is_alive()
    stop.set()
    going.join(5)
    assert not going.is_alive()


def _golden() -> Golden:
    scenario = load_scenario(ROOT / "scenarios" / "refunds.toml")
    return Golden.of(Outcome("completed", "done"), scenario.build_world(), {}, [],
                     scenario.checkpoint)


def _states() -> tuple[CrashState, CrashState]:
    whole = b'{"version": 1, "turns": 2}'
    return (CrashState.of("process", "whole", {"checkpoint.json": whole}),
            CrashState.of("process", "torn", {"checkpoint.json": whole[:9]}))


def _counted(runs: list, violations: list) -> Callable[[], ResumeResult]:
    """A resume that counts its calls in `runs` and shows `violations`."""
    def resume() -> ResumeResult:
        runs.append(1)
        return ResumeResult(list(violations), None, 3)
    return resume


def test_equal_keys_share_one_resumed_run_and_each_state_is_judged_on_its_own_bytes():
    golden = _golden()
    whole, torn = _states()
    runs: list = []
    resume = _counted(runs, [Violation.of("completes_or_escalates", "hung")])
    memo = Shared(golden)
    # a backend's key may make two states equal (the Claude adapter masks the CLI's ids):
    # here both are keyed by the whole one
    first = memo.judge([], whole, (whole, "w"), resume, "k1 [whole]")
    second = memo.judge([], torn, (whole, "w"), resume, "k2 [torn]")
    assert len(runs) == 1
    assert first[2] is None and second[2] == "k1 [whole]"  # which run it shares
    assert first[1] is second[1] and first[3] == second[3] is not None
    # the resumed run's violation is in both; the torn checkpoint only in the torn state's
    assert [v.invariant for v in first[0]] == ["completes_or_escalates"]
    assert [v.invariant for v in second[0]] == ["checkpoint_whole", "completes_or_escalates"]
    # another world (signature) is another key: resumed again
    third = memo.judge([], whole, (whole, "another world"), resume, "k3 [whole]")
    assert len(runs) == 2 and third[2] is None


def test_share_off_or_no_key_resumes_every_state():
    golden = _golden()
    whole, _ = _states()
    runs: list = []
    resume = _counted(runs, [])
    off = Shared(golden, share=False)
    for _ in range(2):
        assert off.judge([], whole, (whole, ""), resume, "k1")[2:] == (None, None)
    on = Shared(golden)
    for _ in range(2):
        assert on.judge([], whole, None, resume, "k1")[2:] == (None, None)
    assert len(runs) == 4


# -- the kill-point loop (faultsim.pipeline.crashes), on a backend of its own ---------------
def _point(n: int) -> KillPoint:
    return KillPoint(n, None, "after-effect", f"k{n}-after-effect", f"event {n}")


@dataclass
class _Backend:
    """A backend whose crash runs, states and resumes are given: the loop's own logic, with
    no process run. Each kill leaves a whole state (both models') and a torn one (power's);
    a resume from the torn state shows a violation."""

    kills: dict
    where: str = "s.toml: "
    resumed: list = field(default_factory=list)

    def crash(self, point):
        return self.kills[point.index]

    def states(self, point, kill):
        whole, torn = _states()
        return [Found(whole, ("process", "power"), "whole"), Found(torn, ("power",), "torn")]

    def key(self, point, kill, found):
        return found.state, ""  # equal bytes, one world: shared across points

    def resume(self, point, kill, found):
        self.resumed.append((point.id, found.label))
        bad = [Violation.of("completes_or_escalates", "hung")] if found.label == "torn" \
            else []
        return ResumeResult(bad, None, 1)

    def engine_point(self, point):
        return point


def _landed(n: int) -> Kill:
    return Kill(f"run{n}", None, reached=True, landed=True)


def test_the_loop_judges_each_state_into_each_of_its_models_and_counts_as_resumed_or_shared():
    golden = _golden()
    backend = _Backend({1: _landed(1), 2: _landed(2)})
    said: list[str] = []
    swept = sweep(backend, [_point(1), _point(2)], golden, progress=said.append)
    assert [p.index for p in swept.landed] == [1, 2] and swept.missed == []
    assert backend.resumed == [("k1-after-effect", "whole"), ("k1-after-effect", "torn")]
    assert [j.orders for j in swept.judged] == [{"process": 0, "power": 0}, {"power": 1}] * 2
    assert said[0] == "k1-after-effect [whole]: ok"
    assert said[3] == ("k2-after-effect [torn]: checkpoint_whole, completes_or_escalates "
                       "(the resumed run of k1-after-effect [torn], an equal state)")
    runs = {m: ModelRun(None, "a", m, [], []) for m in ("process", "power")}
    verdicts(runs, swept.judged, golden, backend.engine_point)
    process, power = runs["process"], runs["power"]
    assert [(v.kill_point.index, v.order, v.persisted) for v in process.verdicts] == [
        (1, 0, "whole"), (2, 0, "whole")]
    assert [(v.kill_point.index, v.order, v.persisted, v.ok) for v in power.verdicts] == [
        (1, 0, "whole", True), (1, 1, "torn", False), (2, 0, "whole", True),
        (2, 1, "torn", False)]
    assert (process.judged, process.reused, power.judged, power.reused) == (1, 1, 2, 2)
    assert explored(swept.judged, "process") == [_point(1), _point(2)]
    # the long way: every state resumed, the same verdicts
    again = sweep(_Backend({1: _landed(1), 2: _landed(2)}), [_point(1), _point(2)], golden,
                  share=False)
    assert [(j.point, j.found.label, j.violations) for j in again.judged] == \
        [(j.point, j.found.label, j.violations) for j in swept.judged]
    assert again.resumes == 4 and swept.resumes == 2


def test_the_loop_refuses_a_kill_not_reached_or_not_landed_and_reports_one_missed():
    golden = _golden()
    short = Kill("run", None, reached=False, landed=False, met="3 of 9", error=None)
    alive = Kill("run", None, reached=True, landed=False, why="the group outlived SIGKILL")
    for kill, why in ((short, "the crash run never reached its kill point (it met 3 of 9; "
                       "it completed): the run is not deterministic"),
                      (alive, "the group outlived SIGKILL")):
        (j,) = sweep(_Backend({1: kill}), [_point(1)], golden).judged  # tried twice
        assert j.unjudged and [(v.invariant, v.explanation) for v in j.violations] == [
            ("kill_point_judged", f"s.toml: k1-after-effect: {why} (on a second try too)")]
    said: list[str] = []
    missed = Kill("run", None, reached=False, landed=False, missed="not reached (fewer)")
    swept = sweep(_Backend({1: missed, 2: _landed(2)}), [_point(1), _point(2)], golden,
                  progress=said.append)
    assert swept.missed == [_point(1)] and swept.landed == [_point(2)]
    assert said[0] == "k1-after-effect: not reached (fewer)"
    assert {j.point.index for j in swept.judged} == {2}


def test_two_clean_runs_that_part_are_refused_saying_where_in_the_agents_terms():
    a = [Event(1, "point.model-request", "turn1", "#1"), Event(2, "point.x", "pay", "#1")]
    b = [a[0], Event(2, "point.x", "send", "#1")]
    agree(a, a, lambda e, before: e.subject)
    with pytest.raises(NonDeterminismError) as caught:
        agree(a, b, lambda e, before: f"{e.subject} after {len(before)}")
    said = str(caught.value)
    assert "\n" not in said and said.startswith("two clean runs part at event #2")
    assert said.endswith("(after 1 equal events, the first run's next is pay after 1, the "
                         "second's send after 1)")
    with pytest.raises(NonDeterminismError) as caught:
        agree(a, a[:1], lambda e, before: e.subject)
    assert "one run goes on with pay, the other stops" in str(caught.value)


# -- the loop through both backends --------------------------------------------------------
COMMAND_SCENARIO = ROOT / "examples" / "any_language" / "scenario.toml"
COMMAND_AGENT = ROOT / "tests" / "command_agents" / "raw_agent.py"
CLAUDE_EXAMPLE = ROOT / "examples" / "claude_agent_sdk"
# the command's kill right after the payment: the planted mistake (a key drawn afresh per
# process) pays twice from every state it leaves. Each backend shares resumed runs here:
# the command's power state "everything persisted" is its process state; the Claude
# agent's kills at its payment handler's entry and before the payment leave equal states
COMMAND_POINTS = ("k1-after-model-response-model@s@0#1", "k7-after-effect-payments.submit#1")
CLAUDE_POINTS = (("handler-entry", "pay_invoice", 1), ("before-effect", "pay", 1))


def _command_backend():
    from faultsim.command.syscalls import strace_unavailable

    if strace_unavailable() is not None:
        pytest.skip(f"strace: {strace_unavailable()}")


def _claude_backend():
    pytest.importorskip("claude_agent_sdk")
    from faultsim.adapters import claude_agent_sdk as cs

    why = cs.cli_unavailable()
    if why:
        pytest.skip(why)
    sys.path.insert(0, str(CLAUDE_EXAMPLE))
    import claude_billing_agent

    return cs, claude_billing_agent


def _explore(backend: str, said: list[str]) -> tuple[int, list[ModelRun]]:
    """(kills landed, the report's runs) of a small sweep of `backend`."""
    from faultsim.scenario import load_scenario

    if backend == "command":
        _command_backend()
        from faultsim.command import explore

        found = explore(f"cmd:{sys.executable} {COMMAND_AGENT} --mistake",
                        load_scenario(COMMAND_SCENARIO), crash_models=("process", "power"),
                        only=lambda p: p.id in COMMAND_POINTS, progress=said.append)
        return found.kills_landed, list(found.runs.values())
    cs, agent = _claude_backend()
    from faultsim.adapters.claude_agent_sdk.report import model_runs

    found = cs.explore(agent.run_billing, load_scenario(CLAUDE_EXAMPLE / "scenario.toml"),
                       only=lambda kp: kp.key in CLAUDE_POINTS, writes=False,
                       progress=said.append)
    return found.kills_landed, model_runs(found, "claude-agent-sdk:agent", ("process",),
                                          timeout=60.0)


@pytest.mark.parametrize("backend", ["command", "claude-agent-sdk"])
def test_both_backends_report_each_state_the_loop_judged_and_count_their_kills(backend):
    said: list[str] = []
    kills, runs = _explore(backend, said)
    points = {v.kill_point.id for r in runs for v in r.verdicts}
    assert kills == len(points) == 2
    assert any(" (the resumed run of " in line for line in said)  # the memo shared one
    # the report's verdicts are the states the loop said it judged, one for one
    told = sorted(line.split(" (the resumed run of ")[0] for line in said)
    label = (lambda r, v: f"{r.crash_model}: {v.persisted}") if backend == "command" \
        else (lambda r, v: v.persisted)
    reported = sorted(f"{v.kill_point.id} [{label(r, v)}]: " + (
        ", ".join(x.invariant for x in v.violations) or "ok")
        for r in runs for v in r.verdicts)
    assert reported == told and told
    for run in runs:
        assert run.judged + run.reused == len(run.verdicts)
    if backend == "command":  # the duplicate payment is in each crash model's report
        assert {r.crash_model for r in runs for v in r.verdicts
                if v.kill_point.id == COMMAND_POINTS[1]
                and "effects_exactly_once" in {x.invariant for x in v.violations}} == \
            {"process", "power"}


@pytest.mark.parametrize("backend", ["command", "claude-agent-sdk"])
def test_both_backends_refuse_a_kill_that_did_not_land(backend, monkeypatch):
    """The kill goes in (each backend's group kill runs) but is reported not proven, on a
    second try too: no state is judged, each point is its finding, the sweep goes on."""
    said: list[str] = []
    if backend == "command":
        _command_backend()
        import faultsim.command.incarnation as inc

        real = inc.kill_group
        monkeypatch.setattr(inc, "kill_group", lambda p, *a: (real(p, *a), False)[1])
    else:
        _claude_backend()
        import faultsim.adapters.claude_agent_sdk.control as control

        real = control.kill_clis
        monkeypatch.setattr(control, "kill_clis", lambda *a: (real(*a), False)[1])
        # and no stop proven either: a run stopped at each point turns its first stop into
        # that point's kill (control.Controller._stop), which must then be refused too
        monkeypatch.setattr(control, "stop_groups", lambda pids: False)
    landed, runs = _explore(backend, said)
    assert landed == 0 and said and all(
        re.fullmatch(r"k\d+-\S+ \[not judged\]: kill_point_judged", line) for line in said)
    found = [v for run in runs for v in run.verdicts]
    assert found and all(
        [x.invariant for x in v.violations] == ["kill_point_judged"]
        and re.match(r".*scenario\.toml: k\d+-.*\(on a second try too\)$",
                     v.violations[0].explanation) for v in found)
    assert all(run.judged == 0 for run in runs)  # no state judged


def test_the_claude_adapters_two_clean_runs_are_checked_by_the_same_piece(monkeypatch, tmp_path):
    """`faultsim list` on a Claude Agent SDK agent runs it clean twice: runs that meet the
    same kill points pass, runs that part are refused in one line saying where, in the
    agent's terms (`agree`, as the command backend's clean runs). The runs' kill points are
    given here: no CLI is started."""
    pytest.importorskip("claude_agent_sdk")
    from faultsim.adapters.claude_agent_sdk import sweep as cs_sweep
    from faultsim.adapters.claude_agent_sdk.control import KillPoint as ClaudePoint
    from faultsim.scenario import load_scenario

    first = [ClaudePoint(1, "model-request", "turn1", 1),
             ClaudePoint(2, "handler-entry", "pay_invoice", 1)]
    runs: list = []

    def clean(second):
        def golden_run(*_args, **_kwargs):
            runs.append(1)
            points = first if len(runs) % 2 else second
            return None, points, type("Inc", (), {"seconds": 1.0})()
        return golden_run

    scenario = load_scenario(CLAUDE_EXAMPLE / "scenario.toml")
    monkeypatch.setattr(cs_sweep, "golden_run", clean(first))
    survey = cs_sweep.survey(None, scenario, root=tmp_path, writes=False)
    assert survey.kill_points == first
    parted = [first[0], ClaudePoint(2, "handler-entry", "send_email", 1)]
    monkeypatch.setattr(cs_sweep, "golden_run", clean(parted))
    with pytest.raises(NonDeterminismError) as caught:
        cs_sweep.survey(None, scenario, root=tmp_path, writes=False)
    said = str(caught.value)
    assert "\n" not in said and said.startswith(f"{scenario.path}: two clean runs part at "
                                                "event #2")
    assert said.endswith("(after 1 equal events, the first run's next is the SDK's call of "
                         "tool handler pay_invoice, the second's the SDK's call of tool "
                         "handler send_email)")
