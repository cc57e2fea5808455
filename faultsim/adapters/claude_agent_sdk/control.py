"""How a kill lands: the kill points a run meets, counted as they come (from the fake's
threads and the agent's loop), the SDK seams that report them and start the CLI in a process
group of its own, and the SIGKILL of that group. Or, in a run that stops at many points
(`stops`), the SIGSTOP of that group at each: its crash state read, then the run goes on."""
from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ...host.groups import continue_groups, group_alive, kill_groups, stop_groups
from ...core.trace import Killed
from ...world import World
from .writes import session_id
from .sandbox import snapshot
from .sdk import sdk_cli, sdk_query

CATEGORIES = ("model-request", "after-tool-use", "builtin-start", "builtin-end",
              "handler-entry", "before-effect", "after-effect", "handler-return",
              "transcript-write")
_STARTS = ("builtin-start", "handler-entry")  # a tool begins: after its tool_use block
WRITE_KILL = "transcript-write"  # killed inside the CLI's Nth transcript write (writes.py)


# -- kill points ---------------------------------------------------------------------------
@dataclass(frozen=True)
class KillPoint:
    index: int  # 1-based, in the clean run's order
    category: str
    detail: str  # the tool, or the request/stream position
    ordinal: int  # the how-manieth event of this category and detail

    @property
    def id(self) -> str:
        return f"k{self.index}-{self.category}-{self.detail}#{self.ordinal}"

    @property
    def key(self) -> tuple[str, str, int]:
        """What names it across runs. Not the index: the endpoint's thread and the agent's
        loop meet some points in either order (the CLI may start a tool before the stream
        event after its block is counted), so runs agree on each point, not on the order."""
        return self.category, self.detail, self.ordinal


