"""The sweep of an agent command: two clean runs (traced, compared), one crash run per kill
point (killed at its boundary, the kill proven), the crash states it leaves under each
crash model, one resume per distinct state, each judged by faultsim's oracle, as
faultsim's report."""
from __future__ import annotations

import copy
import tempfile
from contextlib import ExitStack
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core.crashmodel import CrashState
from ..errors import UsageError
from ..killpoints import KillPoint
from ..judge.oracle import CrashRun, Golden, judge, unknown_version_refused
from ..pipeline.golden import COMMAND_ADVICE, CleanRun, golden_checked
from ..pipeline.probes import PROBE_VERSION, tamper_versions
from ..pipeline.incarnation import clean_limit, resumed_limit, world_signature
from ..reports.interrupted import leaves
from ..pipeline.crashes import (Found, Kill, Swept, landed, so_far, sweep, taken,
                                  verdicts)
from ..pipeline.sweep import ResumeResult
from ..reports.report import ModelRun, Report, ResumeSummary, Verdict
from ..scenario import Scenario
from ..core.tree import regular
from .launch import split
from .diagnosis import name
from .incarnation import Run, Services, incarnation
from .syscalls import Hold

HOLD = 0.3  # seconds a held call waits at its entry: the window for the kill
MODE = "subprocess"  # real processes: a token says so


@dataclass
class Exploration:
    scenario: Scenario
    agent: str
    golden: Golden
    points: list[KillPoint]
    runs: dict[str, ModelRun]
    kills_landed: int = 0
    crash_runs: int = 0
    resumes: int = 0
    states: int = 0
    seconds: float = 0.0
    clean: list[Run] = field(default_factory=list)
    held_again: int = 0  # crash runs retried holding every call of the target's kind
    pair_kills: int = 0  # of `kills_landed`, the second crashes' (`pairs.py`)
    firsts: list = field(default_factory=list)  # first crashes that passed (pairs.First)
    deep: list[Verdict] = field(default_factory=list)  # every pair's verdict, in order

    def report(self) -> Report:
        report = Report()
        report.runs.extend(self.runs.values())
        return report


def hold_for(point: KillPoint, golden: Run, calls: dict[int, tuple[str, int]],
              paths: tuple[str, ...] = ()) -> Hold | None:
    """What strace must hold for a kill after event `point.index`: the entry of the next
    event when that is a call of the agent's (`calls`: event index -> (syscall, the
    how-manieth of its thread)), or its exit after the last event; None when the boundary
    is the fake's or a service's (faultsim holds those itself)."""
    t = point.index
    events = golden.events
    if t >= 1 and not events[t - 1].kind.startswith("fs."):
        return None  # killed in place, at the world's event
    if t == len(events):
        return Hold("exit_group", 1, HOLD)
    if events[t].kind.startswith("fs.") and t + 1 in calls:
        name, ordinal = calls[t + 1]
        return Hold(name, ordinal, HOLD, paths)
    return None


