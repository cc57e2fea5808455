"""The golden run's flake guard, in both modes: two clean runs must end well and do the same
things before any crash is judged against them."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..agent import FactoryError, Outcome
from ..errors import (AgentFailedCleanly, NoDurableState, NonDeterminismError,
                      SandboxEscape, ScriptMismatch, UncontainedProcess,
                      UnreachedService, UnroutedEffect)
from ..scenario import Scenario
from ..core.trace import Event


def _short(text: str, limit: int = 70) -> str:
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


@dataclass(frozen=True)
class CleanRun:
    """One clean run as a backend reports it to the flake guard."""

    outcome: Outcome | None
    error: str | None
    events: list
    kept: Any  # what the backend keeps of the run for the golden run (world, files)
    details: str = ""  # when the agent raised: its traceback and output
    escapes: list = ()  # writes outside the workdir it tried (refused), with call sites
    world: Any = None  # the world after the run (what it asked the model, the services)
    files: dict | None = None  # the files it left (path -> bytes), to name what differs
    left_behind: tuple = ()  # processes it left running (subprocess mode)
    contract: str | None = None  # its factory broke the contract: agent.FactoryError's line


def golden_checked(scenario: Scenario, clean_run: Callable[[int], CleanRun],
                   sandbox: str = "", name: Callable[[Event, Sequence[Event]], str] | None
                   = None, advice: str | None = None) -> CleanRun:
    """The flake guard of a golden run, in both modes. `clean_run(n)` gives clean run n
    (1, then 2): each must end with an outcome and no error, the two must do the same
    things, and a completed run must give the scenario's expected final answer. Returns
    the first run. `sandbox` is the agent's workdir, named when runs differ below it;
    `name` names an event in the agent's terms, to say where the runs part (`agree`);
    `advice` what to look for when they part (default: an agent faultsim seeds, `ADVICE`;
    a command is told `COMMAND_ADVICE`)."""
    runs = []
    for n in (1, 2):
        run = clean_run(n)
        if run.contract is not None:  # no agent ran: nothing else about the run is its own
            raise FactoryError(run.contract)
        script_fits(scenario, run.world)
        no_connection_refused(scenario, run.world)
        no_process_refused(scenario, run.world, run.left_behind)
        no_sandbox_escape(scenario, run.escapes)
        if run.error is not None or run.outcome is None:
            raise AgentFailedCleanly(scenario, run.error or "no outcome", run.details)
        runs.append(run)
    first, second = runs
    agree(first.events, second.events, name, (first.files, second.files), sandbox, advice)
    keeps_state(scenario, first.events)
    expected = scenario.expected_final_answer.strip()
    got = (first.outcome.final_answer or "").strip()
    if first.outcome.status == "completed" and got != expected:
        raise AgentFailedCleanly(scenario, f"its final answer {_short(got)} is not the "
                                 f"scenario's expected_final_answer {_short(expected)}")
    return first


def script_fits(scenario: Scenario, world: Any) -> None:
    """A request the script could not answer (a tool the request does not offer, an input
    its schema refuses, a turn tool_choice forbids) is the scenario's mistake, whatever the
    agent made of the error: a lenient agent would otherwise pass having exercised
    nothing."""
    for record in getattr(getattr(world, "model", None), "requests", ()):
        if record.error == "faultsim_script_error":
            message = (record.message or "").removeprefix("faultsim: ")
            raise ScriptMismatch(f"{scenario.path}: {message}")


# what saves state: files, databases, and the checkpoints an adapter keeps in the world
WRITES = ("fs.write", "fs.create", "fs.rename", "fs.truncate", "redis.exec", "sqlite.commit",
          "mark.lg.put", "mark.lg.writes")


def keeps_state(scenario: Scenario, events: Sequence[Event]) -> None:
    """A clean run that saves nothing durable, or never writes the checkpoint its scenario
    declares, leaves crash states that test nothing: stop instead of judging blind."""
    if not any(e.kind == "model.response" for e in events):
        raise NoDurableState(
            f"{scenario.path}: the clean run never asked the model: faultsim's fake Claude "
            "answers through env.client (or env.async_client); an agent that builds its own "
            "client must build it from them, or from ANTHROPIC_BASE_URL under "
            "faultsim.model.serve")
    writes = [e for e in events if e.kind in WRITES]
    if not writes:
        raise NoDurableState(
            f"{scenario.path}: the clean run wrote nothing durable (no file, no database): "
            "there is no state for a crash to damage; does the agent checkpoint under "
            "env.workdir?")
    spec = scenario.checkpoint
    files = [g for g in spec.files if spec.format_of(g) != "sqlite"]  # SQLite writes its own
    # a declared database that was committed to is state kept: other files may be optional
    committed = len(files) < len(spec.files) and any(e.kind == "sqlite.commit" for e in writes)
    if spec.declared and files and not committed:
        touched = {e.subject.split(" from ")[0] for e in writes if e.kind.startswith("fs.")}
        if not any(spec.matches(path) for path in touched):
            raise NoDurableState(
                f"{scenario.path}: [checkpoint] files = {list(files)}: the clean run "
                f"never wrote one (it wrote {', '.join(sorted(touched)[:5]) or 'no file'}); "
                "declare the files the agent really keeps its state in")


def no_connection_refused(scenario: Scenario, world: Any) -> None:
    """The network guard's finding on a clean run, before whatever the refusal made the
    agent do: every resumed run would repeat it, so it is told once."""
    refused = getattr(world, "unrouted", [])
    if refused:
        raise UnroutedEffect(
            f"{scenario.path}: the clean run reached for a network address faultsim does "
            f"not serve: {refused[0]}; faultsim refused it (no_unrouted_effect). Route the "
            "call with faultsim.effect(SERVICE) to one of the scenario's services, or allow "
            "the address in [sandbox] allow = [\"HOST:PORT\"]")


def no_process_refused(scenario: Scenario, world: Any, left_behind=()) -> None:
    """The process guard's finding on a clean run, told once before whatever the refusal
    made the agent do (as the network guard's); and a process the clean run left running
    (subprocess mode)."""
    refused = getattr(world, "processes", [])
    if refused:
        raise UncontainedProcess(
            f"{scenario.path}: the clean run started a process faultsim cannot contain "
            f"here: {refused[0]}; faultsim refused it before it ran (no_uncontained_process)"
            f": {getattr(world, 'processes_why', '')}")
    if left_behind:
        raise UncontainedProcess(
            f"{scenario.path}: the clean run left a process running after it ended: "
            f"{left_behind[0]}; faultsim SIGKILLed it (no_process_left_behind). Wait for "
            "the processes the agent starts, or stop them, before run() returns")


def no_sandbox_escape(scenario: Scenario, escapes) -> None:
    """The sandbox's finding on a clean run, in both modes (each refuses the write with a
    PermissionError): told once, before whatever the refusal made the agent do (fail, or
    carry on and repeat it in every resumed run). Resumed runs' escapes are the oracle's
    `no_sandbox_escape`."""
    if escapes:
        raise SandboxEscape(
            f"{scenario.path}: the clean run wrote outside its workdir: {escapes[0]}; "
            "faultsim refused it (no_sandbox_escape). Keep every file the agent writes "
            "under env.workdir (temporary files too: tempfile.mkstemp(dir=env.workdir))")


def routed_only(scenario: Scenario, world: Any, outcome: Outcome | None = None) -> None:
    """Every service of the scenario reached by the clean run, in both modes: one never
    reached means the agent's effects go somewhere faultsim cannot see, and its rules
    would pass without testing them. (A clean run that escalates to a person stops early
    by design: what it did not reach is not held against it.)"""
    if outcome is not None and outcome.status == "escalated":
        return
    reached = {e.service for e in world.ledger.entries}
    for name in world.services:
        if name not in reached:
            raise UnreachedService(
                f"{scenario.path}: [services.{name}]: the clean run never reached it: the "
                f"agent does not route its effects to {name!r} (wrap the tool that acts on "
                f"it with faultsim.effect({name!r}), or call env.services[{name!r}]), or "
                "the scenario lists a service this agent does not use")


def compare_traces(a: Sequence[Event], b: Sequence[Event],
                   files: tuple[dict | None, dict | None] = (None, None),
                   sandbox: str = "", advice: str | None = None) -> None:
    """Two runs must do the same things. The error names the first event they part at,
    the values that differ (from the event itself, or from the files the runs left when
    the event is a write, which shows only a digest) and, for paths under the agent's
    workdir, says so: the usual advice (sets, urandom, threads) would point elsewhere."""
    for x, y in zip(a, b):
        if x.signature() != y.signature():
            raise NonDeterminismError(
                f"two clean runs part at event #{x.index}: the first did {x.describe()!r}, "
                f"the second {y.describe()!r}" + _why(x, y, files, sandbox,
                                                      advice or ADVICE))
    if len(a) != len(b):
        longer = a if len(a) > len(b) else b
        raise NonDeterminismError(
            f"two clean runs part after event #{min(len(a), len(b))}: one goes on with "
            f"{longer[min(len(a), len(b))].describe()!r}, the other stops")


def agree(a: Sequence[Event], b: Sequence[Event],
          name: Callable[[Event, Sequence[Event]], str] | None = None,
          files: tuple[dict | None, dict | None] = (None, None), sandbox: str = "",
          advice: str | None = None) -> None:
    """Two clean runs must do the same things (`compare_traces`); with `name`, the
    one-line error also says where they part in the agent's terms (`where_runs_part`):
    the check of both real-process backends, the command's events and the Claude Agent
    SDK adapter's kill points."""
    try:
        compare_traces(a, b, files, sandbox, advice)
    except NonDeterminismError as exc:
        if name is None:
            raise
        raise NonDeterminismError(f"{exc} ({where_runs_part(a, b, name)})") from None


