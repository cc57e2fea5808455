"""Replaying a subprocess counterexample from its token: exactly its schedule, on real
processes killed by SIGKILL, judged as the sweep judged it.

One fork server. The clean run gives the first incarnation's kill points; each crash of
the schedule is a child that runs its incarnation (the first, or one resumed from the
state the previous crash left) and SIGKILLs itself at the token's place; between crashes,
a clean resume from that state gives the next incarnation's course (its kill points). The
last state is resumed and judged. A place that is no kill point of this agent's run (the
agent changed) is said so, naming the crash."""
from __future__ import annotations

from contextlib import ExitStack

from ..core.crashmodel import process_state
from ..errors import KillDidNotLand, UsageError, WorkerDied
from ..pipeline.sweep import Earlier, Sweep, schedule_violations
from ..reports.report import ModelRun, Verdict
from ..scenario import load_scenario
from ..schedule import ScheduleResult
from ..token import ReplayToken
from .crashes import one_crash
from .explore import redis_for
from .golden import golden_of
from .judging import judged_resume
from .pool import ForkServers, ServerFailed


def replay_subprocess(token: ReplayToken, agent: str | None = None,
                      timeout: float | str | None = "auto") -> ScheduleResult:
    """Re-run the token's schedule in subprocess mode, on the token's agent or on `agent`
    (an importable spec, e.g. a fixed version), and judge it."""
    if token.crash_model not in ("process", "pause"):
        raise UsageError(f"the replay token's crash model is {token.crash_model!r}: subprocess "
                         "mode crashes processes and pauses them only")
    scenario = load_scenario(token.scenario)
    agent = agent or token.agent
    downtime = scenario.profile.downtime
    with ExitStack() as stack:
        redis_url = redis_for(stack, scenario)
        try:
            pool = stack.enter_context(ForkServers(agent, scenario.path, workers=1,
                                                   seed=token.seed, timeout=timeout,
                                                   redis_url=redis_url))
        except ServerFailed as exc:
            raise WorkerDied(f"{scenario.path}: {exc}") from None
        golden = golden_of(pool, scenario)
        points = golden.kill_points()
        if token.crash_model == "pause":
            return _replay_pause(pool, scenario, golden, token, agent)
        run = ModelRun(scenario=scenario, agent=agent, crash_model="process",
                       kill_points=points, explored=[], seed=token.seed,
                       crashes=len(token.steps), mode="subprocess")
        trace, start, earlier = golden.trace, None, []
        for k, step in enumerate(token.steps, 1):
            here = {(p.index, p.offset): p for p in golden.kill_points(trace)}
            point = here.get((step.index, step.offset))
            if point is None:
                who = "the clean run" if k == 1 else f"resumed run {k - 1}"
                raise KillDidNotLand(
                    f"{token.scenario}: crash {k} of the replay token (#{step.index}"
                    f"{'' if step.offset is None else f' +{step.offset} bytes'}) is not a kill "
                    f"point of {who} of {agent} (its course has {len(trace)} events)")
            sweep = Sweep(golden, {"process": run}, earlier=tuple(earlier))
            world, files = one_crash(pool, sweep, point, start, downtime, tag=("replay", k))
            state = process_state(files)[0]
            if k == len(token.steps):
                break
            course = judged_resume(pool, scenario, sweep, point, state, world,
                                   keep_trace=True).events
            earlier.append(Earlier(point, 0, state.persisted, tuple(course)))
            trace, start = list(course), (state.as_dict(), world)
        if k == 1:
            run.explored = [point]
        result = judged_resume(pool, scenario, sweep, point, state, world)
        violations = schedule_violations(golden, sweep.schedule(point), state, result, [])
        verdict = Verdict(point, "process", state.persisted, violations, state,
                          result.summary, golden, 0, earlier=tuple(earlier),
                          resumed_at=result.first_position)
    return ScheduleResult(verdict, run)


def _replay_pause(pool: ForkServers, scenario, golden, token: ReplayToken,
                  agent: str) -> ScheduleResult:
    """One pause schedule, as the token names it (paused after the clean run's event
    `index`, woken where its `order` says): the same job as the sweep's, judged alike."""
    from ..pipeline.pause import Wake, judge_pause, pause_points, verdict_of
    from .pause import pause_job, run_of

    step = token.steps[0]
    points = golden.kill_points()
    point = next((p for p in pause_points(points) if p.index == step.index), None)
    if point is None:
        raise UsageError(f"{scenario.path}: the token pauses after event #{step.index}, "
                         "which is no boundary kill point of this clean run")
    wake = Wake.of_order(step.order)
    job = pause_job(point, wake, scenario.profile.downtime)
    r = run_of(point, wake, pool.run([job])[job["id"]], scenario)
    if wake.kind != "end" and not r.woke:
        raise KillDidNotLand(f"{point.id}: the new incarnation's {wake.label} never came "
                             "in the replay: the agent is not deterministic across runs")
    verdict = verdict_of(r, judge_pause(golden, r), golden)
    run = ModelRun(scenario=scenario, agent=agent, crash_model="pause", kill_points=points,
                   explored=[point], seed=token.seed, crashes=1, mode="subprocess",
                   timeout_seconds=pool.timeout)
    run.verdicts.append(verdict)
    run.judged = 1
    return ScheduleResult(verdict, run)
