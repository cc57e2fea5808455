"""The reference agent runs unchanged on pyfakefs (the engine's interposition layer) and on
the real SDK inside it: nothing reaches the real disk, no socket opens."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from pyfakefs.fake_filesystem_unittest import Patcher

import reference_agent
from faultsim import ScenarioRun
from faultsim.inprocess.sandbox import readable_real_dirs


def test_reference_agent_runs_inside_pyfakefs(support_tickets, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    sandbox = Path("/faultsim-sandbox")
    assert not sandbox.exists()
    fsyncs = []
    # the real directories faultsim's sandbox reads through, read from the real disk (the
    # standard library among them: 3.13's unittest imports a module lazily when freezegun
    # reads its attributes)
    readable = readable_real_dirs()
    with Patcher() as patcher:
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
        patcher.fs.create_dir(sandbox)
        for path in readable:
            patcher.fs.add_real_directory(path, read_only=True, lazy_read=True)
        with ScenarioRun(support_tickets, reference_agent.make_agent, workdir=sandbox) as run:
            out = run.incarnation()
        assert out.final_answer == support_tickets.expected_final_answer
        checkpoint = json.loads((sandbox / "runs/support_tickets/checkpoint.json").read_text())
        assert checkpoint["turns"] == 13
        assert (sandbox / "workspace/reports/q3_support_summary.md").exists()
    assert not sandbox.exists()  # it all lived in the fake filesystem
    # two fsyncs (file, then directory) per atomic write
    assert len(fsyncs) >= 2 * 26


def test_a_user_patcher_leaves_no_stale_faultsim_behind():
    """A user's own pyfakefs Patcher that is the first to touch faultsim's engine: pyfakefs
    drops the modules first imported under it when it stops (their `os` was the fake one).
    faultsim's public names must then resolve to the live modules, not the dropped ones,
    whose fake filesystem died with that Patcher (it failed later runs with
    `assert p is not None` inside pyfakefs)."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "from pyfakefs.fake_filesystem_unittest import Patcher\n"
        "import anthropic, faultsim  # the SDK reads its metadata from the real disk\n"
        "assert 'faultsim.inprocess.explore' not in sys.modules\n"
        "with Patcher():\n"
        "    faultsim.explore\n"
        "fn = faultsim.explore\n"
        "live = sys.modules.get(fn.__module__)\n"
        "assert live is not None and vars(live) is fn.__globals__, 'stale faultsim.explore'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]


def test_pytest_keeps_its_own_clock_while_faultsim_freezes_time():
    """A fixture that enters an Explorer in a test's set-up holds the frozen clock into the
    test: pytest's durations (its `_pytest.timing` clock) stay real, not 1.8e9 s."""
    import time

    import _pytest.timing
    import freezegun.api

    from faultsim.inprocess.sandbox import Explorer
    from faultsim.scenario import load_scenario
    from conftest import DATA

    with Explorer(reference_agent.make_agent, load_scenario(DATA / "tiny.toml")):
        assert time.time() < freezegun.api.real_time() - 3600  # frozen at the scenario's
        assert _pytest.timing.perf_counter is freezegun.api.real_perf_counter
        assert _pytest.timing.time is freezegun.api.real_time


def test_a_package_found_by_an_import_hook_stays_readable(tmp_path, monkeypatch):
    """An editable install is found by an import hook, not through sys.path: its folder is
    passed through all the same, so that a lazy import of it under the fake file system
    (freezegun reads every module's attributes as it starts) finds its files."""
    import importlib.util
    import sys

    package = tmp_path / "hooked_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location("hooked_pkg", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "hooked_pkg", module)
    assert str(tmp_path) not in sys.path
    assert str(package.resolve()) in readable_real_dirs()