class Controller:
    """Counts kill-point events as the run meets them (from the endpoint's threads and the
    agent's loop) and kills at the target: waits for the CLI's batch to flush, SIGKILLs its
    process groups, reads the sandbox, seals the world, raises `Killed`."""

    def __init__(self, world: World, root: Path, target: KillPoint | None,
                 settle: float, name: str = "",
                 stops: list[KillPoint] | None = None) -> None:
        self.world, self.root, self.target, self.settle = world, root, target, settle
        self.name = name  # the scenario's id: it names the sessions' ids
        # where to stop, read the crash state and go on (`_stop`), by key
        self.stops = {kp.key: kp for kp in stops or ()}
        self.stopped: dict[tuple, Stopped] = {}  # key -> the state read there
        self.stopping = False  # a stop is reading its state: other events wait
        self.seen: list[KillPoint] = []
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Condition()
        self.dying = False
        self.files: dict[str, bytes] | None = None  # the sandbox at the kill
        self.landed = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None

    def event(self, category: str, detail: str) -> None:
        with self._lock:
            # another thread's point, met while a stop reads its state: it comes after
            self._lock.wait_for(lambda: not self.stopping)
            if category in _STARTS:
                # The CLI starts a tool as soon as its block closes, and the endpoint's thread
                # counts that block just after sending it: wait for the count, so a kill
                # "after-tool-use" always lands before the tool runs (else the order of two
                # threads would decide whether the effect happened)
                entered = sum(1 for kp in self.seen if kp.category in _STARTS)
                self._lock.wait_for(lambda: self.dying or sum(
                    1 for kp in self.seen if kp.category == "after-tool-use") > entered,
                    timeout=5.0)
            if self.dying:  # the process is dead: nothing it does happens
                raise Killed("after the kill")
            slot = (category, detail)
            self._counts[slot] = self._counts.get(slot, 0) + 1
            point = KillPoint(len(self.seen) + 1, category, detail, self._counts[slot])
            self.seen.append(point)
            self._lock.notify_all()
            if point.key in self.stops and point.key not in self.stopped:
                self.stopping = True
                refused = self.world.sealed = _Refusals()  # as at a kill, counted
            elif self.target is None or point.key != self.target.key:
                return
            else:
                self.dying = True
                self.world.sealed = True  # no effect or model call of the dead one lands
        _quiesce(self.root, self.settle)  # the CLI waits on faultsim; its timer flushes
        if self.stopping:
            if self._stop(point, refused):
                return
            raise Killed(point.id)
        self._die()
        raise Killed(self.target.id)

    def stop_write(self, m: int, proof: Callable[[dict], str | None]) -> bool:
        """A stop at the entry of transcript write m, while strace holds it (`writes.py`;
        `WriteWatch` calls this): as `_stop`, at once (the CLI is not waiting on faultsim,
        so a kill there does not wait either), and the state read only where `proof`
        passes on it (write m entered, not returned; the transcript holds the bytes of the
        writes that returned); else the run goes on and the point gets a crash run of its
        own. False: the stop became the kill (the watch is done)."""
        point = self.stops.get((WRITE_KILL, "session", m))
        with self._lock:
            self._lock.wait_for(lambda: not self.stopping)
            if self.dying:
                return False
            if point is None or point.key in self.stopped:
                return True
            self.stopping = True
        # Not sealed: here the CLI is not waiting on faultsim, and the fake may be streaming
        # it an answer (a refusal would tell the run apart). The instant is the stop: a
        # call that reaches the world while the state is read tears the copy, and then
        # nothing is kept (the point gets a crash run), the run going on untouched.
        return self._stop(point, _Refusals(), proof)

    def _stop(self, point: KillPoint, refused: "_Refusals",
              proof: Callable[[dict], str | None] | None = None) -> bool:
        """A stop at `point`: SIGSTOP the CLI's process groups, prove each stopped, read the
        sandbox and copy the world (sealed since the point, as a kill seals it), then SIGCONT
        and go on. Why this is the kill's crash state: from the point to the read, the CLI
        and the Python side did what they do before a kill (the same settle, the world
        refusing them as a dead incarnation's); a stopped process runs nothing more, and
        its completed writes are in the kernel as a killed one's are. Where the run cannot
        go on as the clean run (something was refused meanwhile: the CLI got an error a
        clean run never gets; the world changed while copied; a group did not stop), the
        stop becomes that point's kill: the CLI is SIGKILLed and the run ends there (False).
        Where `proof` refuses the state read (a write stop came late), or a write stop's
        copy is torn (it does not seal: `stop_write`), nothing is kept and the run goes on:
        that point gets a crash run of its own. True: the run goes on."""
        # the groups with a process left (a CLI of an earlier query() of this run has ended)
        pids = [p.pid for p in RUNNING.clis if group_alive(p.pid)]
        if not pids:  # no CLI left to stop (nor to kill): nothing read, the point gets a
            with self._lock:  # crash run of its own; a refusal meanwhile ends the run
                self.dying = bool(refused.count)
                self.world.sealed = self.dying
                self.stopping = False
                self._lock.notify_all()
            return not self.dying
        try:
            if stop_groups(pids):
                mark_ = _mark(self.world)
                files = snapshot(self.root)
                world = copy.deepcopy(self.world)
                world.sealed = True
                late = proof(files) if proof is not None else None
                torn = _mark(self.world) != mark_
                if not refused.count and (not torn or proof is not None):
                    if late is None and not torn:
                        self.stopped[point.key] = Stopped(files, world, len(self.seen))
                    return True
            with self._lock:  # that point's kill, as a crash run's
                self.target, self.dying = point, True
                self.world.sealed = True
        finally:
            with self._lock:
                if not self.dying:
                    self.world.sealed = False
                    continue_groups(pids)
                self.stopping = False
                self._lock.notify_all()
        self._die()
        return False

    def kill_now(self) -> None:
        """The kill inside a transcript write (`writes.WriteWatch`): now, while strace holds
        the write; the CLI is not waiting on faultsim, so nothing to wait for."""
        with self._lock:
            if self.dying:
                return
            self.dying = True
            self.world.sealed = True
        self._die()

    def _die(self) -> None:
        self.landed = kill_clis()
        self.files = snapshot(self.root)
        # the kill waits until no process of the group is left (the CLI under strace too,
        # not only strace, its leader): the SDK may have seen the CLI's end and closed the
        # loop by then, and a closed loop has nothing left to cancel
        if self.loop is not None and self.task is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.task.cancel)


@dataclass
class Stopped:
    """What a stop read: the crash state a kill at its point leaves."""

    files: dict[str, bytes]  # the sandbox
    world: World  # the world, sealed
    seen: int  # the points met up to it


class _Refusals:
    """`world.sealed` while a stop reads its state: true (the world refuses a dead
    incarnation's calls, as at a kill), and it counts how often it was asked."""

    def __init__(self) -> None:
        self.count = 0

    def __bool__(self) -> bool:
        self.count += 1
        return True


def _mark(world: World) -> tuple[int, int]:
    """What changes when a call reaches the world (a copy taken across one is torn)."""
    return len(world.ledger.entries), len(world.model.requests)


def _quiesce(root: Path, settle: float, limit: float = 5.0) -> None:
    """Wait `settle` seconds, then until the config dir has not changed for two ticks (a
    busy machine may fire the CLI's ~100 ms flush timer late), at most `limit` seconds."""
    def sizes() -> dict:
        found = {}
        for dirpath, _dirs, names in os.walk(root / "claude"):
            for name in names:
                with contextlib.suppress(OSError):
                    found[os.path.join(dirpath, name)] = os.stat(
                        os.path.join(dirpath, name)).st_size
        return found

    deadline = time.monotonic() + limit
    time.sleep(settle)
    last, still = sizes(), 0
    while still < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = sizes()
        still = still + 1 if now == last else 0
        last = now


