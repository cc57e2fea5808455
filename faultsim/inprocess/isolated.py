"""One call made in a forked child, its result sent back: work that resumes the agent outside
the forking executor's pool (the version probe) runs where an agent that ends its process on
resume ends only that child, never faultsim (`kill_point_judged` says so instead)."""
from __future__ import annotations

import pickle
import posix as _os  # the real OS: pyfakefs patches every module's `os`, not `posix`
import select
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable

import freezegun.api as _real_time  # time.perf_counter is frozen in here; this is not

from ..errors import WorkerDied
from ..world.clock import faithful_copies
from .forks import fork

if TYPE_CHECKING:
    from ..killpoints import KillPoint


def _died(status: int) -> WorkerDied:
    """The child died (or overran its limit) before it sent its result: `status` as
    waitpid gives it (-1: stopped by faultsim at the limit)."""
    error = WorkerDied(f"the child died without its result (status {status})")
    error.status = status  # type: ignore[attr-defined]
    return error


def in_child(call: Callable[[], Any], limit: float | None) -> Any:
    """`call()` in a forked child; its result (pickled), or WorkerDied with its `status`. The child's changes to
    memory and the sandbox stay in the child: only for work whose result is all that
    matters. `limit`: seconds after which the child is killed (None: no backstop)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = _os.pipe()
    pid = fork()  # forks.py: the threads alive here
    if pid == 0:
        status = 70
        try:
            _os.close(read_fd)
            dies_with_parent()
            result = call()
            with faithful_copies():  # its datetimes as they were (world/clock.py)
                view = memoryview(pickle.dumps(result))
            while view:
                view = view[_os.write(write_fd, view):]
            status = 0
        finally:
            _os._exit(status)
    _os.close(write_fd)
    data, started = bytearray(), _real_time.real_perf_counter()
    try:
        while True:
            left = None if limit is None else limit - (_real_time.real_perf_counter()
                                                       - started)
            if left is not None and left <= 0:
                _os.kill(pid, signal.SIGKILL)
                _os.waitpid(pid, 0)
                raise _died(-1)
            ready, _, _ = select.select([read_fd], [], [], left)
            if not ready:
                continue
            chunk = _os.read(read_fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    except BaseException:
        try:  # interrupted (Ctrl-C): the child goes with the call
            _os.kill(pid, signal.SIGKILL)
            _os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise
    finally:
        _os.close(read_fd)
    _, status = _os.waitpid(pid, 0)
    if status != 0 or not data:
        raise _died(status)
    return pickle.loads(bytes(data))


def dies_with_parent() -> None:
    """The kernel SIGKILLs this child when the process that forked it ends (Linux's
    PR_SET_PDEATHSIG), however it ends: a faultsim stopped by SIGKILL or a CI timeout
    leaves no crash run behind, stuck in an agent's hung event loop. Elsewhere: the
    parent's own `kill_all` on its way out is the only guard."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if _os.getppid() == 1:  # the parent died before the call: no signal will come
        _os._exit(70)


def death(status: int, point: "KillPoint") -> str:
    """How the child judging `point` died without a verdict, in words (the same on any
    worker count: what the agent did, never which child or job)."""
    if _os.WIFSIGNALED(status):
        sig = _os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        how = f"was killed by {name}" + (" (out of memory?)" if sig == signal.SIGKILL
                                         else "")
    elif _os.WIFEXITED(status) and _os.WEXITSTATUS(status) != 70:
        how = f"exited with status {_os.WEXITSTATUS(status)} (did the agent end the process?)"
    else:
        how = "failed inside faultsim"
    return f"the process judging kill point {point.id} {how} before it sent a verdict"
