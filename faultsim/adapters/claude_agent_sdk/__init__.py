"""Crash-test a Claude Agent SDK agent, unchanged: `pip install 'faultsim[claude-agent-sdk]'`.

You give faultsim the coroutine your code already has that runs the agent: it calls
`query(...)` or uses `ClaudeSDKClient` with your `ClaudeAgentOptions`, starts the task or
resumes it the way your service does after a restart (`resume=session_id` read from a file
of yours, or `continue_conversation=True`), and returns the final answer::

    async def run_billing(task: str, workdir: Path) -> str:
        ...ClaudeAgentOptions(cwd=workdir, mcp_servers={"billing": billing}, resume=...)

    result = explore(run_billing, scenario)

Tools that act on the world are in-process SDK MCP tools (`@tool` + `create_sdk_mcp_server`)
whose effects go through `faultsim.effect`, as for any faultsim agent.

Why not the engine's in-process or subprocess mode: the agent is two processes, the Python
one (your code and its MCP tools) and the bundled Claude Code CLI it spawns, which keeps the
session transcript (`CLAUDE_CONFIG_DIR/projects/<cwd>/<session>.jsonl`). Neither forking
at a kill point (the CLI child is not forked with its parent) nor pyfakefs (the CLI writes
the real disk) applies. So this is its own crash-state source, on real processes: each crash
run replays the clean run from the start and, at the chosen kill point, SIGKILLs the CLI's
process group (the CLI runs in a session of its own) and stops the Python side with
`faultsim.trace.Killed`; the sandbox is read at that instant. The world (services, ledger,
the fake Claude) lives in this process, as in the other modes.

Each incarnation runs with (set in `os.environ`, which the SDK passes on to the CLI; your
`options.env` still wins): `ANTHROPIC_BASE_URL` at faultsim's loopback fake Messages endpoint
(SSE), a fake `ANTHROPIC_API_KEY`, no other credential variable, the CLI's non-essential
traffic, telemetry, auto-updater and error reporting off (no connection but loopback), tool
search off (`ENABLE_TOOL_SEARCH=false`: MCP tools are offered to the model directly, as the
scripted turns call them), and `CLAUDE_CONFIG_DIR`, `HOME`, `TMPDIR` and the working
directory inside the sandbox. The sandbox (`work/`, the agent's cwd; `claude/`, the config
dir with the transcript; `home/`; `tmp/`) is the crash state; it is restored at the same
absolute path for every incarnation, because the CLI names a project by its cwd.

Kill points (categories), each in the order of the clean run:
  model-request      the fake Claude answered request N, before the CLI read the answer
  after-tool-use     inside the stream, right after a `tool_use` block closed (the CLI
                     starts the tool then, before the message ends)
  handler-entry      the SDK called the Python tool handler (MCP `tools/call`)
  before-effect      the handler is about to act (`faultsim.effect`)
  after-effect       the effect happened, its result not yet returned
  handler-return     the handler returned, the CLI has not the result yet
A kill first waits `settle` seconds and then until the config dir is still for 0.2 s (the
CLI is blocked on faultsim then, on the model or on the tool), so the CLI's transcript
batch, flushed on a ~100 ms timer, is on disk: the state "as written" is the most the CLI
can have written by that point, whatever the machine's load.
Each kill is proven: the CLI's process group is gone (its pid reaped or a zombie) and the
Python side was stopped (`Exploration.kills_landed`).

Crash states per kill point (`prefixes=`):
  written    the sandbox and config dir as they stood at the kill
  "messages" (default) also every whole-entry prefix of the session transcript ending at a
             conversation entry (a `user` or `assistant` line) but the last one written
             (that one holds the conversation as written), and no transcript at all:
             the CLI appends entries in batches and never fsyncs, so a process crash earlier
             in a batch window leaves any of these; entries between two conversation entries
             (attachments, request metadata) change what resume rebuilds only with the entry
             after them, which a shorter prefix already covers
  "entries"  every whole-entry prefix (slower; a superset)
  power=True adds the power-loss states: the transcript's unsynced appends lost (covered by
             the prefixes above, down to no file: its directory entry was never fsynced
             either) and each message-boundary prefix followed by the next entry torn in half
             (the CLI skips a torn last line: the torn states should judge as their prefix).
The rest of the sandbox is taken as written at the kill in every state.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from ...agent import AgentEnv, Outcome, outcome_of, run_incarnation
from ...checkpoints import CheckpointSpec
from ...crashmodel import CrashState
from ...model import serve
from ...oracle import CrashRun, Golden, Violation, judge
from ...scenario import Scenario
from ...trace import Killed, WorldSealed
from ...world import World

try:
    import claude_agent_sdk
    from claude_agent_sdk._internal import query as _sdk_query
    from claude_agent_sdk._internal.transport import subprocess_cli as _sdk_cli
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.claude_agent_sdk needs the claude-agent-sdk extra: "
                      f"pip install 'faultsim[claude-agent-sdk]' ({exc})") from None

__all__ = ["CATEGORIES", "CLI_VERSION", "PREFIXES", "SDK_VERSION", "Exploration", "KillPoint",
           "Survey", "Verdict", "classify", "cli_environment", "cli_unavailable",
           "crash_states", "explore", "golden_run", "incarnation", "restore", "resume",
           "snapshot", "survey", "table"]

SDK_VERSION = "0.2.184"  # the release this adapter is written against (pyproject pins it)
CLI_VERSION = "2.1.327"  # the Claude Code CLI that release bundles
CATEGORIES = ("model-request", "after-tool-use", "handler-entry", "before-effect",
              "after-effect", "handler-return")
PREFIXES = ("written", "messages", "entries")
TRANSCRIPTS = "claude/projects/*/*.jsonl"  # the session transcripts, under the sandbox
# The transcript is a checkpoint for the state guards; "bytes": its line count says nothing
# (the prompt arrives with attachments and metadata lines), the tool-use ids it holds do.
CHECKPOINT = CheckpointSpec(files=(TRANSCRIPTS,), format="bytes", declared=True)

# Credentials the CLI would use instead of the fake key: never passed on.
_SECRETS = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BEDROCK_BASE_URL",
            "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
            "CLAUDECODE")

AgentRun = Callable[[str, Path], Awaitable[Any]]  # (task, workdir) -> final answer


def cli_environment(base_url: str, api_key: str, root: Path) -> dict[str, str]:
    """The variables one incarnation's CLI runs with (see the module docstring)."""
    return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "ENABLE_TOOL_SEARCH": "false",
            "CLAUDE_CONFIG_DIR": str(root / "claude"), "HOME": str(root / "home"),
            "TMPDIR": str(root / "tmp")}


