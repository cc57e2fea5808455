"""The `faultsim` command."""
from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ._version import __version__
from .errors import AgentFinding, FaultsimError, HarnessError, UsageError

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that no `except Exception` stops it."""


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into Terminated, so that every `finally` runs on the way out: the
    subprocess mode's run folder in /dev/shm is removed like on Ctrl-C. Main thread only
    (Python runs signal handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    me = os.getpid()

    def terminated(signum, frame):
        if os.getpid() != me:  # a forked worker of the in-process mode dies as it used to
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    dumps = _stack_dumps()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if dumps:
            import faulthandler

            faulthandler.unregister(signal.SIGUSR2)


def _stack_dumps() -> bool:
    """`kill -USR2 PID` prints where a run is, every thread, to stderr (a run that seems
    stuck, or one that does not exit when cancelled, can say why)."""
    import faulthandler

    try:
        faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False
    return True


def _exiting_now() -> None:
    """Cancelled: the process ends right after this. Every clean-up has run; what is left
    is the interpreter's last garbage collection over a sweep's heap (traces, memos),
    1-2 s on a busy machine. Frozen objects are outside every collection."""
    import gc

    gc.freeze()


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


def _check_plan(plan, scenario, ns: argparse.Namespace, progress) -> None:
    if ns.kill_point and not plan.explored:
        raise UsageError(f"{scenario.path}: no kill point {', '.join(ns.kill_point)}; ids come "
                         "from a report of this scenario and agent")
    progress.plan(plan)


def _durability_modes(asked: str | None) -> list[str]:
    from .loading import LANGGRAPH_MODES

    modes = [m.strip() for m in (asked or ",".join(LANGGRAPH_MODES)).split(",") if m.strip()]
    bad = [m for m in modes if m not in LANGGRAPH_MODES]
    if bad or not modes:
        raise UsageError(f"--durability {asked!r}: expected some of "
                         f"{', '.join(LANGGRAPH_MODES)}, comma-separated")
    return modes


def _agents(scenario, ns: argparse.Namespace, modes: list[str]) -> list[str]:
    """The agent specs to explore a scenario with: --agent, or for a LangGraph scenario
    one `langgraph:MODE` per durability mode (unless --agent names one)."""
    from .loading import LANGGRAPH

    if scenario.langgraph is None:
        if ns.agent.startswith(LANGGRAPH):
            raise UsageError(f"{scenario.path}: --agent {ns.agent} runs a scenario's "
                             "[langgraph] graph, and this scenario has no [langgraph] table")
        return [ns.agent]
    if ns.agent.startswith(LANGGRAPH):
        return [ns.agent]
    return [LANGGRAPH + m for m in modes]


BUILTIN = {"scenarios": ["scenarios"], "mode": "auto", "timeout": "auto", "seed": "0"}
NEEDS_AGENT = {"run", "list", "record"}
BUNDLED_COMMANDS = {"run", "list"}  # the ones that default to the bundled scenarios


def _project_defaults(ns: argparse.Namespace) -> None:
    """Fill what the command line left unset from FAULTSIM_* and [tool.faultsim]
    (faultsim.config), then from the built-in defaults. With nothing named anywhere, `run`
    and `list` use the bundled scenarios and reference agent (faultsim.config.bundled)."""
    from .config import bundled, load

    project = load()
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


def _options(ns: argparse.Namespace, only=None):
    """The run's ExploreOptions, from the flags; an out-of-range flag is named as typed."""
    from .options import ExploreOptions, OptionError

    try:
        return ExploreOptions(crash_model=ns.crash_model, crashes=ns.crashes, seed=ns.seed,
                              timeout=ns.timeout, workers=ns.workers, only=only,
                              shard=_shard(ns.shard),
                              search=ns.search, search_seconds=ns.search_seconds,
                              mode=ns.mode)
    except OptionError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')} {exc.value}: expected "
                         f"{exc.expected}") from None


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    i, sep, n = text.partition("/")
    if sep and i.strip().isdigit() and n.strip().isdigit() and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise UsageError(f"--shard {text}: expected I/N with 1 <= I <= N, for example 2/4")


