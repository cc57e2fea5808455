"""Replaying a counterexample from its token: exactly its schedule, nothing else."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .killpoints import KillPoint
from .schedule import Crash, ScheduleResult
from .session import Session
from .token import ReplayToken


def schedule_of(token: ReplayToken) -> list[Crash]:
    return [Crash(KillPoint(s.index, s.offset, "", f"#{s.index}", ""), s.order)
            for s in token.steps]


def replay(token: str | ReplayToken, make_agent: Callable | None = None,
           timeout: float | str | None = "auto", agent: str | None = None) -> ScheduleResult:
    """Re-run the schedule a token names, on the scenario and agent it names (or on
    `make_agent`, e.g. a fixed version of the agent), and judge it, in the mode the token
    was made in. A subprocess token replays on real processes, which import the agent
    themselves: a fix is given as `agent` (an importable spec), not as a factory."""
    from .loading import CLAUDE_AGENT_SDK, factory_for

    if isinstance(token, str):
        token = ReplayToken.decode(token)
    if not Path(token.scenario).exists():
        raise FileNotFoundError(f"{token.scenario}: the token's scenario file is not here; "
                                "replay from the directory the report was made in")
    token.check_scenario()
    if token.agent.startswith(CLAUDE_AGENT_SDK):
        # the Claude Agent SDK adapter explores on its own processes (and needs its extra)
        from .adapters.claude_agent_sdk.runs import replay as replay_claude

        return replay_claude(token, agent=agent,
                             timeout=60.0 if timeout == "auto" else timeout or 60.0)
    if token.mode == "subprocess":
        from .errors import UsageError
        from .real.replay import replay_subprocess

        if make_agent is not None and agent is None:
            raise UsageError("a subprocess replay token runs the agent in fresh processes: "
                             "name it as an importable spec (agent='MODULE[:ATTR]'), not a "
                             "factory")
        return replay_subprocess(token, agent, timeout)
    factory = make_agent or factory_for(token.agent, token.scenario)
    with Session(factory, token.scenario, crash_model=token.crash_model, seed=token.seed,
                 timeout=timeout, agent_name=token.agent) as session:
        return session.run(schedule_of(token))
