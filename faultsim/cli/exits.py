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
from typing import Callable, Iterator

import freezegun.api as _real_time

from ..errors import AgentFinding, HarnessError, UsageError


EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


class Terminated(SystemExit):
    """SIGTERM, raised like KeyboardInterrupt so that no `except Exception` stops it. A
    SystemExit, because asyncio lets only those and KeyboardInterrupt out of a task's step:
    any other BaseException raised there only ends that task, and a run whose driver is an
    async agent's step (the forking executor forks inside the agent's own code) would go
    on as if never terminated, waiting on that task's events (issue 51: SIGTERM was ignored
    for 13 minutes on an async workflow agent). Its code is SIGTERM's (143), so that one
    escaping every handler still ends the process as a SIGTERM would, never with 0."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or (128 + signal.SIGTERM,)))


@contextmanager
def sigterm_unwinds(terminated: type[BaseException] = Terminated,
                    only_if: Callable[[], bool] | None = None) -> Iterator[None]:
    """Turn SIGTERM into `terminated` (Terminated; the pytest plugin's is a
    KeyboardInterrupt, faultsim.reports.interrupted.SigtermInterrupt), so that every `finally` runs
    on the way out: the subprocess mode's run folder in /dev/shm is removed like on Ctrl-C.
    With `only_if`, a SIGTERM that comes while it is false takes its default action (an
    xdist controller learns only as tests start whether the session has faultsim tests).
    Main thread only (Python runs signal handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    again = _Redelivery(os.getpid(), terminated, only_if)
    previous = signal.signal(signal.SIGTERM, again.handler(terminated))
    previous_int = None
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous_int = signal.signal(signal.SIGINT, again.handler(KeyboardInterrupt))
    previous_hook = sys.unraisablehook
    sys.unraisablehook = again.hook(previous_hook)
    dumps = _stack_dumps()
    try:
        yield
    finally:
        again.stop()
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        if dumps:
            import faulthandler

            faulthandler.unregister(signal.SIGUSR2)


# Seconds after the first raise during which a repeated SIGTERM or SIGINT is the same cancel
# (a CI runner's SIGINT then SIGTERM, `timeout` and a process-group kill both signalling, a
# dying xdist controller): raising it again would land in the very `finally` blocks that
# stop the sweep's processes, remove its folders and take the fake file system down (seen:
# a second SIGTERM inside the Explorer's exit left pyfakefs installed over the rest of the
# session). Past it, a run that did not stop (an agent that caught the first) gets it again.
REPEAT_ABSORBED = 10.0


class _Redelivery:
    """Python swallows what is raised where it cannot propagate (an at-fork hook as
    `subprocess.Popen(preexec_fn=...)` starts a worker, a `__del__`): a Terminated or
    KeyboardInterrupt that lands there is only passed to `sys.unraisablehook`, and the run
    would go on as if never cancelled. The hook marks the signal pending and a thread sends
    it again every 10 ms until its handler has raised somewhere else.

    Why a thread that repeats, not one resend: the resend may land inside the hook itself
    (a busy machine can hold the main thread there past 10 ms; seen in CI), where what the
    handler raised would be swallowed too, and not come back to the hook. So the handler
    raises nothing while the hook runs, and the signal stays pending until it has raised
    outside it; should that land in a swallowing place again, the hook marks it anew."""

    # The lock orders the hook, the resending thread and the handler: the thread sends
    # while holding it, and the handler clears `pending` under it, so no resend follows a
    # raise. The main thread takes it only inside the hook, where the handler returns before
    # taking it (`in_hook`): a handler can never wait on a lock its own thread holds.
    def __init__(self, me: int, terminated: type[BaseException] = Terminated,
                 only_if: Callable[[], bool] | None = None) -> None:
        self.me, self.terminated, self.only_if = me, terminated, only_if
        self.lock = threading.Lock()
        self.pending: int | None = None
        self.sending = False  # a resending thread is alive
        self.in_hook = False
        self.done = False
        self.absorb_until = 0.0  # monotonic time until which a repeat is absorbed

    def handler(self, kind: type[BaseException]):
        def handle(signum, frame):
            if os.getpid() != self.me or (
                    kind is not KeyboardInterrupt and self.only_if is not None
                    and not self.only_if()):
                # a forked worker of the in-process mode dies as it used to; so does a
                # process SIGTERM is not to be turned in yet
                if kind is KeyboardInterrupt:
                    raise KeyboardInterrupt
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            if self.in_hook:
                return  # it would be swallowed here: the thread sends it again
            with self.lock:
                now = _real_time.real_monotonic()  # freezegun may hold time.monotonic
                if self.pending is None and now < self.absorb_until:
                    return  # the same cancel again (below): the run is already unwinding
                self.pending = None
                if self.absorb_until == 0.0:
                    self.absorb_until = now + REPEAT_ABSORBED
            raise kind
        return handle

    def hook(self, previous):
        again = {self.terminated: signal.SIGTERM, KeyboardInterrupt: signal.SIGINT}

        def unraisable(info) -> None:
            sig = again.get(info.exc_type)
            if sig is None or os.getpid() != self.me:
                return previous(info)
            self.in_hook = True
            try:
                with self.lock:
                    self.pending = sig
                    start = not self.sending and not self.done
                    if start:
                        self.sending = True
                if start:
                    threading.Thread(target=self._send, daemon=True,
                                     name="faultsim-redeliver").start()
            finally:
                self.in_hook = False

        return unraisable

    def _send(self) -> None:
        import time

        while True:
            time.sleep(0.01)
            with self.lock:
                if self.done or self.pending is None:
                    self.sending = False
                    return
                os.kill(self.me, self.pending)

    def stop(self) -> None:
        # no lock: a signal landing here runs the handler, which takes it (see __init__)
        self.done, self.pending = True, None


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
    """The process ends right after this (cancelled, or the command done: `cli.entry`).
    Every clean-up has run; what is left is the interpreter's last garbage collection over
    a sweep's heap (traces, memos), 1-2 s on a busy machine. Frozen objects are outside
    every collection."""
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
        for line in str(exc).splitlines() or [""]:  # several reports unwritten: one each
            print(f"faultsim: error: {line}", file=sys.stderr)
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
