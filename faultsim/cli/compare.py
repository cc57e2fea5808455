"""`faultsim compare`: differential verdicts, from two saved reports or a scenario run on
two agents."""
from __future__ import annotations

import argparse

from ..errors import UsageError
from .args import explore_options, scenario_paths
from .exits import EXIT_OK, EXIT_VIOLATION
from .output import Output, check_outputs, read_report, write_outputs


def cmd_compare(ns: argparse.Namespace) -> int:
    """Two saved reports, or one scenario run on two agents: the crash states B fixes,
    breaks, and the rest (faultsim.reports.compare); exit 1 when B adds failing crash states."""
    import json

    from ..reports.compare import compare

    check_outputs(ns, [("json", "--json")])  # before any run of the agents
    items, agents = ns.items, ns.agent or []
    if len(items) == 2 and all(i.endswith(".json") for i in items) and not agents:
        a, b = (read_report(i) for i in items)
        names = items
    elif items and not any(i.endswith(".json") for i in items) and len(agents) == 2:
        from ..backends import Agent, explore as explore_one
        from ..settings.loading import langgraph_spec, load_factory, names_graph, prefix_of
        from ..errors import AgentFinding
        from ..reports.report import Refusal, Report
        from ..scenario import load_scenario

        options = explore_options(ns)
        scenarios = [load_scenario(p) for p in scenario_paths(items)]
        reports = []
        for spec in agents:
            report = Report()
            factory = None if prefix_of(spec) or names_graph(spec) else load_factory(spec)
            for sc in scenarios:
                # `langgraph:` runs each scenario's own graph in the mode it names
                named = langgraph_spec(spec, sc) if names_graph(spec) else spec
                try:
                    part = explore_one(Agent(named, factory, named), sc, options)
                except AgentFinding as exc:  # no crash states: the clean run's verdict
                    report.refused.append(Refusal(sc.path, named, type(exc).__name__,
                                                  "finding", str(exc)))
                    continue
                report.runs += part.runs
            for refusal in report.refused:
                print(f"{spec}: {refusal.message}")
            if report.runs or not report.refused:
                print(f"{spec}: " + report.summary().splitlines()[-1])
            reports.append(report.to_json())
        a, b = reports
        names = agents
    else:
        raise UsageError("compare: give two JSON reports (A.json B.json), or scenario files "
                         "and two agents (--agent A --agent B)")
    diff = compare(a, b, *names)
    print(diff.text(limit=ns.limit))
    if ns.json:
        write_outputs([Output("--json", ns.json, lambda: json.dumps(diff.to_json(),
                                                                    indent=2))])
    return EXIT_OK if diff.ok else EXIT_VIOLATION
