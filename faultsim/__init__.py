"""faultsim: crash-safety testing for long-running AI agents."""
from .agent import AgentEnv, AgentLoadError, Outcome, load_factory
from .explore import NonDeterminismError, explore
from .killpoints import CATEGORIES, KillPoint
from .replay import replay
from .report import Report
from .runner import RunRecord, ScenarioRun, run_once
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from .schedule import Crash, Schedule, ScheduleResult, Session
from .search import SearchResult, search
from .token import ReplayToken, TokenError

__version__ = "0.1.0"
__all__ = ["AgentEnv", "AgentLoadError", "CATEGORIES", "Crash", "KillPoint",
           "NonDeterminismError", "Outcome", "ReplayToken", "Report", "RunRecord", "Scenario",
           "ScenarioError", "ScenarioRun", "Schedule", "ScheduleResult", "SearchResult",
           "Session", "TokenError", "explore", "load_factory", "load_scenario",
           "parse_scenario", "replay", "run_once", "search"]
