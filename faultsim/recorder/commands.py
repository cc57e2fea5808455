"""The two `faultsim scenario` verbs that make scenarios, `from-messages` and `record`,
behind the CLI's parser (faultsim.cli): what they read, write and print."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..settings.config import load
from ..errors import UsageError
from ..settings.loading import LANGGRAPH, load_factory
from ..reports.outfile import check_writable
from ..scenario import show_value
from .messages import load_messages, scenario_from_messages
from .record import DEFAULT_UPSTREAM, parse_service_flags, services_file
from .record import record as record_run
from .toml_text import write

EXIT_OK = 0  # as faultsim.cli's


def _scenario_out(doc: dict, out: str | None, comments: list[str], source: str) -> None:
    """A made scenario: checked, then written to `out`, or printed when there is none."""
    text = write(doc, out, comments=comments, source=source)
    if out is None:
        sys.stdout.write(text)


def _services_given(ns: argparse.Namespace) -> dict:
    given = services_file(ns.services_from) if ns.services_from else {}
    return {**given, **parse_service_flags(ns.service or [])}


def from_messages(ns: argparse.Namespace) -> int:
    if ns.out:
        check_writable(ns.out, "--out")
    messages, rest = load_messages(ns.file)
    model = ns.model or (rest.get("model") if isinstance(rest.get("model"), str) else None)
    doc = scenario_from_messages(messages, ns.file, services=_services_given(ns) or None,
                                 model=model)
    _scenario_out(doc, ns.out, [f"Made by `faultsim scenario from-messages` from "
                                f"{Path(ns.file).name}."], ns.file)
    calls = sum(len(t.get("tool_calls", ())) for t in doc["turns"])
    print(f"faultsim: {'wrote ' + ns.out if ns.out else 'printed the scenario'} from "
          f"{ns.file}: task {show_value(doc['task'])}, {len(doc['turns'])} turns ({calls} "
          f"tool call{'s' if calls != 1 else ''}), final answer "
          f"{show_value(doc['expected_final_answer'])}; services: "
          + (", ".join(f"{n} ({s['kind']})" for n, s in doc.get("services", {}).items())
             or "none (add [services.NAME] for the effects your agent's tools reach, or "
                "--service NAME=KIND)"), file=sys.stderr)
    return EXIT_OK


def record(ns: argparse.Namespace) -> int:
    agent = ns.agent or load().values.get("agent")
    if not agent:
        raise UsageError("no agent to record: give --agent MODULE[:ATTR] (or FILE.py[:ATTR]), "
                         "set FAULTSIM_AGENT, or agent = \"...\" under [tool.faultsim]")
    if agent.startswith(LANGGRAPH):
        raise UsageError(f"--agent {agent}: a LangGraph scenario's graph cannot be recorded "
                         "yet; record an agent factory")
    if ns.out:
        check_writable(ns.out, "--out")  # before the agent runs against a paid endpoint
    upstream = ns.upstream or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_UPSTREAM
    given = _services_given(ns)
    rec = record_run(load_factory(agent), ns.task, upstream=upstream,
                     scenario_id=Path(ns.out).stem if ns.out else "recorded",
                     model=ns.model, services=given)
    asked = len(rec.exchanges)
    streamed = sum(1 for e in rec.exchanges if e.stream)
    effects = {}
    for entry in rec.effects:
        effects.setdefault(entry.service, []).append(entry.op)
    _scenario_out(rec.document, ns.out, [
        f"Recorded by `faultsim scenario record` from agent {agent}: {asked} model "
        f"request{'s' if asked != 1 else ''}, effects: "
        + (", ".join(f"{n} {'/'.join(dict.fromkeys(ops))} x{len(ops)}"
                     for n, ops in effects.items()) or "none") + "."], "the recording")
    services = rec.document.get("services", {})
    print(f"faultsim: {'wrote ' + ns.out if ns.out else 'printed the scenario'}: task "
          f"{show_value(ns.task)}, {len(rec.document['turns'])} turns "
          f"({len(rec.tool_calls)} tool calls), {asked} model requests ({streamed} "
          f"streamed), final answer {show_value(rec.final_answer)}", file=sys.stderr)
    for name, table in services.items():
        ops = effects.get(name, [])
        print(f"  service {name}: {table['kind']} ({rec.services.get(name, 'given')}), "
              f"{len(ops)} call{'s' if len(ops) != 1 else ''}", file=sys.stderr)
    for name in given:
        if name not in services:  # a scenario service no run reaches is refused by faultsim
            print(f"  service {name}: given, never reached: left out", file=sys.stderr)
    return EXIT_OK
