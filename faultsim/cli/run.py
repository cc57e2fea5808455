"""`faultsim run`: crash an agent at every kill point of scenario files, resume it, judge it
(LangGraph graphs per durability mode), on the backend `faultsim.backends` chooses for the
agent (a Claude Agent SDK agent on its own processes)."""
from __future__ import annotations

import argparse
import os
import sys

from .args import agents_for, check_plan, durability_modes, explore_options, scenario_paths
from .exits import EXIT_OK, EXIT_VIOLATION
from .output import read_report, refusals_reported, write_reports


def cmd_run(ns: argparse.Namespace) -> int:
    import json
    import time

    from ..backends import Agent, explore as explore_one
    from ..console import Progress, print_run
    from ..loading import load_factory, names_graph, prefix_of
    from ..report import Report
    from ..scenario import load_scenario

    only = None
    if ns.kill_point:
        wanted = set(ns.kill_point)
        only = lambda point: point.id in wanted  # noqa: E731
    options = explore_options(ns, only)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    # a plain spec is imported once, here (a prefixed one by its backend, per scenario)
    factory = None if prefix_of(ns.agent) else load_factory(ns.agent)
    settings = {"transcript_writes": ns.transcript_writes}  # the backend's to honour
    modes = durability_modes(ns.durability)
    report = Report()
    graphs = []  # runs of LangGraph scenarios: summed up per durability mode at the end
    for sc, agent in ((sc, agent) for sc in scenarios for agent in agents_for(sc, ns, modes)):
        progress = Progress(sc.id if agent == ns.agent else f"{sc.id} [{agent}]")
        check = lambda plan, sc=sc, progress=progress: check_plan(  # noqa: E731
            plan, sc, ns, progress)
        started = time.perf_counter()
        try:
            with refusals_reported(ns, report, sc.path, agent):
                part = explore_one(Agent(agent, factory if agent == ns.agent else None,
                                         agent), sc, options, progress=progress,
                                   plan=check, settings=settings)
        finally:
            progress.close()
        for n, run in enumerate(part.runs):  # measured once, on the first (faultsim.junit)
            run.wall_seconds = time.perf_counter() - started if n == 0 else 0.0
        for run in part.runs:
            report.runs.append(run)
            print_run(run)
            for line in run.notes:  # what only its backend can say
                print(line)
            if names_graph(agent):  # not another agent run on a graph's scenario
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

