"""The pieces the two real-process backends share (issue 34 item 6): the command backend
(`faultsim.command`) and the Claude Agent SDK adapter use one copy each of the sandbox's
read and write (`faultsim.tree`), of the thread that follows strace's log
(`faultsim.strace.follow`) and of the memo that lets equal crash states share one resumed
run (`faultsim.pipeline.sweep.Shared`). Each piece checked here on its own, both ways; the
backends' own tests (tests/test_command.py, tests/test_claude_agent_sdk.py) check that the
findings with the memo on and off are the same."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from faultsim.agent import Outcome
from faultsim.crashmodel import DIR, CrashState
from faultsim.oracle import Golden, Violation
from faultsim.pipeline.sweep import ResumeResult, Shared
from faultsim.scenario import load_scenario
from faultsim.strace import follow
from faultsim.tree import read_tree, regular, under, write_tree

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
