"""Replaying a counterexample from its token: exactly its schedule, nothing else, on the
backend that made it (`faultsim.backends`: this module imports no backend)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .schedule import ScheduleResult
from .token import ReplayToken


def replay(token: str | ReplayToken, make_agent: Callable | None = None,
           timeout: float | str | None = "auto", agent: str | None = None) -> ScheduleResult:
    """Re-run the schedule a token names, on the scenario and agent it names (or on
    `make_agent`, e.g. a fixed version of the agent, or on `agent`, an importable spec), and
    judge it, on the backend the token was made with (`faultsim.backends.for_token`). A
    subprocess token replays on real processes, which import the agent themselves: a fix is
    given as `agent`, not as a factory."""
    from .backends import Agent, replay as replay_on_backend

    if isinstance(token, str):
        token = ReplayToken.decode(token)
    check_replayable(token)
    fix = Agent(agent, make_agent) if agent is not None or make_agent is not None else None
    return replay_on_backend(token, fix, timeout=timeout)


def check_replayable(token: ReplayToken) -> None:
    """Refuse, before anything is imported, a token whose scenario file is not here or
    changed since the token was made."""
    if not Path(token.scenario).exists():
        raise FileNotFoundError(f"{token.scenario}: the token's scenario file is not here; "
                                "replay from the directory the report was made in")
    token.check_scenario()
