"""`faultsim scenario record`: run an agent once against a real Messages endpoint, through
the recording proxy, and write what happened as a scenario.

The run is one incarnation, as a clean run under faultsim is: a fresh workdir (a temporary
folder, removed after), process time frozen at the scenario's start, the network guard on
(the proxy and the upstream are the addresses it lets through), `faultsim.effect` calls
routed to the world's services. The services are made on first use, under the name the
effect gives: of the kind `--service NAME=KIND` or a services file says, else inferred from
the effect (`key=` given: keyed; none: blind), so the recording never reaches the real
world and its scenario lists exactly the services the agent reached.

What is written: the task (as given to the agent, which the fake Claude finds inside the
first user message, however the agent wraps it), one turn per model answer of the main
conversation in the order asked (its text, thinking and tool calls), the final answer the
agent returned, the services reached. Requests whose first user message does not carry the
task are sub-agents: one `[subagents.subN]` per distinct first message.
"""
from __future__ import annotations

import importlib
import os
import socket
import sys
import tempfile
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..agent import AgentEnv, FactoryError, outcome_of, run_incarnation
from ..effects import Effect
from ..errors import AgentFinding, UsageError
from ..scenario import SECTIONS, ScenarioError, parse_scenario
from ..world import RECEIVER_KINDS, LedgerEntry, Receiver, World, WorldClock
from .messages import MessagesError, answer_turn
from .proxy import Exchange, RecordingProxy, upstream_url

DEFAULT_UPSTREAM = "https://api.anthropic.com"  # the SDK's own default


class RecordingFailed(AgentFinding):
    """The agent's one run did not end with a completed answer (or reached past faultsim)."""


@dataclass
class Recording:
    """A recorded run and the scenario document it gives."""

    document: dict
    exchanges: list[Exchange]
    effects: list[LedgerEntry]  # every call the agent's effects made, in order
    services: dict[str, str] = field(default_factory=dict)  # name -> how its kind was chosen
    final_answer: str = ""

    @property
    def tool_calls(self) -> list[tuple[str, dict]]:
        return [(c["name"], c["input"]) for t in self.document["turns"]
                for c in t.get("tool_calls", ())]


def parse_service_flags(flags: list[str]) -> dict[str, dict]:
    """`NAME=KIND` flags as [services] tables."""
    out: dict[str, dict] = {}
    for flag in flags:
        name, sep, kind = flag.partition("=")
        if not sep or not name.strip() or kind.strip() not in RECEIVER_KINDS:
            raise UsageError(f"--service {flag!r}: expected NAME=KIND, KIND one of "
                             + ", ".join(RECEIVER_KINDS))
        out[name.strip()] = {"kind": kind.strip()}
    return out


def services_file(path: str | Path) -> dict[str, dict]:
    """The [services] tables of a TOML file (a scenario file works: only they are read),
    checked by the scenario loader."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: (file): no such services file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: (syntax): expected valid TOML, got {exc}") from None
    services = data.get("services", {})
    # the loader checks them as part of a one-turn scenario around them
    parse_scenario({"task": "-", "expected_final_answer": "-", "turns": [{"final": "-"}],
                    "services": services}, path)
    if not services:
        raise ScenarioError(path, "services", "at least one [services.NAME] table")
    return services


class OnDemandServices(Mapping):
    """The world's services, each made the first time the agent reaches for it."""

    def __init__(self, world: World, given: dict[str, dict]) -> None:
        self.world, self.given = world, given
        self.why: dict[str, str] = {}

    def __getitem__(self, name: str) -> Receiver:
        if name not in self.world.services:
            spec = self.given.get(name)
            if spec is not None:
                kind, why = spec["kind"], "given"
            else:
                kind, why = _inferred(name)
            options: dict[str, Any] = {}
            if spec and kind in ("queryable", "readonly"):
                options["records"] = spec.get("records", {})
            self.world.add_service(name, kind, **options)
            self.why[name] = why
        return self.world.services[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.world.services)

    def __len__(self) -> int:
        return len(self.world.services)


