"""The lead board: leads (faultsim.inprocess.leads) shared between the forked children of
one driver run while they work, not only after.

Why. A lead is learnt by the parent when the child that ran it sends its verdict back, and
only children forked after that start with it. The runs that would meet it are resumed
from crash states of the same step, forked a few kill points apart, so most are forked
while their lead is still running in a sibling and go the whole way themselves
(bench/convergence_causes.py: on the 25-step lookups 75 resumed runs could meet a lead,
25 did). Here a run that reaches its first model request *claims* its state there; a run
that reaches a claimed state waits for the claimant's remainder and is cut against it.

How. One private real directory per driver run (`posix`: the children run under
pyfakefs). A claim is a file linked into place (a link is refused where the name exists),
named by a hash of the state key and the agent's memory there (`leads.lead_key`, the
fingerprint), holding the claimant's pid; the claimant publishes its lead (or None: its
run made none) by an atomic rename next to it, whichever way its run ends. A waiting child
tells the parent (a byte on its result pipe) so that the parent forks another in its place,
and pauses its incarnation's time limit.

Why it cannot deadlock. A run waits only at its first model request, and only where it
claimed nothing: a claimant never waits, so no wait is on a waiting run. A claimant that
dies without publishing (killed at the time limit, a harness error) is seen gone and its
waiters go on by themselves.

Why it changes no verdict. Whether a run finds a lead, in memory or here, is the same
question leads.py answers: any subset of leads is sound, a run that finds none goes on.
The board only makes that subset larger. Which run of equal ones leads depends on the
scheduling, as before; how many runs were cut this way is counted, not reported. Nor does
it change which later pairs are composed from a run (leads.py, "Determinism": a cut run's
tail is reusable exactly where its long run's would be).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import posix
import secrets
import select
from typing import Any, Callable

from ..core.realfile import read_bytes, write_bytes
from ..world.clock import faithful_copies

POLL = 0.002  # seconds between looks at a claim's answer while its claimant runs


class Board:
    def __init__(self, root: str) -> None:
        self.root = root
        self.notify: Callable[[bytes], None] | None = None  # in a child: tells the parent

    @classmethod
    def create(cls) -> "Board | None":
        """A fresh private directory, or None where none can be made (then no board)."""
        base = os.environ.get("TMPDIR") or "/tmp"
        try:  # RAM-backed where there is one (the parent may be under pyfakefs: posix)
            if posix.access("/dev/shm", posix.W_OK | posix.X_OK):
                base = "/dev/shm"
        except OSError:
            pass
        _remove_stale(base)
        root = f"{base}/{PREFIX}{posix.getpid()}-{secrets.token_hex(4)}"
        try:
            posix.mkdir(root, 0o700)
        except OSError:
            return None
        return cls(root)

    def remove(self) -> None:
        _remove(self.root)

    @staticmethod
    def name(key: str, memory: str) -> str:
        return hashlib.sha256(f"{key}\0{memory}".encode()).hexdigest()[:32]

    def claim(self, name: str) -> bool:
        """Claim the state: True if this process is the first to reach it. The claim is
        made whole, the pid in it (written aside, then linked: a link is refused where the
        name exists), so that a waiter never reads a claim without its claimant."""
        aside = f"{self.root}/{name}.{posix.getpid()}.pid"
        try:
            write_bytes(aside, str(posix.getpid()).encode())
            posix.link(aside, f"{self.root}/{name}.claim")
            return True
        except OSError:  # claimed before (or no board to speak of: wait() finds no
            return False  # claimant alive and returns at once)
        finally:
            try:
                posix.unlink(aside)
            except OSError:
                pass

    def publish(self, name: str, lead: Any) -> None:
        """The claimant's answer: its lead, or None (its run made none)."""
        try:
            with faithful_copies():  # the lead's world as it was (world/clock.py)
                data = pickle.dumps(lead)
        except Exception:
            data = pickle.dumps(None)
        aside = f"{self.root}/{name}.{posix.getpid()}.tmp"
        try:
            write_bytes(aside, data)
            posix.rename(aside, f"{self.root}/{name}.lead")
        except OSError:
            pass  # its waiters see the claimant gone when it ends, and go on

    def wait(self, name: str) -> Any:
        """The lead published for a state another process claimed, once it is; None when
        the claimant published none or ended without publishing."""
        told = False
        try:
            while True:
                lead = self._read(f"{self.root}/{name}.lead")
                if lead is not _MISSING:
                    return lead
                if not self._claimant_alive(name):
                    # it may have published just before it ended
                    lead = self._read(f"{self.root}/{name}.lead")
                    return None if lead is _MISSING else lead
                if not told and self.notify is not None:
                    self.notify(b"W")  # the parent may fork another child meanwhile
                    told = True
                select.select([], [], [], POLL)
        finally:
            if told and self.notify is not None:
                self.notify(b"R")

    @staticmethod
    def _read(path: str) -> Any:
        data = _bytes(path)
        if data is None:
            return _MISSING
        try:
            return pickle.loads(data)
        except Exception:
            return None

    def _claimant_alive(self, name: str) -> bool:
        text = _bytes(f"{self.root}/{name}.claim")
        if not text or not text.isdigit():
            return False
        stat = _bytes(f"/proc/{int(text)}/stat")
        if stat is None:
            if posix.access("/proc/self", posix.F_OK):
                return False  # no such process
            try:  # no /proc: signal 0 (a zombie passes for alive until reaped)
                posix.kill(int(text), 0)
                return True
            except OSError:
                return False
        # "pid (comm) S ...": a zombie has ended, only not been reaped yet
        return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z"


_MISSING = object()
PREFIX = "faultsim-leads-"


def _bytes(path: str) -> bytes | None:
    try:
        return read_bytes(path)
    except OSError:
        return None


def _remove(root: str) -> None:
    try:
        for name in posix.listdir(root):
            posix.unlink(f"{root}/{name}")
        posix.rmdir(root)
    except OSError:
        pass


def _remove_stale(base: str) -> None:
    """Boards of faultsim processes that are gone (killed by SIGKILL: nothing of theirs
    ran on the way out). Named by the process that made them."""
    if not posix.access("/proc/self", posix.F_OK):
        return
    try:
        names = posix.listdir(base)
    except OSError:
        return
    for name in names:
        if name.startswith(PREFIX):
            pid = name[len(PREFIX):].split("-")[0]
            if pid.isdigit() and not posix.access(f"/proc/{pid}", posix.F_OK):
                _remove(f"{base}/{name}")
