"""The golden run's flake guard, in both modes: two clean runs must end well and do the same
things before any crash is judged against them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..agent import Outcome
from ..errors import (AgentFailedCleanly, NoDurableState, NonDeterminismError,
                      ScriptMismatch, UnreachedService, UnroutedEffect)
from ..scenario import Scenario
from ..trace import Event


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
    world: Any = None  # the world after the run (what it asked the model, the services)


def golden_checked(scenario: Scenario, clean_run: Callable[[int], CleanRun]) -> CleanRun:
    """The flake guard of a golden run, in both modes. `clean_run(n)` gives clean run n
    (1, then 2): each must end with an outcome and no error, the two must do the same
    things, and a completed run must give the scenario's expected final answer. Returns
    the first run."""
    runs = []
    for n in (1, 2):
        run = clean_run(n)
        script_fits(scenario, run.world)
        no_connection_refused(scenario, run.world)
        if run.error is not None or run.outcome is None:
            raise AgentFailedCleanly(scenario, run.error or "no outcome", run.details)
        runs.append(run)
    first, second = runs
    compare_traces(first.events, second.events)
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
    if spec.declared and files:
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


def routed_only(scenario: Scenario, world: Any) -> None:
    """Every service of the scenario reached by the clean run, in both modes: one never
    reached means the agent's effects go somewhere faultsim cannot see, and its rules
    would pass without testing them."""
    reached = {e.service for e in world.ledger.entries}
    for name in world.services:
        if name not in reached:
            raise UnreachedService(
                f"{scenario.path}: [services.{name}]: the clean run never reached it: the "
                f"agent does not route its effects to {name!r} (wrap the tool that acts on "
                f"it with faultsim.effect({name!r}), or call env.services[{name!r}]), or "
                "the scenario lists a service this agent does not use")


def compare_traces(a: Sequence[Event], b: Sequence[Event]) -> None:
    for x, y in zip(a, b):
        if x.signature() != y.signature():
            raise NonDeterminismError(
                f"two clean runs part at event #{x.index}: the first did {x.describe()!r}, "
                f"the second {y.describe()!r}. faultsim needs a deterministic agent (the "
                "model, the services, time, uuid4, random and tempfile names are already "
                "made deterministic; look for iteration over sets, os.urandom, threads)")
    if len(a) != len(b):
        longer = a if len(a) > len(b) else b
        raise NonDeterminismError(
            f"two clean runs part after event #{min(len(a), len(b))}: one goes on with "
            f"{longer[min(len(a), len(b))].describe()!r}, the other stops")
