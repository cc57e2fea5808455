"""Every error faultsim raises on purpose, in one tree with one base.

    FaultsimError
    ├── UsageError            what was asked cannot work (a scenario, an option, an agent
    │   │                     spec, a token, a corpus): the CLI exits 2, the plugin fails
    │   │                     the test with the one-line message
    │   ├── pytest.settings.FaultsimUsageError  a pytest marker or --faultsim-* option
    │   ├── scenario.ScenarioError         (also ValueError) a scenario file
    │   ├── loading.AgentLoadError         --agent names no importable factory
    │   ├── agent.FactoryError             a factory that cannot take `env`, or makes
    │   │                                  no object with `.run()`
    │   ├── token.TokenError               (also ValueError) a replay token
    │   ├── outfile.OutputError            an output path faultsim cannot write, checked
    │   │                                  before any work
    │   ├── formats.corpus.CorpusError     (also ValueError) a format corpus
    │   ├── StoreNeedsSubprocess           (also ValueError) an SQLite/Redis store in-process
    │   ├── NoDurableState                 the clean run saves nothing (or not where declared)
    │   ├── OverBudget                     the sweep's forecast is over --budget
    │   ├── ScriptMismatch                 the script cannot answer the agent's request
    │   ├── UnreachedService               a scenario service the clean run never reached
    │   ├── SubprocessModeError            (also ValueError) e.g. power loss there
    │   ├── options.OptionError            (also ValueError) a setting out of range
    │   ├── config.ConfigError             a [tool.faultsim] key or FAULTSIM_* variable
    │   └── schedule.NoSuchKillPoint       (also LookupError) a point never reached
    ├── AgentFinding          the agent under test is at fault before any rule is judged:
    │   │                     the CLI exits 1 (like a violation), the plugin fails the test
    │   ├── NonDeterminismError            two clean runs did not do the same things
    │   ├── AgentFailedCleanly             the agent fails without any crash
    │   ├── KillDidNotLand                 a crash run never reached its kill point
    │   │   └── StopCameLate               a pause's stop proven late (retried, never
    │   │                                  judged, never leaves command.pause)
    │   ├── UnroutedEffect                 the clean run reached for an unserved address
    │   ├── UncontainedProcess             the clean run started a process faultsim
    │   │                                  cannot contain, or left one behind
    │   ├── SandboxEscape                  the clean run wrote outside its workdir
    │   └── schedule_search._Counterexample  a searched schedule broke a rule (raised
    │                                      inside hypothesis so it shrinks; never leaves)
    ├── inprocess.fingerprints.Refused the agent's memory cannot be fingerprinted: no
    │                                  convergence cut there (caught where raised)
    └── HarnessError          faultsim's own machinery failed: the CLI exits 3 with one
        │                     line; the plugin lets it through with its traceback
        ├── WorkerDied                     a crash-run worker died without its verdicts
        ├── StopNotPlaced                  every try of a command's pause came late (load)
        ├── cli.output.OutputsFailed       reports not written (a full disk), a line each
        ├── real.pool.ServerFailed         a subprocess-mode fork server died or failed
        └── real.redis_server.RedisUnavailable  (also RuntimeError) no redis-server

Control flow is `BaseException`, so that an agent's `except Exception` cannot swallow it:
`trace.Killed`, `trace.WorldSealed`, `pipeline.incarnation.IncarnationTimeout`,
`cli.Terminated`. The errors of the simulated world (`world.services.ServiceError`,
`model.validate.InvalidRequest`, `world.snapshot.SnapshotError`) are what the agent meets,
not faultsim's, and stay outside the tree.

The errors without a module name are defined here (the pipeline and both backends raise
them) and re-exported where they used to live. Each class keeps the standard base it had
(ValueError, LookupError, RuntimeError) so that existing `except` clauses still catch it.
Standard library only: the bottom layer.
"""
from __future__ import annotations


class FaultsimError(Exception):
    """The base of every error faultsim raises on purpose."""


class UsageError(FaultsimError):
    """What was asked cannot work; the message names what is wrong."""


class AgentFinding(FaultsimError):
    """The agent under test is at fault (found before or outside the oracle's rules)."""


class HarnessError(FaultsimError):
    """faultsim's own machinery failed; the run cannot say what the agent did."""


# What a wrong agent, scenario or request raises: the CLI and the pytest plugin tell it as
# one line, never as a traceback.
KNOWN = (UsageError, AgentFinding)


# The errors below were the engine's; the others live next to the code that raises them
# (their module is named in the tree above) and subclass the bases here.
class StoreNeedsSubprocess(UsageError, ValueError):
    """A scenario whose checkpoints live in SQLite or Redis, given to the in-process mode."""


class SubprocessModeError(UsageError, ValueError):
    """A request subprocess mode cannot honour (named in words), e.g. a power loss."""


# -- findings about the agent ---------------------------------------------------------------
class NonDeterminismError(AgentFinding):
    """Two clean runs of the same agent on the same scenario did not do the same things."""


class AgentFailedCleanly(AgentFinding):
    """The agent fails (or answers wrongly) without any crash."""

    def __init__(self, scenario, error: str, details: str = "") -> None:
        super().__init__(f"{scenario.path}: the agent fails without any crash: {error}")
        self.details = details  # the agent's traceback and output, shown after the line


class NoDurableState(UsageError):
    """The clean run wrote nothing durable, or never the checkpoint its scenario declares."""


class OverBudget(UsageError):
    """The sweep's forecast (pipeline/forecast.py) is over `--budget`: stopped before any
    crash run, naming the coverage that fits, if one does."""


class ScriptMismatch(UsageError):
    """The scenario's script cannot answer what the agent asks (a tool the request does not
    offer, an input the tool's schema refuses, a turn tool_choice forbids)."""


class UnreachedService(UsageError):
    """A scenario service the clean run never reached: nothing about it would be tested."""


class UnroutedEffect(AgentFinding):
    """The clean run reached for a network address faultsim does not serve."""


class UncontainedProcess(AgentFinding):
    """The clean run started a process faultsim cannot contain (refused before it ran), or
    left one running after it ended (subprocess mode)."""
class SandboxEscape(AgentFinding):
    """The clean run wrote outside its workdir (refused, in both modes)."""


class KillDidNotLand(AgentFinding):
    """A kill point of the golden trace was never reached in a crash run."""

    @classmethod
    def never_reached(cls, where: str, met: str, why: str | None) -> "KillDidNotLand":
        """A crash run of real processes that ended (or failed) before its kill point:
        `met`, how far it got; `why`, its error (None: it completed)."""
        return cls(f"{where}: the crash run never reached its kill point (it met {met}; "
                   f"{why or 'it completed'}): the run is not deterministic")


class StopCameLate(KillDidNotLand):
    """A command's pause stop (or the new incarnation's hold) came after its point or did
    not land: that try is never judged, and `command.pause.Driver.attempt` tries again
    with a longer hold."""


# -- harness errors -------------------------------------------------------------------------
class WorkerDied(HarnessError):
    """A forked crash-run worker died without sending its verdicts (killed by a signal, or
    the agent ended the process): the run cannot say what happened at that kill point."""


class StopNotPlaced(HarnessError):
    """Every try of a command's pause schedule ran as the clean run did and only its stop
    came late (StopCameLate, each hold longer): the machine's load, not the agent, so no
    verdict and exit 3, not the agent's finding."""


class ForkFailed(HarnessError):
    """faultsim could not fork the process that dies at a kill point (the machine's limit
    on processes or memory): the agent's run around it went on with a kill it never had,
    so nothing it did after is evidence (not the agent's non-determinism)."""