def cli_unavailable() -> str | None:
    """Why the bundled Claude Code CLI cannot run here (one line), or None when it can."""
    import subprocess

    cli = _sdk_cli.SubprocessCLITransport._find_bundled_cli(None)  # type: ignore[arg-type]
    if cli is None:
        return "the claude-agent-sdk wheel bundles no Claude Code CLI for this platform"
    try:
        done = subprocess.run([cli, "--version"], capture_output=True, timeout=60,
                              env={"PATH": os.defpath, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the bundled Claude Code CLI cannot run on this platform: {exc}"
    if done.returncode != 0:
        return ("the bundled Claude Code CLI cannot run on this platform (exit "
                f"{done.returncode})")
    return None


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


class _Controller:
    """Counts kill-point events as the run meets them (from the endpoint's threads and the
    agent's loop) and kills at the target: waits for the CLI's batch to flush, SIGKILLs its
    process groups, reads the sandbox, seals the world, raises `Killed`."""

    def __init__(self, world: World, root: Path, target: KillPoint | None,
                 settle: float) -> None:
        self.world, self.root, self.target, self.settle = world, root, target, settle
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
            if category == "handler-entry":
                # The CLI starts a tool as soon as its block closes, and the endpoint's thread
                # counts that block just after sending it: wait for the count, so a kill
                # "after-tool-use" always lands before the tool runs (else the order of two
                # threads would decide whether the effect happened)
                entered = sum(1 for kp in self.seen if kp.category == "handler-entry")
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
            if self.target is None or point.key != self.target.key:
                return
            self.dying = True
            self.world.sealed = True  # no effect or model call of the dead incarnation lands
        _quiesce(self.root, self.settle)  # the CLI waits on faultsim; its timer flushes
        self.landed = _kill_clis()
        self.files = snapshot(self.root)
        if self.loop is not None and self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        raise Killed(self.target.id)


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


_controller: list[_Controller] = []  # the incarnation running now (one at a time)
_clis: list[Any] = []  # the CLI processes started in this incarnation (anyio Process)
_wrap: list[Callable[[list[str]], list[str]] | None] = []  # the incarnation's wrap_cli


def _event(category: str, detail: str) -> None:
    if _controller:
        _controller[-1].event(category, detail)


def _on_world(kind: str, **info: Any) -> None:
    if kind == "model.response" and info["record"].ok:
        _event("model-request", f"turn{info['record'].position + 1}")
    elif kind == "model.stream" and info.get("where", "").endswith("tool_use stop"):
        turn = re.search(r"_(\d+)(?:_r\d+)?$", info["message_id"])  # msg_TAG_NN[_rK]
        _event("after-tool-use", f"turn{int(turn.group(1))}" if turn else "turn?")


def _mark(name: str, **info: Any) -> None:
    if name == "tool.start":
        _event("before-effect", info.get("tool", "?"))
    elif name == "tool.end":
        _event("after-effect", info.get("tool", "?"))


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
        if _wrap and _wrap[-1] is not None:  # e.g. under strace, to measure the CLI
            command = _wrap[-1](list(command))
        process = await self._real.open_process(command, *args, **kwargs)
        _clis.append(process)
        return process


@contextlib.contextmanager
def _seams() -> Iterator[None]:
    original_anyio = _sdk_cli.anyio
    original_handle = _sdk_query.Query._handle_sdk_mcp_request

    async def handle(self: Any, server_name: str, message: dict) -> Any:
        tool = message.get("params", {}).get("name", "?") if isinstance(message, dict) \
            else "?"
        calling = isinstance(message, dict) and message.get("method") == "tools/call"
        if calling:
            _event("handler-entry", tool)
        result = await original_handle(self, server_name, message)
        if calling:
            _event("handler-return", tool)
        return result

    _sdk_cli.anyio = _NewSessionAnyio(original_anyio)
    _sdk_query.Query._handle_sdk_mcp_request = handle
    try:
        yield
    finally:
        _sdk_cli.anyio = original_anyio
        _sdk_query.Query._handle_sdk_mcp_request = original_handle


def _gone(pid: int) -> bool:
    """Reaped, or a zombie: dead either way."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _kill_clis(timeout: float = 10.0) -> bool:
    """SIGKILL every CLI process group of this incarnation; True once each is dead."""
    pids = [p.pid for p in _clis]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the CLI leads its own group
    deadline = time.monotonic() + timeout
    while not all(_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return bool(pids)


# -- the sandbox ---------------------------------------------------------------------------
_DIRS = ("work", "claude", "home", "tmp")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under the sandbox, by path relative to it."""
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def restore(root: Path, files: dict[str, bytes | None]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for d in _DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        if data is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


# -- one incarnation -----------------------------------------------------------------------
@dataclass
class Incarnation:
    outcome: Outcome | None
    error: str | None
    timed_out: bool
    seen: list[KillPoint]
    files: dict[str, bytes] | None  # the sandbox at the kill (None: no kill)
    landed: bool
    seconds: float


class _Run:
    def __init__(self, run: AgentRun, task: str, workdir: Path,
                 controller: _Controller) -> None:
        self.fn, self.task, self.workdir, self.controller = run, task, workdir, controller

    async def run(self) -> Any:
        loop = self.controller.loop = asyncio.get_running_loop()
        self.controller.task = asyncio.current_task()
        loop.set_exception_handler(_quiet_kills)
        try:
            return await self.fn(self.task, self.workdir)
        finally:
            await _settle_tasks()


def _quiet_kills(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """A task the kill stopped (the SDK's tool call, its reader) is no error to log."""
    if not isinstance(context.get("exception"), (Killed, WorldSealed)):
        loop.default_exception_handler(context)


async def _settle_tasks() -> None:
    """End the SDK's background tasks while the loop still runs: left pending, they are
    destroyed with the loop and fail on being collected, outside any run."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=5)
    for task in others:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: nothing to report at collection
    for process in list(_clis):  # a killed CLI's pipes, closed while the loop runs
        if process.returncode is None and not _gone(process.pid):
            continue  # alive: the SDK's own to close
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.aclose(), 5)


def incarnation(run: AgentRun, scenario: Scenario, world: World, root: Path, *,
                target: KillPoint | None = None, timeout: float = 60.0,
                settle: float = 0.3,
                wrap_cli: Callable[[list[str]], list[str]] | None = None) -> Incarnation:
    """Start or resume the agent once on the sandbox at `root` (as it stands), to its end
    or to the kill at `target`. `wrap_cli(command)` may prefix the CLI's command line (a
    tracer such as strace, for measuring it)."""
    controller = _Controller(world, root, target, settle)
    world.sealed = False
    world.begin_incarnation()
    for d in _DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    started = time.monotonic()
    unsubscribe = world.subscribe(_on_world)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    _controller.append(controller)
    _wrap.append(wrap_cli)
    _clis.clear()
    try:
        with serve(world.model) as endpoint, _seams():
            for name in _SECRETS:
                os.environ.pop(name, None)
            os.environ.update(cli_environment(endpoint.base_url, endpoint.api_key, root))
            os.chdir(root / "work")  # a CLI started without options.cwd runs here too
            env = AgentEnv(workdir=root / "work", client=world.model.client(),
                           services=world.services, clock=world.clock, task=scenario.task,
                           task_id=scenario.id, model=scenario.model,
                           incarnation=world.incarnation, mark=_mark, world=world)

            def go() -> None:
                try:
                    result["value"] = run_incarnation(
                        lambda e: _Run(run, scenario.task, root / "work", controller), env)
                except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
                    result["error"] = exc

            thread = threading.Thread(target=go, name="faultsim-claude-agent", daemon=True)
            thread.start()
            thread.join(timeout)
            timed_out = thread.is_alive()
            if timed_out:  # a hung agent: its CLI dies, its loop is cancelled
                _kill_clis()
                if controller.loop is not None and controller.task is not None:
                    controller.loop.call_soon_threadsafe(controller.task.cancel)
                thread.join(10)
    finally:
        _kill_clis()  # never leave a CLI behind
        _controller.remove(controller)
        _wrap.pop()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        unsubscribe()
    error = None
    outcome = None
    if timed_out:
        error = f"no end within {timeout:g} s"
    elif "error" in result:
        exc = result["error"]
        if not isinstance(exc, (Killed, WorldSealed, asyncio.CancelledError)) or \
                controller.files is None:
            error = _one_line(exc)
    elif controller.files is None:
        try:
            outcome = outcome_of(result.get("value"))
        except TypeError as exc:
            error = str(exc)
    return Incarnation(outcome, error, timed_out, controller.seen, controller.files,
                       controller.landed, time.monotonic() - started)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


# -- crash states --------------------------------------------------------------------------
def _is_transcript(path: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(path, TRANSCRIPTS)


def _entry_kind(line: bytes) -> str:
    try:
        return str(json.loads(line).get("type"))
    except (ValueError, AttributeError):
        return "?"


def crash_states(files: dict[str, bytes], prefixes: str = "messages",
                 power: bool = False) -> list[tuple[str, dict[str, bytes | None]]]:
    """The states a kill with `files` on disk may leave (see the module docstring), each
    named in words; the first is the state as written."""
    states: list[tuple[str, dict[str, bytes | None]]] = [("as written", dict(files))]
    if prefixes == "written":
        return states
    seen = {_key(files)}
    for path, data in sorted(files.items()):
        if not _is_transcript(path):
            continue
        lines = data.split(b"\n")[:-1]  # whole entries only
        talk = [k for k in range(1, len(lines) + 1)
                if _entry_kind(lines[k - 1]) in ("user", "assistant")]
        # a cut after the last conversation entry holds the conversation as written: only
        # request metadata, whose number and order vary from run to run, would differ
        cuts = list(range(1, len(lines))) if prefixes == "entries" else talk[:-1]
        for k in [0, *cuts]:
            state = dict(files)
            if k == 0:
                del state[path]  # the first batch never written: no file at all
                name = f"{path.rsplit('/', 1)[-1]} not yet written"
            else:
                state[path] = b"\n".join(lines[:k]) + b"\n"
                name = f"transcript cut after entry {k}/{len(lines)} ({_entry_kind(lines[k - 1])})"
            if _key(state) not in seen:
                seen.add(_key(state))
                states.append((name, state))
            if power and 0 < k < len(lines):
                torn = dict(state)
                torn[path] = state[path] + lines[k][:len(lines[k]) // 2]
                states.append((f"power loss: transcript cut after entry {k}/{len(lines)}, "
                               f"entry {k + 1} torn in half", torn))
    return states


def _key(files: dict[str, bytes | None]) -> tuple:
    return tuple(sorted((p, d) for p, d in files.items()))


# -- exploring -----------------------------------------------------------------------------
@dataclass
class Verdict:
    kill_point: KillPoint
    state: str  # which crash state, in words
    violations: list[Violation]
    resumed_at: int | None  # the first turn the resume asked for (0: the first)
    error: str | None
    orphaned: bool  # the transcript held a tool_use without its tool_result
    seconds: float
    effects_before: int = 0  # effects applied before the kill

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Exploration:
    scenario: Scenario
    golden: Golden
    kill_points: list[KillPoint]
    verdicts: list[Verdict] = field(default_factory=list)
    kills_landed: int = 0
    incarnations: int = 0
    seconds: float = 0.0

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.violations]


def _new_world(scenario: Scenario) -> World:
    return scenario.build_world()


def golden_run(run: AgentRun, scenario: Scenario, root: Path, *, timeout: float = 60.0,
               world: World | None = None,
               wrap_cli: Callable[[list[str]], list[str]] | None = None
               ) -> tuple[Golden, list[KillPoint], Incarnation]:
    """The clean run (in `world`, a fresh one by default): what the oracle judges against,
    and the kill points it met."""
    world = world if world is not None else _new_world(scenario)
    restore(root, {})
    inc = incarnation(run, scenario, world, root, timeout=timeout, wrap_cli=wrap_cli)
    if inc.outcome is None:
        raise RuntimeError(f"{scenario.id}: the clean run did not complete: {inc.error}")
    final = _work_files(snapshot(root))
    golden = Golden.of(inc.outcome, world, final, [], CHECKPOINT)
    return golden, _in_order(inc.seen), inc


def _in_order(seen: list[KillPoint]) -> list[KillPoint]:
    """The clean run's points, numbered in one order whatever the threads did: by model
    turn (each request starts one), then by category (a stream's tool_use block closes
    before its handler runs, though the two threads may report them the other way)."""
    step, steps = 0, []
    for kp in seen:
        step += kp.category == "model-request"
        steps.append(step)
    ranked = sorted(range(len(seen)), key=lambda n: (steps[n], CATEGORIES.index(
        seen[n].category), n))
    return [KillPoint(i, seen[n].category, seen[n].detail, seen[n].ordinal)
            for i, n in enumerate(ranked, start=1)]


def _work_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """The agent's working directory's files, as the oracle reads a workdir."""
    return {p[len("work/"):]: d for p, d in files.items() if p.startswith("work/")}


def _orphaned(files: dict[str, bytes | None]) -> bool:
    uses, results = set(), set()
    for path, data in files.items():
        if data is None or not _is_transcript(path):
            continue
        for line in data.split(b"\n")[:-1]:
            try:
                content = (json.loads(line).get("message") or {}).get("content")
            except (ValueError, AttributeError):
                continue
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    uses.add(block.get("id"))
                elif isinstance(block, dict) and block.get("type") == "tool_result":
                    results.add(block.get("tool_use_id"))
    return bool(uses - results)


@dataclass
class Survey:
    """What a sweep will cost, from one clean run (`faultsim list`)."""

    kill_points: list[KillPoint]
    crash_states: int  # estimated, prefixes="messages"
    seconds_per_incarnation: float  # the clean run's, measured here

    @property
    def seconds(self) -> float:
        """One crash run per kill point, one resume per crash state, the clean run."""
        return (1 + len(self.kill_points) + self.crash_states) * self.seconds_per_incarnation


def survey(run: AgentRun, scenario: Scenario, *, timeout: float = 60.0,
           root: Path | None = None) -> Survey:
    """Run the agent once, clean, and estimate the sweep: at each kill point, the state as
    written, no transcript, and a cut after each conversation entry written by then (the
    entries of the turns answered before it, and the point's own turn's answer once it
    streamed in)."""
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix=f"faultsim-{scenario.id}-"))) / "sandbox"
        _golden, points, _cold = golden_run(run, scenario, root, timeout=timeout)
        # twice: the first start of the CLI pays for loading its 370 MB binary, and two clean
        # runs must meet the same kill points (else no crash run could find its own)
        _golden, again, inc = golden_run(run, scenario, root, timeout=timeout)
        if [kp.key for kp in again] != [kp.key for kp in points]:
            raise RuntimeError(f"{scenario.id}: two clean runs met different kill points "
                               f"({len(points)} and {len(again)}): the run is not "
                               "deterministic")
        files = snapshot(root)
    answers: dict[int, int] = {}  # turn -> its assistant entries
    results: dict[int, int] = {}  # turn -> the tool results answering it
    for path, data in files.items():
        if not _is_transcript(path):
            continue
        for line in data.split(b"\n")[:-1]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = entry.get("message") or {}
            if entry.get("type") == "assistant":
                turn = re.search(r"_(\d+)(?:_r\d+)?$", str(message.get("id", "")))
                if turn:
                    answers[int(turn.group(1))] = answers.get(int(turn.group(1)), 0) + 1
            elif entry.get("type") == "user" and isinstance(message.get("content"), list):
                for block in message["content"]:
                    turn = re.search(r"toolu_\w+?_(\d+)_\d+", str(block.get("tool_use_id")))
                    if block.get("type") == "tool_result" and turn:
                        results[int(turn.group(1))] = results.get(int(turn.group(1)), 0) + 1
    states, step = 0, 0
    for kp in points:
        step += kp.category == "model-request"
        written = 1 + sum(answers.get(t, 0) + results.get(t, 0) for t in range(1, step))
        if kp.category != "model-request":
            written += answers.get(step, 0)
        states += 1 + written  # as written, no file, a cut per entry but the last
    return Survey(points, states, inc.seconds)


def explore(run: AgentRun, scenario: Scenario, *, prefixes: str = "messages",
            power: bool = False, only: Callable[[KillPoint], bool] | None = None,
            timeout: float = 60.0, settle: float = 0.3, root: Path | None = None,
            progress: Callable[[str], None] | None = None) -> Exploration:
    """Kill the agent at each kill point of its clean run (or those `only` keeps), resume it
    from every crash state the kill may leave, and judge each with faultsim's oracle."""
    if prefixes not in PREFIXES:
        raise ValueError(f"prefixes {prefixes!r}: expected one of {', '.join(PREFIXES)}")
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix=f"faultsim-{scenario.id}-"))) / "sandbox"
        started = time.monotonic()
        golden, points, _ = golden_run(run, scenario, root, timeout=timeout)
        result = Exploration(scenario, golden, points, incarnations=1)
        for kp in points:
            if only is not None and not only(kp):
                continue
            world = _new_world(scenario)
            restore(root, {})
            crash = incarnation(run, scenario, world, root, target=kp, timeout=timeout,
                                settle=settle)
            result.incarnations += 1
            if crash.files is None:
                raise RuntimeError(f"{kp.id}: the crash run never reached its kill point "
                                   f"(it met {len(crash.seen)} of {len(points)}; "
                                   f"{crash.error or 'it completed'}): the run is not "
                                   "deterministic")
            if not crash.landed:
                raise RuntimeError(f"{kp.id}: the CLI's process group did not die by SIGKILL")
            result.kills_landed += 1
            for name, files in crash_states(crash.files, prefixes, power):
                result.verdicts.append(resume(run, scenario, golden, world, root, kp,
                                               name, files, timeout))
                result.incarnations += 1
                if progress is not None:
                    v = result.verdicts[-1]
                    progress(f"{kp.id} [{name}]: " + (", ".join(x.invariant for x in
                                                                v.violations) or "ok"))
        result.seconds = time.monotonic() - started
        return result


