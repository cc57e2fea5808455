"""strace, shared by both backends that run an agent under it (the command backend,
`faultsim.command`, and the Claude Agent SDK adapter's transcript writes): whether it can
trace here, the command line that traces (and holds) a process's system calls, and the
parser that reads its log back into `Call` records, in the order strace saw them enter.
One copy of each.

strace runs with `-f -y -xx`: every thread and child is traced, a descriptor is printed
with the path it refers to (`3</abs/path>`), and every string in hex, so that a file's
bytes (a write's buffer) and its path come back exactly. Only the calls that can change a
file system are traced (`TRACED`), plus `chdir` (a relative path's base) and `exit_group`
(the boundary after the agent's last event); with `--seccomp-bpf`, so that the agent stops
only at those (an interpreter's thousands of reads and stats run untraced). `lseek` is not
traced (an interpreter's imports call it thousands of times): a write at an offset an
lseek moved is caught as the model's mismatch with the disk, never judged.

Standard library only.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


# What changes a file system (open for write/creat, write, rename, unlink, truncate, fsync,
# mkdir, rmdir), what the model of the disk needs besides (lseek, chdir), and the exit.
CHANGING = ("open", "openat", "creat", "write", "writev", "pwrite64", "pwritev", "pwritev2",
            "rename", "renameat", "renameat2", "unlink", "unlinkat", "truncate", "ftruncate",
            "fsync", "fdatasync", "mkdir", "mkdirat", "rmdir")
TRACED = (*CHANGING, "chdir", "exit_group")
_ENTRY = re.compile(r"^(\d+) +([a-z0-9_]+)\(", re.M)
_RESUMED = re.compile(r"^(\d+) +<\.\.\. ([a-z0-9_]+) resumed>")
_RESULT = re.compile(r"\) += (-?\d+|\?)(<(?:\\x[0-9a-f]{2})*>)?(?: ([A-Z][A-Z0-9_]*))?")
_TOKEN = re.compile(r'"((?:\\x[0-9a-f]{2})*)"|(-?\d+|AT_FDCWD)<((?:\\x[0-9a-f]{2})*)>'
                    r"|([A-Za-z_0-9|]+)")


@dataclass(frozen=True)
class Hold:
    """Hold at its entry the `when`th call of `syscall` of each thread (strace counts per
    syscall and per tracee, strace(1) "inject"), `seconds` long; `when=None`: every one.
    With `paths` (strace's -P), only the calls that name one of them are traced, and
    counted: an interpreter's own writes (node's eventfd, a log on stdout) vary in number
    from run to run, the agent's calls on its files do not."""

    syscall: str
    when: int | None
    seconds: float
    paths: tuple[str, ...] = ()


def command_line(log: str, command: list[str], hold: Hold | None = None,
                 paths: tuple[str, ...] = (), trace: tuple[str, ...] = TRACED,
                 contents: bool = True) -> list[str]:
    """`command` under strace, its calls of `trace` logged to `log` as they enter; with
    `paths`, only the calls that name one of them (strace -P). A hold's `syscall` may name
    several, comma-separated (strace's set). `contents=False` (the Claude Agent SDK
    adapter's transcript writes: only their count and results are read) prints no bytes
    and no descriptor paths, and stops the process at every call, as that adapter's kills
    were measured: --seccomp-bpf changes how fast the CLI runs, so where its timer cuts
    its transcript batches."""
    strace = shutil.which("strace") or "strace"
    exact = ["--seccomp-bpf", "-f", "-qq", "-y", "-xx", "-s", "1048576"] if contents \
        else ["-f", "-qq", "-s", "0"]
    line = [strace, *exact, "-e", "signal=none", "-e", "trace=" + ",".join(trace),
            "-o", log]
    for path in paths or (hold.paths if hold is not None else ()):
        line += ["-P", path]
    if hold is not None:
        spec = f"inject={hold.syscall}:delay_enter={max(1, int(hold.seconds * 1e6))}"
        if hold.when is not None:
            spec += f":when={hold.when}"
        line += ["-e", spec]
    return [*line, "--", *command]


def unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace("\\x", ""))


@dataclass
class Call:
    """One system call as strace logged it."""

    n: int  # 1-based, in the order strace saw calls enter
    tid: int
    name: str
    strings: list[bytes] = field(default_factory=list)  # its string arguments, decoded
    fds: list[tuple[str, str]] = field(default_factory=list)  # (fd, path) arguments
    words: list[str] = field(default_factory=list)  # its other arguments (flags, numbers)
    result: int | None = None  # None: it never returned (held, or killed inside)
    result_path: str | None = None  # the path of a returned descriptor
    error: str | None = None  # a failed call's errno name (EROFS)
    ordinal: int = 0  # the how-manieth call of `name` by thread `tid` (strace's `when`)

    @property
    def returned(self) -> bool:
        return self.result is not None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result >= 0


