"""faultsim.host.groups: a process group SIGSTOPped is proven stopped (every live process of it
in state T), SIGCONT lets it go on, and a group that is gone cannot be proven stopped; the
kill's proof beside it. Real processes (`sleep`, strace), started here, never left behind."""
from __future__ import annotations

import subprocess
import sys

import pytest

from faultsim.host.groups import _all_stopped, continue_groups, group_alive, kill_groups, stop_groups

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
        # going on: sleeping, running, or (on a loaded machine) in the kernel on I/O (D)
        assert leader.poll() is None and _state(leader.pid) in (b"S", b"R", b"D")
        assert kill_groups([leader.pid])
        leader.wait(10)
        assert not group_alive(leader.pid)
        assert not stop_groups([leader.pid])  # nothing left to stop: no proof
        assert not stop_groups([])
    finally:
        kill_groups([leader.pid])
        leader.wait(10)


def test_a_traced_process_counts_as_stopped_only_under_a_stopped_tracer_of_the_groups():
    """strace leads a traced CLI's group: SIGSTOP stops it (T) and leaves its tracees held
    (t). A tracee held by a tracer that still runs, or by one outside the groups, could be
    let go at any moment: not stopped."""
    assert _all_stopped([{10: (b"T", 0), 11: (b"t", 10), 12: (b"t", 10)}])
    assert not _all_stopped([{10: (b"S", 0), 11: (b"t", 10)}])
    assert not _all_stopped([{11: (b"t", 99)}])
    assert not _all_stopped([{10: (b"T", 0)}, {}])  # a group with no process left
    assert not _all_stopped([{10: (b"T", 0), 13: (b"R", 0)}])


def test_strace_and_its_tracee_are_proven_stopped_and_go_on(tmp_path):
    """The real thing: strace holding its tracee's writes, the group stopped between two of
    them (nothing more is written while it is), then let go to its end."""
    import shutil
    import time

    if shutil.which("strace") is None:
        pytest.skip("strace")
    out = tmp_path / "out.txt"
    script = ("import os, time\n"
              f"fd = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
              "for i in range(4):\n    os.write(fd, b'x')\n    time.sleep(0.05)\n")
    leader = subprocess.Popen(["strace", "-f", "-qq", "-o", str(tmp_path / "log"), "-e",
                               "trace=write", "-e", "inject=write:delay_enter=200000",
                               "-P", str(out), "--", sys.executable, "-c", script],
                              start_new_session=True)
    try:
        while not out.exists() or out.stat().st_size < 1:
            assert leader.poll() is None
            time.sleep(0.005)
        assert stop_groups([leader.pid])
        size = out.stat().st_size
        time.sleep(0.5)  # past strace's hold: the held write stays held
        assert out.stat().st_size == size < 4
        continue_groups([leader.pid])
        assert leader.wait(20) == 0 and out.read_bytes() == b"xxxx"
    finally:
        kill_groups([leader.pid])
        leader.wait(10)
