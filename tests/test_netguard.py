"""The network guard: during every incarnation a connection to an address faultsim does not
serve is refused before it is made and reported (`no_unrouted_effect`). Proven against a
counting TCP server this test starts on 127.0.0.1, which must see no connection unless the
scenario allows it; never against any other address."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import faultsim
from faultsim.errors import UnroutedEffect
from helpers import CountingServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server():
    s = CountingServer()
    yield s
    s.close()


AGENT = '''
import json, os, socket

PORT = int(os.environ["NETGUARD_PORT"])
ONLY_ON_RESUME = os.environ.get("NETGUARD_ONLY_ON_RESUME") == "1"


def notify(text):
    """The forgotten real effect: a webhook, over a plain socket."""
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as s:
        s.sendall(text.encode())


class Agent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "checkpoint.json")

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        resumed = os.path.exists(self.path)
        if resumed or not ONLY_ON_RESUME:
            try:
                notify("starting" if not resumed else "resuming")
            except ConnectionRefusedError:
                pass  # a lenient agent: logs and goes on
        if not resumed:
            with open(self.path + ".tmp", "w") as f:
                json.dump({"messages": [{"role": "user", "content": self.env.task}]}, f)
                f.flush(); os.fsync(f.fileno())
            os.replace(self.path + ".tmp", self.path)
        r = self.env.client.messages.create(model=self.env.model, max_tokens=64,
                                            messages=[{"role": "user", "content": self.env.task}])
        return r.content[0].text


def make_agent(env):
    return Agent(env)
'''

SCENARIO = '''
id = "netguard"
task = "Say done."
expected_final_answer = "Done."
[[turns]]
final = "Done."
[fault_profile]
crashes = 1
'''


def _write(tmp_path, allow_port=None):
    (tmp_path / "net_agent.py").write_text(AGENT)
    text = SCENARIO + (f'[sandbox]\nallow = ["127.0.0.1:{allow_port}"]\n' if allow_port
                       else "")
    path = tmp_path / "netguard.toml"
    path.write_text(text)
    return path


@pytest.fixture
def agent_env(server, monkeypatch):
    monkeypatch.setenv("NETGUARD_PORT", str(server.port))
    monkeypatch.delenv("NETGUARD_ONLY_ON_RESUME", raising=False)


def _factory(tmp_path):
    return faultsim.load_factory(f"{tmp_path / 'net_agent.py'}:make_agent")


def test_a_clean_run_that_connects_out_is_stopped_before_it_connects(tmp_path, server,
                                                                     agent_env):
    scenario = faultsim.load_scenario(_write(tmp_path))
    with pytest.raises(UnroutedEffect) as info:
        faultsim.explore(_factory(tmp_path), scenario, crashes=1, workers=0)
    message = str(info.value)
    assert f"127.0.0.1:{server.port}" in message
    assert "net_agent.py:" in message  # the agent's call site, not the socket module's
    assert "faultsim.effect" in message and "[sandbox] allow" in message
    assert server.count == 0


def test_an_allowed_address_is_reached(tmp_path, server, agent_env):
    scenario = faultsim.load_scenario(_write(tmp_path, allow_port=server.port))
    report = faultsim.explore(_factory(tmp_path), scenario, crashes=1, workers=0)
    assert report.ok, report.counterexamples(limit=1)
    assert server.count >= 2  # two clean runs at least: the guard let it through


def test_a_connection_made_only_while_recovering_is_a_violation(tmp_path, server,
                                                               agent_env, monkeypatch):
    monkeypatch.setenv("NETGUARD_ONLY_ON_RESUME", "1")
    scenario = faultsim.load_scenario(_write(tmp_path))
    report = faultsim.explore(_factory(tmp_path), scenario, crashes=1, workers=0)
    failed = [v for r in report.runs for v in r.failures]
    assert failed, "recovery's connection went unreported"
    assert {x.invariant for v in failed for x in v.violations} == {"no_unrouted_effect"}
    assert all(str(server.port) in x.explanation for v in failed for x in v.violations)
    assert server.count == 0


def test_outside_an_incarnation_nothing_is_guarded(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass
    assert _wait(lambda: server.count == 1)


def _wait(cond, seconds=5.0):
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end and not cond():
        time.sleep(0.02)
    return cond()


def test_the_scenario_allow_list_is_checked(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(SCENARIO + '[sandbox]\nallow = ["127.0.0.1"]\n')
    with pytest.raises(faultsim.ScenarioError, match=r"sandbox\.allow\[0\]"):
        faultsim.load_scenario(path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subprocess mode: Linux")
def test_subprocess_mode_refuses_too(tmp_path, server):
    path = _write(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "faultsim", "run", str(path), "--agent",
         "net_agent.py:make_agent", "--mode", "subprocess", "--workers", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NETGUARD_PORT": str(server.port)})
    assert proc.returncode == 1, proc.stderr[-1500:]
    assert f"127.0.0.1:{server.port}" in proc.stderr and "net_agent.py:" in proc.stderr
    assert server.count == 0


def test_an_agent_that_fails_on_the_refusal_is_still_told_about_the_connection(tmp_path,
                                                                             server,
                                                                             agent_env):
    # the refusal, not the agent's failure it caused, is the finding
    strict = AGENT.replace(
        "            except ConnectionRefusedError:\n                pass  # a lenient agent: "
        "logs and goes on", "            finally:\n                pass")
    assert strict != AGENT  # this agent lets the refusal end its run
    (tmp_path / "net_agent.py").write_text(strict)
    (tmp_path / "netguard.toml").write_text(SCENARIO)
    scenario = faultsim.load_scenario(tmp_path / "netguard.toml")
    with pytest.raises(UnroutedEffect, match="no_unrouted_effect"):
        faultsim.explore(_factory(tmp_path), scenario, crashes=1, workers=0)
    assert server.count == 0
