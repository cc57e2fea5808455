"""The fork faultsim makes of its own process in the in-process mode (a child per kill
point, forking.py; the one child of isolated.py), and the threads alive when it is made.

A fork copies the calling thread alone. CPython 3.12 and later say so at every
`os.fork()` of a process with more than one thread: a DeprecationWarning ("This process
is multi-threaded, use of fork() may lead to deadlocks in the child": a lock a thread
held stays held in the child, where that thread is not). At faultsim's forks the threads
are known and what they leave is handled, so that one warning is not passed on (a
warning filter for its message, around this call only; any other warning passes):

- faultsim's own: the progress timer of `faultsim run` (console.py) holds no lock a child
  takes: its every write holds console's lock, which each fork takes first
  (os.register_at_fork), and a child never writes progress. No other thread of faultsim
  runs while the in-process mode forks (tests/test_deprecations.py counts them).
- the agent's: the fork stands for the kill, and a kill stops every thread at once, so
  the child going on without them is the crash (docs/explanation/engine.md, Threads). A
  lock one of them held stays held in the child as the kill left it (Python makes its
  import lock and `logging`'s locks anew in a child itself). A resumed run that waits on another such lock is stopped at its time limit and reported
  with where it waited; `--mode subprocess` resumes in a fresh process instead.

Standard library only.
"""
from __future__ import annotations

import posix  # the real OS: pyfakefs patches every module's `os`, not `posix`
import warnings

# Modules/posixmodule.c, warn_about_fork_with_threads (3.12-3.14)
THREADED = (r"This process( \(pid=\d+\))? is multi-threaded, use of fork\(\) may lead to "
            r"deadlocks in the child")


def fork() -> int:
    """`posix.fork()`, without the warning that the process has threads (see above)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=THREADED, category=DeprecationWarning)
        return posix.fork()
