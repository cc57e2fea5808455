"""The reference agent: a loop over `client.messages.create` that does P1–P12 right.

`make_agent(env)` builds one incarnation; `.run()` starts the task or resumes it from the
files under `env.workdir`. `reference_agent.mutants` holds one broken variant per rule.
"""
from .agent import Agent, AgentError, Escalation, RunResult, make_agent
from .checkpoint import (CURRENT_VERSION, Checkpoint, CheckpointError, CheckpointStore,
                         UnknownVersionError)
from .tools import TOOLS, UnknownToolError

__version__ = "0.1.0"
__all__ = ["Agent", "AgentError", "CURRENT_VERSION", "Checkpoint", "CheckpointError",
           "CheckpointStore", "Escalation", "RunResult", "TOOLS", "UnknownToolError",
           "UnknownVersionError", "make_agent"]
