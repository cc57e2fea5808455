"""One scenario run: a world, a sandbox workdir, and incarnations of the agent in it."""
from __future__ import annotations

import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..agent import AgentEnv, Outcome, outcome_of, run_incarnation
from ..model import sdk
from ..scenario import Scenario
from ..world import World


@dataclass
class RunRecord:
    """What one run produced: the outcome of its last incarnation, and the world."""

    scenario: Scenario
    world: World
    workdir: Path
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome | None:
        return self.outcomes[-1] if self.outcomes else None

    def effects_by_service(self) -> dict[str, int]:
        return {name: len(self.world.ledger.applied(name)) for name in self.world.services}


def make_env(scenario: Scenario, world: World, workdir: Path,
             mark: Callable[..., None] | None = None, *, max_retries: int = 2) -> AgentEnv:
    """What the factory receives for the world's current incarnation."""
    return AgentEnv(workdir=Path(workdir), client=world.model.client(max_retries=max_retries),
                    services=world.services, clock=world.clock, task=scenario.task,
                    task_id=scenario.id, model=scenario.model,
                    incarnation=world.incarnation, mark=mark, world=world,
                    max_turns=scenario.max_turns, follow_ups=scenario.script.follow_ups,
                    async_factory=lambda: world.model.async_client(max_retries=max_retries))


class ScenarioRun:
    """A world plus a workdir. `incarnation()` builds a fresh agent and runs it once.

    Use as a context manager: it freezes process time to the world clock for the whole run
    and removes the temporary workdir afterwards (unless a workdir was given).
    """

    def __init__(self, scenario: Scenario, make_agent: Callable[[AgentEnv], Any], *,
                 workdir: Path | None = None, max_retries: int = 2) -> None:
        self.scenario = scenario
        self.make_agent = make_agent
        self.world = scenario.build_world()
        self.max_retries = max_retries
        self._given_workdir = workdir
        self._stack = ExitStack()
        self.workdir: Path | None = workdir
        self.record: RunRecord | None = None

    def __enter__(self) -> "ScenarioRun":
        # the SDK builds its pydantic models at import: under the frozen clock they would
        # meet freezegun's FakeDatetime and fail (a first run in a fresh interpreter)
        sdk.load()
        if self.workdir is None:
            self.workdir = Path(self._stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"faultsim-{self.scenario.id}-")))
        self._stack.enter_context(self.world.clock.frozen())
        self.record = RunRecord(self.scenario, self.world, self.workdir)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def env(self, mark: Callable[..., None] | None = None) -> AgentEnv:
        return make_env(self.scenario, self.world, self.workdir, mark,
                        max_retries=self.max_retries)

    def incarnation(self, mark: Callable[..., None] | None = None) -> Outcome:
        """One start-or-resume of a fresh agent, to completion or until something raises."""
        self.world.begin_incarnation()
        with self.world.model.serving_new_clients():
            outcome = outcome_of(run_incarnation(self.make_agent, self.env(mark)))
        self.record.outcomes.append(outcome)
        return outcome


def run_once(scenario: Scenario, make_agent: Callable[[AgentEnv], Any]) -> RunRecord:
    """A clean run, no crash: the golden run."""
    with ScenarioRun(scenario, make_agent) as run:
        run.incarnation()
        return run.record
