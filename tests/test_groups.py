"""faultsim.groups: a process group SIGSTOPped is proven stopped (every live process of it
in state T), SIGCONT lets it go on, and a group that is gone cannot be proven stopped; the
kill's proof beside it. Real processes (`sleep`), started here, never left behind."""
from __future__ import annotations

import subprocess
import sys

import pytest

from faultsim.groups import continue_groups, group_alive, kill_groups, stop_groups

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0]


def test_a_stopped_group_is_proven_stopped_goes_on_and_a_gone_one_is_not():
    # a leader and a child of its, in a session (and group) of their own
    leader = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        assert stop_groups([leader.pid])
        assert _state(leader.pid) == b"T"
        continue_groups([leader.pid])
        assert leader.poll() is None and _state(leader.pid) in (b"S", b"R")
        assert kill_groups([leader.pid])
        leader.wait(10)
        assert not group_alive(leader.pid)
        assert not stop_groups([leader.pid])  # nothing left to stop: no proof
        assert not stop_groups([])
    finally:
        kill_groups([leader.pid])
        leader.wait(10)
