"""Where a kill lands, and how: the incarnation's trace as its boundaries come (the fake's
requests and streams, the services' calls, the agent's file system calls read from
strace's log), and the kill at the target boundary.

A kill point is the engine's: "after event t" of the clean run's trace
(`faultsim.killpoints`). Each is reached at a boundary the black box cannot cross
unseen:
  after a model answer or a stream gap (model.response, model.stream)  in the fake's
      listener, before the answer (or the rest of the stream) is sent
  after an effect (effect.*)    at the service's "answered" step of that call, before the
      agent has the answer
  after a file system event, or before the first event   at the entry of whatever comes
      next: the next call that changes the workdir (held at its entry by strace), the next
      model request or service call received, or the agent's exit (exit_group, held)
Nothing the agent does between two events changes its disk or the world, so these are the
in-process mode's boundaries, met on a real process.

Every event is traced in the order it happened: a world event first drains strace's log,
in which every earlier call of the agent's already stands (strace logs a call before it
lets the tracee go on, and the agent's request follows its earlier calls).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from ..core.trace import Killed, Tracer
from .disk import DiskModel
from .syscalls import CHANGING, Call, LogReader, follow, read_log

_WORLD = ("model.response", "model.stream")  # killed at in place: before the agent has it


class Controller:
    """Traces one incarnation and kills it at `target` (after event `target`; 0: before the
    first; None: never)."""

    def __init__(self, tracer: Tracer, model: DiskModel, target: int | None,
                 kill: Callable[[], bool]) -> None:
        self.tracer, self.model, self.target = tracer, model, target
        self._kill = kill
        self._lock = threading.RLock()
        self.reader = LogReader()
        self.log: Path | None = None
        self.dying = False
        self.landed = False
        self.held: Call | None = None  # the call held at its entry when the kill came
        self.where = ""  # the boundary the kill came at, in words
        self._after_effect = False
        self.entries: list[str] = []  # every boundary met, in words (for diagnosis)
        self.calls: dict[int, tuple[str, int]] = {}  # event -> (syscall, its thread's nth)
        self.main_exit: int | None = None  # the command's exit status, once it called exit
        self.named: set[str] = set()  # the paths the workdir's changing calls named

    # -- the kill -----------------------------------------------------------------------
    def _die(self, where: str) -> None:
        self.dying = True
        self.where = where
        self.landed = self._kill()

    def _at_boundary(self, where: str) -> bool:
        """An entry of something new: kill here when the target is the event before it."""
        if self.dying:
            return True
        if self.target is None or len(self.tracer.events) != self.target:
            return False
        last = self.tracer.events[-1] if self.tracer.events else None
        if last is not None and (last.kind in _WORLD or last.kind.startswith("effect.")):
            return False  # killed in place already, or at its answer
        self._die(where)
        return True

    # -- the boundaries -----------------------------------------------------------------
    def model_request(self) -> None:
        with self._lock:
            self.drain()
            self.entries.append("a model request received")
            if self._at_boundary("at the entry of a model request"):
                raise Killed("at a model request")

    def service(self, phase: str, service: str, n: int) -> None:
        with self._lock:
            self.drain()
            if phase == "received":
                self.entries.append(f"call {n} of service {service} received")
                if self._at_boundary(f"at the entry of call {n} of service {service}"):
                    raise Killed("at a service call")
            elif phase == "answered" and self._after_effect and not self.dying:
                self._after_effect = False
                self._die(f"after call {n} of service {service} applied, before its answer")
                raise Killed("after an effect")
            elif self.dying:
                raise Killed("after the kill")

    def world_event(self, kind: str) -> None:
        """After the world's event `kind` was traced."""
        with self._lock:
            if self.dying:
                raise Killed("after the kill")
            if self.target is None or len(self.tracer.events) != self.target:
                return
            if kind.startswith("effect."):
                self._after_effect = True  # killed at that call's answer
                return
            if kind in _WORLD:
                self._die(f"after {kind} (not yet sent to the agent)")
                raise Killed(kind)

    # -- the agent's own calls, from strace's log ---------------------------------------
    def drain(self) -> None:
        """Read what strace logged since the last look: trace the calls that returned,
        kill at a held entry if it is the target."""
        if self.log is None:
            return
        with self._lock:
            for what, call in self.reader.feed(read_log(self.log)):
                if self.dying:
                    return
                if what == "enter":
                    if call.name == "exit_group" and call.tid == self.reader.calls[0].tid:
                        # the command's own process ends (strace, its parent, lives on
                        # while anything it started does): its status is the argument
                        words = [w for w in call.words if w.lstrip("-").isdigit()]
                        self.main_exit = int(words[0]) if words else 0
                    if call.name == "exit_group":
                        if self._at_boundary("at the agent's exit"):
                            self.held = call
                    elif call.name in CHANGING and self.model.changes(call):
                        self.entries.append(_describe(call, self.model))
                        if self._at_boundary("at the entry of " + _describe(call,
                                                                          self.model)):
                            self.held = call
                    continue
                for kind, subject, detail, size in self.model.apply(call):
                    event = self.tracer.emit(kind, subject, detail, size)
                    self.calls[event.index] = (call.name, call.ordinal)
                    self.named.update(_named(call, self.model.root))

    def follow(self, stop: threading.Event, tick: float = 0.002) -> threading.Thread:
        """Drain the log every `tick` until `stop`, or until the kill (`strace.follow`,
        the Claude Agent SDK adapter's write watch's too)."""
        return follow(lambda: self.dying or bool(self.drain()), stop, tick)


_BY_FD = ("write", "writev", "pwrite64", "pwritev", "pwritev2", "fsync", "fdatasync",
          "ftruncate")


def _named(call: Call, root: str) -> set[str]:
    """The paths a call names, as strace -P matches them: a descriptor's path, or its path
    arguments as written and made absolute (never an *at call's directory descriptor: the
    cwd would match every call relative to it)."""
    import os

    if call.name in _BY_FD:
        return {path for _fd, path in call.fds[:1] if path.startswith("/")}
    found = set()
    for raw in call.strings[:2]:
        path = raw.decode("utf-8", "surrogateescape")
        found |= {path, os.path.normpath(os.path.join(root, path))}
    return found


def _describe(call: Call, model: DiskModel) -> str:
    return f"{call.name}({', '.join(model.paths(call)) or '?'})"


class Door:
    """The fake Claude as the endpoint sees it: each request is a boundary first."""

    def __init__(self, fake: Any, controller: Controller) -> None:
        self._fake, self._controller = fake, controller

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)

    def handle(self, request: Any) -> Any:
        self._controller.model_request()
        return self._fake.handle(request)