def explore(command: str, scenario: Scenario, *, crash_models: Sequence[str] = ("process",),
            only: Callable[[KillPoint], bool] | None = None, timeout: Any = "auto",
            seed: str = "0", services: Services | None = None,
            progress: Callable[[str], None] | None = None, agent: str | None = None,
            base: Path | None = None, share: bool = True,
            probe: bool | None = None, crashes: int = 1,
            second: Callable[[KillPoint], bool] | None = None,
            pairs: Callable[..., None] | None = None) -> Exploration:
    """Kill the command at each kill point of its clean run (or those `only` keeps),
    resume it from every crash state each crash model leaves, judge each resume.
    `share=False` resumes every state, even one equal to a state resumed already. `probe`
    (default: when every kill point is explored) adds the version probe (P4). The loop
    over kill points is the pipeline's (`faultsim.pipeline.crashes`, the Claude Agent SDK
    adapter's too); this module gives it the command's crash runs, states and resumes.
    `crashes=2` adds the pairs (`pairs.py`): each distinct first crash state that passed,
    resumed and killed again at every kill point of its course (or those `second` keeps),
    by `pairs` (`pairs.sweep_pairs`; `pairs.explore` passes it)."""
    if crashes == 2 and pairs is None:
        raise UsageError("crashes=2: pairs are swept by faultsim.command.explore "
                         "(command.pairs.explore), which passes them")
    if crashes not in (1, 2):
        raise UsageError(f"crashes={crashes}: an agent run as a command is explored with "
                         "one or two crashes per schedule")
    argv = split(command)
    agent = agent or (command if command.startswith("cmd:") else "cmd:" + command)
    if services is None:
        services = default_services()
    if scenario.services and services is None:
        raise UsageError(f"{scenario.path}: its services are served to a command over HTTP "
                         "by faultsim.world.wire, which this faultsim lacks")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"faultsim-{scenario.id}-") as tmp, \
            ExitStack() as stack:
        base = base or Path(tmp)
        golden, clean = clean_runs(argv, scenario, base, timeout=timeout, seed=seed,
                                   services=services)
        first = clean[0]
        points = kill_points(golden)
        chosen = [p for p in points if only is None or only(p)]
        limit = resumed_limit(timeout, [r.seconds for r in clean])
        calls, paths = filtered_calls(argv, scenario, base, first, limit, seed, services)
        runs = {m: ModelRun(scenario=scenario, agent=agent, crash_model=m, kill_points=points,
                            explored=chosen, seed=seed, mode=MODE, timeout=timeout,
                            timeout_seconds=limit,
                            # as in subprocess mode (real/explore.py): no resumed run is cut
                            convergence="not tried for an agent in processes of its own: "
                                        "its memory is in another process")
                for m in crash_models}
        result = Exploration(scenario, agent, golden, points, runs, clean=clean)
        backend = _Backend(argv, scenario, base, first, calls, paths, limit, seed,
                           services, result, crash_models)
        swept = Swept()
        # Ctrl-C or SIGTERM: the verdicts judged so far go up with it (faultsim.reports.interrupted)
        stack.enter_context(leaves(lambda: so_far(runs, swept, golden, backend.engine_point)))
        sweep(backend, chosen, golden, share=share, progress=progress, swept=swept)
        verdicts(runs, taken(swept), golden, backend.engine_point)
        result.kills_landed += len(swept.landed)
        result.resumes += swept.resumes
        result.states += len(swept.judged)
        if crashes > 1:
            for j in swept.judged:
                if not j.violations:
                    (model,) = j.orders
                    crash, world = j.kill.run, j.kill.world
                    result.firsts.append(First(
                        model, j.point, j.orders[model], j.found.state, crash, world,
                        (j.found.state.digest(), world_signature(world),
                         files_key(crash.rest))))
        if crashes > 1 and pairs is not None:
            pairs(argv, scenario, base, golden, chosen, runs, result, limit, seed,
                        services, second=second, share=share, progress=progress)
        if probe if probe is not None else only is None:
            probe_verdict = _version_probe(argv, scenario, base, golden, points, first,
                                           calls, paths, limit, seed, services, result)
            if probe_verdict is not None:
                runs[crash_models[0]].probes.append(probe_verdict)
        result.seconds = time.monotonic() - started
        for run in runs.values():
            run.seconds = result.seconds
        return result


@dataclass
class First:
    """A first crash whose resume passed: where, which state, the run it killed and the
    world it left; `key` (state, world, HOME/TMPDIR) is equal for crashes whose resumed
    runs are the same run."""

    model: str
    point: KillPoint
    order: int
    state: CrashState
    crash: Run
    world: Any
    key: tuple


def files_key(files: dict) -> str:
    return CrashState.of("process", "", files).digest()


def clean_runs(argv: list[str], scenario: Scenario, base: Path, *, timeout: Any = "auto",
               seed: str = "0", services: Services | None = None
               ) -> tuple[Golden, list[Run]]:
    """The two clean runs, checked as every backend checks them (they end well, give the
    expected answer, keep state, agree event by event; when they part, where, in the
    agent's terms), and the golden run the oracle judges against."""
    clean: list[Run] = []

    def clean_run(n: int) -> CleanRun:
        world = scenario.build_world()
        run = incarnation(argv, scenario, world, base, work={}, rest={},
                          timeout=clean_limit(timeout), seed=seed, services=services)
        clean.append(run)
        return CleanRun(run.outcome, run.error, run.events, run, world=world,
                        files=regular(run.work), left_behind=tuple(run.left_behind),
                        details=run.stderr)

    golden_checked(scenario, clean_run, str(base / "sandbox" / "work"), name,
                   COMMAND_ADVICE)
    first = clean[0]
    golden = Golden.of(first.outcome, first.world, regular(first.work), first.events,
                       scenario.checkpoint)
    return golden, clean


def kill_points(golden: Golden) -> list[KillPoint]:
    """The engine's kill points of the clean run, but those inside a write: a write(2) is
    the unit a process kill leaves whole or not begun (torn bytes are the power model's)."""
    return [p for p in golden.kill_points() if not p.torn]