def _parse_args(call: Call, text: str) -> None:
    for m in _TOKEN.finditer(text):
        if m.group(1) is not None:
            call.strings.append(unhex(m.group(1)))
        elif m.group(2) is not None:
            call.fds.append((m.group(2), unhex(m.group(3)).decode("utf-8", "surrogateescape")))
        else:
            call.words.append(m.group(4))


def _finish(call: Call, rest: str) -> None:
    m = _RESULT.search(rest)
    if m is None:
        return
    if m.group(1) != "?":
        call.result = int(m.group(1))
    if m.group(2):
        call.result_path = unhex(m.group(2)[1:-1]).decode("utf-8", "surrogateescape")
    call.error = m.group(3)


class LogReader:
    """Reads a growing strace log: `feed(text)` with the whole log so far returns what is
    new, as ("enter", call) when a call entered (its line begun, or held at its entry) and
    ("return", call) once its result is known (on its own line or a later "resumed" one),
    in the log's order."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._done = 0  # characters of whole lines consumed
        self._open: dict[int, Call] = {}  # tid -> its unfinished call
        self._counts: dict[tuple[int, str], int] = {}
        self._tail: Call | None = None  # the call whose line is still being written

    def _enter(self, tid: int, name: str) -> Call:
        self._counts[(tid, name)] = self._counts.get((tid, name), 0) + 1
        call = Call(len(self.calls) + 1, tid, name, ordinal=self._counts[(tid, name)])
        self.calls.append(call)
        return call

    def feed(self, text: str) -> list[tuple[str, Call]]:
        out: list[tuple[str, Call]] = []
        end = text.rfind("\n") + 1
        for line in text[self._done:end].split("\n")[:-1]:
            m = _ENTRY.match(line)
            if m is not None:
                call = self._tail
                if call is None or call.tid != int(m.group(1)) or call.name != m.group(2):
                    call = self._enter(int(m.group(1)), m.group(2))
                    out.append(("enter", call))
                self._tail = None
                call.strings, call.fds, call.words = [], [], []
                body = line[m.end():]
                if body.endswith("<unfinished ...>"):
                    _parse_args(call, body[:-len("<unfinished ...>")])
                    self._open[call.tid] = call
                    continue
                cut = _RESULT.search(body)
                _parse_args(call, body if cut is None else body[:cut.start()])
                if cut is not None:
                    _finish(call, body[cut.start():])
                out.append(("return", call))
                continue
            m = _RESUMED.match(line)
            if m is not None:
                call = self._open.pop(int(m.group(1)), None)
                if call is not None:
                    body = line[m.end():]
                    cut = _RESULT.search(body)
                    _parse_args(call, body if cut is None else body[:cut.start()])
                    _finish(call, body if cut is None else body[cut.start():])
                    out.append(("return", call))
        self._done = end
        tail = text[end:]
        m = _ENTRY.match(tail)
        if m is not None and self._tail is None:
            # held at its entry (strace prints a call's start before it holds it)
            self._tail = call = self._enter(int(m.group(1)), m.group(2))
            _parse_args(call, tail[m.end():])
            out.append(("enter", call))
        return out


def parse(text: str) -> list[Call]:
    """Every call in a log, in entry order; a call still held (its line unfinished) or
    killed inside has `result` None."""
    reader = LogReader()
    reader.feed(text)
    return reader.calls


def read_log(log: Path) -> str:
    """The log as strace has written it so far ("" before strace created it)."""
    try:
        return log.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def follow(step: Callable[[], bool], stop: threading.Event, tick: float = 0.002,
           name: str = "faultsim-strace-follow") -> threading.Thread:
    """A daemon thread that calls `step()` every `tick` seconds (read what the log gained
    and act on it: count, trace, kill at a held entry) until `stop` is set or `step`
    returns True (its work is done: the kill came). Started; the caller sets `stop` and
    joins it."""
    def run() -> None:
        while not stop.is_set():
            if step():
                return
            time.sleep(tick)
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def count_entries(text: str) -> int:
    """How many calls have entered, cheaply (the watcher's question, asked every tick)."""
    return len(_ENTRY.findall(text))


def strace_unavailable() -> str | None:
    """Why strace cannot trace a command here (one line), or None when it can."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed (apt-get install strace)"
    try:
        done = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "true"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"strace cannot run here: {exc}"
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0]
        return f"strace cannot trace here: {first}"
    return None
