"""A Claude Agent SDK agent as faultsim's backends see it (`backend.py`): the spec
`claude-agent-sdk:FILE.py:ATTR` loaded (`load`, also `loading.SPECS`' resolver), explored
as faultsim's report (`run`; `report.py` makes it) and a token replayed (`replay`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from ...settings.loading import CLAUDE_AGENT_SDK, load_callable
from ...pipeline.crashes import judge_state, landed
from ...pipeline.sweep import Shared
from ...scenario import Scenario, load_scenario
from ...schedule import ScheduleResult
from ...token import ReplayToken
from .control import KillPoint
from .incarnations import AgentRun
from .report import model_runs
from .sandbox import sandbox_root
from .sweep import Backend, Exploration, Verdict, explore, golden_run, write_points

if TYPE_CHECKING:
    from ...reports.report import ModelRun

CRASH_MODELS = ("process", "power")


def load(spec: str) -> AgentRun:
    """The coroutine an agent spec `claude-agent-sdk:FILE.py:ATTR` names."""
    return load_callable(spec.removeprefix(CLAUDE_AGENT_SDK))


def run(agent: str, scenario: Scenario, crash_models: Sequence[str], *, timeout: float,
        only: Callable[[KillPoint], bool] | None = None, writes: bool | None = None,
        progress: Callable[[str], None] | None = None) -> tuple[Exploration, list[ModelRun]]:
    """`faultsim run` for one scenario: explore under the crash models ("process",
    "power"), as faultsim's report."""
    models = tuple(m for m in CRASH_MODELS if m in crash_models)
    found = explore(load(agent), scenario, power="power" in models, only=only,
                    timeout=timeout, writes=writes, progress=progress,
                    leaving=lambda cut: model_runs(cut, agent, models, timeout=timeout))
    return found, model_runs(found, agent, models, timeout=timeout)


def replay(token: ReplayToken, *, agent: str | None = None,
           timeout: float = 60.0) -> ScheduleResult:
    """The clean run, the token's one crash and the one resume it names, judged."""
    from ...errors import UsageError

    if len(token.steps) != 1:
        raise UsageError("a Claude Agent SDK token names one crash; schedules of several "
                         "are not explored for this agent kind")
    step = token.steps[0]
    spec = agent or token.agent
    fn = load(spec)
    scenario = load_scenario(token.scenario)
    with sandbox_root(scenario.id) as root:
        golden, points, _ = golden_run(fn, scenario, root, timeout=timeout)
        if step.index > len(points):
            points = [*points, *(write_points(fn, scenario, root, len(points),
                                              timeout=timeout)[0] or [])]
        kp = next((p for p in points if p.index == step.index), None)
        if kp is None:
            raise UsageError(f"the token's kill point k{step.index} is not among this run's "
                             f"{len(points)}: the agent or the CLI changed since")
        backend = Backend(fn, scenario, root, golden, len(points), prefixes="messages",
                          power=token.crash_model == "power", timeout=timeout)
        kill = backend.crash(kp)
        if kill.missed is not None:  # a replay must reach its kill: no sweep says why not
            kill.reached = False
        landed(backend.where, kp, kill)
        states = backend.states(kp, kill)
        if step.order >= len(states):
            raise UsageError(f"{kp.id} left {len(states)} crash states on replay, the token "
                             f"names state {step.order + 1}")
        state = states[step.order]
        verdict = Verdict.of(judge_state(backend, Shared(golden, share=False), kp, kill,
                                         state, {m: step.order for m in state.models}))
    found = Exploration(scenario, golden, points, [verdict], kills_landed=1)
    (model_run,) = model_runs(found, spec, (token.crash_model,), timeout=timeout)
    model_run.seed = token.seed
    return ScheduleResult(model_run.verdicts[0], model_run)