def filtered_calls(argv: list[str], scenario: Scenario, base: Path, first: Run, limit: Any,
              seed: str, services: Services | None, start: tuple | None = None
              ) -> tuple[dict[int, tuple[str, int]], tuple[str, ...]]:
    """How a crash run holds the call after event t: (event index -> (syscall, its
    ordinal in its thread), the paths strace -P keeps). One more clean run, traced only on
    the paths the clean run's changing calls named, counts the calls as a crash run traced
    so will (strace counts only the calls it traces); used when it met the same events,
    else the unfiltered counts of the first clean run (then a crash run whose count
    another thread met first is run again holding every call of its kind). `start`:
    (workdir, HOME/TMPDIR, world) a resumed run starts from (`first` is its course),
    else a clean run's."""
    paths = tuple(sorted(first.named))
    if not paths:
        return dict(first.calls), ()
    work, rest, world = _start(scenario, start)
    again = incarnation(argv, scenario, world, base, work=work, rest=rest,
                        timeout=limit, seed=seed, services=services, paths=paths)
    if [e.signature() for e in again.events] != [e.signature() for e in first.events]:
        return dict(first.calls), ()
    return dict(again.calls), paths


def _start(scenario: Scenario, start: tuple | None) -> tuple[dict, dict, Any]:
    """A run's start: a clean run's (empty sandbox, a new world), or `start`'s (workdir,
    HOME/TMPDIR, a copy of its world: the world a kill left is resumed many times)."""
    if start is None:
        return {}, {}, scenario.build_world()
    work, rest, world = start
    return work, rest, copy.deepcopy(world)


def killed_run(argv: list[str], scenario: Scenario, base: Path, point: KillPoint,
               hold: Hold | None, limit: Any, seed: str, services: Services | None,
               result: Exploration, start: tuple | None = None) -> tuple[Run, Any]:
    """The crash run at `point`, its kill proven landed (`crash_run`, then the pipeline's
    landed check: the pairs' and the version probe's)."""
    kill = crash_run(argv, scenario, base, point, hold, limit, seed, services, result,
                     start)
    landed(f"{scenario.path}: ", point, kill)
    return kill.run, kill.world


def crash_run(argv: list[str], scenario: Scenario, base: Path, point: KillPoint,
              hold: Hold | None, limit: Any, seed: str, services: Services | None,
              result: Exploration, start: tuple | None = None) -> Kill:
    """The crash run at `point`, for the landed check (`faultsim.pipeline.crashes`). A
    held call is the how-manieth of its thread's calls of its kind in the clean run; when
    the kill finds the run elsewhere (another thread's count), it is run again holding
    every call of that kind. `start`: a resumed run's start (a second crash), else a clean
    run's."""
    attempts = [hold] + ([Hold(hold.syscall, None, 3 * hold.seconds)] if hold and hold.when
                         else [])
    for attempt in attempts:
        work, rest, world = _start(scenario, start)
        crash = incarnation(argv, scenario, world, base, work=work, rest=rest,
                            target=point.index, hold=attempt, timeout=limit, seed=seed,
                            services=services)
        result.crash_runs += 1
        kill = Kill(crash, world, reached=crash.killed, landed=crash.landed,
                    met=f"{len(crash.events)} events of the clean run's "
                        f"{len(result.golden.trace)}", error=crash.error,
                    why=f"the kill {crash.where} did not land: "
                        f"{crash.proof or 'the process group outlived SIGKILL'}")
        if not crash.killed:
            return kill
        if crash.landed:
            result.held_again += attempt is not hold
            return kill
    return kill


@dataclass
class _Backend:
    """The command as the pipeline's kill-point loop sees it (`crashes.Backend`)."""

    argv: list[str]
    scenario: Scenario
    base: Path
    first: Run
    calls: dict
    paths: tuple[str, ...]
    limit: Any
    seed: str
    services: Services | None
    result: Exploration
    crash_models: Sequence[str]

    @property
    def where(self) -> str:
        return f"{self.scenario.path}: "

    def crash(self, point: KillPoint) -> Kill:
        return crash_run(self.argv, self.scenario, self.base, point,
                         hold_for(point, self.first, self.calls, self.paths), self.limit,
                         self.seed, self.services, self.result)

    def states(self, point: KillPoint, kill: Kill) -> list[Found]:
        found = []
        if "process" in self.crash_models:
            found.append(CrashState.of("process", "every completed operation",
                                       kill.run.work))
        if "power" in self.crash_models:
            found += kill.run.model.power_states(
                powersafe=self.scenario.profile.powersafe_overwrite)
        return [Found(s, (s.model,), f"{s.model}: {s.persisted}") for s in found]

    def key(self, point: KillPoint, kill: Kill, found: Found) -> tuple[CrashState, str]:
        # The state's bytes, scoped to its kill point: equal files and a copy of the same
        # world start the same (deterministic) resume, so its verdict is theirs (the
        # process state is the power model's "everything persisted", for one); another
        # point's world differs, so its states are never shared with this one's.
        return found.state, point.id

    def resume(self, point: KillPoint, kill: Kill, found: Found) -> ResumeResult:
        return resumed_result(self.argv, self.scenario, self.base, self.result.golden,
                              kill.world, kill.run, point, found.state, self.limit,
                              self.seed, self.services)

    def engine_point(self, point: KillPoint) -> KillPoint:
        return point