def resume(run: AgentRun, scenario: Scenario, golden: Golden, killed: World, root: Path,
            kp: KillPoint, name: str, files: dict[str, bytes | None],
            timeout: float = 60.0) -> Verdict:
    """Resume the agent once from `files`, with a copy of the world as the kill left it,
    and judge the run."""
    world = copy.deepcopy(killed)
    restore(root, files)
    inc = incarnation(run, scenario, world, root, timeout=timeout)
    asked = [q.position for q in world.model.requests
             if q.incarnation == world.incarnation and q.ok]
    # the guards read the transcript as the CLI does: a torn last line is skipped, so an
    # answer only in it is not held (format "bytes" would count it)
    held = {p: d[:d.rfind(b"\n") + 1] if d is not None and _is_transcript(p) else d
            for p, d in files.items()}
    crash_run = CrashRun(kill_points=[kp], state=CrashState.of("process", name, held),
                         world=world, outcome=inc.outcome, error=inc.error,
                         timed_out=inc.timed_out, final=_work_files(snapshot(root)),
                         resume_positions=asked[:1])
    return Verdict(kp, name, judge(golden, crash_run), asked[0] if asked else None,
                   inc.error, _orphaned(files), inc.seconds,
                   sum(len(killed.ledger.applied(n)) for n in killed.services))


