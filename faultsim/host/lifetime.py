"""Processes that never outlive faultsim.

A fork server and each of its children ask the kernel to signal them when their parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`), so killing faultsim with SIGKILL, which runs no
cleanup, still takes the whole tree down: faultsim → servers → children. Children get
SIGKILL; a server gets PARENT_DIED, which it catches to kill its child and remove the run
folder faultsim could not remove, before it exits.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
# a fork server's death signal: catchable (unlike SIGKILL) and used for nothing else
PARENT_DIED = signal.SIGUSR1
_libc = None


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask for `sig` when the parent dies; False where the OS has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    return _load().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def _load():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def preexec_die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen`: the new process gets `sig` when the one
    starting it dies. With SIGKILL it exits at once if that one is already gone (it died
    before prctl took effect). Any other `sig` is blocked (a signal mask outlives exec),
    and raised at once if the parent is already gone: the new program receives it when
    it has its handler in place and unblocks it, never before.
    Note: the kernel ties this to the *thread* that started it; start from a long-lived
    one (the main thread, normally)."""
    if not sys.platform.startswith("linux"):
        return None
    _load()  # before the fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        if sig != signal.SIGKILL:
            signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
        die_with_parent(sig)
        if os.getppid() != parent:
            if sig == signal.SIGKILL:
                os._exit(1)
            os.kill(os.getpid(), sig)
    return preexec