def resumed_result(argv: list[str], scenario: Scenario, base: Path, golden: Golden,
                   killed: Any, crash: Run, point: KillPoint, state: CrashState, limit: Any,
                   seed: str, services: Services | None) -> ResumeResult:
    """One resumed run from `state`, judged by the resume guards (`ResumeResult.of_run`,
    the Claude Agent SDK adapter's too): what equal states share (`Shared`)."""
    crash_run, resumed = _resumed_run(argv, scenario, base, killed, crash, point, state,
                                      limit, seed, services)
    return ResumeResult.of_run(golden, crash_run, resumed.first_position, resumed.seconds)


def resume(argv: list[str], scenario: Scenario, base: Path, golden: Golden, killed: Any,
            crash: Run, point: KillPoint, state: CrashState, limit: Any, seed: str,
            services: Services | None, earlier: tuple[KillPoint, ...] = ()
            ) -> tuple[list, CrashRun, Run]:
    """One resumed run from `state` after the crashes `earlier` and `point`, judged by
    every guard (the pairs' and the version probe's)."""
    crash_run, resumed = _resumed_run(argv, scenario, base, killed, crash, point, state,
                                      limit, seed, services, earlier)
    return judge(golden, crash_run), crash_run, resumed


def _resumed_run(argv: list[str], scenario: Scenario, base: Path, killed: Any, crash: Run,
                 point: KillPoint, state: CrashState, limit: Any, seed: str,
                 services: Services | None, earlier: tuple[KillPoint, ...] = ()
                 ) -> tuple[CrashRun, Run]:
    world = copy.deepcopy(killed)
    resumed = incarnation(argv, scenario, world, base, work=state.as_dict(), rest=crash.rest,
                          timeout=limit, seed=seed, services=services, traced=False)
    crash_run = CrashRun(kill_points=[*earlier, point], state=state, world=world,
                         outcome=resumed.outcome, error=resumed.error,
                         timed_out=resumed.timed_out, final=regular(resumed.work),
                         left_behind=resumed.left_behind,
                         resume_positions=[] if resumed.first_position is None
                         else [resumed.first_position])
    return crash_run, resumed


def _version_probe(argv: list[str], scenario: Scenario, base: Path, golden: Golden,
                   points: list[KillPoint], first: Run, calls: dict,
                   paths: tuple[str, ...], limit: Any, seed: str,
                   services: Services | None, result: Exploration) -> Verdict | None:
    """P4, as in the other modes: the crash state at the clean run's middle kill point
    with every checkpoint rewritten with a version no release can know must be refused
    loudly (a failed run) and left untouched. None when there is none to rewrite."""
    if not points:
        return None
    middle = min(points, key=lambda p: abs(p.index - len(golden.trace) // 2))
    crash, world = killed_run(argv, scenario, base, middle,
                          hold_for(middle, first, calls, paths), limit, seed, services,
                          result)
    changed = tamper_versions(crash.work, golden.checkpoint)
    if not changed:
        return None
    point = KillPoint(middle.index, None, "version-probe", "probe-unknown-version",
                      f"#{middle.index}, every checkpoint rewritten with version "
                      f"{PROBE_VERSION}")
    state = CrashState.of("process", f"checkpoint version set to {PROBE_VERSION}",
                          {**crash.work, **changed})
    before = copy.deepcopy(world)
    _violations, crash_run, _resumed = resume(argv, scenario, base, golden, world, crash,
                                               point, state, limit, seed, services)
    after = crash_run.world
    applied = len(after.ledger.applied()) - len(before.ledger.applied())
    asked = (sum(1 for q in after.model.requests if q.ok)
             - sum(1 for q in before.model.requests if q.ok))
    violation = unknown_version_refused(crash_run, PROBE_VERSION, changed, applied, asked)
    violations = [violation] if violation is not None else []
    return Verdict(point, "process", "a checkpoint from a future release", violations,
                   state, ResumeSummary.of(crash_run) if violations else None, golden, 0)


def default_services() -> Services | None:
    """The scenario services' loopback server (faultsim.world.wire), where it exists."""
    try:
        from ..world.wire import serve_services  # type: ignore[import-not-found]
    except ImportError:
        return None
    return serve_services