# -- the findings table --------------------------------------------------------------------
COLUMNS = ("crash states", "resumed correctly", "steps lost", "effects lost",
           "effects duplicated", "restarted from scratch", "unresumable", "other failures",
           "invalid transcripts", "orphaned tool calls")


def classify(verdict: Verdict) -> list[str]:
    """The columns one crash state counts in (besides "crash states"). "orphaned tool calls"
    describes the state (a tool_use with no result on disk), the others what its resume did."""
    names = {v.invariant for v in verdict.violations}
    found = []
    if "one_step_repeated_per_crash" in names:
        found.append("steps lost")
    effects = [v for v in verdict.violations if v.invariant == "effects_exactly_once"]
    if any(v.fact("missing") for v in effects):
        found.append("effects lost")
    if any(v.fact("extra") for v in effects):
        found.append("effects duplicated")
    if verdict.resumed_at == 0 and verdict.effects_before:
        found.append("restarted from scratch")
    if verdict.error and "No conversation found" in verdict.error:
        found.append("unresumable")
    elif "completes_or_escalates" in names:
        found.append("other failures")
    if "api_valid" in names:
        found.append("invalid transcripts")
    if verdict.orphaned:
        found.append("orphaned tool calls")
    if not verdict.violations:
        found.append("resumed correctly")
    return found


def table(verdicts: list[Verdict], *, by: Callable[[Verdict], str],
          head: str = "kill-point category") -> str:
    """A Markdown table, one row per `by(verdict)` in first-met order, and a total row."""
    rows: dict[str, dict[str, int]] = {}
    for v in [*verdicts]:
        for key in (by(v), "all"):
            counts = rows.setdefault(key, {c: 0 for c in COLUMNS})
            counts["crash states"] += 1
            for column in classify(v):
                counts[column] += 1
    rows["all"] = rows.pop("all", {c: 0 for c in COLUMNS})
    lines = ["| " + " | ".join([head, *COLUMNS]) + " |", "|" + "---|" * (len(COLUMNS) + 1)]
    for key, counts in rows.items():
        lines.append("| " + " | ".join([key, *(str(counts[c]) if counts[c] else "·"
                                              for c in COLUMNS)]) + " |")
    return "\n".join(lines)