class Running:
    """The incarnation running now (one at a time): what the SDK seams report to."""

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.clis: list[Any] = []  # the CLI processes it started (anyio Process)
        self.wrap: Callable[[list[str]], list[str]] | None = None  # its wrap_cli
        self.sessions: list[str] = []  # the session ids given to its new sessions

    def start(self, controller: Controller,
              wrap: Callable[[list[str]], list[str]] | None) -> None:
        self.controller, self.wrap = controller, wrap
        self.clis.clear()
        self.sessions.clear()

    def stop(self) -> None:
        self.controller, self.wrap = None, None


RUNNING = Running()


def _report(category: str, detail: str) -> None:
    if RUNNING.controller is not None:
        RUNNING.controller.event(category, detail)


def on_world(kind: str, **info: Any) -> None:
    if kind == "model.response" and info["record"].ok:
        _report("model-request", f"turn{info['record'].position + 1}")
    elif kind == "model.stream" and info.get("where", "").endswith("tool_use stop"):
        turn = re.search(r"_(\d+)(?:_r\d+)?$", info["message_id"])  # msg_TAG_NN[_rK]
        _report("after-tool-use", f"turn{int(turn.group(1))}" if turn else "turn?")


def mark(name: str, **info: Any) -> None:
    if name == "tool.start":
        _report("before-effect", info.get("tool", "?"))
    elif name == "tool.end":
        _report("after-effect", info.get("tool", "?"))


# -- the SDK seams (claude-agent-sdk 0.2.184; tests/test_claude_agent_sdk.py checks them) ----
class _NewSessionAnyio:
    """`anyio` as the SDK's transport module sees it: the CLI starts in a session (and
    process group) of its own, so a kill takes the CLI and every process it started."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def open_process(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["start_new_session"] = True
        command = _with_session_id(list(command))
        if RUNNING.wrap is not None:  # under strace: to measure the CLI, or to kill it
            command = RUNNING.wrap(command)
        process = await self._real.open_process(command, *args, **kwargs)
        RUNNING.clis.append(process)
        return process


_SESSION_FLAGS = ("--resume", "-r", "--continue", "-c", "--session-id")


def _with_session_id(command: list[str]) -> list[str]:
    """A CLI starting a new session gets a session id of faultsim's, named by the scenario,
    the incarnation and the how-manieth CLI it is: the CLI would draw a random one (uuid4),
    and then no two runs would write the same transcript path (which the write kills trace,
    and which verdicts, tables and printed commands name)."""
    if any(arg.split("=", 1)[0] in _SESSION_FLAGS for arg in command[1:]):
        return command  # the user's own resume, continue or id: theirs
    c = RUNNING.controller
    if c is None:
        return command
    sid = session_id(c.name, c.world.incarnation, len(RUNNING.sessions) + 1)
    RUNNING.sessions.append(sid)
    return [command[0], f"--session-id={sid}", *command[1:]]


@contextlib.contextmanager
def seams() -> Iterator[None]:
    original_anyio = sdk_cli.anyio
    original_handle = sdk_query.Query._handle_sdk_mcp_request

    async def handle(self: Any, server_name: str, message: dict) -> Any:
        tool = message.get("params", {}).get("name", "?") if isinstance(message, dict) \
            else "?"
        calling = isinstance(message, dict) and message.get("method") == "tools/call"
        if calling:
            _report("handler-entry", tool)
        result = await original_handle(self, server_name, message)
        if calling:
            _report("handler-return", tool)
        return result

    async def initialize(self: Any) -> Any:
        # hooks on every tool, the user's own kept: the CLI asks the SDK before and after
        # each tool and waits for the answer, so a built-in tool (Bash, Write, Edit) has
        # kill points where the CLI is blocked on faultsim, as an SDK MCP tool's handler has
        self.hooks = {**self.hooks}
        for event, category in (("PreToolUse", "builtin-start"),
                                ("PostToolUse", "builtin-end")):
            self.hooks[event] = [*self.hooks.get(event, []),
                                 {"matcher": None, "hooks": [_builtin_hook(category)]}]
        return await original_initialize(self)

    original_initialize = sdk_query.Query.initialize
    sdk_cli.anyio = _NewSessionAnyio(original_anyio)
    sdk_query.Query._handle_sdk_mcp_request = handle
    sdk_query.Query.initialize = initialize
    try:
        yield
    finally:
        sdk_cli.anyio = original_anyio
        sdk_query.Query._handle_sdk_mcp_request = original_handle
        sdk_query.Query.initialize = original_initialize


def _builtin_hook(category: str) -> Callable[..., Any]:
    async def hook(data: Any, _tool_use_id: Any, _context: Any) -> dict:
        tool = str((data or {}).get("tool_name", "?"))
        if not tool.startswith("mcp__"):  # an SDK MCP tool has its handler's points
            _report(category, tool)
        return {}
    return hook


def kill_clis(timeout: float = 10.0) -> bool:
    """SIGKILL every CLI process group of this incarnation; True once no process of any is
    left (`faultsim.host.groups`' kill, the command backend's)."""
    pids = [p.pid for p in RUNNING.clis]
    return kill_groups(pids, timeout) and bool(pids)
