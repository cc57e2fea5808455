"""The one seam between the front ends and the ways an agent runs: the `Backend` Protocol,
the table of backends by dotted name, and `choose`, the one place that picks a backend.

A backend is one way of turning (agent, scenario, settings) into faultsim's report: the
in-process mode (pyfakefs in this process, `faultsim.inprocess.backend`), the subprocess
mode (fork servers on a real directory, `faultsim.real.backend`), the Claude Agent SDK
adapter (the agent's own processes and CLI, `faultsim.adapters.claude_agent_sdk.backend`),
and any later one. The front ends (`faultsim run/list/replay/formats`, the pytest fixture
and marker, `faultsim.explore`) never import a backend: they call `explore`,
`survey`, `replay`, `items`, `session` or `formats` here, which load the chosen backend by its dotted name
(`importlib`, on first use: a backend's heavy imports, pyfakefs or the Claude Agent SDK,
are paid only by the runs that need them). This is pytest-xdist's scheduler Protocol and
httpx's transport seam: the front end holds the table, the backend does the work.

    class Backend(Protocol):
        name: str
        def refuses(self, agent, scenario, options, job) -> str | None
        def explore(self, agent, scenario, options, *, progress, plan, settings) -> Report
        def survey(self, agent, scenario, *, timeout) -> Survey
        def replay(self, token, agent, *, timeout) -> ScheduleResult
        def items(self, agent, scenario, *, crash_model, crashes, seed, timeout) -> Items
        def session(self, agent, scenario, *, crash_model, seed, timeout) -> Session
        def formats(self, agent, scenario, *, seed, timeout) -> FormatsSandbox

The agent is an `Agent`: a spec string (`MODULE[:ATTR]`, `FILE.py[:ATTR]`, or a prefixed
spec such as `langgraph:sync`, `claude-agent-sdk:FILE.py:ATTR`, `cmd:...`), a Python
factory, or both. A backend that runs an agent in processes of its own (the subprocess
mode, the Claude backend, a backend that runs a shell command) works from `agent.spec`
alone and never needs a factory; only the in-process backend calls `agent.factory_for`.

Which backend: a spec whose prefix is in `BY_PREFIX` runs on that backend whatever the
mode asked (a Claude Agent SDK agent always runs its own CLI); any other agent on the mode
`options.mode_for` gives the scenario (the store decides "auto").

May import: `options`, `loading`, `errors`, `killpoints` (the bottom and the contract);
the backends themselves only through `importlib`, by the names in `BACKENDS`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Protocol, Union

from .errors import UsageError
from .settings.options import mode_for

if TYPE_CHECKING:
    from .settings.options import ExploreOptions
    from .pipeline.sweep import Plan
    from .reports.report import Report
    from .scenario import Scenario
    from .schedule import ScheduleResult
    from .token import ReplayToken

# name -> "module:attribute" of a class (or any callable) that makes the backend; one small
# module per variant, imported on first use
BACKENDS = {
    "in-process": "faultsim.inprocess.backend:InProcess",
    "subprocess": "faultsim.real.backend:Subprocess",
    "claude-agent-sdk": "faultsim.adapters.claude_agent_sdk.backend:ClaudeAgentSdk",
    "command": "faultsim.command.backend:Command",
}
# agent-spec prefix -> the backend every agent so named runs on, whatever the mode asked
BY_PREFIX = {
    "claude-agent-sdk:": "claude-agent-sdk",
    "cmd:": "command",
}
# what a front end asks a backend to do ("items": the pytest plugin's kill-point items;
# "session": a Session for hypothesis tests of crash schedules; "formats": the sandbox
# `faultsim formats` records and checks a checkpoint corpus in)
JOBS = ("explore", "survey", "replay", "formats", "items", "session")


@dataclass(frozen=True)
class Agent:
    """The agent a front end names. `spec` is what other processes and replay tokens import
    again (None: a factory without an importable name); `factory` the callable
    (`env -> agent`) when the front end already holds it; `name` what reports call it
    (default: the spec)."""

    spec: str | None = None
    factory: Callable[..., Any] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.spec is None and self.factory is None:
            raise UsageError("no agent: give a factory or an agent spec (MODULE[:ATTR])")

    @property
    def label(self) -> str:
        return self.name or self.spec or getattr(self.factory, "__module__", None) or "agent"

    def factory_for(self, scenario: Any = None) -> Callable[..., Any]:
        """The Python factory: the one given, or the one `spec` names (`loading`)."""
        if self.factory is not None:
            return self.factory
        from .settings.loading import factory_for

        return factory_for(self.spec, scenario)  # type: ignore[arg-type]


@dataclass
class Survey:
    """What `faultsim list` prints for one scenario: the clean run's kill points (each with
    its category), its first crash states per crash model (a count, or words: "n/a
    (subprocess mode)", "about 82"), and, from a backend that describes itself (its budget,
    what it cannot trace), `lines` printed instead of the scenario's own summary."""

    kill_points: list[Any]
    crash_states: dict[str, Any]
    lines: list[str] | None = None
    forecasts: tuple = ()  # the single-crash sweep's, per coverage (pipeline/forecast.py)


