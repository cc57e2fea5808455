"""The JavaScript agent (agent.mjs) under faultsim, run as a command: node, its
@anthropic-ai/sdk client at faultsim's loopback fake Claude, its card charges on the
scenario's keyed service over HTTP (faultsim.world.wire).

Here the kills land at the service calls (the wire's hook SIGKILLs node's process group at
a call's received/applied/answered step); each is counted before recovery is judged."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from faultsim.model.endpoint import serve
from faultsim.scenario import load_scenario
from faultsim.trace import Killed
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


@pytest.mark.parametrize("phase", ["received", "applied", "answered"])
def test_a_kill_at_the_first_charge_is_recovered(tmp_path, phase):
    kills, ends, world = run(tmp_path, kill=(phase, "billing", 1))
    assert kills == [(phase, "billing", 1)]  # the kill landed
    assert ends[0][0] == -signal.SIGKILL and ends[-1][0] == 0, ends
    assert ends[-1][1].splitlines()[-1] == FINAL
    assert world.ledger.duplicates() == {}
    assert len(world.ledger.applied("billing")) == 2


@pytest.mark.parametrize("mistake", ["save-only-at-b", "no-reconcile"])
def test_a_planted_mistake_charges_twice(tmp_path, mistake):
    kills, ends, world = run(tmp_path, mistake, kill=("applied", "billing", 1))
    assert kills == [("applied", "billing", 1)]
    assert ends[-1][0] == 0  # it completes, and pays twice on the way
    assert world.ledger.duplicates() == {
        'billing.submit({"cents":1200,"customer":"CUST-1"})': 2}


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
    found = sweep()
    assert found.kills_landed == len(found.points) > 30  # every kill landed
    assert all(run.verdicts for run in found.runs.values())
    assert broken(found) == set()


@pytest.mark.parametrize("mistake, only, caught", [
    ("", "billing.submit#1", None),  # the agent as written: clean at the same kill
    # a crash after the first charge, before save point B: no trace of the call (no A),
    # or a trace ignored on resume: the model is asked again and the card charged twice
    ("save-only-at-b", "billing.submit#1", "effects_exactly_once"),
    ("no-reconcile", "billing.submit#1", "effects_exactly_once"),
    # the checkpoint written in place, unsynced: a power loss leaves it torn
    ("overwrite-in-place", "billing.submit#1", "checkpoint_whole"),
])
def test_the_sweep_catches_each_planted_mistake(mistake, only, caught):
    found = sweep(mistake, only=lambda point: only in point.id)
    assert found.kills_landed == 1
    assert (caught in broken(found)) if caught else broken(found) == set()
