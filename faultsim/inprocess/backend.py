"""The in-process backend behind `faultsim.backends`: the agent's Python factory run under
pyfakefs in this process (`explore.explore_in_process`), every crash model, any number of
crashes, and the three jobs only this process can do: the pytest plugin's kill-point items
(`pointwise`), sessions for hypothesis tests (`session`) and the sandbox `faultsim formats`
records and checks a checkpoint corpus in (`formats_job`). Loaded by name
(`backends.BACKENDS`); no front end imports it.

May import: the rest of `inprocess/` and what it may import; never another backend
(`real/`, `command/`, an adapter's backend)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..backends import Agent, Survey, refuse_settings
from ..killpoints import KillPoint
from ..schedule import Crash


def schedule_of(token: Any) -> list[Crash]:
    """A token's crashes, each kill point by its index and offset (all a replay needs)."""
    return [Crash(KillPoint(s.index, s.offset, "", f"#{s.index}", ""), s.order)
            for s in token.steps]


class InProcess:
    name = "in-process"

    def refuses(self, agent: Agent, scenario: Any, options: Any, job: str) -> str | None:
        return None  # every job: its options were checked when built, its mode by `choose`

    def explore(self, agent: Agent, scenario: Any, options: Any, *,
                progress: Callable[..., None] | None = None, plan: Callable | None = None,
                settings: Mapping[str, Any] | None = None) -> Any:
        from .explore import explore_in_process

        refuse_settings(settings)
        return explore_in_process(agent.factory_for(scenario), scenario,
                                  options.resolve(scenario),
                                  agent_name=agent.name or agent.spec, progress=progress,
                                  plan=plan)

    def survey(self, agent: Agent, scenario: Any, *,
               timeout: float | str | None = 30.0) -> Survey:
        from .explore import survey

        from ..pipeline.pause import pause_points

        points, states, forecasts = survey(agent.factory_for(scenario), scenario,
                                           agent_name=agent.label, timeout=timeout)
        return Survey(points, {**states, "pause": len(pause_points(points))},
                      forecasts=forecasts)

    def replay(self, token: Any, agent: Agent | None, *,
               timeout: float | str | None = "auto") -> Any:
        from ..settings.loading import factory_for
        from .session import Session

        factory = agent.factory_for(token.scenario) if agent is not None else \
            factory_for(token.agent, token.scenario)
        if token.crash_model == "pause":  # one pause schedule: its point and wake
            from ..scenario import load_scenario
            from .pause import replay_pause

            (step,) = token.steps
            return replay_pause(factory, load_scenario(token.scenario), step.index,
                                step.order, seed=token.seed, timeout=timeout,
                                name=token.agent)
        with Session(factory, token.scenario, crash_model=token.crash_model, seed=token.seed,
                     timeout=timeout, agent_name=token.agent) as session:
            return session.run(schedule_of(token))

    def items(self, agent: Agent, scenario: Any, *, crash_model: str, crashes: int,
              seed: str, timeout: float | str | None) -> Any:
        from .pointwise import PointwiseExplorer

        return PointwiseExplorer(agent.factory_for(scenario), scenario, agent_name=agent.label,
                                 crash_model=crash_model, crashes=crashes, seed=seed,
                                 timeout=timeout)

    def session(self, agent: Agent, scenario: Any, *, crash_model: str, seed: str,
                timeout: float | str | None) -> Any:
        from .session import Session

        return Session(agent.factory_for(scenario), scenario, crash_model=crash_model,
                       seed=seed, timeout=timeout, agent_name=agent.label)

    def formats(self, agent: Agent, scenario: Any, *, seed: str,
                timeout: float | str | None) -> Any:
        from .formats_job import FormatsSandbox

        return FormatsSandbox(agent.factory_for(scenario), scenario, agent_name=agent.name,
                              seed=seed, timeout=timeout)
