"""`faultsim run`: crash an agent at every kill point of scenario files, resume it, judge it
(LangGraph graphs per durability mode; a Claude Agent SDK agent on its own processes)."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError
from .args import agents_for, check_plan, durability_modes, explore_options, scenario_paths
from .exits import EXIT_OK, EXIT_VIOLATION
from .output import read_report, refusals_reported, write_reports


def cmd_run(ns: argparse.Namespace) -> int:
    import json
    import time

    from ..console import Progress, print_run
    from ..engine import run as explore_one
    from ..loading import CLAUDE_AGENT_SDK, load_factory, names_graph
    from ..report import Report
    from ..scenario import load_scenario

    only = None
    if ns.kill_point:
        wanted = set(ns.kill_point)
        only = lambda point: point.id in wanted  # noqa: E731
    options = explore_options(ns, only)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    claude = ns.agent.startswith(CLAUDE_AGENT_SDK)
    if ns.transcript_writes is not None and not claude:
        raise UsageError("--transcript-writes: only for a Claude Agent SDK agent "
                         "(--agent claude-agent-sdk:FILE.py:ATTR)")
    factory = None if names_graph(ns.agent) or claude else load_factory(ns.agent)
    modes = durability_modes(ns.durability)
    report = Report()
    graphs = []  # runs of LangGraph scenarios: summed up per durability mode at the end
    if claude:
        with refusals_reported(ns, report, ns.scenarios[0] if ns.scenarios else "",
                                ns.agent):
            _run_claude_agent_sdk(ns, scenarios, options, report)
    for sc, agent in ((sc, agent) for sc in scenarios if not claude
                      for agent in agents_for(sc, ns, modes)):
        resolved = options.resolve(sc)
        progress = Progress(sc.id if agent == ns.agent else f"{sc.id} [{agent}]")
        check = lambda plan, sc=sc, progress=progress: check_plan(  # noqa: E731
            plan, sc, ns, progress)
        started = time.perf_counter()
        try:
            with refusals_reported(ns, report, sc.path, agent):
                part = explore_one(sc, resolved,
                                   make_agent=factory if agent == ns.agent else None,
                                   spec=agent, agent_name=agent, progress=progress,
                                   plan=check)
        finally:
            progress.close()
        for n, run in enumerate(part.runs):  # measured once, on the first (faultsim.junit)
            run.wall_seconds = time.perf_counter() - started if n == 0 else 0.0
        for run in part.runs:
            report.runs.append(run)
            print_run(run)
            if sc.langgraph is not None:
                graphs.append(run)
        sys.stdout.flush()
    if graphs:
        from ..adapters.langgraph.verdicts import breaks, table

        print()
        print("LangGraph, per scenario and durability mode (crash states):")
        print(table(graphs))
        print()
        print("per durability mode and kill-point category, over these scenarios:")
        print(table(graphs, by_category=True))
        print()
        print("each break, replayable:")
        for line in breaks(graphs):
            print("  " + line)
    if not report.ok and ns.examples > 0:
        print()
        print("\n\n".join(report.counterexamples(limit=ns.examples)))
    print()
    print(report.summary())
    write_reports(ns, report)
    if ns.annotations or (ns.annotations is None
                          and os.environ.get("GITHUB_ACTIONS") == "true"):
        from ..ci import annotations

        for line in annotations(report):
            print(line)
    if ns.baseline:  # the verdict is the difference: only crash states B adds fail the run
        from ..compare import compare

        diff = compare(read_report(ns.baseline), report.to_json(), ns.baseline, "this run")
        print()
        print(diff.text())
        return EXIT_OK if diff.ok else EXIT_VIOLATION
    return EXIT_OK if report.ok else EXIT_VIOLATION


def _run_claude_agent_sdk(ns: argparse.Namespace, scenarios: list, options, report) -> None:
    """`faultsim run` on a Claude Agent SDK agent (faultsim.adapters.claude_agent_sdk): real
    processes, one crash per run, its report the same as any agent's."""
    import time

    from ..console import print_run
    from ..options import in_shard

    from ..adapters.claude_agent_sdk import cli_unavailable, writes
    from ..adapters.claude_agent_sdk.runs import run

    if options.mode == "in-process":
        raise UsageError("--mode in-process: a Claude Agent SDK agent runs its CLI as a real "
                         "process; drop --mode (or give --mode subprocess)")
    if (options.crashes or 1) > 1:
        raise UsageError(f"--crashes {options.crashes}: a Claude Agent SDK agent is explored "
                         "one crash per run (each incarnation costs seconds)")
    why = cli_unavailable()
    if why:
        raise UsageError(f"{ns.agent}: {why}")
    traced = writes.strace_unavailable() if ns.transcript_writes is not False else \
        "--no-transcript-writes"
    if ns.transcript_writes and traced is not None:
        raise UsageError(f"--transcript-writes: {traced}")
    only = options.only
    keep = lambda kp: (only is None or only(kp)) and in_shard(kp.index - 1,  # noqa: E731
                                                             options.shard)
    for sc in scenarios:
        started = time.perf_counter()
        print(f"{sc.id} · {ns.agent}: the clean run, then one crash run per kill point and "
              "one resume per crash state, on real processes" + (
                  "" if traced is None else f" (no kills inside transcript writes: {traced})"),
              file=sys.stderr, flush=True)
        say = lambda line, sc=sc: print(f"  {sc.id} {line}", file=sys.stderr,  # noqa: E731
                                        flush=True)
        found, runs = run(ns.agent, sc, options.crash_model or ("process",),
                          timeout=60.0 if ns.timeout == "auto" else ns.timeout or 60.0,
                          only=keep, progress=say,
                          writes=traced is None)
        for n, model_run in enumerate(runs):
            model_run.wall_seconds = time.perf_counter() - started if n == 0 else 0.0
            report.runs.append(model_run)
            print_run(model_run)
        writes_line = (f"not traced: {found.untraced}" if found.writes is None else
                       f"{found.writes} in the clean run, "
                       f"{sum(1 for v in found.verdicts if v.kill_point.category == 'transcript-write')}"
                       f" killed inside" + (f", {len(found.writes_missed)} not reached "
                                            "(the run wrote fewer)" if found.writes_missed
                                            else ""))
        print(f"  kills         {found.kills_landed} landed (the CLI's process group "
              f"SIGKILLed, each checked dead); transcript writes {writes_line}")
        sys.stdout.flush()
