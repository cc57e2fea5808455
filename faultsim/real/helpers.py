"""Writes outside the sandbox by the processes the agent starts, in subprocess mode: each is
reported as the agent's own (`fstrace`'s `sandbox.escape`, `no_sandbox_escape`).

The jail (`faultsim.host.jail`) makes every mount but the sandbox read-only, so such a write
fails with EROFS; but `fstrace` sees only the agent's own Python, and nothing saw the
failure. So while an incarnation runs contained, every program it starts through
`subprocess` (Popen, run, asyncio's subprocesses, multiprocessing's spawn: they end in
`_posixsubprocess.fork_exec` or `os.posix_spawn`) or `os.system` runs watched by strace,
logging only the calls that change a file system and failed (`-Z`), into a memfd of the
incarnation's (nothing is written to any disk). A call that failed with EROFS is a write
the read-only mount refused: outside the sandbox, by definition (the sandbox is writable).

A started program keeps its pid (signals the agent sends it reach it, not strace): it
starts as `sh -c 'kill -STOP $$; exec PROGRAM ARGS'`, strace attaches to the stopped
process (`-p`, following its children), and it is continued. `os.system` (which returns
only when the command is done, so no pid is handed out) runs its command under strace
directly.

Bounds, said here and in docs/how-to/subprocess-mode.md: a program the agent's process
`exec`s in its own place (os.exec*) is not watched (the incarnation's report leaves with
its Python); a write that fails for another reason first (EACCES on a folder the user may
not write) is not an escape (it fails on any machine); Python's byte-code cache
(`__pycache__`), which an interpreter writes best-effort and skips when refused, is not
the agent's write. Where strace is missing or cannot attach, the program runs unwatched
and `unwatched` says why (the run's note; never a silent pass). Only runs that start a
program pay anything (one `sh` and one strace attach per program).

Part of the subprocess backend: the bottom layer and `faultsim.host.strace` (standard library).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import threading
import time
from typing import Any

from ..interpose.netguard import call_site
from ..interpose.procguard import describe
from ..host.strace import parse

# The calls that change a file system by a path (what EROFS can refuse).
WRITES = ("open", "openat", "creat", "mkdir", "mkdirat", "mknod", "mknodat", "rename",
          "renameat", "renameat2", "unlink", "unlinkat", "rmdir", "truncate", "link",
          "linkat", "symlink", "symlinkat", "chmod", "fchmodat", "chown", "lchown",
          "fchownat", "utimensat", "utimes", "utime")
# As `fstrace.refuse` names them, so that both read alike.
_WHAT = {"open": "open for writing", "openat": "open for writing",
         "creat": "open for writing", "mkdirat": "mkdir", "mknodat": "mknod",
         "renameat": "rename", "renameat2": "rename", "unlinkat": "unlink",
         "linkat": "link", "symlinkat": "symlink", "fchmodat": "chmod",
         "lchown": "chown", "fchownat": "chown", "utimensat": "utime", "utimes": "utime"}
_STOP_THEN_EXEC = 'kill -STOP $$; exec "$0" "$@"'
# bash's `exec -a` keeps the argv[0] the agent gave (busybox-style programs read it); dash
# has no -a, so where bash is missing the program sees its path there instead
_STOP_THEN_EXEC_AS = 'kill -STOP $$; exe=$1; shift; exec -a "$0" "$exe" "$@"'
ATTACH_SECONDS = 5.0  # a stopped process is attached in milliseconds; past this, unwatched
DRAIN_SECONDS = 2.0  # a finished program's strace writes its last lines and exits


class _Watch:
    def __init__(self, command: str, site: str, log: int, strace: Any, pid: int = 0) -> None:
        self.command, self.site, self.log, self.strace = command, site, log, strace
        self.pid = pid  # the program watched (0: os.system's, done when it returns)


_orig: dict[str, Any] = {}
_watches: list[_Watch] = []
_unwatched: list[str] = []  # why a program ran unwatched (the first reason)
_inside = threading.local()  # faultsim's own strace start: not watched itself


def _strace_line(log: str, target: list[str]) -> list[str]:
    strace = shutil.which("strace") or "strace"
    # `?`: a call this architecture lacks (open, creat on arm64) is skipped, not an error
    # -y: AT_FDCWD with the program's directory, for a relative path
    return [strace, "--seccomp-bpf", "-f", "-qq", "-Z", "-y", "-xx", "-s", "4096",
            "-e", "signal=none", "-e", "trace=" + ",".join("?" + c for c in WRITES),
            "-o", log, *target]


def _log() -> tuple[int, str]:
    fd = os.memfd_create("faultsim-helper-strace")
    return fd, f"/proc/{os.getpid()}/fd/{fd}"


def _first_executable(executables: Any) -> bytes | None:
    """The program exec would run: the first executable file of `executables`, if the
    kernel can run it itself (ELF or `#!`). A file of another format fails to start with
    ENOEXEC outside faultsim, but a shell's exec would run it as a script: left alone."""
    for exe in executables:
        if os.access(exe, os.X_OK) and not os.path.isdir(exe):
            try:
                with open(exe, "rb") as f:
                    magic = f.read(4)
            except OSError:
                return None
            return os.fsencode(exe) if magic.startswith((b"\x7fELF", b"#!")) else None
    return None


