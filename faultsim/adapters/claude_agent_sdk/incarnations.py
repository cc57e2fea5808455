"""One incarnation: the user's coroutine run once on the sandbox as it stands, against the
loopback fake, to its end or to the kill at its target."""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ...agent import AgentEnv, Outcome, outcome_of, run_incarnation
from ...errors import UsageError
from ...host.groups import dead
from ...model import serve
from ...scenario import Scenario
from ...core.trace import Killed, WorldSealed
from ...world import World
from .writes import WriteWatch, session_id, tracer, transcript_path
from .control import (RUNNING, WRITE_KILL, Controller, KillPoint, kill_clis, mark,
                      on_world, seams)
from .sandbox import DIRS
from .sdk import SECRETS, cli_environment

# (task, workdir) -> final answer; with the scenario's follow-ups, (task, workdir, follow_ups)
AgentRun = Callable[..., Awaitable[Any]]


@dataclass
class Incarnation:
    outcome: Outcome | None
    error: str | None
    timed_out: bool
    seen: list[KillPoint]
    files: dict[str, bytes] | None  # the sandbox at the kill (None: no kill)
    landed: bool
    seconds: float
    writes: int | None = None  # transcript writes strace saw enter (when they were traced)
    stopped: dict = field(default_factory=dict)  # key -> control.Stopped (a run with stops)
    killed_at: tuple | None = None  # the key of the point it was killed at (`files`)


def arguments(run: AgentRun, scenario: Scenario, workdir: Path) -> tuple:
    """What the agent's coroutine is called with: (task, workdir), and the scenario's
    follow-ups (the user's messages after the task, in order) when it takes a third
    positional parameter. A scenario with follow-ups and a coroutine that cannot take them
    is refused in one line: the run would end after the first answer and be judged
    against a conversation it never had."""
    follow_ups = tuple(scenario.script.follow_ups)
    try:
        params = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # no signature to read: called as documented
        params = []
    takes = any(p.kind is p.VAR_POSITIONAL for p in params) or len(
        [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3
    if takes:
        return scenario.task, workdir, follow_ups
    if follow_ups:
        name = getattr(run, "__qualname__", repr(run))
        raise UsageError(f"{scenario.path}: its script has {len(follow_ups)} follow-up(s) "
                         f"(user turns after the task), and the agent {name} takes only "
                         "(task, workdir): give it a third parameter, follow_ups, and send "
                         "each once into the same session")
    return scenario.task, workdir


class _Run:
    def __init__(self, run: AgentRun, args: tuple, controller: Controller) -> None:
        self.fn, self.args, self.controller = run, args, controller

    async def run(self) -> Any:
        loop = self.controller.loop = asyncio.get_running_loop()
        self.controller.task = asyncio.current_task()
        loop.set_exception_handler(_quiet_kills)
        try:
            return await self.fn(*self.args)
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
    for process in list(RUNNING.clis):  # a killed CLI's pipes, closed while the loop runs
        if process.returncode is None and not dead(process.pid):
            continue  # alive: the SDK's own to close
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.aclose(), 5)


def incarnation(run: AgentRun, scenario: Scenario, world: World, root: Path, *,
                target: KillPoint | None = None, timeout: float = 60.0,
                settle: float = 0.3,
                wrap_cli: Callable[[list[str]], list[str]] | None = None,
                writes: bool = False, stops: list[KillPoint] | None = None) -> Incarnation:
    """Start or resume the agent once on the sandbox at `root` (as it stands), to its end
    or to the kill at `target`. `wrap_cli(command)` may prefix the CLI's command line (a
    tracer such as strace, for measuring it). `writes` (implied by a `transcript-write`
    target) runs the CLI under strace, its transcript writes held and counted
    (`writes.py`). `stops`: points where the run is stopped, its crash state read and
    the run let go on (`Controller._stop`; `Incarnation.stopped`)."""
    args = arguments(run, scenario, root / "work")
    controller = Controller(world, root, target, settle, scenario.id, stops)
    world.sealed = False
    world.begin_incarnation()
    watch: WriteWatch | None = None
    transcript: Path | None = None
    write_n = target.ordinal if target is not None and target.category == WRITE_KILL \
        else None  # kill inside the Nth transcript write
    # stops inside transcript writes: at the entry of each, while strace holds it
    write_stops = tuple(kp.ordinal for kp in stops or () if kp.category == WRITE_KILL)
    if writes or write_n is not None or write_stops:
        transcript = transcript_path(
            root, session_id(scenario.id, world.incarnation, 1))
        log = root.parent / f"strace-{world.incarnation}.log"  # outside the crash state
        log.unlink(missing_ok=True)
        wrap_cli = tracer(transcript, log)
        rel = transcript.relative_to(root).as_posix()

        def stop_write(m: int) -> bool:
            return controller.stop_write(
                m, lambda files: watch.proof(len(files.get(rel) or b""), m))

        watch = WriteWatch(log, write_n, controller.kill_now, write_stops, stop_write)
    for d in DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    started = time.monotonic()
    unsubscribe = world.subscribe(on_world)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    RUNNING.start(controller, wrap_cli)
    try:
        with serve(world.model) as endpoint, seams():
            for name in SECRETS:
                os.environ.pop(name, None)
            os.environ.update(cli_environment(endpoint.base_url, endpoint.api_key, root))
            os.chdir(root / "work")  # a CLI started without options.cwd runs here too
            env = AgentEnv(workdir=root / "work", client=world.model.client(),
                           services=world.services, clock=world.clock, task=scenario.task,
                           task_id=scenario.id, model=scenario.model,
                           follow_ups=scenario.script.follow_ups,
                           incarnation=world.incarnation, mark=mark, world=world)

            def go() -> None:
                try:
                    # the CLI is a process of ours: started in a session of its own,
                    # its group SIGKILLed at each kill (never refused)
                    result["value"] = run_incarnation(
                        lambda e: _Run(run, args, controller), env,
                        contained=True)
                except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
                    result["error"] = exc

            thread = threading.Thread(target=go, name="faultsim-claude-agent", daemon=True)
            with watch if watch is not None else contextlib.nullcontext():
                thread.start()
                thread.join(timeout)
                timed_out = thread.is_alive()
                if timed_out:  # a hung agent: its CLI dies, its loop is cancelled
                    kill_clis()
                    if controller.loop is not None and controller.task is not None:
                        controller.loop.call_soon_threadsafe(controller.task.cancel)
                    thread.join(10)
    finally:
        kill_clis()  # never leave a CLI behind
        RUNNING.stop()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        unsubscribe()
    error = None
    outcome = None
    landed = controller.landed
    if controller.files is not None:
        # killed: what the Python side raised afterwards (the dead CLI's pipe, the
        # cancellation) is the kill's doing, not the agent's
        if watch is not None and transcript is not None and watch.n is not None:
            rel = transcript.relative_to(root).as_posix()
            why = watch.proof(len(controller.files.get(rel, b"")))
            if why is not None:
                landed, error = False, f"the kill inside transcript write " \
                                       f"{watch.n} did not land: {why}"
    elif timed_out:
        error = f"no end within {timeout:g} s"
    elif "error" in result:
        error = _one_line(result["error"])
    else:
        try:
            outcome = outcome_of(result.get("value"))
        except TypeError as exc:
            error = str(exc)
    return Incarnation(outcome, error, timed_out, controller.seen, controller.files,
                       landed, time.monotonic() - started,
                       watch.entered if watch is not None else None, controller.stopped,
                       controller.target.key if controller.files is not None
                       and controller.target is not None else None)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"