def _inferred(name: str) -> tuple[str, str]:
    """The kind for a service nobody named: from the `faultsim.effect` being called (the
    Effect in a caller's frame: `effects.act` and the lookups hold it), else keyed."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        for value in frame.f_locals.values():
            if isinstance(value, Effect) and value.service == name:
                if value.key is None:
                    return "blind", f"inferred: effect {value.tool} has no key"
                return "keyed", f"inferred: effect {value.tool} has a key"
        frame = frame.f_back
    return "keyed", "assumed: reached without faultsim.effect"


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def record(make_agent: Callable[[AgentEnv], Any], task: str, *, upstream: str,
           scenario_id: str = "recorded", model: str | None = None,
           services: dict[str, dict] | None = None) -> Recording:
    """Run `make_agent` once on `task` through a recording proxy to `upstream`."""
    if not task.strip():
        raise UsageError("--task: expected the task in words, got an empty text")
    model = model or SECTIONS["scenario"]["model"].default
    start = SECTIONS["scenario"]["start_time"].default
    base, host, port = upstream_url(upstream)
    world = World(clock=WorldClock(start), allow=upstream_addresses(host, port))
    given = dict(services or {})
    # the SDK builds its pydantic models at import: under the frozen clock they would meet
    # freezegun's FakeDatetime (as ScenarioRun does, first)
    anthropic = importlib.import_module("anthropic")
    with RecordingProxy(base) as proxy, tempfile.TemporaryDirectory(
            prefix="faultsim-record-") as workdir, world.clock.frozen(), \
            _environ({"ANTHROPIC_BASE_URL": proxy.base_url}):
        world.begin_incarnation()
        on_demand = OnDemandServices(world, given)
        try:
            client = anthropic.Anthropic(base_url=proxy.base_url)
        except anthropic.AnthropicError as exc:  # no key: the SDK's own words, and ours
            raise UsageError(f"the agent's client cannot be made: {exc} (the key goes "
                             f"through the recording proxy to {base})") from None
        env = AgentEnv(workdir=Path(workdir), client=client, services=on_demand, clock=world.clock, task=task,
                       task_id=scenario_id, model=model, incarnation=1, world=world,
                       async_factory=lambda: anthropic.AsyncAnthropic(base_url=proxy.base_url))
        try:
            outcome = outcome_of(run_incarnation(make_agent, env))
        except FactoryError:
            raise  # the factory breaks the contract: a usage error naming it, as it is
        except Exception as exc:
            raise RecordingFailed(f"the agent failed while recording: {type(exc).__name__}: "
                                  f"{exc}") from exc
        finally:
            env.client.close()  # its pooled connection to the proxy
    if world.unrouted:
        raise RecordingFailed("the agent reached for addresses faultsim does not serve: "
                              + "; ".join(world.unrouted) + " (route them with "
                              "faultsim.effect: a recording must not act on the real world)")
    if outcome.status != "completed" or not (outcome.final_answer or "").strip():
        raise RecordingFailed(f"the agent's run ended {outcome.status} without a final "
                              f"answer ({outcome.escalation or 'no reason given'}): a "
                              "scenario records a run that completes")
    turns, subagents = _scripts(proxy.exchanges, task)
    doc: dict[str, Any] = {"task": task, "expected_final_answer": outcome.final_answer}
    if model != SECTIONS["scenario"]["model"].default:
        doc["model"] = model
    reached = {name: _service_table(world.services[name], given.get(name))
               for name in world.services}
    if reached:
        doc["services"] = reached
    doc["turns"] = turns
    if subagents:
        doc["subagents"] = subagents
    return Recording(doc, proxy.exchanges, list(world.ledger.entries),
                     dict(on_demand.why), outcome.final_answer)


def upstream_addresses(host: str, port: int) -> tuple[tuple[str, int], ...]:
    """What the network guard lets the proxy reach: the upstream by name, and the addresses
    the name has now (the guard checks a connection by its address, and the proxy's
    connections are made while the agent runs, under the guard)."""
    found = {(host, port)}
    try:
        for *_, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            found.add((address[0], port))
    except OSError:
        pass  # unresolvable: the proxy's request fails, and the recording says so
    return tuple(sorted(found))


def _service_table(receiver: Receiver, given: dict | None) -> dict:
    table = {"kind": receiver.kind}
    for key in ("records", "key_retention_hours"):
        if given and key in given:
            table[key] = given[key]
    return table


def _first_text(exchange: Exchange) -> str:
    messages = (exchange.request or {}).get("messages") or [{}]
    content = messages[0].get("content") if isinstance(messages[0], dict) else None
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or () if isinstance(b, dict)
                   and b.get("type") == "text" and isinstance(b.get("text"), str))


def _scripts(exchanges: list[Exchange], task: str) -> tuple[list[dict], dict[str, dict]]:
    """The main script's turns and the sub-agents', from the answered Messages calls."""
    calls = [e for e in exchanges if e.is_message]
    if not calls:
        failed = [e for e in exchanges if not e.is_message]
        why = "; ".join(f"request {e.index} {e.method} {e.path}: status {e.status}"
                        + (f" ({e.error})" if e.error else "") for e in failed[:3])
        raise RecordingFailed("the agent never got a model answer through the recording "
                              "proxy" + (f": {why}" if why else " (does it build its client "
                                         "with a base_url of its own?)"))
    conversations: dict[str, list[Exchange]] = {}
    for e in calls:
        text = _first_text(e)
        conversations.setdefault(task if task in text else text, []).append(e)
    if task not in conversations:
        raise RecordingFailed(f"no request's first user message carries the task {task!r}: "
                              "the fake Claude would find no script for it on replay")
    main = _turns(conversations.pop(task))
    subagents = {f"sub{n}": {"task": text, "turns": _turns(es)}
                 for n, (text, es) in enumerate(conversations.items(), start=1)}
    return main, subagents


def _turns(exchanges: list[Exchange]) -> list[dict]:
    turns = []
    for n, e in enumerate(exchanges):
        place = f"request {e.index}'s answer"
        stop = e.response.get("stop_reason")
        if stop not in ("tool_use", "end_turn", "stop_sequence"):
            raise RecordingFailed(f"{place}: stop_reason {stop!r}: a scenario turn is a "
                                  "whole answer (record again with a larger max_tokens, or "
                                  "without the cause)")
        blocks = [(f"{place}: content[{k}]", b) for k, b in
                  enumerate(e.response.get("content") or ())]
        try:
            turn, _ = answer_turn(blocks, "recording", place)
        except MessagesError as exc:
            raise RecordingFailed(f"{exc.where}: {exc.detail}") from None
        if "final" in turn and n != len(exchanges) - 1:
            raise RecordingFailed(f"{place}: an answer without tool calls before the last "
                                  "request of its conversation: a scenario has one final "
                                  "answer per task")
        turns.append(turn)
    if "final" not in turns[-1]:
        raise RecordingFailed(f"request {exchanges[-1].index}'s answer: the conversation "
                              "ends with tool calls, not a final answer")
    return turns
