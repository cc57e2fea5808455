"""How `faultsim` ends: its exit codes, the error kinds that map to them (errors.py's tree),
and SIGTERM and Ctrl-C unwinding every `finally` on the way out."""
from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Iterator

from ..errors import AgentFinding, HarnessError, UsageError


EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that no `except Exception` stops it."""


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into Terminated, so that every `finally` runs on the way out: the
    subprocess mode's run folder in /dev/shm is removed like on Ctrl-C. Main thread only
    (Python runs signal handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    me = os.getpid()

    def terminated(signum, frame):
        if os.getpid() != me:  # a forked worker of the in-process mode dies as it used to
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redeliver(me, previous_hook)
    dumps = _stack_dumps()
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)
        if dumps:
            import faulthandler

            faulthandler.unregister(signal.SIGUSR2)


def _redeliver(me: int, hook):
    """Python swallows what is raised where it cannot propagate (an at-fork hook as
    `subprocess.Popen(preexec_fn=...)` starts a worker, a `__del__`): a Terminated or
    KeyboardInterrupt that lands there is only printed, and the run would go on as if never
    cancelled. Send the signal again a moment later, from a thread: sent from here, its
    handler would run before this hook returns, and be swallowed again. Should the second
    land in such a place too, it comes back here and goes again."""
    again = {Terminated: signal.SIGTERM, KeyboardInterrupt: signal.SIGINT}

    def unraisable(info) -> None:
        sig = again.get(info.exc_type)
        if sig is not None and os.getpid() == me:
            later = threading.Timer(0.01, os.kill, (me, sig))
            later.daemon = True
            later.start()
            return
        hook(info)

    return unraisable


def _stack_dumps() -> bool:
    """`kill -USR2 PID` prints where a run is, every thread, to stderr (a run that seems
    stuck, or one that does not exit when cancelled, can say why)."""
    import faulthandler

    try:
        faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False
    return True


def exiting_now() -> None:
    """Cancelled: the process ends right after this. Every clean-up has run; what is left
    is the interpreter's last garbage collection over a sweep's heap (traces, memos),
    1-2 s on a busy machine. Frozen objects are outside every collection."""
    import gc

    gc.freeze()


def run_command(ns: argparse.Namespace) -> int:
    """Run the parsed command; each error kind ends as its exit code with one line (the
    traceback too under --debug)."""
    try:
        with sigterm_unwinds():
            return ns.func(ns)
    except (UsageError, FileNotFoundError) as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AgentFinding as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: {exc}", file=sys.stderr)
        details = getattr(exc, "details", "")
        if details:  # the agent's own traceback and output, as pytest shows a test's
            print("\n" + details, file=sys.stderr)
        return EXIT_VIOLATION
    except HarnessError as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("faultsim: interrupted", file=sys.stderr)
        exiting_now()
        return 130
    except Terminated:
        print("faultsim: terminated", file=sys.stderr)
        exiting_now()
        return 128 + signal.SIGTERM
    except Exception as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: the run failed: {type(exc).__name__}: {exc} "
              "(--debug shows the traceback)", file=sys.stderr)
        return EXIT_ERROR