class Backend(Protocol):
    """One way of running an agent; faultsim's front ends reach it only through this seam.

    `refuses(agent, scenario, options, job)` is asked before any work, for each job
    ("explore", "survey", "replay"; "items", "session" and "formats" for the front ends
    that run a Python factory in this process: the pytest plugin's kill-point items, its
    sessions, `faultsim formats`). It returns None when the backend can do the
    job, else one line saying why not, written for the person who typed the command
    (`--crashes 2: a Claude Agent SDK agent is explored one crash per run ...`); the front
    end raises it as a usage error (exit 2), naming nothing else. It must be cheap: no run.

    `explore(agent, scenario, options, *, progress, plan, settings)` crashes the agent at
    every kill point of `scenario` that `options` keep (`options.only`, `options.shard`),
    resumes it from each crash state and judges it: faultsim's `Report`, whose
    `ModelRun`s the front ends print, write as JSON/JUnit/HTML and mint replay tokens from
    (a run's `mode` is what a token records). `options` arrive as the front end built them
    (`ExploreOptions`, validated, not resolved): the backend resolves what it honours
    (`options.resolve(scenario)`) and refuses, in `refuses`, what it cannot. `progress`,
    when given, is called as the work goes (`progress(done, total, stage=...)`) and says a
    console is watching; `plan(Plan)` is told the size of the sweep before it starts;
    `settings` holds the front end's backend-specific settings (the CLI's
    `--transcript-writes` as "transcript_writes"), which a backend that knows none of them
    refuses. Lines a backend adds to the console summary go in the last run's `notes`.

    `survey(agent, scenario, *, timeout)` runs the agent clean, crashing nothing: a
    `Survey` for `faultsim list`.

    `replay(token, agent, *, timeout)` re-runs exactly the schedule a `ReplayToken` names
    (its kill points by index, its crash states by order) and judges it: a
    `ScheduleResult`. `agent` is None to replay the token's own agent, or the fixed one.

    `items(agent, scenario, *, crash_model, crashes, seed, timeout)` gives what the pytest
    plugin's kill-point items run, one first crash per item (`explore_point(position)`,
    the in-process `PointwiseExplorer`); `session(agent, scenario, *, crash_model, seed,
    timeout)` a `faultsim.Session` that runs any schedule a hypothesis test draws;
    `formats(agent, scenario, *, seed, timeout)` the sandbox (a context manager, the
    in-process `FormatsSandbox`) that `faultsim formats` records a checkpoint corpus in and
    resumes its recorded states in (faultsim.formats). All three run a Python factory in
    this process; a backend that cannot refuses them in `refuses` ("items", "session",
    "formats"), and its method raises that refusal if called anyway.

    A backend that runs an arbitrary command (an agent as a shell command) implements all
    four from `agent.spec` alone: nothing here asks for a Python factory, an import of the
    agent, or this process's file system.
    """

    name: str

    def refuses(self, agent: Agent, scenario: "Scenario", options: "ExploreOptions",
                job: str) -> str | None: ...

    def explore(self, agent: Agent, scenario: "Scenario", options: "ExploreOptions", *,
                progress: Callable[..., None] | None = None,
                plan: Callable[["Plan"], None] | None = None,
                settings: Mapping[str, Any] | None = None) -> "Report": ...

    def survey(self, agent: Agent, scenario: "Scenario", *,
               timeout: float | str | None = 30.0) -> Survey: ...

    def replay(self, token: "ReplayToken", agent: Agent | None, *,
               timeout: float | str | None = "auto") -> "ScheduleResult": ...

    def items(self, agent: Agent, scenario: "Scenario", *, crash_model: str, crashes: int,
              seed: str, timeout: float | str | None) -> Any: ...

    def session(self, agent: Agent, scenario: "Scenario", *, crash_model: str, seed: str,
                timeout: float | str | None) -> Any: ...

    def formats(self, agent: Agent, scenario: "Scenario", *, seed: str,
                timeout: float | str | None) -> Any: ...


