"""The sweep in subprocess mode: every incarnation is a real process on a real directory.

The pipeline is the in-process one (golden run, kill points, crash, resume, judge with the
same oracle); what differs is who does the work. A golden run and each crash run are
children of a fork server; a crash run's child SIGKILLs itself at its kill point and the
server reads what is left on disk (and in Redis). Every kill is counted: a crash run whose
child did not die by SIGKILL at its point is an error, never a pass. Equal crash states
(same files, same world) are resumed once.

Schedules of one or two crashes (each resumed run killed again at every kill point of its
own course) under the process model, and the version probe (P4): a power loss cannot be
staged on a real file system from user space (faultsim's own model of it runs in-process).

Its pieces: `golden` (the clean run), `crashes` (the kills), `judging` (resume and judge
each distinct crash state), `pairs` (two crashes), `probes` (P4), `jobs` (the fork
servers' messages). May import them, `pipeline/`, the oracle and `pool`.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

import freezegun.api as _real_time

# the errors of this mode, imported from here by tests and users
from ..errors import KillDidNotLand, SubprocessModeError, UsageError, WorkerDied  # noqa: F401
from ..reports.interrupted import leaves
from ..core.crashmodel import PAUSE
from ..killpoints import KillPoint
from ..model import sdk
from ..settings.options import FIXED_TIMEOUT, ExploreOptions, select
from ..pipeline.sweep import Plan, Sweep, bounded_cuts, largest_write
from ..reports.report import ModelRun, Report
from ..scenario import Scenario
from .crashes import Target, crash_targets
from .golden import golden_of
from .judging import judge_states
from .pairs import explore_pairs
from .pool import ForkServers, ServerFailed
from .probes import version_probe
from ..pipeline.pause import pause_points


def explore_subprocess(agent: str, scenario: Scenario, *, agent_name: str | None = None,
                       only: Callable[[KillPoint], bool] | None = None,
                       timeout: float | str | None = "auto", seed: str = "0",
                       workers: int = 1,
                       shard: tuple[int, int] | None = None, fork_server: bool = True,
                       crash_model: Any = None, crashes: int | None = None,
                       progress: Callable[..., None] | None = None,
                       plan: Callable[[Plan], None] | None = None,
                       equivalences: bool = True, stats: dict | None = None,
                       coverage: str | None = None, per_class: int | None = None) -> Report:
    """`agent` is an importable spec (MODULE[:ATTR] or FILE.py[:ATTR]): the fork servers
    import it themselves. `crashes=2` also kills each resumed run at every kill point of
    its own course (crashes during recovery; None or 1: single crashes). The version probe
    (P4) runs with every full run (no `only`, shard 1). `stats`, when given, receives
    counts (kills landed, resumes, pairs, seconds) for benchmarks and tests."""
    options = ExploreOptions(crash_model=crash_model or "process",
                             crashes=1 if crashes is None else crashes, seed=seed,
                             timeout=timeout, workers=workers, shard=shard, only=only,
                             equivalences=equivalences, mode="subprocess",
                             coverage=coverage, per_class=per_class)
    return explore_resolved(agent, scenario, options.resolve(scenario),
                            agent_name=agent_name, progress=progress, plan=plan,
                            fork_server=fork_server, stats=stats)


def explore_resolved(agent: str, scenario: Scenario, options: ExploreOptions, *,
                     agent_name: str | None = None,
                     progress: Callable[..., None] | None = None,
                     plan: Callable[[Plan], None] | None = None, fork_server: bool = True,
                     stats: dict | None = None) -> Report:
    """The subprocess-mode exploration, with resolved `options`."""
    workers, seed, timeout = options.workers or 1, options.seed, options.timeout
    only, shard, equivalences = options.only, options.shard, options.equivalences
    crashes = options.crashes
    if crashes > 2:
        raise SubprocessModeError(
            f"{scenario.path}: subprocess mode enumerates schedules of at most 2 crashes, "
            f"not {crashes}: the search of longer schedules runs in-process")
    refused = options.pairs_shard_refusal(scenario.path)
    if refused is not None:
        raise UsageError(refused)
    sdk.check()  # an unserved anthropic refused in one line here, not in each fork server
    report = Report()
    run: ModelRun | None = None
    started = _real_time.real_perf_counter()
    # Ctrl-C or SIGTERM: the verdicts judged so far go up with it (faultsim.reports.interrupted)
    with leaves(lambda: [run] if run is not None else []), ExitStack() as stack:
        redis_url = redis_for(stack, scenario)
        try:
            pool = stack.enter_context(ForkServers(agent, scenario.path, workers=workers,
                                                   seed=seed, timeout=timeout,
                                                   fork_server=fork_server,
                                                   redis_url=redis_url))
        except ServerFailed as exc:
            raise WorkerDied(f"{scenario.path}: {exc}") from None
        golden = golden_of(pool, scenario)
        points = golden.kill_points()
        # the coverage's choice (from the clean run); a shard crashes at every one of its
        # points and judges the crash states it owns (judging.owned): crash states are
        # known only by killing, and states, not kill points, are what the shards share
        coverage = options.cover(points, golden.trace)
        chosen = select(points, only, None, coverage)
        name = agent_name or agent
        if PAUSE in options.models:
            _pause(pool, scenario, golden, points, options, name, report, progress, stats)
            if "process" not in options.models:
                report.golden_seconds += _real_time.real_perf_counter() - started
                return report
        run = ModelRun(scenario=scenario, agent=name, crash_model="process",
                       kill_points=points, explored=chosen, seed=seed, crashes=crashes,
                       mode="subprocess", timeout=timeout, timeout_seconds=pool.timeout,
                       shard=shard, coverage=coverage,
                       # convergence compares the agent's memory, which lives in the
                       # subprocess here and is not read (engine.md): every resumed run
                       # goes to its end
                       convergence="not tried in subprocess mode: the agent's memory is in "
                                   "another process")
        bounded = bounded_cuts(golden, [run])
        sweep = Sweep(golden, {"process": run}, equivalences=False, keep_traces=crashes >= 2)
        if plan is not None:
            plan(Plan(scenario.id, len(points), len(chosen), {"process": len(chosen)},
                      crashes, timeout=pool.timeout,
                      largest_write=largest_write(chosen, golden.trace),
                      torn_bounded=tuple(bounded)))
        golden_seconds = _real_time.real_perf_counter() - started
        first = Target((), sweep, chosen)
        # with a pair stage, a shard judges every first crash state, reporting its own:
        # its pairs need every first crash's course (pairs.explore_pairs, `shard`)
        landed = _sweep(pool, scenario, [first], progress, drive=fork_server,
                        equivalences=equivalences, shard=shard, report_only=crashes >= 2)
        position = {p.id: n for n, p in enumerate(chosen)}
        run.verdicts.sort(key=lambda v: position[v.kill_point.id])
        pairs_landed = 0
        if crashes >= 2:
            pairs_landed = explore_pairs(pool, scenario, first, chosen, progress,
                                         fork_server, equivalences, shard)
        if only is None and (shard is None or shard[0] == 1):
            probe = version_probe(pool, scenario, golden)
            if probe is not None:
                run.probes.append(probe)
        if pool.unwatched:  # said, never a silent pass (faultsim.real.helpers)
            run.notes.append(f"a process the agent started ran unwatched ({pool.unwatched}): "
                             "its writes outside the workdir failed (read-only) but are "
                             "not reported")
        run.seconds = _real_time.real_perf_counter() - started
        report.runs.append(run)
        report.golden_seconds += golden_seconds
        report.sweep_seconds += run.seconds - golden_seconds
        if stats is not None:
            stats.update(kills_landed=landed, crash_states=len(run.verdicts),
                         resumed=run.judged, seconds=run.seconds - golden_seconds,
                         pair_kills_landed=pairs_landed,
                         pairs_explored=run.depth(2).explored if crashes >= 2 else 0,
                         pairs_resumed=run.depth(2).resumed if crashes >= 2 else 0)
    return report


def _pause(pool: ForkServers, scenario: Scenario, golden: Any, points: list[KillPoint],
           options: ExploreOptions, name: str, report: Report, progress, stats) -> None:
    """The pause model's run (`real.pause`), on the clean run the process model uses. Its
    points are chosen as the in-process pause model chooses them (`--kill-point`,
    `--coverage`, `--shard` by kill point): no verdict is shared between schedules, so a
    shard's schedules are the whole run's at its points."""
    from .pause import pause_stage

    started = _real_time.real_perf_counter()
    coverage = options.cover(points, golden.trace)
    chosen = select(points, options.only, options.shard, coverage)
    run = ModelRun(scenario=scenario, agent=name, crash_model=PAUSE, kill_points=points,
                   explored=pause_points(chosen), seed=options.seed, crashes=1,
                   mode="subprocess", timeout=options.timeout,
                   timeout_seconds=pool.timeout, shard=options.shard,
                   shard_by="kill point", coverage=coverage,
                   convergence="not tried in subprocess mode: the agent's memory is in "
                               "another process")
    found = pause_stage(pool, scenario, golden, points, chosen, run, progress)
    run.seconds = _real_time.real_perf_counter() - started
    report.runs.append(run)
    report.sweep_seconds += run.seconds
    if stats is not None:
        stats.update(pause_stops=found.stops, pause_schedules=found.schedules,
                     pause_left=found.left, pause_judged=run.judged)


def redis_for(stack: ExitStack, scenario: Scenario) -> Callable[[int], str] | None:
    """For a Redis store: a server of faultsim's own on a free loopback port, and one
    database per fork server (each judges its crash states in its own)."""
    if scenario.store.kind != "redis":
        return None
    from .redis_server import RedisServer

    server = stack.enter_context(RedisServer())
    return lambda slot: f"redis://127.0.0.1:{server.port}/{slot % 16}"


def survey_subprocess(agent: str, scenario: Scenario, *, timeout: float | None = FIXED_TIMEOUT,
                      seed: str = "0") -> list[KillPoint]:
    """The clean run's kill points, from real processes (`faultsim list`)."""
    with ExitStack() as stack:
        redis_url = redis_for(stack, scenario)
        pool = stack.enter_context(ForkServers(agent, scenario.path, workers=1, seed=seed,
                                               timeout=timeout, redis_url=redis_url))
        return golden_of(pool, scenario).kill_points()


def _sweep(pool: ForkServers, scenario: Scenario, targets: list[Target], progress,
           drive: bool = True, equivalences: bool = True, stage: str | None = None,
           shard: tuple[int, int] | None = None, report_only: bool = False) -> int:
    """Crash each target at every one of its points, then resume each distinct crash state
    once (over all targets: a state equal to one judged shares its verdict; under `shard`,
    the states it owns, or with `report_only` every state, reporting those it owns).
    Returns the kills landed."""
    landed = crash_targets(pool, targets, drive, scenario.profile.downtime)
    judge_states(pool, scenario, targets, progress, equivalences, stage, shard=shard,
                 report_only=report_only)
    return landed

