"""Processes that never outlive faultsim.

A fork server and each of its children ask the kernel to SIGKILL them when their parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`), so killing faultsim with SIGKILL, which runs no
cleanup, still takes the whole tree down: faultsim → servers → children.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
_libc = None


def die_with_parent() -> bool:
    """Ask for SIGKILL when the parent dies; False where the OS has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    return _load().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


def _load():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def preexec_die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen`: the new process dies with the one starting
    it, and exits at once if that one is already gone (it died before prctl took effect).
    Note: the kernel ties this to the *thread* that started it; start from a long-lived
    one (the main thread, normally)."""
    if not sys.platform.startswith("linux"):
        return None
    _load()  # before the fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        die_with_parent()
        if os.getppid() != parent:
            os._exit(1)
    return preexec