def where_runs_part(a: Sequence[Event], b: Sequence[Event],
                    name: Callable[[Event, Sequence[Event]], str]) -> str:
    """Where runs `a` and `b` part (one line), each event named by `name(event, the
    events before it)`; or that they do not."""
    for n, (x, y) in enumerate(zip(a, b)):
        if x.signature() != y.signature():
            return (f"after {n} equal events, the first run's next is {name(x, a[:n])}, "
                    f"the second's {name(y, b[:n])}")
    if len(a) != len(b):
        n = min(len(a), len(b))
        longer = a if len(a) > n else b
        return f"after {n} equal events one run goes on with {name(longer[n], longer[:n])}, " \
               "the other stops"
    return "the runs do not part"


ADVICE = (". faultsim needs a deterministic agent (the model, the services, time, uuid4, "
          "random and tempfile names are already made deterministic; look for iteration "
          "over sets, os.urandom, threads)")
# A command runs in a process of its own, where faultsim seeds and freezes nothing: only
# what it serves (the model, the services) is the same in every run.
COMMAND_ADVICE = (". faultsim needs a deterministic agent: it serves the model and the "
                  "services the same way in every run, but inside the command's own process "
                  "it makes nothing deterministic (uuid4, random, tempfile names, the clock "
                  "and process ids are the process's own); derive ids and random choices "
                  "from $FAULTSIM_SEED and $FAULTSIM_INCARNATION, and look for the time of "
                  "day, iteration over sets, os.urandom, threads")