def cmd_run(ns: argparse.Namespace) -> int:
    import json
    import time

    from .console import Progress, print_run
    from .engine import run as explore_one
    from .loading import CLAUDE_AGENT_SDK, COMMAND, LANGGRAPH, load_factory
    from .report import Report
    from .scenario import load_scenario

    only = None
    if ns.kill_point:
        wanted = set(ns.kill_point)
        only = lambda point: point.id in wanted  # noqa: E731
    options = _options(ns, only)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    claude = ns.agent.startswith((CLAUDE_AGENT_SDK, COMMAND))
    if ns.transcript_writes is not None and not claude:
        raise UsageError("--transcript-writes: only for a Claude Agent SDK agent "
                         "(--agent claude-agent-sdk:FILE.py:ATTR)")
    factory = None if ns.agent.startswith(LANGGRAPH) or claude else load_factory(ns.agent)
    modes = _durability_modes(ns.durability)
    report = Report()
    graphs = []  # runs of LangGraph scenarios: summed up per durability mode at the end
    if claude:
        with _refusals_reported(ns, report, ns.scenarios[0] if ns.scenarios else "",
                                ns.agent):
            if ns.agent.startswith(COMMAND):
                _run_command(ns, scenarios, options, report)
            else:
                _run_claude_agent_sdk(ns, scenarios, options, report)
    for sc, agent in ((sc, agent) for sc in scenarios if not claude
                      for agent in _agents(sc, ns, modes)):
        resolved = options.resolve(sc)
        progress = Progress(sc.id if agent == ns.agent else f"{sc.id} [{agent}]")
        check = lambda plan, sc=sc, progress=progress: _check_plan(  # noqa: E731
            plan, sc, ns, progress)
        started = time.perf_counter()
        try:
            with _refusals_reported(ns, report, sc.path, agent):
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
        from .adapters.langgraph.verdicts import breaks, table

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
    _write_reports(ns, report)
    if ns.annotations or (ns.annotations is None
                          and os.environ.get("GITHUB_ACTIONS") == "true"):
        from .ci import annotations

        for line in annotations(report):
            print(line)
    if ns.baseline:  # the verdict is the difference: only crash states B adds fail the run
        from .compare import compare

        diff = compare(_read_report(ns.baseline), report.to_json(), ns.baseline, "this run")
        print()
        print(diff.text())
        return EXIT_OK if diff.ok else EXIT_VIOLATION
    return EXIT_OK if report.ok else EXIT_VIOLATION


def _read_report(path: str) -> dict:
    from .report_merge import read

    return read(path)


def cmd_compare(ns: argparse.Namespace) -> int:
    """Two saved reports, or one scenario run on two agents: the crash states B fixes,
    breaks, and the rest (faultsim.compare); exit 1 when B adds failing crash states."""
    import json

    from .compare import compare

    items, agents = ns.items, ns.agent or []
    if len(items) == 2 and all(i.endswith(".json") for i in items) and not agents:
        a, b = (_read_report(i) for i in items)
        names = items
    elif items and not any(i.endswith(".json") for i in items) and len(agents) == 2:
        from .engine import run as explore_one
        from .loading import load_factory
        from .report import Report
        from .scenario import load_scenario

        options = _options(ns)
        scenarios = [load_scenario(p) for p in scenario_paths(items)]
        reports = []
        for spec in agents:
            report = Report()
            factory = load_factory(spec)
            for sc in scenarios:
                part = explore_one(sc, options.resolve(sc), make_agent=factory, spec=spec,
                                   agent_name=spec)
                report.runs += part.runs
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
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(diff.to_json(), f, indent=2)
    return EXIT_OK if diff.ok else EXIT_VIOLATION


@contextmanager
def _refusals_reported(ns: argparse.Namespace, report, scenario: str, agent: str
                       ) -> Iterator[None]:
    """A scenario stopped before its verdicts (the clean run failed or escaped, the
    scenario cannot work, faultsim failed) still leaves --json, --junit and --summary-md,
    with the refusal as their content (CI reads a report, not stderr); the error then
    goes on to `main`, which prints its one line and exits as it always did."""
    from .report import Refusal

    try:
        yield
    except FaultsimError as exc:
        category = ("finding" if isinstance(exc, AgentFinding) else
                    "usage" if isinstance(exc, UsageError) else "harness")
        report.refused.append(Refusal(str(scenario), agent, type(exc).__name__, category,
                                      str(exc), getattr(exc, "details", "") or ""))
        _write_reports(ns, report)
        raise


