"""The process guard: where faultsim cannot contain a process the agent starts, the start is
refused before it happens and reported.

In-process, a process the agent starts (a tool running `curl`, `git push`, a Node helper,
an MCP stdio server, `subprocess.run([sys.executable, "-c", ...])`) would run on the real
machine: outside the fake file system, past the network guard (which sees only this
process's Python sockets), and once per crash run. So while an incarnation runs,

    subprocess.Popen (and everything built on it: run, call, check_output, os.popen,
    asyncio's subprocesses), os.system, os.exec*, os.posix_spawn/posix_spawnp, os.spawn*,
    os.fork/os.forkpty (pty.fork, pty.spawn, multiprocessing's fork start), and
    _posixsubprocess.fork_exec (multiprocessing's spawn and forkserver starts)

raise `ProcessRefused` and report the command and the agent's call site to the caller's
`record`: the `no_uncontained_process` finding, which says to use subprocess mode. In
subprocess mode the incarnation's whole process tree runs contained instead
(`faultsim.host.jail`); only where the kernel allows no namespace does that mode refuse the
same way (`contained()` is False there).

faultsim's own forks are not refused: they call `posix.fork` (the in-process driver) or run
outside an incarnation. C code that forks without Python (a C extension calling fork(2))
is not seen.

Standard library only (the bottom layer): both backends install it.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import threading
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

IN_PROCESS = ("in-process mode cannot contain a process the agent starts: run it with "
              "--mode subprocess, where the agent's processes run contained")


class ProcessRefused(PermissionError):
    """What the agent meets when it starts a process faultsim cannot contain."""


_lock = threading.Lock()
_active: list["_Guard"] = []  # the incarnation running now (one at a time per process)
_originals: dict[tuple[Any, str], Any] = {}
_why_uncontained = [IN_PROCESS]


_contained = [False]


def uncontained_because(why: str) -> None:
    """Why processes are refused in this process (subprocess mode: why the kernel gave no
    namespace); said in every refusal."""
    _why_uncontained[0] = why


def set_contained(yes: bool) -> None:
    """This process runs inside a jail that contains every process it starts (subprocess
    mode's children, `faultsim.host.jail`): incarnations here start processes freely."""
    _contained[0] = yes


def contained() -> bool:
    return _contained[0]


def why_uncontained() -> str:
    return _why_uncontained[0]


class _Guard:
    def __init__(self, record: Callable[[str, str], None]) -> None:
        self.record = record

    def refuse(self, command: str) -> None:
        site = call_site()
        self.record(command, site)
        raise ProcessRefused(
            1, f"faultsim refused to start a process ({command}, from {site}): "
            f"{_why_uncontained[0]}")


@contextmanager
def refusing(record: Callable[[str, str], None]) -> Iterator[None]:
    """Refuse every process start while inside (one incarnation); `record(command, site)`
    hears of each."""
    _install()
    guard = _Guard(record)
    _active.append(guard)
    try:
        yield
    finally:
        _active.remove(guard)


def describe(args: Any) -> str:
    """A command as one short line: `python -c 'import socket...'`."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
    else:
        try:
            words = [os.fsdecode(a) for a in args]
        except TypeError:
            words = [repr(args)]
        # quoted only where a word would not read as one (shell quoting of code is unreadable)
        text = " ".join(w if w and not any(c.isspace() for c in w) else repr(w)
                        for w in words)
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def call_site() -> str:
    """file:line of the innermost frame of the agent's own code (outside the standard
    library, site-packages and faultsim; failing that, outside the standard library and
    faultsim), the file named as Python loaded it: the path as the user wrote it."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.abspath(paths[n]) for n in ("stdlib", "platstdlib") if paths.get(n)}
    packages = {os.path.abspath(paths[n]) for n in ("purelib", "platlib") if paths.get(n)}
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # faultsim/
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    for skip in (stdlib | packages | {ours}, stdlib | {ours}):
        for name, line in frames:
            path = os.path.abspath(name)
            if not name.startswith("<") and not any(path.startswith(s + os.sep)
                                                    for s in skip):
                return f"{name}:{line}"
    return "an unknown call site"


def _check(command: Callable[[], str]) -> None:
    if _active:
        _active[-1].refuse(command())


def _wrap(owner: Any, name: str, command: Callable[..., str]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return
    _originals[(owner, name)] = original

    def said(*args: Any, **kwargs: Any) -> str:
        try:
            return command(*args, **kwargs)
        except Exception:  # an unusual call: name the function at least
            return f"{getattr(owner, '__name__', owner)}.{name}(...)"

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _active:
            _check(lambda: said(*args, **kwargs))
        if name not in ("fork", "forkpty"):
            return original(*args, **kwargs)
        # CPython 3.12+ warns at a fork of a threaded process, from the frame that called
        # os.fork: this one. The fork is the caller's, so is the warning (a filter on
        # faultsim's modules would take it for faultsim's own)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = original(*args, **kwargs)
        for w in seen:
            warnings.warn(w.message, w.category, stacklevel=2)
        return result

    guarded.__name__ = getattr(original, "__name__", name)
    guarded.__doc__ = getattr(original, "__doc__", None)
    setattr(owner, name, guarded)


def _install() -> None:
    with _lock:
        if _originals:
            return
        import subprocess

        # the real module: under pyfakefs `os` (even sys.modules["os"]) is its fake, which
        # keeps the real one as `os_module` and passes unknown attributes through to it
        # (so the agent's `os.fork` finds ours there)
        real_os = sys.modules["os"]
        real_os = getattr(real_os, "os_module", real_os)

        def popen(self, args, *rest, **kwargs):
            return describe(args)

        # __init__, not _execute_child: it opens its pipes first, which pyfakefs cannot
        _wrap(subprocess.Popen, "__init__", popen)
        _wrap(real_os, "system", lambda command: describe(command))
        for name in ("execv", "execve"):  # os.execl*, execvp* and spawn* end in these
            _wrap(real_os, name, lambda path, args, *rest, **kw: describe(args or [path]))
        for name in ("posix_spawn", "posix_spawnp"):
            _wrap(real_os, name, lambda path, argv, *rest, **kw: describe(argv or [path]))
        _wrap(real_os, "fork", lambda: "os.fork()")
        _wrap(real_os, "forkpty", lambda: "os.forkpty()")
        try:
            import _posixsubprocess
        except ImportError:  # not POSIX
            return
        _wrap(_posixsubprocess, "fork_exec",
              lambda args, executables, *rest: describe(args or executables))
        if getattr(subprocess, "_fork_exec", None) is _originals.get(
                (_posixsubprocess, "fork_exec")):
            subprocess._fork_exec = _posixsubprocess.fork_exec
