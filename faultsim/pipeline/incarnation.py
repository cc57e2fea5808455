"""One incarnation of the agent, in either mode: what it did (its outcome, its trace), the
world's events and the agent's marks that reach the trace, the time limit that stops a
hanging one, and the world's signature (what a resumed run can observe of it)."""
from __future__ import annotations

import gc
import hashlib
import io
import os
import posix
import signal
import sys
import threading
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import freezegun.api as _real_time  # time is frozen while an incarnation runs; these are not

from ..interpose import finality
from ..agent import Outcome, close_leftovers, incarnation_reads, run_agent, run_incarnation
from ..interpose.determinism import draws
from ..scenario import Scenario
from ..core.trace import Event, Tracer, digest
from ..world import World
from ..world.ledger import canonical


class IncarnationTimeout(BaseException):
    """An incarnation ran past its time limit (an agent that hangs)."""

    seconds: float | None = None  # the limit
    stuck: str = ""  # where it was stuck (`stuck_at`)


# The per-incarnation time limit, by default derived from the clean runs (`timeout="auto"`):
# a resumed incarnation may take HANG_FACTOR times the slower clean incarnation, and never
# less than HANG_FLOOR seconds. Why these: a resumed run does at most the clean run's work
# again (plus reading what is on disk), but runs in a forked child or a fresh process,
# beside up to one other crash run per core on a machine CI shares: 10x leaves room for
# that contention and for a slow disk; the floor covers the fixed costs a clean run of a
# few milliseconds does not show (a fork's copied pages, garbage collection, the first
# call of a lazily imported module). A hung resumed run used to cost 30 s per distinct crash
# state; now it costs max(3 s, 10x the clean incarnation). An explicit `timeout` (seconds)
# or None (no limit) is used as given, for the clean runs too.
AUTO = "auto"
HANG_FACTOR = 10.0
HANG_FLOOR = 3.0
CLEAN_LIMIT = 300.0  # the clean runs' own limit under "auto": a clean run that hangs


def clean_limit(asked: Any) -> float | None:
    """The clean runs' time limit, for `asked` (seconds, None, or AUTO)."""
    return CLEAN_LIMIT if asked == AUTO else asked


def resumed_limit(asked: Any, clean_seconds: list[float]) -> float | None:
    """A crash run's time limit: `asked` as given, or under AUTO derived from how long the
    clean incarnations took."""
    if asked != AUTO:
        return asked
    return round(max(HANG_FLOOR, HANG_FACTOR * max(clean_seconds, default=0.0)), 1)


def _not_the_agents() -> tuple[str, ...]:
    # computed at import, on the real disk (in-process, a hang is caught under pyfakefs)
    import sysconfig

    paths = sysconfig.get_paths()
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # faultsim
    found = [paths[n] for n in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(n)]
    return (ours + os.sep,) + tuple(sorted({p + os.sep for f in found
                                            for p in (f, os.path.realpath(f))}))


_NOT_THE_AGENTS = _not_the_agents()
_STDLIB = tuple(p for p in _NOT_THE_AGENTS[1:] if "-packages" not in p)


def stuck_at(frame: Any) -> str:
    """Where a hung agent was stuck, from the frame the time limit interrupted: the agent's
    own frames (below faultsim's call of it, outside the standard library and
    site-packages), innermost first, at most four. The innermost is named without its
    line: a loop interrupted at a random moment may sit on any of its lines, and the
    report must be the same on every run. An async agent waiting in its event loop has
    none of its frames on the stack: its tasks' suspended coroutines are read instead
    (`_suspended`), run()'s own first."""
    ours = _NOT_THE_AGENTS[0]
    shown: list = []
    while frame is not None and len(shown) < 4:
        name = frame.f_code.co_filename
        if frame.f_code is _RUN_AGENT or (name.startswith(ours) and shown):
            break  # faultsim's own call of the agent: what is above is not the agent's
        if _agents(frame.f_code):
            shown.append(frame)
        frame = frame.f_back
    if not shown:
        shown = _suspended()
    if not shown:
        return ""
    return "stuck in " + ", called from ".join(
        _where(f.f_code, f.f_lineno if n > 0 else None) for n, f in enumerate(shown))


_RUN_AGENT = run_agent.__code__
_CLOSING = close_leftovers.__code__


def _agents(code: Any) -> bool:
    return not code.co_filename.startswith(("<", *_NOT_THE_AGENTS))


def _where(code: Any, line: int | None) -> str:
    """`name (path:line)`, the path relative to the directory faultsim runs in."""
    cwd = posix.getcwd().rstrip("/") + "/"  # the real one (see netguard._short)
    path = code.co_filename
    path = path[len(cwd):] if path.startswith(cwd) else path
    return f"{code.co_name} ({path}{f':{line}' if line is not None else ''})"


def _suspended() -> list:
    """The agent's frames where an async agent's tasks wait, innermost first, at most
    four: run()'s task first, then the others by name, the first that has any. Read from
    each task's coroutine down the chain of what it awaits (`cr_await`; an `async for`
    awaits its generator through an `asend` object, whose generator is its referent)."""
    from .. import agent

    aio = sys.modules.get("asyncio")
    if aio is None or not agent._loops:
        return []
    runner = getattr(finality._live, "runner", None)
    try:
        tasks = sorted(aio.all_tasks(agent._loops[-1]),
                       key=lambda t: (t is not runner, t.get_name()))
    except RuntimeError:  # the loop's task set changed while read (another thread)
        return []
    for task in tasks:
        mine = [f for f in reversed(_awaiting(task.get_coro())) if _agents(f.f_code)]
        if mine:
            return mine[:4]
    return []


def _awaiting(coro: Any) -> list:
    """The frames of a suspended coroutine and of what it awaits, outermost first."""
    frames: list = []
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) \
            or getattr(coro, "ag_frame", None)
        if frame is None:
            if type(coro).__name__ in ("async_generator_asend", "async_generator_athrow"):
                coro = next((r for r in gc.get_referents(coro)
                             if type(r).__name__ == "async_generator"), None)
                continue
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) \
            or getattr(coro, "ag_await", None)
    return frames


def not_unwound(kill: BaseException | None, limit: float | None, stuck: str) -> str:
    """The kill was raised and the incarnation had not ended `limit` seconds later: in
    process the kill is an exception, which code on its way (a framework's `except
    BaseException`, a task or thread it ended while run() waits on that task's events)
    can hold up. Named by the outermost frame of the agent's or its framework's that the
    kill went through, and where run() then waited; never the agent's hang: a real kill
    (subprocess mode) stops every thread at once."""
    through = ""
    tb = kill.__traceback__ if kill is not None else None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(("<", _NOT_THE_AGENTS[0], *_STDLIB)):
            through = _where(code, tb.tb_lineno)
            break  # the outermost: the traceback starts where the kill stopped
        tb = tb.tb_next
    waiting = ", waiting in " + stuck.removeprefix("stuck in ") if stuck else ""
    return (f"the kill did not unwind{' through ' + through if through else ''}: run() "
            f"had not ended {limit or 0:g} s after it{waiting}; try --mode subprocess, "
            "where a kill stops every thread at once")


def marks() -> tuple[str, int]:
    """Where the running incarnation stands in what could tell it which incarnation it is:
    its seeded streams (`determinism.draws`) and its reads of `env.incarnation`. Equal at
    both ends of a stretch of its run: that stretch is blind."""
    return draws(), incarnation_reads[0]


@dataclass
class Incarnation:
    outcome: Outcome | None = None
    error: str | None = None
    killed: bool = False
    timed_out: bool = False
    events: list[Event] = field(default_factory=list)
    first_position: int | None = None
    details: str = ""  # when the agent raised: its traceback and what it printed
    went_on: str | None = None  # killed, it caught the kill and went on (finality.py)
    strays: list[str] = field(default_factory=list)  # its threads working after run()
    # `marks()` as it began and as it ended, read inside its seeded streams: a stretch of
    # it is blind where the two are equal at both ends (leads.py)
    began: tuple = ()
    ended: tuple = ()
    unwound: str | None = None  # killed, it had not ended within its limit (`not_unwound`)
    contract: str | None = None  # its factory broke the contract (agent.FactoryError's line)

    @property
    def blind(self) -> bool:
        """It drew no random number and never read env.incarnation: what it did did not
        depend on which incarnation it was (after_convergence.py)."""
        return bool(self.began) and self.began == self.ended


class _Capped(io.StringIO):
    """What an incarnation prints, kept up to a limit (a chatty agent runs thousands of
    times in a sweep)."""

    LIMIT = 20_000

    def write(self, text: str) -> int:
        room = self.LIMIT - self.tell()
        return super().write(text[:room]) if room > 0 else len(text)


@contextmanager
def captured_output() -> Iterator[io.StringIO]:
    """The agent's stdout and stderr during one incarnation, as pytest captures a test's:
    shown with its traceback when it fails, never lost among the sweep's runs."""
    buffer = _Capped()
    with redirect_stdout(buffer), redirect_stderr(buffer):
        yield buffer


def failure_details(exc: BaseException, output: str) -> str:
    """The agent's own traceback and its output. Frames of faultsim and of the file-system
    interposition under the agent (pyfakefs) are left out: they are where faultsim
    watches, not where the agent went wrong."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(ours)
              and f"{os.sep}pyfakefs{os.sep}" not in f.filename]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) \
        + "".join(traceback.format_exception_only(type(exc), exc))
    text = text.rstrip()
    if output.strip():
        text += "\n----- the agent's output -----\n" + output.rstrip()
    return text


def traced_world(tracer: Tracer, scenario: Scenario, world: World, result: Incarnation
                 ) -> tuple[Callable[..., None], Callable[..., None]]:
    """What of an incarnation reaches its trace besides files, in both modes: a listener
    for the world's events (model answers, effects on services) and the agent's `mark`.
    The listener also notes in `result` the first turn of the main task that was asked."""

    def on_world(kind: str, **info: Any) -> None:
        if kind == "model.response":
            rec = info["record"]
            # the main task's first turn asked (a sub-agent starting its own turn 1 while
            # the parent resumes is no restart of the parent)
            if result.first_position is None and rec.position is not None \
                    and rec.script == scenario.script.tag:
                result.first_position = rec.position
            tracer.emit("model.response", f"{rec.script}@{rec.position}",
                        f"{rec.status} {rec.error or ''}".strip())
        elif kind == "model.stream":  # a gap inside a streamed answer: a kill point
            tracer.emit("model.stream", info["message_id"], info["where"])
        elif kind.startswith("effect."):
            e = info["entry"]
            tracer.emit(kind, f"{e.service}.{e.op}",
                        f"{digest(canonical(e.params).encode())}"
                        + (f" key={e.key}" if e.key else ""))

    def mark(name: str, **info: Any) -> None:
        finality.refuse_stray("mark", name)
        if world.sealed:  # a killed incarnation marks nothing more
            finality.went_on(f"it marked {name}")
        else:
            tracer.emit("mark." + name, str(info.get("tool") or ""))

    return on_world, mark


@contextmanager
def time_limit(seconds: float | None, world: World | None = None) -> Iterator[None]:
    """Stop a hanging incarnation (main thread only; elsewhere no limit can be set). While
    it runs, `running_now` can say how far it is (`world`: its model requests)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    started, queued, paused = _real_time.real_monotonic(), _queued(), _paused[0]

    def expire(signum, frame):
        # The limit is on time the incarnation had a CPU or waited for something else,
        # not on time it waited for a CPU: on a loaded machine a run that is only starved
        # is no hang (/proc's run_delay; where it cannot be read, wall time). Nor on time
        # faultsim held it (`held`).
        starved = _queued() - queued if queued is not None else 0.0
        left = seconds - (_real_time.real_monotonic() - started - max(0.0, starved)
                          - (_paused[0] - paused))
        # Nor is it raised inside a finaliser (`_in_finaliser`): an exception cannot
        # leave one, it would be printed and lost with the hang.
        if left > 0.01 or _in_finaliser(frame):
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.05))
            return
        if raised and not _in_run(frame):
            return  # run() has ended: faultsim is handling the first one
        # Raised again every AGAIN s while run() has not ended: an asyncio task swallows
        # what is not an Exception raised in its step (it ends the task only), and a
        # framework's `except BaseException` may too; the run would hang on unlimited.
        signal.setitimer(signal.ITIMER_REAL, AGAIN)
        if not raised:
            raised.append(stuck_at(frame))
        exc = IncarnationTimeout(f"no answer within {seconds:g} s"
                                 + (f"; {raised[0]}" if raised[0] else ""))
        exc.seconds, exc.stuck = seconds, raised[0]
        raise exc

    raised: list = []  # where it was stuck, once raised

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    _running[0] = (threading.get_ident(), world)
    try:
        yield
    finally:
        _running[0] = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# the incarnation under a time limit in this process now: (its thread, its world or None)
_running: list = [None]
AGAIN = 0.1  # s between two raises of one expired limit (`time_limit`)


def _in_run(frame: Any) -> bool:
    """`frame` runs inside the agent's run() (faultsim's `run_agent` is on its stack)."""
    while frame is not None:
        if frame.f_code is _CLOSING:
            return False  # closing what it left: the run is over
        if frame.f_code is _RUN_AGENT:
            return True
        frame = frame.f_back
    return False