def _write_reports(ns: argparse.Namespace, report) -> None:
    import json

    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(), f, indent=2)
    if ns.junit:
        from .junit import write_junit

        write_junit(report, ns.junit)
    if ns.html:
        from .html_report import write_html

        write_html(report.to_json(), ns.html)
    if ns.summary_md:
        from .ci import summary_markdown

        # appended: $GITHUB_STEP_SUMMARY collects a step's summaries
        with open(ns.summary_md, "a", encoding="utf-8") as f:
            f.write(summary_markdown(report, html=ns.html))


def cmd_list(ns: argparse.Namespace) -> int:
    from .loading import CLAUDE_AGENT_SDK, LANGGRAPH, factory_for, load_factory
    from .engine import survey
    from .killpoints import categories
    from .scenario import format_duration, load_scenario

    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    if ns.agent.startswith(CLAUDE_AGENT_SDK):
        return _list_claude_agent_sdk(ns, scenarios)
    if ns.agent.startswith("cmd:"):
        return _list_command(ns, scenarios)
    factory = None if ns.agent.startswith(LANGGRAPH) else load_factory(ns.agent)
    for n, sc in enumerate(scenarios):
        agent = _agents(sc, ns, ["sync"])[0]  # a graph's: the kill points under sync
        if sc.store.needs_subprocess:
            from .real.explore import survey_subprocess
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


def _list_command(ns: argparse.Namespace, scenarios: list) -> int:
    """An agent run as a command: its backend's survey (two clean runs), through the seam."""
    from . import backends

    for sc in scenarios:
        found = backends.survey(backends.Agent(spec=ns.agent), sc, timeout=ns.timeout)
        print(f"{sc.id} ({sc.path})")
        for line in found.lines or []:
            print(line)
        for kp in found.kill_points:
            print(f"    {kp.id}")
    return EXIT_OK


def _run_command(ns: argparse.Namespace, scenarios: list, options, report) -> None:
    """`faultsim run` on an agent run as a command (faultsim.command), through its
    backend: real processes under strace, one crash per run."""
    import time

    from . import backends
    from .console import print_run

    for sc in scenarios:
        started = time.perf_counter()
        part = backends.explore(backends.Agent(spec=ns.agent), sc, options,
                                progress=lambda *a, **k: None)
        for n, model_run in enumerate(part.runs):
            model_run.wall_seconds = time.perf_counter() - started if n == 0 else 0.0
            report.runs.append(model_run)
            print_run(model_run)
            for line in model_run.notes:
                print(line)
        sys.stdout.flush()


def _run_claude_agent_sdk(ns: argparse.Namespace, scenarios: list, options, report) -> None:
    """`faultsim run` on a Claude Agent SDK agent (faultsim.adapters.claude_agent_sdk): real
    processes, one crash per run, its report the same as any agent's."""
    import time

    from .console import print_run
    from .options import in_shard

    from .adapters.claude_agent_sdk import cli_unavailable, writes
    from .adapters.claude_agent_sdk.runs import run

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


def _list_claude_agent_sdk(ns: argparse.Namespace, scenarios: list) -> int:
    """A Claude Agent SDK agent (faultsim.adapters.claude_agent_sdk): one clean run on the
    bundled CLI gives its kill points; each incarnation costs seconds, so say the budget."""
    from collections import Counter

    from .adapters.claude_agent_sdk import CATEGORIES, survey
    from .adapters.claude_agent_sdk.runs import load
    from .adapters.claude_agent_sdk.writes import HOLD, strace_unavailable

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


def _agent_version(spec: str) -> str:
    import importlib
    from importlib import metadata

    module_name = spec.rpartition(":")[0] if ":" in spec else spec
    for name in (module_name, module_name.split(".")[0]):
        try:
            version = getattr(importlib.import_module(name), "__version__", None)
        except Exception:
            version = None
        if version:
            return str(version)
    try:
        return metadata.version(module_name.split(".")[0])
    except metadata.PackageNotFoundError:
        return "unknown"