def _started(args: Any, executables: Any, spawn: Any) -> int | None:
    """Start `args` (run as the first of `executables` that exists) stopped, by
    `spawn(args, executables)`, have strace attach, continue it; its pid. None: not
    watched (the caller starts it as it would have)."""
    if getattr(_inside, "yes", False):
        return None
    exe = _first_executable(executables)
    if exe is None:
        return None  # not found: it fails as it would have
    if shutil.which("strace") is None:
        _unwatched[:] = _unwatched or ["strace is not installed (apt-get install strace)"]
        return None
    command, site = describe(args), call_site()
    argv = [os.fsencode(a) for a in list(args)]
    bash = shutil.which("bash")
    if bash and argv[:1] != [exe]:  # argv[0] as the agent gave it
        sh = os.fsencode(bash)
        line = [sh, b"-c", _STOP_THEN_EXEC_AS.encode(), argv[0], exe, *argv[1:]]
    else:
        sh = b"/bin/sh"
        line = [sh, b"-c", _STOP_THEN_EXEC.encode(), exe, *argv[1:]]
    pid = spawn(line, (sh,))
    why = _attach(pid, command, site)
    if why:
        _unwatched[:] = _unwatched or [why]
    os.kill(pid, signal.SIGCONT)  # attached or not, it runs
    return pid


