"""What faultsim says while it works (faultsim.cli.console.Progress): the plan and its forecast
of the largest costs; on a terminal a bar; off one (a CI log, a pipe) a plain line at most
every N seconds, driven by a timer as well as by the engine, so a stage where nothing moves
(the clean runs, one long crash run) still says it is working and where; never from a
forked child. And a clean run's time limit is on the agent's own time: faultsim's own work
in it is not counted, and a hang says whose time it was. Clocks are injected; the one
end-to-end run is a two-turn scenario whose agent is slow to start (tests/slow_agent.py)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time

import pytest

import faultsim
from conftest import DATA, ROOT
from faultsim.cli import console
from faultsim.cli import build_parser
from faultsim.cli.args import project_defaults
from faultsim.settings.config import ConfigError, load
from faultsim.cli.console import Progress
from faultsim.errors import AgentFailedCleanly
from faultsim.killpoints import KillPoint
from faultsim.pipeline.sweep import Plan, largest_write

ONE_CHARGE = DATA / "one_charge.toml"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _piped(every: float = 10.0) -> tuple[Progress, io.StringIO, _Clock]:
    clock, stream = _Clock(), io.StringIO()
    return Progress("tiny", stream, every=every, clock=clock), stream, clock


def test_off_a_terminal_a_line_every_n_seconds_with_figures_or_still_working():
    progress, stream, clock = _piped()
    lines = lambda: stream.getvalue().splitlines()  # noqa: E731
    clock.now += 9.9
    progress.tick()
    assert lines() == []  # under 10 s: silent
    clock.now += 0.1
    progress.tick()  # the timer, in the clean runs: nothing counts there
    assert lines() == ["tiny: still working: clean runs, 10s in"]
    progress.plan(Plan("tiny", 40, 40, {"process": 40}, 1))
    clock.now += 4
    progress(10, 40)
    assert len(lines()) == 2  # the plan line was 4 s ago
    clock.now += 6
    progress(20, 40)  # the engine's call, due: the figures of the stage
    assert lines()[-1] == "tiny: 20/40 kill points, 2.0/s, ETA 10s"
    clock.now += 10
    progress.tick()  # nothing moved in 10 s
    assert lines()[-1] == "tiny: still working: kill points, 20/40 done, 20s in"
    clock.now += 10
    progress(40, 40)
    clock.now += 10
    progress.tick()
    assert lines()[-1] == "tiny: still working after kill points (40/40 done), 40s in"
    assert len(lines()) == 6


def test_the_pairs_stage_has_a_rate_of_its_own():
    progress, stream, clock = _piped()
    progress.plan(Plan("tiny", 40, 40, {"process": 40}, 2))
    clock.now += 30
    progress(0, 8, stage="pairs (process)")
    clock.now += 10
    progress(4, 8, stage="pairs (process)")
    assert stream.getvalue().splitlines()[-1] == \
        "tiny: 4/8 first crash states, pairs (process), 0.4/s, ETA 10s"


def test_the_plan_names_its_largest_costs():
    progress, stream, _ = _piped()
    progress.plan(Plan("big", 102_401, 102_401, {"process": 102_401}, 1, clean_seconds=1.3,
                       timeout=13.0, largest_write=(102_400, 50 << 20,
                                                    "#12 fs.write big.bin 0->52428800 ab12")))
    assert stream.getvalue().splitlines()[1] == (
        "tiny: largest costs: a clean incarnation took 1.3 s; a crash run counts as hung after "
        "13 s; the largest write, 50.0 MB to big.bin (event #12), has 102400 torn kill points")
    progress, stream, _ = _piped()
    progress.plan(Plan("big", 40, 40, {"process": 40}, 1, largest_write=(30, 50 << 20, "?"),
                       torn_bounded=({"file": "big.bin", "bytes": 50 << 20, "cuts": 30,
                                      "of": 102_402},)))
    assert stream.getvalue().splitlines()[1] == (
        "tiny: largest costs: the largest write, 50.0 MB (?), has 30 torn kill points; 1 large "
        "write torn at 30 representative cuts of 102402 ([fault_profile] torn_cuts = \"all\" "
        "tries every one)")
    progress, stream, _ = _piped()
    progress.plan(Plan("tiny", 3, 3, {"process": 3}, 1))  # a backend that knows no costs
    assert len(stream.getvalue().splitlines()) == 1


def test_the_largest_write_is_the_one_with_the_most_torn_kill_points():
    def point(index, offset, where):
        return KillPoint(index, offset, "mid-write", f"k{index}.{offset}", where)

    points = [point(3, None, "#3 fs.create a"), point(5, 1, "#5 fs.write a 0->100"),
              point(5, 50, "#5 fs.write a 0->100"), point(5, 99, "#5 fs.write a 0->100"),
              point(9, 1, "#9 fs.write b 0->3"), point(9, 2, "#9 fs.write b 0->3")]
    assert largest_write(points) == (3, 100, "#5 fs.write a 0->100")
    assert largest_write(points[:1]) is None


def test_a_terminal_shows_the_stage_and_its_time_while_nothing_moves():
    clock, stream = _Clock(), _Terminal()
    progress = Progress("tiny", stream, every=10.0, clock=clock)
    clock.now += 0.5
    progress.tick()
    assert stream.getvalue() == ""  # under a second
    clock.now += 1.5
    progress.tick()
    assert stream.getvalue() == "\rtiny: clean runs, 2s "
    progress.plan(Plan("tiny", 40, 40, {"process": 40}, 1))
    assert stream.getvalue().startswith("\rtiny: clean runs, 2s \ntiny: 40 kill points")


def test_switched_off_it_prints_no_line_and_starts_no_thread():
    progress, stream, clock = _piped(every=0)
    clock.now += 600
    progress.tick()
    progress(1, 2)
    assert stream.getvalue() == "" and progress.start()._timer is None
    with pytest.raises(ConfigError, match="FAULTSIM_PROGRESS_SECONDS = -1.0: expected "
                                          r"seconds >= 0 \(0: no progress lines\)"):
        load(environ={"FAULTSIM_PROGRESS_SECONDS": "-1"})
    assert load(environ={"FAULTSIM_PROGRESS_SECONDS": "2.5"}).values["progress_seconds"] == 2.5


def test_the_timer_thread_talks_while_the_engine_is_silent():
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    progress = Progress("tiny", stream, every=0.05).start()
    try:
        with os.fdopen(read) as lines:
            assert lines.readline() == "tiny: still working: clean runs, 0s in\n"
    finally:
        progress.close()
        stream.close()
    assert not progress._timer.is_alive()


def test_a_forked_child_neither_writes_nor_inherits_a_held_lock():
    # the in-process mode forks crash runs while the timer thread may be writing: the fork
    # waits for the write, and the child, which has no timer, never writes
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    progress = Progress("tiny", stream, every=0.01)
    holding = threading.Event()

    def write_slowly():
        with console._WRITING:
            holding.set()
            time.sleep(0.3)

    writer = threading.Thread(target=write_slowly)
    writer.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            time.sleep(0.05)
            progress.tick()
            progress(1, 2)
            code = 0 if console._WRITING.acquire(timeout=1.0) else 1
        finally:
            os._exit(code)
    writer.join()
    _, status = os.waitpid(pid, 0)
    stream.close()
    with os.fdopen(read) as written:
        assert written.read() == ""
    assert os.WEXITSTATUS(status) == 0  # 1: the child's lock was held by a thread it lacks


def test_piped_a_slow_clean_run_is_told_while_it_runs():
    env = {**os.environ, "FAULTSIM_PROGRESS_SECONDS": "0.2", "SLOW_AGENT_SECONDS": "0.6"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultsim", "run", str(ONE_CHARGE), "--agent",
         "tests.slow_agent", "--crashes", "1", "--kill-point", "k0-start"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = [(time.monotonic(), line) for line in proc.stderr]
    assert proc.wait(timeout=120) == 0
    ended = time.monotonic()
    where = ("the agent in wait_for_upstream (tests/slow_agent.py), called from run "
             "(tests/slow_agent.py:")
    told = [at for at, line in lines if line.startswith(
        "one_charge: still working: clean runs, ") and where in line]
    # told while the agent slept, not in a burst at the end
    assert told and ended - told[0] > 1.0, lines
    assert any(line.startswith("one_charge: largest costs: a clean incarnation took ")
               for _, line in lines)


def test_a_clean_runs_limit_does_not_count_faultsims_fingerprinting(monkeypatch):
    from faultsim.inprocess import convergence
    from faultsim.inprocess.sandbox import Explorer
    from tests import state_agent

    key = convergence.state_key  # looked up there: its cuts and the clean run's course

    def slow_key(*args):  # a long run's fingerprints, slow to take: faultsim's own time
        time.sleep(0.6)
        return key(*args)

    monkeypatch.setattr(convergence, "state_key", slow_key)
    scenario = faultsim.load_scenario(ONE_CHARGE)
    with Explorer(state_agent.make_agent, scenario, timeout=1.0) as ex:
        golden = ex.golden()  # two requests a run: 1.2 s of faultsim's own, under 1 s's limit
    assert golden.outcome.status == "completed"


def test_a_hung_clean_run_is_the_agents_and_says_whose_time_it_was(monkeypatch):
    from faultsim.inprocess.sandbox import Explorer
    from tests import slow_agent

    monkeypatch.setenv("SLOW_AGENT_SECONDS", "3")
    scenario = faultsim.load_scenario(ONE_CHARGE)
    with pytest.raises(AgentFailedCleanly) as failed:
        with Explorer(slow_agent.make_agent, scenario, timeout=1.0) as ex:
            ex.golden()
    assert str(failed.value).startswith(
        f"{scenario.path}: the agent fails without any crash: the clean run hung: no answer "
        "within 1 s; stuck in wait_for_upstream (tests/slow_agent.py), called from run")
    assert str(failed.value).endswith("(of the agent's own time: faultsim's own work during "
                                      "the run, 0.0 s, was not counted; --timeout S sets the "
                                      "limit)")


def test_faultsim_list_gives_clean_runs_the_limit_run_gives_and_fingerprints_nothing(
        monkeypatch):
    from faultsim.inprocess.explore import survey
    from faultsim.inprocess import convergence
    from tests import state_agent

    ns = build_parser().parse_args(["list", str(ONE_CHARGE)])
    monkeypatch.delenv("FAULTSIM_TIMEOUT", raising=False)
    project_defaults(ns)
    assert ns.timeout == "auto"  # 300 s of the agent's own time, as `faultsim run`'s

    def fingerprint(*args):
        raise AssertionError("a survey records no course to cut resumed runs against")

    monkeypatch.setattr(convergence.Recorder, "__call__", fingerprint)
    points, states, _ = survey(state_agent.make_agent, faultsim.load_scenario(ONE_CHARGE))
    assert len(points) == states["process"] > 0
