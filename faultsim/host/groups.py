"""Process groups: SIGKILL one and prove no process of it is left. Shared by both backends
that kill a real agent's group (the command backend, `faultsim.command.launch`, and the
Claude Agent SDK adapter, whose CLIs the SDK starts): one copy of the kill and its proof.
And SIGSTOP one and prove every process of it stopped, then SIGCONT it: the adapter reads
a crash state from a stopped group and lets the run go on (`stop_groups`).

Standard library only."""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterator, Sequence


def group_alive(pgid: int) -> bool:
    """A process of the group that is not a zombie (a zombie is dead, whoever reaps it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(members(pgid))


def _live(pgid: int) -> Iterator[tuple[int, bytes]]:
    """The live (not zombie) processes of group `pgid`: (pid, scheduler state)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
            if int(rest[2]) != pgid or rest[0] in (b"Z", b"X"):
                continue
        except (OSError, IndexError, ValueError):
            continue
        yield int(name), rest[0]


def _states(pgid: int) -> dict[int, tuple[bytes, int]]:
    """Each live process of group `pgid`: its scheduler state (`R`, `S`, `D`, `T`, `t`, ...)
    and, when held by a tracer (`t`), its tracer's pid (else 0)."""
    found = {}
    for pid, state in _live(pgid):
        tracer = 0
        if state == b"t":
            try:
                with open(f"/proc/{pid}/status", "rb") as f:
                    tracer = next((int(line.split()[1]) for line in f
                                   if line.startswith(b"TracerPid:")), 0)
            except (OSError, IndexError, ValueError):
                continue
        found[pid] = (state, tracer)
    return found


def _all_stopped(groups: list[dict[int, tuple[bytes, int]]]) -> bool:
    """Every process stopped: `T`, or `t` (held by its tracer) where the tracer is one of
    them and stopped itself (strace, the leader of a traced CLI's group): none can run."""
    every = {pid: st for g in groups for pid, st in g.items()}
    return all(g for g in groups) and all(
        state == b"T" or (state == b"t" and every.get(tracer, (b"",))[0] == b"T")
        for state, tracer in every.values())


def members(pgid: int) -> list[tuple[int, str]]:
    """The live (not zombie) processes of group `pgid`: (pid, command)."""
    found = []
    for pid, _state in _live(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = b" ".join(w for w in f.read().split(b"\0") if w).decode(
                    "utf-8", "replace")[:120]
        except OSError:
            continue
        found.append((pid, command))
    return found


def dead(pid: int) -> bool:
    """Reaped, or a zombie: dead either way (a process the caller did not start itself,
    such as a CLI the Claude Agent SDK spawned, is reaped by its own parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def kill_groups(pgids: Sequence[int], timeout: float = 10.0,
                reap: Callable[[float], object] | None = None) -> bool:
    """SIGKILL each group (its leader's pid is its id); True once no live process of any
    is left. `reap(timeout)` waits for the leader when it is our child (raising on a
    timeout: then False)."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if reap is not None:
        try:
            reap(timeout)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired, or the like
            return False
    deadline = time.monotonic() + timeout
    while any(group_alive(pgid) for pgid in pgids):  # members reparented to init die
        if time.monotonic() > deadline:            # a moment later
            return False
        time.sleep(0.002)
    return True


def stop_groups(pgids: Sequence[int], timeout: float = 10.0) -> bool:
    """SIGSTOP each group; True once every live process of every group is stopped (state
    `T`, or `t` under a tracer of the groups that is stopped: `_all_stopped`) and each
    group has one: from then on none of them runs, so what is on disk and what
    they sent is what a SIGKILL at this instant would leave (the kernel keeps a stopped
    process's completed writes as it keeps a killed one's). False where a group is gone or
    a process did not stop in time (the caller kills instead). Linux (/proc) only."""
    if not pgids or not os.path.isdir("/proc"):
        return False
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            return False
    deadline = time.monotonic() + timeout
    while True:
        states = [_states(pgid) for pgid in pgids]
        if _all_stopped(states):
            return True
        if any(not s for s in states) or time.monotonic() > deadline:
            return False
        time.sleep(0.002)


def continue_groups(pgids: Sequence[int]) -> None:
    """SIGCONT each group stopped by `stop_groups`."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass
