"""One incarnation of the agent, in either mode: what it did (its outcome, its trace), the
world's events and the agent's marks that reach the trace, the time limit that stops a
hanging one, and the world's signature (what a resumed run can observe of it)."""
from __future__ import annotations

import hashlib
import io
import os
import signal
import threading
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .. import finality
from ..agent import Outcome
from ..scenario import Scenario
from ..trace import Event, Tracer, digest
from ..world import World
from ..world.ledger import canonical


class IncarnationTimeout(BaseException):
    """An incarnation ran past its time limit (an agent that hangs)."""


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
def time_limit(seconds: float | None) -> Iterator[None]:
    """Stop a hanging incarnation (main thread only; elsewhere no limit can be set)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise IncarnationTimeout(f"no answer within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def world_signature(world: World) -> str:
    """What of the world a resumed run can observe, plus what the oracle counts."""
    parts = [str(len(world.ledger.entries)), str(len(world.model.requests)),
             world.clock.now().isoformat(), canonical(sorted(world.model._answered.items())),
             canonical(sorted(world.model._faulted.items()))]
    for name, service in sorted(world.services.items()):
        state = {k: v for k, v in vars(service).items() if not k.startswith("_world")}
        parts.append(name + repr(sorted((k, repr(v)) for k, v in state.items())))
    for name, value in sorted(world.durable.items()):
        sign = getattr(value, "faultsim_signature", None)
        parts.append(name + (sign() if callable(sign) else repr(value)))
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()
