"""faultsim: crash-safety testing for long-running AI agents.

The public API is re-exported here and loaded on first use: pytest loads the faultsim
plugin in every session, and a session that does not use faultsim must not pay for the SDK,
pyfakefs and the engine (PEP 562 lazy attributes).

The folders in pipeline order and the layers that keep them apart: ARCHITECTURE.md at the
repository's root (tests/test_layers.py enforces its table for every module).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_PUBLIC = {
    "AgentEnv": "agent", "AgentLoadError": "settings.loading", "Outcome": "agent",
    "load_factory": "settings.loading", "effect": "effects", "ExploreOptions": "settings.options",
    "NonDeterminismError": "errors", "explore": "inprocess.explore",
    "CATEGORIES": "killpoints", "KillPoint": "killpoints",
    "replay": "replayer",
    "Report": "reports.report",
    "RunRecord": "pipeline.runner", "ScenarioRun": "pipeline.runner", "run_once": "pipeline.runner",
    "Scenario": "scenario", "ScenarioError": "scenario", "load_scenario": "scenario",
    "parse_scenario": "scenario",
    "Crash": "schedule", "Schedule": "schedule", "ScheduleResult": "schedule",
    "Session": "inprocess.session",
    "SearchResult": "inprocess.search", "search": "inprocess.search",
    "ReplayToken": "token", "TokenError": "token",
    "parametrize": "pytest.settings", "FaultsimFixture": "pytest.fixture",
}
__all__ = ['AgentEnv', 'AgentLoadError', 'CATEGORIES', 'Crash', 'ExploreOptions', 'FaultsimFixture', 'KillPoint', 'NonDeterminismError', 'Outcome', 'ReplayToken', 'Report', 'RunRecord', 'Scenario', 'ScenarioError', 'ScenarioRun', 'Schedule', 'ScheduleResult', 'SearchResult', 'Session', 'TokenError', 'effect', 'explore', 'load_factory', 'load_scenario', 'parametrize', 'parse_scenario', 'replay', 'run_once', 'search']


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'faultsim' has no attribute {name!r}")
    # Not cached in this module's globals: a module first imported under a user's pyfakefs
    # Patcher is dropped from sys.modules when it stops (its `os` was the fake one), and a
    # name cached from it here would keep serving that dead patcher's fake filesystem.
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from .agent import AgentEnv, Outcome
    from .effects import effect
    from .settings.loading import AgentLoadError, load_factory
    from .settings.options import ExploreOptions
    from .inprocess.explore import explore
    from .errors import NonDeterminismError
    from .killpoints import CATEGORIES, KillPoint
    from .pytest.fixture import FaultsimFixture
    from .pytest.settings import parametrize
    from .replayer import replay
    from .reports.report import Report
    from .pipeline.runner import RunRecord, ScenarioRun, run_once
    from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario
    from .schedule import Crash, Schedule, ScheduleResult
    from .inprocess.session import Session
    from .inprocess.search import SearchResult, search
    from .token import ReplayToken, TokenError