def _state(pid: int) -> tuple[str, int]:
    """(state letter, tracer pid) of a process; ("", 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return "", 0
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return fields.get("State", " ").split()[0], int(fields.get("TracerPid", "0"))


def _attach(pid: int, command: str, site: str) -> str:
    """Attach strace to `pid` once it has stopped itself; '' or why not."""
    import subprocess

    deadline = time.monotonic() + ATTACH_SECONDS
    while _state(pid)[0] not in ("T", "t", ""):  # stopped (or gone: sh failed)
        if time.monotonic() > deadline:
            return f"{command} did not stop to be watched within {ATTACH_SECONDS:.0f} s"
        time.sleep(0.001)
    if not _state(pid)[0]:
        return ""  # gone before it ran anything (the shell failed): nothing to watch
    fd, path = _log()
    _inside.yes = True
    try:
        strace = subprocess.Popen(_strace_line(path, ["-p", str(pid)]),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
    finally:
        _inside.yes = False
    _watches.append(_Watch(command, site, fd, strace, pid))
    while _state(pid)[1] != strace.pid:
        if strace.poll() is not None or time.monotonic() > deadline:
            error = (strace.stderr.read().decode(errors="replace").strip().splitlines()
                     or ["no word"])[0] if strace.poll() is not None else "too slow"
            return f"strace could not attach to {command}: {error}"
        time.sleep(0.001)
    return ""


def _system(command: Any) -> int:
    if getattr(_inside, "yes", False):
        return _orig["system"](command)
    if shutil.which("strace") is None:
        _unwatched[:] = _unwatched or ["strace is not installed (apt-get install strace)"]
        return _orig["system"](command)
    fd, path = _log()
    _watches.append(_Watch(describe(command), call_site(), fd, None))
    line = _strace_line(path, ["--", "/bin/sh", "-c", os.fsdecode(command)])
    return _orig["system"](shlex.join(line))


def watch() -> None:
    """In an incarnation's process, contained, before the agent runs: every program it
    starts is watched (for good: the process exists for this incarnation)."""
    if _orig or not sys.platform.startswith("linux"):
        return
    import _posixsubprocess
    import subprocess

    fork_exec = _posixsubprocess.fork_exec
    _orig.update(fork_exec=fork_exec, system=os.system)

    def watched_fork_exec(args, executables, *rest):
        pid = _started(args, executables, lambda a, e: fork_exec(a, e, *rest))
        return fork_exec(args, executables, *rest) if pid is None else pid

    _posixsubprocess.fork_exec = watched_fork_exec
    if getattr(subprocess, "_fork_exec", None) is fork_exec:  # Python 3.12's own name
        subprocess._fork_exec = watched_fork_exec
    spawn = getattr(os, "posix_spawn", None)
    if spawn is not None:
        _orig["posix_spawn"] = spawn
        for name in ("posix_spawn", "posix_spawnp"):
            setattr(os, name, _watched_spawn(getattr(os, name), name == "posix_spawnp"))
    os.system = _system


def _watched_spawn(original: Any, search: bool) -> Any:
    def watched(path, argv, *rest, **kw):
        where = [path]
        if search and not os.path.dirname(os.fsdecode(path)):  # posix_spawnp: the PATH
            env = rest[0] if rest else kw.get("env")
            where = [os.path.join(d, os.fsdecode(path)) for d in os.get_exec_path(env)]
        pid = _started(argv, where,
                       lambda a, e: _orig["posix_spawn"](e[0], a, *rest, **kw))
        return original(path, argv, *rest, **kw) if pid is None else pid
    return watched


def escapes() -> list[str]:
    """The writes outside the sandbox the read-only mounts refused to the programs the
    agent started so far, worded as `fstrace`'s refusals, each with the program's command
    line and where the agent started it."""
    out: list[str] = []
    for w in _watches:
        if w.strace is not None and w.strace.poll() is None \
                and _state(w.pid)[0] in ("", "Z"):
            try:  # its program is done: strace writes its last lines and exits
                w.strace.wait(DRAIN_SECONDS)
            except Exception:  # still writing: what is logged is read
                pass
        size = os.fstat(w.log).st_size
        text = os.pread(w.log, size, 0).decode("utf-8", "replace")
        for call in parse(text):
            if call.error != "EROFS" or not call.strings:
                continue
            path = os.fsdecode(call.strings[0])
            # a relative path is made whole by an *at call's directory (-y); the others
            # (mkdir, creat, rename ...) carry none, so it is shown as the program gave it
            base = next((p for fd, p in call.fds if fd == "AT_FDCWD"), None)
            if base and not os.path.isabs(path):
                path = os.path.join(base, path)
            if "__pycache__" in path.split("/"):  # an interpreter's best-effort cache
                continue
            what = _WHAT.get(call.name, call.name)
            if what == "rename" and len(call.strings) > 1:
                path += " -> " + os.fsdecode(call.strings[1])
            line = f"{what} {path} (by {w.command}, a process the agent started at {w.site})"
            if line not in out:
                out.append(line)
    return out


def stop() -> None:
    """At the incarnation's end: faultsim's own straces still watching (a program left
    running, which the fork server kills and reports as the agent's) end first, so that
    the report of what outlived the incarnation names only the agent's processes."""
    for w in _watches:
        if w.strace is not None and w.strace.poll() is None:
            w.strace.kill()
            w.strace.wait()


def unwatched() -> str | None:
    """Why a program the agent started ran unwatched (its writes outside the sandbox
    failed, read-only, but were not reported), or None."""
    return _unwatched[0] if _unwatched else None
