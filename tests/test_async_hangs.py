"""Agents whose kill does not unwind, and async agents that hang (issue 51 items 7 and 12),
on tests/workflow_agent.py's agents (a LlamaIndex-Workflows-shaped agent in plain asyncio,
the same on a worker thread, and probes), tests/data/one_charge.toml, one kill point each:

- a kill that ends a step's task (not run()'s) stops the incarnation's loop at once: no
  wait for a stream that never ends, the same verdicts on every worker count;
- a kill that does not unwind within the time limit is named as such (the frame it did not
  unwind through), its states judged as it left them, never reported as the agent's hang;
  one that cannot be stopped inside the process is its point's finding, the sweep goes on;
- a hung coroutine is reported at the agent's own code;
- nothing of asyncio's is printed about the tasks a kill left;
- SIGTERM ends a run stuck in such an agent within seconds, children included."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import faultsim
import workflow_agent
from conftest import DATA

SCENARIO = faultsim.load_scenario(DATA / "one_charge.toml")
IN_A_STEP = "k17-after-model-response-model@s@1#1"  # raised in the workflow's step task
IN_THE_WORKER = "k17-after-model-response-model@s@1#1"  # raised in the worker thread
IN_RUN = "k3-checkpoint-rename-state.json.tmp#3"  # raised in run()'s own thread


def _line(text: str) -> int:
    with open(workflow_agent.__file__) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def _explore(factory, point: str, **options):
    started = time.monotonic()
    report = faultsim.explore(factory, SCENARIO, crashes=1, only=lambda p: p.id == point,
                              **options)
    return report, time.monotonic() - started


def _verdicts(report) -> list:
    return [(v.kill_point.id, v.order, [(x.invariant, x.explanation) for x in v.violations])
            for v in report.runs[0].verdicts]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_kill_that_ends_a_step_task_stops_the_loop_at_once(workers):
    """The step's task dies of the kill and the stream would wait forever: the loop stops
    there (nothing after it could be a finding), long before the 30 s limit."""
    report, took = _explore(workflow_agent.make_agent, IN_A_STEP, workers=workers,
                            timeout=30)
    (run,) = report.runs
    assert [p.id for p in run.explored] == [IN_A_STEP] and report.ok
    assert run.notes == []  # it unwound: nothing to say
    assert took < 25, took  # two clean runs and one resume, not the 30 s limit


@pytest.mark.parametrize("workers", [0, 1])
def test_a_kill_that_does_not_unwind_is_named_and_judged_not_a_hang(workers):
    """The worker thread dies of the kill and run() waits on its queue forever: stopped
    at the limit, named by the frame the kill did not unwind through, judged as the kill
    left it; never the agent's hang."""
    report, _ = _explore(workflow_agent.threaded, IN_THE_WORKER, workers=workers,
                         timeout=1)
    (run,) = report.runs
    assert [p.id for p in run.explored] == [IN_THE_WORKER] and report.ok, \
        report.counterexamples(1)
    (note,) = run.notes
    assert note == (
        f"1 kill point(s) waited out the time limit (1 s) after their kill, e.g. "
        f"{IN_THE_WORKER}: the kill did not unwind through worker "
        f"(tests/workflow_agent.py:{_line('done = loop.run_until_complete(self.step())')}): "
        "run() had not ended 1 s after it, waiting in run (tests/workflow_agent.py); try "
        "--mode subprocess, where a kill stops every thread at once; their states were "
        "judged as the kill left them")


def test_a_kill_that_cannot_be_stopped_is_its_points_finding():
    """run() swallows every exception forever once its worker died: no limit ends it from
    inside the forked child, the parent stops it at its deadline (twice the limit and 5 s)
    and the point is reported as not judged, not as a hang."""
    report, _ = _explore(workflow_agent.swallows_everything, IN_RUN, workers=1,
                         timeout=0.5)
    (run,) = report.runs
    (verdict,) = [v for v in run.verdicts if v.violations]
    (violation,) = verdict.violations
    assert (verdict.kill_point.id, violation.invariant) == (IN_RUN, "kill_point_judged")
    assert violation.explanation == (
        "the kill did not unwind: its crash run's process had not ended 6 s after it and "
        "was stopped; try --mode subprocess, where a kill stops every thread at once")
    assert all(v.violations == [violation] for v in run.verdicts)  # every state of it


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_a_hung_coroutine_is_reported_at_the_agents_code(mode):
    only = lambda p: p.id == IN_A_STEP  # noqa: E731
    if mode == "in-process":
        report = faultsim.explore(workflow_agent.hangs_on_resume, SCENARIO, crashes=1,
                                  only=only, timeout=1)
    else:
        from faultsim.real.explore import explore_subprocess

        report = explore_subprocess("workflow_agent:hangs_on_resume", SCENARIO, only=only,
                                    timeout=1)
    (hang,) = [v.explanation for f in report.runs[0].failures for v in f.violations]
    assert hang == ("the resumed agent hung: no answer within 1 s; stuck in wait_for_peer "
                    "(tests/workflow_agent.py), called from run "
                    f"(tests/workflow_agent.py:{_line('await wait_for_peer()')})")


def test_no_word_from_asyncio_about_what_the_kills_left(tmp_path):
    """Run as a user runs it (pytest would catch asyncio's log and the unraisable hook):
    nothing after the report about the tasks the kills left pending or ended."""
    done = subprocess.run(
        [sys.executable, "-m", "faultsim", "run", str(DATA / "one_charge.toml"), "--agent",
         "workflow_agent:make_agent", "--workers", "0", "--crashes", "1", "--kill-point",
         IN_A_STEP, "--kill-point", "k20-checkpoint-rename-state.json.tmp#12"],
        env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for noise in ("Task was destroyed", "Task exception was never retrieved",
                  "Event loop is closed", "Traceback"):
        assert noise not in done.stdout + done.stderr, done.stderr


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(workflow_agent.__file__), os.environ.get("PYTHONPATH", "")]))


def test_sigterm_ends_a_run_stuck_in_an_async_agent_children_too(tmp_path):
    """The forking driver waits for a busy child inside the agent's step task when SIGTERM
    comes: it ends the run (exit 143) within seconds, and no child is left."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultsim", "run", str(DATA / "one_charge.toml"), "--agent",
         "workflow_agent:hangs_on_resume", "--workers", "1", "--timeout", "120",
         "--crashes", "1"], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    children: list[int] = []
    deadline = time.monotonic() + 60
    while not children and time.monotonic() < deadline:  # a child resuming, hung
        time.sleep(0.5)
        children = _children(proc.pid)
    assert children, "no crash run was forked"
    time.sleep(2)  # its resumed run hangs; the driver waits for it at its next point
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    try:
        proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and time.monotonic() - started < 15
    time.sleep(0.5)
    assert not [pid for pid in children if _alive(pid)]


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False

