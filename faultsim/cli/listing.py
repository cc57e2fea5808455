"""`faultsim list`: each scenario's turns, services, kill points and the crash states each
crash model leaves, and its fault profile."""
from __future__ import annotations

import argparse

from .args import agents_for, scenario_paths
from .exits import EXIT_OK


def cmd_list(ns: argparse.Namespace) -> int:
    from ..backends import Agent, survey
    from .console import Progress
    from ..killpoints import categories
    from ..settings.loading import load_factory, names_graph, prefix_of
    from ..scenario import format_duration, load_scenario

    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    # a plain spec is imported once, here (a prefixed one by its backend, per scenario)
    factory = None if prefix_of(ns.agent) else load_factory(ns.agent)
    for n, sc in enumerate(scenarios):
        agent = agents_for(sc, ns, ["sync"])[0]  # a graph's: the kill points under sync
        # its clean runs may be long (or hung): said on stderr while they run
        progress = Progress(sc.id, every=ns.progress_seconds).start()
        try:
            found = survey(Agent(agent, factory if agent == ns.agent else None, agent), sc,
                           timeout=ns.timeout)
        finally:
            progress.close()
        if found.lines is not None:  # a backend that describes itself (its budget)
            print(("\n" if n else "") + f"{sc.id}  {sc.path}")
            print("\n".join(found.lines))
            continue
        points, states = found.kill_points, found.crash_states
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
        if names_graph(agent):  # not when --agent names another agent
            print(f"  langgraph    {sc.langgraph.graph} (kill points of durability "
                  f"{agent.removeprefix('langgraph:')})")
        print(f"  kill points  {len(points)}: crash states process {states['process']}, "
              f"power {states['power']}")
        cats = categories(points)
        print("               " + ", ".join(f"{c} {k}" for c, k in cats.items() if k))
        if "pause" in states:
            print(f"  pause        {pause_line(states['pause'])}")
        if found.forecasts:  # pipeline/forecast.py: an estimate, said as one
            from ..pipeline.forecast import words

            print(f"  forecast     {words(found.forecasts)}")
        print(f"  profile      crash models {', '.join(profile.crash_models)}; "
              f"{profile.crashes} crash{'es' if profile.crashes > 1 else ''}; downtime "
              f"{format_duration(profile.downtime)}; API faults "
              f"{', '.join(faults) if faults else 'none'}")
    return EXIT_OK


def pause_line(pause: int | str) -> str:
    """The pause model's schedules in words: its pause points (a count) and the wake
    points each is woken at (faultsim.pipeline.pause); or why a backend does not pause."""
    if not isinstance(pause, int):
        return pause
    return (f"{pause} pause points (the boundary kill points after the first event), each "
            "woken at the new incarnation's first model request, after each of its "
            "checkpoint saves, and at its end")
