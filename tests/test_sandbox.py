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


def test_reference_agent_runs_inside_pyfakefs(support_tickets, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    sandbox = Path("/faultsim-sandbox")
    assert not sandbox.exists()
    fsyncs = []
    with Patcher() as patcher:
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
        patcher.fs.create_dir(sandbox)
        with ScenarioRun(support_tickets, reference_agent.make_agent, workdir=sandbox) as run:
            out = run.incarnation()
        assert out.final_answer == support_tickets.expected_final_answer
        checkpoint = json.loads((sandbox / "runs/support_tickets/checkpoint.json").read_text())
        assert checkpoint["turns"] == 13
        assert (sandbox / "workspace/reports/q3_support_summary.md").exists()
    assert not sandbox.exists()  # it all lived in the fake filesystem
    # two fsyncs (file, then directory) per atomic write
    assert len(fsyncs) >= 2 * 26