def cmd_formats_record(ns: argparse.Namespace) -> int:
    from .loading import load_factory
    from .formats import record_corpus
    from .scenario import load_scenario

    factory = load_factory(ns.agent)
    scenario = load_scenario(ns.scenario)
    corpus = record_corpus(factory, scenario, ns.out, agent=ns.check_agent or ns.agent,
                           recorded_by=ns.agent, agent_version=_agent_version(ns.agent),
                           seed=ns.seed, timeout=ns.timeout)
    points = sum(len(e.kill_points) for e in corpus.entries)
    print(f"recorded {len(corpus.entries)} states ({points} kill points, format version"
          f"{'s' if len(corpus.format_versions) != 1 else ''} "
          f"{', '.join(map(str, corpus.format_versions)) or 'none'}) of {scenario.id} by "
          f"{ns.agent} into {corpus.path}")
    return EXIT_OK


def cmd_formats_check(ns: argparse.Namespace) -> int:
    from .loading import load_factory
    from .formats import Corpus, check_corpus

    failed = 0
    for path in ns.corpora:
        corpus = Corpus.open(path)
        agent = ns.agent or corpus.agent
        verdicts = check_corpus(load_factory(agent), corpus, timeout=ns.timeout)
        bad = [v for v in verdicts if not v.ok]
        failed += len(bad)
        versions = ", ".join(map(str, corpus.format_versions)) or "none"
        print(f"{path}: {len(verdicts)} recorded states of {corpus.scenario_id} (format "
              f"version {versions}, recorded by {corpus.recorded_by} "
              f"{corpus.agent_version}) resumed by {agent}: "
              + ("ok" if not bad else f"{len(bad)} FAIL"))
        for v in bad[:ns.examples]:
            print("\n" + v.describe())
        if ns.hostile:
            from .formats.hostile import attack_all
            from .scenario import load_scenario

            report = attack_all(load_factory(agent), load_scenario(corpus.scenario_path),
                                drawn=ns.hostile, timeout=ns.timeout)
            failed += len(report.failures)
            print(f"{path}: hostile checkpoint files ({len(report.fixed)} fixed, "
                  f"{report.drawn} drawn) given to {agent}: "
                  + ("all refused" if not report.failures else
                     f"{len(report.failures)} FAIL"))
            for v in report.failures[:ns.examples]:
                print(f"\nhostile file {v.case.name!r}: " + "; ".join(v.problems))
    return EXIT_OK if not failed else EXIT_VIOLATION


def cmd_replay(ns: argparse.Namespace) -> int:
    import json

    from .loading import factory_for
    from .replayer import replay
    from .token import ReplayToken

    token = ReplayToken.decode(ns.token)
    factory = factory_for(ns.agent, token.scenario) if ns.agent and \
        token.mode != "subprocess" else None
    result = replay(token, factory, timeout="auto" if ns.timeout is None else ns.timeout,
                    agent=ns.agent)
    crashes = len(result.schedule)
    print(f"replaying {crashes} crash{'es' if crashes > 1 else ''} of "
          f"{result.run.scenario.id} / {ns.agent or token.agent} / crash model "
          f"{token.crash_model}, seed {token.seed}")
    print(result.counterexample() if not result.ok else
          "\n".join([f"  crash {k}: {p.describe()}" for k, p in enumerate(result.schedule, 1)]
                    + ["ok: the schedule no longer violates the protocol"]))
    if ns.json:
        result.run.deep_failures = [result.verdict] if result.verdict.earlier else []
        result.run.verdicts = [] if result.verdict.earlier else [result.verdict]
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump({"ok": result.ok, "runs": [result.run.to_json()]}, f, indent=2)
    return EXIT_OK if result.ok else EXIT_VIOLATION


def cmd_report_html(ns: argparse.Namespace) -> int:
    from .html_report import from_json_file

    out = ns.out or str(Path(ns.report).with_suffix(".html"))
    from_json_file(ns.report, out)
    print(f"faultsim: wrote {out}")
    return EXIT_OK


