"""What the command line means before a command runs: the scenario paths, the project's
defaults (FAULTSIM_*, [tool.faultsim], then the built-in ones), the exploration options
from the flags, and the agent specs a scenario is explored with."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from ..settings.table import SETTINGS


def scenario_paths(args: list[str]) -> list[Path]:
    paths: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise UsageError(f"{arg}: no *.toml scenario files in this directory")
            paths += found
        elif p.exists():
            paths.append(p)
        else:
            raise UsageError(f"{arg}: no such scenario file or directory")
    return paths


def check_plan(plan, scenario, ns: argparse.Namespace, progress) -> None:
    if ns.kill_point and not plan.explored:
        raise UsageError(f"{scenario.path}: no kill point {', '.join(ns.kill_point)}; ids come "
                         "from a report of this scenario and agent")
    progress.plan(plan)


def durability_modes(asked: str | None) -> list[str]:
    from ..settings.loading import LANGGRAPH_MODES

    modes = [m.strip() for m in (asked or ",".join(LANGGRAPH_MODES)).split(",") if m.strip()]
    bad = [m for m in modes if m not in LANGGRAPH_MODES]
    if bad or not modes:
        raise UsageError(f"--durability {asked!r}: expected some of "
                         f"{', '.join(LANGGRAPH_MODES)}, comma-separated")
    return modes


def agents_for(scenario, ns: argparse.Namespace, modes: list[str]) -> list[str]:
    """The agent specs to explore a scenario with: the agent, or for a LangGraph scenario
    one `langgraph:MODE` per durability mode (--durability, else the mode its [langgraph]
    table names, else all three). An --agent typed on the command line wins over the
    table (`langgraph:` alone: the table's graph in the mode it names); a default one
    (FAULTSIM_AGENT, [tool.faultsim]) does not: it is the project's agent for the plain
    scenarios beside the graph's."""
    from ..settings.loading import LANGGRAPH, langgraph_spec, names_graph

    if scenario.langgraph is None:
        if names_graph(ns.agent):
            raise UsageError(f"{scenario.path}: --agent {ns.agent} runs a scenario's "
                             "[langgraph] graph, and this scenario has no [langgraph] table")
        return [ns.agent]
    if names_graph(ns.agent):  # `langgraph:` (no mode): the mode the scenario names
        return [langgraph_spec(ns.agent, scenario)]
    if getattr(ns, "agent_typed", False):
        return [ns.agent]
    if getattr(ns, "durability", None) is None and scenario.langgraph.durability:
        return [LANGGRAPH + scenario.langgraph.durability]
    return [LANGGRAPH + m for m in modes]


# the built-in values of the flags nothing else set: the table's defaults, where the scenario's
# fault profile decides nothing (`scenarios`, `mode`, `timeout`, `seed`)
BUILTIN = {s.name: s.default for s in SETTINGS
           if s.cli and not s.profile and s.default is not None}
NEEDS_AGENT = {"run", "list", "record"}
BUNDLED_COMMANDS = {"run", "list"}  # the ones that default to the bundled scenarios


def project_defaults(ns: argparse.Namespace) -> None:
    """Fill what the command line left unset from FAULTSIM_* and [tool.faultsim]
    (faultsim.settings.config), then from the built-in defaults. With nothing named anywhere, `run`
    and `list` use the bundled scenarios and reference agent (faultsim.settings.config.bundled)."""
    from ..settings.config import bundled, load

    project = load()
    # an --agent typed here wins over a scenario's [langgraph] graph; a default does not
    # (agents_for): told apart before the defaults fill it
    ns.agent_typed = isinstance(getattr(ns, "agent", None), str)
    for key, value in project.values.items():
        if key == "agent" and ns.command not in NEEDS_AGENT:
            continue  # a replay token or a corpus names its own agent
        if hasattr(ns, key) and getattr(ns, key) in (None, []):
            setattr(ns, key, value)
    if ns.command in BUNDLED_COMMANDS and not ns.agent and not ns.scenarios \
            and not Path("scenarios").exists():
        # nothing named anywhere (a fresh install): the bundled scenarios on the bundled
        # reference agent; a project's own scenarios/ folder still asks for its agent
        found = bundled()
        if found is not None:
            ns.scenarios, ns.agent = [str(found[0])], found[1]
            verb = {"run": "running", "list": "listing"}[ns.command]
            print(f"faultsim: no agent or scenarios configured here: {verb} the bundled "
                  f"scenarios {found[0]} on the bundled reference agent {found[1]}",
                  file=sys.stderr, flush=True)
    if project.root is not None and getattr(ns, "agent", None) == project.values.get("agent") \
            and "[tool.faultsim]" in project.origin.get("agent", ""):
        # an agent module named in [tool.faultsim] is found from that pyproject.toml's
        # folder, as its scenarios are: the project's `faultsim run` works from any
        # subfolder (the current directory still comes first on the path)
        if str(project.root) not in sys.path:
            sys.path.append(str(project.root))
    for key, value in BUILTIN.items():
        if hasattr(ns, key) and getattr(ns, key) in (None, []):
            setattr(ns, key, value)
    if ns.command in NEEDS_AGENT and not getattr(ns, "agent", None):
        raise UsageError("no agent to run: give --agent MODULE[:ATTR] (or FILE.py[:ATTR]), "
                         "set FAULTSIM_AGENT, or agent = \"...\" under [tool.faultsim] in "
                         "pyproject.toml")


def explore_options(ns: argparse.Namespace, only=None):
    """The run's ExploreOptions, from the flags; an out-of-range flag is named as typed."""
    from ..settings.options import ExploreOptions, OptionError

    try:
        return ExploreOptions(crash_model=ns.crash_model, crashes=ns.crashes, seed=ns.seed,
                              timeout=ns.timeout, workers=ns.workers, only=only,
                              shard=shard(ns.shard),
                              search=ns.search, search_seconds=ns.search_seconds,
                              mode=ns.mode, coverage=ns.coverage,
                              per_class=ns.per_class, budget=ns.budget,
                              horizon=getattr(ns, "horizon", None))
    except OptionError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')} {exc.value}: expected "
                         f"{exc.expected}") from None


def shard(text: str | None) -> tuple[int, int] | None:
    from ..settings.options import SHARD_EXPECTED, parse_shard

    if text is None:
        return None
    try:
        return parse_shard(text)
    except ValueError:
        raise UsageError(f"--shard {text}: expected {SHARD_EXPECTED}") from None