# what separates values in a description or a file: paths stay whole (no "/" here)
_SEPARATORS = re.compile(r"""([\s"'`,:;=(){}\[\]<>|]+)""")


def _why(x: Event, y: Event, files: tuple, sandbox: str, advice: str) -> str:
    if x.text != y.text and x.kind == y.kind:  # a digest stands for them: show both
        return (f". They differ in what they ran: the first {x.text or '(not shown)'!r}, the "
                f"second {y.text or '(not shown)'!r}" + advice)
    first, second, where = _first_difference(x, y, files)
    if first is None:
        return advice
    said = f". They differ in {_short(first, 120)} vs {_short(second, 120)}{where}"
    if sandbox and _under(first, sandbox) and _under(second, sandbox):
        return (f"{said}: both are paths under the agent's workdir {sandbox}, which is the "
                "same in every run and every incarnation, so the part that differs is the "
                "agent's own (a process id, a counter or clock kept outside the workdir?)")
    if sandbox and (_under(first, sandbox) or _under(second, sandbox)):
        return f"{said}: one of them is a path under the agent's workdir {sandbox}" + advice
    if x.kind.startswith("fs.") and first in x.subject and second in y.subject:
        return f"{said}: file names in the agent's workdir" + advice
    return said + advice


def _under(value: str, sandbox: str) -> bool:
    root = sandbox.rstrip("/")
    return value == root or value.startswith(root + "/")


def _first_difference(x: Event, y: Event, files: tuple) -> tuple:
    """The first differing values of two events: of their descriptions, or for a write
    (whose description holds a digest of the content) of the first file the two runs
    left with different contents."""
    if x.kind == y.kind == "fs.write" and x.subject == y.subject and all(
            f is not None for f in files):
        mine, theirs = files
        names = sorted(set(mine) | set(theirs),
                       key=lambda n: (n != x.subject, n))  # the written file first
        for name in names:
            p, q = mine.get(name), theirs.get(name)
            if isinstance(p, bytes) and isinstance(q, bytes) and p != q:
                first, second = _differing_tokens(p.decode("utf-8", "replace"),
                                                  q.decode("utf-8", "replace"))
                if first is not None:
                    return first, second, f" (in {name} as each run left it)"
    body = lambda e: f"{e.kind} {e.subject} {e.detail}"  # noqa: E731
    return (*_differing_tokens(body(x), body(y)), "")


def _differing_tokens(p: str, q: str) -> tuple[str | None, str | None]:
    """The first pair of values that differ, preferring a path, then anything but a
    digest (a digest differs whenever what it digests does: it names nothing)."""
    ta, tb = _SEPARATORS.split(p), _SEPARATORS.split(q)
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    pairs = [("".join(ta[i1:i2]).strip(), "".join(tb[j1:j2]).strip())
             for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    if not pairs:
        return None, None
    for prefer in (lambda v: "/" in v, lambda v: not _DIGEST.fullmatch(v)):
        for first, second in pairs:
            if prefer(first) or prefer(second):
                return first, second
    return pairs[0]


_DIGEST = re.compile(r"[0-9a-f]{8,}")