def cmd_report_merge(ns: argparse.Namespace) -> int:
    import json

    from .report_merge import load, merge

    merged = merge(load(ns.reports))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=2)
    if ns.html:
        from .html_report import write_html

        write_html(merged, ns.html)
    if ns.junit or ns.summary_md:
        from .report_merge import as_report

        report = as_report(merged)
        if ns.junit:
            from .junit import write_junit

            write_junit(report, ns.junit)
        if ns.summary_md:
            from .ci import summary_markdown

            with open(ns.summary_md, "a", encoding="utf-8") as f:  # as run --summary-md
                f.write(summary_markdown(report, html=ns.html))
    runs = merged["runs"]
    print(f"faultsim: merged {len(ns.reports)} reports: {len(runs)} run"
          f"{'s' if len(runs) != 1 else ''}, " + ("all passed" if merged["ok"] else
                                               f"{sum(r['violating'] for r in runs)} "
                                               "violating"))
    return EXIT_OK if merged["ok"] else EXIT_VIOLATION


def cmd_validate(ns: argparse.Namespace) -> int:
    # no agent, no SDK: only the loader's table and the world's names are imported
    from .validate import scenario_files, validate_file

    files, problems = scenario_files(ns.scenarios)
    invalid = len({p.path for p in problems})
    for path in files:
        found = validate_file(path)
        problems += found
        invalid += bool(found)
    for problem in problems:
        print(problem)
    if problems:
        print(f"faultsim validate: {invalid} of {len(files)} file"
              f"{'s' if len(files) != 1 else ''} invalid, {len(problems)} problem"
              f"{'s' if len(problems) != 1 else ''}", file=sys.stderr)
        return EXIT_USAGE
    print(f"faultsim validate: {len(files)} scenario file{'s' if len(files) != 1 else ''}, "
          "all valid", file=sys.stderr)
    return EXIT_OK


def cmd_scenario_schema(ns: argparse.Namespace) -> int:
    from .scenario_schema import dumps

    sys.stdout.write(dumps())
    return EXIT_OK


def cmd_scenario_from_messages(ns: argparse.Namespace) -> int:
    from .recorder.commands import from_messages

    return from_messages(ns)


def cmd_scenario_record(ns: argparse.Namespace) -> int:
    from .recorder.commands import record

    return record(ns)


def _services_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service", action="append", metavar="NAME=KIND",
                        help="a service of the scenario and its kind (keyed, queryable, "
                             "blind, readonly); repeatable")
    parser.add_argument("--services-from", metavar="FILE", default=None,
                        help="a TOML file whose [services.NAME] tables (kind, records) are "
                             "taken; a scenario file works")


def _scenarios_and_agent(parser: argparse.ArgumentParser, agent_help: str) -> None:
    parser.add_argument("scenarios", nargs="*", default=None,
                        help="scenario files or directories (default: [tool.faultsim] "
                             "scenarios in pyproject.toml, else scenarios/, else the "
                             "bundled scenarios)")
    parser.add_argument("--agent", default=None, help=agent_help)


