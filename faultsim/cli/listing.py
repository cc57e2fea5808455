"""`faultsim list`: each scenario's turns, services, kill points and the crash states each
crash model leaves, and its fault profile."""
from __future__ import annotations

import argparse

from .args import agents_for, scenario_paths
from .exits import EXIT_OK


def cmd_list(ns: argparse.Namespace) -> int:
    from ..loading import CLAUDE_AGENT_SDK, factory_for, load_factory, names_graph
    from ..engine import survey
    from ..killpoints import categories
    from ..scenario import format_duration, load_scenario

    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    if ns.agent.startswith(CLAUDE_AGENT_SDK):
        return _list_claude_agent_sdk(ns, scenarios)
    factory = None if names_graph(ns.agent) else load_factory(ns.agent)
    for n, sc in enumerate(scenarios):
        agent = agents_for(sc, ns, ["sync"])[0]  # a graph's: the kill points under sync
        if sc.store.needs_subprocess:
            from ..real.explore import survey_subprocess
            points = survey_subprocess(agent, sc, timeout=ns.timeout)
            states = {"process": len(points), "power": "n/a (subprocess mode)"}
        else:
            points, states = survey(factory if agent == ns.agent and factory else
                                    factory_for(agent, sc), sc, agent_name=agent,
                                    timeout=ns.timeout)
        main = sc.script.turns
        parallel = sum(1 for t in main if len(t.tool_calls) > 1)
        turns = f"{len(main)} ({sum(1 for t in main if t.tool_calls)} with tool calls" + (
            f", {parallel} of them parallel" if parallel else "") + ")"
        if sc.subagents:
            turns += ", sub-agents " + ", ".join(f"{s.tag} {len(s.turns)}"
                                                for s in sc.subagents)
        services = ", ".join(f"{s.name} ({s.kind})" for s in sc.services) or "none"
        faults = [f"{f.kind}×{f.times} at {script.tag}@{f.at}" for script in
                  (sc.script, *sc.subagents) for f in script.faults]
        profile = sc.profile
        print(("\n" if n else "") + f"{sc.id}  {sc.path}")
        print(f"  turns        {turns}")
        print(f"  services     {services}")
        if sc.store.needs_subprocess:
            print(f"  store        {sc.store.kind} (subprocess mode)")
        if sc.langgraph is not None:
            print(f"  langgraph    {sc.langgraph.graph} (kill points of durability sync)")
        print(f"  kill points  {len(points)}: crash states process {states['process']}, "
              f"power {states['power']}")
        cats = categories(points)
        print("               " + ", ".join(f"{c} {k}" for c, k in cats.items() if k))
        print(f"  profile      crash models {', '.join(profile.crash_models)}; "
              f"{profile.crashes} crash{'es' if profile.crashes > 1 else ''}; downtime "
              f"{format_duration(profile.downtime)}; API faults "
              f"{', '.join(faults) if faults else 'none'}")
    return EXIT_OK


def _list_claude_agent_sdk(ns: argparse.Namespace, scenarios: list) -> int:
    """A Claude Agent SDK agent (faultsim.adapters.claude_agent_sdk): one clean run on the
    bundled CLI gives its kill points; each incarnation costs seconds, so say the budget."""
    from collections import Counter

    from ..adapters.claude_agent_sdk import CATEGORIES, survey
    from ..adapters.claude_agent_sdk.runs import load
    from ..adapters.claude_agent_sdk.writes import HOLD, strace_unavailable

    run = load(ns.agent)
    untraced = strace_unavailable()
    for n, sc in enumerate(scenarios):
        found = survey(run, sc, timeout=ns.timeout or 60.0, writes=untraced is None)
        print(("\n" if n else "") + f"{sc.id}  {sc.path}")
        print(f"  agent        {ns.agent} (Claude Agent SDK, real processes)")
        print(f"  kill points  {len(found.kill_points)}: crash states process about "
              f"{found.crash_states} (the state as written and each transcript prefix)")
        cats = Counter(kp.category for kp in found.kill_points)
        print("               " + ", ".join(f"{c} {cats[c]}" for c in CATEGORIES if cats[c]))
        if (untraced or found.untraced) is not None:
            print("               no kills inside transcript writes: "
                  f"{untraced or found.untraced}")
        held = "" if not found.writes else f", and strace holding each transcript write " \
                                           f"{HOLD:g} s in the write kills' runs"
        print(f"  budget       about {max(1, round(found.seconds / 60))} min: "
              f"{found.incarnations} incarnations at "
              f"{found.seconds_per_incarnation:.1f} s (a clean run's, measured now){held}")
    return EXIT_OK
