"""The JavaScript agent (agent.mjs) under faultsim, run as a command: node, its
@anthropic-ai/sdk client at faultsim's loopback fake Claude, its card charges on the
scenario's keyed service over HTTP (faultsim.world.wire).

By hand first (the wire's hook SIGKILLs node's process group at a charge's step, then
node resumes), then through the command backend's sweep (faultsim.command.explore): the
agent clean under both crash models, each planted mistake caught. Every kill is counted
before recovery is judged."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from faultsim.model.endpoint import serve
from faultsim.scenario import load_scenario
from faultsim.core.trace import Killed
from faultsim.world.wire import serve_services

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "scenario.toml"
FINAL = "Charged CUST-1 and CUST-2."

if shutil.which("node") is None or not (HERE / "node_modules" / "@anthropic-ai").is_dir():
    if os.environ.get("FAULTSIM_REQUIRE_NODE"):
        raise RuntimeError(f"node and {HERE}/node_modules are required (npm ci in {HERE})")
    pytest.skip("needs node and `npm ci` in examples/javascript_agent", allow_module_level=True)


def run(tmp_path: Path, mistake: str = "", kill: tuple[str, str, int] | None = None):
    """Incarnation 1 (SIGKILLed at `kill`, a service call's step), then resumes until one
    ends; (kills that landed, [(exit status, stdout, stderr)], world)."""
    scenario = load_scenario(SCENARIO)
    world = scenario.build_world()
    kills: list = []
    running: list[subprocess.Popen] = []

    def hook(phase: str, service: str, n: int) -> None:
        if kill == (phase, service, n) and world.incarnation == 1:
            os.killpg(running[-1].pid, signal.SIGKILL)
            running[-1].wait()
            kills.append(kill)
            raise Killed(phase)  # the server drops the call as a dead client leaves it

    ends = []
    argv = ["node", str(HERE / "agent.mjs")] + ([f"--mistake={mistake}"] if mistake else [])
    with serve(world.model) as model, serve_services(world, scenario, hook=hook) as wire:
        for _ in range(3):
            world.begin_incarnation()
            env = {**os.environ, **model.environ, **wire.env}
            proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
            running.append(proc)
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            ends.append((proc.returncode, out.decode(), err.decode()))
            if proc.returncode in (0, 3):
                break
    return kills, ends, world


def test_a_clean_run_completes_with_each_charge_once(tmp_path):
    kills, ends, world = run(tmp_path)
    assert kills == [] and len(ends) == 1
    assert ends[0][0] == 0 and ends[0][1].splitlines()[-1] == FINAL
    assert [e.params["customer"] for e in world.ledger.applied("billing")] == \
        ["CUST-1", "CUST-2"]
    assert not (tmp_path / "checkpoint.json.tmp").exists()


# (the sweep below kills at "answered" and catches the planted mistakes; these two show
# the hook driving a kill by hand, as a test of your own can)
@pytest.mark.parametrize("phase", ["received", "applied"])
def test_a_kill_at_the_first_charge_is_recovered(tmp_path, phase):
    kills, ends, world = run(tmp_path, kill=(phase, "billing", 1))
    assert kills == [(phase, "billing", 1)]  # the kill landed
    assert ends[0][0] == -signal.SIGKILL and ends[-1][0] == 0, ends
    assert ends[-1][1].splitlines()[-1] == FINAL
    assert world.ledger.duplicates() == {}
    assert len(world.ledger.applied("billing")) == 2


# -- the command backend's sweep: every kill point, both crash models --------------------
def sweep(mistake: str = "", *, crash_models=("process", "power"), only=None):
    command = pytest.importorskip("faultsim.command", reason="the command backend")
    argv = f"node {HERE / 'agent.mjs'}" + (f" --mistake={mistake}" if mistake else "")
    return command.explore(argv, load_scenario(SCENARIO), crash_models=crash_models,
                           only=only)


def broken(found) -> set[str]:
    return {v.invariant for run in found.runs.values() for verdict in run.verdicts
            for v in verdict.violations}


def test_the_sweep_finds_the_agent_clean_under_both_crash_models():
    """Every kill point: before the first event, after each model answer (held in the
    fake), after each charge (at the wire), and at node's own file system calls (held by
    strace among the calls on the workdir's files, so libuv's eventfd writes and node's
    other opens cannot shift the count)."""
    found = sweep()
    categories = {p.category for p in found.points}
    assert {"after-model-response", "after-effect", "checkpoint-rename"} <= categories
    assert found.kills_landed == len(found.points) > 20  # every kill landed
    assert set(found.runs) == {"process", "power"}
    assert all(len(run.verdicts) >= len(found.points) for run in found.runs.values())
    assert broken(found) == set()


# (the agent as written is clean at the same kill point: the sweep above)
@pytest.mark.parametrize("mistake, crash_models, caught", [
    # a crash after the first charge, before save point B: no trace of the call (no A),
    # or a trace ignored on resume: the model is asked again and the card charged twice
    ("save-only-at-b", ("process",), "effects_exactly_once"),
    ("no-reconcile", ("process",), "effects_exactly_once"),
    # the checkpoint written in place, unsynced: a power loss leaves it torn
    ("overwrite-in-place", ("power",), "checkpoint_whole"),
])
def test_the_sweep_catches_each_planted_mistake(mistake, crash_models, caught):
    found = sweep(mistake, crash_models=crash_models,
                  only=lambda point: "billing.submit#1" in point.id)
    assert found.kills_landed == 1
    assert caught in broken(found)


def test_a_crash_during_its_recovery_is_recovered_too():
    """Two crashes (--crashes 2), narrowed to stay cheap: the first after the first charge
    (its checkpoint holds the pending tool use), the second at each kill point of the
    recovery that follows (it reconciles the pending charge and saves it: the temp file,
    its write, its fsync, the rename, the directory fsync). Every second kill lands; every
    pair is clean."""
    command = pytest.importorskip("faultsim.command", reason="the command backend")
    found = command.explore(f"node {HERE / 'agent.mjs'}", load_scenario(SCENARIO),
                            crash_models=("process",), crashes=2,
                            only=lambda point: point.id == "k12-after-effect-billing.submit#1",
                            second=lambda point: point.index <= 5)
    run = found.runs["process"]
    assert found.pair_kills == 6 and found.kills_landed == found.crash_runs == 7
    assert run.depth(2).explored == 6 and {p.category for p in (
        v.kill_point for v in found.deep)} >= {"start", "checkpoint-rename"}
    assert [v for v in [*run.verdicts, *found.deep] if v.violations] == []
