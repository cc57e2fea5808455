"""The explorer: `explore(make_agent, scenario)`, the public entry point of the in-process
mode, runs its phases in order (golden run, sweep of single crashes, pairs, the version
probe, the search of longer schedules); `survey` counts without crashing anything.

The work is done elsewhere: `pipeline/` (mode-neutral: incarnation, golden run, sweep
bookkeeping) and `inprocess/` (the pyfakefs sandbox and its executors). The names they
used to have here are re-exported below for callers of `faultsim.inprocess.explore`."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not

from ..agent import AgentEnv
from ..core.crashmodel import CRASH_MODELS, PAUSE
from ..errors import (AgentFailedCleanly, OverBudget, KillDidNotLand, NonDeterminismError,  # noqa: F401
                     StoreNeedsSubprocess, UsageError, WorkerDied)
from .counting import census, count_crash_states
from .forking import ForkAt, sweep_forking  # noqa: F401
from .pairs import sweep_pairs
from .probes import PROBE_VERSION, version_probe  # noqa: F401
from .replaying import sweep_replaying
from .sharding import state_owner
from .sandbox import SANDBOX, Explorer, KillAt, unwound_notes  # noqa: F401
from ..reports.interrupted import leaves
from ..killpoints import KillPoint
from ..pipeline.incarnation import Incarnation, IncarnationTimeout, world_signature  # noqa: F401
from ..settings.options import FIXED_TIMEOUT, ExploreOptions, select
from ..pipeline.sweep import (Earlier, Plan, ResumeResult, Sweep,  # noqa: F401
                             bounded_cuts, largest_write, schedule_violations)
from ..reports.report import ModelRun, Report
from ..scenario import Scenario

# Cut the pair stage's first crashes at the horizon too (--horizon, representative pairs:
# pairs.within_horizon). False: run them to their end, the long way tests compare with.
HORIZON_KEPT = True


def explore(make_agent: Callable[[AgentEnv], Any] | str, scenario: Scenario | str, *,
            crash_model: str | Iterable[str] | None = None, agent_name: str | None = None,
            only: Callable[[KillPoint], bool] | None = None,
            timeout: float | str | None = "auto",
            seed: str = "0", workers: int | None = None, equivalences: bool = True,
            convergence: bool = True,
            crashes: int | None = None, search: int | None = None,
            search_seconds: float | None = None,
            database: Any = None, shard: tuple[int, int] | None = None,
            coverage: str | None = None, per_class: int | None = None,
            horizon: int | None = None,
            progress: Callable[..., None] | None = None,
            plan: Callable[["Plan"], None] | None = None) -> Report:
    """Crash `make_agent`'s agent at every kill point of `scenario`, resume it, judge it.

    `crash_model` ("process", "power", "all" or a list) and `crashes` default to the
    scenario's fault profile (process and 2 when it has none). `crashes=2` also kills each resumed run at every kill point of its own
    course (crashes during recovery), exhaustively, with pruning of equal crash states;
    `crashes=1` explores single crashes only. Longer schedules
    (`crashes` > 2) are searched with hypothesis: `search` examples per crash model
    (default 200), at most `search_seconds`, shrunk to the fewest crashes and earliest
    points. `search=N` with `crashes=2` searches the pairs instead of enumerating them
    (for scenarios too long to enumerate). `database` is a hypothesis example database
    for the search. `only` narrows the first crash's kill points (a replay);
    `shard=(i, n)` resumes the distinct crash states a stable hash gives shard i (a
    deterministic split for CI matrices: every shard crashes at every kill point, the n
    shards partition the states, their resumed runs add up to the whole run's, pairs'
    too (with pairs every shard resumes every first crash state, reporting its own, and
    splits the second crash states); the version probe and the search run in shard 1).
    `coverage` ("exhaustive" or "representative") and `per_class` default to the
    scenario's fault profile: representative coverage crashes each kill-point class at
    its first and last occurrence and `per_class` seeded others, and every kill point of
    the first and last step (`faultsim.core.classes`); its report says what was left out.
    `horizon=H` cuts each resumed run past its H-th model request after recovery, at its
    first request equal to one the clean run made, and takes the rest of its course from
    the clean run's (a stated assumption, not a proof: docs/explanation/guarantees.md);
    in-process mode only, and not the pair stage's first crashes, which run to their end.
    `workers` is how many crash runs go at once (default: one
    per core; 0 runs them one after another in this process, replaying the prefix each
    time); `equivalences=False` resumes every distinct crash state instead of sharing
    verdicts between states a resumed run could not tell apart (slower; the verdicts are
    the same, which a test checks); `convergence=False` runs every resumed run to its
    end instead of stopping one where it reaches a state of the clean run at a model request
    and completing its verdict from the clean run's remainder (in process; the verdicts
    and reports are the same, which a property test checks); `timeout` is an incarnation's limit in seconds (None:
    none), by default ("auto") 10 times the slower clean incarnation, at least 3 s; a
    resumed run past it is reported hung, with where it was stuck; `progress(done, total, stage=...)` is
    called as kill points are judged. `plan(Plan)`, when given, is told before the sweep
    how many kill points and first crash states there are (one extra clean run counts
    them).

    `make_agent` may also be an agent spec (`"module:attr"`, `"FILE.py:ATTR"`,
    `"claude-agent-sdk:FILE.py:ATTR"`, ...): it then runs on the backend it needs
    (`faultsim.backends`: the mode its scenario's store needs, or its prefix's backend), as
    `faultsim run --agent SPEC` runs it; `scenario` may be a Scenario or its file.
    """
    if isinstance(scenario, (str, os.PathLike)):
        from ..scenario import load_scenario

        scenario = load_scenario(scenario)
    options = ExploreOptions(crash_model=crash_model, crashes=crashes, seed=seed,
                             timeout=timeout, workers=workers, shard=shard, only=only,
                             search=search, search_seconds=search_seconds, database=database,
                             equivalences=equivalences, convergence=convergence,
                             coverage=coverage, per_class=per_class, horizon=horizon,
                             mode="auto" if isinstance(make_agent, str) else "in-process")
    if isinstance(make_agent, str):
        from ..backends import Agent, explore as explore_on_backend

        return explore_on_backend(Agent(make_agent, name=agent_name), scenario, options,
                                  progress=progress, plan=plan)
    return explore_in_process(make_agent, scenario, options.resolve(scenario),
                              agent_name=agent_name, progress=progress, plan=plan)


def run(scenario: Scenario, options: ExploreOptions, *,
        make_agent: Callable[[AgentEnv], Any] | None = None, spec: str | None = None,
        agent_name: str | None = None, progress: Callable[..., None] | None = None,
        plan: Callable[["Plan"], None] | None = None) -> Report:
    """Explore `scenario` on the backend `faultsim.backends` chooses for the agent and the
    mode `options` ask (the in-process mode runs `make_agent`, or the factory `spec` names;
    subprocess mode and the Claude Agent SDK backend need `spec`, which they import in
    processes of their own)."""
    from ..backends import Agent, explore as explore_on_backend

    if spec is not None and spec.rstrip(":") == "langgraph":
        from ..settings.loading import langgraph_spec

        spec = langgraph_spec(spec, scenario)  # the mode the scenario names
        agent_name = spec if agent_name in (None, "langgraph", "langgraph:") else agent_name
    if make_agent is None and spec is None:
        raise UsageError(f"{scenario.path}: no agent to explore")
    return explore_on_backend(Agent(spec, make_agent, agent_name), scenario, options,
                              progress=progress, plan=plan)


def explore_in_process(make_agent: Callable[[AgentEnv], Any], scenario: Scenario,
                       options: ExploreOptions, *, agent_name: str | None = None,
                       progress: Callable[..., None] | None = None,
                       plan: Callable[["Plan"], None] | None = None) -> Report:
    """The in-process exploration, phase by phase, with resolved `options`."""
    name = agent_name or getattr(make_agent, "__module__", "agent")
    if PAUSE in options.models:  # its own stage, after the others (inprocess/pause.py)
        from dataclasses import replace

        from .pause import pause_run

        rest = tuple(m for m in options.models if m != PAUSE)
        report = explore_in_process(make_agent, scenario, replace(options, crash_model=rest),
                                    agent_name=name, progress=progress, plan=plan) \
            if rest else Report()
        report.runs.append(pause_run(make_agent, scenario, options, name, progress))
        return report
    models, crashes, shard = options.models, options.crashes, options.shard
    refused = options.pairs_shard_refusal(scenario.path)
    if refused is not None:
        raise UsageError(refused)
    workers = options.workers
    report = Report()
    runs: dict[str, ModelRun] = {}
    started = _real_time.real_perf_counter()
    # Ctrl-C or SIGTERM: the verdicts judged so far go up with it (faultsim.reports.interrupted)
    with leaves(lambda: report.runs or list(runs.values())), \
            Explorer(make_agent, scenario, agent_name=name, timeout=options.timeout,
                     seed=options.seed) as ex:
        ex.convergence = options.convergence
        ex.horizon = options.horizon
        golden = ex.golden()
        points = golden.kill_points()
        # Shards split crash states, not kill points (faultsim.inprocess.sharding): every
        # shard crashes at every kill point its coverage chooses and resumes the states
        # it owns. The choice is made here, from the clean run, before any crash.
        coverage = options.cover(points, golden.trace)
        # --horizon with a representative pair stage: the first crashes' kept runs are cut
        # at the horizon too (convergence.py, "The horizon"); exhaustive pairs and the
        # search run every kept run to its end, as before
        ex.horizon_kept = (HORIZON_KEPT and options.horizon is not None
                           and options.representative and crashes >= 2 and not options.search)
        chosen = select(points, options.only, None, coverage)
        runs = {m: ModelRun(scenario=scenario, agent=name, crash_model=m, kill_points=points,
                            explored=chosen, seed=options.seed, crashes=crashes,
                            timeout=options.timeout, timeout_seconds=ex.timeout,
                            shard=shard, coverage=coverage, horizon=options.horizon)
                for m in models}
        bounded = bounded_cuts(golden, list(runs.values()))
        sweep = Sweep(golden, runs, equivalences=options.equivalences,
                      keep_traces=crashes >= 2)
        pairs = crashes >= 2 and not (options.search and crashes == 2)
        if shard is not None:
            owner = state_owner(ex, chosen, models, shard)
            if pairs:  # every first crash resumed, only its own reported (PairSurvey)
                sweep.reports = owner
            else:
                sweep.owns = owner
        if plan is not None or options.budget is not None:
            counted = census(ex, points, models)
            forecast = _forecasts(
                counted, points, golden.trace, models, only=options.only,
                per_class=options.per_class, seed=options.seed,
                first="representative" if options.representative else "exhaustive",
                clean_seconds=ex.clean_cpu_seconds, known=coverage, horizon=options.horizon)
            if plan is not None:
                plan(Plan(scenario.id, len(points), len(chosen),
                          owner.counts if shard is not None  # type: ignore
                          else counted.counts_at(chosen), crashes,
                          ex.clean_seconds, ex.timeout,
                          largest_write(chosen, golden.trace),
                          torn_bounded=tuple(bounded), forecasts=forecast))
            if options.budget is not None:
                within_budget(scenario.path, forecast, options.budget, workers)
        golden_seconds = _real_time.real_perf_counter() - started
        sweep_started = _real_time.real_perf_counter()
        if workers > 0 and hasattr(os, "fork"):
            sweep_forking(ex, sweep, chosen, models, workers, progress)
        else:
            sweep_replaying(ex, sweep, chosen, models, progress)
        report.sweep_seconds += _real_time.real_perf_counter() - sweep_started
        report.golden_seconds += golden_seconds
        position = {p.id: n for n, p in enumerate(chosen)}
        if pairs:
            # Under --shard, second crash states are split by class as first ones are
            # (sharding.PairSurvey: why the owner takes the whole run's decisions). The
            # single-crash stage above resumed every first crash state (`Sweep.reports`:
            # only this shard's are reported), so every shard has every course and every
            # run a pair is composed from; each resumes only its own second crash states.
            # The depth-2 counts add up to the whole run's (tiny.toml, process: 181 + 178
            # resumed in two shards against 359; before, with pairs going with their first
            # crash's shard, 189 + 329), tests/test_shards.py checks it; the cost, each
            # shard's whole single-crash stage and a survey of every course, is measured
            # in docs/explanation/engine.md (shards).
            sweep_pairs(ex, sweep, models, position, workers, progress)
        # forked where the sweep forks: an agent that ends its process on resume ends a child
        probe = version_probe(ex, golden, forked=workers > 0 and hasattr(os, "fork")) \
            if options.first_shard else None
        seconds = _real_time.real_perf_counter() - started
        first = runs[models[0]]
        if probe is not None:
            first.probes.append(probe)
        for run_ in runs.values():
            # why no resumed run could be cut (engine.md)
            run_.convergence = ex.convergence_off
            run_.notes += unwound_notes(ex.unwound, ex.timeout)
            run_.verdicts.sort(key=lambda v: (position[v.kill_point.id], v.order))
            run_.seconds = seconds * len(run_.verdicts) / max(1, sum(len(r.verdicts)
                                                                    for r in runs.values()))
            report.runs.append(run_)
    exhaustive = 1 if options.search and crashes == 2 else min(crashes, 2)
    if crashes > exhaustive and options.first_shard:
        with leaves(lambda: report.runs):
            _search(make_agent, scenario, report, name, options, exhaustive + 1, progress)
    return report


def survey(make_agent: Callable[[AgentEnv], Any], scenario: Scenario, *,
           agent_name: str = "agent", timeout: float | None = FIXED_TIMEOUT, seed: str = "0"
           ) -> tuple[list[KillPoint], dict[str, int], tuple]:
    """The clean run's kill points, the first crash states they leave under each crash
    model and the forecast of a sweep's cost, without crashing anything (`faultsim
    list`)."""
    with Explorer(make_agent, scenario, agent_name=agent_name, timeout=timeout,
                  seed=seed) as ex:
        # a survey cuts no resumed run: the clean run's course, fingerprinted at each
        # model request for that (and long for a long run), is not recorded
        ex.convergence = False
        golden = ex.golden()
        points = golden.kill_points()
        counted = census(ex, points, list(CRASH_MODELS))
        # the forecast of the sweep `faultsim run` would make by the scenario's profile
        profile = scenario.profile
        return points, counted.counts, _forecasts(
            counted, points, golden.trace, list(profile.crash_models),
            per_class=getattr(profile, "per_class", None), seed=seed,
            first="representative" if getattr(profile, "coverage", None) == "representative"
            else "exhaustive", clean_seconds=ex.clean_cpu_seconds, fingerprinted=False)


def _search(make_agent, scenario, report: Report, name: str, options: ExploreOptions,
            min_crashes: int, progress) -> None:
    """Schedules beyond the exhaustive sweep, searched with hypothesis, per crash model."""
    from .session import Session
    from .search import search

    seed, timeout, max_crashes = options.seed, options.timeout, options.crashes

    for run in report.runs:
        if progress is not None:
            progress(0, 1, stage=f"search ({run.crash_model})")
        with Session(make_agent, scenario, crash_model=run.crash_model, seed=seed,
                     timeout=timeout, agent_name=name) as session:
            found = search(session, max_crashes=max_crashes, min_crashes=min_crashes,
                           examples=options.search or 200, seconds=options.search_seconds,
                           seed=seed, database=options.database)
        stats = run.depth(max_crashes)
        stats.searched += found.tried
        stats.after_convergence += found.after_convergence  # of the searched, here
        stats.seconds += found.seconds
        if found.failure is not None:
            verdict = found.failure.verdict
            (run.deep_failures if verdict.earlier else run.verdicts).append(verdict)
        if progress is not None:
            progress(1, 1, stage=f"search ({run.crash_model})")



def _forecasts(counted, points: list[KillPoint], trace, models: list[str], *, only=None,
               per_class: int | None = None, seed: str = "0", first: str = "exhaustive",
               clean_seconds: float | None, fingerprinted: bool = True,
               known: Any = None, horizon: int | None = None) -> tuple:
    """The single-crash sweep's forecast (pipeline/forecast.py) under each coverage, `first`
    first, narrowed as the run is (`only`: `--kill-point`; `horizon`: --horizon). A pair
    stage is not forecast. `known`: the run's own `classes.Coverage`, not classed again (a
    pass over every kill point's events)."""
    from ..core.classes import PER_CLASS, cover
    from ..pipeline.forecast import estimate

    if not clean_seconds:
        return ()
    out = []
    requests = sum(1 for e in trace if e.kind.startswith("model."))
    for mode in ("exhaustive", "representative"):
        coverage = known if known is not None and known.mode == mode else \
            cover(points, trace, mode, PER_CLASS if per_class is None else per_class, seed)
        chosen = select(points, only, None, coverage)
        out.append(estimate(mode, len(chosen), counted.classes_at(chosen, models),
                            clean_seconds, counted.events, fingerprinted,
                            len(chosen) / max(1, len(points)), horizon, requests))
    return tuple(sorted(out, key=lambda f: f.coverage != first))


def within_budget(where: Any, forecasts: tuple, budget: float, workers: int) -> None:
    """Stop before any crash run (OverBudget, exit 2) when the run's own forecast is over
    `budget` wall seconds, naming the coverage that fits; never a silent switch. Wall time
    is the forecast CPU over the crash runs that go at once (`workers`, at most the cores)."""
    from ..pipeline.forecast import duration

    if not forecasts:
        return
    cpus = os.cpu_count() or 1
    own, *others = forecasts
    wall = own.wall_seconds(workers, cpus)
    if wall <= budget:
        return
    fits = [f for f in others if f.wall_seconds(workers, cpus) <= budget]
    said = (f"{fits[0].coverage} coverage fits, about "
            f"{duration(fits[0].wall_seconds(workers, cpus))} ({fits[0].kill_points} kill "
            f"points): --coverage {fits[0].coverage}") if fits else (
        "no coverage fits (" + "; ".join(
            f"{f.coverage}: about {duration(f.wall_seconds(workers, cpus))}"
            for f in others) + ")" if others else "no coverage fits")
    raise OverBudget(f"{where}: the {own.coverage} sweep is forecast at about "
                     f"{duration(wall)} of wall time ({own.kill_points} kill points, "
                     f"{max(1, min(workers, cpus))} at once), over --budget {budget:g} s; "
                     f"{said}")

