"""One incarnation of an agent command: the sandbox restored, the fake Claude and the
scenario's services served on loopback, the command run under strace (in the jail), to its
end or to the kill at its target; what it did, what it left on disk, and the kill's proof."""
from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..agent import Outcome
from ..model.endpoint import ModelEndpoint
from ..pipeline.incarnation import Incarnation as _Record, traced_world
from ..scenario import Scenario
from ..core.trace import Event, Tracer
from ..core.tree import Files, read_tree, under, write_tree
from ..world import World
from .launch import Jailed, environment, kill_group, left_behind, outcome, start
from .control import Controller, Door
from .disk import DiskModel
from .syscalls import Hold, command_line, parse

Services = Callable[..., Any]  # serve_services(world, scenario, hook=...) -> a wire


@dataclass
class Run:
    outcome: Outcome | None
    error: str | None
    code: int | None  # the exit status (negative: the signal), None when killed
    stdout: str
    stderr: str
    events: list[Event]
    work: Files  # the workdir at the end, or at the kill
    rest: Files  # HOME and TMPDIR (sandbox paths "home/...", "tmp/...")
    model: DiskModel
    seconds: float
    killed: bool = False
    landed: bool = False
    proof: str | None = None  # why the kill did not land where it should, if it did not
    where: str = ""  # the boundary it was killed at, in words
    timed_out: bool = False
    left_behind: list[str] = field(default_factory=list)
    first_position: int | None = None
    boundaries: list[str] = field(default_factory=list)
    contained: str = ""  # why the jail could not contain it ("" when it did)
    calls: dict[int, tuple[str, int]] = field(default_factory=dict)  # event -> its call
    world: Any = None
    named: set[str] = field(default_factory=set)  # the paths its changing calls named


def addresses(urls: list[str]) -> list[tuple[str, int]]:
    found = []
    for url in urls:
        for host, port in re.findall(r"//(127\.0\.0\.1|localhost):(\d+)", url):
            found.append(("127.0.0.1", int(port)))
    return sorted(set(found))