_LOADED: dict[str, Backend] = {}


def backend(name: str) -> Backend:
    """The backend of that name (`BACKENDS`), made once per process."""
    if name not in _LOADED:
        try:
            dotted = BACKENDS[name]
        except KeyError:
            raise UsageError(f"no backend {name!r}; expected one of "
                             f"{', '.join(BACKENDS)}") from None
        module, _, attr = dotted.partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), attr)()
    return _LOADED[name]


def by_prefix(spec: str | None) -> str | None:
    """The backend a prefixed agent spec always runs on (None: the mode decides)."""
    for prefix, name in BY_PREFIX.items():
        if spec is not None and spec.startswith(prefix):
            return name
    return None


def choose(agent: Agent | str | None, scenario: "Scenario", mode: str = "auto") -> Backend:
    """The one choice of backend: by the spec's prefix, else by `mode_for` (the store
    decides "auto"; a mode the scenario cannot honour fails here, naming its file)."""
    spec = agent.spec if isinstance(agent, Agent) else agent
    return backend(by_prefix(spec) or mode_for(scenario, mode))


def for_token(token: "ReplayToken") -> Backend:
    """The backend that made a token: its agent's prefix, else the mode it records."""
    return backend(by_prefix(token.agent) or token.mode)


def refused(backend_: Backend, agent: Agent, scenario: Any, job: str) -> NoReturn:
    """For a backend's method of a job it refuses (`items`, `session`, `formats`): its
    refusal, raised as `check` raises it."""
    from .settings.options import ExploreOptions

    raise UsageError(backend_.refuses(agent, scenario, ExploreOptions(), job)
                     or f"{job}: the {backend_.name} backend does not run it")


def check(backend_: Backend, agent: Agent, scenario: "Scenario", options: Any,
          job: str) -> None:
    """Raise the backend's refusal as a usage error (one line, exit 2)."""
    why = backend_.refuses(agent, scenario, options, job)
    if why:
        raise UsageError(why)


def unclassed_refusal(options: Any, scenario: Any, who: str, hint: str = "") -> str | None:
    """What a backend whose kill points are not classed (faultsim.core.classes) and whose sweep
    is not forecast (pipeline/forecast.py) refuses to explore: representative coverage and
    --budget, in one line naming `who` it explores; None when neither is asked."""
    profile = getattr(scenario, "profile", None)  # None: a check without a scenario
    if getattr(options, "horizon", None) is not None:
        return horizon_refusal(who)
    if (options.coverage or getattr(profile, "coverage", None)) == "representative":
        return (f"--coverage representative: {who} is explored at every kill point (give "
                "--coverage exhaustive)")
    if options.budget is not None:
        return f"--budget: {who} gets no forecast to weigh it against ({hint}drop --budget)"
    return None


def pause_refusal(options: Any, scenario: Any, who: str) -> str | None:
    """The pause crash model, asked of a backend that does not run it (the Claude Agent
    SDK's): one line, never a run that judges nothing and passes."""
    from .core.crashmodel import PAUSE
    from .settings.options import crash_models

    profile = getattr(scenario, "profile", None)
    asked = options.crash_model or getattr(profile, "crash_models", None) or ()
    if PAUSE not in crash_models(asked):
        return None
    return (f"--crash-model pause: {who} is not paused yet (in-process mode "
            "and commands only; give --crash-model process or power)")


def horizon_refusal(who: str) -> str:
    """--horizon cuts a resumed run inside its process (faultsim.inprocess.convergence):
    a backend whose resumed runs are real processes runs each to its end."""
    return (f"--horizon: {who} runs every resumed run to its end (in-process mode only; "
            "drop --horizon)")


def refuse_settings(settings: Mapping[str, Any] | None, known: tuple[str, ...] = ()) -> None:
    """A backend given a front end's setting it does not know refuses it (one line)."""
    for key, value in (settings or {}).items():
        if value is not None and key not in known:
            if key == "transcript_writes":
                raise UsageError("--transcript-writes: only for a Claude Agent SDK agent "
                                 "(--agent claude-agent-sdk:FILE.py:ATTR)")
            raise UsageError(f"{key}: not a setting of this agent's backend")


AgentLike = Union[Agent, str, Callable[..., Any]]


def agent_of(agent: AgentLike, name: str | None = None) -> Agent:
    if isinstance(agent, Agent):
        return agent
    if isinstance(agent, str):
        return Agent(spec=agent, name=name)
    return Agent(factory=agent, name=name)