def _debug_flag(parser: argparse.ArgumentParser) -> None:
    # `faultsim --debug run ...` is the documented spelling; after the verb works too
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultsim", description="Crash-safety testing for "
                                     "long-running AI agents.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"faultsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="crash an agent at every kill point of scenario files, "
                         "resume it, judge it")
    _scenarios_and_agent(run, "the agent factory: MODULE[:ATTR] or FILE.py[:ATTR], "
                         "attribute make_agent by default (default: [tool.faultsim] agent; "
                         "with no agent or scenarios named anywhere, the bundled reference "
                         "agent on the bundled scenarios); claude-agent-sdk:FILE.py:ATTR "
                         "for a Claude Agent SDK agent's coroutine")
    run.add_argument("--transcript-writes", action=argparse.BooleanOptionalAction,
                     default=None, help="for a claude-agent-sdk: agent, kill inside the CLI's "
                     "transcript writes too (default: where strace can trace)")
    run.add_argument("--crash-model", default=None, choices=["process", "power", "all"],
                     help="what a crash leaves on disk: a killed process, power loss, or "
                          "both (default: the scenario's fault profile, else process)")
    run.add_argument("--mode", default=None, choices=["auto", "in-process", "subprocess"],
                     help="in-process: the agent runs under faultsim's file-system model "
                     "(fast; process and power crashes); subprocess: each incarnation is a "
                     "real process on a real directory, killed by SIGKILL (SQLite, Redis, "
                     "module-level state; process crashes). auto (default): subprocess for "
                     "scenarios whose [store] is sqlite or redis")
    run.add_argument("--durability", default=None, metavar="MODES",
                     help="LangGraph scenarios: the durability modes to explore, "
                          "comma-separated (default: sync,async,exit)")
    run.add_argument("--json", metavar="FILE", help="write the report as JSON")
    run.add_argument("--html", metavar="FILE", help="write the report as one self-contained "
                     "HTML page: the crash map, each counterexample, the run's facts")
    run.add_argument("--junit", metavar="FILE",
                     help="write a JUnit XML report: one test case per scenario, crash model "
                          "and invariant, failed with its first counterexample")
    run.add_argument("--summary-md", metavar="FILE",
                     help="append a Markdown summary (a row per scenario and crash model, "
                          "the first counterexample of each failing run and its replay "
                          "command) to FILE, e.g. \"$GITHUB_STEP_SUMMARY\"")
    run.add_argument("--annotations", action=argparse.BooleanOptionalAction, default=None,
                     help="print a GitHub ::error annotation per failing scenario, crash "
                          "model and invariant, pointing at the scenario file (default: on "
                          "when GITHUB_ACTIONS=true)")
    run.add_argument("--shard", metavar="I/N", default=None,
                     help="explore shard I of N, for CI matrices: every shard crashes at "
                          "every kill point and resumes the distinct crash states a stable "
                          "hash gives it (subprocess mode: every Nth kill point); the N "
                          "shards partition them, `faultsim report merge` joins their "
                          "--json reports; the search runs in shard 1")
    run.add_argument("--kill-point", action="append", metavar="ID",
                     help="explore only this kill point (repeatable): replays a "
                          "counterexample")
    run.add_argument("--workers", type=int, default=None,
                     help="crash runs at once (default: one per core; 0 = one after "
                          "another in this process)")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds an incarnation may run before it counts as hung "
                          "(default: derived from the clean runs, 10x the slower clean "
                          "incarnation and at least 3 s)")
    run.add_argument("--examples", type=int, default=3,
                     help="counterexamples to print, the first of each kind (default: 3)")
    run.add_argument("--crashes", type=int, default=None, metavar="N",
                     help="the most crashes in one schedule (default: the scenario's fault "
                          "profile, else 2). One and two are "
                          "explored exhaustively (the second crash at every kill point of "
                          "the resumed run); more are searched with hypothesis")
    run.add_argument("--seed", default=None,
                     help="seed for the agent's uuid/random/tempfile names and the search "
                          "(default: 0); the same seed gives the same report")
    run.add_argument("--search", type=int, default=None, metavar="EXAMPLES",
                     help="hypothesis examples per crash model for schedules beyond the "
                          "exhaustive sweep (default: 200 when --crashes > 2); with "
                          "--crashes 2 it searches the pairs instead of enumerating them")
    run.add_argument("--search-seconds", type=float, default=None, metavar="S",
                     help="stop the search after S seconds (a failure found is still shrunk)")
    run.add_argument("--baseline", metavar="REPORT", default=None,
                     help="compare this run with a saved --json report, crash state by "
                     "crash state, and exit 1 only when this run adds failing crash states")
    _debug_flag(run)
    run.set_defaults(func=cmd_run)
    cmp = sub.add_parser("compare", help="differential verdicts: which crash states B fixes "
                         "and breaks, from two JSON reports or a scenario on two agents")
    cmp.add_argument("items", nargs="+", metavar="REPORT_OR_SCENARIO",
                     help="two JSON reports (A.json B.json), or scenario files (with two "
                     "--agent)")
    cmp.add_argument("--agent", action="append", metavar="SPEC",
                     help="an agent factory (MODULE[:ATTR] or FILE.py[:ATTR]); give it twice, "
                     "A then B")
    cmp.add_argument("--crash-model", default=None, choices=["process", "power", "all"],
                     help="as for run (default: the scenario's fault profile)")
    cmp.add_argument("--crashes", type=int, default=None, metavar="N",
                     help="as for run (default: the scenario's fault profile, else 2)")
    cmp.add_argument("--seed", default=None, help="as for run (default: 0)")
    cmp.add_argument("--workers", type=int, default=None, help="as for run")
    cmp.add_argument("--json", metavar="FILE", help="write the comparison as JSON")
    cmp.add_argument("--limit", type=int, default=20,
                     help="states listed per kind and run in the text (default: 20)")
    _debug_flag(cmp)
    cmp.set_defaults(func=cmd_compare, timeout=None, shard=None, search=None,
                     search_seconds=None, mode=None)
    lst = sub.add_parser("list", help="the scenarios: turns, services, kill points and the "
                         "crash states each crash model leaves, fault profile")
    _scenarios_and_agent(lst, "the agent whose clean run gives the kill points "
                         "(default: as for run)")
    lst.add_argument("--timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    _debug_flag(lst)
    lst.set_defaults(func=cmd_list)
    fmt = sub.add_parser("formats", help="checkpoint-format regression: record a corpus of "
                         "durable states, check a later release against it")
    fsub = fmt.add_subparsers(dest="formats_command", required=True)
    rec = fsub.add_parser("record", help="record the agent's durable state (files and world) "
                          "at each kill point of a scenario into a corpus folder")
    rec.add_argument("scenario", help="the scenario file")
    rec.add_argument("--out", required=True, metavar="CORPUS", help="the corpus folder "
                     "(replaced: recording is explicit)")
    rec.add_argument("--agent", default=None, help="the agent factory that "
                     "writes the states (default: reference_agent)")
    rec.add_argument("--check-agent", default=None, metavar="AGENT",
                     help="the factory later checks run by default (default: --agent); "
                          "record with an older release, check with the current one")
    rec.add_argument("--seed", default="0", help=argparse.SUPPRESS)
    rec.add_argument("--timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    _debug_flag(rec)
    rec.set_defaults(func=cmd_formats_record)
    chk = fsub.add_parser("check", help="resume every recorded state with the agent's "
                          "current code and judge it")
    chk.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus folders")
    chk.add_argument("--agent", default=None, help="the agent factory (default: the "
                     "corpus's)")
    chk.add_argument("--examples", type=int, default=3, help="failing entries to show")
    chk.add_argument("--hostile", type=int, default=100, metavar="N",
                     help="also hand the agent the hostile checkpoint files: the fixed "
                          "cases and N drawn ones (default 100; 0 = only the fixed cases)")
    chk.add_argument("--timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    _debug_flag(chk)
    chk.set_defaults(func=cmd_formats_check)
    val = sub.add_parser("validate", help="check scenario files against the scenario format "
                         "without running any agent; every problem, one line each "
                         "(FILE:LINE: key: message); exit 2 if any")
    val.add_argument("scenarios", nargs="*", default=None, metavar="FILE|DIR",
                     help="scenario files, or folders searched for *.toml at any depth "
                          "(default: [tool.faultsim] scenarios, else scenarios/)")
    _debug_flag(val)
    val.set_defaults(func=cmd_validate)
    scn = sub.add_parser("scenario", help="the scenario format")
    ssub = scn.add_subparsers(dest="scenario_command", required=True)
    sch = ssub.add_parser("schema", help="print the JSON Schema of scenario files (for "
                          "editors: a '#:schema PATH' comment on a file's first line)")
    _debug_flag(sch)
    sch.set_defaults(func=cmd_scenario_schema)
    frm = ssub.add_parser("from-messages", help="write a scenario from an Anthropic messages "
                          "list an agent keeps (a JSON list, or an object with 'messages')")
    frm.add_argument("file", metavar="FILE", help="the JSON file")
    frm.add_argument("--out", metavar="OUT", default=None,
                     help="the scenario file to write (default: print it)")
    frm.add_argument("--model", default=None, help="the scenario's model (default: the "
                     "file's 'model', else the format's default)")
    _services_flags(frm)
    _debug_flag(frm)
    frm.set_defaults(func=cmd_scenario_from_messages)
    rcd = ssub.add_parser("record", help="run an agent once against a real Messages "
                          "endpoint through a recording proxy on 127.0.0.1 and write what "
                          "happened as a scenario")
    rcd.add_argument("--agent", default=None, help="the agent factory: MODULE[:ATTR] or "
                     "FILE.py[:ATTR] (default: [tool.faultsim] agent, FAULTSIM_AGENT)")
    rcd.add_argument("--task", required=True, help="the task given to the agent")
    rcd.add_argument("--out", metavar="FILE", default=None,
                     help="the scenario file to write (default: print it); its name is the "
                          "scenario id the agent is given")
    rcd.add_argument("--upstream", metavar="URL", default=None,
                     help="the Messages endpoint to forward to (default: "
                          "$ANTHROPIC_BASE_URL, else https://api.anthropic.com)")
    rcd.add_argument("--model", default=None, help="the model the agent is told to use, "
                     "written to the scenario (default: the format's default model)")
    _services_flags(rcd)
    _debug_flag(rcd)
    rcd.set_defaults(func=cmd_scenario_record)
    rep = sub.add_parser("replay", help="re-run exactly the schedule of a counterexample's "
                         "token and show the trace around each kill")
    rep.add_argument("token", help="the token a report printed (fs1_...)")
    rep.add_argument("--agent", default=None,
                     help="replay on this agent factory instead of the token's (a fix)")
    rep.add_argument("--json", metavar="FILE", help="write the verdict as a JSON report")
    rep.add_argument("--timeout", type=float, default=None,
                     help="seconds an incarnation may run (default: as faultsim run's, "
                          "derived from the clean runs)")
    _debug_flag(rep)
    rep.set_defaults(func=cmd_replay)
    rpt = sub.add_parser("report", help="turn a JSON report (--json) into another form")
    rsub = rpt.add_subparsers(dest="report_command", required=True)
    rht = rsub.add_parser("html", help="the HTML page of a JSON report (what --html writes)")
    rht.add_argument("report", metavar="REPORT.json", help="a report faultsim run --json wrote")
    rht.add_argument("--out", metavar="FILE", default=None,
                     help="the page to write (default: REPORT.html beside the report)")
    _debug_flag(rht)
    rht.set_defaults(func=cmd_report_html)
    rmg = rsub.add_parser("merge", help="join shard reports (run --shard I/N --json) into "
                          "the whole run's report, timings aside")
    rmg.add_argument("reports", metavar="REPORT.json", nargs="+",
                     help="the reports of every shard of one run (any order)")
    rmg.add_argument("--json", metavar="FILE", help="write the merged report as JSON")
    rmg.add_argument("--html", metavar="FILE", help="write the merged report's HTML page")
    rmg.add_argument("--junit", metavar="FILE", help="write the merged report as JUnit XML "
                     "(as run --junit)")
    rmg.add_argument("--summary-md", metavar="FILE", help="append the merged report's "
                     "Markdown summary (as run --summary-md)")
    _debug_flag(rmg)
    rmg.set_defaults(func=cmd_report_merge)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        _project_defaults(ns)
    except UsageError as exc:
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # `--agent my_agent` finds my_agent.py in the current directory, as `python -m` would:
    # the `faultsim` script's own folder is what Python put first on the path instead
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        with _sigterm_unwinds():
            return ns.func(ns)
    except (UsageError, FileNotFoundError) as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AgentFinding as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: {exc}", file=sys.stderr)
        details = getattr(exc, "details", "")
        if details:  # the agent's own traceback and output, as pytest shows a test's
            print("\n" + details, file=sys.stderr)
        return EXIT_VIOLATION
    except HarnessError as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("faultsim: interrupted", file=sys.stderr)
        _exiting_now()
        return 130
    except Terminated:
        print("faultsim: terminated", file=sys.stderr)
        _exiting_now()
        return 128 + signal.SIGTERM
    except Exception as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: the run failed: {type(exc).__name__}: {exc} "
              "(--debug shows the traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