def running_now() -> str:
    """How far the incarnation running in this process under a time limit is (a clean
    run, a resumed run of `--workers 0`), for a progress line of another thread: its model
    requests so far and where it is, the agent's own frames or faultsim's work; "" when
    none runs here (forked children's runs are in other processes, never named here)."""
    now = _running[0]
    if now is None:
        return ""
    ident, world = now
    parts = []
    model = getattr(world, "model", None)
    if model is not None:
        turns = sum(len(s.turns) for s in model.scripts.values())
        parts.append(f"{len(model.requests)} model requests made ({turns} turns scripted)")
    frame = sys._current_frames().get(ident)
    if not _holding[0] and _in_the_agent(frame):
        parts.append("the agent " + stuck_at(frame).replace("stuck in ", "in ", 1))
    else:
        parts.append("in faultsim's own work (not counted against the agent's time limit)")
    del frame
    return ", ".join(parts)


def _in_the_agent(frame: Any) -> bool:
    """Whether the thread of `frame` runs the agent's own code now: a frame of it below
    faultsim's call of the agent (`run_incarnation`); not faultsim's work around it."""
    seen = False
    while frame is not None:
        code = frame.f_code
        if code is run_incarnation.__code__:
            return seen
        seen = seen or not code.co_filename.startswith(("<", *_NOT_THE_AGENTS))
        frame = frame.f_back
    return False


def held_seconds() -> float:
    """Seconds incarnations of this process have been held by faultsim so far (`held`)."""
    return _paused[0]


def clean_hang(error: str, ours: float) -> str:
    """A clean run past its limit, said as whose time it was. The limit is on the agent's
    own time: faultsim's work inside the run (fingerprinting its state at each model
    request, counting crash states) is `held`, and said apart here, so that a slow faultsim
    is never reported as the agent's hang."""
    return (f"the clean run hung: {error} (of the agent's own time: faultsim's own work "
            f"during the run, {ours:.1f} s, was not counted; --timeout S sets the limit)")


def starved(pid: int) -> float:
    """Seconds process `pid` (a forked child: one thread) has waited for a CPU; 0.0 where
    that cannot be read."""
    return _queued(str(pid)) or 0.0


_paused = [0.0]  # seconds incarnations of this process were held by faultsim (`held`)
_holding = [0]  # 1 while faultsim holds the running incarnation (`held`)


@contextmanager
def held() -> Iterator[None]:
    """faultsim holds the running incarnation (a resumed run waiting for an earlier run's
    remainder, faultsim.inprocess.board; faultsim's own work inside a run: fingerprinting
    the clean run's states, counting crash states): the time does not count against its
    limit."""
    if _holding[0]:  # held already: the outer hold counts this time
        yield
        return
    was = signal.setitimer(signal.ITIMER_REAL, 0) \
        if threading.current_thread() is threading.main_thread() else (0.0, 0.0)
    started = _real_time.real_monotonic()
    _holding[0] += 1
    try:
        yield
    finally:
        _holding[0] -= 1
        _paused[0] += _real_time.real_monotonic() - started
        if was[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, was[0])


def _queued(task: str = "thread-self") -> float | None:
    """Seconds this thread (or process `task`'s main thread) has waited on a run queue for
    a CPU (Linux's schedstat run_delay), or None where that cannot be read. Read through
    `posix`: pyfakefs patches `open` and `os` while an incarnation runs."""
    try:
        fd = posix.open(f"/proc/{task}/schedstat", posix.O_RDONLY)
        try:
            fields = posix.read(fd, 256).split()
        finally:
            posix.close(fd)
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _in_finaliser(frame: Any) -> bool:
    """Whether an exception raised now would be swallowed as unraisable: inside a
    `__del__`, a weakref callback, or anything the garbage collector runs."""
    if _collecting[0]:
        return True
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename.endswith(("/weakref.py",
                                                                   "/_weakrefset.py")):
            return True
        frame = frame.f_back
    return False


_collecting = [False]  # the garbage collector is running (gc.callbacks)


def _note_collection(phase: str, info: dict) -> None:
    _collecting[0] = phase == "start"


gc.callbacks.append(_note_collection)


def world_signature(world: World) -> str:
    """What of the world a resumed run can observe, plus what the oracle counts."""
    parts = [str(len(world.ledger.entries)), str(len(world.model.requests)),
             world.clock.now().isoformat(), canonical(sorted(world.model._answered.items())),
             canonical(sorted(world.model._faulted.items())), *stores_state(world)]
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


def stores_state(world: World) -> list[str]:
    """The state of each service and of each adapter's durable store, one text each: what
    an agent can read back of them (its own records, its keys' first answers)."""
    parts = []
    for name, service in sorted(world.services.items()):
        state = {k: v for k, v in vars(service).items() if not k.startswith("_world")}
        parts.append(name + repr(sorted((k, repr(v)) for k, v in state.items())))
    for name, value in sorted(world.durable.items()):
        sign = getattr(value, "faultsim_signature", None)
        parts.append(name + (sign() if callable(sign) else repr(value)))
    return parts