def explore(agent: AgentLike, scenario: "Scenario", options: "ExploreOptions", *,
            progress: Callable[..., None] | None = None,
            plan: Callable[["Plan"], None] | None = None,
            settings: Mapping[str, Any] | None = None) -> "Report":
    """Explore `agent` on `scenario` with the backend `choose` picks (refusals first)."""
    agent = agent_of(agent)
    chosen = choose(agent, scenario, options.mode)
    check(chosen, agent, scenario, options, "explore")
    return chosen.explore(agent, scenario, options, progress=progress, plan=plan,
                          settings=settings)


def survey(agent: AgentLike, scenario: "Scenario", *, mode: str = "auto",
           timeout: float | str | None = 30.0) -> Survey:
    """`faultsim list` for one scenario, on the backend `choose` picks."""
    from .settings.options import ExploreOptions

    agent = agent_of(agent)
    chosen = choose(agent, scenario, mode)
    check(chosen, agent, scenario, ExploreOptions(mode=mode), "survey")
    return chosen.survey(agent, scenario, timeout=timeout)


def replay(token: "ReplayToken", agent: Agent | None = None, *,
           timeout: float | str | None = "auto") -> "ScheduleResult":
    """Replay a token on the backend that made it."""
    return for_token(token).replay(token, agent, timeout=timeout)


def check_job(agent: AgentLike, scenario: Any, job: str) -> None:
    """For a job that runs an agent's Python factory in this process (`FACTORY_JOBS`): the
    backend a prefixed agent always runs on may refuse it (one line); every other agent is
    a Python factory."""
    from .settings.options import ExploreOptions

    agent = agent_of(agent)
    name = by_prefix(agent.spec)
    if name is not None:
        check(backend(name), agent, scenario, ExploreOptions(), job)


def items(agent: AgentLike, scenario: "Scenario", *, crash_model: str, crashes: int,
          seed: str, timeout: float | str | None) -> Any:
    """The pytest plugin's kill-point items for `agent` on `scenario` (see `Backend`): a
    prefixed agent's own backend refuses them or gives them; any other agent is a Python
    factory, run by the in-process backend."""
    return _in_this_process("items", agent, scenario).items(
        agent_of(agent), scenario, crash_model=crash_model, crashes=crashes, seed=seed,
        timeout=timeout)


def session(agent: AgentLike, scenario: "Scenario", *, crash_model: str, seed: str,
            timeout: float | str | None) -> Any:
    """A `faultsim.Session` for `agent` on `scenario` (see `Backend`; chosen as `items`)."""
    return _in_this_process("session", agent, scenario).session(
        agent_of(agent), scenario, crash_model=crash_model, seed=seed, timeout=timeout)


def formats(agent: AgentLike, scenario: "Scenario", *, seed: str,
            timeout: float | str | None, name: str | None = None) -> Any:
    """The sandbox `faultsim formats` records and checks a corpus in, for `agent` on
    `scenario` (see `Backend`; chosen as `items`); `name` is what its runs call the agent."""
    return _in_this_process("formats", agent, scenario).formats(
        agent_of(agent, name), scenario, seed=seed, timeout=timeout)


# the jobs that run a Python agent factory in this process, as a refusal names them
FACTORY_JOBS = {"items": "kill-point items (kill_points=True, faultsim.parametrize) run",
                "session": "a session (crash_safety.session()) runs",
                "formats": "faultsim formats resumes recorded checkpoints of"}


def factory_job_refusal(job: str, who: str, instead: str) -> str | None:
    """A backend's one line for `items`, `session` and `formats`, which it cannot do (None
    for another job): `who` it explores, and what to do `instead`."""
    if job not in FACTORY_JOBS:
        return None
    return f"{who}{FACTORY_JOBS[job]} a Python agent factory in-process; {instead}"


def _in_this_process(job: str, agent: AgentLike, scenario: Any) -> Backend:
    from .settings.options import ExploreOptions

    agent = agent_of(agent)
    chosen = backend(by_prefix(agent.spec) or "in-process")
    check(chosen, agent, scenario, ExploreOptions(), job)
    return chosen


def python_factory(agent: AgentLike, scenario: Any = None,
                   job: str = "formats") -> Callable[..., Any]:
    """The Python factory `job` runs (see `check_job`), after its backend said it can."""
    agent = agent_of(agent)
    check_job(agent, scenario, job)
    return agent.factory_for(scenario)
