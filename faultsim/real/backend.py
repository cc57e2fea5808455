"""The subprocess backend behind `faultsim.backends`: every incarnation a real process on
a real directory (`real.explore`), the agent imported by its spec in fork servers of its
own (so it needs a spec, never a factory). Loaded by name (`backends.BACKENDS`).

May import: what `real/` may import; never the in-process backend or pyfakefs."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..backends import (FACTORY_JOBS, Agent, Survey, factory_job_refusal, horizon_refusal,
                        refuse_settings, refused)


class Subprocess:
    name = "subprocess"

    def refuses(self, agent: Agent, scenario: Any, options: Any, job: str) -> str | None:
        if job in FACTORY_JOBS:  # asked only of a backend chosen by hand
            return factory_job_refusal(job, "", "subprocess mode explores whole runs "
                                       "(faultsim run --mode subprocess, or the fixture's "
                                       "check())")
        if agent.spec is None and job in ("explore", "survey"):
            return (f"{scenario.path}: subprocess mode imports the agent by name: give a "
                    "module-level factory or 'module:attr'")
        if job == "explore" and getattr(options, "horizon", None) is not None:
            return horizon_refusal("subprocess mode")
        if job == "explore" and getattr(options, "budget", None) is not None:
            # pipeline/forecast.py is fitted on the in-process sweep only
            return ("--budget: subprocess mode makes no forecast to weigh it against "
                    "(in-process mode only; drop --budget)")
        return None

    def explore(self, agent: Agent, scenario: Any, options: Any, *,
                progress: Callable[..., None] | None = None, plan: Callable | None = None,
                settings: Mapping[str, Any] | None = None) -> Any:
        from .explore import explore_resolved

        refuse_settings(settings)
        return explore_resolved(agent.spec, scenario, options.resolve(scenario),
                                agent_name=agent.name or agent.spec, progress=progress,
                                plan=plan)

    def survey(self, agent: Agent, scenario: Any, *,
               timeout: float | str | None = 30.0) -> Survey:
        from .explore import survey_subprocess

        from ..pipeline.pause import pause_points

        points = survey_subprocess(agent.spec, scenario, timeout=timeout)
        return Survey(points, {"process": len(points), "power": "n/a (subprocess mode)",
                               "pause": len(pause_points(points))})

    def replay(self, token: Any, agent: Agent | None, *,
               timeout: float | str | None = "auto") -> Any:
        from ..errors import UsageError
        from .replay import replay_subprocess

        if agent is not None and agent.spec is None:
            raise UsageError("a subprocess replay token runs the agent in fresh processes: "
                             "name it as an importable spec (agent='MODULE[:ATTR]'), not a "
                             "factory")
        return replay_subprocess(token, agent.spec if agent is not None else None, timeout)

    def items(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "items")

    def session(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "session")

    def formats(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "formats")