def incarnation(argv: list[str], scenario: Scenario, world: World, base: Path, *,
                work: Files, rest: Files, target: int | None = None,
                hold: Hold | None = None, timeout: float | None = 300.0, seed: str = "0",
                services: Services | None = None, traced: bool = True,
                paths: tuple[str, ...] = ()) -> Run:
    """Run the command once on the sandbox under `base` restored to `work` (the workdir)
    and `rest` (HOME, TMPDIR), against `world`, to its end or to the kill after event
    `target` of its trace. `hold` holds the target's call at its entry (strace)."""
    root = base / "sandbox"
    logs = base / "trace"
    logs.mkdir(parents=True, exist_ok=True)
    write_tree(root / "work", work)
    for d in ("home", "tmp"):
        write_tree(root / d, under(rest, d))
    world.sealed = False
    number = world.begin_incarnation()
    tracer = Tracer()
    record = _Record()
    on_world, _mark = traced_world(tracer, scenario, world, record)
    model = DiskModel.of(str(root / "work"), work)
    process: list[subprocess.Popen] = []

    def kill() -> bool:
        world.sealed = True  # nothing of the dead incarnation lands
        return kill_group(process[0]) if process else False

    controller = Controller(tracer, model, target, kill)

    def listener(kind: str, **info: Any) -> None:
        if kind in ("model.response", "model.stream") or kind.startswith("effect."):
            controller.drain()
            on_world(kind, **info)
            controller.world_event(kind)

    unsubscribe = world.subscribe(listener)
    log = logs / f"strace-{number}.log"
    log.unlink(missing_ok=True)
    out, err = logs / f"stdout-{number}", logs / f"stderr-{number}"
    endpoint = ModelEndpoint(Door(world.model, controller)).start()
    wire = None
    jailed = None
    stop = threading.Event()
    follower = None
    started = time.monotonic()
    timed_out = False
    behind: list[str] = []
    try:
        env = {"ANTHROPIC_BASE_URL": endpoint.base_url, "ANTHROPIC_API_KEY": endpoint.api_key,
               "FAULTSIM_TASK": scenario.task}
        if scenario.services and services is not None:
            wire = services(world, scenario, hook=controller.service)
            env.update(wire.env)
        jailed = Jailed.build(base, addresses(list(env.values())))
        command = command_line(str(log), argv, hold, paths) if traced else argv
        if traced:
            log.touch()
            controller.log = log
        process.append(start(command, root / "work", environment(
            root, env, seed=seed, incarnation=number), jailed, out, err))
        if traced:
            follower = controller.follow(stop)
        timed_out, behind = _wait(process[0], controller, timeout, traced)
    finally:
        stop.set()
        if follower is not None:
            follower.join(5)
        if process:
            ended = process[0].poll() is not None and not controller.dying
            behind += left_behind(process[0].pid) if ended else []
            if not controller.dying:
                kill_group(process[0])
        if not controller.dying and traced:
            controller.drain()  # the calls of its last moments
        unsubscribe()
        endpoint.close()
        if wire is not None:
            wire.close()
        if jailed is not None:
            jailed.close()
    seconds = time.monotonic() - started
    code = process[0].returncode if process else None
    if controller.main_exit is not None and not controller.dying:
        code = controller.main_exit  # strace's own status is lost when leftovers were killed
    stdout = out.read_text(errors="replace") if out.exists() else ""
    stderr = err.read_text(errors="replace") if err.exists() else ""
    disk = read_tree(root / "work")
    rest_after = {f"{d}/{p}": v for d in ("home", "tmp")
                  for p, v in read_tree(root / d).items()}
    run = Run(None, None, None if controller.dying else code, stdout, stderr,
              list(tracer.events), disk, rest_after, model, seconds,
              killed=controller.dying, landed=controller.landed, where=controller.where,
              timed_out=timed_out, left_behind=behind, first_position=record.first_position,
              boundaries=list(controller.entries), calls=dict(controller.calls),
              named=set(controller.named),
              world=world,
              contained=jailed.jail.why if jailed is not None else "")
    if controller.dying:
        run.proof = _proof(controller, log, model, disk) if traced else None
        if run.proof is not None:
            run.landed = False
    elif timed_out:
        run.error = f"no end within {timeout:g} s"
    else:
        run.outcome, run.error = outcome(code if code is not None else -9, stdout,
                                                stderr)
    return run


def _wait(process: subprocess.Popen, controller: Controller, timeout: float | None,
          traced: bool) -> tuple[bool, list[str]]:
    """Until the command ends, is killed, or runs out of time: (timed out, what it left
    running). Under strace the command's end is its own exit_group: strace, its parent,
    waits for every process the command started, so one still running half a second after
    the command exited was left behind (named, then SIGKILLed with the group)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    exited_at = None
    while True:
        try:
            process.wait(0.02)
            return False, []
        except subprocess.TimeoutExpired:
            pass
        if controller.dying:  # the kill's own thread reaps it: wait for that
            process.wait(30)
            return False, []
        if traced and controller.main_exit is not None:
            exited_at = exited_at or time.monotonic()
            if time.monotonic() - exited_at > 0.5:
                behind = [p for p in left_behind(process.pid)
                          if not p.startswith(f"pid {process.pid} ")]
                kill_group(process)
                return False, behind
        if deadline is not None and time.monotonic() > deadline:
            return True, []


def _proof(controller: Controller, log: Path, model: DiskModel, disk: Files) -> str | None:
    """Why the kill did not land as it should (one line), or None: a call held at its
    entry never returned, and the disk holds exactly what the traced calls before it
    wrote."""
    if controller.held is not None:
        calls = parse(log.read_text(errors="replace"))
        held = next((c for c in calls if c.n == controller.held.n), None)
        if held is None or held.returned:
            return (f"call {controller.held.n} ({controller.held.name}) returned before the "
                    "kill")
    return model.mismatch(disk)
