"""faultsim: crash-safety testing for long-running AI agents."""
from .agent import AgentEnv, AgentLoadError, Outcome, load_factory
from .explore import NonDeterminismError, explore
from .report import Report
from .runner import RunRecord, ScenarioRun, run_once
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__version__ = "0.1.0"
__all__ = ["AgentEnv", "AgentLoadError", "NonDeterminismError", "Outcome", "Report",
           "RunRecord", "Scenario", "ScenarioError", "ScenarioRun", "explore", "load_factory",
           "load_scenario", "parse_scenario", "run_once"]
