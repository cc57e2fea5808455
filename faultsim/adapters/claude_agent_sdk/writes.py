"""Kills inside the CLI's own writes to the session transcript (kill points
`transcript-write`), by strace.

The CLI appends the transcript in batches from its thread pool and, at exit, from its main
thread. strace's own `inject=write:signal=KILL:when=N` counts calls per thread (strace(1):
"accounting ... is done per syscall and per tracee"), so it cannot name "the Nth write to
the file". Here strace instead holds every write(2)/writev(2)/pwrite64(2) to the transcript
at its entry for `HOLD` seconds (`inject=...:delay_enter=`, with `-P PATH` so nothing else
is traced or slowed) and prints each call as it enters; faultsim reads the log, counts the
entries across threads and SIGKILLs the CLI's process group at the Nth, while that write is
held: the kernel skips a syscall whose tracee has a fatal signal pending when it leaves the
entry stop, so write N never happens. The proof reads the log again: write N never
returned, and the transcript on disk holds exactly the bytes of the writes that did.

The transcript's path must be known before the CLI starts: the adapter gives each new
session a session id of its own (`--session-id`), so the path is
`CLAUDE_CONFIG_DIR/projects/<cwd, each non-alphanumeric character a dash>/<id>.jsonl`.
"""
from __future__ import annotations

import re
import threading
import uuid
from pathlib import Path
from typing import Callable

from ...host.strace import Hold, LogReader, command_line, follow, parse, read_log
from ...host.strace import strace_unavailable  # noqa: F401 - shared with faultsim.command

HOLD = 0.5  # seconds each transcript write waits at its entry: the window for the kill
WRITES = ("write", "writev", "pwrite64")


def session_id(scenario: str, incarnation: int, nth: int) -> str:
    """The id faultsim gives the `nth` new session of an incarnation of a scenario's run."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"faultsim:{scenario}:{incarnation}:{nth}"))


def transcript_path(root: Path, sid: str) -> Path:
    """Where the CLI, started in `root/work` with `root/claude` as its config dir, keeps
    session `sid`: the project is named after the cwd's absolute path."""
    project = re.sub(r"[^A-Za-z0-9]", "-", str(root / "work"))
    return root / "claude" / "projects" / project / f"{sid}.jsonl"


def tracer(path: Path, log: Path, hold: float = HOLD) -> Callable[[list[str]], list[str]]:
    """The CLI's command line prefixed with strace (`faultsim.host.strace`'s, as the command
    backend's): writes to `path` held `hold` s at entry and logged to `log` as they enter
    (`contents=False`: the line this adapter's kills were measured with)."""
    held = Hold(",".join(WRITES), None, hold, (str(path),))

    def wrap(command: list[str]) -> list[str]:
        return command_line(str(log), command, held, trace=WRITES, contents=False)
    return wrap


class WriteWatch:
    """Counts the transcript writes in strace's log as they enter (strace prints a call's
    start before it holds it; `faultsim.host.strace`'s `LogReader`, followed by its `follow`
    thread, as the command backend follows its log) and calls `kill` once, at the `n`th.
    With `stops`, calls `stop(m)` at the entry of each write m of them instead (while strace
    holds it), which reads the state and returns True to go on; False: it killed there
    (then `n` is m)."""

    def __init__(self, log: Path, n: int | None, kill: Callable[[], None],
                 stops: tuple[int, ...] = (),
                 stop: Callable[[int], bool] | None = None) -> None:
        self.log, self.n, self.kill = log, n, kill
        self.stops, self.stop = sorted(stops), stop
        self.entered = 0
        self._reader = LogReader()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "WriteWatch":
        self._thread = follow(self._step, self._stop, name="faultsim-strace-watch")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.entered = max(self.entered, len(self._writes(parse(read_log(self.log)))))

    @staticmethod
    def _writes(calls: list) -> list:
        return [c for c in calls if c.name in WRITES]

    def _step(self) -> bool:
        """One look at the log: True once the kill came (the watch is done)."""
        self._reader.feed(read_log(self.log))
        self.entered = len(self._writes(self._reader.calls))
        while self.stops and self.stops[0] <= self.entered and self.stop is not None:
            m = self.stops.pop(0)
            if not self.stop(m):
                self.n, self.stops = m, []
                return True
        if self.n is not None and self.entered >= self.n:
            self.kill()
            return True
        return False

    def proof(self, on_disk: int, n: int | None = None) -> str | None:
        """Why the kill did not land inside write n (`self.n` by default), or None when it
        did: write n entered and never returned, and the transcript holds exactly the bytes
        that the writes that did return wrote (`on_disk`). A stop's proof too, read while
        the group is stopped."""
        n = self.n if n is None else n
        writes = self._writes(parse(read_log(self.log)))
        if n is None or len(writes) < n:
            return (f"strace saw {len(writes)} transcript writes, not {n}: the kill "
                    "never came")
        nth = writes[n - 1]
        if nth.returned:
            return (f"write {n} returned before the kill (thread {nth.tid}, "
                    f"= {nth.result})")
        returned = sum(c.result for c in writes if c.returned and c.result > 0)
        if returned != on_disk:
            return (f"the transcript holds {on_disk} bytes, the writes that returned wrote "
                    f"{returned}")
        return None
